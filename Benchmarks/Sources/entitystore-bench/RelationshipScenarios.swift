import CHeapStats
import CSQLite
import EntityStore
import Foundation

/// Folders holding notes: a to-many `notes` and its inverse to-one `folder`, the notes cascaded with their folder.
func relationshipSchema() throws -> Schema {
    try Schema(version: 1) {
        Entity("Folder") {
            Attribute("name", .string)
            Relationship("notes", to: "Note", inverse: "folder", toMany: true, deleteRule: .cascade)
        }
        Entity("Note") {
            Attribute("title", .string)
            Attribute("score", .int64)
            Relationship("folder", to: "Folder", inverse: "notes")
        }
    }
}

/// The folder as a typed model (the same entity as `relationshipSchema()`'s).
final class Folder: Model {
    @Stored var name: String
    @ToMany(inverse: "folder", deleteRule: .cascade) var notes: [Note]
}

/// The note as a typed model.
final class Note: Model {
    @Stored var title: String
    @Stored var score: Int64
    @ToOne(inverse: "notes") var folder: Folder?
}

/// The title of note `i`, about 40 bytes.
func noteTitle(_ i: Int) -> String {
    "Note number \(i) of a folder, forty bytes".padding(toLength: 40, withPad: "x", startingAt: 0)
}

/// Inserts `folders` folders of `perFolder` notes through one context, each note linked to its folder as it is made
/// (note `i` titled `titles[i]`, scored `i`), in one save; returns the folders' IDs.
func insertLinkedNotes(
    _ store: PersistentStore, folders: Int, perFolder: Int, titles: [String]
) throws -> [ObjectID] {
    let context = ObjectContext(store: store)
    var folderIDs: [ObjectID] = []
    for f in 0..<folders {
        let folder = try context.insert("Folder")
        try folder.setValue(.string("Folder \(f)"), forKey: "name")
        folderIDs.append(folder.objectID)
        for i in (f * perFolder)..<((f + 1) * perFolder) {
            let note = try context.insert("Note")
            try note.setValue(.string(titles[i]), forKey: "title")
            try note.setValue(.int(Int64(i)), forKey: "score")
            try note.setObject(folder, forKey: "folder")
        }
    }
    try context.save()
    return folderIDs
}

/// The same rows in a new SQLite database in `directory`: `notes.folder_id` indexed (before the load, or after it
/// for an expert set-up), folder `f` keyed `f + 1`, one transaction of prepared inserts.
func insertLinkedNotes(
    _ directory: String, _ setup: SQLiteSetup, folders: Int, perFolder: Int, titles: [String]
) -> SQLiteItems {
    let sqlite = SQLiteItems(path: directory + "/\(setup).sqlite", setup: setup)
    sqlite.exec("CREATE TABLE folders (id INTEGER PRIMARY KEY, name TEXT)")
    sqlite.exec(
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT, score INTEGER, folder_id INTEGER REFERENCES folders(id))"
    )
    if setup == .defaults { sqlite.exec("CREATE INDEX notes_folder ON notes(folder_id)") }
    sqlite.load(index: "notes_folder ON notes(folder_id)") {
        insertRows(sqlite, folders: folders, perFolder: perFolder, titles: titles)
    }
    return sqlite
}

/// The prepared inserts of ``insertLinkedNotes(_:_:folders:perFolder:titles:)``.
private func insertRows(_ sqlite: SQLiteItems, folders: Int, perFolder: Int, titles: [String]) {
    let insertFolder = sqlite.prepare("INSERT INTO folders (id, name) VALUES (?, ?)")
    let insertNote = sqlite.prepare("INSERT INTO notes (id, title, score, folder_id) VALUES (?, ?, ?, ?)")
    for f in 0..<folders {
        sqlite3_bind_int64(insertFolder, 1, Int64(f + 1))
        sqlite3_bind_text(insertFolder, 2, "Folder \(f)", -1, sqlite.transient)
        sqlite3_step(insertFolder)
        sqlite3_reset(insertFolder)
        for i in (f * perFolder)..<((f + 1) * perFolder) {
            sqlite3_bind_int64(insertNote, 1, Int64(i + 1))
            sqlite3_bind_text(insertNote, 2, titles[i], -1, sqlite.transient)
            sqlite3_bind_int64(insertNote, 3, Int64(i))
            sqlite3_bind_int64(insertNote, 4, Int64(f + 1))
            sqlite3_step(insertNote)
            sqlite3_reset(insertNote)
        }
    }
    sqlite3_finalize(insertFolder)
    sqlite3_finalize(insertNote)
}

