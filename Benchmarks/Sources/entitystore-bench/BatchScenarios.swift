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
    let sqlites = SQLiteSetup.allCases.map { setup in
        let sqlite = SQLiteItems(path: sqlitePath + "/\(setup).sqlite", setup: setup)
        sqlite.insert(items)
        return sqlite
    }
    let updated = items.count { $0.score < 1000 }
    let updateName = "S9 batch update (\(updated) of \(n))"
    let deleteName = "S9 batch delete (1% of \(n) per run)"
    let updates = sqlites.map { $0.prepare("UPDATE items SET date = ? WHERE score < 1000") }
    let deleteBand = "DELETE FROM items WHERE score >= ? AND score < ?"
    for sqlite in sqlites { try sqlite.requirePlan(deleteBand, uses: "USING INDEX items_score") }
    let deletes = sqlites.map { $0.prepare(deleteBand) }
    let below = try FetchPredicate("score < 1000")
    // Grouping first, on the full data: 100 groups of all objects (EntityStore stores the group, id % 100, as an
    // attribute; SQLite's table has no such column and computes it).
    let groupName = "S9 group by (100 groups of \(n))"
    let groupings = sqlites.map {
        $0.prepare("SELECT id % 100 AS g, count(*), sum(score), avg(date) FROM items GROUP BY g")
    }
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
        for (sqlite, grouped) in zip(sqlites, groupings) {
            start = now()
            var groups = 0
            while sqlite3_step(grouped) == SQLITE_ROW { groups += 1 }
            sqlite3_reset(grouped)
            consume(groups)
            report.record(groupName, sqlite.setup.system, "s", now() - start)
        }
    }
    groupings.forEach { sqlite3_finalize($0) }
    for run in 0..<3 {
        let date = Double(run) + 0.5
        var start = now()
        let result = try store.batchUpdate("Item", where: below, set: ["date": .double(date)])
        report.record(updateName, "EntityStore", "s", now() - start)
        consume(result.count)

        for (sqlite, update) in zip(sqlites, updates) {
            start = now()
            sqlite3_bind_double(update, 1, date)
            sqlite3_step(update)
            sqlite3_reset(update)
            report.record(updateName, sqlite.setup.system, "s", now() - start)
        }

        let low = Int64(9000 + run * 100)
        start = now()
        let deleted = try store.batchDelete(
            "Item", where: try FetchPredicate("score >= %d AND score < %d", Int(low), Int(low + 100)))
        report.record(deleteName, "EntityStore", "s", now() - start)
        consume(deleted.count)

        for (sqlite, delete) in zip(sqlites, deletes) {
            start = now()
            sqlite3_bind_int64(delete, 1, low)
            sqlite3_bind_int64(delete, 2, low + 100)
            sqlite3_step(delete)
            sqlite3_reset(delete)
            report.record(deleteName, sqlite.setup.system, "s", now() - start)
        }
    }
    (updates + deletes).forEach { sqlite3_finalize($0) }
    for name in [groupName, updateName, deleteName] {
        report.targetAgainstSQLite("S9", name, report.median(name, "EntityStore"), factor: 1)
    }
    for path in [esPath, sqlitePath] { try? FileManager.default.removeItem(atPath: path) }
}

/// S9 upsert: an import that runs again, against SQLite's `INSERT ... ON CONFLICT (code) DO UPDATE`, each batch one
/// durable transaction. `n` accounts are stored under a unique code; each batch gives a tenth of `n` rows, half of
/// them codes already stored (updated) and half new ones (inserted).
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
    let sqlites = SQLiteSetup.allCases.map { setup in
        let sqlite = SQLiteItems(path: sqlitePath + "/\(setup).sqlite", setup: setup)
        sqlite.exec("CREATE TABLE accounts (id INTEGER PRIMARY KEY, code TEXT UNIQUE, score INTEGER, title TEXT)")
        return sqlite
    }
    let code = { (i: Int) in "account-\(i * 7919 % (4 * n))" }
    let title = { (i: Int, run: Int) in "Account \(i) as imported by run \(run)" }
    try store.batchInsert(
        into: "Account", keys: ["code", "score", "title"],
        rows: (0..<n).map { [.string(code($0)), .int(Int64($0)), .string(title($0, 0))] })
    let upserts = sqlites.map {
        $0.prepare(
            "INSERT INTO accounts (code, score, title) VALUES (?, ?, ?) "
                + "ON CONFLICT (code) DO UPDATE SET score = excluded.score, title = excluded.title")
    }
    func sqliteRows(_ index: Int, _ rows: [(code: String, score: Int64, title: String)]) {
        let (sqlite, upsert) = (sqlites[index], upserts[index])
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
    for index in sqlites.indices { sqliteRows(index, (0..<n).map { (code($0), Int64($0), title($0, 0)) }) }
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
        for index in sqlites.indices {
            start = now()
            sqliteRows(index, rows)
            report.record(name, sqlites[index].setup.system, "s", now() - start)
        }
    }
    upserts.forEach { sqlite3_finalize($0) }
    report.targetAgainstSQLite("S9", name, report.median(name, "EntityStore"), factor: 1)
    for path in [esPath, sqlitePath] { try? FileManager.default.removeItem(atPath: path) }
}
