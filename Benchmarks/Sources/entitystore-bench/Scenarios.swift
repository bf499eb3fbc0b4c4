import CHeapStats
import CSQLite
import EntityStore
import Foundation
import LMDB

func benchSchema() throws -> Schema {
    try Schema(version: 1) {
        Entity("Item") {
            Attribute("id", .int64)
            Attribute("title", .string)
            Attribute("score", .int64, indexed: true)
            Attribute("date", .double)
            Attribute("blob", .binary)
            Attribute("group", .int64, default: 0, indexed: true)
        }
    }
}

/// Loads `count` items into a new EntityStore store and returns it; `heldBeforeSave` gets the heap the unsaved
/// context holds (measured before the save, from the heap in use before the first insert).
func entityStore(
    _ path: String, _ items: [ItemData], undo: Bool = true, sync: Environment.SyncMode = .durable,
    heldBeforeSave: ((Int) -> Void)? = nil
) throws -> PersistentStore {
    let store = try PersistentStore.open(
        path: path, schema: benchSchema(), options: .init(sync: sync, mapSize: 1 << 30))
    let context = ObjectContext(store: store)
    context.isUndoEnabled = undo
    let baseline = heldBeforeSave == nil ? 0 : heapBytesInUse()
    for item in items { try insert(item, context) }
    heldBeforeSave?(heapBytesInUse() - baseline)
    try context.save()
    return store
}

extension ItemData {
    /// The item as a batch insert's attribute values.
    var values: [String: Value] {
        [
            "id": .int(id), "title": .string(title), "score": .int(score), "date": .double(date), "blob": .data(blob),
            "group": .int(id % 100),
        ]
    }

    /// The item as a row for ``rowKeys``, the schema's order.
    static let rowKeys = ["id", "title", "score", "date", "blob", "group"]
    var row: [Value] { [.int(id), .string(title), .int(score), .double(date), .data(blob), .int(id % 100)] }
}

/// The benchmark item as a typed model (the same entity). Named as its entity, without overriding `entityName`, as
/// most apps' models are: the typed rows measure what such a model pays.
final class Item: Model {
    @Stored var id: Int64
    @Stored var title: String
    @Stored var score: Int64
    @Stored var date: Double
    @Stored var blob: Data
    @Stored var group: Int64
}

/// Loads `items` through the typed API into a new store; `blobs` are the items' blobs as the model's `Data` (made
/// before the clock starts, as the dynamic path's `[UInt8]` blobs are: an app holds its data in its own type).
func typedStore(_ path: String, _ items: [ItemData], blobs: [Data]) throws -> PersistentStore {
    let store = try PersistentStore.open(path: path, schema: benchSchema(), options: .init(mapSize: 1 << 30))
    let context = ObjectContext(store: store)
    for (item, blob) in zip(items, blobs) {
        let object = try context.insert(Item.self)
        object.id = item.id
        object.title = item.title
        object.score = item.score
        object.date = item.date
        object.blob = blob
        object.group = item.id % 100
    }
    try context.save()
    return store
}

func insert(_ item: ItemData, _ context: ObjectContext) throws {
    let object = try context.insert("Item")
    try object.setValue(.int(item.id), forKey: "id")
    try object.setValue(.string(item.title), forKey: "title")
    try object.setValue(.int(item.score), forKey: "score")
    try object.setValue(.double(item.date), forKey: "date")
    try object.setValue(.data(item.blob), forKey: "blob")
    try object.setValue(.int(item.id % 100), forKey: "group")
}

struct Sizes {
    var insert: Int
    var fetch: [Int]
    var query: Int
    var scan: Int
    var controller: Int
    var controllerMemory: Int
    var saves: Int
    var crossProcessSaves: Int
}

