import EntityStore
import Foundation
import TestSupport
import Testing

@Suite struct SaveTests {
    @Test func aFailedSaveReportsEveryFailureAndLeavesStoreAndContextUnchanged() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let existing = try context.insert("Tag")
            try existing.setValue("sf", forKey: "name")
            try context.save()

            let duplicate = try context.insert("Tag")
            try duplicate.setValue("sf", forKey: "name")
            let untitled = try context.insert("Book")  // title is required
            try existing.setValue("science fiction", forKey: "name")
            let publisher = try context.insert("Publisher")
            try publisher.setValue("P", forKey: "name")
            try untitled.setObject(publisher, forKey: "publisher")
            let before = (context.insertedObjects, context.updatedObjects, existing.changedValues())

            // "sf" is released by `existing` in the same save, so only the missing title fails.
            let error = entityStoreError { try context.save() }
            #expect(error?.code == .validationFailed)
            #expect(
                error?.failures.map(\.description) == ["Book.title (\(untitled.objectID)): a required value is missing"]
            )
            #expect(context.insertedObjects == before.0)
            #expect(context.updatedObjects == before.1)
            #expect(existing.changedValues() == before.2)
            #expect(try untitled.objectIDs(forKey: "publisher") == [publisher.objectID])

            let check = ObjectContext(store: store)
            let storedTag = try check.existingObject(with: existing.objectID)
            #expect(try storedTag["name"] == "sf")
            #expect(
                entityStoreError { _ = try check.existingObject(with: duplicate.objectID) }?.code == .objectNotFound)

            try untitled.setValue("Fixed", forKey: "title")
            try context.save()  // the retry succeeds
            #expect(!context.hasChanges)
        }
    }

    @Test func uniquenessIsCheckedAgainstTheStoreAndWithinTheSave() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let first = try context.insert("Author")
            try first.setValue("A", forKey: "name")
            try first.setValue("a@example.org", forKey: "email")
            try context.save()

            let clash = try context.insert("Author")
            try clash.setValue("B", forKey: "name")
            try clash.setValue("A@EXAMPLE.ORG", forKey: "email")  // case-insensitive unique
            let twinA = try context.insert("Tag")
            try twinA.setValue("x", forKey: "name")
            let twinB = try context.insert("Tag")
            try twinB.setValue("x", forKey: "name")
            let error = entityStoreError { try context.save() }
            #expect(error?.code == .validationFailed)
            #expect(error?.failures.count == 2)
            #expect(
                error?.failures.contains {
                    $0.key == "email" && $0.message.contains("\(first.objectID) already has it")
                } == true)
            #expect(error?.failures.contains { $0.key == "name" && $0.entity == "Tag" } == true)
        }
    }

    @Test func deletesCascadeOverThreeLevels() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let author = try context.insert("Author")
            try author.setValue("A", forKey: "name")
            var notes: [ObjectID] = []
            for b in 0..<2 {
                let book = try context.insert("Book")
                try book.setValue("B\(b)", forKey: "title")
                try book.setObject(author, forKey: "author")
                for c in 0..<2 {
                    let chapter = try context.insert("Chapter")
                    try chapter.setValue("C\(c)", forKey: "title")
                    try book.add(chapter, toKey: "chapters")
                    let note = try context.insert("Note")
                    try note.setValue("N", forKey: "text")
                    try note.setObject(chapter, forKey: "chapter")
                    notes.append(note.objectID)
                }
            }
            try context.save()
            #expect(try author.objects(forKey: "books").count == 2)

            let other = ObjectContext(store: store)
            try other.delete(try other.existingObject(with: author.objectID))
            try other.save()

            let check = ObjectContext(store: store)
            for id in notes + [author.objectID] {
                #expect(entityStoreError { _ = try check.existingObject(with: id) }?.code == .objectNotFound)
            }
        }
    }

    @Test func theDenyRuleRefusesADeleteWhileObjectsRemain() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let publisher = try context.insert("Publisher")
            try publisher.setValue("P", forKey: "name")
            let book = try context.insert("Book")
            try book.setValue("B", forKey: "title")
            try book.setObject(publisher, forKey: "publisher")
            try context.save()

            try context.delete(publisher)
            let error = entityStoreError { try context.save() }
            #expect(error?.code == .validationFailed)
            #expect(error?.failures.first?.key == "books")
            #expect(!publisher.isDeleted || context.deletedObjects == [publisher])
            context.rollback()
            try context.delete(book)
            try context.delete(publisher)
            try context.save()  // nothing left to deny
        }
    }

    @Test func nullifyRemovesTheDeletedObjectFromTheInverse() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let author = try context.insert("Author")
            try author.setValue("A", forKey: "name")
            let book = try context.insert("Book")
            try book.setValue("B", forKey: "title")
            try book.setObject(author, forKey: "author")
            try context.save()

            try context.delete(book)
            try context.save()
            #expect(try author.objects(forKey: "books").isEmpty)
            let check = ObjectContext(store: store)
            #expect(try check.existingObject(with: author.objectID).objectIDs(forKey: "books").isEmpty)
        }
    }

    @Test func manyToManyIsConsistentFromBothSides() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let books = try (0..<3).map { i in
                let book = try context.insert("Book")
                try book.setValue("B\(i)", forKey: "title")
                return book
            }
            let tags = try ["a", "b"].map { name in
                let tag = try context.insert("Tag")
                try tag.setValue(.string(name), forKey: "name")
                return tag
            }
            try books[0].add(tags[0], toKey: "tags")
            try books[0].add(tags[1], toKey: "tags")
            try tags[1].add(books[1], toKey: "books")
            try tags[1].add(books[2], toKey: "books")
            try context.save()

            let check = ObjectContext(store: store)
            let tagB = try check.existingObject(with: tags[1].objectID)
            #expect(try tagB.objectIDs(forKey: "books") == books.map(\.objectID))
            let book0 = try check.existingObject(with: books[0].objectID)
            #expect(try book0.objectIDs(forKey: "tags") == tags.map(\.objectID))

            try book0.remove(tagB, fromKey: "tags")
            try check.save()
            let again = ObjectContext(store: store)
            #expect(
                try again.existingObject(with: tags[1].objectID).objectIDs(forKey: "books") == [
                    books[1].objectID, books[2].objectID,
                ])
        }
    }

    @Test func settingAToOneMovesTheObjectBetweenInverses() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let first = try context.insert("Author")
            try first.setValue("1", forKey: "name")
            let second = try context.insert("Author")
            try second.setValue("2", forKey: "name")
            let book = try context.insert("Book")
            try book.setValue("B", forKey: "title")
            try book.setObject(first, forKey: "author")
            try context.save()
            try book.setObject(second, forKey: "author")
            #expect(try first.objects(forKey: "books").isEmpty)
            #expect(try second.objects(forKey: "books") == [book])
            try context.save()
            let check = ObjectContext(store: store)
            #expect(try check.existingObject(with: first.objectID).objectIDs(forKey: "books").isEmpty)
            #expect(try check.existingObject(with: book.objectID).objectIDs(forKey: "author") == [second.objectID])
        }
    }

    @Test func aConcurrentSaveOfTheSameObjectIsAConflict() throws {
        try withStore { store, _ in
            let setup = ObjectContext(store: store)
            let tag = try setup.insert("Tag")
            try tag.setValue("t", forKey: "name")
            try setup.save()

            let a = ObjectContext(store: store)
            let b = ObjectContext(store: store)
            try a.existingObject(with: tag.objectID).setValue("from a", forKey: "name")
            try b.existingObject(with: tag.objectID).setValue("from b", forKey: "name")
            try a.save()
            let error = entityStoreError { try b.save() }
            #expect(error?.code == .conflict)
            #expect(error?.objectID == tag.objectID)
            #expect(b.hasChanges)
        }
    }

    @Test func indexesFollowInsertsUpdatesAndDeletes() throws {
        try withStore { store, temporary in
            let context = ObjectContext(store: store)
            let book = try context.insert("Book")
            try book.setValue("B", forKey: "title")
            try book.setValue(100, forKey: "pages")
            try context.save()
            try book.setValue(200, forKey: "pages")
            try context.save()
            let index = try store.environment.openDatabase("index.Book.pages", dupSort: true, create: false)
            func entries() throws -> Int { try store.environment.read { try $0.statistics(index).entries } }
            #expect(try entries() == 1)
            try context.delete(book)
            try context.save()
            #expect(try entries() == 0)
            _ = temporary
        }
    }

    /// A save appends its new records when their keys are above every stored key, and puts them in place when
    /// another context saved higher keys first.
    @Test func insertsBelowAnotherContextsSavedKeysArePutInPlace() throws {
        try withStore { store, _ throws in
            let first = ObjectContext(store: store)
            let second = ObjectContext(store: store)
            let early = try first.insert("Tag")  // the first block of keys
            try early.setValue("early", forKey: "name")
            for i in 0..<300 {  // the second context goes past a block
                try second.insert("Tag").setValue(.string("second \(i)"), forKey: "name")
            }
            try second.save()
            for i in 0..<5 { try first.insert("Tag").setValue(.string("first \(i)"), forKey: "name") }
            try first.save()
            let all = try ObjectContext(store: store).fetch(FetchRequest(entity: "Tag", sortKeys: [SortKey("name")]))
            #expect(all.count == 306)
            #expect(try store.checkIntegrity().findings.isEmpty)
            #expect(try ObjectContext(store: store).existingObject(with: early.objectID)["name"] == "early")
        }
    }
}
