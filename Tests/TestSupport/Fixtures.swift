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
