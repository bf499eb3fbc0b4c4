import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// Four contexts on one store (every merge policy, two merging the others' saves automatically) take random steps in
/// turn: inserts, updates, deletes (cascade, nullify, deny), relationship changes (to-one and to-many), undo,
/// refreshes, child contexts saving into them and the store's batch updates and deletes, edits kept
/// unsaved while the others save, so that what each read goes stale. Saves may be refused (conflicts, deny rules,
/// validation); nothing else may fail, and the store passes its integrity check all along: no dangling reference,
/// no to-one with two targets, every inverse and index entry in place, every derived attribute right. (The
/// interleaving is seeded, so a failure reproduces; threads racing on the store are the thread-safety tests' part.)
/// Three authors (a0-a2) with two books each (b0-b5), and three publishers (p0-p2).
private func seedLibrary(_ store: PersistentStore) throws {
    let setup = ObjectContext(store: store)
    var authors: [ManagedObject] = []
    for i in 0..<3 {
        let author = try setup.insert("Author")
        try author.setValue(.string("a\(i)"), forKey: "name")
        authors.append(author)
        try setup.insert("Publisher").setValue(.string("p\(i)"), forKey: "name")
    }
    for i in 0..<6 {
        let book = try setup.insert("Book")
        try book.setValue(.string("b\(i)"), forKey: "title")
        try book.setObject(authors[i % 3], forKey: "author")
    }
    try setup.save()
}

