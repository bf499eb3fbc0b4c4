import EntityStore
import Foundation
import TestSupport
import Testing

/// What a merge policy settles on when a save meets a record saved elsewhere reaches every view: the saving
/// context's controllers of pending changes, and the contexts that merge the save (its record and its history entry
/// tell the change from the stored version it replaced, not from the older one the saving context had read).
@Suite struct ConflictResolutionTests {
    /// Books b1 (100 pages) and b2 (200 pages); `mine` reads b1 and sets it to 300 pages (or retitles it), a
    /// controller of pending changes sorting by pages shows it; then `theirs` saves b1 with 150 pages.
    struct Race {
        let temporary: TemporaryStore
        let mine: ObjectContext
        let controller: FetchedResultsController
        let b1: ManagedObject
        var store: PersistentStore { temporary.store }

        init(policy: MergePolicy, retitle: Bool = false) throws {
            temporary = try TemporaryStore()
            let setup = ObjectContext(store: temporary.store)
            for (title, pages) in [("b1", 100), ("b2", 200)] {
                let book = try setup.insert("Book")
                try book.setValue(.string(title), forKey: "title")
                try book.setValue(.int(Int64(pages)), forKey: "pages")
            }
            try setup.save()
            mine = ObjectContext(store: temporary.store)
            mine.mergePolicy = policy
            controller = FetchedResultsController(
                fetchRequest: FetchRequest(entity: "Book", sortKeys: [SortKey("pages", ascending: false)]),
                context: mine)
            try controller.performFetch()
            b1 = try mine.fetch(FetchRequest(entity: "Book", sortKeys: [SortKey("title")]))[0]
            if retitle {
                try b1.setValue("b1, revised", forKey: "title")
            } else {
                try b1.setValue(.int(300), forKey: "pages")
            }
            mine.processPendingChanges()
            let theirs = ObjectContext(store: temporary.store)
            try theirs.existingObject(with: b1.objectID).setValue(.int(150), forKey: "pages")
            try theirs.save()
        }

        func shown() throws -> [Value] {
            try controller.sections.flatMap(\.objectIDs).map { try mine.existingObject(with: $0)["title"] }
        }
        func stored() throws -> [Value] {
            try ObjectContext(store: store).fetch(controller.fetchRequest).map { try $0["title"] }
        }
    }

    @Test func storeWinsMovesTheRowBackToTheStoredValue() throws {
        let race = try Race(policy: .storeWins)
        defer { race.temporary.remove() }
        #expect(try race.shown() == ["b1", "b2"])
        try race.mine.save()
        #expect(try race.b1["pages"] == .int(150))
        #expect(try race.shown() == ["b2", "b1"])
        #expect(try race.shown() == race.stored())
    }

    @Test func propertyLevelMovesTheRowToTheValueSavedElsewhere() throws {
        let race = try Race(policy: .propertyLevel, retitle: true)
        defer { race.temporary.remove() }
        #expect(try race.shown() == ["b2", "b1, revised"])
        try race.mine.save()
        #expect(try race.b1["pages"] == .int(150))
        #expect(try race.shown() == ["b2", "b1, revised"])
        #expect(try race.b1["title"] == "b1, revised")
        #expect(try race.shown() == race.stored())
        // And b1 placed by its stored 150 pages: below b2's 200 whatever the title.
        let b2 = try race.mine.fetch(FetchRequest(entity: "Book", sortKeys: [SortKey("title")]))[1]
        try b2.setValue(.int(120), forKey: "pages")
        race.mine.processPendingChanges()
        #expect(try race.shown() == ["b1, revised", "b2"])
    }

    /// `contextWins` writes the context's whole version, the pages it had read (100) over the 150 saved elsewhere:
    /// the save's record says so, and a context that merges it, from the history as another process does, shows 100.
    @Test func contextWinsRecordsTheValuesItPutBack() throws {
        let race = try Race(policy: .contextWins, retitle: true)
        defer { race.temporary.remove() }
        let other = ObjectContext(store: race.store)
        let otherController = FetchedResultsController(
            fetchRequest: race.controller.fetchRequest, context: other)
        try otherController.performFetch()
        let otherB1 = try other.existingObject(with: race.b1.objectID)
        #expect(try otherB1["pages"] == .int(150))
        let before = try race.store.lastTransaction()
        try race.mine.save()
        #expect(try race.stored() == ["b2", "b1, revised"])
        let saved = try race.store.history(since: before)
        let change = try #require(saved.first?.changes.first { $0.objectID == race.b1.objectID })
        #expect(Set(change.changedKeys) == ["title", "pages"])
        #expect(change.oldValues["pages"] == .int(150))
        #expect(change.newValues["pages"] == .int(100))
        for record in saved { other.merge(record) }
        #expect(try otherB1["pages"] == .int(100))
        #expect(otherController.sections.flatMap(\.objectIDs) == race.controller.sections.flatMap(\.objectIDs))
    }
}
