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
