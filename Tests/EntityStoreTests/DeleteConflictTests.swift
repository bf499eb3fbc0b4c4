import EntityStore
import Foundation
import TestSupport
import Testing

/// Deletes take part in optimistic locking like updates: a delete of an object saved or deleted elsewhere since
/// it was read is a conflict under `.error`, and every other policy has a defined outcome.
@Suite struct DeleteConflictTests {
    /// Two authors ("x" with rating 100, "y" with rating 0) read by `mine`; `theirs` then sets x's rating to 150.
    struct Ledger {
        let temporary: TemporaryStore
        let mine: ObjectContext
        let x: ManagedObject
        let y: ManagedObject
        var store: PersistentStore { temporary.store }

        init(policy: MergePolicy, changeElsewhere: (ManagedObject) throws -> Void) throws {
            temporary = try TemporaryStore()
            let setup = ObjectContext(store: temporary.store)
            for (name, rating) in [("x", 100), ("y", 0)] {
                let author = try setup.insert("Author")
                try author.setValue(.string(name), forKey: "name")
                try author.setValue(.int(Int64(rating)), forKey: "rating")
            }
            try setup.save()
            mine = ObjectContext(store: temporary.store)
            mine.mergePolicy = policy
            let authors = try mine.fetch(FetchRequest(entity: "Author", sortKeys: [SortKey("name")]))
            (x, y) = (authors[0], authors[1])
            _ = try x["rating"]
            let theirs = ObjectContext(store: temporary.store)
            try changeElsewhere(try theirs.existingObject(with: x.objectID))
            try theirs.save()
        }

        /// Deletes x and moves its rating, as read here, to y.
        func moveAndDelete() throws {
            guard case .int(let amount) = try x["rating"] else { return }
            try y.setValue(.int(amount), forKey: "rating")
            try mine.delete(x)
        }

        func storedRatings() throws -> [String: Int64] {
            var result: [String: Int64] = [:]
            for author in try ObjectContext(store: store).fetch(FetchRequest(entity: "Author")) {
                if case .string(let name) = try author["name"], case .int(let rating) = try author["rating"] {
                    result[name] = rating
                }
            }
            return result
        }

        func deletes(of id: ObjectID) throws -> Int {
            try store.history().flatMap(\.changes).filter { $0.objectID == id && $0.kind == .delete }.count
        }
    }

    static func raise(_ object: ManagedObject) throws { try object.setValue(150, forKey: "rating") }

    @Test func deletingAnObjectChangedElsewhereIsAConflictAndCreatesNoMoney() throws {
        let ledger = try Ledger(policy: .error, changeElsewhere: Self.raise)
        defer { ledger.temporary.remove() }
        try ledger.moveAndDelete()
        let error = entityStoreError { try ledger.mine.save() }
        #expect(error?.code == .conflict)
        #expect(error?.failures.map(\.objectID) == [ledger.x.objectID])
        #expect(error?.message.contains("saved elsewhere") == true)
        #expect(try ledger.storedRatings() == ["x": 150, "y": 0])
        // The context is as it was before the save: it can refresh and decide again.
        #expect(ledger.x.isDeleted)
    }

    @Test func twoContextsDeletingOneObjectWriteOneDelete() throws {
        let ledger = try Ledger(policy: .error) { try $0.context!.delete($0) }
        defer { ledger.temporary.remove() }
        try ledger.mine.delete(ledger.x)
        let error = entityStoreError { try ledger.mine.save() }
        #expect(error?.code == .conflict)
        #expect(error?.message.contains("deleted elsewhere") == true)
        #expect(try ledger.deletes(of: ledger.x.objectID) == 1)

        // Under a policy that lets the save through, the second delete writes nothing, not even a history entry.
        let before = try ledger.store.lastTransaction()
        ledger.mine.mergePolicy = .contextWins
        try ledger.mine.save()
        #expect(try ledger.store.lastTransaction() == before)
        #expect(try ledger.deletes(of: ledger.x.objectID) == 1)
        #expect(!ledger.mine.hasChanges)
    }

    @Test(arguments: [MergePolicy.contextWins, .propertyLevel])
    func theContextsDeleteWinsUnderContextAndPropertyPolicies(policy: MergePolicy) throws {
        let ledger = try Ledger(policy: policy, changeElsewhere: Self.raise)
        defer { ledger.temporary.remove() }
        try ledger.moveAndDelete()
        try ledger.mine.save()
        #expect(try ledger.storedRatings() == ["y": 100])
        #expect(try ledger.deletes(of: ledger.x.objectID) == 1)
    }

