import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// The context's bookkeeping kept on its objects (the unsaved list, the pending record): against plain sets of IDs
/// over random steps, and through a context's whole range of operations.
@Suite struct ContextBookkeepingTests {

    @Test func aSaveWithNothingToWriteForgetsObjectsInsertedAndDeleted() throws {
        let (temporary, context, saved) = try Self.objects(2)
        _ = temporary
        let note = try context.insert(saved[0].entity.name)
        context.processPendingChanges()
        try context.delete(note)
        #expect(!context.hasChanges)
        try context.save()
        // As a save that writes forgets them: unregistered, in no list, the context's bookkeeping whole.
        #expect(!context.registeredObjects.contains(note))
        #expect(throws: EntityStoreError.self) { try note.setValue(.null, forKey: "name") }
        context._checkInvariants()
        // And with something to write besides.
        let other = try context.insert(saved[0].entity.name)
        try context.delete(other)
        try saved[1].setValue(.string("renamed"), forKey: "name")
        try context.save()
        #expect(!context.registeredObjects.contains(other))
        context._checkInvariants()
    }
    /// Saved objects of one context: in none of its lists (each object's bits belong to its context's lists, so a
    /// test's own list takes objects the context does not track).
    static func objects(_ count: Int) throws -> (TemporaryStore, ObjectContext, [ManagedObject]) {
        let temporary = try TemporaryStore(schema: try Fixtures.projectSchema())
        let context = ObjectContext(store: temporary.store)
        let objects = try (0..<count).map { index in
            let tag = try context.insert("Tag")
            try tag.setValue(.string("tag \(index)"), forKey: "name")
            return tag
        }
        try context.save()
        #expect(objects.allSatisfy { $0.tracking.isEmpty })
        return (temporary, context, objects)
    }

    @Test func theUnsavedListAnswersAsASetOfIDsDoesOverRandomSteps() throws {
        let (temporary, _, objects) = try Self.objects(200)
        defer { temporary.remove() }
        var list = UnsavedObjects()
        var reference = Set<ObjectID>()
        var g = SeededGenerator(seed: 11)
        for step in 0..<5_000 {
            let object = objects.randomElement(using: &g)!
            switch Int.random(in: 0..<10, using: &g) {
            case 0..<5:
                #expect(list.insert(object) == reference.insert(object.objectID).inserted)
            case 5..<9:
                list.remove(object)
                reference.remove(object.objectID)
            default:
                if step % 7 == 0 {
                    list.removeAll()
                    reference = []
                }
            }
            list._checkInvariants()
            #expect(list.count == reference.count)
            #expect(Set(list.map(\.objectID)) == reference)
            #expect(list.contains(object) == reference.contains(object.objectID))
        }
        #expect(list.sortedByID().map(\.objectID) == reference.sorted())
    }

    @Test func theUnsavedListKeepsTheOrderObjectsWereFirstTouchedIn() throws {
        let (temporary, _, objects) = try Self.objects(5)
        defer { temporary.remove() }
        var list = UnsavedObjects()
        for index in [3, 1, 4, 0] { list.insert(objects[index]) }
        list.remove(objects[1])
        list.insert(objects[1])  // back at its first place: it never left the list
        #expect(list.map(\.objectID) == [3, 1, 4, 0].map { objects[$0].objectID })
        #expect(list.sortedByID().map(\.objectID) == [0, 1, 3, 4].map { objects[$0].objectID })
    }

    /// The registry against a dictionary over random steps: new objects appended (indexed at the next lookup),
    /// objects set and replaced by ID, IDs removed, lookups and look-up-or-make; the survivors keep the order they
    /// were registered in wherever nothing was removed after them. Small registries find IDs by a scan, larger ones
    /// through their table.
    @Test(arguments: [10, 24, 300])
    func theRegistryAnswersAsADictionaryDoesOverRandomSteps(size: Int) throws {
        let (temporary, _, objects) = try Self.objects(max(size, 61))
        defer { temporary.remove() }
        var registry = ObjectRegistry()
        var reference: [ObjectID: ManagedObject] = [:]
        var order: [ObjectID] = []
        var fresh = objects.prefix(size)
        var g = SeededGenerator(seed: UInt64(size))
        for _ in 0..<4_000 {
            let known = objects.prefix(size - fresh.count)
            switch Int.random(in: 0..<10, using: &g) {
            case 0..<3:
                guard let object = fresh.popFirst() else { break }
                registry.append(new: object)
                reference[object.objectID] = object
                order.append(object.objectID)
            case 3, 4:
                guard let object = known.randomElement(using: &g) else { break }
                registry[object.objectID] = object
                if reference.updateValue(object, forKey: object.objectID) == nil { order.append(object.objectID) }
            case 5, 6:
                guard let object = known.randomElement(using: &g) else { break }
                registry[object.objectID] = nil
                reference[object.objectID] = nil
                order.removeAll { $0 == object.objectID }
            case 7:
                guard let object = known.randomElement(using: &g) else { break }
                var made = false
                let found = registry.object(for: object.objectID) {
                    made = true
                    return object
                }
                #expect(made == (reference[object.objectID] == nil))
                #expect(found === (reference[object.objectID] ?? object))
                if made {
                    reference[object.objectID] = object
                    order.append(object.objectID)
                }
            default:
                guard let object = known.randomElement(using: &g) else { break }
                #expect(registry[object.objectID] === reference[object.objectID])
            }
            registry._checkInvariants()
            #expect(registry.count == reference.count)
            #expect(Set(registry.objects.map(\.objectID)) == Set(reference.keys))
        }
        // Removals move the last object into the hole; without them the registration order holds.
        var ordered = ObjectRegistry()
        for object in objects.prefix(50) { ordered.append(new: object) }
        #expect(ordered[objects[10].objectID] === objects[10])
        for object in objects[50..<60] { ordered.append(new: object) }
        ordered[objects[60].objectID] = objects[60]
        #expect(ordered.objects.map(\.objectID) == objects.prefix(61).map(\.objectID))
        ordered._checkInvariants()
    }

