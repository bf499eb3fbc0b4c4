import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// Child contexts (Core Data's parent/child contexts): a scratchpad over its parent's current state whose save
/// hands its changes to the parent.
@Suite struct ChildContextTests {
    /// The library in a new store, a context on it and a child of that context.
    func withChild(_ body: (PersistentStore, Library, ObjectContext, ObjectContext) throws -> Void) throws {
        try withStore { store, _ in
            let library = try Library(store)
            let parent = ObjectContext(store: store)
            try body(store, library, parent, ObjectContext(parent: parent))
        }
    }

    func titles(_ context: ObjectContext, _ format: String = "TRUEPREDICATE") throws -> [String] {
        var request = FetchRequest(entity: "Book", predicate: try FetchPredicate(format))
        request.sortKeys = [SortKey("title")]
        return try context.fetch(request).map { try $0["title"].stringValue }
    }

    @Test func aChildSeesItsParentsUnsavedChangesAndKeepsItsOwnUntilItSaves() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let parent = ObjectContext(store: store)
            let draft = try parent.insert("Book")
            try draft.setValue("Aardvark", forKey: "title")
            try parent.existingObject(with: library.ids["Momo"]!).setValue("Momo!", forKey: "title")
            try parent.delete(try parent.existingObject(with: library.ids["La Peste"]!))

