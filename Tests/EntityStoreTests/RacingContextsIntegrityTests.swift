import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// Four contexts on one store (every merge policy, two merging the others' saves automatically) take random steps in
/// turn: inserts, updates, deletes (cascade, nullify, deny), relationship changes (to-one and to-many), undo,
/// refreshes, child contexts saving into them and the store's batch updates and deletes, edits kept
/// unsaved while the others save, so that what each read goes stale. Saves may be refused (conflicts, deny rules,
/// validation); nothing else may fail, and the store then passes its integrity check: no dangling reference, no
/// to-one with two targets, every inverse and index entry in place. (The interleaving is seeded, so a failure
/// reproduces; threads racing on the store are the thread-safety tests' part.)
@Suite struct RacingContextsIntegrityTests {
    @Test(arguments: [1 as UInt64, 2, 3, 4])
    func interleavedContextsNeverCorruptTheStore(seed: UInt64) throws {
        let temporary = try TemporaryStore(schema: try Fixtures.librarySchema())
        defer { temporary.remove() }
        let store = temporary.store
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
        let steps = ProcessInfo.processInfo.environment["ENTITYSTORE_STRESS"] == nil ? 3_000 : 40_000
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
        #expect(saves > steps / 4)
        print("racing contexts, seed \(seed): \(saves) saves, \(refused) refused")
    }
}
