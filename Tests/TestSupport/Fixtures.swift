import EntityStore
import Foundation

/// The one schema the EntityStore tests share: a small library.
///
/// Author →> Book (cascade) →> Chapter (cascade) →> Note (cascade): deletes cascade over three levels.
/// Book <<→> Tag: many-to-many. Publisher →> Book with the deny rule.
public enum Fixtures {
    public static func librarySchema(version: Int = 1) throws -> Schema {
        try Schema(version: version) {
            Entity("Author") {
                Attribute("name", .string, indexed: true)
                Attribute("email", .string, optional: true, unique: true, caseInsensitive: true)
                Attribute("born", .date, optional: true)
                Attribute("rating", .int64, default: 0)
                Relationship("books", to: "Book", inverse: "author", toMany: true, deleteRule: .cascade)
            }
            Entity("Book") {
                Attribute("title", .string)
                Attribute("pages", .int64, optional: true, indexed: true)
                Attribute("price", .decimal, optional: true)
                Attribute("isbn", .uuid, optional: true)
                Attribute("cover", .binary, optional: true)
                Attribute("score", .double, default: 0.0)
                Attribute("inPrint", .bool, default: true)
                Relationship("author", to: "Author", inverse: "books")
                Relationship("chapters", to: "Chapter", inverse: "book", toMany: true, deleteRule: .cascade)
                Relationship("tags", to: "Tag", inverse: "books", toMany: true)
                Relationship("publisher", to: "Publisher", inverse: "books")
            }
            Entity("Chapter") {
                Attribute("title", .string)
                Attribute("number", .int64, default: 1)
                Relationship("book", to: "Book", inverse: "chapters")
                Relationship("notes", to: "Note", inverse: "chapter", toMany: true, deleteRule: .cascade)
            }
            Entity("Note") {
                Attribute("text", .string)
                Relationship("chapter", to: "Chapter", inverse: "notes")
            }
            Entity("Tag") {
                Attribute("name", .string, unique: true)
                Relationship("books", to: "Book", inverse: "tags", toMany: true)
            }
            Entity("Publisher") {
                Attribute("name", .string)
                Relationship("books", to: "Book", inverse: "publisher", toMany: true, deleteRule: .deny)
            }
        }
    }
}

extension Fixtures {
    /// Projects, tasks and tags: the controller's contract where relationships take part.
    public static func projectSchema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Project") {
                Attribute("name", .string)
                Attribute("archived", .bool, default: false)
                Relationship("tasks", to: "Task", inverse: "project", toMany: true, deleteRule: .cascade)
            }
            Entity("Task") {
                Attribute("title", .string)
                Attribute("rank", .int64, default: 0)
                Attribute("notes", .string, optional: true)
                Relationship("project", to: "Project", inverse: "tasks")
                Relationship("tags", to: "Tag", inverse: "tasks", toMany: true)
            }
            Entity("Tag") {
                Attribute("name", .string)
                Relationship("tasks", to: "Task", inverse: "tags", toMany: true)
            }
        }
    }

    /// The library schema with derived attributes read through relationships (counts, a sum, a to-one's name),
    /// which every write must leave right, and `Comic`, a sub-entity of `Book`.
    public static func librarySchemaWithDerivations() throws -> Schema {
        var schema = try librarySchema()
        func derive(_ entity: String, _ name: String, _ type: AttributeType, _ derivation: String) {
            let position = schema.entities.firstIndex { $0.name == entity }!
            schema.entities[position].attributes.append(
                Attribute(
                    name, type, optional: type == .string, default: type == .string ? nil : .int(0),
                    derived: derivation))
        }
        derive("Author", "bookCount", .int64, "books.@count")
        derive("Author", "totalPages", .int64, "books.@sum.pages")
        derive("Book", "authorName", .string, "author.name")
        derive("Book", "chapterCount", .int64, "chapters.@count")
        derive("Publisher", "bookCount", .int64, "books.@count")
        // A sub-entity: every relationship to a book holds comics too.
        let comic = Entity("Comic", inherits: "Book") { Attribute("artist", .string, optional: true) }
        return try Schema(version: schema.version, entities: schema.entities + [comic])
    }

    /// The library schema migrated: version 2 adds an indexed `Book.edition` (default 1), a derived
    /// `Author.bookCount` and an optional `Tag.color`, a lightweight migration that rewrites every book and author.
    public static func librarySchemaMigrated() throws -> Schema {
        var schema = try librarySchemaWithTagColor(version: 2)
        let book = schema.entities.firstIndex { $0.name == "Book" }!
        schema.entities[book].attributes.append(Attribute("edition", .int64, default: 1, indexed: true))
        let author = schema.entities.firstIndex { $0.name == "Author" }!
        schema.entities[author].attributes.append(
            Attribute("bookCount", .int64, default: 0, derived: "books.@count"))
        return schema
    }

    /// The library schema with an optional `Tag.color`: a lightweight migration from the plain one at a higher
    /// version, a refused one at the same version.
    public static func librarySchemaWithTagColor(version: Int) throws -> Schema {
        var schema = try librarySchema(version: version)
        let tag = schema.entities.firstIndex { $0.name == "Tag" }!
        schema.entities[tag].attributes.append(Attribute("color", .string, optional: true))
        return schema
    }
}

