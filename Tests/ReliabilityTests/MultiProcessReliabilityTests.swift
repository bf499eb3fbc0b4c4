import EntityStore
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct MultiProcessReliabilityTests {
    @Test func aWriterReadersAndAHistoryConsumerWithReadersKilledAlongTheWay() throws {
        // `kills` readers are killed, each after a random number of its reads; the writer after `saves` saves.
        let (kills, saves) = TestScale.size((6, 300), stress: (40, 3_000))
        let dir = try TemporaryDirectory(prefix: "multiprocess-test")
        defer { dir.remove() }
        let path = dir.path("bank.store")
        try Fixtures.makeBank(at: path)
        let store = try PersistentStore.open(path: path, schema: try Fixtures.bankSchema())
        let seen = NumberBox()
        let token = try store.observeCommits(since: 0, onError: { _ in seen.append(0) }) { record in
            seen.append(record.transaction ?? 0)
        }
        defer { token.cancel() }

        let writer = try RunningProcess.helper(["bank-saver", path, "1"])
        var readers = try (0..<3).map { _ in try RunningProcess.helper(["bank-reader", path]) }
        var generator = SystemRandomNumberGenerator()
        var killed: [RunningProcess] = []
        for round in 0..<kills {
            let victim = round % readers.count
            try readers[victim].waitForLines(Int.random(in: 1...20, using: &generator), "reads") {
                $0.hasPrefix("read ")
            }
            readers[victim].kill()
            killed.append(readers[victim])
            readers[victim] = try RunningProcess.helper(["bank-reader", path])
        }
        try writer.waitForLines(saves, "acknowledged saves") { $0.hasPrefix("acked ") }
        writer.kill()
        #expect(!writer.finish().stderr.contains("MDB_"), "\(writer.errorText)")
        for reader in readers { reader.stop() }
        for reader in readers + killed {
            let output = reader.finish()
            #expect(
                !output.stderr.contains("violation") && !output.stderr.contains("MDB_READERS_FULL")
                    && !output.stderr.contains("MDB_BAD_RSLOT"), "\(output.stderr)")
        }
        for reader in readers {
            #expect(reader.process.terminationStatus == 0)
        }
        // The consumer catches up and has seen every transaction once, in order, with no gap.
        let last = try store.lastTransaction()
        let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline)
        while seen.values.last != last && Date() < deadline { usleep(10_000) }
        #expect(seen.values == Array(1...last), "saw \(seen.values.count) of \(last)")
        #expect(last >= UInt64(saves))
        // Stale reader slots were cleared; the file stayed bounded.
        store.environment.checkReaders()
        #expect(try store.checkIntegrity().findings.isEmpty)
        let size = (try FileManager.default.attributesOfItem(atPath: path + "/data.mdb")[.size] as? Int) ?? 0
        #expect(size < 64 << 20)
        print(
            "several processes: \(last) transactions seen once in order, \(killed.count) readers killed, data file \(size / 1024) KiB"
        )
    }
}

final class NumberBox: @unchecked Sendable {
    // @unchecked Sendable: `numbers` is only touched while `lock` is held.
    private let lock = NSLock()
    private var numbers: [UInt64] = []
    func append(_ value: UInt64) { lock.withLock { numbers.append(value) } }
    var values: [UInt64] { lock.withLock { numbers } }
}
