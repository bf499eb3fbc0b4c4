import TestSupport
import Testing

@testable import EntityStore

/// A refresh is a change like any other (observers and controllers follow it), and undo and redo revert the
/// context's own changes only, never what it merged from the store meanwhile.
@Suite struct RefreshAndUndoAfterMergeTests {
    /// Items a (rank 1), b (2), c (3) saved, shown by rank in a flat controller.
    private func ranked() throws -> (ItemWorld, FetchedResultsController, RecordingDelegate) {
        let world = try ItemWorld()
        for (title, rank) in [("a", 1), ("b", 2), ("c", 3)] { try world.add(title, group: nil, rank: Int64(rank)) }
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(sectioned: false, delegate: delegate)
        return (world, controller, delegate)
    }

    @Test func aRefreshThatDiscardsAChangeMovesTheRowBack() throws {
        let (world, controller, delegate) = try ranked()
        defer { world.remove() }
        var updates: [String] = []
        let observer = world.context.addObserver { record in
            for change in record.changes where change.kind == .update { updates += change.changedKeys }
        }
        defer { observer.cancel() }
        let c = world.items["c"]!
        try c.setValue(.int(0), forKey: "rank")
        world.context.processPendingChanges()
        #expect(world.layout(controller) == ":c,a,b")
        _ = delegate.take()
        updates = []

        try world.context.refresh(c, mergeChanges: false)
        #expect(c.isFault)
        world.context.processPendingChanges()
        #expect(world.layout(controller) == ":a,b,c")
        #expect(delegate.take() == ["move c [0,0]->[0,2]"])
        #expect(updates == ["rank"])
        #expect(!world.context.hasChanges)
    }

    @Test func aRefreshBringsBackAnObjectDeletedWithoutSaving() throws {
        let (world, controller, delegate) = try ranked()
        defer { world.remove() }
        let b = world.items["b"]!
        try world.context.delete(b)
        world.context.processPendingChanges()
        #expect(world.layout(controller) == ":a,c")
        _ = delegate.take()

        try world.context.refresh(b, mergeChanges: false)
        world.context.processPendingChanges()
        #expect(!b.isDeleted)
        #expect(world.layout(controller) == ":a,b,c")
        #expect(delegate.take() == ["ins b [0,1]"])
    }

    @Test func aRefreshShowsValuesSavedElsewhere() throws {
        let (world, controller, delegate) = try ranked()
        defer { world.remove() }
        let other = ObjectContext(store: world.store)
        try other.existingObject(with: world.items["a"]!.objectID).setValue(.int(9), forKey: "rank")
        try other.save()
        world.context.processPendingChanges()
        #expect(world.layout(controller) == ":a,b,c")  // this context does not merge

        try world.context.refresh(world.items["a"]!, mergeChanges: false)
        world.context.processPendingChanges()
        #expect(world.layout(controller) == ":b,c,a")
        #expect(delegate.take() == ["move a [0,0]->[0,2]"])
    }

    @Test func refreshingAllObjectsReadsWhatWasSavedElsewhereAndKeepsUnsavedChanges() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let tickets = try world.context.fetch(Ticket.self, sortedBy: [SortKey(\Ticket.title)])
        let (first, second) = (tickets[0], tickets[1])
        let (firstTitle, secondTitle) = (first.title, second.title)
        second.rank = 42  // unsaved here
        let other = ObjectContext(store: world.store)
        try other.existingObject(Ticket.self, with: first.objectID).rank = 7
        let changed = try other.existingObject(Ticket.self, with: second.objectID)
        changed.title = "Renamed elsewhere"
        try other.save()
        #expect(first.rank != 7, "this context does not merge")

        try world.context.refreshAllObjects()
        #expect(first.rank == 7 && first.title == firstTitle)
        #expect(second.title == "Renamed elsewhere" && second.rank == 42, "the unsaved change stays on top")
        #expect(second.title != secondTitle)
        #expect(world.context.hasChanges)

