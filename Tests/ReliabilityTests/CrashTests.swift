import EntityStore
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// How many kill trials: 100 in `make test`, 1,000 under `make stress` (ENTITYSTORE_STRESS=1).
let crashTrials = TestScale.size(100, stress: 1000)

@Suite struct CrashTests {
    @Test func aSaveKilledAtARandomMomentIsAllOrNothingAndEveryAcknowledgedSaveSurvives() throws {
        let dir = try TemporaryDirectory(prefix: "crash-test")
        defer { dir.remove() }
        let path = dir.path("bank.store")
        try Fixtures.makeBank(at: path)
        var acknowledged = 0
        var serial: Int64 = 1
        var generator = SystemRandomNumberGenerator()
        var killsMidRun = 0
        var awaited = 0
        for trial in 0..<crashTrials {
            let saver = try RunningProcess.helper(["bank-saver", path, "\(serial)"])
            // The kill waits for the saver to acknowledge a few saves (so it really is saving, however slow the
            // machine), then comes at a random moment of the saves that follow.
            try saver.waitForLine("ready")
            let acks = Int.random(in: 1...3, using: &generator)
            try saver.waitForLines(acks, "acknowledged saves") { $0.hasPrefix("acked ") }
            awaited += acks
            usleep(UInt32.random(in: 0...3_000, using: &generator))
            saver.kill()
            let output = saver.finish()
            if output.terminationReason == .uncaughtSignal { killsMidRun += 1 }
            acknowledged += output.stdout.split(separator: "\n").filter { $0.hasPrefix("acked ") }.count
            let store = try PersistentStore.open(path: path, schema: try Fixtures.bankSchema())
            let (total, transfers) = try Fixtures.bankState(store)
            // Every acknowledged save is there; at most one more per trial (committed, killed before its ack).
            #expect(transfers >= acknowledged, "trial \(trial)")
            #expect(transfers <= acknowledged + trial + 1, "trial \(trial)")
            // No save is partial: the balances still sum to the total.
            #expect(total == Fixtures.bankTotal, "trial \(trial)")
            let (findings, _) = try store.checkIntegrity()
            #expect(findings.isEmpty, "trial \(trial): \(findings.prefix(3))")
            serial = Int64(transfers) + 1 + Int64(trial + 1) * 100_000
        }
        #expect(killsMidRun == crashTrials)
        #expect(acknowledged >= awaited)  // the children really were saving when killed
        print("crash atomicity: \(crashTrials) kills, \(acknowledged) acknowledged saves, all present, no partial save")
    }
}
