import EntityStore
import Foundation

/// A shelf of books: the list's sections. Deleting one deletes its books.
final class Shelf: Model {
    @Stored(.unique) var name: String
    @ToMany(deleteRule: .cascade) var books: [Book]
}

/// A book: a row of the list, ordered on its shelf by `position` (rewritten by a user's reorder).
final class Book: Model {
    @Stored var title: String
    @Stored(.indexed) var position: Double = 0
    @ToOne var shelf: Shelf?
}

enum Library {
    static func schema() throws -> Schema { try Schema(version: 1, models: [Shelf.self, Book.self]) }

    static func open(_ path: String) throws -> PersistentStore {
        try PersistentStore.open(path: path, schema: schema(), options: .init(mapSize: 1 << 30))
    }

    /// The list's request: the books whose title contains `search` (all without one), by position on each shelf.
    static func request(search: String) throws -> FetchRequest {
        var request = FetchRequest(entity: "Book", sortKeys: [SortKey("position"), SortKey("title")])
        if !search.isEmpty { request.predicate = try FetchPredicate("title CONTAINS[cd] %@", search) }
        return request
    }

    static let sectionKey = "shelf.name"

    /// Fills an empty store: `count` books over a few shelves.
    static func seed(_ context: ObjectContext, books count: Int) throws {
        guard try context.count(Shelf.self) == 0 else { return }
        try addBooks(context, count)
    }

    /// RZCollectionList's contents before its batch (seed 002): shelves named "0" to "4", two to four books each.
    static func seedOfRZCollectionList(_ context: ObjectContext) throws {
        var shelves: [String: Shelf] = [:]
        let books: [(String, String, Double)] = [
            ("Jill", "0", 1), ("Jack", "0", 2), ("Garfunkel", "1", 1), ("Simon", "1", 2), ("Clyde", "2", 1),
            ("Bonnie", "2", 2), ("Jerry", "2", 3), ("Ben", "2", 4), ("Nu:Tone", "4", 1), ("Technicolour", "4", 2),
        ]
        for (title, shelfName, position) in books {
            let book = try context.insert(Book.self)
            book.title = title
            book.position = position
            if shelves[shelfName] == nil {
                let shelf = try context.insert(Shelf.self)
                shelf.name = shelfName
                shelves[shelfName] = shelf
            }
            book.shelf = shelves[shelfName]
        }
        try context.save()
    }

    /// Adds `count` books over five new shelves (Fantasy to Travel).
    static func addBooks(_ context: ObjectContext, _ count: Int) throws {
        let names = ["Fantasy", "History", "Poetry", "Science", "Travel"]
        let shelves = try names.map { name in
            let shelf = try context.insert(Shelf.self)
            shelf.name = name
            return shelf
        }
        let words = ["Silent", "River", "Glass", "Winter", "Atlas", "Copper", "Night", "Garden", "Stone", "Harbor"]
        for index in 0..<count {
            if index > 0, index % 50_000 == 0 { try context.save() }
            let book = try context.insert(Book.self)
            book.title = "\(words[index % words.count]) \(words[(index / words.count) % words.count]) \(index)"
            book.position = Double(index)
            book.shelf = shelves[index % shelves.count]
        }
        try context.save()
    }
}
