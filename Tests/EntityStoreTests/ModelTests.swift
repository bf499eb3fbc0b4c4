import EntityStore
import Foundation
import TestSupport
import Testing

final class Book: Model {
    @Stored("title") var title: String
    @Stored("pages") var pages: Int64?
    @Stored("price") var price: Decimal?
    @Stored("inPrint") var inPrint: Bool
    @Stored("score") var score: Double
}

final class Misfit: Model {
    override class var entityName: String { "Book" }
    @Stored("title") var title: Int64
    @Stored("subtitle") var subtitle: String
    @Stored("pages") var pages: Int64
}

@Suite struct ModelTests {
    @Test func typedPropertiesReadAndWriteTheManagedObject() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let book = try context.insert(Book.self)
            book.title = "Dune"
            book.pages = 412
            book.price = Decimal(string: "9.50")
            #expect(book.inPrint)  // the schema's default
            try context.save()

            let other = ObjectContext(store: store)
            let loaded = try other.existingObject(Book.self, with: book.objectID)
            #expect(loaded.title == "Dune")
            #expect(loaded.pages == 412)
            #expect(loaded.price == Decimal(string: "9.50"))
            loaded.pages = nil
            #expect(try loaded.managedObject["pages"] == .null)
            #expect(loaded.lastError == nil)
        }
    }

    @Test func aModelThatDoesNotMatchTheSchemaIsRefusedWithEveryMismatch() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let error = entityStoreError { _ = try context.insert(Misfit.self) }
            #expect(error?.code == .typeMismatch)
            let messages = error?.failures.map(\.message) ?? []
            #expect(messages.contains("Misfit maps an int64 to a string"))
            #expect(messages.contains("Misfit maps 'subtitle', which Book does not have"))
            #expect(messages.contains("Misfit maps an optional attribute to a non-optional type"))
        }
    }

    @Test func anAccessorOnAnObjectDeletedElsewhereReportsItsError() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let book = try context.insert(Book.self)
            book.title = "Gone"
            try context.save()
            let reader = ObjectContext(store: store)
            let fault = try reader.model(Book.self, for: try reader.object(with: book.objectID))
            try context.delete(book.managedObject)
            try context.save()
            #expect(fault.title == "")
            #expect(fault.lastError?.code == .objectNotFound)
        }
    }
}