/// A store on a temporary directory, removed by ``remove()``.
public struct TemporaryStore {
    public let directory: TemporaryDirectory
    public let store: PersistentStore

    /// The store directory's path.
    public var path: String { directory.path("test.store") }

    /// Opens a fresh store with `schema` (the library fixture by default), not durable (tests need no fsync).
    public init(schema: Schema? = nil) throws {
        directory = try TemporaryDirectory()
        store = try PersistentStore.open(
            path: directory.path("test.store"), schema: schema ?? Fixtures.librarySchema(),
            options: .init(sync: .noSync))
    }

    public func remove() { directory.remove() }
}

/// Runs `body` with a fresh fixture store and removes it afterwards.
public func withStore<R>(schema: Schema? = nil, _ body: (PersistentStore, TemporaryStore) throws -> R) throws -> R {
    let temporary = try TemporaryStore(schema: schema)
    defer { temporary.remove() }
    return try body(temporary.store, temporary)
}

/// Catches the EntityStoreError thrown by `body`.
public func entityStoreError(_ body: () throws -> Void) -> EntityStoreError? {
    do {
        try body()
        return nil
    } catch let error as EntityStoreError {
        return error
    } catch {
        return nil
    }
}

extension Fixtures {
    /// A bank: accounts whose balances always sum to the same total, and transfers between them (an index and
    /// two to-one relationships with inverses), for crash and fault-injection tests.
    public static func bankSchema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Account") {
                Attribute("name", .string, unique: true)
                Attribute("balance", .int64, default: 0)
                Relationship("outgoing", to: "Transfer", inverse: "from", toMany: true, deleteRule: .deny)
                Relationship("incoming", to: "Transfer", inverse: "to", toMany: true, deleteRule: .deny)
            }
            Entity("Transfer") {
                Attribute("amount", .int64, indexed: true)
                Attribute("serial", .int64, unique: true)
                Relationship("from", to: "Account", inverse: "outgoing")
                Relationship("to", to: "Account", inverse: "incoming")
            }
        }
    }

    /// The total of all balances in a bank made by ``makeBank(at:)``.
    public static let bankTotal: Int64 = 10 * 1000

    /// Creates a bank of ten accounts of 1000 each.
    public static func makeBank(at path: String) throws {
        let store = try PersistentStore.open(path: path, schema: bankSchema())
        let context = ObjectContext(store: store)
        for i in 0..<10 {
            let account = try context.insert("Account")
            try account.setValue(.string("a\(i)"), forKey: "name")
            try account.setValue(1000, forKey: "balance")
        }
        try context.save()
    }

    /// One transfer in one save: two balances, a new Transfer with its relationships, index entries and history.
    public static func transfer(
        _ context: ObjectContext, serial: Int64, using generator: inout some RandomNumberGenerator
    ) throws {
        let accounts = try context.fetch(FetchRequest(entity: "Account", sortKeys: [SortKey("name")]))
        let from = accounts.randomElement(using: &generator)!
        let to = accounts.randomElement(using: &generator)!
        let amount = Int64.random(in: 1...50, using: &generator)
        guard case .int(let fromBalance) = try from["balance"] else { return }
        try from.setValue(.int(fromBalance - amount), forKey: "balance")
        guard case .int(let toBalance) = try to["balance"] else { return }
        try to.setValue(.int(toBalance + amount), forKey: "balance")
        let transfer = try context.insert("Transfer")
        try transfer.setValue(.int(amount), forKey: "amount")
        try transfer.setValue(.int(serial), forKey: "serial")
        try transfer.setObject(from, forKey: "from")
        try transfer.setObject(to, forKey: "to")
        try context.save()
    }

    /// The sum of all balances and the number of transfers.
    public static func bankState(_ store: PersistentStore) throws -> (total: Int64, transfers: Int) {
        let context = ObjectContext(store: store)
        var total: Int64 = 0
        for account in try context.fetch(FetchRequest(entity: "Account")) {
            if case .int(let balance) = try account["balance"] { total += balance }
        }
        return (total, try context.count(for: FetchRequest(entity: "Transfer")))
    }
}