/// S1: insert N objects with one index in one save.
func s1(_ report: Report, _ n: Int) throws {
    let items = (0..<n).map(ItemData.make)
    let name = "S1 insert \(n) with one index, one save"
    for repetition in 0..<3 {
        var path = temporaryDirectory("s1-es")
        // S1 runs first: the peak so far is the items' own memory, and its growth is what the context path took.
        let peakBefore = peakResidentBytes()
        var start = now()
        if ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "context" { entitystore_profile_toggle() }
        var held = 0
        _ = try entityStore(path, items, heldBeforeSave: repetition == 0 ? { held = $0 } : nil)
        if ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "context" { entitystore_profile_toggle() }
        report.record(name, "EntityStore context", "s/op", (now() - start) / Double(n))
        if repetition == 0 {
            report.record(
                name + " (peak RSS growth)", "EntityStore context", "MB",
                Double(peakResidentBytes() - peakBefore) / 1e6)
            report.record(name + " (heap before save)", "EntityStore context", "bytes/row", Double(held) / Double(n))
        }
        try? FileManager.default.removeItem(atPath: path)

        path = temporaryDirectory("s1-es-no-undo")
        start = now()
        var heldWithoutUndo = 0
        _ = try entityStore(
            path, items, undo: false, heldBeforeSave: repetition == 0 ? { heldWithoutUndo = $0 } : nil)
        report.record(name, "EntityStore context, undo off", "s/op", (now() - start) / Double(n))
        if repetition == 0 {
            report.record(
                name + " (heap before save)", "EntityStore context, undo off", "bytes/row",
                Double(heldWithoutUndo) / Double(n))
        }
        try? FileManager.default.removeItem(atPath: path)

        path = temporaryDirectory("s1-typed")
        let blobs = items.map { Data($0.blob) }
        start = now()
        if ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "typed" { entitystore_profile_toggle() }
        _ = try typedStore(path, items, blobs: blobs)
        if ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "typed" { entitystore_profile_toggle() }
        report.record(name, "EntityStore typed models", "s/op", (now() - start) / Double(n))
        // The blobs are the app's, as the items are the dynamic path's: released after the clock stops (their last
        // use is the call above, and the optimizer otherwise frees them, a million `Data`, inside the timed span).
        withExtendedLifetime(blobs) {}
        try? FileManager.default.removeItem(atPath: path)

        path = temporaryDirectory("s1-batch")
        start = now()
        let store = try PersistentStore.open(path: path, schema: benchSchema(), options: .init(mapSize: 1 << 30))
        if ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "batch" { entitystore_profile_toggle() }
        try store.batchInsert(into: "Item", objects: items.map(\.values))
        if ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "batch" { entitystore_profile_toggle() }
        report.record(name, "EntityStore batchInsert", "s/op", (now() - start) / Double(n))
        try? FileManager.default.removeItem(atPath: path)

        path = temporaryDirectory("s1-rows")
        start = now()
        let rowStore = try PersistentStore.open(path: path, schema: benchSchema(), options: .init(mapSize: 1 << 30))
        if ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "rows" { entitystore_profile_toggle() }
        try rowStore.batchInsert(into: "Item", keys: ItemData.rowKeys, rows: items.map(\.row))
        if ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "rows" { entitystore_profile_toggle() }
        report.record(name, "EntityStore batchInsert rows", "s/op", (now() - start) / Double(n))
        try? FileManager.default.removeItem(atPath: path)

        path = temporaryDirectory("s1-lmdb")
        start = now()
        try RawSwiftLMDB(path: path).insert(items)
        report.record(name, "raw LMDB (Swift)", "s/op", (now() - start) / Double(n))
        try? FileManager.default.removeItem(atPath: path)

        path = temporaryDirectory("s1-c")
        start = now()
        RawCLMDB(path: path).insert(items)
        report.record(name, "raw LMDB (C)", "s/op", (now() - start) / Double(n))
        try? FileManager.default.removeItem(atPath: path)

        for setup in SQLiteSetup.allCases {
            path = temporaryDirectory("s1-sqlite")
            start = now()
            SQLiteItems(path: path + "/db.sqlite", setup: setup).insert(items)
            report.record(name, setup.system, "s/op", (now() - start) / Double(n))
            try? FileManager.default.removeItem(atPath: path)
        }
    }
    let raw = report.median(name, "raw LMDB (C)")
    let typed = report.median(name, "EntityStore typed models")
    let dynamic = report.median(name, "EntityStore context")
    report.target(
        "S1", "typed models: at most 10% more than the dynamic context path", typed <= 1.1 * dynamic,
        String(format: "%+.0f%%", 100 * (typed / dynamic - 1)))
    // Against the faster SQLite: a context's save at least as fast, the batch paths twice as fast.
    for (path, factor) in [("context", 1.0), ("context, undo off", 1.0), ("batchInsert", 2), ("batchInsert rows", 2)] {
        let es = report.median(name, "EntityStore \(path)")
        report.target(
            "S1", "\(path): at least 50% of raw LMDB's put+index throughput", es <= 2 * raw,
            String(format: "%.0f%%", 100 * raw / es))
        report.targetAgainstSQLite("S1", name, es, factor: factor, path)
    }
}