@Suite struct RacingContextsIntegrityTests {
    @Test(arguments: [1 as UInt64, 2, 3, 4])
    func interleavedContextsNeverCorruptTheStore(seed: UInt64) throws {
        // With derived attributes read through relationships, which every write must leave right.
        let schema = try Fixtures.librarySchemaWithDerivations()
        let temporary = try TemporaryStore(schema: schema)
        defer { temporary.remove() }
        let store = temporary.store
        try seedLibrary(store)
        let steps = TestScale.size(1_500, stress: 12_000)
        let policies: [MergePolicy] = [.error, .propertyLevel, .contextWins, .storeWins]
        let contexts = (0..<4).map { i in
            let context = ObjectContext(store: store, name: "context \(i)")
            context.mergePolicy = policies[i]
            context.automaticallyMergesChangesFromStore = i % 2 == 0
            return context
        }
        var g = SeededGenerator(seed: seed)
        var refused = 0
        var saves = 0
        for step in 0..<steps {
            // One context takes a step: edits kept unsaved, or a save, interleaved with the others' (whose saves make
            // what it read stale: the races to survive).
            let index = Int.random(in: 0..<contexts.count, using: &g)
            let context = contexts[index]
            func any(_ entity: String) throws -> ManagedObject? {
                try context.fetch(FetchRequest(entity: entity)).filter { !$0.isDeleted }.randomElement(using: &g)
            }
            do {
                if Int.random(in: 0..<3, using: &g) == 0 {
                    saves += 1
                    try context.save()
                    continue
                }
                switch Int.random(in: 0..<17, using: &g) {
                case 12:
                    if context.canUndo { try context.undoLastChange() }
                case 13:
                    if let book = try any("Book") { try context.refresh(book, mergeChanges: Bool.random(using: &g)) }
                case 14:
                    let pages = Int64.random(in: 1..<500, using: &g)
                    try store.batchUpdate(
                        "Book", where: try FetchPredicate("pages < \(pages)"), set: ["pages": .int(pages)])
                case 15:
                    try store.batchDelete(
                        "Chapter", where: try FetchPredicate("title == 'c\(Int.random(in: 0..<step + 1, using: &g))'"))
                case 16:
                    // A child context's edits, saved into this one.
                    let child = ObjectContext(parent: context)
                    if let book = try child.fetch(FetchRequest(entity: "Book")).filter({ !$0.isDeleted }).randomElement(
                        using: &g),
                        let author = try child.fetch(FetchRequest(entity: "Author")).filter({ !$0.isDeleted })
                            .randomElement(using: &g)
                    {
                        try book.setObject(author, forKey: "author")
                        try child.save()
                    }
                case 0:
                    let book = try context.insert("Book")
                    try book.setValue(.string("b\(index)-\(step)"), forKey: "title")
                    if let author = try any("Author") { try book.setObject(author, forKey: "author") }
                case 1:
                    if let book = try any("Book") {
                        let chapter = try context.insert("Chapter")
                        try chapter.setValue(.string("c\(step)"), forKey: "title")
                        try chapter.setObject(book, forKey: "book")
                    }
                case 2, 3, 4:
                    if let book = try any("Book") { try book.setObject(try any("Author"), forKey: "author") }
                case 5, 6:
                    if let book = try any("Book"), let publisher = try any("Publisher") {
                        try publisher.add(book, toKey: "books")
                    }
                case 7:
                    if let book = try any("Book") {
                        try book.setValue(.int(Int64.random(in: 1..<500, using: &g)), forKey: "pages")
                    }
                case 8:
                    if let book = try any("Book") { try context.delete(book) }  // cascades to chapters
                case 9:
                    if let author = try any("Author"), Int.random(in: 0..<3, using: &g) == 0 {
                        try context.delete(author)  // cascades to books
                    } else {
                        try context.insert("Author").setValue(.string("a\(index)-\(step)"), forKey: "name")
                    }
                case 10:
                    if let publisher = try any("Publisher") { try context.delete(publisher) }  // deny
                default:
                    if let chapter = try any("Chapter") { try chapter.setObject(try any("Book"), forKey: "book") }
                }
            } catch let error as EntityStoreError
                where [.conflict, .validationFailed, .objectNotFound, .invalidObject].contains(error.code)
            {
                // A race lost (or a deny rule, or an object deleted elsewhere): drop the unsaved changes.
                refused += 1
                context.rollback()
            }
            if Int.random(in: 0..<40, using: &g) == 0 { context.reset() }
            if step % 100 == 99 {
                let (findings, _) = try store.checkIntegrity()
                guard findings.isEmpty else {
                    Issue.record("seed \(seed), step \(step): \(findings.prefix(10))")
                    return
                }
            }
        }
        for context in contexts {
            do {
                try context.save()
            } catch let error as EntityStoreError where [.conflict, .validationFailed].contains(error.code) {
                refused += 1
            }
        }
        let (findings, _) = try store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings.prefix(10))")
        // The history, replayed, gives back what the store holds: no save recorded a change it did not make.
        let replay = try HistoryReplay(store)
        #expect(replay.problems.isEmpty, "seed \(seed): \(replay.problems.prefix(40))")
        #expect(saves > steps / 4)
        print("racing contexts, seed \(seed): \(saves) saves, \(refused) refused")
    }

    /// The same races seen through controllers: every context has controllers through relationships (sections by a
    /// to-one's attribute, predicates over to-many counts, `ANY` and `SUBQUERY`, a window), each with and without
    /// pending changes (a controller of saved state follows saves and merges only); contexts rename and retitle
    /// what the others sort by, undo and redo in groups, and batch-delete with the delete rules. Half the contexts
    /// merge: automatically, or (even seeds) from the history as another process does. After every step, in each
    /// context that merges, every controller equals a fresh fetch and its callback replica, and every relationship
    /// it has loaded equals the store's: no save leaves an inverse out of its record, however stale the saving
    /// context's view was. (A context that does not merge shows its own, older view: its controllers are checked
    /// against their replicas only.)
    @Test(arguments: [1 as UInt64, 2, 3])
    func interleavedContextsKeepEveryMergingViewRight(seed: UInt64) throws {
        let temporary = try TemporaryStore(schema: try Fixtures.librarySchema())
        defer { temporary.remove() }
        let store = temporary.store
        try seedLibrary(store)
        let steps = TestScale.size(300, stress: 2_100)
        let policies: [MergePolicy] = [.error, .propertyLevel, .contextWins, .storeWins]
        let contexts = (0..<4).map { i in
            let context = ObjectContext(store: store, name: "context \(i)")
            context.mergePolicy = policies[i]
            // Even seeds merge what they read from the history, as another process does.
            context.automaticallyMergesChangesFromStore = i % 2 == 0 && seed % 2 == 1
            return context
        }
        let shapes: [(entity: String, sort: [SortKey], predicate: String, section: String?, limit: Int)] = [
            ("Book", [SortKey("author.name"), SortKey("title")], "author != nil", "author.name", 0),
            ("Book", [SortKey("title"), SortKey("pages")], "author.name == 'a1' OR publisher.name == 'p0'", nil, 0),
            ("Author", [SortKey("name")], "books.@count >= 2", nil, 0),
            ("Author", [SortKey("name", ascending: false)], "ANY books.pages > 250", nil, 0),
            ("Chapter", [SortKey("book.title"), SortKey("title")], "book != nil", "book.title", 0),
            ("Book", [SortKey("publisher.name"), SortKey("title")], "publisher != nil", nil, 4),
            ("Book", [SortKey("title")], "SUBQUERY(chapters, $c, $c.title BEGINSWITH 'c1').@count > 0", nil, 0),
            ("Publisher", [SortKey("name")], "books.@count == 0", nil, 0),
        ]
        var controllers: [FetchedResultsController] = []
        for context in contexts {
            for (shape, includesPending) in shapes.flatMap({ shape in [(shape, true), (shape, false)] }) {
                var request = FetchRequest(entity: shape.entity, sortKeys: shape.sort)
                request.predicate = try FetchPredicate(shape.predicate)
                request.fetchLimit = shape.limit
                request.includesPendingChanges = includesPending
                let controller = FetchedResultsController(
                    fetchRequest: request, context: context, sectionNameKeyPath: shape.section)
                try controller.performFetch()
                controllers.append(controller)
            }
        }
        let delegates = controllers.map { ReplicaDelegate($0) }
        for (controller, delegate) in zip(controllers, delegates) { controller.delegate = delegate }
        var g = SeededGenerator(seed: seed)
        var trace: [String] = []
        var merged = [UInt64](repeating: try store.lastTransaction(), count: contexts.count)
        steps: for step in 0..<steps {
            let index = Int.random(in: 0..<contexts.count, using: &g)
            let context = contexts[index]
            func any(_ entity: String) throws -> ManagedObject? {
                try context.fetch(FetchRequest(entity: entity)).filter { !$0.isDeleted }.randomElement(using: &g)
            }
            var what = ""
            do {
                if Int.random(in: 0..<3, using: &g) == 0 {
                    what = "save"
                    try context.save()
                } else {
                    let grouped = Int.random(in: 0..<4, using: &g) == 0
                    if grouped { context.beginUndoGrouping() }
                    defer { if grouped { context.endUndoGrouping() } }
                    switch Int.random(in: 0..<20, using: &g) {
                    case 0:
                        what = "insert a book"
                        let book = try context.insert("Book")
                        try book.setValue(.string("b\(index)-\(step)"), forKey: "title")
                        if let author = try any("Author") { try book.setObject(author, forKey: "author") }
                    case 1:
                        what = "insert a chapter"
                        if let book = try any("Book") {
                            let chapter = try context.insert("Chapter")
                            try chapter.setValue(.string("c\(step % 30)"), forKey: "title")
                            try chapter.setObject(book, forKey: "book")
                        }
                    case 2, 3, 4:
                        what = "set a book's author"
                        if let book = try any("Book") { try book.setObject(try any("Author"), forKey: "author") }
                    case 5, 6:
                        what = "add a book to a publisher"
                        if let book = try any("Book"), let publisher = try any("Publisher") {
                            try publisher.add(book, toKey: "books")
                        }
                    case 7:
                        what = "set pages"
                        if let book = try any("Book") {
                            try book.setValue(.int(Int64.random(in: 1..<500, using: &g)), forKey: "pages")
                        }
                    case 8:
                        what = "delete a book"
                        if let book = try any("Book") { try context.delete(book) }
                    case 9:
                        what = "delete or insert an author"
                        if let author = try any("Author"), Int.random(in: 0..<3, using: &g) == 0 {
                            try context.delete(author)
                        } else {
                            try context.insert("Author").setValue(.string("a\(index)-\(step)"), forKey: "name")
                        }
                    case 10:
                        what = "delete a publisher"
                        if let publisher = try any("Publisher") { try context.delete(publisher) }
                    case 11:
                        what = "move a chapter"
                        if let chapter = try any("Chapter") { try chapter.setObject(try any("Book"), forKey: "book") }
                    case 12 where !grouped:
                        if Bool.random(using: &g) {
                            what = "undo"
                            if context.canUndo { try context.undoLastChange() }
                        } else {
                            what = "redo"
                            if context.canRedo { try context.redoLastChange() }
                        }
                    case 13:
                        what = "refresh"
                        if let book = try any("Book") {
                            try context.refresh(book, mergeChanges: Bool.random(using: &g))
                        }
                    case 14:
                        what = "batch update"
                        let pages = Int64.random(in: 1..<500, using: &g)
                        try store.batchUpdate(
                            "Book", where: try FetchPredicate("pages < \(pages)"), set: ["pages": .int(pages)])
                    case 15:
                        // With the delete rules: chapters, books (cascading to chapters), authors (to books), and
                        // publishers (denied while they have books).
                        let (entity, key, values) = [
                            ("Chapter", "title", "c\(Int.random(in: 0..<30, using: &g))"),
                            ("Book", "title", "b\(Int.random(in: 0..<8, using: &g))"),
                            ("Author", "name", "a\(Int.random(in: 0..<4, using: &g))"),
                            ("Publisher", "name", "p\(Int.random(in: 0..<3, using: &g))"),
                        ][Int.random(in: 0..<4, using: &g)]
                        what = "batch delete of \(entity)"
                        try store.batchDelete(entity, where: try FetchPredicate("\(key) == '\(values)'"))
                    case 16:
                        what = "child save"
                        let child = ObjectContext(parent: context)
                        if let book = try child.fetch(FetchRequest(entity: "Book")).filter({ !$0.isDeleted })
                            .randomElement(using: &g),
                            let author = try child.fetch(FetchRequest(entity: "Author")).filter({ !$0.isDeleted })
                                .randomElement(using: &g)
                        {
                            try book.setObject(author, forKey: "author")
                            try child.save()
                        }
                    case 17:
                        what = "rename an author"
                        if let author = try any("Author") {
                            try author.setValue(.string("a\(Int.random(in: 0..<4, using: &g))"), forKey: "name")
                        }
                    case 18:
                        what = "retitle a book"
                        if let book = try any("Book") {
                            try book.setValue(.string("b\(Int.random(in: 0..<8, using: &g))"), forKey: "title")
                        }
                    default:
                        what = "rollback"
                        context.rollback()
                    }
                }
            } catch let error as EntityStoreError
                where [.conflict, .validationFailed, .objectNotFound, .invalidObject].contains(error.code)
            {
                what += " (refused: \(error.code))"
                context.rollback()
            }
            if Int.random(in: 0..<40, using: &g) == 0 {
                context.reset()
                what += ", reset"
            }
            trace.append("\(step): context \(index) \(what)")
            for (position, context) in contexts.enumerated() where position % 2 == 0 && seed % 2 == 0 {
                for record in try store.history(since: merged[position]) { context.merge(record) }
                merged[position] = try store.lastTransaction()
            }
            for context in contexts { context.processPendingChanges() }
            let after = "seed \(seed), after \(trace.suffix(8).joined(separator: "; "))"
            for (position, context) in contexts.enumerated() where position % 2 == 0 {
                for object in context.registered.objects where !context.dirty.contains(object) {
                    for (name, loaded) in object.committedRelated {
                        let relationship = object.entity.relationship(name)!
                        let stored = try store.read { txn in
                            TargetSet(
                                try store.storedTargets(
                                    of: object.objectID, relationship, try store.storage(for: object.entity.name), txn))
                        }
                        guard loaded != stored else { continue }
                        Issue.record(
                            "context \(position) has \(object.objectID).\(name) \(loaded), the store \(stored); \(after)"
                        )
                        break steps
                    }
                }
            }
            for (position, (controller, delegate)) in zip(controllers, delegates).enumerated() {
                let name = "context \(position / (2 * shapes.count))'s controller \(position % (2 * shapes.count))"
                if (position / (2 * shapes.count)) % 2 == 0,
                    let (shown, fetched) = try differenceFromAFreshFetch(controller)
                {
                    Issue.record("\(name) shows \(shown), a fetch \(fetched); \(after)")
                    break steps
                }
                if delegate.replica.sections != controller.sections.map(\.objectIDs) || !delegate.problems.isEmpty {
                    Issue.record("\(name)'s replica differs (\(delegate.problems.prefix(3))); \(after)")
                    break steps
                }
            }
            if step % 100 == 99 {
                let (findings, _) = try store.checkIntegrity()
                if !findings.isEmpty {
                    Issue.record("\(findings.prefix(5)); \(after)")
                    break
                }
            }
        }
    }
}
