import EntityStore
import Foundation
import TestSupport
import Testing

/// How relationships are read and written in bulk: a to-many's objects loaded together, a cascade's relationships
/// read together, a new link written once when both of its objects are saved.
@Suite struct RelationshipLoadingTests {
    /// Folders holding notes (cascade), notes tagged (nullify both ways); notes carry a decimal when `decimals`
    /// (a record the quick check leaves to the full one).
    static func schema(decimals: Bool = false) throws -> Schema {
        try Schema(version: 1) {
            Entity("Folder") {
                Attribute("name", .string)
                Relationship("notes", to: "Note", inverse: "folder", toMany: true, deleteRule: .cascade)
            }
            Entity("Note") {
                Attribute("title", .string)
                if decimals { Attribute("price", .decimal, optional: true) }
                Relationship("folder", to: "Folder", inverse: "notes")
                Relationship("tags", to: "Tag", inverse: "notes", toMany: true)
            }
            Entity("Tag") {
                Attribute("name", .string)
                Relationship("notes", to: "Note", inverse: "tags", toMany: true)
            }
        }
    }

    /// A saved folder "F" of `count` notes "n0"...; each note tagged with "T" when `tagged`.
    static func fill(_ store: PersistentStore, count: Int, tagged: Bool = false, decimals: Bool = false) throws {
        let context = ObjectContext(store: store)
        let folder = try context.insert("Folder")
        try folder.setValue(.string("F"), forKey: "name")
        let tag = try context.insert("Tag")
        try tag.setValue(.string("T"), forKey: "name")
        for i in 0..<count {
            let note = try context.insert("Note")
            try note.setValue(.string("n\(i)"), forKey: "title")
            if decimals { try note.setValue(.decimal(Decimal(i) / 4), forKey: "price") }
            try note.setObject(folder, forKey: "folder")
            if tagged { try note.add(tag, toKey: "tags") }
        }
        try context.save()
    }

    static func folder(_ context: ObjectContext) throws -> ManagedObject {
        try context.fetch(FetchRequest(entity: "Folder"))[0]
    }

    static func titles(_ notes: [ManagedObject]) throws -> [String] {
        try notes.map { note in
            guard case .string(let title) = try note.value(forKey: "title") else { return "?" }
            return title
        }
    }

    @Test func aToManysObjectsComeLoadedInIDOrder() throws {
        let temporary = try TemporaryStore(schema: try Self.schema())
        try Self.fill(temporary.store, count: 30)
        let context = ObjectContext(store: temporary.store)
        let notes = try Self.folder(context).objects(forKey: "notes")
        #expect(notes.count == 30)
        #expect(notes.allSatisfy { !$0.isFault })
        #expect(notes.map(\.objectID) == notes.map(\.objectID).sorted())
        #expect(try Set(Self.titles(notes)) == Set((0..<30).map { "n\($0)" }))
    }

    @Test func recordsThatNeedTheFullCheckStayFaultsAndLoadWhenUsed() throws {
        let temporary = try TemporaryStore(schema: try Self.schema(decimals: true))
        try Self.fill(temporary.store, count: 8, decimals: true)
        let context = ObjectContext(store: temporary.store)
        let notes = try Self.folder(context).objects(forKey: "notes")
        #expect(notes.count == 8)
        #expect(notes.allSatisfy { $0.isFault })
        let prices = try notes.map { try $0.value(forKey: "price") }
        #expect(Set(prices) == Set((0..<8).map { Value.decimal(Decimal($0) / 4) }))
    }

    @Test func aTargetMissingFromTheStoreStaysAFaultAndSaysSoWhenUsed() throws {
        // A noAction relationship keeps a link to a deleted object.
        let schema = try Schema(version: 1) {
            Entity("Folder") {
                Attribute("name", .string)
                Relationship("notes", to: "Note", inverse: "folder", toMany: true)
            }
            Entity("Note") {
                Attribute("title", .string)
                Relationship("folder", to: "Folder", inverse: "notes", deleteRule: .noAction)
            }
        }
        let temporary = try TemporaryStore(schema: schema)
        let writer = ObjectContext(store: temporary.store)
        let folder = try writer.insert("Folder")
        try folder.setValue(.string("F"), forKey: "name")
        var notes: [ManagedObject] = []
        for i in 0..<3 {
            let note = try writer.insert("Note")
            try note.setValue(.string("n\(i)"), forKey: "title")
            try note.setObject(folder, forKey: "folder")
            notes.append(note)
        }
        try writer.save()
        try writer.delete(notes[1])
        try writer.save()

        let context = ObjectContext(store: temporary.store)
        let read = try Self.folder(context).objects(forKey: "notes")
        #expect(read.map(\.objectID) == notes.map(\.objectID))
        #expect(read.map(\.isFault) == [false, true, false])
        let error = entityStoreError { _ = try read[1].value(forKey: "title") }
        #expect(error?.code == .objectNotFound && error?.objectID == notes[1].objectID)
        #expect(try Self.titles([read[0], read[2]]) == ["n0", "n2"])
    }

