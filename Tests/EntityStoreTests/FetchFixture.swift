import EntityStore
import Foundation
import TestSupport

/// A small library with non-ASCII text, for fetch tests.
struct Library {
    let store: PersistentStore
    var ids: [String: ObjectID] = [:]

    init(_ store: PersistentStore) throws {
        self.store = store
        let context = ObjectContext(store: store)
        func author(_ name: String, _ email: String?, _ rating: Int64) throws -> ManagedObject {
            let a = try context.insert("Author")
            try a.setValue(.string(name), forKey: "name")
            try a.setValue(email.map(Value.string) ?? .null, forKey: "email")
            try a.setValue(.int(rating), forKey: "rating")
            return a
        }
        let leGuin = try author("Ursula Le Guin", "ursula@example.org", 5)
        let ende = try author("Michael Ende", nil, 4)
        let camus = try author("Albert Camus", "albert@example.fr", 3)
        let tags = try ["classic", "sf", "fantasy"].map { name -> ManagedObject in
            let tag = try context.insert("Tag")
            try tag.setValue(.string(name), forKey: "name")
            return tag
        }
        let books: [(String, Int64?, Double, ManagedObject, [Int])] = [
            ("The Dispossessed", 387, 4.5, leGuin, [0, 1]),
            ("A Wizard of Earthsea", 183, 4.2, leGuin, [2]),
            ("Die unendliche Geschichte", 428, 4.8, ende, [2, 0]),
            ("Momo", 304, 4.1, ende, []),
            ("L'Étranger", 123, 3.9, camus, [0]),
            ("La Peste", nil, 4.0, camus, [0]),
            ("ÉCOLE des femmes", 90, 2.0, camus, []),
        ]
        for (title, pages, score, author, tagIndexes) in books {
            let book = try context.insert("Book")
            try book.setValue(.string(title), forKey: "title")
            try book.setValue(pages.map(Value.int) ?? .null, forKey: "pages")
            try book.setValue(.double(score), forKey: "score")
            try book.setObject(author, forKey: "author")
            for i in tagIndexes { try book.add(tags[i], toKey: "tags") }
            ids[title] = book.objectID
        }
        try context.save()
    }

    /// The titles a predicate selects, sorted by title.
    func titles(_ format: String, _ arguments: PredicateArgument...) throws -> [String] {
        var request = FetchRequest(entity: "Book", predicate: try FetchPredicate(format: format, arguments: arguments))
        request.sortKeys = [SortKey("title")]
        return try ObjectContext(store: store).fetch(request).map { try $0["title"].stringValue }
    }
}

extension Value {
    var stringValue: String {
        if case .string(let s) = self { return s }
        return description
    }
}
