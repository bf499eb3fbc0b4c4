import Foundation
import LMDB
import TestSupport
import Testing

/// Named-database handles under LMDB's rules: opening is serialised in the process, a handle is shared only after
/// its transaction commits, and a transaction uses only handles that existed when it began.
@Suite struct HandleTests {
    /// Creates databases `names`, each holding `name=value-of-name`, and closes the environment, so that the next
    /// open starts with no cached handle.
    static func makeStore(_ path: String, _ names: [String]) throws {
        let env = try Environment.open(path: path, options: .init(sync: .noSync))
        try env.write { txn in
            for name in names {
                let db = try txn.openDatabase(name, create: true)
                try txn.put(b(name), b("value-of-\(name)"), in: db)
            }
        }
    }

    @Test func aHandleFromATransactionThatAbortedCannotReachAnotherDatabase() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("h.store")
        try Self.makeStore(path, ["first", "second"])
        let env = try Environment.open(path: path, options: .init(sync: .noSync))
        struct Abort: Error {}
        var escaped: Database?
        #expect(throws: Abort.self) {
            try env.read { txn in
                escaped = try txn.openDatabase("first")
                throw Abort()
            }
        }
        // LMDB closed the aborted transaction's handle; the next open may take its slot.
        let second = try env.openDatabase("second", create: false)
        let error = lmdbError { try env.write { txn in try txn.put(b("stray"), b("x"), in: escaped!) } }
        #expect(error?.code == .misuse)
        #expect(try entries(env, second) == ["second=value-of-second"])
        let first = try env.openDatabase("first", create: false)
        #expect(try entries(env, first) == ["first=value-of-first"])
    }

    @Test func aHandleReturnedFromItsTransactionHasAPublishedForm() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let env = try Environment.open(path: dir.path("p.store"), options: .init(sync: .noSync))
        let returned = try env.write { txn in
            let db = try txn.openDatabase("made", create: true)
            try txn.put(b("k"), b("v"), in: db)
            return db
        }
        let published = env.published(returned)
        #expect(published != returned, "the returned handle still carries the pending stamp")
        #expect(env.published(published) == published)
        #expect(try entries(env, returned) == ["k=v"], "the returned handle works, through a lookup")
        #expect(try entries(env, published) == ["k=v"])

        // A handle of a transaction that aborted has no published form: it stays refused.
        struct Abort: Error {}
        var escaped: Database?
        #expect(throws: Abort.self) {
            try env.write { txn in
                escaped = try txn.openDatabase("never", create: true)
                throw Abort()
            }
        }
        #expect(env.published(escaped!) == escaped!)
        #expect(lmdbError { try env.read { txn in _ = try txn.get(b("k"), in: escaped!) } }?.code == .misuse)
    }

    @Test func threadsOpeningDifferentDatabasesAtOnceReadTheirOwnData() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let names = (0..<4).map { "db\($0)" }
        for round in 0..<60 {
            let path = dir.path("r\(round).store")
            try Self.makeStore(path, names)
            let env = try Environment.open(path: path, options: .init(sync: .noSync))
            let results = Results()
            let start = Barrier(count: names.count)
            let threads = names.map { name in
                Thread {
                    do {
                        // Every transaction has begun before any opens its database.
                        let value = try env.read { txn in
                            start.wait()
                            return s(try txn.get(b(name), in: try txn.openDatabase(name)))
                        }
                        results.add(name, value ?? "missing")
                    } catch {
                        results.add(name, "error: \(error)")
                    }
                }
            }
            threads.forEach { $0.start() }
            results.waitFor(names.count)
            for name in names { #expect(results.value(name) == "value-of-\(name)", "round \(round)") }
            // Later transactions reach each database through the shared handles.
            for name in names {
                let db = try env.openDatabase(name, create: false)
                #expect(try entries(env, db) == ["\(name)=value-of-\(name)"], "round \(round)")
            }
        }
    }

    @Test func aWriteCreatingADatabaseWhileAReadOpensAnotherCommits() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for round in 0..<60 {
            let path = dir.path("w\(round).store")
            try Self.makeStore(path, ["existing"])
            let env = try Environment.open(path: path, options: .init(sync: .noSync))
            let results = Results()
            let start = Barrier(count: 2)
            Thread {
                do {
                    try env.write { txn in
                        start.wait()
                        try txn.put(b("k"), b("v"), in: try txn.openDatabase("created", create: true))
                    }
                    results.add("write", "ok")
                } catch {
                    results.add("write", "error: \(error)")
                }
            }.start()
            Thread {
                do {
                    let value = try env.read { txn in
                        start.wait()
                        return s(try txn.get(b("existing"), in: try txn.openDatabase("existing")))
                    }
                    results.add("read", value ?? "missing")
                } catch {
                    results.add("read", "error: \(error)")
                }
            }.start()
            results.waitFor(2)
            #expect(results.value("write") == "ok", "round \(round)")
            #expect(results.value("read") == "value-of-existing", "round \(round)")
            let created = try env.openDatabase("created", create: false)
            #expect(try entries(env, created) == ["k=v"], "round \(round): the write was lost")
        }
    }

    @Test func aTransactionCannotUseAHandlePublishedAfterItBegan() throws {
        try withEnvironment { env, _ in
            _ = try env.openDatabase("early")
            let error = lmdbError {
                try env.read { txn in
                    // Another thread publishes a handle while this transaction is open.
                    let late = Results()
                    Thread {
                        let db = try? env.openDatabase("late")
                        results(late, db)
                    }.start()
                    late.waitFor(1)
                    let db = late.database!
                    _ = try txn.get(b("k"), in: db)
                }
            }
            #expect(error?.code == .misuse)
            #expect(error?.message.contains("after this transaction began") == true)
        }
    }

    @Test func aNestedReadGoesOnWhileAnotherThreadWaitsToGrowTheMap() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let env = try Environment.open(path: dir.path("g.store"), options: .init(mapSize: 1 << 20, sync: .noSync))
        let db = try env.openDatabase("bulk")
        try env.write { txn in try txn.put(b("anchor"), b("here"), in: db) }
        let results = Results()
        let outerOpen = Barrier(count: 2)
        Thread {
            do {
                let value = try env.read { outer -> String? in
                    outerOpen.wait()
                    // Give the writer time to fill the map and start waiting for this transaction to end.
                    usleep(200_000)
                    return try env.read { inner in s(try inner.get(b("anchor"), in: db)) }
                }
                results.add("reader", value ?? "missing")
            } catch {
                results.add("reader", "error: \(error)")
            }
        }.start()
        Thread {
            outerOpen.wait()
            do {
                // 8 MiB in one transaction: the 1 MiB map must grow, which waits for every open transaction.
                try env.write { txn in try txn.put(b("big"), [UInt8](repeating: 1, count: 8 << 20), in: db) }
                results.add("writer", "ok")
            } catch {
                results.add("writer", "error: \(error)")
            }
        }.start()
        #expect(results.waitFor(2, timeout: 30), "deadlock: \(results.all)")
        #expect(results.value("reader") == "here")
        #expect(results.value("writer") == "ok")
    }

    @Test func aForkedChildRefusesTheParentsEnvironmentAndOpensItsOwn() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let output = try ChildProcess.helper(["lmdb-fork", dir.path("f.store")])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("child refused the parent's environment"))
        #expect(output.stdout.contains("child read parent-value"))
        #expect(output.stdout.contains("parent has no reader of the child"))
    }
}

