import TestSupport
import Testing

@testable import EntityStore

/// A link the context made (unsaved) to an object another context or process then deleted never reaches the store
/// as a reference to nothing: a merge takes it out, as Core Data's merge of a delete does; a save that did not
/// merge is refused with a conflict naming the link; an undo does not put it back.
/// An owner "o" and an item "x" saved, unlinked, and a second context on the store.
private func unlinked() throws -> (ItemWorld, ManagedObject, ManagedObject, ObjectContext) {
    let world = try ItemWorld()
    let owner = try world.addOwners(["o"])[0]
    let item = try world.add("x", group: nil)
    try world.context.save()
    return (world, owner, item, ObjectContext(store: world.store, name: "other"))
}

@Suite struct DeletedElsewhereLinkTests {
    private func delete(_ id: ObjectID, in other: ObjectContext, mergingInto world: ItemWorld) throws {
        let since = try world.store.lastTransaction()
        try other.delete(try other.existingObject(with: id))
        try other.save()
        for record in try world.store.history(since: since) { world.context.merge(record) }
    }

    private func expectClean(_ world: ItemWorld) throws {
        let (findings, _) = try world.store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings)")
    }

    @Test func aMergedDeleteOfTheObjectLinkedToTakesTheLinkOut() throws {
        let (world, owner, item, other) = try unlinked()
        defer { world.remove() }
        var request = FetchRequest(entity: "Item", sortKeys: [SortKey("title")])
        request.predicate = try FetchPredicate("owner != nil")
        let controller = FetchedResultsController(fetchRequest: request, context: world.context)
        try controller.performFetch()
        try item.setObject(owner, forKey: "owner")
        world.context.processPendingChanges()
        #expect(controller.sections.first?.objectIDs == [item.objectID])

        try delete(owner.objectID, in: other, mergingInto: world)
        world.context.processPendingChanges()
        #expect(try item.object(forKey: "owner") == nil)
        #expect(controller.sections.first?.objectIDs ?? [] == [])  // the item left with its owner
        try world.context.save()
        try expectClean(world)
    }

    @Test(arguments: [false, true])
    func aMergedDeleteOfTheLinkingObjectTakesItOutOfTheToMany(throughTheToMany: Bool) throws {
        let (world, owner, item, other) = try unlinked()
        defer { world.remove() }
        if throughTheToMany {
            try owner.add(item, toKey: "items")
        } else {
            try item.setObject(owner, forKey: "owner")
        }
        try delete(item.objectID, in: other, mergingInto: world)
        #expect(try owner.objectIDs(forKey: "items").isEmpty)
        try world.context.save()
        try expectClean(world)
        let check = ObjectContext(store: world.store)
        #expect(try check.existingObject(with: owner.objectID).objectIDs(forKey: "items").isEmpty)
    }

    @Test func aSaveThatDidNotMergeTheDeleteIsRefusedAndWritesNothing() throws {
        let (world, owner, item, other) = try unlinked()
        defer { world.remove() }
        try item.setObject(owner, forKey: "owner")
        try item.setValue(.int(7), forKey: "rank")
        try other.delete(try other.existingObject(with: owner.objectID))
        try other.save()  // not merged into world.context

        let error = entityStoreError { try world.context.save() }
        #expect(error?.code == .conflict)
        #expect(error?.failures.first?.key == "owner")
        #expect(error?.failures.first?.objectID == item.objectID)
        #expect(error?.message.contains("\(owner.objectID), which was deleted elsewhere") == true)
        try expectClean(world)
        let check = ObjectContext(store: world.store)
        #expect(try check.existingObject(with: item.objectID)["rank"] == .int(0))
        // Rolled back, the context saves again.
        world.context.rollback()
        try item.setValue(.int(8), forKey: "rank")
        try world.context.save()
        try expectClean(world)
    }

    @Test func anUndoDoesNotLinkToAnObjectDeletedSince() throws {
        let (world, owner, item, other) = try unlinked()
        defer { world.remove() }
        let second = try world.addOwners(["p"])[0]
        try world.context.save()
        try item.setObject(owner, forKey: "owner")  // group 1
        try item.setObject(second, forKey: "owner")  // group 2
        try delete(owner.objectID, in: other, mergingInto: world)

        try world.context.undoLastChange()  // back to group 1's state: linked to the deleted owner
        #expect(try item.object(forKey: "owner") == nil)
        try world.context.save()
        try expectClean(world)
    }
}