/// People whose full name a migration splits: the chunked-migration kill tests' store and plan.
public enum PeopleFixture {
    /// Version 1: a full name, an age; version 2: first and last names, the age as text (indexed).
    public static func schema(version: Int) throws -> Schema {
        if version == 1 {
            return try Schema(version: 1) {
                Entity("Person") {
                    Attribute("name", .string)
                    Attribute("age", .int64, default: 0, indexed: true)
                }
            }
        }
        return try Schema(version: 2) {
            Entity("Person") {
                Attribute("first", .string)
                Attribute("last", .string, default: "", indexed: true)
                Attribute("age", .string, optional: true)
            }
        }
    }

    /// The plan from version 1 to 2, in chunks of `chunkSize` objects; `progress` hears each chunk.
    public static func plan(
        chunkSize: Int, progress: (@Sendable (MigrationProgress) -> Void)? = nil
    ) throws -> MigrationPlan {
        MigrationPlan(
            schemas: [try schema(version: 1), try schema(version: 2)],
            stages: [
                .custom(
                    from: 1, to: 2, removing: [.attribute("name", of: "Person")],
                    transforms: [
                        MigrationTransform("Person") { old, new in
                            guard case .string(let name) = try old.value(forKey: "name") else { return }
                            let parts = name.split(separator: " ", maxSplits: 1).map(String.init)
                            try new.setValue(.string(parts.first ?? ""), forKey: "first")
                            if parts.count > 1 { try new.setValue(.string(parts[1]), forKey: "last") }
                            if case .int(let age) = old["age"] { try new.setValue(.string("\(age)"), forKey: "age") }
                        }
                    ])
            ], chunkSize: chunkSize, progress: progress)
    }

    /// A version-1 store of `count` people at `path`.
    public static func make(at path: String, count: Int) throws {
        let store = try PersistentStore.open(path: path, schema: try schema(version: 1))
        _ = try store.batchInsert(
            into: "Person",
            objects: (0..<count).map { ["name": .string("Given\($0) Family\($0 % 97)"), "age": .int(Int64($0 % 90))] })
    }

    /// Every person as "first|last|age" (version 2) or "name|age" (version 1), in primary-key order.
    public static func rows(_ store: PersistentStore) throws -> [String] {
        let keys = store.schema.version == 1 ? ["name", "age"] : ["first", "last", "age"]
        return try ObjectContext(store: store).fetch(FetchRequest(entity: "Person")).sorted {
            $0.objectID.primaryKey < $1.objectID.primaryKey
        }.map { person in
            try keys.map { key in
                switch try person.value(forKey: key) {
                case .string(let text): text
                case let value: "\(value)"
                }
            }.joined(separator: "|")
        }
    }
}

/// The crash-consistency workloads over the note store: step i of each is known, and so is the state after steps
/// 1...m for every m.
public enum NoteWorkload: String, CaseIterable, Sendable {
    /// Step i is ``NoteFixture/save(_:in:)`` (a context's save: an insert and an update).
    case saves
    /// As `saves`, on a store the workload itself creates (its first open is recorded too).
    case creation
    /// Batch operations in turn: step i inserts eight notes (i % 3 == 1), updates the eight of the step before
    /// (i % 3 == 2), or deletes the first four of the step two before (i % 3 == 0).
    case batches
    /// Saves of notes with 6 KiB texts on a store opened with a 64 KiB map: the map grows in the middle of saves.
    case growth
    /// A save, then the history pruned up to it: step i is both.
    case pruning
    /// Saves that link and delete: step i inserts note i linked to note i-1 (`previous`, its inverse `next`) and
    /// deletes note i-3 (which unlinks note i-2).
    case links

    /// The options the workload opens its store with.
    public var options: PersistentStore.Options {
        self == .growth ? PersistentStore.Options(mapSize: 64 << 10) : PersistentStore.Options()
    }

    /// Makes step `i`. `context` is the one the workload saves through (a failed save keeps its changes: the caller
    /// saves it again, or makes the step anew when it holds none).
    public func step(_ i: Int, store: PersistentStore, context: ObjectContext) throws {
        switch self {
        case .saves, .creation, .pruning:
            try NoteFixture.save(i, in: context)
        case .growth:
            let note = try context.insert("Note")
            try note.setValue(.int(i), forKey: "n")
            try note.setValue(.string(Self.growthText(i)), forKey: "text")
            try context.save()
        case .links:
            let note = try context.insert("Note")
            try note.setValue(.int(i), forKey: "n")
            try note.setValue(.string("link \(i)"), forKey: "text")
            for earlier in try context.fetch(
                FetchRequest(
                    entity: "Note", predicate: try FetchPredicate("n == %@ OR n == %@", Int64(i - 1), Int64(i - 3))))
            {
                guard case .int(let n) = try earlier.value(forKey: "n") else { continue }
                if n == i - 1 { try note.setObject(earlier, forKey: "previous") } else { try context.delete(earlier) }
            }
            try context.save()
        case .batches:
            let base = Int64(1_000 + 8 * i)
            switch i % 3 {
            case 1:
                _ = try store.batchInsert(
                    into: "Note",
                    objects: (0..<8).map { ["n": .int(base + Int64($0)), "text": .string("batch \(i)")] })
            case 2:
                try store.batchUpdate(
                    "Note", where: try FetchPredicate("n >= %@ AND n < %@", base - 8, base),
                    set: ["text": .string("updated at \(i)")])
            default:
                try store.batchDelete("Note", where: try FetchPredicate("n >= %@ AND n < %@", base - 16, base - 12))
            }
        }
    }