/// S2: durable saves of one changed object, against raw LMDB's one-put commit and against the same writes an
/// EntityStore save makes (the record, the index entry moved, a history entry) done by hand in C: the first gap is
/// what the storage layout costs, the second what the object layer adds. The same saves without flushing
/// (`MDB_NOSYNC`) separate the CPU a save costs from what the disk costs.
func s2(_ report: Report, _ saves: Int) throws {
    let items = (0..<1000).map(ItemData.make)
    let name = "S2 durable save of one changed object"
    var buffer: [UInt8] = []
    RawRecord.encode(items[7], into: &buffer)
    // About the size of the history entry of one changed score.
    let entry = [UInt8](repeating: 0x5A, count: 96)
    var paths: [String] = []
    defer { for path in paths { try? FileManager.default.removeItem(atPath: path) } }
    let profiled = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "save"
    /// One sync mode's store, context and raw environments.
    final class Side {
        let suffix: String
        let object: ManagedObject
        let context: ObjectContext
        let raw: RawCLMDB
        let floor: RawCLMDB
        /// The score the floor's index holds for the changed item.
        var floorScore: Int64
        init(_ suffix: String, _ object: ManagedObject, _ context: ObjectContext, _ raw: RawCLMDB, _ floor: RawCLMDB) {
            (self.suffix, self.object, self.context, self.raw, self.floor) = (suffix, object, context, raw, floor)
            floorScore = 0
        }
    }
    var sides: [Side] = []
    for (suffix, sync) in [("", Environment.SyncMode.durable), (", no sync", .noSync)] {
        let esPath = temporaryDirectory("s2-es\(sides.count)")
        let rawPath = temporaryDirectory("s2-c\(sides.count)")
        let floorPath = temporaryDirectory("s2-floor\(sides.count)")
        paths += [esPath, rawPath, floorPath]
        let store = try entityStore(esPath, items, sync: sync)
        let context = ObjectContext(store: store)
        let object = try context.fetch(FetchRequest(entity: "Item", predicate: try FetchPredicate("id == 7")))[0]
        let raw = RawCLMDB(path: rawPath, sync: sync)
        raw.insert(items)
        let floor = RawCLMDB(path: floorPath, sync: sync)
        floor.insert(items)
        let side = Side(suffix, object, context, raw, floor)
        side.floorScore = items[7].score
        sides.append(side)
    }
    // SQLite's durable save of the same change: an `UPDATE` of one row in its own transaction, WAL with
    // `synchronous=FULL` (the WAL synced at each commit) in both set-ups.
    let sqlites = SQLiteSetup.allCases.map { setup in
        let path = temporaryDirectory("s2-sqlite-\(setup)")
        paths.append(path)
        let sqlite = SQLiteItems(path: path + "/db.sqlite", setup: setup, durable: true)
        sqlite.insert(items)
        return (sqlite, sqlite.prepare("UPDATE items SET score = ? WHERE id = 7"))
    }
    defer { for (_, update) in sqlites { sqlite3_finalize(update) } }
    var times: [Double] = []
    func record(_ system: String, _ body: (Int) throws -> Void) rethrows {
        times.removeAll(keepingCapacity: true)
        for i in 0..<saves {
            let start = now()
            try body(i)
            times.append(now() - start)
        }
        report.record(name, system, "s/op", times.sorted()[times.count / 2])
    }
    for repetition in 0..<3 {
        for side in sides {
            let toggles = profiled && side.suffix.isEmpty
            try record("EntityStore\(side.suffix)") { i in
                try side.object.setValue(.int(Int64(repetition * saves + i)), forKey: "score")
                if toggles { entitystore_profile_toggle() }
                try side.context.save()
                if toggles { entitystore_profile_toggle() }
            }
            record("raw LMDB (C) one put\(side.suffix)") { _ in side.raw.putOne(7, buffer) }
            record("raw LMDB (C) a save's writes\(side.suffix)") { i in
                let score = Int64(repetition * saves + i)
                side.floor.saveLike(7, record: buffer, oldScore: side.floorScore, score: score, entry: entry)
                side.floorScore = score
            }
        }
        for (sqlite, update) in sqlites {
            record(sqlite.setup.system) { i in
                sqlite3_bind_int64(update, 1, Int64(repetition * saves + i))
                sqlite3_step(update)
                sqlite3_reset(update)
            }
        }
    }
    let es = report.median(name, "EntityStore")
    let rawMedian = report.median(name, "raw LMDB (C) one put")
    let floor = report.median(name, "raw LMDB (C) a save's writes")
    let cpu = report.median(name, "EntityStore, no sync") - report.median(name, "raw LMDB (C) one put, no sync")
    let (lite, liteSystem) = report.fasterSQLite(name)
    report.target(
        "S2", "median at most raw LMDB's one-put commit + 40 µs", es <= rawMedian + 40e-6,
        String(
            format: "+%.1f µs (the save's writes by hand: +%.1f µs; without sync: +%.1f µs", (es - rawMedian) * 1e6,
            (floor - rawMedian) * 1e6, cpu * 1e6) + "; \(liteSystem)'s durable update: "
            + String(format: "%.1f µs)", lite * 1e6))
}