            let newcomer = try parent.insert("Author")
            try newcomer.setValue("Cornelia Funke", forKey: "name")
            let child = ObjectContext(parent: parent)
            #expect(child.parent === parent)
            // Counted through the parent: its unsaved author counts, though the child has no changes of its own.
            #expect(try child.count(for: FetchRequest(entity: "Author")) == 4)
            #expect(
                try titles(child).prefix(2) == ["A Wizard of Earthsea", "Aardvark"] && titles(child).contains("Momo!"))
            #expect(try !titles(child).contains("La Peste"))
            #expect(try child.existingObject(with: draft.objectID)["title"] == "Aardvark")
            #expect(
                entityStoreError { _ = try child.existingObject(with: library.ids["La Peste"]!) }?.code
                    == .objectNotFound)

            // The child's own changes: seen by its fetches (sorted and windowed with the rest), not by the parent.
            let added = try child.insert("Book")
            try added.setValue("Zebra", forKey: "title")
            try child.existingObject(with: library.ids["Momo"]!).setValue("Bambi", forKey: "title")
            #expect(try titles(child).suffix(2) == ["Zebra", "ÉCOLE des femmes"])
            #expect(try titles(child).contains("Bambi") && !titles(child).contains("Momo!"))
            var window = FetchRequest(entity: "Book", sortKeys: [SortKey("title", ascending: false)])
            window.fetchLimit = 2
            #expect(try child.fetch(window).map { try $0["title"].stringValue } == ["ÉCOLE des femmes", "Zebra"])
            #expect(try child.count(for: FetchRequest(entity: "Book")) == 8)
            #expect(try !titles(parent).contains("Zebra") && titles(parent).contains("Momo!"))
            // Dropping the child leaves no trace.
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Book")) == 7)
        }
    }

    @Test func aChildsSaveReachesTheParentAsOneBatchAndTheParentsSaveTheStore() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let parent = ObjectContext(store: store)
            var request = FetchRequest(entity: "Book", sortKeys: [SortKey("title")])
            request.predicate = try FetchPredicate("pages > 200")
            let controller = FetchedResultsController(fetchRequest: request, context: parent)
            let delegate = RecordingDelegate()
            controller.delegate = delegate
            try controller.performFetch()

            let child = ObjectContext(parent: parent)
            let book = try child.insert("Book")
            try book.setValue("Neverwhere", forKey: "title")
            try book.setValue(.int(370), forKey: "pages")
            let gaiman = try child.insert("Author")
            try gaiman.setValue("Neil Gaiman", forKey: "name")
            try book.setObject(gaiman, forKey: "author")
            try child.existingObject(with: library.ids["Momo"]!).setValue(.int(150), forKey: "pages")
            try child.delete(try child.existingObject(with: library.ids["The Dispossessed"]!))
            try child.save()
            #expect(!child.hasChanges && parent.hasChanges)

            // One batch for the parent's controller: the new book in, Momo and The Dispossessed out.
            #expect(delegate.calls.filter { $0 == "will" }.count == 1)
            #expect(controller.fetchedObjectIDs.contains(book.objectID))
            #expect(!controller.fetchedObjectIDs.contains(library.ids["Momo"]!))
            let inParent = try parent.existingObject(with: book.objectID)
            #expect(try inParent.object(forKey: "author")?["name"] == "Neil Gaiman")
            // Nothing reached the store yet; the parent's save writes it all.
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Author")) == 3)
            try parent.save()
            let reader = ObjectContext(store: store)
            #expect(try titles(reader).contains("Neverwhere") && !titles(reader).contains("The Dispossessed"))
            #expect(try reader.existingObject(with: library.ids["Momo"]!)["pages"] == .int(150))
            #expect(try reader.existingObject(with: book.objectID).object(forKey: "author")?["name"] == "Neil Gaiman")
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func theParentUndoesAChildsSaveInOneStep() throws {
        try withChild { store, library, parent, child in
            try child.existingObject(with: library.ids["Momo"]!).setValue("Momo?", forKey: "title")
            let added = try child.insert("Book")
            try added.setValue("Stardust", forKey: "title")
            try child.save()
            #expect(try titles(parent).contains("Momo?") && titles(parent).contains("Stardust"))
            try parent.undoLastChange()
            #expect(try titles(parent) == titles(ObjectContext(store: store)))
            #expect(!parent.hasChanges)
        }
    }

    @Test func grandchildrenAndConflictsWithTheParent() throws {
        try withChild { store, library, parent, child in
            let grandchild = ObjectContext(parent: child)
            try grandchild.existingObject(with: library.ids["Momo"]!).setValue("Momo (3)", forKey: "title")
            try grandchild.save()
            #expect(try titles(child).contains("Momo (3)") && !titles(parent).contains("Momo (3)"))
            try child.save()
            #expect(try titles(parent).contains("Momo (3)"))

            // The parent deletes what the child changed: the child's save is refused and the parent is untouched.
            let edited = try child.existingObject(with: library.ids["La Peste"]!)
            try edited.setValue(.int(300), forKey: "pages")
            try parent.delete(try parent.existingObject(with: library.ids["La Peste"]!))
            let error = entityStoreError { try child.save() }
            #expect(error?.code == .conflict && error?.objectID == library.ids["La Peste"]!)
            #expect(child.hasChanges)
            #expect(try parent.existingObject(with: library.ids["Momo"]!)["title"] == "Momo (3)")
            try parent.save()
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Book")) == 6)
        }
    }

    @Test func controllersAndAggregatesWorkOnAChild() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let parent = ObjectContext(store: store)
            try parent.existingObject(with: library.ids["Momo"]!).setValue(.int(600), forKey: "pages")
            let child = ObjectContext(parent: parent)
            var request = FetchRequest(entity: "Book", predicate: try FetchPredicate("pages > 300"))
            request.sortKeys = [SortKey("pages", ascending: false)]
            let controller = FetchedResultsController(fetchRequest: request, context: child)
            let delegate = RecordingDelegate()
            controller.delegate = delegate
            try controller.performFetch()
            // The parent's unsaved page count puts Momo first.
            #expect(controller.fetchedObjectIDs.first == library.ids["Momo"]!)
            let added = try child.insert("Book")
            try added.setValue("Jim Knopf", forKey: "title")
            try added.setValue(.int(700), forKey: "pages")
            child.processPendingChanges()
            #expect(controller.fetchedObjectIDs.first == added.objectID)
            #expect(delegate.take().contains { $0.hasPrefix("ins") })
            var total = AggregateRequest(entity: "Book")
            total.aggregates = [.count(), .sum("pages")]
            // 1515 stored pages, Momo 304 -> 600 in the parent, 700 more in the child.
            #expect(try child.aggregate(total) == [["count": 8, "sum(pages)": 2511]])
            #expect(try parent.aggregate(total) == [["count": 7, "sum(pages)": 1811]])
        }
    }

    @Test func typedModelsWorkInChildContexts() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let child = ObjectContext(parent: world.context)
        let ticket = try child.insert(Ticket.self)
        ticket.title = "From the child"
        ticket.rank = 4
        ticket.project = try child.first(Project.self, where: \Project.name == "Beta")
        #expect(try child.count(Ticket.self) == 6 && world.context.count(Ticket.self) == 5)
        try child.save()
        let pushed = try #require(try world.context.first(Ticket.self, where: \Ticket.title == "From the child"))
        #expect(pushed.project?.name == "Beta" && pushed.rank == 4)
        try world.context.save()
        #expect(try ObjectContext(store: world.store).count(Ticket.self) == 6)
    }
    @Test func aChildsFetchesSeeWhatItChangedInTheObjectsTheyReadThrough() throws {
        try withChild { store, library, parent, child in
            let ende = try child.existingObject(with: library.ids["Momo"]!).object(forKey: "author")!
            try ende.setValue("M. Ende", forKey: "name")
            // Only the author changed here, not its books: the books are judged through the child's author.
            #expect(try titles(child, "author.name == 'M. Ende'") == ["Die unendliche Geschichte", "Momo"])
            #expect(try titles(child, "author.name == 'Michael Ende'").isEmpty)
            #expect(try titles(parent, "author.name == 'M. Ende'").isEmpty)
            var byAuthor = FetchRequest(entity: "Book", sortKeys: [SortKey("author.name"), SortKey("title")])
            byAuthor.fetchLimit = 3
            #expect(
                try child.fetch(byAuthor).map { try $0["title"].stringValue } == [
                    "L'Étranger", "La Peste", "ÉCOLE des femmes",
                ])
            byAuthor.fetchOffset = 3
            #expect(
                try child.fetch(byAuthor).map { try $0["title"].stringValue } == [
                    "Die unendliche Geschichte", "Momo", "A Wizard of Earthsea",
                ])
            // An object deleted here is no related object of the rest.
            let classic = try child.fetch(
                FetchRequest(entity: "Tag", predicate: try FetchPredicate("name == 'classic'")))
            try child.delete(classic[0])
            #expect(try titles(child, "ANY tags.name == 'classic'").isEmpty)
            #expect(try titles(child, "SUBQUERY(tags, $t, $t.name == 'classic').@count > 0").isEmpty)
            // Counted as a plain context with the same delete counts (the link goes at the save).
            let plain = ObjectContext(store: store)
            try plain.delete(try plain.existingObject(with: classic[0].objectID))
            let tagged = FetchRequest(entity: "Book", predicate: try FetchPredicate("tags.@count > 0"))
            #expect(try child.count(for: tagged) == plain.count(for: tagged))
            #expect(try titles(parent, "ANY tags.name == 'classic'").count == 4)
        }
    }

    @Test func aChildsSaveRunsTheDeleteRulesAndHandsTheParentWhatTheyDid() throws {
        try withChild { store, library, parent, child in
            let momo = try child.existingObject(with: library.ids["Momo"]!)
            let ende = try momo.object(forKey: "author")!
            let stranger = try child.existingObject(with: library.ids["L'Étranger"]!)
            let classic = try stranger.objects(forKey: "tags")[0]
            try child.delete(ende)  // its books cascade
            try child.delete(classic)  // nullified: its books lose it
            try child.save()
            // The child no longer holds what it deleted, nor links to it.
            #expect(momo.isDeleted && momo.context == nil)
            #expect(try stranger.objects(forKey: "tags").isEmpty)
            #expect(!child.hasChanges)
            // The parent holds the cascade and the nullified links, unsaved.
            #expect(
                Set(parent.deletedObjects.map(\.objectID))
                    == [
                        ende.objectID, classic.objectID, library.ids["Momo"]!,
                        library.ids["Die unendliche Geschichte"]!,
                    ])
            #expect(try parent.existingObject(with: library.ids["L'Étranger"]!).objects(forKey: "tags").isEmpty)
            #expect(try titles(parent).count == 5)
            try parent.save()
            let reader = ObjectContext(store: store)
            #expect(try titles(reader) == titles(parent))
            #expect(try reader.count(for: FetchRequest(entity: "Tag")) == 2)
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func aChildsRefusedSaveLeavesTheChildAndTheParentAsTheyWere() throws {
        try withChild { store, library, parent, child in
            // A cascade reaching a book the parent deleted meanwhile: refused, and the cascade undone in the child.
            let camus = try child.existingObject(with: library.ids["La Peste"]!).object(forKey: "author")!
            let books = try camus.objects(forKey: "books")
            try child.delete(camus)
            try parent.delete(try parent.existingObject(with: library.ids["La Peste"]!))
            let conflict = entityStoreError { try child.save() }
            #expect(conflict?.code == .conflict && conflict?.objectID == library.ids["La Peste"]!)
            #expect(camus.isDeleted && books.allSatisfy { !$0.isDeleted && $0.context === child })
            #expect(child.deletedObjects.map(\.objectID) == [camus.objectID])
            #expect(try Set(camus.objects(forKey: "books").map(\.objectID)) == Set(books.map(\.objectID)))
            #expect(parent.deletedObjects.map(\.objectID) == [library.ids["La Peste"]!])
            child.rollback()

            // A deny rule: refused with the rule named, nothing handed over.
            let publisher = try child.insert("Publisher")
            try publisher.setValue("Suhrkamp", forKey: "name")
            try child.existingObject(with: library.ids["Momo"]!).setObject(publisher, forKey: "publisher")
            try child.save()
            let inChild = try child.existingObject(with: publisher.objectID)
            try child.delete(inChild)
            let denied = entityStoreError { try child.save() }
            #expect(denied?.code == .validationFailed && denied?.key == "books")
            #expect(inChild.isDeleted && child.hasChanges)
            #expect(try parent.existingObject(with: publisher.objectID).isDeleted == false)
            #expect(
                try child.existingObject(with: library.ids["Momo"]!).object(forKey: "publisher")?.objectID
                    == publisher.objectID)
        }
    }

    @Test func anObjectInsertedAndDeletedInAChildIsForgottenByItsSave() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let parent = ObjectContext(store: store)
            let child = ObjectContext(parent: parent)
            let draft = try child.insert("Book")
            try draft.setValue("Draft", forKey: "title")
            try child.delete(draft)
            try child.save()
            #expect(draft.context == nil && !child.registeredObjects.contains { $0 === draft })
            #expect(!child.hasChanges && !parent.hasChanges)
            child._checkInvariants()
        }
    }

}

