import EntityStore
import Foundation
import TestSupport
import Testing

/// Undo of to-many changes, which the undo stack keeps as the one target added or removed (a whole state would copy
/// every target for each change): each step undone alone, groups that also record whole states, merges in between,
/// and a model of the relationships at random.
@Suite struct ToManyUndoTests {
    /// Saved: folder "F" (no notes), tag "T", notes "n0"... with no folder and no tag.
    final class World {
        let temporary: TemporaryStore
        let context: ObjectContext
        let folder: ManagedObject
        let tag: ManagedObject
        let notes: [ManagedObject]

        init(notes count: Int) throws {
            temporary = try TemporaryStore(schema: try RelationshipLoadingTests.schema())
            let context = ObjectContext(store: temporary.store, name: "ui")
            self.context = context
            folder = try context.insert("Folder")
            try folder.setValue(.string("F"), forKey: "name")
            tag = try context.insert("Tag")
            try tag.setValue(.string("T"), forKey: "name")
            notes = try (0..<count).map { i in
                let note = try context.insert("Note")
                try note.setValue(.string("n\(i)"), forKey: "title")
                return note
            }
            try context.save()
        }

        var store: PersistentStore { temporary.store }

        func ids(_ indices: some Sequence<Int>) -> [ObjectID] { indices.map { notes[$0].objectID } }

        /// Another context's save of `change`, merged into the screen's context.
        func saveElsewhere(_ change: (ObjectContext) throws -> Void) throws {
            let other = ObjectContext(store: store, name: "other")
            try change(other)
            try other.save()
            for record in try store.history(since: 0) where record.contextID == other.contextID {
                context.merge(record)
            }
        }
    }

    @Test func linkingManyObjectsToOneIsUndoneAndRedoneOneStepAtATime() throws {
        let world = try World(notes: 40)
        for note in world.notes { try world.folder.add(note, toKey: "notes") }
        #expect(try world.folder.objectIDs(forKey: "notes") == world.ids(0..<40))
        for _ in 0..<10 { try world.context.undoLastChange() }
        #expect(try world.folder.objectIDs(forKey: "notes") == world.ids(0..<30))
        #expect(try world.notes[30].object(forKey: "folder") == nil)
        #expect(try world.notes[29].object(forKey: "folder")?.objectID == world.folder.objectID)
        for _ in 0..<3 { try world.context.redoLastChange() }
        #expect(try world.folder.objectIDs(forKey: "notes") == world.ids(0..<33))
        while world.context.canUndo { try world.context.undoLastChange() }
        #expect(try world.folder.objectIDs(forKey: "notes") == [])
        #expect(!world.context.hasChanges)
    }

    @Test func anUndoLimitDropsTheOldestLinkChanges() throws {
        let world = try World(notes: 12)
        world.context.undoLimit = 3
        for note in world.notes { try world.folder.add(note, toKey: "notes") }
        var undone = 0
        while world.context.canUndo {
            try world.context.undoLastChange()
            undone += 1
        }
        #expect(undone == 3)
        #expect(try world.folder.objectIDs(forKey: "notes") == world.ids(0..<9))
        for _ in 0..<2 { try world.context.redoLastChange() }
        #expect(try world.folder.objectIDs(forKey: "notes") == world.ids(0..<11))
        // Past the limit again, with the logs compacted as groups are dropped.
        for note in world.notes.prefix(6) { try world.folder.remove(note, fromKey: "notes") }
        try world.context.undoLastChange()
        #expect(try world.folder.objectIDs(forKey: "notes") == world.ids(5..<11))
        try world.context.save()
        let fresh = ObjectContext(store: world.store)
        #expect(try fresh.existingObject(with: world.folder.objectID).objectIDs(forKey: "notes") == world.ids(5..<11))
    }

