import EntityStore
import Foundation
import SectionedDiff

#if canImport(Glibc)
import Glibc
#endif

/// One party to the library workload, in a process of its own (``run(path:steps:checks:seed:mergesAutomatically:)``) or
/// taking turns with others in one process: random edits of the library with derived attributes (inserts, renames
/// with hostile names, moves between authors, tag links, cascading and denied deletes, unique tags and emails,
/// comics among the books, custom rules, typed-model edits, undo, refreshes, child contexts, the store's batch
/// updates and deletes), some kept unsaved in a long-lived context and some saved at once by a short-lived one,
/// while the other parties do the same. The long-lived context merges the others' commits from the history, as
/// another process does (or as the store delivers them), and after every step checks its view:
///
/// - every controller equals its callback replica; for every other controller, each batch's change set passes the
///   strict validator and takes the old rows to the new ones, and its snapshot is the new rows;
/// - when nothing was committed since the last merge, every controller of saved state (and, with no unsaved edits,
///   every controller) equals a fresh fetch, and every unchanged registered object's values and loaded
///   relationships equal the store's.
public final class LibraryWorkload {
    static let tagNames = (0..<8).map { "t\($0)" }
    /// Names that sort and compare at the edges: canonically equivalent spellings, case and width variants, the
    /// empty string, NUL, a name past LMDB's key limit (author names are indexed), emoji sequences.
    static let hostileNames = [
        "\u{E9}", "e\u{301}", "E\u{301}", "", "a\u{0}b", "a", String(repeating: "x", count: 3_000),
        String(repeating: "x", count: 3_000) + "y", "\u{1F3F3}\u{FE0F}\u{200D}\u{1F308}", "\u{DF}", "SS", "\u{130}",
        "i\u{307}", "\u{FF21}", "A",
    ]
    static let emails = ["ann@example.org", "Ann@Example.org", "bo@example.org", "cy@example.org", "BO@example.org"]

