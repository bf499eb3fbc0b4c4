import TestSupport
import Testing

@testable import EntityStore

/// A context that does not merge keeps a stale view of the store: what it loaded before others saved. Its saves,
/// fetches, refreshes and resets must still leave every other context, every controller and the store right: a save
/// names every object whose stored relationships it changed (whatever this context believed they held), a fetch never
/// fails on an object deleted elsewhere, and the two sides of a link agree in every context.
@Suite struct StaleViewTests {
    /// Owners "o1" and "o2" and an item "x" saved, unlinked; `stale` loaded o1's (empty) items, then `other` moved
    /// x to o1, and the world's context merged that and lists x under o1.
    private func staleOwner() throws -> (ItemWorld, [ManagedObject], ManagedObject, ObjectContext) {
        let world = try ItemWorld()
        let owners = try world.addOwners(["o1", "o2"])
        let x = try world.add("x", group: nil)
        try world.context.save()
        let stale = ObjectContext(store: world.store, name: "stale")
        #expect(try stale.existingObject(with: owners[0].objectID).objectIDs(forKey: "items").isEmpty)
        let other = ObjectContext(store: world.store, name: "other")
        let since = try world.store.lastTransaction()
        try other.existingObject(with: x.objectID).setObject(
            try other.existingObject(with: owners[0].objectID), forKey: "owner")
        try other.save()
        for record in try world.store.history(since: since) { world.context.merge(record) }
        #expect(try owners[0].objectIDs(forKey: "items") == [x.objectID])
        return (world, owners, x, stale)
    }