/// A delete racing a link made elsewhere: another context links an object to one this context deletes, after this
/// context read its relationships. Nothing keeps a link to the deleted object; a delete rule that must see every
/// related object (cascade, deny) refuses the save until the context has seen the new one.
@Suite struct DeleteRacingALinkTests {
    @Test(arguments: [MergePolicy.error, .propertyLevel, .contextWins, .storeWins])
    func aNullifyingDeleteUnlinksWhatWasLinkedElsewhere(policy: MergePolicy) throws {
        let (world, owner, item, other) = try unlinked()
        defer { world.remove() }
        let ui = world.context
        #expect(try owner.objectIDs(forKey: "items").isEmpty)  // read: no items
        let otherItem = try other.existingObject(with: item.objectID)
        try otherItem.setObject(try other.existingObject(with: owner.objectID), forKey: "owner")
        try other.save()

        try ui.delete(owner)
        ui.mergePolicy = policy
        let since = try world.store.lastTransaction()
        try ui.save()
        let (findings, _) = try world.store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings)")
        let check = ObjectContext(store: world.store)
        #expect(try check.existingObject(with: item.objectID).object(forKey: "owner") == nil)
        // The save's record names the item, so the other context drops its link too.
        for record in try world.store.history(since: since) { other.merge(record) }
        #expect(try otherItem.object(forKey: "owner") == nil)
    }

    @Test func aCascadeRefusesUntilItHasSeenWhatWasLinkedElsewhere() throws {
        try withStore(schema: try Fixtures.projectSchema()) { store, _ in
            let ui = ObjectContext(store: store, name: "ui")
            let project = try ui.insert("Project")
            try project.setValue("p", forKey: "name")
            try ui.save()
            #expect(try project.objectIDs(forKey: "tasks").isEmpty)
            let other = ObjectContext(store: store, name: "other")
            let task = try other.insert("Task")
            try task.setValue("t", forKey: "title")
            try task.setObject(try other.existingObject(with: project.objectID), forKey: "project")
            let since = try store.lastTransaction()
            try other.save()

            try ui.delete(project)
            let error = entityStoreError { try ui.save() }
            #expect(error?.code == .conflict)
            #expect(error?.message.contains("\(task.objectID) was linked to its tasks (delete rule cascade)") == true)
            let check = ObjectContext(store: store)
            #expect(try check.existingObject(with: task.objectID).object(forKey: "project") != nil)
            // Once the context has merged the other's save, the cascade takes the task with the project.
            ui.rollback()
            for record in try store.history(since: since) { ui.merge(record) }
            try ui.delete(try ui.existingObject(with: project.objectID))
            try ui.save()
            #expect(try ObjectContext(store: store).fetch(FetchRequest(entity: "Task")).isEmpty)
            let (findings, _) = try store.checkIntegrity()
            #expect(findings.isEmpty, "\(findings)")
        }
    }

    @Test func aDenyRuleRefusesWhatWasLinkedElsewhere() throws {
        try withStore { store, _ in
            let ui = ObjectContext(store: store, name: "ui")
            let publisher = try ui.insert("Publisher")
            try publisher.setValue("p", forKey: "name")
            try ui.save()
            #expect(try publisher.objectIDs(forKey: "books").isEmpty)
            let other = ObjectContext(store: store, name: "other")
            let book = try other.insert("Book")
            try book.setValue("b", forKey: "title")
            try book.setObject(try other.existingObject(with: publisher.objectID), forKey: "publisher")
            try other.save()

            try ui.delete(publisher)
            let error = entityStoreError { try ui.save() }
            #expect(error?.code == .conflict)
            #expect(error?.message.contains("(delete rule deny)") == true)
            let (findings, _) = try store.checkIntegrity()
            #expect(findings.isEmpty, "\(findings)")
            #expect(try ObjectContext(store: store).fetch(FetchRequest(entity: "Publisher")).count == 1)
        }
    }

    /// A `noAction` delete leaves references to nothing on purpose; deleting an object that holds one names no
    /// missing object in the save's record (a merge elsewhere would fail to load it).
    @Test func aReferenceANoActionDeleteLeftIsNotReportedAsAChange() throws {
        let schema = try Schema(version: 1) {
            Entity("Shelf") {
                Attribute("name", .string)
                Relationship("boxes", to: "Box", inverse: "shelf", toMany: true, deleteRule: .noAction)
            }
            Entity("Box") {
                Attribute("label", .string)
                Relationship("shelf", to: "Shelf", inverse: "boxes")
            }
        }
        try withStore(schema: schema) { store, _ in
            let context = ObjectContext(store: store)
            let shelf = try context.insert("Shelf")
            try shelf.setValue("s", forKey: "name")
            let box = try context.insert("Box")
            try box.setValue("b", forKey: "label")
            try box.setObject(shelf, forKey: "shelf")
            try context.save()
            try context.delete(shelf)
            try context.save()  // the box keeps its reference to the deleted shelf (noAction)

            let other = ObjectContext(store: store)
            let since = try store.lastTransaction()
            try other.delete(try other.existingObject(with: box.objectID))
            try other.save()
            let changes = try store.history(since: since).flatMap(\.changes)
            #expect(changes.map(\.objectID) == [box.objectID])
        }
    }
}
