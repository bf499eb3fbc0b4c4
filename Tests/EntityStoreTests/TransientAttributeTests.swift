import EntityStore
import Foundation
import TestSupport
import Testing

/// A typed model with a transient property.
final class Draft: Model {
    @Stored var text: String
    @Stored(.transient) var isSelected: Bool = false
}

/// Transient attributes: tracked by the context (changed values, undo, events), never stored.
@Suite struct TransientAttributeTests {
    func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Note") {
                Attribute("text", .string)
                Attribute("scratch", .string, optional: true, transient: true)
                Attribute("clicks", .int64, default: 0, transient: true)
            }
        }
    }

    /// A context recording what it delivers, and a note it inserted as "hello" (shown to `beforeSave`) and saved; the
    /// records so far dropped.
    func savedNote(
        _ store: PersistentStore, beforeSave: (ManagedObject) throws -> Void = { _ in }
    ) throws -> (ObjectContext, ManagedObject, Recorder) {
        let context = ObjectContext(store: store)
        let recorder = Recorder(context)
        let note = try context.insert("Note")
        try note.setValue("hello", forKey: "text")
        try beforeSave(note)
        try context.save()
        recorder.records = []
        return (context, note, recorder)
    }

    @Test func transientValuesAreTrackedButNeverStored() throws {
        try withStore(schema: try schema()) { store, _ in
            let entity = try #require(store.schema.entity("Note"))
            #expect(
                entity.attributes.map(\.name) == ["text"]
                    && entity.transientAttributes.map(\.name) == ["scratch", "clicks"])
            let (context, note, recorder) = try savedNote(store) { (note: ManagedObject) throws in
                #expect(try note["clicks"] == 0 && note["scratch"] == .null)
            }

            try note.setValue(.int(3), forKey: "clicks")
            try note.setValue("draft", forKey: "scratch")
            #expect(note.changedValues() == ["clicks": 3, "scratch": "draft"])
            context.processPendingChanges()
            #expect(Set(recorder.records.flatMap { $0.changes.flatMap(\.changedKeys) }) == ["clicks", "scratch"])
            #expect(entityStoreError { try note.setValue("x", forKey: "clicks") }?.code == .typeMismatch)
            // Undo brings the transient values back, one change at a time.
            try context.undoLastChange()
            #expect(try note["clicks"] == 3 && note["scratch"] == .null)
            try context.undoLastChange()
            #expect(try note["clicks"] == 0)
            try note.setValue(.int(5), forKey: "clicks")
            // Saving writes nothing for it; it stays in this object, and changedValues() starts over.
            let before = try store.history().count
            try context.save()
            #expect(try store.history().count == before)
            #expect(try note["clicks"] == 5 && note.changedValues().isEmpty)
            let other = ObjectContext(store: store)
            #expect(try other.existingObject(with: note.objectID)["clicks"] == 0)
            // A rollback restores the saved value; a fetch cannot filter on a transient key.
            try note.setValue(.int(9), forKey: "clicks")
            context.rollback()
            #expect(try note["clicks"] == 5)
            #expect(
                entityStoreError {
                    _ = try context.fetch(FetchRequest(entity: "Note", predicate: try FetchPredicate("clicks > 1")))
                }?.code == .invalidPredicate)
        }
    }

    /// One stored attribute and transients changed together: the change lists each key once with its two values
    /// (the one stored attribute's change is built without arrays, the transients appended to it).
    @Test func aChangeOfOneAttributeAndTransientsHoldsEveryValue() throws {
        try withStore(schema: try schema()) { store, _ in
            let (context, note, recorder) = try savedNote(store)
            try note.setValue("bye", forKey: "text")
            try note.setValue(.int(4), forKey: "clicks")
            context.processPendingChanges()
            let change = try #require(recorder.records.last?.changes.first)
            #expect(change.kind == .update && change.changedKeys == ["text", "clicks"])
            #expect(change.oldValues == ["text": "hello", "clicks": 0])
            #expect(change.newValues == ["text": "bye", "clicks": 4])
            // Only the stored one alone: one key, both values.
            recorder.records = []
            try note.setValue("again", forKey: "text")
            context.processPendingChanges()
            let alone = try #require(recorder.records.last?.changes.first)
            #expect(
                alone.changedKeys == ["text"] && alone.oldValues == ["text": "bye"]
                    && alone.newValues == ["text": "again"])
        }
    }

    @Test func transientAttributesCannotBeIndexedOrDerived() throws {
        let error = entityStoreError {
            _ = try Schema(version: 1) {
                Entity("Bad") {
                    Attribute("a", .string, indexed: true, transient: true)
                    Attribute("b", .string, derived: "a", transient: true)
                    Attribute("c", .string, validation: .length(1...3), transient: true)
                }
            }
        }
        #expect(error?.code == .invalidSchema && error?.failures.count == 3)
        #expect(Set((error?.failures ?? []).compactMap(\.key)) == ["a", "b", "c"])
    }

    @Test func typedModelsDeclareTransientProperties() throws {
        let temporary = try TemporaryStore(schema: try Schema(version: 1, models: [Draft.self]))
        defer { temporary.remove() }
        #expect(temporary.store.schema.entity("Draft")?.transientAttributes.map(\.name) == ["isSelected"])
        let context = ObjectContext(store: temporary.store)
        let draft = try context.insert(Draft.self)
        draft.text = "hi"
        draft.isSelected = true
        #expect(draft.isSelected && draft.lastError == nil)
        try context.save()
        #expect(draft.isSelected)
        #expect(
            try ObjectContext(store: temporary.store).existingObject(Draft.self, with: draft.objectID).isSelected
                == false)
    }
}