/// S3: fetch by object ID at random (fault in).
func s3(_ report: Report, _ n: Int) throws {
    let items = (0..<n).map(ItemData.make)
    let name = "S3 fetch by ID at random, \(n) objects"
    let esPath = temporaryDirectory("s3-es")
    let store = try entityStore(esPath, items)
    let rawPath = temporaryDirectory("s3-c")
    let raw = RawCLMDB(path: rawPath)
    raw.insert(items)
    let sqlitePath = temporaryDirectory("s3-sqlite")
    let byID = "SELECT id, title, score, date, blob FROM items WHERE id = ?"
    let sqlites = try SQLiteSetup.allCases.map { setup in
        let sqlite = SQLiteItems(path: sqlitePath + "/\(setup).sqlite", setup: setup)
        sqlite.insert(items)
        try sqlite.requirePlan(byID, uses: "INTEGER PRIMARY KEY")
        return (sqlite, sqlite.prepare(byID))
    }
    let lookups = 20_000
    var generator = SystemRandomNumberGenerator()
    let keys = (0..<lookups).map { _ in Int64.random(in: 0..<Int64(n), using: &generator) }
    for _ in 0..<3 {
        var context = ObjectContext(store: store)
        // ES_PROFILE_ONLY=typed profiles the typed loop, anything else the dynamic one.
        let profilesTyped = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "typed"
        var start = now()
        if !profilesTyped { entitystore_profile_toggle() }
        for (i, key) in keys.enumerated() {
            if i % 1000 == 0 { context = ObjectContext(store: store) }
            let object = try context.existingObject(with: ObjectID(entityName: "Item", primaryKey: UInt64(key + 1)))
            if case .int(let score) = try object.value(forKey: "score") { consume(Int(score)) }
        }
        if !profilesTyped { entitystore_profile_toggle() }
        report.record(name, "EntityStore", "s/op", (now() - start) / Double(lookups))

        start = now()
        if profilesTyped { entitystore_profile_toggle() }
        for (i, key) in keys.enumerated() {
            if i % 1000 == 0 { context = ObjectContext(store: store) }
            let item = try context.existingObject(
                Item.self, with: ObjectID(entityName: "Item", primaryKey: UInt64(key + 1)))
            consume(Int(item.score))
        }
        if profilesTyped { entitystore_profile_toggle() }
        report.record(name, "EntityStore typed models", "s/op", (now() - start) / Double(lookups))

        start = now()
        for key in keys { consume(Int(raw.get(key)?.score ?? 0)) }
        report.record(name, "raw LMDB (C) get+decode", "s/op", (now() - start) / Double(lookups))

        for (sqlite, statement) in sqlites {
            start = now()
            for key in keys {
                sqlite3_bind_int64(statement, 1, key)
                consume(Int(sqlite.readRows(statement).first?.score ?? 0))
            }
            report.record(name, sqlite.setup.system, "s/op", (now() - start) / Double(lookups))
        }
    }
    for (_, statement) in sqlites { sqlite3_finalize(statement) }
    let es = report.median(name, "EntityStore")
    let typed = report.median(name, "EntityStore typed models")
    report.target(
        "S3", "\(n): typed models at most 10% more than the dynamic path", typed <= 1.1 * es,
        String(format: "%+.0f%%", 100 * (typed / es - 1)))
    report.target(
        "S3", "\(n): at most 2x raw get + decode", es <= 2 * report.median(name, "raw LMDB (C) get+decode"),
        String(format: "%.2fx", es / report.median(name, "raw LMDB (C) get+decode")))
    report.targetAgainstSQLite("S3", name, es, factor: 2, "\(n)")
    for path in [esPath, rawPath, sqlitePath] { try? FileManager.default.removeItem(atPath: path) }
}