    /// A delegate that keeps a replica of the rows from the per-row callbacks and, when it asks for whole
    /// batches, checks each batch's change set (strictly valid, and taking the old rows to the new ones) and
    /// snapshot (the rows after the batch).
    final class Replica: FetchedResultsControllerDelegate {
        var replica: CallbackReplica<ObjectID>
        var problems: [String] = []
        let deliversWholeBatches: Bool
        var snapshot: [[ObjectID]]?
        init(_ controller: FetchedResultsController, wholeBatches: Bool) {
            replica = CallbackReplica(controller.sections.map(\.objectIDs))
            deliversWholeBatches = wholeBatches
        }
        func controllerWillChangeContent(_ controller: FetchedResultsController) { replica.begin() }
        func controller(
            _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
            for type: ResultsChangeType, newIndexPath: ItemPath?
        ) {
            switch type {
            case .delete: replica.delete(at: indexPath!.section, indexPath!.item)
            case .insert: replica.insert(objectID, at: newIndexPath!.section, newIndexPath!.item)
            case .move:
                replica.move(
                    objectID, from: (indexPath!.section, indexPath!.item),
                    to: (newIndexPath!.section, newIndexPath!.item))
            case .update: break
            }
        }
        func controller(
            _ controller: FetchedResultsController, didChange section: SectionInfo, atSectionIndex index: Int,
            for type: ResultsChangeType
        ) {
            if type == .insert {
                replica.insertSection(index, items: section.objectIDs)
            } else {
                replica.deleteSection(index)
            }
        }
        func controller(
            _ controller: FetchedResultsController, didChangeContentWith changes: ChangeSet<Value, ObjectID>
        ) {
            problems += BatchValidator.problems(changes)
            do {
                if try changes.apply(to: changes.old) != changes.new { problems.append("apply(old) != new") }
            } catch {
                problems.append("the change set does not apply to its old rows: \(error)")
            }
        }
        func controller(_ controller: FetchedResultsController, didChangeContentWith snapshot: ResultsSnapshot) {
            self.snapshot = snapshot.itemIdentifiers
        }
        func controllerDidChangeContent(_ controller: FetchedResultsController) {
            if let problem = replica.end() { problems.append(problem) }
            if deliversWholeBatches {
                let rows = controller.sections.map(\.objectIDs)
                if snapshot != rows { problems.append("snapshot \(snapshot ?? []) != rows \(rows)") }
                snapshot = nil
            }
        }
        func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
            problems.append("the controller failed: \(error)")
        }
    }

    public let store: PersistentStore
    public let name: String
    let ui: ObjectContext
    var g: SeededGenerator
    var controllers: [(FetchedResultsController, Replica)] = []
    /// The last transaction the long-lived context has merged, and every one before it.
    var merged: UInt64
    /// Merged transactions above `merged` (delivered out of order, or after a gap), for a party that merges as the
    /// store delivers.
    var seen = Set<UInt64>()
    var observation: ObservationToken?
    public private(set) var steps = 0
    public private(set) var saves = 0
    public private(set) var refused = 0
    public private(set) var checks = 0
    /// What the checks found, each with the step and the last steps taken.
    public private(set) var violations: [String] = []
    var trace: [String] = []
    static let policies: [MergePolicy] = [.error, .propertyLevel, .contextWins, .storeWins]

    /// The store's custom rules the parties' saves meet: a book of more than 380 pages, and a delete of an author
    /// named "A" (by the app or a cascade), are refused. (Added by each party: a rule added twice refuses the same.)
    static func addRules(_ store: PersistentStore) throws {
        try store.addValidation(for: "Book") { book, event in
            guard event != .delete, case .int(let pages) = try book["pages"], pages > 380 else { return }
            throw EntityStoreError(.validationFailed, "a book of \(pages) pages is too long", objectID: book.objectID)
        }
        try store.addValidation(for: "Author") { author, event in
            guard event == .delete, try author["name"] == "A" else { return }
            throw EntityStoreError(.validationFailed, "author A stays", objectID: author.objectID)
        }
    }

    /// Three authors, three publishers and eight books, for the parties to start from.
    public static func seed(_ store: PersistentStore) throws {
        let context = ObjectContext(store: store, name: "seed")
        var authors: [ManagedObject] = []
        for i in 0..<3 {
            let author = try context.insert("Author")
            try author.setValue(.string("a\(i)"), forKey: "name")
            authors.append(author)
            try context.insert("Publisher").setValue(.string("p\(i)"), forKey: "name")
        }
        for i in 0..<8 {
            let book = try context.insert("Book")
            try book.setValue(.string("b\(i)"), forKey: "title")
            try book.setValue(.int(Int64(50 * i)), forKey: "pages")
            try book.setObject(authors[i % 3], forKey: "author")
        }
        try context.save()
    }

    /// A party named `name` (in its saves' history entries) whose long-lived context saves under the merge policy
    /// `seed` picks; with `mergesAutomatically`, it merges the others' saves as the store delivers them
    /// (``ObjectContext/automaticallyMergesChangesFromStore``, in one process) instead of reading the history.
    public init(store: PersistentStore, name: String, seed: UInt64, mergesAutomatically: Bool = false) throws {
        self.store = store
        self.name = name
        g = SeededGenerator(seed: seed)
        ui = ObjectContext(store: store, name: name)
        ui.mergePolicy = Self.policies[Int(seed % 4)]
        ui.automaticallyMergesChangesFromStore = mergesAutomatically
        let shapes: [(entity: String, sort: [SortKey], predicate: String, section: String?, limit: Int)] = [
            ("Book", [SortKey("author.name"), SortKey("title")], "author != nil", "author.name", 0),
            ("Book", [SortKey("pages", ascending: false), SortKey("title")], "pages > 100", nil, 0),
            ("Author", [SortKey("bookCount"), SortKey("name")], "bookCount >= 1", nil, 0),
            ("Chapter", [SortKey("book.title"), SortKey("title")], "book != nil", "book.title", 0),
            ("Book", [SortKey("publisher.name"), SortKey("title")], "publisher != nil", nil, 5),
            ("Tag", [SortKey("name")], "books.@count > 0", nil, 0),
            ("Note", [SortKey("text")], "chapter.book.author != nil", nil, 0),
            ("Comic", [SortKey("artist"), SortKey("title")], "pages > 50", "artist", 0),
            ("Book", [SortKey("title"), SortKey("pages", ascending: false)], "pages > 0", nil, -6),
            // Quantifiers and subqueries over to-many relationships, string operators, comparisons that tie
            // distinct values, and sections two relationships away.
            ("Book", [SortKey("title")], "ANY tags.name IN {'t1', 't3', 't5'}", nil, 0),
            (
                "Author", [SortKey("name", comparison: .caseDiacriticInsensitive)],
                "SUBQUERY(books, $b, $b.pages > 200).@count >= 1", nil, 0
            ),
            (
                "Book", [SortKey("authorName", comparison: .localizedStandard), SortKey("title")],
                "title CONTAINS[cd] 'e' OR author.name BEGINSWITH[c] 'a'", nil, 0
            ),
            ("Author", [SortKey("totalPages", ascending: false), SortKey("name")], "NONE books.pages < 50", nil, 0),
            (
                "Chapter", [SortKey("book.author.name"), SortKey("number"), SortKey("title")],
                "ALL notes.text LIKE '*1*'", "book.author.name", 0
            ),
        ]
        // Read before the controllers' first fetch: a commit in between is in the fetch and merged again, as an app
        // that starts following the history does.
        try Self.addRules(store)
        merged = try store.lastTransaction()
        if mergesAutomatically {
            // Every save after `merged` must reach the context: its own, and the others' as it merges them.
            observation = ui.addObserver { [weak self] record in
                guard record.kind == .merged || record.kind == .didSave, let transaction = record.transaction else {
                    return
                }
                self?.seen.insert(transaction)
            }
        }
        for shape in shapes {
            for includesPending in [true, false] {
                var request = FetchRequest(entity: shape.entity, sortKeys: shape.sort)
                request.predicate = try FetchPredicate(shape.predicate)
                // A negative limit: a window of that many rows after the first three.
                request.fetchLimit = abs(shape.limit)
                if shape.limit < 0 { request.fetchOffset = 3 }
                request.includesPendingChanges = includesPending
                let controller = FetchedResultsController(
                    fetchRequest: request, context: ui, sectionNameKeyPath: shape.section)
                try controller.performFetch()
                // Every other controller asks for whole batches too (which takes the O(n) path).
                let replica = Replica(controller, wholeBatches: controllers.count % 2 == 1)
                controller.delegate = replica
                controllers.append((controller, replica))
            }
        }
    }

    func violation(_ message: String) {
        violations.append("step \(steps) of \(name): \(message); last steps \(trace.suffix(8))")
    }

    /// One step: an edit or a save, then a merge of what the others committed and the checks.
    public func step() throws {
        steps += 1
        // The step is made in the long-lived context (kept unsaved until one of its saves) or in a short-lived
        // one that saves it at once.
        let shortLived = Bool.random(using: &g)
        let context = shortLived ? ObjectContext(store: store, name: name) : ui
        if shortLived { context.mergePolicy = Self.policies.randomElement(using: &g)! }
        var what = "save"
        do {
            if !shortLived && Int.random(in: 0..<3, using: &g) == 0 {
                try ui.save()
                saves += 1
            } else {
                what = try Self.edit(context, store: store, step: steps, name: name, using: &g)
                if shortLived {
                    try context.save()
                    saves += 1
                }
            }
        } catch let error as EntityStoreError
            where [.conflict, .validationFailed, .objectNotFound, .invalidObject].contains(error.code)
        {
            // A race lost, a deny rule, a uniqueness clash, or an object another process deleted.
            refused += 1
            what += " refused"
            if shortLived || Bool.random(using: &g) { context.rollback() }
        }
        trace.append("\(shortLived ? "short" : "ui") \(what)")
        if Int.random(in: 0..<50, using: &g) == 0 {
            ui.reset()
            trace.append("reset")
        }

        if !ui.automaticallyMergesChangesFromStore {
            // What the others committed, merged as another process merges: from the history.
            for record in try store.history(since: merged) {
                ui.merge(record)
                merged = record.transaction ?? merged
            }
        }
        ui.processPendingChanges()
        if ui.automaticallyMergesChangesFromStore {
            // Merged as the store delivers them (at once in one process, after a wake-up from another) when the
            // context processes its changes: the checks wait until every save is in, and find no moment to run if
            // one never comes.
            while seen.remove(merged + 1) != nil { merged += 1 }
        }
        for (position, (controller, replica)) in controllers.enumerated() {
            for problem in replica.problems { violation("controller \(position): \(problem)") }
            replica.problems = []
            let rows = controller.sections.map(\.objectIDs)
            if replica.replica.sections != rows {
                violation("controller \(position): callbacks \(replica.replica.sections) != rows \(rows)")
                replica.replica = CallbackReplica(rows)
            }
        }
        if try compareWithStore() { checks += 1 }
    }

    /// Compares the view with a fresh read when nothing was committed since the last merge; false when something
    /// was (the comparison would race the other processes).
    func compareWithStore() throws -> Bool {
        var found: [String] = []
        let reader = ObjectContext(store: store, name: "\(name) check")
        for (position, (controller, _)) in controllers.enumerated()
        where !controller.fetchRequest.includesPendingChanges || !ui.hasChanges {
            let (rows, transaction) = try reader.fetchSnapshot(controller.fetchRequest)
            guard UInt64(transaction) == merged else { return false }
            let shown = controller.sections.flatMap(\.objectIDs)
            if shown != rows.map(\.id) {
                var odd = Set(shown).symmetricDifference(rows.map(\.id))
                if odd.isEmpty { odd = Set(zip(shown, rows.map(\.id)).filter { $0 != $1 }.flatMap { [$0, $1] }) }
                let stored = rows.filter { odd.contains($0.id) }.map { "\($0.id) \($0.values)" }
                found.append("controller \(position): \(shown) != stored \(rows.map(\.id)); differing: \(stored)")
            }
        }
        var snapshot: [ObjectID: ObjectContext.SnapshotRow] = [:]
        for entity in store.schema.entities {
            let (rows, transaction) = try reader.fetchSnapshot(FetchRequest(entity: entity.name))
            guard UInt64(transaction) == merged else { return false }
            for row in rows { snapshot[row.id] = row }
        }
        for object in ui.registeredObjects where !object.isFault && !object.hasChanges && !object.isDeleted {
            guard let row = snapshot[object.objectID] else {
                found.append("\(object.objectID) is registered, unchanged, and not in the store")
                continue
            }
            for (index, attribute) in object.entity.attributes.enumerated() where !attribute.isTransient {
                let value = try object[attribute.name]
                var stored = row.values[index]
                if case .decimal(let decimal) = value, case .string(let text) = stored, decimal.description == text {
                    stored = value
                }
                if value != stored {
                    found.append("\(object.objectID).\(attribute.name): \(value) != stored \(stored)")
                }
            }
            for (index, relationship) in object.entity.relationships.enumerated() {
                let shown = Set(try object.objectIDs(forKey: relationship.name))
                if shown != Set(row.relationships[index]) {
                    found.append(
                        "\(object.objectID).\(relationship.name): \(shown.sorted()) != stored "
                            + "\(row.relationships[index].sorted())")
                }
            }
        }
        // Reading a relationship not yet loaded reads the store: the findings hold only if nothing was committed
        // meanwhile.
        guard try store.lastTransaction() == merged else { return false }
        for finding in found.prefix(3) { violation(finding) }
        return true
    }

    /// The workload in a process of its own (merging the other processes' saves from the history, or as the store's
    /// wake-ups deliver them) until the parent closes its standard input, and at least `steps` steps and `checks`
    /// checks of its view are done. (A check needs a moment when no other process commits; a party that has not
    /// made its checks by 20 times its steps ends anyway, and the parent sees the count.) Prints `ready` once open,
    /// `step N` after each step (the parent waits for these before it kills) and, at the end,
    /// `steps N saves S refused R checks C violations V`; each violation goes to stderr as found (the first few).
    public static func run(
        path: String, steps: Int, checks: Int, seed: UInt64, mergesAutomatically: Bool = false
    ) throws {
        let store = try PersistentStore.open(path: path, schema: try Fixtures.librarySchemaWithDerivations())
        let workload = try LibraryWorkload(
            store: store, name: "worker-\(getpid())", seed: seed, mergesAutomatically: mergesAutomatically)
        let stop = StopRequest()
        print("ready")
        fflush(nil)
        var reported = 0
        while !stop.isRequested || workload.steps < steps
            || (workload.checks < checks && workload.steps < steps * 20)
        {
            try workload.step()
            print("step \(workload.steps)")
            fflush(nil)
            // Reported as found: a process killed later has said what it saw.
            for violation in workload.violations.dropFirst(reported).prefix(max(0, 5 - reported)) {
                FileHandle.standardError.write(Data("violation at \(violation)\n".utf8))
            }
            reported = workload.violations.count
        }
        print(
            "steps \(workload.steps) saves \(workload.saves) refused \(workload.refused) checks \(workload.checks)"
                + " violations \(workload.violations.count)")
    }

    /// One random edit in `context`; returns what it was.
    static func edit(
        _ context: ObjectContext, store: PersistentStore, step: Int, name: String, using g: inout SeededGenerator
    ) throws -> String {
        func any(_ entity: String) throws -> ManagedObject? {
            try context.fetch(FetchRequest(entity: entity)).filter { !$0.isDeleted }.randomElement(using: &g)
        }
        let tag = "\(name)-\(step)"
        let choice = Int.random(in: 0..<24, using: &g)
        switch choice {
        case 0:
            let author = try context.insert("Author")
            try author.setValue(.string("a\(tag)"), forKey: "name")
        case 1, 2:
            let comic = Int.random(in: 0..<3, using: &g) == 0
            let book = try context.insert(comic ? "Comic" : "Book")
            if comic { try book.setValue(.string("artist \(step % 7)"), forKey: "artist") }
            try book.setValue(.string("b\(tag)"), forKey: "title")
            try book.setValue(.int(Int64.random(in: 1..<400, using: &g)), forKey: "pages")
            if let author = try any("Author") { try book.setObject(author, forKey: "author") }
        case 3:
            if let book = try any("Book") {
                let chapter = try context.insert("Chapter")
                try chapter.setValue(.string("c\(step % 20)"), forKey: "title")
                try chapter.setValue(.int(Int64.random(in: 1..<12, using: &g)), forKey: "number")
                try chapter.setObject(book, forKey: "book")
            }
        case 4:
            if let chapter = try any("Chapter") {
                let note = try context.insert("Note")
                try note.setValue(.string("n\(step % 30)"), forKey: "text")
                try note.setObject(chapter, forKey: "chapter")
            }
        case 5:
            // Tags are unique by name: two processes making the same one clash.
            let made = try context.insert("Tag")
            try made.setValue(.string(tagNames.randomElement(using: &g)!), forKey: "name")
            if let book = try any("Book") { try made.add(book, toKey: "books") }
        case 6:
            if let tag = try any("Tag"), let book = try any("Book") {
                if Bool.random(using: &g) {
                    try tag.add(book, toKey: "books")
                } else {
                    try tag.remove(book, fromKey: "books")
                }
            }
        case 7:
            if let book = try any("Book") {
                try book.setValue(.int(Int64.random(in: 1..<400, using: &g)), forKey: "pages")
            }
        case 8:
            if let book = try any("Book") {
                let title = Bool.random(using: &g) ? hostileNames.randomElement(using: &g)! : "r\(tag)"
                try book.setValue(.string(title), forKey: "title")
            }
        case 9, 10:
            if let book = try any("Book") { try book.setObject(try any("Author"), forKey: "author") }
        case 11:
            if let author = try any("Author"), Int.random(in: 0..<3, using: &g) == 0 {
                try context.delete(author)  // cascades to its books, their chapters and notes
            } else if let author = try any("Author") {
                let name = Bool.random(using: &g) ? hostileNames.randomElement(using: &g)! : "a\(tag)"
                try author.setValue(.string(name), forKey: "name")
            }
        case 12:
            if let book = try any("Book") { try context.delete(book) }
        case 13:
            if let publisher = try any("Publisher"), Bool.random(using: &g) {
                try context.delete(publisher)  // denied while it has books
            } else {
                try context.insert("Publisher").setValue(.string("p\(tag)"), forKey: "name")
            }
        case 14:
            if let book = try any("Book") { try book.setObject(try any("Publisher"), forKey: "publisher") }
        case 15:
            // Emails are unique, compared case-insensitively.
            if let author = try any("Author") {
                try author.setValue(
                    Bool.random(using: &g) ? .string(emails.randomElement(using: &g)!) : .null, forKey: "email")
            }
        case 21:
            // Through the typed API: setters that do not throw (a failure is the save's), typed relationships.
            let books = try context.fetch(TypedBook.self, sortedBy: [SortKey(\TypedBook.title)]).filter {
                !$0.managedObject.isDeleted
            }
            if let book = books.randomElement(using: &g) {
                book.pages = Int64.random(in: 1..<400, using: &g)
                if Bool.random(using: &g) {
                    book.author = try context.fetch(TypedAuthor.self).filter { !$0.managedObject.isDeleted }
                        .randomElement(using: &g)
                }
            } else {
                let book = try context.insert(TypedBook.self)
                book.title = "typed \(tag)"
                book.pages = 150
            }
        case 18:
            switch Int.random(in: 0..<4, using: &g) {
            case 0: if context.canRedo { try context.redoLastChange() }
            case 1: context.rollback()
            default: if context.canUndo { try context.undoLastChange() }
            }
        case 19:
            if let book = try any("Book") { try context.refresh(book, mergeChanges: Bool.random(using: &g)) }
        case 20:
            // A child context's edits, saved into this one.
            let child = ObjectContext(parent: context)
            let books = try child.fetch(FetchRequest(entity: "Book")).filter { !$0.isDeleted }
            if let book = books.randomElement(using: &g) {
                try book.setValue(.int(Int64.random(in: 1..<400, using: &g)), forKey: "pages")
                try book.setObject(
                    try child.fetch(FetchRequest(entity: "Author")).filter { !$0.isDeleted }.randomElement(using: &g),
                    forKey: "author")
                try child.save()
            }
        case 22:
            if let note = try any("Note") {
                try note.setValue(.string("n\(Int.random(in: 0..<30, using: &g))"), forKey: "text")
            }
        case 23:
            if let chapter = try any("Chapter") {
                try chapter.setValue(.int(Int64.random(in: 1..<12, using: &g)), forKey: "number")
                if Bool.random(using: &g) { try chapter.setObject(try any("Book"), forKey: "book") }
            }
        case 16:
            let pages = Int64.random(in: 1..<400, using: &g)
            try store.batchUpdate(
                "Book", where: try FetchPredicate("pages > \(pages)"), set: ["score": .double(Double(pages))])
        default:
            try store.batchDelete("Note", where: try FetchPredicate("text == 'n\(Int.random(in: 0..<30, using: &g))'"))
        }
        return "edit \(choice)"
    }
}

/// The library's authors as a typed model over the dynamic schema (the workload edits some books through it).
public final class TypedAuthor: Model {
    public override class var entityName: String { "Author" }
    @Stored public var name: String
    @Stored public var email: String?
    @ToMany(deleteRule: .cascade) public var books: [TypedBook]
}

/// The library's books (comics included) as a typed model.
public final class TypedBook: Model {
    public override class var entityName: String { "Book" }
    @Stored public var title: String
    @Stored public var pages: Int64?
    @ToOne public var author: TypedAuthor?
}