    @Test func aChildContextsToManyReadsItsParentsView() throws {
        let temporary = try TemporaryStore(schema: try Self.schema())
        try Self.fill(temporary.store, count: 5)
        let parent = ObjectContext(store: temporary.store)
        let parentNotes = try Self.folder(parent).objects(forKey: "notes")
        try parentNotes[0].setValue(.string("changed in the parent"), forKey: "title")
        let child = ObjectContext(parent: parent)
        let notes = try Self.folder(child).objects(forKey: "notes")
        #expect(try Self.titles(notes).sorted() == ["changed in the parent", "n1", "n2", "n3", "n4"])
    }

    @Test func aNewLinkBetweenTwoSavedObjectsIsStoredOnceInEachDirection() throws {
        let temporary = try TemporaryStore(schema: try Self.schema())
        try Self.fill(temporary.store, count: 4, tagged: true)
        let context = ObjectContext(store: temporary.store)
        let folder = try Self.folder(context)
        let notes = try folder.objects(forKey: "notes")
        #expect(notes.count == 4)
        let tag = try context.fetch(FetchRequest(entity: "Tag"))[0]
        #expect(try tag.objectIDs(forKey: "notes") == notes.map(\.objectID))
        for note in notes { #expect(try note.objectIDs(forKey: "tags") == [tag.objectID]) }
        // Linked in one save from both sides, each link is stored once each way: removing it once clears it.
        try tag.remove(notes[2], fromKey: "notes")
        try context.save()
        let fresh = ObjectContext(store: temporary.store)
        let freshTag = try fresh.fetch(FetchRequest(entity: "Tag"))[0]
        #expect(try freshTag.objectIDs(forKey: "notes") == [0, 1, 3].map { notes[$0].objectID })
        #expect(try fresh.existingObject(with: notes[2].objectID).objectIDs(forKey: "tags") == [])
        #expect(try temporary.store.checkIntegrity().findings.isEmpty)
    }

    @Test func aCascadeUnlinksEveryNoteItReachesFromItsTags() throws {
        let temporary = try TemporaryStore(schema: try Self.schema())
        try Self.fill(temporary.store, count: 12, tagged: true)
        let context = ObjectContext(store: temporary.store)
        // Deleted as a fault: the cascade reads the notes' relationships, none loaded yet.
        let folderID = try Self.folder(context).objectID
        let fresh = ObjectContext(store: temporary.store)
        try fresh.delete(try fresh.object(with: folderID))
        try fresh.save()
        let check = ObjectContext(store: temporary.store)
        #expect(try check.count(for: FetchRequest(entity: "Note")) == 0)
        let tag = try check.fetch(FetchRequest(entity: "Tag"))[0]
        #expect(try tag.objectIDs(forKey: "notes") == [])
        #expect(try temporary.store.checkIntegrity().findings.isEmpty)
    }
    /// The titles of a fresh context's notes of the folder named `name`, with their tags' names, sorted.
    static func storedFolder(_ store: PersistentStore, _ name: String) throws -> [String] {
        let context = ObjectContext(store: store)
        var request = FetchRequest(entity: "Folder")
        request.predicate = try FetchPredicate(format: "name == %@", arguments: [.value(.string(name))])
        let folders = try context.fetch(request)
        #expect(folders.count == 1)
        return try folders[0].objects(forKey: "notes").map { note in
            #expect(try note.object(forKey: "folder")?.objectID == folders[0].objectID)
            let tags = try note.objects(forKey: "tags").map { tag in
                #expect(try tag.objectIDs(forKey: "notes").contains(note.objectID))
                return try Self.titles([tag], key: "name")[0]
            }
            return try Self.titles([note])[0] + ":" + tags.sorted().joined(separator: ",")
        }.sorted()
    }

    static func titles(_ objects: [ManagedObject], key: String) throws -> [String] {
        try objects.map { object in
            guard case .string(let title) = try object.value(forKey: key) else { return "?" }
            return title
        }
    }

    /// Links between objects a save inserts are written after the objects, in key order: appended where their keys
    /// are above every stored one, put in their places where another context saved higher keys first.
    @Test func newLinksOfContextsSavedOutOfKeyOrderAreAllStored() throws {
        let temporary = try TemporaryStore(schema: try Self.schema())
        let store = temporary.store
        let early = ObjectContext(store: store)
        let late = ObjectContext(store: store)
        var expected: [String: [String]] = [:]
        var firstIDs: [ObjectID] = []
        for (context, name) in [(early, "E"), (late, "L")] {
            let folder = try context.insert("Folder")
            try folder.setValue(.string(name), forKey: "name")
            firstIDs.append(folder.objectID)
            var tags: [ManagedObject] = []
            for t in 0..<3 {
                let tag = try context.insert("Tag")
                try tag.setValue(.string("\(name)t\(t)"), forKey: "name")
                tags.append(tag)
            }
            for i in 0..<20 {
                let note = try context.insert("Note")
                try note.setValue(.string("\(name)\(i)"), forKey: "title")
                try note.setObject(folder, forKey: "folder")
                try note.add(tags[i % 3], toKey: "tags")
                if i % 4 == 0 { try tags[(i + 1) % 3].add(note, toKey: "notes") }
                var names = ["\(name)t\(i % 3)"]
                if i % 4 == 0 { names.append("\(name)t\((i + 1) % 3)") }
                expected[name, default: []].append("\(name)\(i):" + names.sorted().joined(separator: ","))
            }
        }
        // The early context's keys are below the late one's, which is saved first.
        #expect(firstIDs[0] < firstIDs[1])
        try late.save()
        try early.save()
        #expect(try Self.storedFolder(store, "E") == expected["E"]!.sorted())
        #expect(try Self.storedFolder(store, "L") == expected["L"]!.sorted())
        #expect(try store.checkIntegrity().findings.isEmpty)
        // Each link was stored once each way: removing it once clears both sides.
        let context = ObjectContext(store: store)
        var request = FetchRequest(entity: "Tag")
        request.predicate = try FetchPredicate(format: "name == %@", arguments: ["Et0"])
        let tag = try context.fetch(request)[0]
        let notes = try tag.objects(forKey: "notes")
        for note in notes { try tag.remove(note, fromKey: "notes") }
        try context.save()
        #expect(!(try Self.storedFolder(store, "E").contains { $0.contains("Et0") }))
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    /// New objects linked through a relationship that is its own inverse, one of them to itself: each link is stored
    /// once in each direction (a link to itself once).
    @Test func newObjectsLinkedThroughARelationshipThatIsItsOwnInverse() throws {
        let schema = try Schema(version: 1) {
            Entity("Node") {
                Attribute("name", .string)
                Relationship("links", to: "Node", inverse: "links", toMany: true)
            }
        }
        let temporary = try TemporaryStore(schema: schema)
        let store = temporary.store
        let context = ObjectContext(store: store)
        var nodes: [String: ManagedObject] = [:]
        for name in ["a", "b", "c"] {
            let node = try context.insert("Node")
            try node.setValue(.string(name), forKey: "name")
            nodes[name] = node
        }
        try nodes["a"]!.add(nodes["b"]!, toKey: "links")
        try nodes["b"]!.add(nodes["c"]!, toKey: "links")
        try nodes["a"]!.add(nodes["a"]!, toKey: "links")
        try nodes["c"]!.add(nodes["c"]!, toKey: "links")
        try context.save()
        func stored() throws -> [String: [String]] {
            let fresh = ObjectContext(store: store)
            var links: [String: [String]] = [:]
            for node in try fresh.fetch(FetchRequest(entity: "Node")) {
                links[try Self.titles([node], key: "name")[0]] = try Self.titles(
                    node.objects(forKey: "links"), key: "name"
                ).sorted()
            }
            return links
        }
        #expect(try stored() == ["a": ["a", "b"], "b": ["a", "c"], "c": ["b", "c"]])
        #expect(try store.checkIntegrity().findings.isEmpty)
        try nodes["a"]!.remove(nodes["a"]!, fromKey: "links")
        try nodes["c"]!.remove(nodes["b"]!, fromKey: "links")
        try context.save()
        #expect(try stored() == ["a": ["b"], "b": ["a"], "c": ["c"]])
        #expect(try store.checkIntegrity().findings.isEmpty)
    }
}
