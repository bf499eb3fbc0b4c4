import EntityStore
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct MultiProcessReliabilityTests {
    @Test func aWriterReadersAndAHistoryConsumerWithReadersKilledAlongTheWay() throws {
        let seconds = ProcessInfo.processInfo.environment["ENTITYSTORE_STRESS"] == nil ? 4.0 : 30.0
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

        let helper = ChildProcess.executable("es-test-helper")
        let (writer, _, writerErrors) = try ChildProcess.start(helper, ["bank-saver", path, "1"])
        var readers = try (0..<3).map { _ in
            try ChildProcess.start(helper, ["bank-reader", path, "\(Int(seconds) + 30)"])
        }
        var killed = 0
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            usleep(700_000)
            let victim = killed % readers.count
            kill(readers[victim].0.processIdentifier, SIGKILL)
            readers[victim].0.waitUntilExit()
            readers[victim] = try ChildProcess.start(helper, ["bank-reader", path, "\(Int(seconds) + 30)"])
            killed += 1
        }
        kill(writer.processIdentifier, SIGKILL)
        writer.waitUntilExit()
        let writerStderr = String(decoding: writerErrors.fileHandleForReading.availableData, as: UTF8.self)
        #expect(!writerStderr.contains("MDB_"), "\(writerStderr)")
        for (reader, _, errors) in readers {
            kill(reader.processIdentifier, SIGKILL)
            reader.waitUntilExit()
            let stderr = String(decoding: errors.fileHandleForReading.availableData, as: UTF8.self)
            #expect(
                !stderr.contains("violation") && !stderr.contains("MDB_READERS_FULL")
                    && !stderr.contains("MDB_BAD_RSLOT"), "\(stderr)")
        }
        // The consumer catches up and has seen every transaction once, in order, with no gap.
        let last = try store.lastTransaction()
        let deadline = Date().addingTimeInterval(10)
        while seen.values.last != last && Date() < deadline { usleep(10_000) }
        #expect(seen.values == Array(1...last), "saw \(seen.values.count) of \(last)")
        #expect(last > 20)
        #expect(killed >= 4)
        // Stale reader slots were cleared; the file stayed bounded.
        store.environment.checkReaders()
        #expect(try store.checkIntegrity().findings.isEmpty)
        let size = (try FileManager.default.attributesOfItem(atPath: path + "/data.mdb")[.size] as? Int) ?? 0
        #expect(size < 64 << 20)
        print(
            "several processes: \(last) transactions seen once in order, \(killed) readers killed, data file \(size / 1024) KiB"
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