    /// The second part of a step, for the workloads that have one (pruning), made once the first returned.
    public func finish(_ i: Int, store: PersistentStore) throws {
        guard self == .pruning else { return }
        try store.pruneHistory(before: try store.lastTransaction() ?? 0)
    }

    /// The notes after steps 1...m.
    public func expected(after m: Int) -> [Int: String] {
        switch self {
        case .saves, .creation, .pruning:
            return NoteFixture.expected(after: m)
        case .growth:
            return Dictionary(uniqueKeysWithValues: (0..<max(m, 0)).map { ($0 + 1, Self.growthText($0 + 1)) })
        case .links:
            // Notes m-2...m are left (each step deletes the note three before it); each links to the one before
            // it while that one is left.
            var texts: [Int: String] = [:]
            for i in stride(from: max(1, m - 2), through: m, by: 1) {
                texts[i] = "link \(i)" + (i - 1 >= max(1, m - 2) ? " ← \(i - 1)" : "")
            }
            return texts
        case .batches:
            var texts: [Int: String] = [:]
            for i in stride(from: 1, through: m, by: 1) {
                let base = 1_000 + 8 * i
                switch i % 3 {
                case 1: for k in 0..<8 { texts[base + k] = "batch \(i)" }
                case 2: for k in 0..<8 { texts[base - 8 + k] = "updated at \(i)" }
                default: for k in 0..<4 { texts[base - 16 + k] = nil }
                }
            }
            return texts
        }
    }

    static func growthText(_ i: Int) -> String { "note \(i) " + String(repeating: "g", count: 6 << 10) }
}

/// Notes saved one by one: the crash-consistency workloads' store. Save i inserts note i and rewrites the text of
/// note i/2, so that the state after saves 1...m is known exactly for every m.
public enum NoteFixture {
    public static func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Note") {
                Attribute("n", .int64, unique: true)
                Attribute("text", .string, indexed: true)
                Relationship("previous", to: "Note", inverse: "next")
                Relationship("next", to: "Note", inverse: "previous")
            }
        }
    }

    /// Save `i`: note i ("v<i>", with a longer text every seventh save so that pages split), and note i/2's text.
    public static func save(_ i: Int, in context: ObjectContext) throws {
        let note = try context.insert("Note")
        try note.setValue(.int(i), forKey: "n")
        try note.setValue(.string(text(i, i)), forKey: "text")
        if i / 2 >= 1, i / 2 != i {
            let earlier = try context.fetch(
                FetchRequest(entity: "Note", predicate: try FetchPredicate("n == %@", Int64(i / 2))))
            for other in earlier { try other.setValue(.string(text(i / 2, i)), forKey: "text") }
        }
        try context.save()
    }

    static func text(_ note: Int, _ save: Int) -> String {
        "note \(note) at save \(save)" + (save % 7 == 0 ? String(repeating: "x", count: 600) : "")
    }

    /// The texts of notes 1...m after saves 1...m.
    public static func expected(after m: Int) -> [Int: String] {
        var texts: [Int: String] = [:]
        for i in stride(from: 1, through: m, by: 1) {
            texts[i] = text(i, i)
            if i / 2 >= 1 && i / 2 != i { texts[i / 2] = text(i / 2, i) }
        }
        return texts
    }

    /// The notes a store holds, by number: each one's text, and " ← k" when it links to note k (`previous`, whose
    /// inverse `next` must say the same).
    public static func notes(_ store: PersistentStore) throws -> [Int: String] {
        var texts: [Int: String] = [:]
        let context = ObjectContext(store: store)  // kept while its objects' relationships are read
        for note in try context.fetch(FetchRequest(entity: "Note")) {
            guard case .int(let n) = try note.value(forKey: "n"),
                case .string(let text) = try note.value(forKey: "text")
            else { continue }
            texts[Int(n)] = text
            if let previous = try note.object(forKey: "previous"), case .int(let k) = try previous.value(forKey: "n") {
                let inverse = try previous.object(forKey: "next")
                texts[Int(n)]! += inverse?.objectID == note.objectID ? " ← \(k)" : " ← \(k) (its next is not this note)"
            }
        }
        return texts
    }
}
