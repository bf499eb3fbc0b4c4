import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// Batch changes at random, against a twin: each batch update, delete or insert on one store is made on a second
/// store with the same contents through a context (fetch, change each object, save). The two stores must then hold
/// the same objects with the same values (derived ones included) and links, and a batch refused (a deny rule, a
/// unique value held twice, a rule broken) must be refused by the save too, with nothing written on either side.
/// Objects are named uniquely, so that the stores are compared by names (their IDs may differ).
@Suite struct BatchTwinTests {
    static var rounds: Int { TestScale.size(200, stress: 3_000) }

    @Test func batchChangesDoWhatTheSameChangesDoThroughAContext() throws {
        try batchesAgainstATwin(seed: 0xBA7C)
    }

    /// The test's workload from `seed` (other seeds: a scratch harness's sweeps).
    func batchesAgainstATwin(seed: UInt64) throws {
        let schema = try Fixtures.librarySchemaWithDerivations()
        let first = try TemporaryStore(schema: schema)
        defer { first.remove() }
        let second = try TemporaryStore(schema: schema)
        defer { second.remove() }
        var g = SeededGenerator(seed: seed)
        var serial = 0
        func name(_ prefix: String) -> String {
            serial += 1
            return "\(prefix)\(serial)"
        }

        // The same start in both stores.
        let authors = ["a1", "a2", "a3", "a4"]
        let tags = ["t1", "t2", "t3"]
        let publishers = ["p1", "p2"]
        var books:
            [(title: String, entity: String, pages: Int64?, score: Double, author: Int, tags: [Int], publisher: Int?)] =
                []
        for _ in 0..<24 {
            books.append(
                (
                    name("b"), Int.random(in: 0..<5, using: &g) == 0 ? "Comic" : "Book",
                    Bool.random(using: &g) ? Int64.random(in: 50..<600, using: &g) : nil,
                    Double(Int.random(in: 0..<50, using: &g)) / 10, Int.random(in: 0..<4, using: &g),
                    (0..<3).filter { _ in Int.random(in: 0..<3, using: &g) == 0 },
                    Int.random(in: 0..<3, using: &g) == 0 ? Int.random(in: 0..<2, using: &g) : nil
                ))
        }
        let chapters = (0..<30).map { _ in (name("c"), Int.random(in: 0..<24, using: &g)) }
        for store in [first.store, second.store] {
            let context = ObjectContext(store: store)
            let authorObjects = try authors.enumerated().map { index, author in
                let object = try context.insert("Author")
                try object.setValue(.string(author), forKey: "name")
                try object.setValue(.int(Int64(index)), forKey: "rating")
                try object.setValue(index % 2 == 0 ? .string("\(author)@example.org") : .null, forKey: "email")
                return object
            }
            let tagObjects = try tags.map { tag in
                let object = try context.insert("Tag")
                try object.setValue(.string(tag), forKey: "name")
                return object
            }
            let publisherObjects = try publishers.map { publisher in
                let object = try context.insert("Publisher")
                try object.setValue(.string(publisher), forKey: "name")
                return object
            }
            var bookObjects: [ManagedObject] = []
            for book in books {
                let object = try context.insert(book.entity)
                try object.setValue(.string(book.title), forKey: "title")
                try object.setValue(book.pages.map(Value.int) ?? .null, forKey: "pages")
                try object.setValue(.double(book.score), forKey: "score")
                try object.setObject(authorObjects[book.author], forKey: "author")
                for tag in book.tags { try object.add(tagObjects[tag], toKey: "tags") }
                if let publisher = book.publisher {
                    try object.setObject(publisherObjects[publisher], forKey: "publisher")
                }
                bookObjects.append(object)
            }
            for (title, book) in chapters {
                let chapter = try context.insert("Chapter")
                try chapter.setValue(.string(title), forKey: "title")
                try chapter.setObject(bookObjects[book], forKey: "book")
                let note = try context.insert("Note")
                try note.setValue(.string("n-\(title)"), forKey: "text")
                try note.setObject(chapter, forKey: "chapter")
            }
            try context.save()
        }
        #expect(try snapshot(first.store) == snapshot(second.store))

        let bookPredicates = [
            nil, "pages > 300", "pages == nil", "score < 2.5", "author.name == 'a2'", "ANY tags.name == 't1'",
            "chapterCount > 0", "authorName IN {'a1', 'a3'}", "inPrint == NO", "publisher != nil",
        ]
        let authorPredicates = [nil, "rating > 1", "bookCount > 5", "totalPages < 1500", "name == 'a4'"]
        var counts: [String: Int] = [:]
        var refused = 0
        for round in 0..<Self.rounds {
            let step: String
            /// The batch on the first store and the same changes through a context on the second: both succeed, or
            /// both are refused for the same reason (the context's changes then rolled back).
            func both(_ step: String, _ batch: () throws -> Void, _ changes: (ObjectContext) throws -> Void) throws {
                var batchError: EntityStoreError?
                do { try batch() } catch let error as EntityStoreError { batchError = error }
                let context = ObjectContext(store: second.store)
                var saveError: EntityStoreError?
                do {
                    try changes(context)
                    try context.save()
                } catch let error as EntityStoreError {
                    saveError = error
                    context.rollback()
                }
                #expect(
                    batchError?.code == saveError?.code,
                    "round \(round) \(step): the batch \(batchError.map { "failed: \($0)" } ?? "succeeded"), the save \(saveError.map { "failed: \($0)" } ?? "succeeded")"
                )
                if batchError != nil { refused += 1 }
            }
            func fetch(_ context: ObjectContext, _ entity: String, _ predicate: String?) throws -> [ManagedObject] {
                try context.fetch(FetchRequest(entity: entity, predicate: try predicate.map { try FetchPredicate($0) }))
            }
            /// A batch update, and the same values set on each object a context fetches.
            func update(_ step: String, _ entity: String, _ predicate: String?, _ values: [String: Value]) throws {
                try both(step) {
                    try first.store.batchUpdate(
                        entity, where: try predicate.map { try FetchPredicate($0) }, set: values)
                } _: { context in
                    for object in try fetch(context, entity, predicate) {
                        for (key, value) in values { try object.setValue(value, forKey: key) }
                    }
                }
            }
            /// A batch delete, and a context's delete of each object it fetches.
            func delete(_ step: String, _ entity: String, _ predicate: String?) throws {
                try both(step) {
                    try first.store.batchDelete(entity, where: try predicate.map { try FetchPredicate($0) })
                } _: { context in
                    for object in try fetch(context, entity, predicate) { try context.delete(object) }
                }
            }
            switch Int.random(in: 0..<13, using: &g) {
            case 0, 1, 2:
                let predicate = bookPredicates.randomElement(using: &g)!
                var values: [String: Value] = [:]
                if Bool.random(using: &g) {
                    values["pages"] =
                        Int.random(in: 0..<4, using: &g) == 0 ? .null : .int(Int64.random(in: 50..<600, using: &g))
                }
                if Bool.random(using: &g) { values["score"] = .double(Double(Int.random(in: 0..<50, using: &g)) / 10) }
                if Bool.random(using: &g) { values["inPrint"] = .bool(Bool.random(using: &g)) }
                if values.isEmpty || Int.random(in: 0..<6, using: &g) == 0 {
                    // A required value set to nil: refused on both sides (when anything matches).
                    values["title"] = .null
                }
                step = "update books \(predicate ?? "all") \(values)"
                if values["title"] == .null {
                    // A required value set to nil: the batch refuses it whatever it matches, a save when it
                    // matches anything.
                    #expect(throws: EntityStoreError.self) {
                        try first.store.batchUpdate(
                            "Book", where: try predicate.map { try FetchPredicate($0) }, set: values)
                    }
                    let context = ObjectContext(store: second.store)
                    let found = try fetch(context, "Book", predicate)
                    for book in found {
                        for (key, value) in values { try book.setValue(value, forKey: key) }
                    }
                    if found.isEmpty {
                        try context.save()
                    } else {
                        #expect(throws: EntityStoreError.self) { try context.save() }
                    }
                    refused += 1
                    break
                }
                try update(step, "Book", predicate, values)
            case 3:
                let predicate = authorPredicates.randomElement(using: &g)!
                var values: [String: Value] = ["rating": .int(Int64.random(in: 0..<5, using: &g))]
                // Renamed, every book's derived author name follows.
                if Int.random(in: 0..<3, using: &g) == 0 { values["name"] = .string(name("a")) }
                // Emails are unique: one set for several authors is refused on both sides.
                if Int.random(in: 0..<4, using: &g) == 0 { values["email"] = .string("\(name("e"))@example.org") }
                step = "update authors \(predicate ?? "all") \(values)"
                try update(step, "Author", predicate, values)
            case 4:
                let entity = ["Book", "Book", "Chapter", "Note", "Tag", "Comic"].randomElement(using: &g)!
                let predicate: String? =
                    switch entity {
                    case "Book", "Comic": bookPredicates.dropFirst().randomElement(using: &g)!
                    case "Chapter":
                        ["book.pages > 300", "notes.@count == 0", "title BEGINSWITH 'c1'"].randomElement(using: &g)!
                    case "Note": ["chapter.book.score > 3", "text ENDSWITH '7'"].randomElement(using: &g)!
                    default: ["name == 't2'", "books.@count < 4"].randomElement(using: &g)!
                    }
                step = "delete \(entity) \(predicate ?? "all")"
                try delete(step, entity, predicate)
            case 6:
                // Publishers deny their delete while they hold books.
                let predicate = ["name == 'p1'", "books.@count == 0", nil].randomElement(using: &g)!
                step = "delete publishers \(predicate ?? "all")"
                try delete(step, "Publisher", predicate)
            case 7:
                // An author deleted: its books cascade, their chapters and notes with them.
                let predicate = authorPredicates.dropFirst().randomElement(using: &g)!
                step = "delete authors \(predicate ?? "all")"
                try delete(step, "Author", predicate)
            case 5, 8, 10, 11:
                var objects: [[String: Value]] = []
                for _ in 0..<Int.random(in: 1...4, using: &g) {
                    var object: [String: Value] = [
                        "title": .string(name("b")), "score": .double(Double(Int.random(in: 0..<50, using: &g)) / 10),
                    ]
                    if Bool.random(using: &g) { object["pages"] = .int(Int64.random(in: 50..<600, using: &g)) }
                    if Int.random(in: 0..<8, using: &g) == 0 { object["title"] = .null }
                    objects.append(object)
                }
                let entity = Bool.random(using: &g) ? "Book" : "Comic"
                step = "insert \(entity) \(objects.count)"
                try both(step) {
                    try first.store.batchInsert(into: entity, objects: objects)
                } _: { context in
                    for values in objects {
                        let object = try context.insert(entity)
                        for (key, value) in values { try object.setValue(value, forKey: key) }
                    }
                }
            case 12:
                // More of the graph, made alike through a context on both stores: an author with books, their
                // chapters and notes, tagged and published.
                let author = name("a")
                let titles = (0..<3).map { _ in name("b") }
                let chapterTitles = titles.map { _ in name("c") }
                let tag = tags.randomElement(using: &g)!
                let publisher = Bool.random(using: &g) ? publishers.randomElement(using: &g) : nil
                step = "grow \(author)"
                for store in [first.store, second.store] {
                    let context = ObjectContext(store: store)
                    let writer = try context.insert("Author")
                    try writer.setValue(.string(author), forKey: "name")
                    let tagObject = try fetch(context, "Tag", "name == '\(tag)'").first
                    let publisherObject = try publisher.flatMap {
                        try fetch(context, "Publisher", "name == '\($0)'").first
                    }
                    for (title, chapterTitle) in zip(titles, chapterTitles) {
                        let book = try context.insert("Book")
                        try book.setValue(.string(title), forKey: "title")
                        try book.setValue(.int(Int64(title.count * 97 % 500)), forKey: "pages")
                        try book.setObject(writer, forKey: "author")
                        if let tagObject { try book.add(tagObject, toKey: "tags") }
                        if let publisherObject { try book.setObject(publisherObject, forKey: "publisher") }
                        let chapter = try context.insert("Chapter")
                        try chapter.setValue(.string(chapterTitle), forKey: "title")
                        try chapter.setObject(book, forKey: "book")
                        let note = try context.insert("Note")
                        try note.setValue(.string("n-\(chapterTitle)"), forKey: "text")
                        try note.setObject(chapter, forKey: "chapter")
                    }
                    try context.save()
                }
            default:
                // Tags are unique by name: a name held, or given twice, refuses the batch and the save.
                let clash = Int.random(in: 0..<3, using: &g) == 0
                let names = clash ? ["t1", name("t")] : [name("t"), name("t")]
                step = "insert tags \(names)"
                try both(step) {
                    try first.store.batchInsert(into: "Tag", objects: names.map { ["name": .string($0)] })
                } _: { context in
                    for tag in names { try context.insert("Tag").setValue(.string(tag), forKey: "name") }
                }
            }
            counts[String(step.prefix { $0 != " " }), default: 0] += 1
            let mine = try snapshot(first.store)
            let theirs = try snapshot(second.store)
            if mine != theirs {
                Issue.record(
                    "round \(round) \(step): the batch left \(mine.filter { !theirs.contains($0) }), the context \(theirs.filter { !mine.contains($0) })"
                )
                break
            }
        }
        #expect(try first.store.checkIntegrity().findings.isEmpty)
        #expect(try second.store.checkIntegrity().findings.isEmpty)
        #expect(refused > 0 && refused < Self.rounds / 2, "\(refused) refused of \(Self.rounds)")
        print("batch twin test: \(Self.rounds) rounds, \(refused) refused, steps \(counts)")
    }

    /// Every object of the library schema, by name, with its values (derived ones included) and the names of what
    /// it links to.
    func snapshot(_ store: PersistentStore) throws -> [String] {
        let context = ObjectContext(store: store)
        let keys = [
            "Author": "name", "Book": "title", "Chapter": "title", "Note": "text", "Tag": "name", "Publisher": "name",
        ]
        func label(_ object: ManagedObject) throws -> String {
            let entity = object.entity.name == "Comic" ? "Book" : object.entity.name
            return try "\(object.entity.name) \(object[keys[entity]!])"
        }
        var lines: [String] = []
        for entity in ["Author", "Book", "Chapter", "Note", "Tag", "Publisher"] {
            for object in try context.fetch(FetchRequest(entity: entity)) {
                var line = try label(object)
                for attribute in object.entity.attributes { line += " \(attribute.name)=\(try object[attribute.name])" }
                for relationship in object.entity.relationships {
                    let targets = try object.objectIDs(forKey: relationship.name).map {
                        try label(context.existingObject(with: $0))
                    }
                    line += " \(relationship.name)=\(targets.sorted())"
                }
                lines.append(line)
            }
        }
        return lines.sorted()
    }
}