private func results(_ box: Results, _ db: Database?) {
    box.database = db
    box.add("db", db == nil ? "nil" : "ok")
}

/// Values reported by test threads, by name.
final class Results: @unchecked Sendable {
    // @unchecked Sendable: `values` and `database` are only touched while `condition` is locked.
    private let condition = NSCondition()
    private var values: [String: String] = [:]
    private var stored: Database?

    var database: Database? {
        get { condition.withLock { stored } }
        set { condition.withLock { stored = newValue } }
    }

    func add(_ name: String, _ value: String) {
        condition.withLock {
            values[name] = value
            condition.broadcast()
        }
    }

    func value(_ name: String) -> String? { condition.withLock { values[name] } }
    var all: [String: String] { condition.withLock { values } }

    /// Waits until `count` values arrived; `false` after `timeout` seconds.
    @discardableResult
    func waitFor(_ count: Int, timeout: Double = 60) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        return condition.withLock {
            while values.count < count {
                if !condition.wait(until: deadline) { return false }
            }
            return true
        }
    }
}

/// Releases its threads together, so that their transactions overlap. Once released it no longer waits (a
/// transaction that runs its closure again passes straight through).
final class Barrier: @unchecked Sendable {
    // @unchecked Sendable: `arrived` is only touched while `condition` is locked.
    private let condition = NSCondition()
    private let count: Int
    private var arrived = 0

    init(count: Int) { self.count = count }

    func wait() {
        condition.withLock {
            guard arrived < count else { return }
            arrived += 1
            if arrived == count { condition.broadcast() }
            while arrived < count { condition.wait() }
        }
    }
}
