import TestSupport
import Testing

@testable import EntityStore

/// Two contexts change one item's to-one owner at once. The relationship is stored apart from the item's record,
/// so the record's version does not see the race: the to-one itself is checked when written. It never ends up with
/// two targets; under the error policy the second save is a conflict, under the others its owner wins and the owner
/// it replaced loses the item in the store and in every context that merges the save.
@Suite struct ToOneRaceTests {
    /// Owners a, b and c, and an item "x" owned by a, saved.
    private func ownedByA() throws -> (ItemWorld, [ManagedObject], ManagedObject) {
        let world = try ItemWorld()
        let owners = try world.addOwners(["a", "b", "c"])
        let item = try world.add("x", group: nil)
        try item.setObject(owners[0], forKey: "owner")
        try world.context.save()
        return (world, owners, item)
    }

    @Test(arguments: [MergePolicy.error, .propertyLevel, .contextWins, .storeWins], [false, true])
    func twoContextsSettingOneToOne(policy: MergePolicy, throughTheToMany: Bool) throws {
        let (world, owners, item) = try ownedByA()
        defer { world.remove() }
        let ui = world.context
        let other = ObjectContext(store: world.store, name: "other")
        let otherItem = try other.existingObject(with: item.objectID)
        let otherC = try other.existingObject(with: owners[2].objectID)
        #expect(try otherC.objectIDs(forKey: "items").isEmpty)

        // The UI moves the item to b; meanwhile the other context moves it to c and saves first.
        if throughTheToMany {
            try owners[1].add(item, toKey: "items")
        } else {
            try item.setObject(owners[1], forKey: "owner")
        }
        try otherItem.setObject(otherC, forKey: "owner")
        try other.save()
        ui.mergePolicy = policy
        let since = try world.store.lastTransaction()
        let error = entityStoreError { try ui.save() }

        let check = ObjectContext(store: world.store)
        let stored = try check.existingObject(with: item.objectID).objectIDs(forKey: "owner")
        let (findings, _) = try world.store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings)")
        if policy == .error {
            #expect(error?.code == .conflict)
            #expect(error?.failures.contains { $0.key == "owner" && $0.objectID == item.objectID } == true)
            #expect(error?.message.contains("changed elsewhere since it was read (now \(owners[2].objectID))") == true)
            #expect(stored == [owners[2].objectID])
            return
        }
        #expect(error == nil)
        #expect(stored == [owners[1].objectID])
        for (owner, expected) in zip(owners, [[], [item.objectID], []]) {
            #expect(try check.existingObject(with: owner.objectID).objectIDs(forKey: "items") == expected)
        }
        // The save's record tells the other context that c lost the item.
        for record in try world.store.history(since: since) { other.merge(record) }
        #expect(try otherC.objectIDs(forKey: "items").isEmpty)
        #expect(try otherItem.object(forKey: "owner")?.objectID == owners[1].objectID)
    }
}

extension ToOneRaceTests {
    /// A one-to-one (a person's passport, a passport's holder): two contexts give one passport to two people.
    @Test(arguments: [MergePolicy.error, .propertyLevel, .contextWins, .storeWins])
    func twoContextsLinkingOneOneToOne(policy: MergePolicy) throws {
        let schema = try Schema(version: 1) {
            Entity("Person") {
                Attribute("name", .string)
                Relationship("passport", to: "Passport", inverse: "holder")
            }
            Entity("Passport") {
                Attribute("number", .string)
                Relationship("holder", to: "Person", inverse: "passport")
            }
        }
        try withStore(schema: schema) { store, _ in
            let ui = ObjectContext(store: store, name: "ui")
            let (x, y) = (try ui.insert("Person"), try ui.insert("Person"))
            try x.setValue("x", forKey: "name")
            try y.setValue("y", forKey: "name")
            let passport = try ui.insert("Passport")
            try passport.setValue("P1", forKey: "number")
            try ui.save()
            let other = ObjectContext(store: store, name: "other")
            try other.existingObject(with: y.objectID).setObject(
                try other.existingObject(with: passport.objectID), forKey: "passport")
            try x.setObject(passport, forKey: "passport")
            try other.save()
            ui.mergePolicy = policy
            let error = entityStoreError { try ui.save() }
            let (findings, _) = try store.checkIntegrity()
            #expect(findings.isEmpty, "\(findings)")
            let check = ObjectContext(store: store)
            let holder = try check.existingObject(with: passport.objectID).objectIDs(forKey: "holder")
            let xHas = try check.existingObject(with: x.objectID).objectIDs(forKey: "passport")
            let yHas = try check.existingObject(with: y.objectID).objectIDs(forKey: "passport")
            if policy == .error {
                #expect(error?.code == .conflict)
                #expect((holder, xHas, yHas) == ([y.objectID], [], [passport.objectID]))
            } else {
                #expect(error == nil)
                #expect((holder, xHas, yHas) == ([x.objectID], [passport.objectID], []))
            }
        }
    }
}