    /// Saves `stale` and merges the save into the world's context; returns the save's changes.
    private func save(_ stale: ObjectContext, into world: ItemWorld) throws -> [ObjectChange] {
        let since = try world.store.lastTransaction()
        try stale.save()
        let records = try world.store.history(since: since)
        for record in records { world.context.merge(record) }
        let (findings, _) = try world.store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings)")
        return records.flatMap(\.changes)
    }

    @Test func aSaveNamesTheInverseItUnlinkedThoughItsViewWasStale() throws {
        let (world, owners, x, stale) = try staleOwner()
        defer { world.remove() }
        // The stale context reads x's owner now (o1) and moves x to o2; its o1 lists nothing, so o1 has no change here.
        try stale.existingObject(with: x.objectID).setObject(
            try stale.existingObject(with: owners[1].objectID), forKey: "owner")
        let changes = try save(stale, into: world)
        #expect(changes.contains { $0.objectID == owners[0].objectID && $0.changedKeys.contains("items") })
        #expect(try owners[0].objectIDs(forKey: "items").isEmpty)
        #expect(try owners[1].objectIDs(forKey: "items") == [x.objectID])
    }

    @Test func aDeleteNamesTheInverseItUnlinkedThoughItsViewWasStale() throws {
        let (world, owners, x, stale) = try staleOwner()
        defer { world.remove() }
        try stale.delete(try stale.existingObject(with: x.objectID))
        let changes = try save(stale, into: world)
        #expect(changes.contains { $0.objectID == owners[0].objectID && $0.changedKeys.contains("items") })
        #expect(try owners[0].objectIDs(forKey: "items").isEmpty)
    }

    @Test func aLinkFromAnObjectDeletedElsewhereIsRefused() throws {
        try withStore(schema: try Fixtures.librarySchema()) { store, _ in
            let ui = ObjectContext(store: store, name: "ui")
            let first = try ui.insert("Book")
            try first.setValue("first", forKey: "title")
            let second = try ui.insert("Book")
            try second.setValue("second", forKey: "title")
            let chapter = try ui.insert("Chapter")
            try chapter.setValue("c", forKey: "title")
            try chapter.setObject(first, forKey: "book")
            try ui.save()
            // The chapter moves to the second book, which another context deletes meanwhile. The book's own side
            // is not written (it is gone), and the chapter's link names it.
            try chapter.setObject(second, forKey: "book")
            let other = ObjectContext(store: store, name: "other")
            try other.delete(try other.existingObject(with: second.objectID))
            try other.save()

            let error = entityStoreError { try ui.save() }
            #expect(error?.code == .conflict)
            #expect(error?.message.contains("book links to \(second.objectID), which was deleted elsewhere") == true)
            let (findings, _) = try store.checkIntegrity()
            #expect(findings.isEmpty, "\(findings)")
        }
    }

    @Test func aFetchLeavesOutAnUnsavedFaultDeletedElsewhere() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let owner = try world.addOwners(["o"])[0]
        try world.context.save()
        let stale = ObjectContext(store: world.store, name: "stale")
        // A fault with an unsaved relationship change: a new item linked to it.
        let staleOwner = try stale.object(with: owner.objectID)
        let y = try world.add("y", group: nil, in: stale)
        try y.setObject(staleOwner, forKey: "owner")
        let other = ObjectContext(store: world.store, name: "other")
        try other.delete(try other.existingObject(with: owner.objectID))
        try other.save()

        #expect(try stale.fetch(FetchRequest(entity: "Owner")).isEmpty)
        var request = FetchRequest(entity: "Item", sortKeys: [SortKey("owner.name")])
        request.predicate = try FetchPredicate("owner != nil")
        #expect(try stale.fetch(request).map(\.objectID) == [y.objectID])
        #expect(entityStoreError { try stale.save() }?.code == .conflict)
    }

    @Test func aRefreshOfAnObjectDeletedElsewhereTakesItOutOfControllers() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let x = try world.add("x", group: "A")
        try world.add("z", group: "A", rank: 1)
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        let other = ObjectContext(store: world.store, name: "other")
        try other.delete(try other.existingObject(with: x.objectID))
        try other.save()  // not merged

        try world.context.refresh(x, mergeChanges: false)
        world.context.processPendingChanges()
        #expect(world.layout(controller) == "A:z")
        #expect(delegate.take() == ["del x [0,0]"])
        #expect(try world.context.fetch(FetchRequest(entity: "Item")).count == 1)
    }

    @Test func aRefreshDiscardsBothSidesOfTheLinksItDiscards() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let owners = try world.addOwners(["a", "b"])
        let x = try world.add("x", group: nil)
        try x.setObject(owners[0], forKey: "owner")
        try world.context.save()
        var request = FetchRequest(entity: "Item", sortKeys: [SortKey("owner.name"), SortKey("title")])
        request.predicate = try FetchPredicate("owner != nil")
        let controller = FetchedResultsController(
            fetchRequest: request, context: world.context, sectionNameKeyPath: "owner.name")
        try controller.performFetch()

        // b takes x (x leaves a); refreshing b discards that on every side: x is a's again.
        try owners[1].add(x, toKey: "items")
        world.context.processPendingChanges()
        #expect(controller.sections.map(\.name) == ["b"])
        try world.context.refresh(owners[1], mergeChanges: false)
        world.context.processPendingChanges()
        #expect(try x.objectIDs(forKey: "owner") == [owners[0].objectID])
        #expect(try owners[0].objectIDs(forKey: "items") == [x.objectID])
        #expect(try owners[1].objectIDs(forKey: "items").isEmpty)
        #expect(controller.sections.map(\.name) == ["a"])

        // A new item linked to a: refreshing a unlinks it (a new item has no stored owner to go back to).
        let y = try world.add("y", group: nil)
        try y.setObject(owners[0], forKey: "owner")
        world.context.processPendingChanges()
        #expect(controller.sections.map(\.objectIDs) == [[x.objectID, y.objectID]])
        try world.context.refresh(owners[0], mergeChanges: false)
        world.context.processPendingChanges()
        #expect(try y.objectIDs(forKey: "owner").isEmpty)
        #expect(try owners[0].objectIDs(forKey: "items") == [x.objectID])
        #expect(controller.sections.map(\.objectIDs) == [[x.objectID]])
        try world.context.save()
        let (findings, _) = try world.store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings)")
    }

    @Test func aFetchSortsUnsavedObjectsChangedBack() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let a = try world.add("a", group: "A")
        let b = try world.add("b", group: "B")
        let c = try world.add("c", group: "C")
        try world.context.save()
        try a.setValue("Z", forKey: "group")
        try a.setValue("A", forKey: "group")  // changed back: unsaved, without changes
        let request = FetchRequest(entity: "Item", sortKeys: [SortKey("group")])  // by the index
        #expect(try world.context.fetch(request).map(\.objectID) == [a, b, c].map(\.objectID))
    }

    @Test func aResetReportsTheChangesItDiscards() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        try world.add("x", group: "A")
        let z = try world.add("z", group: "A", rank: 2)
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        try world.add("y", group: "A", rank: 1)
        try z.setValue(.int(-1), forKey: "rank")
        world.context.processPendingChanges()
        #expect(world.layout(controller) == "A:z,x,y")
        delegate.names = Dictionary(uniqueKeysWithValues: world.items.map { ($0.value.objectID, $0.key) })
        _ = delegate.take()

        world.context.reset()
        #expect(world.layout(controller) == "A:x,z")
        #expect(delegate.take() == ["del y [0,2]", "move z [0,0]->[0,1]"])
        let fresh = FetchedResultsController(
            fetchRequest: controller.fetchRequest, context: world.context, sectionNameKeyPath: "group")
        try fresh.performFetch()
        #expect(fresh.sections.map(\.objectIDs) == controller.sections.map(\.objectIDs))
    }
}