/// S11, one big to-many: `n` new notes linked one by one to a single folder through a context (undo on, as by
/// default), one save; SQLite inserts the rows with the folder's key. Each link is its own undo group, which must
/// cost the same whatever the folder holds already.
func s11OneFolder(_ report: Report, _ n: Int, adds: Int) throws {
    let name = "S11 insert \(n) notes into one folder, linked, one save"
    let addName = "S11 add a note to a folder of \(n), durable save"
    let small = 200
    let titles = (0..<n).map(noteTitle)
    var paths: [String] = []
    defer { for path in paths { try? FileManager.default.removeItem(atPath: path) } }
    /// `adds` notes added one at a time to the folder of `store`, each a durable save, through a context that has
    /// loaded the folder's notes (as a screen listing them has): the median save.
    func addNotes(_ store: PersistentStore, holding count: Int) throws -> Double {
        let context = ObjectContext(store: store)
        let folder = try context.fetch(FetchRequest(entity: "Folder"))[0]
        guard try folder.objectIDs(forKey: "notes").count == count else {
            throw BenchFailure("S11: the folder does not hold its \(count) notes")
        }
        var times: [Double] = []
        for i in 0..<adds {
            let start = now()
            let note = try context.insert("Note")
            try note.setValue(.string("added \(i)"), forKey: "title")
            try note.setValue(.int(Int64(i)), forKey: "score")
            try note.setObject(folder, forKey: "folder")
            try context.save()
            times.append(now() - start)
        }
        let check = ObjectContext(store: store)
        guard try check.fetch(FetchRequest(entity: "Folder"))[0].objectIDs(forKey: "notes").count == count + adds else {
            throw BenchFailure("S11: the folder does not hold its \(count) notes and the \(adds) added")
        }
        return times.sorted()[times.count / 2]
    }
    for repetition in 0..<3 {
        let esPath = temporaryDirectory("s11f-es\(repetition)")
        let sqlitePath = temporaryDirectory("s11f-sqlite\(repetition)")
        paths += [esPath, sqlitePath]
        var start = now()
        let store = try PersistentStore.open(
            path: esPath, schema: relationshipSchema(), options: .init(mapSize: 1 << 30))
        _ = try insertLinkedNotes(store, folders: 1, perFolder: n, titles: titles)
        report.record(name, "EntityStore", "s/op", (now() - start) / Double(n))
        report.record(addName, "EntityStore", "s", try addNotes(store, holding: n))
        let smallPath = temporaryDirectory("s11f-small\(repetition)")
        paths.append(smallPath)
        let smallStore = try PersistentStore.open(
            path: smallPath, schema: relationshipSchema(), options: .init(mapSize: 1 << 30))
        _ = try insertLinkedNotes(smallStore, folders: 1, perFolder: small, titles: Array(titles.prefix(small)))
        report.record(addName, "EntityStore, a folder of \(small)", "s", try addNotes(smallStore, holding: small))

        // The same through typed models, each note appended to the folder's array as SwiftData users write it.
        let typedPath = temporaryDirectory("s11f-typed\(repetition)")
        paths.append(typedPath)
        start = now()
        let typedStore = try PersistentStore.open(
            path: typedPath, schema: relationshipSchema(), options: .init(mapSize: 1 << 30))
        let context = ObjectContext(store: typedStore)
        let folder = try context.insert(Folder.self)
        folder.name = "Folder 0"
        for i in 0..<n {
            let note = try context.insert(Note.self)
            note.title = titles[i]
            note.score = Int64(i)
            folder.notes.append(note)
        }
        try context.save()
        report.record(name, "EntityStore typed models", "s/op", (now() - start) / Double(n))
        let typedCheck = ObjectContext(store: typedStore)
        guard try typedCheck.fetch(FetchRequest(entity: "Folder"))[0].objectIDs(forKey: "notes").count == n
        else { throw BenchFailure("S11: the typed folder does not hold its \(n) notes") }

        for setup in SQLiteSetup.allCases {
            start = now()
            let sqlite = insertLinkedNotes(sqlitePath, setup, folders: 1, perFolder: n, titles: titles)
            report.record(name, setup.system, "s/op", (now() - start) / Double(n))
            // Each added note a durable commit, as each EntityStore save is.
            sqlite.makeDurable()
            let insertNote = sqlite.prepare("INSERT INTO notes (id, title, score, folder_id) VALUES (?, ?, ?, 1)")
            var times: [Double] = []
            for i in 0..<adds {
                start = now()
                sqlite3_bind_int64(insertNote, 1, Int64(n + i + 1))
                sqlite3_bind_text(insertNote, 2, "added \(i)", -1, sqlite.transient)
                sqlite3_bind_int64(insertNote, 3, Int64(i))
                sqlite3_step(insertNote)
                sqlite3_reset(insertNote)
                times.append(now() - start)
            }
            sqlite3_finalize(insertNote)
            report.record(addName, setup.system, "s", times.sorted()[times.count / 2])
        }
    }
    let large = report.median(addName, "EntityStore")
    let smallMedian = report.median(addName, "EntityStore, a folder of \(small)")
    report.target(
        "S11", "a note added to a folder of \(n) at most 2x one added to a folder of \(small) (a save costs its links)",
        large <= 2 * smallMedian,
        String(format: "%.2fx (against ", large / smallMedian) + report.fasterSQLite(addName).system
            + String(format: "'s durable insert: %.2fx)", large / report.fasterSQLite(addName).median))
    report.targetAgainstSQLite("S11", name, report.median(name, "EntityStore"), factor: 1)
}