@Suite struct DistinctAndTransientParityTests {
    @Test func distinctDictionaryResultsAndTransientsThroughAChild() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            var request = FetchRequest(entity: "Book", sortKeys: [SortKey("title")])
            request.resultType = .dictionaries(["inPrint"])
            request.returnsDistinctResults = true
            guard case .dictionaries(let rows) = try context.execute(request) else { Issue.record(); return }
            #expect(rows == [["inPrint": true]])
            request.returnsDistinctResults = false
            guard case .dictionaries(let all) = try context.execute(request) else { Issue.record(); return }
            #expect(all.count == 7)
        }
        let schema = try Schema(version: 1) {
            Entity("Note") {
                Attribute("text", .string)
                Attribute("clicks", .int64, default: 0, transient: true)
            }
        }
        try withStore(schema: schema) { store, _ in
            let parent = ObjectContext(store: store)
            let note = try parent.insert("Note")
            try note.setValue("a", forKey: "text")
            try parent.save()
            let child = ObjectContext(parent: parent)
            try child.existingObject(with: note.objectID).setValue(.int(4), forKey: "clicks")
            let fresh = try child.insert("Note")
            try fresh.setValue("b", forKey: "text")
            try fresh.setValue(.int(2), forKey: "clicks")
            try child.save()
            #expect(try note["clicks"] == 4)
            #expect(try parent.existingObject(with: fresh.objectID)["clicks"] == 2)
        }
    }

}
