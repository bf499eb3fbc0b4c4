import EntityStore
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// How many kill trials: at least 100 in `make test`, 1,000 under `make stress` (ENTITYSTORE_STRESS=1).
let crashTrials = ProcessInfo.processInfo.environment["ENTITYSTORE_STRESS"] == nil ? 100 : 1000

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
        for trial in 0..<crashTrials {
            let (process, out, _) = try ChildProcess.start(
                ChildProcess.executable("es-test-helper"), ["bank-saver", path, "\(serial)"])
            // The kill comes at a random moment of the saving, counted from the store's opening: counted from the
            // start, a slow start of the process (a loaded machine) left too little of the window for saves.
            var output = Data()
            while !String(decoding: output, as: UTF8.self).contains("ready\n") {
                let chunk = out.fileHandleForReading.availableData
                if chunk.isEmpty { break }  // the child ended early; the checks below report it
                output.append(chunk)
            }
            usleep(UInt32.random(in: 0...50_000, using: &generator))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            if process.terminationReason == .uncaughtSignal { killsMidRun += 1 }
            output.append(out.fileHandleForReading.readDataToEndOfFile())
            let acks = String(decoding: output, as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix("acked ") }
            acknowledged += acks.count
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
        #expect(acknowledged > crashTrials)  // the children really were saving when killed
        print("crash atomicity: \(crashTrials) kills, \(acknowledged) acknowledged saves, all present, no partial save")
    }
}
