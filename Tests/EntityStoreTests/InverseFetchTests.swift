import EntityStore
import Foundation
import TestSupport
import Testing

/// `relationship == %@` and `relationship IN %@` of a to-one, and `ANY relationship == %@` of a to-many, served by
/// the inverse relationship (a folder's notes are the ones its `notes` holds) instead of a scan of every note: the
/// plan, and the answers the objects' own side of each link gives (in the context or in the store) through random
/// links, moves, deletes under each rule, batch deletes, sub-entities, unsaved changes and other contexts' saves.
@Suite struct InverseFetchTests {
    /// Folders (and shelves, a kind of folder) holding notes (and memos, a kind of note) three ways: `notes`
    /// (nullify), `pinned` (noAction: a deleted folder leaves its notes' `pinnedIn`), `archive` (cascade; a deleted
    /// note leaves its entry in `archive`, under the note side's noAction rule); labels on notes, many to many.
    static func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Folder") {
                Attribute("name", .string)
                Relationship("notes", to: "Note", inverse: "folder", toMany: true)
                Relationship("pinned", to: "Note", inverse: "pinnedIn", toMany: true, deleteRule: .noAction)
                Relationship("archive", to: "Note", inverse: "archivedIn", toMany: true, deleteRule: .cascade)
            }
            Entity("Shelf", inherits: "Folder") { Attribute("color", .string, optional: true) }
            Entity("Note") {
                Attribute("title", .string)
                Attribute("score", .int64, default: 0)
                Relationship("folder", to: "Folder", inverse: "notes")
                Relationship("pinnedIn", to: "Folder", inverse: "pinned")
                Relationship("archivedIn", to: "Folder", inverse: "archive", deleteRule: .noAction)
                Relationship("labels", to: "Label", inverse: "notes", toMany: true)
            }
            Entity("Memo", inherits: "Note") { Attribute("body", .string, optional: true) }
            Entity("Label") {
                Attribute("name", .string)
                Relationship("notes", to: "Note", inverse: "labels", toMany: true)
            }
        }
    }

    /// Two contexts that merge each other's saves, property by property.
    static func mergingContexts(_ store: PersistentStore) -> (ObjectContext, ObjectContext) {
        let context = ObjectContext(store: store, name: "ui")
        let other = ObjectContext(store: store, name: "other")
        for each in [context, other] {
            each.mergePolicy = .propertyLevel
            each.automaticallyMergesChangesFromStore = true
        }
        return (context, other)
    }

    /// The objects of `ids` the context has and has not deleted (another context's unsaved ones, and those deleted
    /// elsewhere, it has not).
    static func live(_ ids: [ObjectID], in context: ObjectContext) throws -> [ManagedObject] {
        try ids.compactMap { id in
            do {
                let object = try context.existingObject(with: id)
                return object.isDeleted ? nil : object
            } catch let error as EntityStoreError where error.code == .objectNotFound {
                return nil
            }
        }
    }

    /// Runs a workload's 150 rounds: a step in the working context three times in four (else in the other one, which
    /// saves one round in four), and every third round `check` of the working context with its unsaved changes and
    /// without, and of a fresh context. `pick(n)` draws from the workload's generator.
    static func drive(
        _ store: PersistentStore, _ context: ObjectContext, _ other: ObjectContext, pick: (Int) -> Int,
        step: (ObjectContext) throws -> Void, check: (ObjectContext, Bool, String) throws -> Void
    ) throws {
        for round in 0..<150 {
            try step(pick(4) == 0 ? other : context)
            if pick(4) == 0 { try saveOrRollBack(other) }
            guard round % 3 == 0 else { continue }
            try check(context, true, "round \(round), unsaved changes")
            try check(context, false, "round \(round), saved state")
            try check(ObjectContext(store: store), true, "round \(round), fresh context")
        }
    }

    /// The notes a check compares, and the context that holds them (kept with them: the notes of a context no longer
    /// referenced are no longer registered): the working context's own view with its unsaved changes, or the store's
    /// through a fresh context. The other context's saves are merged first (a fetch would merge them in the middle of
    /// the comparison).
    static func notes(
        _ context: ObjectContext, pending: Bool, _ store: PersistentStore
    ) throws -> (reader: ObjectContext, notes: [ManagedObject]) {
        context.processPendingChanges()
        var all = FetchRequest(entity: "Note")
        all.includesPendingChanges = pending
        let reader = pending ? context : ObjectContext(store: store)
        return (reader, try reader.fetch(all))
    }

    /// A store of this schema with a shelf named "s" and a note titled "n", not linked, inserted in a context.
    static func shelfAndNote() throws -> (TemporaryStore, ObjectContext, shelf: ManagedObject, note: ManagedObject) {
        let temporary = try TemporaryStore(schema: try schema())
        let context = ObjectContext(store: temporary.store)
        let shelf = try context.insert("Shelf")
        try shelf.setValue("s", forKey: "name")
        let note = try context.insert("Note")
        try note.setValue("n", forKey: "title")
        return (temporary, context, shelf, note)
    }

    /// Saves; a save that lost a race (an object deleted elsewhere, a link to one) is rolled back.
    static func saveOrRollBack(_ context: ObjectContext) throws {
        do {
            try context.save()
        } catch let error as EntityStoreError
            where [.conflict, .validationFailed, .objectNotFound, .invalidObject].contains(error.code)
        {
            context.rollback()
        }
    }

    @Test func aRelationshipComparedWithObjectsReadsTheInverse() throws {
        let temporary = try TemporaryStore(schema: try Self.schema())
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let folder = try context.insert("Folder")
        let other = try context.insert("Shelf")
        try folder.setValue("f", forKey: "name")
        try other.setValue("s", forKey: "name")
        var notes: [ManagedObject] = []
        for i in 0..<6 {
            let note = try context.insert(i % 2 == 0 ? "Note" : "Memo")
            try note.setValue(.string("n\(i)"), forKey: "title")
            try note.setValue(.int(Int64(i)), forKey: "score")
            try note.setObject(i < 4 ? folder : other, forKey: "folder")
            notes.append(note)
        }
        try context.save()

        var request = FetchRequest(
            entity: "Note", predicate: try FetchPredicate("folder == %@", folder), sortKeys: [SortKey("title")])
        let plan = try context.explain(request)
        #expect(
            plan.parts.map(\.access)
                == Array(repeating: .inverse(relationship: "folder", inverse: "notes", count: 1), count: 2))
        #expect(plan.parts.allSatisfy { !$0.filters })
        #expect(try context.fetch(request).map(\.objectID) == notes.prefix(4).map(\.objectID))
        // One kind of note only, another conjunct, a list of folders, a folder twice.
        request.entity = "Memo"
        #expect(try context.fetch(request).map(\.objectID) == [notes[1].objectID, notes[3].objectID])
        #expect(try context.explain(request).access == .inverse(relationship: "folder", inverse: "notes", count: 1))
        request.entity = "Note"
        request.predicate = try FetchPredicate("folder == %@ AND score >= 2", folder)
        #expect(try context.explain(request).parts.allSatisfy(\.filters))
        #expect(try context.fetch(request).map(\.objectID) == [notes[2].objectID, notes[3].objectID])
        request.predicate = try FetchPredicate(
            "folder IN %@", PredicateArgument.objects([other.objectID, folder.objectID, other.objectID]))
        #expect(try context.fetch(request).map(\.objectID) == notes.map(\.objectID))
        #expect(try context.count(for: request) == 6)
        #expect(
            try context.explain(request).parts.first?.access
                == .inverse(relationship: "folder", inverse: "notes", count: 2))
        // An object of another kind than the destination is refused, after a fetch of the same shape too.
        request.predicate = try FetchPredicate("folder == %@", notes[0])
        #expect(throws: EntityStoreError.self) { try context.fetch(request) }
        request.predicate = try FetchPredicate(
            "folder IN %@", PredicateArgument.objects([folder.objectID, notes[0].objectID]))
        #expect(throws: EntityStoreError.self) { try context.fetch(request) }
        // A to-many through ANY, however it is spelled.
        let label = try context.insert("Label")
        try label.setValue("l", forKey: "name")
        for note in [notes[1], notes[4]] { try label.add(note, toKey: "notes") }
        try context.save()
        for format in ["ANY labels == %@", "labels CONTAINS %@", "%@ IN labels"] {
            request.predicate = try FetchPredicate(format, label)
            #expect(try context.fetch(request).map(\.objectID) == [notes[1].objectID, notes[4].objectID])
            #expect(
                try context.explain(request).parts.allSatisfy {
                    $0.access == .inverse(relationship: "labels", inverse: "notes", count: 1) && !$0.filters
                })
        }
        request.predicate = try FetchPredicate("ANY labels IN %@", PredicateArgument.objects([label.objectID]))
        #expect(try context.count(for: request) == 2)
        // NONE and ALL are not membership: a scan answers.
        request.predicate = try FetchPredicate("NONE labels == %@", label)
        #expect(try context.explain(request).parts.allSatisfy { $0.access == .fullScan })
        #expect(try context.count(for: request) == 4)
        // The inverse's noAction rule can leave links on the notes' side alone: a scan answers.
        request.predicate = try FetchPredicate("pinnedIn == %@", folder)
        #expect(try context.explain(request).parts.allSatisfy { $0.access == .fullScan })
        #expect(try context.explain(request).description.contains("full scan"))
        #expect(
            try context.explain(FetchRequest(entity: "Memo", predicate: try FetchPredicate("folder == %@", folder)))
                .description.contains("the Memo objects notes holds, of 1 object (the inverse of folder)"))
    }

    /// A shelf (a kind of folder) deleted under the noAction rule of `pinned` leaves its notes' `pinnedIn`, which the
    /// store keeps as a key alone and reads back as a `Folder`; the context that deleted it still says `Shelf`. A
    /// comparison with the shelf, either way it is named, finds the notes in every context, in memory and in the
    /// store alike.
    @Test func aLinkLeftByADeletedSubEntitysObjectMatchesInEveryContext() throws {
        let (temporary, context, shelf, note) = try Self.shelfAndNote()
        defer { temporary.remove() }
        try note.setObject(shelf, forKey: "pinnedIn")
        try context.save()
        let shelfID = shelf.objectID
        let asFolder = ObjectID(entityName: "Folder", primaryKey: shelfID.primaryKey)
        try context.delete(shelf)
        try context.save()
        let fresh = ObjectContext(store: temporary.store)
        #expect(try fresh.existingObject(with: note.objectID).objectIDs(forKey: "pinnedIn") == [asFolder])
        for (name, reader) in [("deleting context", context), ("fresh context", fresh)] {
            for pending in [true, false] {
                for (format, argument) in [
                    ("pinnedIn == %@", PredicateArgument.object(shelfID)), ("pinnedIn == %@", .object(asFolder)),
                    ("pinnedIn IN %@", .objects([shelfID])), ("pinnedIn != %@", .object(shelfID)),
                ] {
                    var request = FetchRequest(
                        entity: "Note", predicate: try FetchPredicate(format: format, arguments: [argument]))
                    request.includesPendingChanges = pending
                    let expected = format.contains("!=") ? [] : [note.objectID]
                    #expect(try reader.fetch(request).map(\.objectID) == expected, "\(name) \(pending) \(format)")
                }
            }
        }
        // In memory too: the note changed (unsaved) is evaluated by the context.
        try note.setValue("m", forKey: "title")
        let request = FetchRequest(entity: "Note", predicate: try FetchPredicate("pinnedIn == %@", asFolder))
        #expect(try context.fetch(request).map(\.objectID) == [note.objectID])
    }

    /// An object is its primary key in its hierarchy: a shelf named by an ID of its superentity (`Folder/p1`, as a
    /// dangling link reads back, or as made by hand) is the shelf, for the inverse a fetch reads, for a scan, for
    /// `SELF`, and in memory alike.
    @Test func aSubEntitysObjectNamedAsItsSuperentityIsTheSameObject() throws {
        let (temporary, context, shelf, note) = try Self.shelfAndNote()
        defer { temporary.remove() }
        for key in ["folder", "pinnedIn"] { try note.setObject(shelf, forKey: key) }
        let asFolder = ObjectID(entityName: "Folder", primaryKey: shelf.objectID.primaryKey)
        for saved in [false, true] {
            for format in ["folder == %@", "pinnedIn == %@", "folder IN %@"] {
                let argument: PredicateArgument = format.contains("IN") ? .objects([asFolder]) : .object(asFolder)
                let request = FetchRequest(
                    entity: "Note", predicate: try FetchPredicate(format: format, arguments: [argument]))
                #expect(try context.fetch(request).map(\.objectID) == [note.objectID], "\(format), saved: \(saved)")
            }
            let request = FetchRequest(entity: "Folder", predicate: try FetchPredicate("SELF == %@", asFolder))
            #expect(try context.fetch(request).map(\.objectID) == [shelf.objectID], "saved: \(saved)")
            if !saved { try context.save() }
        }
        let fresh = ObjectContext(store: temporary.store)
        let request = FetchRequest(entity: "Note", predicate: try FetchPredicate("folder == %@", asFolder))
        #expect(try fresh.explain(request).access == .inverse(relationship: "folder", inverse: "notes", count: 1))
        #expect(try fresh.fetch(request).map(\.objectID) == [note.objectID])
    }

    /// A context merging the delete of a shelf under `pinned`'s noAction rule keeps the link a note it has unsaved
    /// changes on holds in the store (the store keeps it too), and takes out only a link it made and has not saved
    /// (which would name nothing): after a rollback the note says what the store says, and fetches agree.
    @Test func aMergedDeleteUnderNoActionKeepsTheStoredLinkOfAChangedObject() throws {
        let temporary = try TemporaryStore(schema: try Self.schema())
        defer { temporary.remove() }
        let store = temporary.store
        let context = ObjectContext(store: store)
        let other = ObjectContext(store: store)
        let shelf = try context.insert("Shelf")
        try shelf.setValue("s", forKey: "name")
        let pinned = try context.insert("Note")
        try pinned.setValue("pinned", forKey: "title")
        try pinned.setObject(shelf, forKey: "pinnedIn")
        let filed = try context.insert("Note")
        try filed.setValue("filed", forKey: "title")
        try filed.setObject(shelf, forKey: "folder")
        let unsaved = try context.insert("Note")
        try unsaved.setValue("unsaved", forKey: "title")
        try context.save()
        // Unsaved changes on both notes: a title, a new link to the shelf.
        try pinned.setValue("pinned, renamed", forKey: "title")
        try unsaved.setObject(shelf, forKey: "pinnedIn")
        try other.delete(try other.existingObject(with: shelf.objectID))
        try other.save()
        context.merge(try #require(try store.history().last))
        // The stored link stays; the unsaved one, and the nullified `folder`, are gone.
        #expect(try pinned.objectIDs(forKey: "pinnedIn").map(\.primaryKey) == [shelf.objectID.primaryKey])
        #expect(try unsaved.objectIDs(forKey: "pinnedIn").isEmpty)
        #expect(try filed.objectIDs(forKey: "folder").isEmpty)
        context.rollback()
        #expect(try pinned.objectIDs(forKey: "pinnedIn").map(\.primaryKey) == [shelf.objectID.primaryKey])
        let request = FetchRequest(entity: "Note", predicate: try FetchPredicate("pinnedIn == %@", shelf.objectID))
        for reader in [context, ObjectContext(store: store)] {
            #expect(try reader.fetch(request).map(\.objectID) == [pinned.objectID])
        }
    }

    @Test func typedComparisonsOfAToOneReadTheInverse() throws {
        let temporary = try TemporaryStore(schema: try Fixtures.librarySchemaWithDerivations())
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let ende = try context.insert(TypedAuthor.self)
        ende.name = "Ende"
        let other = try context.insert(TypedAuthor.self)
        other.name = "Le Guin"
        for (title, author) in [("Momo", ende), ("Earthsea", other), ("Neverending", ende)] {
            let book = try context.insert(TypedBook.self)
            book.title = title
            book.author = author
        }
        try context.save()
        let request = ModelFetchRequest<TypedBook>(
            where: \TypedBook.author == ende, sortedBy: [SortKey(\TypedBook.title)])
        #expect(try context.fetch(request).map(\.title) == ["Momo", "Neverending"])
        let plan = try context.explain(request.fetchRequest)
        // A book or a comic (a sub-entity): each part reads the inverse.
        #expect(plan.parts.map(\.entity) == ["Book", "Comic"])
        #expect(plan.parts.allSatisfy { $0.access == .inverse(relationship: "author", inverse: "books", count: 1) })
        #expect(try context.count(TypedBook.self, where: [ende, other].contains(\TypedBook.author)) == 3)
    }

    @Test func randomWorkloadsAnswerAsTheNotesThemselvesSay() throws {
        for seed in [1, 2, 3] as [UInt64] { try randomWorkload(seed: seed) }
    }

    /// A workload from `seed`: after every step, each folder's notes by each relationship, fetched, equal the notes
    /// whose own side names the folder, in the working context (its unsaved changes included, and not) and in a
    /// fresh one.
    func randomWorkload(seed: UInt64) throws {
        let temporary = try TemporaryStore(schema: try Self.schema())
        defer { temporary.remove() }
        let store = temporary.store
        let (context, other) = Self.mergingContexts(store)
        var g = SeededGenerator(seed: seed)
        var serial = 0
        var folderIDs: [ObjectID] = []
        var noteIDs: [ObjectID] = []
        var labelIDs: [ObjectID] = []
        let relationships = ["folder", "pinnedIn", "archivedIn"]

        func step(_ context: ObjectContext) throws {
            switch Int.random(in: 0..<15, using: &g) {
            case 12:
                let label = try context.insert("Label")
                serial += 1
                try label.setValue(.string("l\(serial)"), forKey: "name")
                labelIDs.append(label.objectID)
            case 13:
                // A label put on or taken off, from either side.
                guard let note = try Self.live(noteIDs, in: context).randomElement(using: &g),
                    let label = try Self.live(labelIDs, in: context).randomElement(using: &g)
                else { return }
                let on = Bool.random(using: &g)
                if Bool.random(using: &g) {
                    try on ? note.add(label, toKey: "labels") : note.remove(label, fromKey: "labels")
                } else {
                    try on ? label.add(note, toKey: "notes") : label.remove(note, fromKey: "notes")
                }
            case 14:
                if let label = try Self.live(labelIDs, in: context).randomElement(using: &g) {
                    try context.delete(label)
                }
            case 0, 1:
                let folder = try context.insert(Bool.random(using: &g) ? "Folder" : "Shelf")
                serial += 1
                try folder.setValue(.string("f\(serial)"), forKey: "name")
                folderIDs.append(folder.objectID)
            case 2, 3, 4:
                let note = try context.insert(Bool.random(using: &g) ? "Note" : "Memo")
                serial += 1
                try note.setValue(.string("n\(serial)"), forKey: "title")
                try note.setValue(.int(Int64.random(in: 0..<5, using: &g)), forKey: "score")
                noteIDs.append(note.objectID)
                for key in relationships where Bool.random(using: &g) {
                    if let folder = try Self.live(folderIDs, in: context).randomElement(using: &g) {
                        try note.setObject(folder, forKey: key)
                    }
                }
            case 5, 6:
                // A link moved from either side, or cleared.
                guard let note = try Self.live(noteIDs, in: context).randomElement(using: &g) else { return }
                let key = relationships.randomElement(using: &g)!
                let folder = try Self.live(folderIDs, in: context).randomElement(using: &g)
                if let folder, Bool.random(using: &g) {
                    let inverse = ["folder": "notes", "pinnedIn": "pinned", "archivedIn": "archive"][key]!
                    try folder.add(note, toKey: inverse)
                } else {
                    try note.setObject(Bool.random(using: &g) ? folder : nil, forKey: key)
                }
            case 7:
                if let note = try Self.live(noteIDs, in: context).randomElement(using: &g) { try context.delete(note) }
            case 8:
                if let folder = try Self.live(folderIDs, in: context).randomElement(using: &g) {
                    try context.delete(folder)
                }
            case 9:
                context.rollback()
            case 10:
                if Bool.random(using: &g) {
                    _ = try store.batchDelete("Folder", where: try FetchPredicate("name ENDSWITH '7'"))
                } else {
                    _ = try store.batchDelete("Note", where: try FetchPredicate("title ENDSWITH '3'"))
                }
            default:
                try Self.saveOrRollBack(context)
            }
        }

        func check(_ context: ObjectContext, pending: Bool, _ label: String) throws {
            // What the notes say of their links.
            let (reader, notes) = try Self.notes(context, pending: pending, store)
            func score(_ note: ManagedObject) throws -> Int64 {
                guard case .int(let score) = try note.value(forKey: "score") else { return -1 }
                return score
            }
            // Folders of both kinds, deleted ones included.
            let compared = folderIDs
            // `pinnedIn` is answered by a scan (its inverse's noAction rule), whose links to a deleted shelf read
            // back from the store as the destination's kind (`Folder/p7` where the context still says `Shelf/p7`):
            // the same link, which matches alike (a hierarchy's objects share one sequence of keys).
            func holds(_ note: ManagedObject, _ key: String, _ folder: ObjectID) throws -> Bool {
                try note.objectIDs(forKey: key).contains { $0.primaryKey == folder.primaryKey }
            }
            for key in relationships {
                for folder in compared {
                    var request = FetchRequest(
                        entity: "Note", predicate: try FetchPredicate("\(key) == %@", folder),
                        sortKeys: [SortKey("title")])
                    request.includesPendingChanges = pending
                    let expected = try notes.filter { try holds($0, key, folder) }
                        .sorted { try $0.value(forKey: "title").description < $1.value(forKey: "title").description }
                        .map(\.objectID)
                    let fetched = try context.fetch(request).map(\.objectID)
                    #expect(fetched == expected, "seed \(seed) \(label): \(key) == \(folder)")
                    request.entity = "Memo"
                    #expect(
                        try context.fetch(request).map(\.objectID) == expected.filter { $0.entityName == "Memo" },
                        "seed \(seed) \(label): Memo \(key) == \(folder)")
                    request.entity = "Note"
                    request.predicate = try FetchPredicate("\(key) == %@ AND score >= 2", folder)
                    let high = try notes.filter { try holds($0, key, folder) && score($0) >= 2 }
                    #expect(
                        try Set(context.fetch(request).map(\.objectID)) == Set(high.map(\.objectID)),
                        "seed \(seed) \(label): \(key) == \(folder) AND score >= 2")
                }
                let some = Array(compared.shuffled(using: &g).prefix(3))
                var request = FetchRequest(
                    entity: "Note", predicate: try FetchPredicate("\(key) IN %@", PredicateArgument.objects(some)))
                request.includesPendingChanges = pending
                let expected = try notes.filter { note in try some.contains { try holds(note, key, $0) } }
                #expect(
                    try Set(context.fetch(request).map(\.objectID)) == Set(expected.map(\.objectID)),
                    "seed \(seed) \(label): \(key) IN \(some)")
            }
            // Labels, deleted ones included: membership of a to-many, each way it is spelled.
            for labelID in labelIDs {
                let expected = try Set(
                    notes.filter { try $0.objectIDs(forKey: "labels").contains(labelID) }.map(\.objectID))
                for format in ["ANY labels == %@", "labels CONTAINS %@"] {
                    var request = FetchRequest(entity: "Note", predicate: try FetchPredicate(format, labelID))
                    request.includesPendingChanges = pending
                    #expect(
                        try Set(context.fetch(request).map(\.objectID)) == expected,
                        "seed \(seed) \(label): \(format) \(labelID)")
                }
            }
            let some = Array(labelIDs.shuffled(using: &g).prefix(3))
            var request = FetchRequest(
                entity: "Note", predicate: try FetchPredicate("ANY labels IN %@", PredicateArgument.objects(some)))
            request.includesPendingChanges = pending
            let expected = try notes.filter { !Set(try $0.objectIDs(forKey: "labels")).isDisjoint(with: some) }
            #expect(
                try Set(context.fetch(request).map(\.objectID)) == Set(expected.map(\.objectID)),
                "seed \(seed) \(label): ANY labels IN \(some)")
        }

        try Self.drive(
            store, context, other, pick: { Int.random(in: 0..<$0, using: &g) }, step: step,
            check: { try check($0, pending: $1, $2) })
        // What the noAction rules leave is reported, and nothing else: links to deleted folders on the notes'
        // `pinnedIn`, and deleted notes in the folders' `archive`.
        let findings = try store.checkIntegrity().findings.filter {
            !["Note.pinnedIn", "Memo.pinnedIn", "Folder.archive", "Shelf.archive"].contains($0.location)
        }
        #expect(findings.isEmpty, "seed \(seed): \(findings.prefix(5))")
    }
}
