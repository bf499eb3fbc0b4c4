import Foundation
import LMDB
import TestSupport
import Testing

@Suite struct MultiProcessTests {
    @Test func aSecondProcessWritesWhileThisOneReadsConsistentSnapshots() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.store")
        let env = try Environment.open(path: path)
        let db = try env.openDatabase("numbers")
        let transactions = 300
        let (process, out, err) = try ChildProcess.start(
            ChildProcess.executable("es-test-helper"), ["lmdb-counter-writer", path, "\(transactions)"])
        var snapshots = 0
        var lastCounter: UInt64 = 0
        while process.isRunning || snapshots == 0 {
            // In every snapshot the counter equals the number of keys written: a writer's transaction is atomic.
            let (counter, keys) = try env.read { txn -> (UInt64, Int) in
                let counter = try txn.get(b("counter"), in: db).map { $0.loadUnaligned(as: UInt64.self).bigEndian }
                return (counter ?? 0, try txn.statistics(db).entries - (counter == nil ? 0 : 1))
            }
            #expect(counter == UInt64(keys))
            #expect(counter >= lastCounter)
            lastCounter = counter
            snapshots += 1
        }
        process.waitUntilExit()
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let stdout = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 0, "\(stderr)")
        #expect(stdout.contains("done \(transactions)"))
        let final = try env.read { txn in
            try txn.get(b("counter"), in: db).map { $0.loadUnaligned(as: UInt64.self).bigEndian }
        }
        #expect(final == UInt64(transactions))
    }

    @Test func twoWriterProcessesGrowTheMapFromOneMebibyteWithoutMapFull() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("grow.store")
        do {
            let env = try Environment.open(path: path, options: .init(mapSize: 1 << 20))
            _ = try env.openDatabase("bulk")
        }
        let writers = try ["a", "b"].map { tag in
            try ChildProcess.start(
                ChildProcess.executable("es-test-helper"), ["lmdb-bulk-writer", path, tag, "40"])
        }
        for (process, out, err) in writers {
            process.waitUntilExit()
            let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(process.terminationStatus == 0, "\(stderr)")
            #expect(String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) == "done 10240\n")
        }
        let env = try Environment.open(path: path)
        #expect(env.info().mapSize > 64 << 20)
        let db = try env.openDatabase("bulk", create: false)
        #expect(try env.read { try $0.statistics(db).entries } == 2 * 10240)
        let check = try ChildProcess.run("/usr/bin/mdb_stat", ["-s", "bulk", path])
        #expect(check.status == 0)
    }
}
