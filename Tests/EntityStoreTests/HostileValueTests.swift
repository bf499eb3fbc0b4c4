import Foundation
import LMDB
import TestSupport
import Testing

@testable import EntityStore

final class PricedBook: Model {
    override class var entityName: String { "Book" }
    @Stored("title") var title: String
    @Stored("price") var price: Decimal?
}

/// Values the format cannot hold are refused where they are set; a damaged record is named, and the rest of its
/// entity stays readable.
@Suite struct HostileValueTests {
    @Test func decimalNaNIsRefusedWhereverItIsSet() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let book = try context.insert("Book")
            try book.setValue("Dune", forKey: "title")
            let error = entityStoreError { try book.setValue(.decimal(.nan), forKey: "price") }
            #expect(error?.code == .invalidValue)
            #expect(error?.message == "Book.price: Decimal.nan is not a number and cannot be stored")
            try context.save()
            #expect(try ObjectContext(store: store).fetch(FetchRequest(entity: "Book")).count == 1)

            let batch = entityStoreError {
                _ = try store.batchInsert(into: "Book", objects: [["title": "a", "price": .decimal(.nan)]])
            }
            #expect(
                batch?.failures.first?.message == "object 0: price: Decimal.nan is not a number and cannot be stored")

            let schema = entityStoreError {
                _ = try Schema(version: 1) { Entity("E") { Attribute("d", .decimal, default: .decimal(.nan)) } }
            }
            #expect(schema?.code == .invalidSchema)
        }
    }

    @Test func aTypedSetterThatCannotWriteMakesTheNextSaveThrow() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let book = try context.insert(PricedBook.self)
            book.title = "Dune"
            book.price = Decimal.nan
            #expect(book.lastError?.code == .invalidValue)
            #expect(book.price == nil, "nothing was written")
            let error = entityStoreError { try context.save() }
            #expect(error?.code == .invalidValue)
            #expect(error?.key == "price")
            // Reported once: the app decided what to do; the next save goes through.
            try context.save()
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Book")) == 1)
        }
    }

    @Test func aDamagedRecordIsNamedAndTheOthersStayReadable() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            var ids: [ObjectID] = []
            for title in ["a", "b", "c"] {
                let book = try context.insert("Book")
                try book.setValue(.string(title), forKey: "title")
                ids.append(book.objectID)
            }
            try context.save()
            try store.environment.write { txn in
                let key = withUnsafeBytes(of: ids[1].primaryKey.bigEndian) { Array($0) }
                try txn.put(key, [1, 1, 99], in: try txn.openDatabase("records.Book"))
            }
            let reader = ObjectContext(store: store)
            let error = entityStoreError { _ = try reader.fetch(FetchRequest(entity: "Book")) }
            #expect(error?.code == .corruptData)
            #expect(error?.objectID == ids[1])
            #expect(error?.message.contains("\(ids[1])") == true)
            #expect(try reader.existingObject(with: ids[0])["title"] == "a")
            let fault = entityStoreError { _ = try reader.existingObject(with: ids[1]) }
            #expect(fault?.objectID == ids[1])
            // A predicate the record filter decides whole, read for IDs or a count only (no record decoded for
            // what the filter accepts): the record it cannot read still takes the full path, which names it.
            let decided = FetchRequest(entity: "Book", predicate: try FetchPredicate("score >= 0.0"))
            let counting = entityStoreError { _ = try ObjectContext(store: store).count(for: decided) }
            #expect(counting?.code == .corruptData)
            #expect(counting?.objectID == ids[1])
            let listing = entityStoreError { _ = try ObjectContext(store: store).fetchObjectIDs(decided) }
            #expect(listing?.code == .corruptData)
            #expect(listing?.objectID == ids[1])
        }
    }
}