/// S4 and S5: indexed queries sorted on the index, and an unindexed scan.
func s4s5(_ report: Report, queryN: Int, scanN: Int) throws {
    for (n, scenarios) in [(queryN, ["S4"]), (scanN, ["S5"])] where n > 0 {
        let items = (0..<n).map(ItemData.make)
        let esPath = temporaryDirectory("s4-es")
        let store = try entityStore(esPath, items)
        let sqlitePath = temporaryDirectory("s4-sqlite")
        let sqlites = SQLiteSetup.allCases.map { setup in
            let sqlite = SQLiteItems(path: sqlitePath + "/\(setup).sqlite", setup: setup)
            sqlite.insert(items)
            return sqlite
        }
        let transient = sqlites[0].transient
        let rawPath = temporaryDirectory("s5-c")
        let raw = RawCLMDB(path: rawPath)
        if scenarios == ["S5"] { raw.insert(items) }
        // Scores spread over 0..<10000, not evenly: the names give the real number of hits.
        let rangeWidth = max(1, Int64(10_000_000 / n))
        let equalHits = items.count { $0.score == 4242 }
        let rangeHits = items.count { (5000...5000 + rangeWidth).contains($0.score) }
        var cases: [(String, String, String, [PredicateArgument], (OpaquePointer?) -> Void, Int)] = []
        if scenarios == ["S4"] {
            cases = [
                (
                    "S4 indexed equality (\(equalHits) hits), \(n)", "score == %d",
                    "SELECT id, title, score, date, blob FROM items WHERE score = ? ORDER BY score", [4242],
                    { sqlite3_bind_int64($0, 1, 4242) }, 200
                ),
                (
                    "S4 indexed range (\(rangeHits) hits), \(n)", "score BETWEEN {%d, %d}",
                    "SELECT id, title, score, date, blob FROM items WHERE score BETWEEN ? AND ? ORDER BY score",
                    [.value(.int(5000)), .value(.int(5000 + rangeWidth))],
                    {
                        sqlite3_bind_int64($0, 1, 5000); sqlite3_bind_int64($0, 2, 5000 + rangeWidth)
                    }, 20
                ),
            ]
        } else {
            let threshold = 700_000_000 + Double(n) * 0.99
            // A title compared as text: the items' titles are ASCII but for the first 1,000, which end in "…".
            let title = items[n / 2].title
            // A search field's query: a piece of one title, in another case (SQLite's LIKE ignores the case of ASCII
            // letters, as `[c]` does).
            let query = "R \(n / 3) W"
            cases = [
                (
                    "S5 unindexed predicate (1% hits), \(n)", "date >= %f",
                    "SELECT id, title, score, date, blob FROM items WHERE date >= ?", [.value(.double(threshold))],
                    { sqlite3_bind_double($0, 1, threshold) }, 3
                ),
                (
                    "S5 unindexed text equality (1 hit), \(n)", "title == %@",
                    "SELECT id, title, score, date, blob FROM items WHERE title = ?", [.value(.string(title))],
                    { sqlite3_bind_text($0, 1, title, -1, transient) }, 3
                ),
                (
                    "S5 unindexed search, CONTAINS[c] (1 hit), \(n)", "title CONTAINS[c] %@",
                    "SELECT id, title, score, date, blob FROM items WHERE title LIKE ?", [.value(.string(query))],
                    { sqlite3_bind_text($0, 1, "%\(query)%", -1, transient) }, 3
                ),
            ]
        }
        for (name, format, sql, arguments, bind, repeats) in cases {
            var request = FetchRequest(
                entity: "Item", predicate: try FetchPredicate(format: format, arguments: arguments))
            if scenarios == ["S4"] {
                request.sortKeys = [SortKey("score")]
                for sqlite in sqlites { try sqlite.requirePlan(sql, uses: "USING INDEX items_score") }
            }
            let statements = sqlites.map { $0.prepare(sql) }
            var esHits = 0
            var sqliteHits = Array(repeating: 0, count: sqlites.count)
            for _ in 0..<3 {
                var start = now()
                let profiled = name.contains(ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] ?? "")
                if profiled { entitystore_profile_toggle() }
                for _ in 0..<repeats {
                    let context = ObjectContext(store: store)
                    esHits = try context.fetch(request).count
                }
                if profiled { entitystore_profile_toggle() }
                report.record(name, "EntityStore", "s", (now() - start) / Double(repeats))
                for (index, (sqlite, statement)) in zip(sqlites, statements).enumerated() {
                    start = now()
                    for _ in 0..<repeats {
                        bind(statement)
                        sqliteHits[index] = sqlite.readRows(statement).count
                    }
                    report.record(name, sqlite.setup.system, "s", (now() - start) / Double(repeats))
                }
                if name.hasPrefix("S5 unindexed predicate") {
                    start = now()
                    consume(raw.scanDates(atLeast: 700_000_000 + Double(n) * 0.99))
                    report.record(name, "raw LMDB (C) scan", "s", now() - start)
                }
            }
            statements.forEach { sqlite3_finalize($0) }
            guard sqliteHits.allSatisfy({ $0 == esHits }), esHits > 0 else {
                throw BenchFailure("\(name): EntityStore found \(esHits) items, SQLite \(sqliteHits)")
            }
            let es = report.median(name, "EntityStore")
            report.targetAgainstSQLite(scenarios[0], name, es, factor: scenarios == ["S4"] ? 1.3 : 1.25)
        }
        if scenarios == ["S4"] { try s4NewValues(report, n, store, sqlites) }
        try windows(report, scenarios[0], n, store, sqlites)
        if scenarios == ["S5"] { try s5OtherScripts(report, n / 10) }
        for path in [esPath, sqlitePath, rawPath] { try? FileManager.default.removeItem(atPath: path) }
    }
}

