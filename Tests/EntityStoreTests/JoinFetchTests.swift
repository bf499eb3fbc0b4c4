import EntityStore
import Foundation
import TestSupport
import Testing

/// `relationship.attribute` compared with a value (`folder.name == %@`, `ANY labels.name BEGINSWITH %@`), served by
/// a fetch of the destination and its inverse relationship instead of a scan that reads every note's folder: the
/// plan, and the answers the notes' own links and their targets' values give, in the context (with its unsaved
/// renames, moves and deletes) and in the store, through random workloads.
@Suite struct JoinFetchTests {
    /// The inverse tests' folders, notes and labels, with names from a small pool so that several share one.
    static let names = ["a", "ab", "b", "c"]

    @Test func aRelationshipsAttributeComparedWithAValueReadsTheDestinationAndTheInverse() throws {
        let temporary = try TemporaryStore(schema: try InverseFetchTests.schema())
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let inbox = try context.insert("Folder")
        let shelf = try context.insert("Shelf")
        let empty = try context.insert("Folder")
        try inbox.setValue("a", forKey: "name")
        try shelf.setValue("ab", forKey: "name")
        try empty.setValue("a", forKey: "name")
        var notes: [ManagedObject] = []
        for i in 0..<6 {
            let note = try context.insert(i % 2 == 0 ? "Note" : "Memo")
            try note.setValue(.string("n\(i)"), forKey: "title")
            try note.setValue(.int(Int64(i)), forKey: "score")
            // n0-n2 in the inbox, n3 and n4 on the shelf, n5 in no folder.
            if i < 5 { try note.setObject(i < 3 ? inbox : shelf, forKey: "folder") }
            notes.append(note)
        }
        try context.save()
        func ids(_ indexes: [Int]) -> [ObjectID] { indexes.map { notes[$0].objectID } }

        var request = FetchRequest(
            entity: "Note", predicate: try FetchPredicate("folder.name == 'a'"), sortKeys: [SortKey("title")])
        let plan = try context.explain(request)
        #expect(
            plan.parts.map(\.access)
                == Array(
                    repeating: .join(relationship: "folder", inverse: "notes", predicate: "name == \"a\""), count: 2))
        #expect(plan.parts.allSatisfy { !$0.filters })
        #expect(
            plan.description.contains(
                "the Memo objects notes holds, of the Folder objects matching name == \"a\" (the inverse of folder)"
                    + " (exactly the matches)"))
        #expect(try context.fetch(request).map(\.objectID) == ids([0, 1, 2]))
        // Sub-entities of the destination, an IN list, a prefix, a range, another conjunct, one kind of note.
        request.predicate = try FetchPredicate("folder.name BEGINSWITH 'a'")
        #expect(try context.fetch(request).map(\.objectID) == ids([0, 1, 2, 3, 4]))
        request.predicate = try FetchPredicate("folder.name IN {'ab', 'c'}")
        #expect(try context.fetch(request).map(\.objectID) == ids([3, 4]))
        request.predicate = try FetchPredicate("folder.name > 'a'")
        #expect(try context.fetch(request).map(\.objectID) == ids([3, 4]))
        request.predicate = try FetchPredicate("folder.name ==[c] 'A' AND score >= 1")
        #expect(try context.explain(request).parts.allSatisfy(\.filters))
        #expect(try context.fetch(request).map(\.objectID) == ids([1, 2]))
        request.entity = "Memo"
        request.predicate = try FetchPredicate("folder.name == 'ab'")
        #expect(try context.fetch(request).map(\.objectID) == ids([3]))
        #expect(try context.count(for: request) == 1)
        request.entity = "Note"
        // Unsaved changes: a renamed folder, a note moved, a new note, a deleted folder.
        try shelf.setValue("a", forKey: "name")
        try notes[0].setObject(empty, forKey: "folder")
        let new = try context.insert("Note")
        try new.setValue("n6", forKey: "title")
        try new.setObject(shelf, forKey: "folder")
        request.predicate = try FetchPredicate("folder.name == 'a'")
        #expect(try context.fetch(request).map(\.objectID) == ids([0, 1, 2, 3, 4]) + [new.objectID])
        try context.delete(inbox)
        #expect(try context.fetch(request).map(\.objectID) == ids([0, 3, 4]) + [new.objectID])
        request.includesPendingChanges = false
        #expect(try context.fetch(request).map(\.objectID) == ids([0, 1, 2]))
        request.includesPendingChanges = true
        try context.save()
        #expect(
            try ObjectContext(store: temporary.store).fetch(request).map(\.objectID) == ids([0, 3, 4]) + [new.objectID])

        // A to-many through ANY.
        let label = try context.insert("Label")
        try label.setValue("b", forKey: "name")
        for note in [notes[1], notes[4]] { try label.add(note, toKey: "notes") }
        try context.save()
        request.predicate = try FetchPredicate("ANY labels.name == 'b'")
        #expect(
            try context.explain(request).parts.allSatisfy {
                $0.access == .join(relationship: "labels", inverse: "notes", predicate: "name == \"b\"") && !$0.filters
            })
        #expect(try context.fetch(request).map(\.objectID) == ids([1, 4]))
        // Longer paths: the destination's fetch joins again, or compares through ANY.
        request.predicate = try FetchPredicate("ANY labels.notes.title == 'n4'")
        #expect(
            try context.explain(request).parts.first?.access
                == .join(relationship: "labels", inverse: "notes", predicate: "ANY notes.title == \"n4\""))
        #expect(try context.fetch(request).map(\.objectID) == ids([1, 4]))
        request.predicate = try FetchPredicate("ANY folder.notes.title == 'n5'")
        #expect(try context.fetch(request).map(\.objectID) == [])
        var labels = FetchRequest(entity: "Label", predicate: try FetchPredicate("ANY notes.folder.name == 'ab'"))
        #expect(
            try context.explain(labels).access
                == .join(relationship: "notes", inverse: "labels", predicate: "folder.name == \"ab\""))
        // n4 is on the shelf, renamed "a"; n1's folder was deleted.
        #expect(try context.fetch(labels).isEmpty)
        labels.predicate = try FetchPredicate("ANY notes.folder.name == 'a'")
        #expect(try context.fetch(labels).map(\.objectID) == [label.objectID])
        // What a note without a folder matches is left to a scan: `!=`, nil, a list with nil; so are ALL and NONE.
        for format in [
            "folder.name != 'a'", "folder.name == nil", "folder.name IN {'a', nil}", "ALL labels.name == 'b'",
            "NONE labels.name == 'b'",
        ] {
            request.predicate = try FetchPredicate(format)
            #expect(try context.explain(request).parts.allSatisfy { $0.access == .fullScan }, "\(format)")
        }
        request.predicate = try FetchPredicate("folder.name != 'a'")
        #expect(try context.fetch(request).map(\.objectID) == ids([1, 2, 5]))
        // With another conjunct, each note read is filtered.
        request.predicate = try FetchPredicate("folder.name == 'a' AND title == 'n3'")
        #expect(try context.explain(request).parts.allSatisfy(\.filters))
        #expect(try context.fetch(request).map(\.objectID) == ids([3]))
        // A value of another type than the attribute's is refused, as by a scan.
        request.predicate = try FetchPredicate("folder.name == 3")
        #expect(throws: EntityStoreError.self) { try context.fetch(request) }
        // A link a folder deleted under its noAction rule leaves on the note reaches nothing, whose name is nil:
        // the join serves it too.
        try notes[1].setObject(shelf, forKey: "pinnedIn")
        try notes[2].setObject(empty, forKey: "pinnedIn")
        try context.save()
        request.predicate = try FetchPredicate("pinnedIn.name == 'a'")
        #expect(
            try context.explain(request).parts.first?.access
                == .join(relationship: "pinnedIn", inverse: "pinned", predicate: "name == \"a\""))
        #expect(try context.fetch(request).map(\.objectID) == ids([1, 2]))
        try context.delete(shelf)
        try context.save()
        #expect(try context.fetch(request).map(\.objectID) == ids([2]))
        #expect(try ObjectContext(store: temporary.store).fetch(request).map(\.objectID) == ids([2]))
    }

    @Test func typedComparisonsThroughAToOneAreJoins() throws {
        let temporary = try TemporaryStore(schema: try Fixtures.librarySchemaWithDerivations())
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let ende = try context.insert(TypedAuthor.self)
        ende.name = "Ende"
        let other = try context.insert(TypedAuthor.self)
        other.name = "Le Guin"
        for (title, author) in [("Momo", ende), ("Earthsea", other), ("Neverending", ende), ("Lone", nil)] {
            let book = try context.insert(TypedBook.self)
            book.title = title
            book.author = author
        }
        try context.save()
        let request = ModelFetchRequest<TypedBook>(
            where: \TypedBook.author?.name == "Ende", sortedBy: [SortKey(\TypedBook.title)])
        #expect(try context.fetch(request).map(\.title) == ["Momo", "Neverending"])
        let plan = try context.explain(request.fetchRequest)
        #expect(plan.parts.map(\.entity) == ["Book", "Comic"])
        #expect(
            plan.parts.allSatisfy {
                $0.access == .join(relationship: "author", inverse: "books", predicate: "name == \"Ende\"")
            })
        // Unsaved: a rename is seen.
        other.name = "Ende"
        #expect(try context.fetch(request).map(\.title) == ["Earthsea", "Momo", "Neverending"])
    }

    @Test func randomWorkloadsAnswerAsTheNotesLinksAndTheirFoldersSay() throws {
        for seed in [1, 2, 3] as [UInt64] { try randomWorkload(seed: seed) }
    }

    /// A workload from `seed`: after every few steps, each comparison of a folder's or a label's name through each
    /// relationship, fetched, equals the notes whose links reach a folder (or label) with that name, in the working
    /// context (its unsaved changes included, and not) and in a fresh one.
    func randomWorkload(seed: UInt64) throws {
        let temporary = try TemporaryStore(schema: try InverseFetchTests.schema())
        defer { temporary.remove() }
        let store = temporary.store
        let (context, other) = InverseFetchTests.mergingContexts(store)
        func live(_ ids: [ObjectID], in context: ObjectContext) throws -> [ManagedObject] {
            try InverseFetchTests.live(ids, in: context)
        }
        var g = SeededGenerator(seed: seed)
        var serial = 0
        var folderIDs: [ObjectID] = []
        var noteIDs: [ObjectID] = []
        var labelIDs: [ObjectID] = []
        let relationships = ["folder", "pinnedIn", "archivedIn"]
        let names = Self.names

        func name(_ g: inout SeededGenerator) -> Value { .string(names.randomElement(using: &g)!) }
        func step(_ context: ObjectContext) throws {
            switch Int.random(in: 0..<14, using: &g) {
            case 0:
                let folder = try context.insert(Bool.random(using: &g) ? "Folder" : "Shelf")
                try folder.setValue(name(&g), forKey: "name")
                folderIDs.append(folder.objectID)
            case 1:
                let label = try context.insert("Label")
                try label.setValue(name(&g), forKey: "name")
                labelIDs.append(label.objectID)
            case 2, 3:
                let note = try context.insert(Bool.random(using: &g) ? "Note" : "Memo")
                serial += 1
                try note.setValue(.string("n\(serial)"), forKey: "title")
                try note.setValue(.int(Int64.random(in: 0..<5, using: &g)), forKey: "score")
                noteIDs.append(note.objectID)
                for key in relationships where Bool.random(using: &g) {
                    if let folder = try live(folderIDs, in: context).randomElement(using: &g) {
                        try note.setObject(folder, forKey: key)
                    }
                }
            case 4:
                // A folder or a label renamed.
                let candidates = try live(Bool.random(using: &g) ? folderIDs : labelIDs, in: context)
                if let object = candidates.randomElement(using: &g) { try object.setValue(name(&g), forKey: "name") }
            case 5:
                guard let note = try live(noteIDs, in: context).randomElement(using: &g) else { return }
                let key = relationships.randomElement(using: &g)!
                let folder = try live(folderIDs, in: context).randomElement(using: &g)
                if let folder, Bool.random(using: &g) {
                    let inverse = ["folder": "notes", "pinnedIn": "pinned", "archivedIn": "archive"][key]!
                    try folder.add(note, toKey: inverse)
                } else {
                    try note.setObject(Bool.random(using: &g) ? folder : nil, forKey: key)
                }
            case 6:
                guard let note = try live(noteIDs, in: context).randomElement(using: &g),
                    let label = try live(labelIDs, in: context).randomElement(using: &g)
                else { return }
                try Bool.random(using: &g) ? note.add(label, toKey: "labels") : note.remove(label, fromKey: "labels")
            case 7:
                if let note = try live(noteIDs, in: context).randomElement(using: &g) { try context.delete(note) }
            case 8:
                let ids = Bool.random(using: &g) ? folderIDs : labelIDs
                if let object = try live(ids, in: context).randomElement(using: &g) { try context.delete(object) }
            case 9:
                context.rollback()
            case 10:
                let from = name(&g)
                _ = try store.batchUpdate(
                    "Folder", where: try FetchPredicate("name == %@", from), set: ["name": name(&g)])
            default:
                try InverseFetchTests.saveOrRollBack(context)
            }
        }

        func check(_ context: ObjectContext, pending: Bool, _ label: String) throws {
            let (reader, notes) = try InverseFetchTests.notes(context, pending: pending, store)
            /// The names of the live objects a note's relationship holds, as the reader sees them.
            func targetNames(_ note: ManagedObject, _ key: String) throws -> [String] {
                try live(note.objectIDs(forKey: key), in: reader).compactMap { target in
                    if case .string(let name) = try target.value(forKey: "name") { name } else { nil }
                }
            }
            func fetched(_ format: String, _ arguments: [PredicateArgument] = []) throws -> Set<ObjectID> {
                var request = FetchRequest(
                    entity: "Note", predicate: try FetchPredicate(format: format, arguments: arguments))
                request.includesPendingChanges = pending
                return Set(try context.fetch(request).map(\.objectID))
            }
            for key in relationships + ["labels"] {
                let any = key == "labels" ? "ANY " : ""
                for name in names {
                    let expected = try Set(notes.filter { try targetNames($0, key).contains(name) }.map(\.objectID))
                    #expect(
                        try fetched("\(any)\(key).name == %@", [.value(.string(name))]) == expected,
                        "seed \(seed) \(label): \(key).name == \(name)")
                }
                let prefixed = try Set(
                    notes.filter { try targetNames($0, key).contains { $0.hasPrefix("a") } }.map(\.objectID))
                #expect(
                    try fetched("\(any)\(key).name BEGINSWITH 'a'") == prefixed,
                    "seed \(seed) \(label): \(key) BEGINSWITH")
                let listed = try Set(
                    notes.filter { try !Set(targetNames($0, key)).isDisjoint(with: ["ab", "c"]) }.map(\.objectID))
                #expect(
                    try fetched("\(any)\(key).name IN {'ab', 'c'}") == listed, "seed \(seed) \(label): \(key) IN")
                if key != "labels" {
                    let other = try Set(notes.filter { try targetNames($0, key).first != "a" }.map(\.objectID))
                    #expect(try fetched("\(key).name != 'a'") == other, "seed \(seed) \(label): \(key).name != a")
                }
                let high = try Set(
                    notes.filter {
                        try targetNames($0, key).contains("b") && $0.value(forKey: "score") != .int(0)
                            && $0.value(forKey: "score") != .int(1)
                    }.map(\.objectID))
                #expect(
                    try fetched("\(any)\(key).name == 'b' AND score >= 2") == high,
                    "seed \(seed) \(label): \(key).name == b AND score >= 2")
            }
            // Longer paths: through a to-one then a to-many, a to-many then a to-one, two to-manys.
            func seen(_ ids: [ObjectID]) throws -> [ManagedObject] { try live(ids, in: reader) }
            func scores(_ note: ManagedObject) throws -> [Int64] {
                if case .int(let score) = try note.value(forKey: "score") { [score] } else { [] }
            }
            let neighbours = try Set(
                notes.filter { note in
                    try seen(note.objectIDs(forKey: "folder")).contains { folder in
                        try seen(folder.objectIDs(forKey: "notes")).contains { try scores($0) == [3] }
                    }
                }.map(\.objectID))
            #expect(
                try fetched("ANY folder.notes.score == 3") == neighbours, "seed \(seed) \(label): folder.notes.score")
            let labelled = try Set(
                notes.filter { note in
                    try seen(note.objectIDs(forKey: "labels")).contains { label in
                        try seen(label.objectIDs(forKey: "notes")).contains { try scores($0) == [4] }
                    }
                }.map(\.objectID))
            #expect(
                try fetched("ANY labels.notes.score == 4") == labelled, "seed \(seed) \(label): labels.notes.score")
            var labels = FetchRequest(entity: "Label", predicate: try FetchPredicate("ANY notes.folder.name == 'a'"))
            labels.includesPendingChanges = pending
            var allLabels = FetchRequest(entity: "Label")
            allLabels.includesPendingChanges = pending
            let expectedLabels = try Set(
                reader.fetch(allLabels).filter { label in
                    try seen(label.objectIDs(forKey: "notes")).contains { try targetNames($0, "folder") == ["a"] }
                }.map(\.objectID))
            #expect(
                try Set(context.fetch(labels).map(\.objectID)) == expectedLabels,
                "seed \(seed) \(label): labels' notes.folder.name")
            // Sorted, and one kind of note.
            var request = FetchRequest(
                entity: "Memo", predicate: try FetchPredicate("folder.name == 'a'"), sortKeys: [SortKey("title")])
            request.includesPendingChanges = pending
            let memos = try notes.filter { try $0.objectID.entityName == "Memo" && targetNames($0, "folder") == ["a"] }
                .sorted { try $0.value(forKey: "title").description < $1.value(forKey: "title").description }
            #expect(
                try context.fetch(request).map(\.objectID) == memos.map(\.objectID),
                "seed \(seed) \(label): Memo folder.name == a, sorted")
        }

        try InverseFetchTests.drive(
            store, context, other, pick: { Int.random(in: 0..<$0, using: &g) }, step: step,
            check: { try check($0, pending: $1, $2) })
    }
}
