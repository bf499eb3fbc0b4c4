import Foundation
import LMDB
import TestSupport
import Testing

/// Reads renew reset read transactions kept by the environment instead of beginning new ones.
@Suite struct IdleReadTests {
    @Test func renewedReadsSeeEveryCommitAndKeepNoSnapshot() throws {
        try withEnvironment(options: .init(mapSize: 1 << 20, sync: .noSync)) { env, _ in
            let db = try env.openDatabase("counter")
            let me = getpid()
            // Readers on four threads, while the main thread commits 200 increments: each read that starts after a
            // commit returned sees it (a renewed transaction takes the newest snapshot, as a begun one does).
            let committed = Atomic(0)
            let failures = Locked<[String]>([])
            let done = Atomic(false)
            let finished = DispatchSemaphore(value: 0)
            let threads = (0..<4).map { _ in
                Thread {
                    defer { finished.signal() }
                    while !done.load() {
                        let floor = committed.load()
                        do {
                            let seen = try env.read { txn in
                                try txn.get(b("n"), in: db).map { Int(String(decoding: $0, as: UTF8.self))! } ?? 0
                            }
                            if seen < floor { failures.withLock { $0.append("read \(seen) after \(floor)") } }
                        } catch {
                            failures.withLock { $0.append("\(error)") }
                        }
                    }
                }
            }
            for thread in threads { thread.start() }
            for n in 1...200 {
                try env.write { txn in try txn.put(b("n"), b(String(n)), in: db) }
                committed.store(n)
            }
            done.store(true)
            for _ in threads { finished.wait() }
            #expect(failures.withLock { $0 }.isEmpty)

            // Idle transactions keep reader slots (at most four), holding no snapshot: nothing pins old pages.
            let mine = env.readers().filter { $0.processID == me }
            #expect(mine.count <= 4, "\(mine)")
            #expect(mine.allSatisfy { $0.transactionID == nil }, "\(mine)")
            // So the map can still grow: 8 MiB in one write into a 1 MiB map aborts the idle ones and resizes.
            try env.write { txn in try txn.put(b("big"), [UInt8](repeating: 1, count: 8 << 20), in: db) }
            #expect(try env.read { txn in try txn.get(b("n"), in: db).map { Array($0) } } == b("200"))
        }
    }
}

/// A value shared across test threads.
final class Atomic<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `value` is only touched while `lock` is held.
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func load() -> Value { lock.withLock { value } }
    func store(_ newValue: Value) { lock.withLock { value = newValue } }
}