/// S4 and S5 through a window: a page of 20 deep in the index's order (S4: offset n/2), and the latest 20 by an
/// unindexed attribute (S5: `date` descending, which grows with the items as an app's dates do). The pages are
/// checked to be the same items on both sides.
func windows(_ report: Report, _ scenario: String, _ n: Int, _ store: PersistentStore, _ sqlites: [SQLiteItems]) throws
{
    var request = FetchRequest(entity: "Item")
    request.fetchLimit = 20
    let name: String
    let sql: String
    if scenario == "S4" {
        name = "S4 a page of 20 at offset n/2 in index order, \(n)"
        request.sortKeys = [SortKey("score")]
        request.fetchOffset = n / 2
        sql = "SELECT id, title, score, date, blob FROM items ORDER BY score LIMIT 20 OFFSET \(n / 2)"
        for sqlite in sqlites { try sqlite.requirePlan(sql, uses: "USING INDEX items_score") }
    } else {
        name = "S5 the latest 20 by an unindexed date, \(n)"
        request.sortKeys = [SortKey("date", ascending: false)]
        sql = "SELECT id, title, score, date, blob FROM items ORDER BY date DESC LIMIT 20"
    }
    let statements = sqlites.map { $0.prepare(sql) }
    defer { statements.forEach { sqlite3_finalize($0) } }
    let repeats = scenario == "S4" ? 10 : 3
    let profiled = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == (scenario == "S4" ? "page" : "latest")
    var esIDs: [Int64] = []
    var sqliteIDs = Array(repeating: [Int64](), count: sqlites.count)
    for _ in 0..<3 {
        var start = now()
        if profiled { entitystore_profile_toggle() }
        for _ in 0..<repeats {
            let objects = try ObjectContext(store: store).fetch(request)
            esIDs = try objects.map { object in
                guard case .int(let id) = try object.value(forKey: "id") else { return -1 }
                return id
            }
        }
        if profiled { entitystore_profile_toggle() }
        report.record(name, "EntityStore", "s", (now() - start) / Double(repeats))
        for (index, (sqlite, statement)) in zip(sqlites, statements).enumerated() {
            start = now()
            for _ in 0..<repeats { sqliteIDs[index] = sqlite.readRows(statement).map(\.id) }
            report.record(name, sqlite.setup.system, "s", (now() - start) / Double(repeats))
        }
    }
    guard esIDs.count == 20, sqliteIDs.allSatisfy({ $0 == esIDs }) else {
        throw BenchFailure(
            "\(name): EntityStore read \(esIDs.prefix(5))..., SQLite \(sqliteIDs.map { $0.prefix(5) })...")
    }
    report.targetAgainstSQLite(scenario, name, report.median(name, "EntityStore"), factor: 1)
}