extension ToOneRaceTests {
    /// The owner a save's to-one replaced loses the item on every screen: the saving context's own controllers and
    /// those of a context that merges the save, though neither changed that owner.
    @Test func theReplacedOwnerLosesTheItemOnEveryScreen() throws {
        let (world, ownerObjects, item) = try ownedByA()
        defer { world.remove() }
        let ui = world.context
        let owners = ownerObjects.map(\.objectID)
        ui.reset()
        let uiItem = try ui.existingObject(with: item.objectID)
        _ = try uiItem.object(forKey: "owner")  // read under a
        // The other context moves the item to c and saves; the UI does not merge it.
        let other = ObjectContext(store: world.store, name: "other")
        try other.existingObject(with: item.objectID).setObject(
            try other.existingObject(with: owners[2]), forKey: "owner")
        try other.save()
        func ownersWithItems(_ context: ObjectContext) throws -> FetchedResultsController {
            var request = FetchRequest(entity: "Owner", sortKeys: [SortKey("name")])
            request.predicate = try FetchPredicate("items.@count > 0")
            let controller = FetchedResultsController(fetchRequest: request, context: context)
            try controller.performFetch()
            return controller
        }
        let mine = try ownersWithItems(ui)
        let theirs = try ownersWithItems(other)
        #expect(mine.fetchedObjectIDs == [owners[2]] && theirs.fetchedObjectIDs == [owners[2]])

        // The UI moves the item to b, over the other's move.
        ui.mergePolicy = .contextWins
        try uiItem.setObject(try ui.existingObject(with: owners[1]), forKey: "owner")
        let since = try world.store.lastTransaction()
        try ui.save()
        for record in try world.store.history(since: since) { other.merge(record) }
        other.processPendingChanges()
        #expect(mine.fetchedObjectIDs == [owners[1]])
        #expect(theirs.fetchedObjectIDs == [owners[1]])
        #expect(try other.existingObject(with: owners[2]).objectIDs(forKey: "items").isEmpty)
        let (findings, _) = try world.store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings)")
    }
}

extension ToOneRaceTests {
    /// A merge brings a new stored owner under an unsaved one: the stored owner does not list the item meanwhile, and
    /// after the save neither context does.
    @Test func aMergeUnderAnUnsavedToOneKeepsBothSidesConsistent() throws {
        let (world, owners, item) = try ownedByA()
        defer { world.remove() }
        let ui = world.context
        #expect(try owners[2].objectIDs(forKey: "items").isEmpty)
        try item.setObject(owners[1], forKey: "owner")  // unsaved: a -> b
        let other = ObjectContext(store: world.store, name: "other")
        try other.existingObject(with: item.objectID).setObject(
            try other.existingObject(with: owners[2].objectID), forKey: "owner")
        var since = try world.store.lastTransaction()
        try other.save()  // a -> c
        for record in try world.store.history(since: since) { ui.merge(record) }
        #expect(try item.object(forKey: "owner")?.objectID == owners[1].objectID)
        #expect(try owners[2].objectIDs(forKey: "items").isEmpty)

        since = try world.store.lastTransaction()
        try ui.save()
        for record in try world.store.history(since: since) { other.merge(record) }
        #expect(try other.existingObject(with: owners[2].objectID).objectIDs(forKey: "items").isEmpty)
        #expect(try other.existingObject(with: owners[1].objectID).objectIDs(forKey: "items") == [item.objectID])
        let (findings, _) = try world.store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings)")
    }
}

extension ToOneRaceTests {
    /// A fault whose to-one the context changed (through the other side) keeps that unsaved change when a merge
    /// updates it: it was forgotten with the fault's loaded relationships, leaving the two sides disagreeing.
    @Test func aMergeKeepsAFaultsUnsavedLink() throws {
        let (world, owners, item) = try ownedByA()
        defer { world.remove() }
        let ui = world.context
        ui.reset()
        let fault = try ui.object(with: item.objectID)
        let b = try ui.existingObject(with: owners[1].objectID)
        try b.add(fault, toKey: "items")
        #expect(fault.isFault && fault.hasChanges)
        let other = ObjectContext(store: world.store, name: "other")
        try other.existingObject(with: item.objectID).setValue(.string("y"), forKey: "title")
        let since = try world.store.lastTransaction()
        try other.save()
        for record in try world.store.history(since: since) { ui.merge(record) }
        #expect(try fault.object(forKey: "owner")?.objectID == owners[1].objectID)
        #expect(try fault["title"] == "y")
        try ui.save()
        let check = ObjectContext(store: world.store)
        let stored = try check.existingObject(with: item.objectID)
        #expect(try stored.object(forKey: "owner")?.objectID == owners[1].objectID)
        #expect(try stored["title"] == "y")
    }
}