/// The sum of the notes' title lengths and scores (what each side of S11's reads computes from the rows it reads).
func titlesAndScores(_ notes: [ManagedObject]) throws -> Int {
    var sum = 0
    for note in notes {
        guard case .string(let title) = try note.value(forKey: "title"),
            case .int(let score) = try note.value(forKey: "score")
        else { throw BenchFailure("S11: a note without its title or score") }
        sum &+= title.utf8.count &+ Int(score)
    }
    return sum
}

/// ``titlesAndScores(_:)`` of the rows `sql` selects (title, score) for each picked folder, bound as its key.
func titlesAndScores(_ sqlite: SQLiteItems, _ sql: String, _ picks: some Sequence<Int>) -> Int {
    var sum = 0
    let statement = sqlite.prepare(sql)
    for pick in picks {
        sqlite3_bind_int64(statement, 1, Int64(pick + 1))
        while sqlite3_step(statement) == SQLITE_ROW {
            let title = String(cString: sqlite3_column_text(statement, 0))
            sum &+= title.utf8.count &+ Int(sqlite3_column_int64(statement, 1))
        }
        sqlite3_reset(statement)
    }
    sqlite3_finalize(statement)
    return sum
}

/// S11: relationships, which S1-S9 never write or walk, against SQLite's `notes.folder_id` column with an index:
/// - inserting `folders` folders of `perFolder` notes each through a context, each note linked to its folder, one
///   save (SQLite: one transaction of prepared inserts);
/// - reading the notes of a folder at random and each note's title and score, a fresh context every 100 folders
///   (SQLite: `SELECT ... FROM notes WHERE folder_id = ?`);
/// - fetching a folder's notes by predicate, `folder == %@` sorted by title, and each note's title and score (SQLite:
///   `SELECT ... WHERE folder_id = ? ORDER BY title`), and by the folder's name, `folder.name == %@` (SQLite:
///   `folder_id IN (SELECT id FROM folders WHERE name = ?)`, `name` not indexed);
/// - deleting a folder and, by the cascade, its notes, each a durable save (SQLite: the two deletes in one
///   transaction).
func s11(_ report: Report, folders: Int, perFolder: Int) throws {
    let n = folders * perFolder
    let insertName = "S11 insert \(folders) folders of \(perFolder) notes, linked, one save"
    let walkName = "S11 read a folder's \(perFolder) notes at random, of \(n)"
    let deleteName = "S11 delete a folder and its \(perFolder) notes (cascade), durable"
    let fetchName = "S11 fetch folder == %@ sorted by title, \(perFolder) of \(n)"
    let joinName = "S11 fetch folder.name == %@ sorted by title, \(perFolder) of \(n)"
    let walks = 2_000
    let fetches = 200
    var generator = SystemRandomNumberGenerator()
    let picks = (0..<walks).map { _ in Int.random(in: 0..<folders, using: &generator) }
    let profile = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"]
    // Made before any clock starts (Foundation's padding costs more than an insert).
    let titles = (0..<n).map(noteTitle)
    var paths: [String] = []
    defer { for path in paths { try? FileManager.default.removeItem(atPath: path) } }
    for repetition in 0..<3 {
        let esPath = temporaryDirectory("s11-es\(repetition)")
        let sqlitePath = temporaryDirectory("s11-sqlite\(repetition)")
        paths += [esPath, sqlitePath]

        // Insert.
        var start = now()
        let store = try PersistentStore.open(
            path: esPath, schema: relationshipSchema(), options: .init(mapSize: 1 << 30))
        if profile == "links" { entitystore_profile_toggle() }
        let folderIDs = try insertLinkedNotes(store, folders: folders, perFolder: perFolder, titles: titles)
        if profile == "links" { entitystore_profile_toggle() }
        report.record(insertName, "EntityStore", "s/op", (now() - start) / Double(n))

        let sqlites = SQLiteSetup.allCases.map { setup in
            start = now()
            let sqlite = insertLinkedNotes(sqlitePath, setup, folders: folders, perFolder: perFolder, titles: titles)
            report.record(insertName, setup.system, "s/op", (now() - start) / Double(n))
            return sqlite
        }
        /// Each SQLite side's sum of `sql`'s rows, timed as `name` over `count` queries: all must equal `expected`.
        func eachSQLite(_ name: String, _ sql: String, _ picks: some Sequence<Int>, count: Int, expected: Int) throws {
            for sqlite in sqlites {
                let start = now()
                let sum = titlesAndScores(sqlite, sql, picks)
                report.record(name, sqlite.setup.system, "s/op", (now() - start) / Double(count))
                guard sum == expected else {
                    throw BenchFailure("\(name): EntityStore read \(expected) where \(sqlite.setup.system) read \(sum)")
                }
            }
        }

        // Walk: a folder's notes, each note's title and score.
        var esSum = 0
        start = now()
        if profile == "walk" { entitystore_profile_toggle() }
        var context = ObjectContext(store: store)
        for (i, pick) in picks.enumerated() {
            if i % 100 == 0 { context = ObjectContext(store: store) }
            let folder = try context.existingObject(with: folderIDs[pick])
            esSum &+= try titlesAndScores(try folder.objects(forKey: "notes"))
        }
        if profile == "walk" { entitystore_profile_toggle() }
        report.record(walkName, "EntityStore", "s/op", (now() - start) / Double(walks))

        let byFolder = "SELECT title, score FROM notes WHERE folder_id = ?"
        for sqlite in sqlites { try sqlite.requirePlan(byFolder, uses: "USING INDEX notes_folder") }
        try eachSQLite(walkName, byFolder, picks, count: walks, expected: esSum)
        consume(esSum)

        // Fetch: a folder's notes by predicate, sorted by title (the list a master-detail screen's controller
        // shows), each note's title and score.
        let fetchPicks = picks.prefix(fetches)
        esSum = 0
        start = now()
        if profile == "fetch" { entitystore_profile_toggle() }
        for (i, pick) in fetchPicks.enumerated() {
            if i % 100 == 0 { context = ObjectContext(store: store) }
            let request = FetchRequest(
                entity: "Note", predicate: try FetchPredicate("folder == %@", folderIDs[pick]),
                sortKeys: [SortKey("title")])
            esSum &+= try titlesAndScores(try context.fetch(request))
        }
        if profile == "fetch" { entitystore_profile_toggle() }
        report.record(fetchName, "EntityStore", "s/op", (now() - start) / Double(fetchPicks.count))

        let sorted = "SELECT title, score FROM notes WHERE folder_id = ? ORDER BY title"
        for sqlite in sqlites { try sqlite.requirePlan(sorted, uses: "USING INDEX notes_folder") }
        try eachSQLite(fetchName, sorted, fetchPicks, count: fetchPicks.count, expected: esSum)
        consume(esSum)

        // Fetch through the folder's name: `folder.name == %@`, sorted by title (SQLite: the folders of that name,
        // `name` not indexed on either side, then their notes by `notes.folder_id`'s index; written as a JOIN, without
        // ANALYZE SQLite's planner scans every note instead, 7 ms a query).
        esSum = 0
        start = now()
        if profile == "join" { entitystore_profile_toggle() }
        for (i, pick) in fetchPicks.enumerated() {
            if i % 100 == 0 { context = ObjectContext(store: store) }
            let request = FetchRequest(
                entity: "Note", predicate: try FetchPredicate("folder.name == %@", "Folder \(pick)"),
                sortKeys: [SortKey("title")])
            esSum &+= try titlesAndScores(try context.fetch(request))
        }
        if profile == "join" { entitystore_profile_toggle() }
        report.record(joinName, "EntityStore", "s/op", (now() - start) / Double(fetchPicks.count))

        let joined =
            "SELECT title, score FROM notes WHERE folder_id IN"
            + " (SELECT id FROM folders WHERE name = 'Folder ' || (? - 1)) ORDER BY title"
        for sqlite in sqlites { try sqlite.requirePlan(joined, uses: "USING INDEX notes_folder") }
        try eachSQLite(joinName, joined, fetchPicks, count: fetchPicks.count, expected: esSum)
        consume(esSum)

        // Delete: 20 folders, each its own durable save (EntityStore) or transaction (SQLite).
        let victims = (0..<20).map { (repetition * 20 + $0 * 7) % folders }
        var times: [Double] = []
        context = ObjectContext(store: store)
        for victim in victims {
            start = now()
            if profile == "cascade" { entitystore_profile_toggle() }
            try context.delete(try context.existingObject(with: folderIDs[victim]))
            try context.save()
            if profile == "cascade" { entitystore_profile_toggle() }
            times.append(now() - start)
        }
        report.record(deleteName, "EntityStore", "s", times.sorted()[times.count / 2])
        for sqlite in sqlites {
            // Each a durable commit, as each EntityStore save is.
            sqlite.makeDurable()
            times.removeAll()
            let deleteNotes = sqlite.prepare("DELETE FROM notes WHERE folder_id = ?")
            let deleteFolder = sqlite.prepare("DELETE FROM folders WHERE id = ?")
            for victim in victims {
                start = now()
                sqlite.exec("BEGIN")
                for statement in [deleteNotes, deleteFolder] {
                    sqlite3_bind_int64(statement, 1, Int64(victim + 1))
                    sqlite3_step(statement)
                    sqlite3_reset(statement)
                }
                sqlite.exec("COMMIT")
                times.append(now() - start)
            }
            sqlite3_finalize(deleteNotes)
            sqlite3_finalize(deleteFolder)
            report.record(deleteName, sqlite.setup.system, "s", times.sorted()[times.count / 2])
        }
        let remaining = try ObjectContext(store: store).count(for: FetchRequest(entity: "Note"))
        guard remaining == n - 20 * perFolder else {
            throw BenchFailure("S11: \(remaining) notes left after deleting 20 folders of \(perFolder) from \(n)")
        }
    }
    for name in [insertName, walkName, fetchName, joinName, deleteName] {
        report.targetAgainstSQLite("S11", name, report.median(name, "EntityStore"), factor: 1)
    }
}