    /// A fault asked for by a key the store has not handed out yet, then an insert that gets that key: the ID names
    /// the inserted object from then on, and the fault leaves the context (it no longer names anything here), in a
    /// context of a few objects (found by a scan) and of many (through the table).
    @Test(arguments: [0, 40])
    func anInsertTakesItsIDFromAFaultAskedForBeforeTheKeyWasHandedOut(others: Int) throws {
        let temporary = try TemporaryStore(schema: try Fixtures.projectSchema())
        defer { temporary.remove() }
        let other = ObjectContext(store: temporary.store)
        let probe = try other.insert("Tag")
        let context = ObjectContext(store: temporary.store)
        let faults = try (0..<others).map {
            try context.object(with: ObjectID(entityName: "Tag", primaryKey: 1_000_000 + UInt64($0)))
        }
        let next = ObjectID(entityName: "Tag", primaryKey: probe.objectID.primaryKey + 1)
        let fault = try context.object(with: next)
        #expect(fault.context === context)
        let tag = try context.insert("Tag")
        #expect(tag.objectID == next)
        #expect(try context.object(with: next) === tag)
        #expect(fault.context == nil)
        #expect(
            Set(context.registeredObjects.map { ObjectIdentifier($0) })
                == Set((faults + [tag]).map { ObjectIdentifier($0) }))
        context._checkInvariants()
        try tag.setValue(.string("kept"), forKey: "name")
        try context.save()
        #expect(try ObjectContext(store: temporary.store).existingObject(with: next)["name"] == .string("kept"))
    }

    @Test func pendingChangesComeOutByIDOnceEachWithTheFirstStateAndTheirScopes() throws {
        let (temporary, context, objects) = try Self.objects(4)
        defer { temporary.remove() }
        var pending = PendingChanges()
        let first = ObjectState(objects[2])
        pending.record(objects[2], userDriven: true) { first }
        pending.record(objects[2], userDriven: true) {
            Issue.record("a second state was made"); return nil
        }
        pending.record(objects[0], userDriven: false) { nil }
        pending.record(objects[1], userDriven: true) { nil }
        pending.record(objects[1], userDriven: false) { nil }
        pending._checkInvariants()
        let taken = pending.take { context.registered[$0] }
        #expect(taken.map(\.object.objectID) == [0, 1, 2].map { objects[$0].objectID })
        #expect(taken.map(\.isUserDriven) == [false, false, true])
        guard case .state(let recorded) = taken[2].before else {
            Issue.record("the state recorded first was not kept")
            return
        }
        #expect(recorded === first)
        #expect(pending.isEmpty)
        #expect(objects.allSatisfy { !$0.tracking.contains(.pending) })
    }

    /// A write of an attribute records the values alone; a later change of anything else in the same processing
    /// window completes the record into a whole state with those values, so the event reports both changes
    /// against the state before the first.
    @Test func aValuesRecordIsCompletedByALaterChangeOfAnythingElse() throws {
        let temporary = try TemporaryStore(schema: try Fixtures.projectSchema())
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let task = try context.insert("Task")
        try task.setValue(.string("write"), forKey: "title")
        let tag = try context.insert("Tag")
        try tag.setValue(.string("home"), forKey: "name")
        try context.save()
        var records: [ChangeRecord] = []
        let token = context.addObserver { records.append($0) }
        defer { token.cancel() }

        try task.setValue(.string("edit"), forKey: "title")
        context._checkInvariants()
        try task.add(tag, toKey: "tags")
        try task.setValue(.int(3), forKey: "rank")
        context._checkInvariants()
        context.processPendingChanges()
        let change = try #require(records.last?.changes.first { $0.objectID == task.objectID })
        #expect(change.kind == .update)
        #expect(Set(change.changedKeys) == ["title", "rank", "tags"])
        #expect(change.oldValues == ["title": .string("write"), "rank": .int(0)])
        #expect(change.newValues == ["title": .string("edit"), "rank": .int(3)])
        #expect(change.oldRelationships == ["tags": []])

        // Values changed and then deleted in one window: a delete with the values before the first change.
        try task.setValue(.string("gone"), forKey: "title")
        try context.delete(task)
        context._checkInvariants()
        context.processPendingChanges()
        let deleted = try #require(records.last?.changes.first { $0.objectID == task.objectID })
        #expect(deleted.kind == .delete)
        #expect(deleted.oldValues["title"] == .string("edit"))
        #expect(deleted.oldRelationships["tags"] == [tag.objectID])

        // A value set and set back in one window is no change at all.
        try tag.setValue(.string("away"), forKey: "name")
        try tag.setValue(.string("home"), forKey: "name")
        let count = records.count
        context.processPendingChanges()
        #expect(records.count == count || records.last?.changes.contains { $0.objectID == tag.objectID } == false)
    }

    /// An object detached by `reset()` with a pending change, and the object registered under its ID afterwards and
    /// changed before processing, are one change: against the state first recorded, of the object registered now.
    @Test func anIDChangedBeforeAndAfterAResetIsOneChange() throws {
        let temporary = try TemporaryStore(schema: try Fixtures.projectSchema())
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let tag = try context.insert("Tag")
        try tag.setValue(.string("a"), forKey: "name")
        try context.save()
        var records: [ChangeRecord] = []
        let token = context.addObserver { records.append($0) }
        defer { token.cancel() }
        try tag.setValue(.string("b"), forKey: "name")
        context.reset()
        let again = try context.existingObject(with: tag.objectID)
        #expect(again !== tag)
        try again.setValue(.string("c"), forKey: "name")
        context.processPendingChanges()
        let changes = records.last?.changes ?? []
        #expect(changes.map(\.objectID) == [tag.objectID])
        #expect(changes.first?.kind == .update)
        #expect(changes.first?.oldValues == ["name": .string("a")])
        #expect(changes.first?.newValues == ["name": .string("c")])
        context._checkInvariants()
    }

    /// Every operation a context has, at random, with the bookkeeping checked after each; what a fresh context
    /// reads after each save is what this one holds.
    @Test func randomContextOperationsKeepTheBookkeepingTrue() throws {
        let temporary = try TemporaryStore(schema: try Fixtures.projectSchema())
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        var records = 0
        var saves = 0
        let token = context.addObserver { _ in records += 1 }
        defer { token.cancel() }
        var g = SeededGenerator(seed: 5)
        for step in 0..<1_500 {
            let projects = try context.fetch(FetchRequest(entity: "Project"))
            let tasks = try context.fetch(FetchRequest(entity: "Task"))
            switch Int.random(in: 0..<16, using: &g) {
            case 0, 1:
                let project = try context.insert("Project")
                try project.setValue(.string("p\(step)"), forKey: "name")
            case 2, 3:
                let task = try context.insert("Task")
                try task.setValue(.string("t\(step)"), forKey: "title")
                try task.setObject(projects.randomElement(using: &g), forKey: "project")
            case 4, 5:
                try tasks.randomElement(using: &g)?.setValue(.int(Int64(step % 9)), forKey: "rank")
            case 6:
                if let task = tasks.randomElement(using: &g), let project = projects.randomElement(using: &g) {
                    try task.setObject(project, forKey: "project")
                }
            case 7:
                if let victim = (projects + tasks).randomElement(using: &g) { try context.delete(victim) }
            case 8:
                if context.canUndo { try context.undoLastChange() }
            case 9:
                if context.canRedo { try context.redoLastChange() }
            case 10:
                context.rollback()
            case 11:
                if let object = (projects + tasks).randomElement(using: &g) {
                    try context.refresh(object, mergeChanges: Bool.random(using: &g))
                }
            case 12:
                let child = ObjectContext(parent: context)
                if let task = try child.fetch(FetchRequest(entity: "Task")).randomElement(using: &g) {
                    try task.setValue(.string("child \(step)"), forKey: "notes")
                }
                try child.insert("Project").setValue(.string("child p\(step)"), forKey: "name")
                try child.save()
            case 13:
                try context.performUserDrivenChanges {
                    try tasks.randomElement(using: &g)?.setValue(.int(Int64(step % 5)), forKey: "rank")
                }
            default:
                do {
                    try context.save()
                } catch let error as EntityStoreError where error.code == .validationFailed {
                    // An undone name write leaves a nameless object: refused, and rolled back here.
                    context.rollback()
                    break
                }
                saves += 1
                let fresh = ObjectContext(store: temporary.store)
                let stored = try fresh.fetch(FetchRequest(entity: "Task", sortKeys: [SortKey("title")]))
                let held = try context.fetch(FetchRequest(entity: "Task", sortKeys: [SortKey("title")]))
                #expect(stored.map(\.objectID) == held.map(\.objectID), "step \(step)")
                #expect(try stored.map { try $0["rank"] } == held.map { try $0["rank"] }, "step \(step)")
                #expect(!context.hasChanges)
            }
            if Int.random(in: 0..<3, using: &g) == 0 { context.processPendingChanges() }
            context._checkInvariants()
        }
        #expect(records > 100)
        #expect(saves > 30)
    }
}
