import EntityStore
import Foundation
import TestSupport
import Testing

@Suite struct ContextTests {
    @Test func insertedObjectsSaveAndReadBackInANewContext() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let book = try context.insert("Book")
            try book.setValue("Dune", forKey: "title")
            try book.setValue(412, forKey: "pages")
            try book.setValue(.decimal(Decimal(string: "9.99")!), forKey: "price")
            #expect(book.isInserted)
            #expect(context.insertedObjects == [book])
            try context.save()
            #expect(!book.isInserted)
            #expect(!context.hasChanges)

            let other = ObjectContext(store: store)
            let loaded = try other.existingObject(with: book.objectID)
            #expect(try loaded["title"] == "Dune")
            #expect(try loaded["pages"] == 412)
            #expect(try loaded["price"] == .decimal(Decimal(string: "9.99")!))
            #expect(try loaded["inPrint"] == true)  // the default
            #expect(try loaded["score"] == 0.0)
        }
    }

    @Test func oneObjectPerIDAndFaultsLoadOnFirstAccess() throws {
        try withStore { store, _ in
            let writer = ObjectContext(store: store)
            let book = try writer.insert("Book")
            try book.setValue("Emma", forKey: "title")
            try writer.save()

            let reader = ObjectContext(store: store)
            let first = try reader.object(with: book.objectID)
            let second = try reader.object(with: book.objectID)
            #expect(first === second)
            #expect(first.isFault)
            #expect(try first["title"] == "Emma")
            #expect(!first.isFault)
            #expect(try reader.existingObject(with: book.objectID) === first)
        }
    }

    @Test func touchingAnObjectDeletedElsewhereIsATypedError() throws {
        try withStore { store, _ in
            let writer = ObjectContext(store: store)
            let book = try writer.insert("Book")
            try book.setValue("Gone", forKey: "title")
            try writer.save()

            let reader = ObjectContext(store: store)
            let fault = try reader.object(with: book.objectID)
            try writer.delete(book)
            try writer.save()
            let error = entityStoreError { _ = try fault["title"] }
            #expect(error?.code == .objectNotFound)
            #expect(error?.entity == "Book")
            #expect(error?.objectID == book.objectID)
            let missing = ObjectID(entityName: "Book", primaryKey: 999_999)
            #expect(entityStoreError { _ = try reader.existingObject(with: missing) }?.code == .objectNotFound)
            let unknown = ObjectID(entityName: "Spaceship", primaryKey: 1)
            #expect(entityStoreError { _ = try reader.object(with: unknown) }?.code == .unknownEntity)
        }
    }

    @Test func objectIDsAreStableAcrossSaveAndTheirURIsRoundTrip() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let tag = try context.insert("Tag")
            try tag.setValue("sf", forKey: "name")
            let before = tag.objectID
            try context.save()
            #expect(tag.objectID == before)
            let uri = store.uri(for: before)
            #expect(uri.hasPrefix("entitystore://\(store.storeID.uuidString)/Tag/p"))
            #expect(try store.objectID(forURI: uri) == before)
            #expect(
                entityStoreError { _ = try store.objectID(forURI: "entitystore://other/Tag/p1") }?.code
                    == .invalidObjectID)
            #expect(entityStoreError { _ = try store.objectID(from: "Ship/p1") }?.code == .unknownEntity)
        }
    }

    /// IDs hash by their key alone, without a `Hasher`: equal IDs hash equally, IDs of two entities with one key
    /// stay distinct, and sequential and sparse keys all find their entries in sets and dictionaries.
    @Test func objectIDsHashForSetsAndDictionaries() {
        let keys: [UInt64] = Array(1...50_000) + (0..<64).map { 1 << $0 } + [.max, .max - 1]
        var set = Set<ObjectID>()
        var byID: [ObjectID: UInt64] = [:]
        for key in keys where key != 0 {
            set.insert(ObjectID(entityName: "Tag", primaryKey: key))
            set.insert(ObjectID(entityName: "Book", primaryKey: key))
            byID[ObjectID(entityName: "Tag", primaryKey: key)] = key
        }
        let distinct = Set(keys).count
        #expect(set.count == 2 * distinct)
        #expect(byID.count == distinct)
        #expect(keys.allSatisfy { byID[ObjectID(entityName: "Tag", primaryKey: $0)] == $0 })
        #expect(byID[ObjectID(entityName: "Book", primaryKey: 1)] == nil)
        let id = ObjectID(entityName: "Tag", primaryKey: 42)
        #expect(id.hashValue == ObjectID(entityName: String("Ta") + "g", primaryKey: 42).hashValue)
        // Sequential keys spread over the buckets: the low bits of their hashes are not all alike.
        #expect(Set((1...1_024).map { ObjectID(entityName: "Tag", primaryKey: $0).hashValue & 1_023 }).count > 600)
    }

    @Test func changeTrackingReportsChangedAndCommittedValues() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let author = try context.insert("Author")
            try author.setValue("Le Guin", forKey: "name")
            try author.setValue(3, forKey: "rating")
            #expect(try author.committedValues(forKeys: ["name"]).isEmpty)  // inserted: nothing stored yet
            try context.save()

            try author.setValue(5, forKey: "rating")
            #expect(author.isUpdated)
            #expect(author.changedValues() == ["rating": 5])
            #expect(try author.committedValues(forKeys: ["rating"]) == ["rating": 3])
            #expect(context.updatedObjects == [author])
            try author.setValue(3, forKey: "rating")  // back to the stored value
            #expect(!author.isUpdated)
            #expect(!context.hasChanges)
        }
    }

    @Test func writingAnEqualValueIsNoChange() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let author = try context.insert("Author")
            try author.setValue("Same", forKey: "name")
            try context.save()
            try author.setValue("Same", forKey: "name")
            #expect(!context.hasChanges)
            #expect(!context.canUndo)
        }
    }

    @Test func wrongTypesAndUnknownKeysAreRefusedWithTheirNames() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let book = try context.insert("Book")
            let type = entityStoreError { try book.setValue("many", forKey: "pages") }
            #expect(type?.code == .typeMismatch)
            #expect(type?.key == "pages")
            let unknown = entityStoreError { try book.setValue(1, forKey: "weight") }
            #expect(unknown?.code == .unknownKey)
            #expect(unknown?.message == "Book has no attribute 'weight'")
        }
    }

    @Test func anObjectInsertedAndDeletedTakesItsCascadeAlong() throws {
        try withStore(schema: try Fixtures.projectSchema()) { store, _ in
            let context = ObjectContext(store: store)
            let saved = try context.insert("Task")
            try saved.setValue("saved", forKey: "title")
            let tag = try context.insert("Tag")
            try tag.setValue("hot", forKey: "name")
            try saved.add(tag, toKey: "tags")
            try context.save()

            // A new project given a saved task and a new one, then deleted before any save: the cascade deletes
            // both, as it would once the project was saved; the tag (nullify) keeps nothing of them.
            context.beginUndoGrouping()
            let project = try context.insert("Project")
            try project.setValue("draft", forKey: "name")
            let fresh = try context.insert("Task")
            try fresh.setValue("fresh", forKey: "title")
            try fresh.setObject(project, forKey: "project")
            try saved.setObject(project, forKey: "project")
            context.endUndoGrouping()
            context.beginUndoGrouping()
            try context.delete(project)
            context.endUndoGrouping()
            #expect(saved.isDeleted && fresh.isDeleted)
            #expect(context.deletedObjects == [saved])
            #expect(context.insertedObjects.isEmpty)

            // Undone, the project and its tasks are back as they were.
            try context.undoLastChange()
            #expect(!project.isDeleted && !saved.isDeleted && !fresh.isDeleted)
            #expect(try Set(project.objectIDs(forKey: "tasks")) == [saved.objectID, fresh.objectID])
            try context.redoLastChange()
            try context.save()
            let reader = ObjectContext(store: store)
            #expect(try reader.count(for: FetchRequest(entity: "Task")) == 0)
            #expect(try reader.count(for: FetchRequest(entity: "Project")) == 0)
            #expect(try reader.fetch(FetchRequest(entity: "Tag"))[0].objectIDs(forKey: "tasks").isEmpty)
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func rollbackDiscardsInsertsUpdatesAndDeletes() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let kept = try context.insert("Tag")
            try kept.setValue("kept", forKey: "name")
            let doomed = try context.insert("Tag")
            try doomed.setValue("doomed", forKey: "name")
            try context.save()

            try kept.setValue("renamed", forKey: "name")
            try context.delete(doomed)
            let fresh = try context.insert("Tag")
            try fresh.setValue("fresh", forKey: "name")
            context.rollback()
            #expect(!context.hasChanges)
            #expect(try kept["name"] == "kept")
            #expect(!doomed.isDeleted)
            #expect(fresh.context == nil)
            #expect(context.registeredObjects.count == 2)
        }
    }

    @Test func resetForgetsEverythingAndRefreshReloads() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let tag = try context.insert("Tag")
            try tag.setValue("a", forKey: "name")
            try context.save()

            let other = ObjectContext(store: store)
            let same = try other.existingObject(with: tag.objectID)
            try same.setValue("b", forKey: "name")
            try other.save()

            #expect(try tag["name"] == "a")  // still the values it loaded
            try context.refresh(tag, mergeChanges: false)
            #expect(tag.isFault)
            #expect(try tag["name"] == "b")

            context.reset()
            #expect(context.registeredObjects.isEmpty)
            #expect(tag.context == nil)
        }
    }

    /// An object looked up by ID keeps its record and reads its first numbers from it alone: every value read, in any
    /// order and however many, is the stored one; a missing object still fails the lookup, and a write after the
    /// reads changes only what it writes.
    @Test func anObjectLookedUpByIDReadsItsValuesFromTheKeptRecord() throws {
        try withStore { store, _ in
            let seed = ObjectContext(store: store)
            let book = try seed.insert("Book")
            try book.setValue("Momo", forKey: "title")
            try book.setValue(304, forKey: "pages")
            try book.setValue(12.5, forKey: "score")
            try book.setValue(false, forKey: "inPrint")
            try seed.save()
            let orders: [[String]] = [
                ["pages"], ["pages", "score", "title"], ["score", "pages", "inPrint", "isbn", "pages", "title"],
                ["title", "pages"], ["isbn", "inPrint", "cover"],
            ]
            for order in orders {
                let context = ObjectContext(store: store)
                let object = try context.existingObject(with: book.objectID)
                for key in order {
                    #expect(try object[key] == book[key], "\(order): \(key)")
                }
            }
            let context = ObjectContext(store: store)
            let object = try context.existingObject(with: book.objectID)
            #expect(try object["pages"] == 304)
            try object.setValue(305, forKey: "pages")
            #expect(try object["score"] == 12.5 && object["title"] == "Momo" && object["pages"] == 305)
            try context.save()
            #expect(try ObjectContext(store: store).existingObject(with: book.objectID)["pages"] == 305)
            let missing = entityStoreError {
                _ = try context.existingObject(with: ObjectID(entityName: "Book", primaryKey: 999_999))
            }
            #expect(missing?.code == .objectNotFound)
        }
    }

    /// An object's reference to its context is unretained: an object the app keeps after releasing its context (a
    /// fetched one, an inserted one, a child's) reports no context, reads what it loaded and refuses writes, instead
    /// of reaching a released context.
    @Test func objectsThatOutliveTheirContextReportNoContextAndRefuseWrites() throws {
        try withStore { store, _ in
            let seed = ObjectContext(store: store)
            try seed.insert("Tag").setValue("kept", forKey: "name")
            try seed.save()
            var fetched: ManagedObject?
            var inserted: ManagedObject?
            var childObject: ManagedObject?
            weak var released: ObjectContext?
            weak var releasedChild: ObjectContext?
            do {
                let context = ObjectContext(store: store)
                released = context
                fetched = try context.fetch(FetchRequest(entity: "Tag")).first
                _ = try fetched?["name"]
                inserted = try context.insert("Tag")
                let child = ObjectContext(parent: context)
                releasedChild = child
                childObject = try child.insert("Tag")
                #expect(fetched?.context === context && childObject?.context === child)
            }
            #expect(released == nil && releasedChild == nil)
            for object in [fetched, inserted, childObject] {
                #expect(object?.context == nil)
                let refused = entityStoreError { try object?.setValue("late", forKey: "name") }
                #expect(refused?.code == .invalidObject)
            }
            #expect(try fetched?["name"] == "kept")
        }
    }

    /// An object whose delete was saved, or whose context was reset, is named as no longer in a context when it is
    /// deleted or linked again, not as another context's.
    @Test func anObjectThatLeftItsContextIsNamedSoWhenUsedAgain() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let gone = try context.insert("Tag")
            try gone.setValue("gone", forKey: "name")
            let kept = try context.insert("Book")
            try kept.setValue("kept", forKey: "title")
            try context.save()
            try context.delete(gone)
            try context.save()
            let again = entityStoreError { try context.delete(gone) }
            #expect(again?.code == .invalidObject)
            #expect(again?.message.contains("no longer registered in a context (it was deleted") == true, "\(again!)")
            let linked = entityStoreError { try gone.add(kept, toKey: "books") }
            #expect(linked?.message.contains("no longer registered in a context") == true)
            let book = try context.existingObject(with: kept.objectID)
            context.reset()
            let afterReset = entityStoreError { try ObjectContext(store: store).delete(book) }
            #expect(afterReset?.message.contains("no longer registered in a context") == true)
            let other = ObjectContext(store: store)
            let foreign = try other.existingObject(with: kept.objectID)
            #expect(
                entityStoreError { try context.delete(foreign) }?.message.contains("belongs to another context") == true
            )
        }
    }

    /// A write after its object left the unsaved set (a refresh discarding its changes, a save) is unsaved again:
    /// the context skips the set insert only for the object it inserted last while it is still there.
    @Test func aWriteAfterARefreshOrASaveIsUnsavedAgain() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let tag = try context.insert("Tag")
            try tag.setValue("a", forKey: "name")
            try context.save()
            try tag.setValue("b", forKey: "name")
            try context.refresh(tag, mergeChanges: false)
            #expect(!context.hasChanges)
            try tag.setValue("c", forKey: "name")
            #expect(context.hasChanges && context.updatedObjects == [tag])
            try context.save()
            try tag.setValue("d", forKey: "name")
            #expect(context.updatedObjects == [tag])
            try context.save()
            #expect(try ObjectContext(store: store).existingObject(with: tag.objectID)["name"] == "d")
        }
    }

    @Test func refreshWithMergeKeepsUnsavedChangesOverFreshValues() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let author = try context.insert("Author")
            try author.setValue("A", forKey: "name")
            try context.save()

            let other = ObjectContext(store: store)
            try other.existingObject(with: author.objectID).setValue(9, forKey: "rating")
            try other.save()

            try author.setValue("A2", forKey: "name")
            try context.refresh(author, mergeChanges: true)
            #expect(try author["name"] == "A2")
            #expect(try author["rating"] == 9)
            try context.save()  // no conflict: the refresh took the new row version
            let check = ObjectContext(store: store)
            let stored = try check.existingObject(with: author.objectID)
            #expect(try stored["name"] == "A2")
            #expect(try stored["rating"] == 9)
        }
    }
}
