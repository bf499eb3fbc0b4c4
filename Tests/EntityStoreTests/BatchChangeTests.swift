import EntityStore
import Foundation
import TestSupport
import Testing

/// Batch updates and deletes (Core Data's NSBatchUpdateRequest and NSBatchDeleteRequest): one transaction, no
/// context, indexes and delete rules kept, one history entry that merging contexts follow.
@Suite struct BatchChangeTests {
    func titles(_ store: PersistentStore, _ format: String) throws -> [String] {
        var request = FetchRequest(entity: "Book", predicate: try FetchPredicate(format))
        request.sortKeys = [SortKey("title")]
        return try ObjectContext(store: store).fetch(request).map { try $0["title"].stringValue }
    }

    @Test func anUpdateSetsValuesKeepsIndexesAndIsOneHistoryEntry() throws {
        try withStore { store, _ in
            let library = try Library(store)
            // A context that read Momo before the batch, and a merging context with a controller by pages.
            let stale = ObjectContext(store: store)
            let momo = try stale.existingObject(with: library.ids["Momo"]!)
            #expect(try momo["pages"] == .int(304))
            let screen = ObjectContext(store: store)
            var request = FetchRequest(entity: "Book", predicate: try FetchPredicate("pages > 300"))
            request.sortKeys = [SortKey("pages"), SortKey("title")]
            let controller = FetchedResultsController(fetchRequest: request, context: screen)
            let delegate = RecordingDelegate()
            controller.delegate = delegate
            try controller.performFetch()
            #expect(controller.fetchedObjectIDs.count == 3)

            let result = try store.batchUpdate(
                "Book", where: try FetchPredicate("pages > 300"), set: ["pages": .int(999), "inPrint": false],
                author: "nightly")
            #expect(result.count == 3)
            #expect(
                Set(result.objectIDs)
                    == Set(["The Dispossessed", "Die unendliche Geschichte", "Momo"].map { library.ids[$0]! }))
            // The pages index follows the new values.
            #expect(try titles(store, "pages == 999") == ["Die unendliche Geschichte", "Momo", "The Dispossessed"])
            #expect(try titles(store, "pages == 304").isEmpty)
            #expect(try titles(store, "inPrint == NO").count == 3)
            #expect(try store.checkIntegrity().findings.isEmpty)
            let entry = try #require(try store.history().last)
            #expect(entry.author == "nightly" && entry.updatedIDs.count == 3 && entry.insertedIDs.isEmpty)
            #expect(entry.changes.allSatisfy { $0.changedKeys == ["inPrint", "pages"] })
            // Merging the entry updates the controller in one batch; the stale context's save conflicts.
            screen.merge(entry)
            #expect(delegate.take().filter { $0.hasPrefix("upd") || $0.hasPrefix("move") }.count == 3)
            #expect(try screen.existingObject(with: library.ids["Momo"]!)["pages"] == .int(999))
            try momo.setValue("Momo (neu)", forKey: "title")
            #expect(entityStoreError { try stale.save() }?.code == .conflict)
        }
    }

    /// A batch that matches nothing leaves no history entry, as a save of nothing does: every entry's number is a
    /// change that merging contexts receive (an empty entry was delivered to none of them).
    @Test func aBatchThatMatchesNothingLeavesNoHistoryEntry() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let before = try store.lastTransaction()
            let nothing = try FetchPredicate("title == 'no such book'")
            #expect(try store.batchUpdate("Book", where: nothing, set: ["pages": .int(1)]).objectIDs.isEmpty)
            #expect(try store.batchDelete("Book", where: nothing).objectIDs.isEmpty)
            #expect(try store.lastTransaction() == before)
            #expect(try store.history(since: before).isEmpty)
            // The next change gets the next number.
            #expect(try store.batchUpdate("Book", where: nil, set: ["pages": .int(1)]).objectIDs.count > 0)
            #expect(try store.lastTransaction() == before + 1)
        }
    }

    @Test func anUpdateListsEveryProblemAndWritesNothing() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let before = try store.history().count
            let error = entityStoreError {
                try store.batchUpdate(
                    "Book", set: ["nope": 1, "author": .null, "pages": "many", "title": .null, "price": .decimal(.nan)])
            }
            #expect(error?.code == .validationFailed)
            #expect(error?.failures.compactMap(\.key).sorted() == ["author", "nope", "pages", "price", "title"])
            #expect(try store.history().count == before)
            #expect(try titles(store, "pages == nil") == ["La Peste"])
            #expect(entityStoreError { try store.batchUpdate("Nothing", set: [:]) }?.code == .unknownEntity)
            #expect(
                entityStoreError {
                    try store.batchUpdate("Book", where: try FetchPredicate("pages > 1"), set: ["pages": .int(1)])
                } == nil)
            // Unique attributes: one object at most, and a value no other object holds.
            #expect(entityStoreError { try store.batchUpdate("Tag", set: ["name": "same"]) }?.code == .validationFailed)
            #expect(
                entityStoreError {
                    try store.batchUpdate("Tag", where: try FetchPredicate("name == 'sf'"), set: ["name": "classic"])
                }?.failures.first?.message.contains("already has it") == true)
            #expect(
                try store.batchUpdate(
                    "Tag", where: try FetchPredicate("name == 'sf'"), set: ["name": "science fiction"]
                ).count == 1)
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func aDeleteCascadesNullifiesAndIsFollowedByMergingContexts() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let context = ObjectContext(store: store)
            let fantasy = try #require(
                try context.fetch(FetchRequest(entity: "Tag", predicate: try FetchPredicate("name == 'fantasy'"))).first
            )
            #expect(try fantasy.objectIDs(forKey: "books").count == 2)
            let momo = try context.existingObject(with: library.ids["Momo"]!)
            // Deleting Michael Ende cascades to his two books, which leave their tags.
            let result = try store.batchDelete("Author", where: try FetchPredicate("name == 'Michael Ende'"))
            #expect(result.count == 3)
            #expect(
                result.objectIDs.contains(library.ids["Momo"]!)
                    && result.objectIDs.contains(library.ids["Die unendliche Geschichte"]!))
            #expect(try titles(store, "TRUEPREDICATE").count == 5)
            let entry = try #require(try store.history().last)
            #expect(entry.deletedIDs.count == 3)
            #expect(Set(entry.updatedIDs.map(\.entityName)) == ["Tag"])
            context.merge(entry)
            #expect(try fantasy.objectIDs(forKey: "books") == [library.ids["A Wizard of Earthsea"]!])
            #expect(momo.isDeleted && momo.context == nil)
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func denyRulesAndRequiredRelationshipsRefuseTheWholeBatch() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let context = ObjectContext(store: store)
            let publisher = try context.insert("Publisher")
            try publisher.setValue("Gallimard", forKey: "name")
            try context.existingObject(with: library.ids["La Peste"]!).setObject(publisher, forKey: "publisher")
            try context.save()
            let denied = entityStoreError { try store.batchDelete("Publisher") }
            #expect(denied?.code == .validationFailed && denied?.key == "books")
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Publisher")) == 1)
            // Deleting the book instead nullifies the publisher's side.
            #expect(try store.batchDelete("Book", where: try FetchPredicate("title == 'La Peste'")).count == 1)
            let reader = ObjectContext(store: store)
            #expect(try reader.existingObject(with: publisher.objectID).objectIDs(forKey: "books").isEmpty)
            #expect(try store.batchDelete("Publisher").count == 1)
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
        let schema = try Schema(version: 1) {
            Entity("Owner") {
                Attribute("name", .string)
                Relationship("pets", to: "Pet", inverse: "owner", toMany: true, deleteRule: .nullify)
            }
            Entity("Pet") {
                Attribute("name", .string)
                Relationship("owner", to: "Owner", inverse: "pets", optional: false)
            }
        }
        try withStore(schema: schema) { store, _ in
            let context = ObjectContext(store: store)
            let owner = try context.insert("Owner")
            try owner.setValue("Ann", forKey: "name")
            let pet = try context.insert("Pet")
            try pet.setValue("Rex", forKey: "name")
            try pet.setObject(owner, forKey: "owner")
            try context.save()
            let error = entityStoreError { try store.batchDelete("Owner") }
            #expect(error?.failures.map(\.message) == ["a required relationship would be empty"])
            #expect(error?.objectID == pet.objectID)
            #expect(try store.batchDelete("Pet").count == 1)
            #expect(try store.batchDelete("Owner").count == 1)
        }
    }

    @Test func typedModelsUpdateAndDeleteInBatches() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let updated = try world.store.batchUpdate(Ticket.self, where: \Ticket.rank > 3, .set(\Ticket.done, true))
        #expect(updated.count == 2)
        let context = ObjectContext(store: world.store)
        #expect(
            try context.fetch(Ticket.self, where: \Ticket.done == true, sortedBy: [SortKey(\Ticket.title)]).map(\.title)
                == ["Dark mode", "Write docs"])
        let deleted = try world.store.batchDelete(Project.self, where: \Project.name == "Beta")
        #expect(deleted.count == 3)  // Beta and its two tickets (cascade)
        #expect(try context.count(Ticket.self) == 3)
        #expect(
            entityStoreError {
                try world.store.batchUpdate(Ticket.self, .set(\Ticket.rank, -1), .set(\Ticket.title, ""))
            } == nil)
    }
}