        // A model refreshed without keeping its changes goes back to what is stored.
        try world.context.refresh(second, mergeChanges: false)
        #expect(second.rank != 42 && second.title == "Renamed elsewhere")
        #expect(!world.context.hasChanges)
    }

    @Test func aRefreshThatDiscardsANewOwnerMovesTheRowBetweenSections() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let context = world.context
        let owners = Dictionary(uniqueKeysWithValues: zip(["o1", "o2"], try world.addOwners(["o1", "o2"])))
        let item = try world.add("x", group: nil)
        try item.setObject(owners["o1"], forKey: "owner")
        try context.save()
        var request = FetchRequest(entity: "Item", sortKeys: [SortKey("owner.name"), SortKey("title")])
        request.predicate = try FetchPredicate("owner != nil")
        let controller = FetchedResultsController(
            fetchRequest: request, context: context, sectionNameKeyPath: "owner.name")
        try controller.performFetch()
        try item.setObject(owners["o2"], forKey: "owner")
        context.processPendingChanges()
        #expect(controller.sections.map(\.name) == ["o2"])

        try context.refresh(item, mergeChanges: false)
        context.processPendingChanges()
        #expect(controller.sections.map(\.name) == ["o1"])
        #expect(controller.sections.map(\.objectIDs) == [[item.objectID]])
    }

    /// Two contexts on one store: `ui` with an item "x" owned by o1 (and o2 at hand), `other` to save elsewhere.
    private func owned() throws -> (ItemWorld, ObjectContext, [String: ManagedObject]) {
        let world = try ItemWorld()
        let owners = Dictionary(uniqueKeysWithValues: zip(["o1", "o2"], try world.addOwners(["o1", "o2"])))
        try world.add("x", group: "A", rank: 1).setObject(owners["o1"], forKey: "owner")
        try world.context.save()
        return (world, ObjectContext(store: world.store, name: "other"), owners)
    }

    @Test func anUndoAfterAMergeRevertsOnlyTheContextsOwnChange() throws {
        let (world, other, owners) = try owned()
        defer { world.remove() }
        let context = world.context
        let item = world.items["x"]!
        try item.setObject(owners["o2"], forKey: "owner")  // recorded as the item's whole state
        try other.existingObject(with: item.objectID).setValue(.string("y"), forKey: "title")
        try other.save()
        for record in try world.store.history(since: 0) where record.contextID == other.contextID {
            context.merge(record)
        }
        #expect(try item["title"] == "y")
        try context.undoLastChange()
        #expect(try item["title"] == "y")  // merged, not the context's to undo
        #expect(try item.object(forKey: "owner")?.objectID == owners["o1"]!.objectID)
        #expect(!context.hasChanges)
        try context.redoLastChange()
        #expect(try item.object(forKey: "owner")?.objectID == owners["o2"]!.objectID)
        #expect(try item["title"] == "y")
        try context.save()  // no conflict: the merged row version is kept
        let check = ObjectContext(store: world.store)
        let stored = try check.existingObject(with: item.objectID)
        #expect(try stored["title"] == "y")
        #expect(try stored.object(forKey: "owner")?.objectID == owners["o2"]!.objectID)
    }

    @Test func aRedoAfterAMergeKeepsTheMergedValues() throws {
        let (world, other, owners) = try owned()
        defer { world.remove() }
        let context = world.context
        let item = world.items["x"]!
        try item.setObject(owners["o2"], forKey: "owner")
        try item.setValue(.int(5), forKey: "rank")
        try context.undoLastChange()
        try context.undoLastChange()
        try other.existingObject(with: item.objectID).setValue(.string("y"), forKey: "title")
        try other.save()
        for record in try world.store.history(since: 0) where record.contextID == other.contextID {
            context.merge(record)
        }

        try context.redoLastChange()
        try context.redoLastChange()
        #expect(try item["title"] == "y")
        #expect(try item["rank"] == .int(5))
        #expect(try item.object(forKey: "owner")?.objectID == owners["o2"]!.objectID)
        try context.save()
        let check = ObjectContext(store: world.store)
        let stored = try check.existingObject(with: item.objectID)
        #expect(try stored["title"] == "y")
        #expect(try stored["rank"] == .int(5))
    }

    @Test func anUndoDoesNotBringBackAnObjectDeletedElsewhere() throws {
        let (world, other, owners) = try owned()
        defer { world.remove() }
        let context = world.context
        let item = world.items["x"]!
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        try item.setObject(owners["o2"], forKey: "owner")
        try other.delete(try other.existingObject(with: item.objectID))
        try other.save()
        for record in try world.store.history(since: 0) where record.contextID == other.contextID {
            context.merge(record)
        }
        #expect(controller.sections.isEmpty)

        try context.undoLastChange()
        context.processPendingChanges()
        #expect(item.context == nil)
        #expect(controller.sections.isEmpty)
        #expect(try context.fetch(FetchRequest(entity: "Item")).isEmpty)
        try context.save()
        #expect(try ObjectContext(store: world.store).fetch(FetchRequest(entity: "Item")).isEmpty)
    }

    /// Seed 894 of the workflow fuzz: a redo that adds to an owner's items, the owner's items not loaded any more and
    /// linked elsewhere since. The redone link goes on top of what is stored now, so the item linked elsewhere stays
    /// in the owner's items (put on the items recorded, the owner lost it while the item still named the owner).
    @Test func aRedoOfALinkKeepsTheLinksMadeElsewhereSince() throws {
        let (world, other, owners) = try owned()
        defer { world.remove() }
        let context = world.context
        let o1 = owners["o1"]!
        let y = try world.add("y", group: "A", rank: 2)
        try context.save()
        try y.setObject(o1, forKey: "owner")
        try context.undoLastChange()
        #expect(try o1.objectIDs(forKey: "items") == [world.items["x"]!.objectID])
        // The owner becomes a fault here; elsewhere a third item is linked to it.
        try context.refresh(o1, mergeChanges: false)
        let z = try other.insert("Item")
        try z.setValue("z", forKey: "title")
        try z.setObject(try other.existingObject(with: o1.objectID), forKey: "owner")
        try other.save()
        for record in try world.store.history(since: 0) where record.contextID == other.contextID {
            context.merge(record)
        }

        try context.redoLastChange()
        context._checkInvariants()
        #expect(
            try Set(o1.objectIDs(forKey: "items")) == [world.items["x"]!.objectID, y.objectID, z.objectID])
        #expect(try context.existingObject(with: z.objectID).object(forKey: "owner")?.objectID == o1.objectID)
        try context.save()
        let check = ObjectContext(store: world.store)
        #expect(
            try Set(check.existingObject(with: o1.objectID).objectIDs(forKey: "items"))
                == [world.items["x"]!.objectID, y.objectID, z.objectID])
        #expect(try world.store.checkIntegrity().findings.isEmpty)
    }
}