/// Predicates built in code, however deep, are either flattened or refused with a clear error: never a stack
/// overflow.
@Suite struct DeepPredicateTests {
    /// Runs `body` on a thread with a large stack, so that building and releasing a deep value cannot be what
    /// overflows.
    static func onLargeStack(_ body: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            body()
            done.signal()
        }
        thread.stackSize = 64 << 20
        thread.start()
        done.wait()
    }

    @Test func tenThousandClausesAddedOneByOneStayOneLevel() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let book = try context.insert("Book")
            try book.setValue("Dune", forKey: "title")
            try book.setValue(500, forKey: "pages")
            try context.save()
            var predicate: FetchPredicate = .key("pages") > 0
            for i in 0..<10_000 { predicate = predicate && .key("pages") != .int(Int64(-i - 1)) }
            var alternatives: FetchPredicate = .key("pages") == 1
            for i in 0..<10_000 { alternatives = alternatives || .key("pages") == .int(Int64(i + 2)) }
            #expect(predicate.nesting == 2 && alternatives.nesting == 2)
            #expect(try context.count(for: FetchRequest(entity: "Book", predicate: predicate)) == 1)
            #expect(try context.count(for: FetchRequest(entity: "Book", predicate: alternatives)) == 1)
        }
    }

    @Test func aPredicateNestedThousandsOfLevelsIsRefusedClearly() throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        let outcome = LockedMessage()
        Self.onLargeStack {
            var predicate: FetchPredicate = .key("pages") > 0
            for i in 0..<10_000 {
                predicate = i % 2 == 0 ? !predicate : (predicate || .key("pages") == 1) && .key("title") != "x"
            }
            do {
                _ = try ObjectContext(store: store).fetch(FetchRequest(entity: "Book", predicate: predicate))
                outcome.set("fetched")
            } catch let error as EntityStoreError {
                outcome.set("\(error.code): \(error.message)")
            } catch {
                outcome.set("\(error)")
            }
        }
        #expect(outcome.value?.hasPrefix("invalidPredicate: the predicate nests") == true, "\(outcome.value ?? "")")
        // Right at the limit it runs.
        var predicate: FetchPredicate = .key("pages") > 0
        for _ in 0..<(FetchPredicate.maximumNesting - 1) { predicate = !predicate }
        _ = try ObjectContext(store: store).fetch(FetchRequest(entity: "Book", predicate: predicate))
    }
}

final class LockedMessage: @unchecked Sendable {
    // @unchecked Sendable: `message` is only touched while `lock` is held.
    private let lock = NSLock()
    private var message: String?
    func set(_ value: String) { lock.withLock { message = value } }
    var value: String? { lock.withLock { message } }
}

/// A controller that cannot read the rows of a change says so, instead of treating them as gone.
@Suite struct ControllerFailureTests {
    @Test func anUnreadableRowIsAFailureNotARemoval() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let tag = try context.insert("Tag")
            try tag.setValue("a", forKey: "name")
            try context.save()
            let controller = FetchedResultsController(
                fetchRequest: FetchRequest(entity: "Tag", sortKeys: [SortKey("name")]), context: context)
            let delegate = RecordingDelegate()
            controller.delegate = delegate
            try controller.performFetch()

            let other = ObjectContext(store: store)
            try other.existingObject(with: tag.objectID).setValue("b", forKey: "name")
            try other.save()
            let key = withUnsafeBytes(of: tag.objectID.primaryKey.bigEndian) { Array($0) }
            let good = try store.environment.read { txn in
                try txn.get(key, in: try txn.openDatabase("records.Tag")).map(Array.init)
            }
            try store.environment.write { txn in try txn.put(key, [1, 7], in: try txn.openDatabase("records.Tag")) }
            context.merge(try store.history().last!)
            #expect(delegate.calls.count == 1 && delegate.calls[0].hasPrefix("failed:"), "\(delegate.calls)")
            #expect(controller.failure?.code == .corruptData)
            #expect(controller.failure?.objectID == tag.objectID)
            #expect(controller.fetchedObjectIDs == [tag.objectID], "the row was not dropped")

            // Repaired, a new fetch starts following changes again.
            try store.environment.write { txn in try txn.put(key, good!, in: try txn.openDatabase("records.Tag")) }
            try controller.performFetch()
            #expect(controller.failure == nil)
        }
    }
}