/// S5 on text in other scripts: items titled in Japanese, Russian and Korean (a third each), one title looked up
/// by `title == %@` without an index (one hit). Such text is compared byte for byte on the record when every scalar
/// of it is its own canonical form and composes with nothing before it (ideographs, kana, Hangul syllables,
/// Cyrillic), as ASCII is.
func s5OtherScripts(_ report: Report, _ n: Int) throws {
    let scripts = ["商品番号 %d の説明テキスト", "Товар номер %d с описанием", "상품 번호 %d 설명 텍스트"]
    let items = (0..<n).map { i in
        var item = ItemData.make(i)
        item.title = String(format: scripts[i % 3], i)
        return item
    }
    let esPath = temporaryDirectory("s5-scripts-es")
    let store = try entityStore(esPath, items)
    let sqlitePath = temporaryDirectory("s5-scripts-sqlite")
    let sqlites = SQLiteSetup.allCases.map { setup in
        let sqlite = SQLiteItems(path: sqlitePath + "/\(setup).sqlite", setup: setup)
        sqlite.insert(items)
        return sqlite
    }
    let name = "S5 unindexed text equality, Japanese, Russian and Korean titles (1 hit), \(n)"
    let title = items[n / 2].title
    let request = FetchRequest(
        entity: "Item", predicate: try FetchPredicate(format: "title == %@", arguments: [.value(.string(title))]))
    let statements = sqlites.map { $0.prepare("SELECT id, title, score, date, blob FROM items WHERE title = ?") }
    for _ in 0..<3 {
        var start = now()
        let profiled = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "scripts"
        if profiled { entitystore_profile_toggle() }
        for _ in 0..<3 { consume(try ObjectContext(store: store).fetch(request).count) }
        if profiled { entitystore_profile_toggle() }
        report.record(name, "EntityStore", "s", (now() - start) / 3)
        for (sqlite, statement) in zip(sqlites, statements) {
            start = now()
            for _ in 0..<3 {
                sqlite3_bind_text(statement, 1, title, -1, sqlite.transient)
                consume(sqlite.readRows(statement).count)
            }
            report.record(name, sqlite.setup.system, "s", (now() - start) / 3)
        }
    }
    statements.forEach { sqlite3_finalize($0) }
    report.targetAgainstSQLite("S5", name, report.median(name, "EntityStore"), factor: 1.25)
    for path in [esPath, sqlitePath] { try? FileManager.default.removeItem(atPath: path) }
}

/// `count` repetitions as blocks of about a tenth of them (at least one each), for sides that alternate.
func blocks(of count: Int) -> [Int] {
    let size = max(1, count / 10)
    return stride(from: 0, to: count, by: size).map { min(size, count - $0) }
}

