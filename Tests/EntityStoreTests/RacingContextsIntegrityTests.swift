import Foundation
import LMDB
import TestSupport
import Testing

@testable import EntityStore

/// Threads, each with a context of its own (every merge policy, some merging the others' saves automatically), race
/// random inserts, updates, deletes (cascade, nullify, deny) and relationship changes (to-one and to-many) on one
/// store. Saves may be refused (conflicts, deny rules, validation); nothing else may fail, and after every thread's
/// last save the store passes its integrity check: no dangling reference, no to-one with two targets, every inverse
/// and index entry in place.
@Suite struct RacingContextsIntegrityTests {
    @Test(arguments: [1 as UInt64, 2])
    func racingContextsNeverCorruptTheStore(seed: UInt64) throws {
        let temporary = try TemporaryStore(schema: try Fixtures.librarySchema())
        defer { temporary.remove() }
        let store = temporary.store
        let setup = ObjectContext(store: store)
        for i in 0..<4 {
            try setup.insert("Author").setValue(.string("a\(i)"), forKey: "name")
            try setup.insert("Publisher").setValue(.string("p\(i)"), forKey: "name")
        }
        try setup.save()
        let rounds = ProcessInfo.processInfo.environment["ENTITYSTORE_STRESS"] == nil ? 120 : 3_000
        let policies: [MergePolicy] = [.error, .propertyLevel, .contextWins, .storeWins]
        let failures = Locked<[String]>([])
        let refused = Locked<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            let context = ObjectContext(store: store, name: "thread \(thread)")
            context.mergePolicy = policies[thread]
            context.automaticallyMergesChangesFromStore = thread % 2 == 0
            var g = SeededGenerator(seed: seed &* 31 &+ UInt64(thread))
            func any(_ entity: String) throws -> ManagedObject? {
                try context.fetch(FetchRequest(entity: entity)).filter { !$0.isDeleted }.randomElement(using: &g)
            }
            for round in 0..<rounds {
                do {
                    for _ in 0..<Int.random(in: 1...3, using: &g) {
                        switch Int.random(in: 0..<10, using: &g) {
                        case 0, 1:
                            let book = try context.insert("Book")
                            try book.setValue(.string("b\(thread)-\(round)"), forKey: "title")
                            if let author = try any("Author") { try book.setObject(author, forKey: "author") }
                            if let publisher = try any("Publisher"), Bool.random(using: &g) {
                                try book.setObject(publisher, forKey: "publisher")
                            }
                        case 2:
                            if let book = try any("Book") {
                                let chapter = try context.insert("Chapter")
                                try chapter.setValue(.string("c\(round)"), forKey: "title")
                                try chapter.setObject(book, forKey: "book")
                            }
                        case 3:
                            if let book = try any("Book") { try book.setObject(try any("Author"), forKey: "author") }
                        case 4:
                            if let book = try any("Book"), let publisher = try any("Publisher") {
                                try publisher.add(book, toKey: "books")
                            }
                        case 5:
                            if let book = try any("Book") {
                                try book.setValue(.int(Int64.random(in: 1..<500, using: &g)), forKey: "pages")
                            }
                        case 6:
                            if let book = try any("Book") { try context.delete(book) }  // cascades to chapters
                        case 7:
                            if let author = try any("Author"), Int.random(in: 0..<4, using: &g) == 0 {
                                try context.delete(author)  // cascades to books
                            } else {
                                try context.insert("Author").setValue(.string("a\(thread)-\(round)"), forKey: "name")
                            }
                        case 8:
                            if let publisher = try any("Publisher") { try context.delete(publisher) }  // deny
                        default:
                            if let chapter = try any("Chapter") {
                                try chapter.setObject(try any("Book"), forKey: "book")
                            }
                        }
                    }
                    try context.save()
                } catch let error as EntityStoreError
                    where [.conflict, .validationFailed, .objectNotFound].contains(error.code)
                {
                    // A race lost (or a deny rule): start over from the store.
                    refused.withLock { $0 += 1 }
                    context.rollback()
                    context.reset()
                } catch {
                    failures.withLock { $0.append("thread \(thread), round \(round): \(error)") }
                    return
                }
                if Int.random(in: 0..<4, using: &g) == 0 { context.reset() }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        let (findings, _) = try store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings.prefix(10))")
        print("racing contexts, seed \(seed): \(refused.withLock { $0 }) saves refused")
    }
}
