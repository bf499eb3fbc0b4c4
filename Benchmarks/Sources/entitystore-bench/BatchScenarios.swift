import CHeapStats
import CSQLite
import EntityStore
import Foundation

/// S9: grouping with aggregates (SQL's `GROUP BY`), batch update and batch delete by predicate (Core Data's NSBatchUpdateRequest and NSBatchDeleteRequest)
/// against SQLite's `UPDATE ... WHERE` and `DELETE ... WHERE`, each one durable transaction.
///
/// The update sets an unindexed attribute of the objects whose indexed score is below 1000 (about a tenth); each
/// repetition deletes another band of a hundred scores (about 1%).
func s9(_ report: Report, _ n: Int) throws {
    let items = (0..<n).map(ItemData.make)
    let esPath = temporaryDirectory("s9-es")
    let store = try PersistentStore.open(path: esPath, schema: benchSchema(), options: .init(mapSize: 1 << 31))
    try store.batchInsert(into: "Item", keys: ItemData.rowKeys, rows: items.map(\.row))
    let sqlitePath = temporaryDirectory("s9-sqlite")
    let sqlite = SQLiteItems(path: sqlitePath + "/db.sqlite")
    sqlite.insert(items)
    let updated = items.count { $0.score < 1000 }
    let updateName = "S9 batch update (\(updated) of \(n))"
    let deleteName = "S9 batch delete (1% of \(n) per run)"
    let update = sqlite.prepare("UPDATE items SET date = ? WHERE score < 1000")
    let delete = sqlite.prepare("DELETE FROM items WHERE score >= ? AND score < ?")
    let below = try FetchPredicate("score < 1000")
    // Grouping first, on the full data: 100 groups of all objects (EntityStore stores the group, id % 100, as an
    // attribute; SQLite's table has no such column and computes it).
    let groupName = "S9 group by (100 groups of \(n))"
    let grouped = sqlite.prepare("SELECT id % 100 AS g, count(*), sum(score), avg(date) FROM items GROUP BY g")
    var aggregate = AggregateRequest(entity: "Item")
    aggregate.groupBy = ["group"]
    aggregate.aggregates = [.count(), .sum("score"), .average("date")]
    for _ in 0..<3 {
        var start = now()
        let profiled = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "group"
        if profiled { entitystore_profile_toggle() }
        consume(try ObjectContext(store: store).aggregate(aggregate).count)
        if profiled { entitystore_profile_toggle() }
        report.record(groupName, "EntityStore", "s", now() - start)
        start = now()
        var groups = 0
        while sqlite3_step(grouped) == SQLITE_ROW { groups += 1 }
        sqlite3_reset(grouped)
        consume(groups)
        report.record(groupName, "SQLite", "s", now() - start)
    }
    sqlite3_finalize(grouped)
    for run in 0..<3 {
        let date = Double(run) + 0.5
        var start = now()
        let result = try store.batchUpdate("Item", where: below, set: ["date": .double(date)])
        report.record(updateName, "EntityStore", "s", now() - start)
        consume(result.count)

        start = now()
        sqlite3_bind_double(update, 1, date)
        sqlite3_step(update)
        sqlite3_reset(update)
        report.record(updateName, "SQLite", "s", now() - start)

        let low = Int64(9000 + run * 100)
        start = now()
        let deleted = try store.batchDelete(
            "Item", where: try FetchPredicate("score >= %d AND score < %d", Int(low), Int(low + 100)))
        report.record(deleteName, "EntityStore", "s", now() - start)
        consume(deleted.count)

        start = now()
        sqlite3_bind_int64(delete, 1, low)
        sqlite3_bind_int64(delete, 2, low + 100)
        sqlite3_step(delete)
        sqlite3_reset(delete)
        report.record(deleteName, "SQLite", "s", now() - start)
    }
    sqlite3_finalize(update)
    sqlite3_finalize(delete)
    for name in [groupName, updateName, deleteName] {
        let es = report.median(name, "EntityStore")
        let lite = report.median(name, "SQLite")
        report.target("S9", "\(name): at least as fast as SQLite", es <= lite, String(format: "%.2fx", lite / es))
    }
    for path in [esPath, sqlitePath] { try? FileManager.default.removeItem(atPath: path) }
}

/// S9 upsert: an import that runs again, against SQLite's `INSERT ... ON CONFLICT (code) DO UPDATE`, each batch one
/// durable transaction. `n` accounts are stored under a unique code; each batch gives a tenth of `n` rows, half of
/// them codes already stored (updated) and half new ones (inserted). Measured, with no target of the issue's.
func s9Upsert(_ report: Report, _ n: Int) throws {
    let schema = try Schema(version: 1) {
        Entity("Account") {
            Attribute("code", .string, unique: true)
            Attribute("score", .int64)
            Attribute("title", .string)
        }
    }
    let esPath = temporaryDirectory("s9u-es")
    let store = try PersistentStore.open(path: esPath, schema: schema, options: .init(mapSize: 1 << 30))
    let sqlitePath = temporaryDirectory("s9u-sqlite")
    let sqlite = SQLiteItems(path: sqlitePath + "/db.sqlite")
    sqlite.exec("CREATE TABLE accounts (id INTEGER PRIMARY KEY, code TEXT UNIQUE, score INTEGER, title TEXT)")
    let code = { (i: Int) in "account-\(i * 7919 % (4 * n))" }
    let title = { (i: Int, run: Int) in "Account \(i) as imported by run \(run)" }
    try store.batchInsert(
        into: "Account", keys: ["code", "score", "title"],
        rows: (0..<n).map { [.string(code($0)), .int(Int64($0)), .string(title($0, 0))] })
    let upsert = sqlite.prepare(
        "INSERT INTO accounts (code, score, title) VALUES (?, ?, ?) "
            + "ON CONFLICT (code) DO UPDATE SET score = excluded.score, title = excluded.title")
    func sqliteRows(_ rows: [(code: String, score: Int64, title: String)]) {
        sqlite.exec("BEGIN")
        for row in rows {
            sqlite3_bind_text(upsert, 1, row.code, -1, sqlite.transient)
            sqlite3_bind_int64(upsert, 2, row.score)
            sqlite3_bind_text(upsert, 3, row.title, -1, sqlite.transient)
            sqlite3_step(upsert)
            sqlite3_reset(upsert)
        }
        sqlite.exec("COMMIT")
    }
    sqliteRows((0..<n).map { (code($0), Int64($0), title($0, 0)) })
    let batch = max(n / 10, 1)
    let name = "S9 upsert (\(batch) rows, half stored, into \(n))"
    for run in 1...3 {
        // Half stored (a band of the first n), half new (beyond them, new in each run).
        let stored = (0..<batch / 2).map { ($0 * 2 + run) % n }
        let fresh = (0..<(batch - batch / 2)).map { n + (run - 1) * batch + $0 }
        let rows = (stored + fresh).map { (code: code($0), score: Int64($0 + run), title: title($0, run)) }
        let values: [[Value]] = rows.map { [.string($0.code), .int($0.score), .string($0.title)] }
        let profiled = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "upsert"
        var start = now()
        if profiled { entitystore_profile_toggle() }
        consume(
            try store.batchInsert(
                into: "Account", keys: ["code", "score", "title"], rows: values, onConflict: .update
            ).count)
        if profiled { entitystore_profile_toggle() }
        report.record(name, "EntityStore", "s", now() - start)
        start = now()
        sqliteRows(rows)
        report.record(name, "SQLite", "s", now() - start)
    }
    sqlite3_finalize(upsert)
    for path in [esPath, sqlitePath] { try? FileManager.default.removeItem(atPath: path) }
}