    /// An update of an object deleted elsewhere since it was read: the delete stands under every policy. Under
    /// `contextWins` the save wrote the object back, recorded as an update of an object no one had (a history
    /// reader or another process saw a change of nothing), with none of its links and with a unique value that
    /// another object had taken meanwhile.
    @Test(arguments: [MergePolicy.storeWins, .propertyLevel, .contextWins])
    func anUpdateOfAnObjectDeletedElsewhereLeavesItDeleted(policy: MergePolicy) throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        let setup = ObjectContext(store: store)
        let x = try setup.insert("Author")
        try x.setValue("x", forKey: "name")
        try x.setValue("x@example.org", forKey: "email")
        let y = try setup.insert("Author")
        try y.setValue("y", forKey: "name")
        let book = try setup.insert("Book")
        try book.setValue("Momo", forKey: "title")
        try book.setObject(x, forKey: "author")
        try setup.save()
        let mine = ObjectContext(store: store)
        mine.mergePolicy = policy
        let myX = try mine.existingObject(with: x.objectID)
        _ = try myX["rating"]
        // Elsewhere x is deleted (its book with it), and another author takes its email.
        try setup.delete(x)
        let z = try setup.insert("Author")
        try z.setValue("z", forKey: "name")
        try z.setValue("x@example.org", forKey: "email")
        try setup.save()

        try myX.setValue(.int(170), forKey: "rating")
        try mine.existingObject(with: y.objectID).setValue(.int(5), forKey: "rating")
        let before = try store.lastTransaction()
        try mine.save()
        let stored = try ObjectContext(store: store).fetch(FetchRequest(entity: "Author", sortKeys: [SortKey("name")]))
        #expect(try stored.map { try $0["name"] } == ["y", "z"])
        #expect(try stored.map { try $0["rating"] } == [.int(5), .int(0)])
        #expect(myX.isDeleted || myX.context == nil)
        let saved = try store.history(since: before).flatMap(\.changes)
        #expect(saved.map(\.objectID) == [y.objectID])
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    @Test func anUpdateOfAnObjectDeletedElsewhereIsAConflictUnderTheErrorPolicy() throws {
        let ledger = try Ledger(policy: .error) { try $0.context!.delete($0) }
        defer { ledger.temporary.remove() }
        try ledger.x.setValue(.int(170), forKey: "rating")
        let error = entityStoreError { try ledger.mine.save() }
        #expect(error?.code == .conflict)
        #expect(error?.message.contains("deleted elsewhere") == true)
        #expect(try ledger.storedRatings() == ["y": 0])
    }

    /// A tag linked to a book, read by `mine` (the book's values too when `readsTheBook`); elsewhere the book is
    /// deleted; then `mine` unlinks it from the tag, which changes only the book's `tags` (loaded) as the inverse
    /// side.
    private func unlinkABookDeletedElsewhere(
        policy: MergePolicy, readsTheBook: Bool
    ) throws -> (TemporaryStore, ObjectContext, tag: ObjectID, book: ObjectID, before: UInt64) {
        let temporary = try TemporaryStore()
        let setup = ObjectContext(store: temporary.store)
        let tag = try setup.insert("Tag")
        try tag.setValue("fable", forKey: "name")
        let book = try setup.insert("Book")
        try book.setValue("Momo", forKey: "title")
        try tag.add(book, toKey: "books")
        try setup.save()
        let mine = ObjectContext(store: temporary.store)
        mine.mergePolicy = policy
        let myTag = try mine.existingObject(with: tag.objectID)
        let myBook = try #require(try myTag.objects(forKey: "books").first)
        if readsTheBook { _ = try myBook["title"] }
        // The book's side loaded, so that the unlink changes it here.
        #expect(try myBook.objectIDs(forKey: "tags") == [tag.objectID])
        try setup.delete(book)
        try setup.save()
        let before = try temporary.store.lastTransaction()
        try myTag.remove(myBook, fromKey: "books")
        #expect(myBook.hasChanges)
        return (temporary, mine, tag.objectID, book.objectID, before)
    }

    /// The book's only change is the inverse side of the unlink, which the delete elsewhere already made: under every
    /// policy the save writes the tag's side and records no update of the deleted book (a history reader saw a change
    /// of an object no one has), and the book stays deleted here.
    @Test(arguments: [MergePolicy.error, .storeWins, .propertyLevel, .contextWins], [true, false])
    func anUnlinkOfAnObjectDeletedElsewhereRecordsNoUpdateOfIt(policy: MergePolicy, readsTheBook: Bool) throws {
        let (temporary, mine, tag, book, before) = try unlinkABookDeletedElsewhere(
            policy: policy, readsTheBook: readsTheBook)
        defer { temporary.remove() }
        try mine.save()
        let saved = try temporary.store.history(since: before).flatMap(\.changes)
        #expect(saved.map(\.objectID) == [tag])
        #expect(saved.first?.changedKeys == ["books"])
        #expect(!mine.registeredObjects.map(\.objectID).contains(book))
        #expect(!mine.hasChanges)
        #expect(try temporary.store.checkIntegrity().findings.isEmpty)
    }