/// S4, lookups by a new value each time (an app looking up one key after another): each fetch builds its request
/// with another score, through the dynamic builder (`.key("score") == score`) and through the typed API
/// (`\Item.score == score`); SQLite binds it to its prepared statement.
func s4NewValues(_ report: Report, _ n: Int, _ store: PersistentStore, _ sqlites: [SQLiteItems]) throws {
    let name = "S4 indexed equality, a new value each fetch, \(n)"
    let statements = sqlites.map {
        $0.prepare("SELECT id, title, score, date, blob FROM items WHERE score = ? ORDER BY score")
    }
    defer { statements.forEach { sqlite3_finalize($0) } }
    let repeats = 400
    let profiled = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "newvalue"
    let typedProfiled = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"] == "newvalue-typed"
    var esHits = 0
    var typedHits = 0
    var sqliteHits = Array(repeating: 0, count: sqlites.count)
    func dynamicLookups(_ scores: ArraySlice<Int64>) throws -> Double {
        let start = now()
        if profiled { entitystore_profile_toggle() }
        for score in scores {
            let context = ObjectContext(store: store)
            let request = FetchRequest(
                entity: "Item", predicate: .key("score") == .int(score), sortKeys: [SortKey("score")])
            esHits += try context.fetch(request).count
        }
        if profiled { entitystore_profile_toggle() }
        return now() - start
    }
    func typedLookups(_ scores: ArraySlice<Int64>) throws -> Double {
        let start = now()
        if typedProfiled { entitystore_profile_toggle() }
        for score in scores {
            let context = ObjectContext(store: store)
            typedHits += try context.fetch(
                Item.self, where: \Item.score == score, sortedBy: [SortKey(\Item.score)]
            ).count
        }
        if typedProfiled { entitystore_profile_toggle() }
        return now() - start
    }
    for repetition in 0..<3 {
        // The same scores on both sides, spread over the range, none repeated within a repetition.
        let scores = (0..<repeats).map { Int64((($0 + repetition * repeats) * 7919) % 10_000) }
        // Each side reads them once untimed first, so that no timed loop pays for the first touch of the pages.
        for score in scores {
            consume(
                try ObjectContext(store: store).fetch(
                    FetchRequest(entity: "Item", predicate: .key("score") == .int(score))
                ).count)
            for (sqlite, statement) in zip(sqlites, statements) {
                sqlite3_bind_int64(statement, 1, score)
                consume(sqlite.readRows(statement).count)
            }
        }
        // Against SQLite: one loop each, as every other case measures.
        report.record(name, "EntityStore", "s", try dynamicLookups(scores[...]) / Double(repeats))
        for (index, (sqlite, statement)) in zip(sqlites, statements).enumerated() {
            let start = now()
            for score in scores {
                sqlite3_bind_int64(statement, 1, score)
                sqliteHits[index] += sqlite.readRows(statement).count
            }
            report.record(name, sqlite.setup.system, "s", (now() - start) / Double(repeats))
        }
        // Typed against dynamic: in turns over blocks of a tenth of the lookups, each first in every other block.
        // The path that reads a block's records second finds them in the CPU's cache: one loop each, the typed
        // loop second, ran faster than the dynamic one.
        var (paired, typed) = (0.0, 0.0)
        var first = 0
        for (number, block) in blocks(of: repeats).enumerated() {
            let part = scores[first..<(first + block)]
            first += block
            if number % 2 == 0 {
                paired += try dynamicLookups(part)
                typed += try typedLookups(part)
            } else {
                typed += try typedLookups(part)
                paired += try dynamicLookups(part)
            }
        }
        report.record(name, "EntityStore, in turns with typed", "s", paired / Double(repeats))
        report.record(name, "EntityStore typed models", "s", typed / Double(repeats))
    }
    guard sqliteHits.allSatisfy({ esHits == 2 * $0 && typedHits == $0 }) else {
        throw BenchFailure(
            "S4: by new values EntityStore found \(esHits / 2) objects, typed \(typedHits), SQLite \(sqliteHits)")
    }
    let es = report.median(name, "EntityStore")
    let paired = report.median(name, "EntityStore, in turns with typed")
    let typed = report.median(name, "EntityStore typed models")
    report.targetAgainstSQLite(
        "S4", name, es, factor: 1.3,
        name + String(format: " (%.1f hits a fetch)", Double(typedHits) / Double(3 * repeats)))
    report.target(
        "S4", "\(name): typed models at most 10% more than the dynamic path", typed <= 1.1 * paired,
        String(format: "%+.0f%%", 100 * (typed / paired - 1)))
}
