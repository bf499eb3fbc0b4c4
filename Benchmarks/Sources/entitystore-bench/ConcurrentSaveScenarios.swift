import CLMDBRaw
import CSQLite
import EntityStore
import Foundation
import Synchronization

/// S2 under concurrency: the latency of a durable save of one changed object while 1, 4 or 16 savers save at once,
/// each on a thread of its own with its own context (and object), against raw LMDB's one-put commit from as many
/// threads and the expert SQLite's durable `UPDATE` from as many connections. Each commit is its own: the figures
/// show what a save waits for when others queue for the one writer, which commits shared between concurrent saves
/// (group commit) would cut. The mean, not the median: a writer lock is not fair, so one saver often commits
/// several times in a row while the others wait, and the median is one commit's time whatever the queue.
func s2Concurrent(_ report: Report, savesPerSaver: Int) throws {
    let items = (0..<1000).map(ItemData.make)
    var paths: [String] = []
    defer { for path in paths { try? FileManager.default.removeItem(atPath: path) } }
    let esPath = temporaryDirectory("s2c-es")
    let rawPath = temporaryDirectory("s2c-c")
    let sqlitePath = temporaryDirectory("s2c-sqlite")
    paths += [esPath, rawPath, sqlitePath]
    let store = try entityStore(esPath, items)
    let raw = RawCLMDB(path: rawPath)
    raw.insert(items)
    var record: [UInt8] = []
    RawRecord.encode(items[7], into: &record)
    let rawRecord = record
    SQLiteItems(path: sqlitePath + "/db.sqlite", setup: .expert, durable: true).insert(items)
    for repetition in 0..<3 {
        for savers in [1, 4, 16] {
            let name = "S2 durable save, \(savers) concurrent saver" + (savers == 1 ? "" : "s") + " (mean)"
            report.record(
                name, "EntityStore", "s",
                try onThreads(savers, savesPerSaver) { saver, time in
                    let context = ObjectContext(store: store)
                    let id = Int64(saver * 50 + 3)
                    let object = try context.fetch(
                        FetchRequest(entity: "Item", predicate: try FetchPredicate("id == %d", Int(id))))[0]
                    for i in 0..<savesPerSaver {
                        try object.setValue(.int(Int64(repetition * 100_000 + i)), forKey: "score")
                        try time { try context.save() }
                    }
                })
            report.record(
                name, "raw LMDB (C) one put", "s",
                try onThreads(savers, savesPerSaver) { saver, time in
                    for _ in 0..<savesPerSaver { try time { raw.putOne(Int64(saver * 50 + 3), rawRecord) } }
                })
            report.record(
                name, SQLiteSetup.expert.system, "s",
                try onThreads(savers, savesPerSaver) { saver, time in
                    // A connection each, as each EntityStore saver has its context: SQLite serializes the writers,
                    // each waiting its turn through the busy timeout.
                    let sqlite = SQLiteConnection(path: sqlitePath + "/db.sqlite")
                    let update = sqlite.prepare("UPDATE items SET score = ? WHERE id = ?")
                    defer { sqlite3_finalize(update) }
                    for i in 0..<savesPerSaver {
                        try time {
                            sqlite3_bind_int64(update, 1, Int64(repetition * 100_000 + i))
                            sqlite3_bind_int64(update, 2, Int64(saver * 50 + 3))
                            let status = sqlite3_step(update)
                            sqlite3_reset(update)
                            guard status == SQLITE_DONE else { throw BenchFailure("S2: SQLite's update: \(status)") }
                        }
                    }
                })
        }
    }
    let single = report.median("S2 durable save, 1 concurrent saver (mean)", "EntityStore")
    let sixteen = report.median("S2 durable save, 16 concurrent savers (mean)", "EntityStore")
    report.target(
        "S2", "a save's mean latency under 16 concurrent savers (measured, no target)", true,
        String(format: "%.0f µs, %.1fx one saver's", sixteen * 1e6, sixteen / single))
}

/// A connection to an expert-configured SQLite database made by ``SQLiteItems``, for a thread of its own.
final class SQLiteConnection {
    var db: OpaquePointer?

    init(path: String) {
        sqlite3_open(path, &db)
        for pragma in ["journal_mode=WAL", "synchronous=FULL", "cache_size=-262144", "mmap_size=1073741824"] {
            sqlite3_exec(db, "PRAGMA " + pragma, nil, nil, nil)
        }
        sqlite3_busy_timeout(db, 60_000)
    }

    deinit { sqlite3_close(db) }

    func prepare(_ sql: String) -> OpaquePointer? {
        var statement: OpaquePointer?
        sqlite3_prepare_v2(db, sql, -1, &statement, nil)
        return statement
    }
}

/// Runs `body` on `threads` threads at once (each given its number and a timer of one operation) and returns the
/// mean of the operations' times; the first error any thread throws is thrown.
func onThreads(
    _ threads: Int, _ operations: Int,
    _ body: @escaping @Sendable (Int, (() throws -> Void) throws -> Void) throws -> Void
) throws -> Double {
    let times = Mutex<[Double]>([])
    let failure = Mutex<String?>(nil)
    let done = DispatchGroup()
    let start = DispatchSemaphore(value: 0)
    for number in 0..<threads {
        done.enter()
        let thread = Thread {
            defer { done.leave() }
            start.wait()
            do {
                var own: [Double] = []
                own.reserveCapacity(operations)
                try body(number) { operation in
                    let began = now()
                    try operation()
                    own.append(now() - began)
                }
                times.withLock { $0 += own }
            } catch {
                failure.withLock { $0 = $0 ?? "\(error)" }
            }
        }
        thread.start()
    }
    for _ in 0..<threads { start.signal() }
    done.wait()
    if let message = failure.withLock({ $0 }) { throw BenchFailure("a concurrent saver failed: \(message)") }
    let all = times.withLock { $0 }
    return all.reduce(0, +) / Double(all.count)
}

/// `putOne` from several threads: each call is its own write transaction, which LMDB serializes (`MDB_NOTLS`).
extension RawCLMDB: @unchecked Sendable {}
