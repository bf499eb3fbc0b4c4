import Foundation
import LMDB
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct MultiProcessTests {
    /// LMDB's writer mutex is a robust process-shared mutex; when a writer is killed while others wait for it, the
    /// recovery could leave the remaining waiters asleep on an unlocked mutex for good (1 round in 15 to 30 of this
    /// test before the writer lock; see `WriterLock`). Each round kills one of five writers in mid-stream: the
    /// others must all finish.
    @Test func writersWaitingWhenAnotherIsKilledAllFinish() throws {
        let rounds = TestScale.size(6, stress: 24)
        var stranded: [Int] = []
        var generator = SystemRandomNumberGenerator()
        for round in 0..<rounds {
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let path = dir.path("contended.store")
            let writers = try (0..<5).map { _ in try RunningProcess.helper(["lmdb-counter-writer", path, "400"]) }
            // The victim is killed once it has committed a random number of its transactions, while the others
            // are writing or waiting for the writer mutex.
            try writers[0].waitForLines(Int.random(in: 1...200, using: &generator), "commits") {
                $0.hasPrefix("wrote ")
            }
            writers[0].kill()
            // A stranded writer waits for good: the deadline only tells a hang from a slow machine.
            let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline / 4)
            while writers.dropFirst().contains(where: { $0.process.isRunning }) && Date() < deadline { usleep(20_000) }
            if writers.dropFirst().contains(where: { $0.process.isRunning }) {
                stranded.append(round)
                for writer in writers where writer.process.isRunning { writer.kill() }
            }
            for writer in writers.dropFirst() {
                let output = writer.finish()
                if !stranded.contains(round) {
                    #expect(output.status == 0, "round \(round): \(output.stderr)")
                    #expect(output.stdout.hasSuffix("done 400\n"), "round \(round)")
                }
            }
            _ = writers[0].finish()
        }
        #expect(stranded.isEmpty, "writers left waiting for good in rounds \(stranded)")
    }

    @Test func aSecondProcessWritesWhileThisOneReadsConsistentSnapshots() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("shared.store")
        let env = try Environment.open(path: path)
        let db = try env.openDatabase("numbers")
        let transactions = 300
        let writer = try RunningProcess.helper(["lmdb-counter-writer", path, "\(transactions)"])
        var snapshots = 0
        var lastCounter: UInt64 = 0
        while writer.process.isRunning || snapshots == 0 {
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
        let output = writer.finish()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("done \(transactions)"))
        let final = try env.read { txn in
            try txn.get(b("counter"), in: db).map { $0.loadUnaligned(as: UInt64.self).bigEndian }
        }
        #expect(final == UInt64(transactions))
    }

    /// LMDB 0.9 can hand a read the meta page of a newer commit than its number (two commits by another process
    /// between taking the number and copying the page); the next read then looks older. The environment begins
    /// such a read again. Thousands of commits against a reader that never pauses: no read is older than the one
    /// before it.
    @Test func consecutiveReadsNeverGoBackInTimeWhileAnotherProcessCommits() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("monotonic.store")
        let env = try Environment.open(path: path)
        let db = try env.openDatabase("numbers")
        let transactions = 3000
        let writer = try RunningProcess.helper(["lmdb-counter-writer", path, "\(transactions)"])
        var last: UInt64 = 0
        var reads = 0
        var backwards: [(UInt64, UInt64)] = []
        while writer.process.isRunning || reads == 0 {
            let counter = try env.read { txn in
                try txn.get(b("counter"), in: db).map { $0.loadUnaligned(as: UInt64.self).bigEndian } ?? 0
            }
            if counter < last { backwards.append((last, counter)) }
            last = max(last, counter)
            reads += 1
        }
        let output = writer.finish()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(backwards.isEmpty, "\(backwards.count) of \(reads) reads went back: \(backwards.prefix(5))")
    }

    @Test func twoWriterProcessesGrowTheMapFromOneMebibyteWithoutMapFull() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("grow.store")
        do {
            let env = try Environment.open(path: path, options: .init(mapSize: 1 << 20))
            _ = try env.openDatabase("bulk")
        }
        let writers = try ["a", "b"].map { tag in try RunningProcess.helper(["lmdb-bulk-writer", path, tag, "40"]) }
        for writer in writers {
            let output = writer.finish()
            #expect(output.status == 0, "\(output.stderr)")
            #expect(output.stdout == "done 10240\n")
        }
        let env = try Environment.open(path: path)
        #expect(env.info().mapSize > 64 << 20)
        let db = try env.openDatabase("bulk", create: false)
        #expect(try env.read { try $0.statistics(db).entries } == 2 * 10240)
        let check = try ChildProcess.run("/usr/bin/mdb_stat", ["-s", "bulk", path])
        #expect(check.status == 0)
    }
}