    @Test func storeWinsKeepsTheStoredObjectAndDropsTheDeleteAndItsCascade() throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        let setup = ObjectContext(store: store)
        let author = try setup.insert("Author")
        try author.setValue("Ende", forKey: "name")
        let book = try setup.insert("Book")
        try book.setValue("Momo", forKey: "title")
        try book.setObject(author, forKey: "author")
        let tag = try setup.insert("Tag")
        try tag.setValue("fable", forKey: "name")
        try setup.save()

        let mine = ObjectContext(store: store)
        mine.mergePolicy = .storeWins
        let myAuthor = try mine.existingObject(with: author.objectID)
        let theirs = ObjectContext(store: store)
        try theirs.existingObject(with: author.objectID).setValue("Michael Ende", forKey: "name")
        try theirs.save()
        // Delete the author (its books cascade) and, in the same save, rename the tag.
        try mine.delete(myAuthor)
        try mine.existingObject(with: tag.objectID).setValue("fairy tale", forKey: "name")
        try mine.save()

        let check = ObjectContext(store: store)
        #expect(try check.existingObject(with: author.objectID)["name"] == "Michael Ende")
        #expect(try check.existingObject(with: book.objectID)["title"] == "Momo", "the cascade was dropped too")
        #expect(try check.existingObject(with: tag.objectID)["name"] == "fairy tale", "the rest of the save")
        #expect(!myAuthor.isDeleted)
        #expect(try myAuthor["name"] == "Michael Ende")
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    @Test func storeWinsKeepsAnObjectReachedByACascadeAndUnlinksIt() throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        let setup = ObjectContext(store: store)
        let author = try setup.insert("Author")
        try author.setValue("Ende", forKey: "name")
        let book = try setup.insert("Book")
        try book.setValue("Momo", forKey: "title")
        try book.setObject(author, forKey: "author")
        try setup.save()

        let mine = ObjectContext(store: store)
        mine.mergePolicy = .storeWins
        let myBook = try mine.existingObject(with: book.objectID)
        let theirs = ObjectContext(store: store)
        try theirs.existingObject(with: book.objectID).setValue("Momo (new edition)", forKey: "title")
        try theirs.save()
        try mine.delete(try mine.existingObject(with: author.objectID))
        try mine.save()

        let check = ObjectContext(store: store)
        #expect(entityStoreError { _ = try check.existingObject(with: author.objectID) }?.code == .objectNotFound)
        let kept = try check.existingObject(with: book.objectID)
        #expect(try kept["title"] == "Momo (new edition)")
        #expect(try kept.object(forKey: "author") == nil)
        #expect(!myBook.isDeleted)
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    /// A save that drops a delete the store kept and then fails leaves the context as it was before the save: the
    /// delete still there, and every view with pending changes still matching the context. The retry is refused
    /// because the kept tag holds the name a new tag of this context takes over.
    @Test func aSaveRefusedAfterDroppingAKeptDeleteLeavesTheDelete() throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        let setup = ObjectContext(store: store)
        let tag = try setup.insert("Tag")
        try tag.setValue("fable", forKey: "name")
        try setup.save()

        let mine = ObjectContext(store: store)
        mine.mergePolicy = .storeWins
        let request = FetchRequest(entity: "Tag", sortKeys: [SortKey("name")])
        let controller = FetchedResultsController(fetchRequest: request, context: mine)
        try controller.performFetch()
        let myTag = try mine.existingObject(with: tag.objectID)
        let theirs = ObjectContext(store: store)
        try theirs.existingObject(with: tag.objectID).setValue("fairy tale", forKey: "name")
        try theirs.save()

        try mine.delete(myTag)
        let replacement = try mine.insert("Tag")
        try replacement.setValue("fairy tale", forKey: "name")
        mine.processPendingChanges()
        #expect(controller.sections.flatMap(\.objectIDs) == [replacement.objectID])
        let error = entityStoreError { try mine.save() }
        #expect(error?.code == .validationFailed)
        #expect(error?.message.contains("must be unique") == true)

        #expect(myTag.isDeleted, "the delete the failed save had dropped is back")
        #expect(mine.deletedObjects.map(\.objectID) == [tag.objectID])
        #expect(mine.insertedObjects.map(\.objectID) == [replacement.objectID])
        mine.processPendingChanges()
        #expect(controller.sections.flatMap(\.objectIDs) == (try mine.fetch(request)).map(\.objectID))
        #expect(controller.sections.flatMap(\.objectIDs) == [replacement.objectID])
        // Renamed, the new tag no longer clashes: the save drops the kept delete and writes the rest.
        try replacement.setValue("parable", forKey: "name")
        try mine.save()
        let check = ObjectContext(store: store)
        #expect(try check.fetch(request).map { try $0["name"] } == ["fairy tale", "parable"])
        #expect(controller.sections.flatMap(\.objectIDs) == (try check.fetch(request)).map(\.objectID))
    }
}