    @Test func aGroupThatLinksThenKeepsAWholeStateIsUndoneWhole() throws {
        let world = try World(notes: 3)
        try world.tag.add(world.notes[0], toKey: "notes")
        try world.context.save()
        world.context.beginUndoGrouping()
        try world.tag.add(world.notes[1], toKey: "notes")  // one target kept for the tag
        try world.tag.remove(world.notes[0], fromKey: "notes")
        try world.context.delete(world.tag)  // then its whole state: the links folded back into it
        world.context.endUndoGrouping()
        try world.context.undoLastChange()
        #expect(!world.tag.isDeleted)
        #expect(try world.tag.objectIDs(forKey: "notes") == world.ids([0]))
        #expect(try world.notes[1].objectIDs(forKey: "tags") == [])
        #expect(!world.context.hasChanges)
    }

    /// A group that inserts a note and files it in a stored folder, undone and redone: the redo brings the note back
    /// and both sides of its link. (The folder's side was dropped: the note is registered again only by the redo,
    /// and a link to an object neither registered nor stored counted as a link to one deleted elsewhere.)
    @Test func aRedoneInsertIsLinkedOnBothSides() throws {
        let world = try World(notes: 1)
        let context = world.context
        try world.folder.add(world.notes[0], toKey: "notes")
        context.beginUndoGrouping()
        let inserted = try context.insert("Note")
        try inserted.setValue(.string("new"), forKey: "title")
        try inserted.setObject(world.folder, forKey: "folder")
        context.endUndoGrouping()
        let id = inserted.objectID
        try context.undoLastChange()
        #expect(try world.folder.objectIDs(forKey: "notes") == world.ids([0]))
        try context.redoLastChange()
        let note = try context.existingObject(with: id)
        #expect(try note.object(forKey: "folder")?.objectID == world.folder.objectID)
        #expect(try world.folder.objectIDs(forKey: "notes") == world.ids([0]) + [id])
        // Undone and redone once more, after a rename of the folder saved elsewhere and merged.
        try context.undoLastChange()
        try world.saveElsewhere {
            try $0.existingObject(with: world.folder.objectID).setValue(.string("G"), forKey: "name")
        }
        try context.redoLastChange()
        #expect(try world.folder.objectIDs(forKey: "notes") == world.ids([0]) + [id])
        #expect(try world.folder.value(forKey: "name") == .string("G"))
        try context.save()
        let fresh = ObjectContext(store: world.store)
        #expect(
            try fresh.existingObject(with: world.folder.objectID).objectIDs(forKey: "notes") == world.ids([0]) + [id])
        #expect(try world.store.checkIntegrity().findings.isEmpty)
    }

    /// A group that deletes a new note and the stored tag it is tagged with, undone: both come back, linked both
    /// ways (the tag's whole state lists the note, brought back by the same undo).
    @Test func anUndoneDeleteOfANewObjectAndAStoredOneLinksThemBothWays() throws {
        let world = try World(notes: 0)
        let context = world.context
        let note = try context.insert("Note")
        try note.setValue(.string("new"), forKey: "title")
        try note.add(world.tag, toKey: "tags")
        let id = note.objectID
        context.beginUndoGrouping()
        try context.delete(note)
        try context.delete(world.tag)
        context.endUndoGrouping()
        context.processPendingChanges()
        try context.undoLastChange()
        let back = try context.existingObject(with: id)
        #expect(try back.objectIDs(forKey: "tags") == [world.tag.objectID])
        #expect(try world.tag.objectIDs(forKey: "notes") == [id])
        try context.save()
        let fresh = ObjectContext(store: world.store)
        #expect(try fresh.existingObject(with: world.tag.objectID).objectIDs(forKey: "notes") == [id])
    }

    @Test func anUndoKeepsALinkSavedElsewhereMeanwhile() throws {
        let world = try World(notes: 2)
        try world.tag.add(world.notes[0], toKey: "notes")
        try world.saveElsewhere { other in
            try other.existingObject(with: world.tag.objectID).add(
                try other.existingObject(with: world.notes[0].objectID), toKey: "notes")
        }
        try world.context.undoLastChange()
        // Stored now, and not the context's own change before the undone one.
        #expect(try world.tag.objectIDs(forKey: "notes") == world.ids([0]))
        #expect(try world.notes[0].objectIDs(forKey: "tags") == [world.tag.objectID])
    }

    @Test func anUndoDoesNotBringBackALinkRemovedElsewhereMeanwhile() throws {
        let world = try World(notes: 2)
        try world.tag.add(world.notes[0], toKey: "notes")
        try world.context.save()
        try world.tag.remove(world.notes[0], fromKey: "notes")
        try world.saveElsewhere { other in
            try other.existingObject(with: world.tag.objectID).remove(
                try other.existingObject(with: world.notes[0].objectID), fromKey: "notes")
        }
        try world.context.undoLastChange()
        #expect(try world.tag.objectIDs(forKey: "notes") == [])
        #expect(try world.notes[0].objectIDs(forKey: "tags") == [])
    }

    @Test func anUndoKeepsTheContextsEarlierChangeOfTheSameLink() throws {
        let world = try World(notes: 2)
        try world.tag.add(world.notes[0], toKey: "notes")
        try world.context.save()
        try world.tag.remove(world.notes[0], fromKey: "notes")  // stored, removed here
        try world.tag.add(world.notes[0], toKey: "notes")  // and back
        try world.tag.add(world.notes[1], toKey: "notes")  // new here
        try world.tag.remove(world.notes[1], fromKey: "notes")  // and gone
        try world.context.undoLastChange()
        #expect(try world.tag.objectIDs(forKey: "notes") == world.ids([0, 1]))
        try world.context.undoLastChange()
        #expect(try world.tag.objectIDs(forKey: "notes") == world.ids([0]))
        try world.context.undoLastChange()
        #expect(try world.tag.objectIDs(forKey: "notes") == [])
        try world.context.undoLastChange()
        #expect(try world.tag.objectIDs(forKey: "notes") == world.ids([0]))
        #expect(!world.context.hasChanges)
    }

    @Test func anUndoDoesNotLinkToAnObjectDeletedElsewhere() throws {
        let world = try World(notes: 2)
        try world.tag.add(world.notes[1], toKey: "notes")
        try world.tag.remove(world.notes[1], fromKey: "notes")
        try world.saveElsewhere { other in try other.delete(try other.existingObject(with: world.notes[1].objectID)) }
        try world.context.undoLastChange()
        #expect(try world.tag.objectIDs(forKey: "notes") == [])
    }

    /// The relationships of folder, tag and notes as a model: one dictionary per object.
    struct Model: Equatable {
        var links: [ObjectID: [String: Set<ObjectID>]] = [:]

        mutating func link(_ a: ObjectID, _ name: String, _ b: ObjectID, _ inverse: String) {
            links[a, default: [:]][name, default: []].insert(b)
            links[b, default: [:]][inverse, default: []].insert(a)
        }

        mutating func unlink(_ a: ObjectID, _ name: String, _ b: ObjectID, _ inverse: String) {
            links[a, default: [:]][name, default: []].remove(b)
            links[b, default: [:]][inverse, default: []].remove(a)
        }

        func targets(_ id: ObjectID, _ name: String) -> [ObjectID] {
            (links[id]?[name] ?? []).sorted()
        }
    }

    @Test(arguments: [1 as UInt64, 2, 3])
    func randomLinkChangesUndoAndRedoAsAModelOfWholeStates(seed: UInt64) throws {
        let world = try World(notes: 6)
        let tags =
            [world.tag]
            + (try (1..<3).map { i in
                let tag = try world.context.insert("Tag")
                try tag.setValue(.string("T\(i)"), forKey: "name")
                return tag
            })
        let folders = [world.folder] + [try world.context.insert("Folder")]
        try folders[1].setValue(.string("G"), forKey: "name")
        try world.context.save()
        let context = world.context
        var g = SeededGenerator(seed: seed)
        var model = Model()
        var undoStack: [Model] = []
        var redoStack: [Model] = []
        var trace: [String] = []

        /// One change, made in the context and the model; whether it changed anything.
        func change() throws -> Bool {
            let note = world.notes.randomElement(using: &g)!
            switch Int.random(in: 0..<4, using: &g) {
            case 0:
                let tag = tags.randomElement(using: &g)!
                trace.append("tag \(tag.objectID) + \(note.objectID)")
                let had = model.targets(tag.objectID, "notes").contains(note.objectID)
                try tag.add(note, toKey: "notes")
                model.link(tag.objectID, "notes", note.objectID, "tags")
                return !had
            case 1:
                let tag = tags.randomElement(using: &g)!
                trace.append("tag \(tag.objectID) - \(note.objectID)")
                let had = model.targets(tag.objectID, "notes").contains(note.objectID)
                try note.remove(tag, fromKey: "tags")
                model.unlink(tag.objectID, "notes", note.objectID, "tags")
                return had
            case 2:
                let folder = folders.randomElement(using: &g)!
                trace.append("folder \(folder.objectID) <- \(note.objectID)")
                let old = model.targets(note.objectID, "folder")
                try note.setObject(folder, forKey: "folder")
                for previous in old { model.unlink(previous, "notes", note.objectID, "folder") }
                model.link(folder.objectID, "notes", note.objectID, "folder")
                return old != [folder.objectID]
            default:
                let folder = folders.randomElement(using: &g)!
                trace.append("folder \(folder.objectID) - \(note.objectID)")
                let had = model.targets(folder.objectID, "notes").contains(note.objectID)
                if had { try folder.remove(note, fromKey: "notes") }
                model.unlink(folder.objectID, "notes", note.objectID, "folder")
                return had
            }
        }

        /// An undo or a redo: the context's, and the model's state taken from one stack, its own put on the other.
        func step(
            _ name: String, _ round: Int, can: Bool, from: inout [Model], to: inout [Model], _ body: () throws -> Void
        ) throws {
            trace.append(name)
            #expect(can == !from.isEmpty, "round \(round): \(trace.suffix(6))")
            guard let state = from.popLast() else { return }
            try body()
            to.append(model)
            model = state
        }

        for round in 0..<250 {
            switch Int.random(in: 0..<10, using: &g) {
            case 0..<4:
                // A group of one to three changes.
                let before = model
                context.beginUndoGrouping()
                var changed = false
                for _ in 0..<Int.random(in: 1...3, using: &g) { changed = try change() || changed }
                context.endUndoGrouping()
                if changed {
                    undoStack.append(before)
                    redoStack = []
                }
            case 4, 5:
                try step("undo", round, can: context.canUndo, from: &undoStack, to: &redoStack) {
                    try context.undoLastChange()
                }
            case 6:
                try step("redo", round, can: context.canRedo, from: &redoStack, to: &undoStack) {
                    try context.redoLastChange()
                }
            case 7:
                trace.append("save")
                // A save with nothing to save leaves the undo and redo stacks alone.
                if context.hasChanges {
                    undoStack = []
                    redoStack = []
                }
                try context.save()
            default:
                context.processPendingChanges()
            }
            for object in tags + folders {
                #expect(
                    try object.objectIDs(forKey: "notes") == model.targets(object.objectID, "notes"),
                    "round \(round) \(object.objectID): \(trace.suffix(6))")
            }
            for note in world.notes {
                #expect(try note.objectIDs(forKey: "tags") == model.targets(note.objectID, "tags"), "round \(round)")
                #expect(
                    try note.objectIDs(forKey: "folder") == model.targets(note.objectID, "folder"), "round \(round)")
            }
        }
        // What the context saves is what it showed.
        try context.save()
        let fresh = ObjectContext(store: world.store)
        for object in tags + folders {
            #expect(
                try fresh.existingObject(with: object.objectID).objectIDs(forKey: "notes")
                    == model.targets(object.objectID, "notes"))
        }
        #expect(try world.store.checkIntegrity().findings.isEmpty)
    }
}
