import EntityStore
import Foundation
import TestSupport
import Testing

/// A relationship with thousands of targets changed a few at a time: what a save records stays the size of the
/// change, and the old targets are all there where the app reads them.
@Suite struct LargeRelationshipTests {
    /// An author with `count` books, saved.
    func prolificAuthor(_ store: PersistentStore, books count: Int) throws -> ObjectID {
        let context = ObjectContext(store: store)
        context.isUndoEnabled = false
        let author = try context.insert("Author")
        try author.setValue("Prolific", forKey: "name")
        for i in 0..<count {
            let book = try context.insert("Book")
            try book.setValue(.string("b\(i)"), forKey: "title")
            try book.setObject(author, forKey: "author")
        }
        try context.save()
        return author.objectID
    }

    @Test func aSaveOfAFewLinksRecordsTheChangeNotTheWholeRelationshipInTheHistory() throws {
        try withStore { store, _ in
            let authorID = try prolificAuthor(store, books: 3_000)
            let context = ObjectContext(store: store)
            let author = try context.object(with: authorID)
            let before = try author.objects(forKey: "books").map(\.objectID).sorted()
            #expect(before.count == 3_000)
            let recorder = Recorder(context)
            // One book in, one out.
            let leaving = try context.object(with: before[1_234])
            try leaving.setObject(nil, forKey: "author")
            let newcomer = try context.insert("Book")
            try newcomer.setValue("new", forKey: "title")
            try newcomer.setObject(author, forKey: "author")
            try context.save()

            // The app's own record holds every old target, in order.
            let saved = try #require(recorder.saves.last)
            let change = try #require(saved.changes.first { $0.objectID == authorID })
            #expect(change.changedKeys == ["books"])
            #expect(change.oldRelationships["books"] == before)

            // The history holds the targets the change took out: the rest are in the store.
            let transaction = try #require(saved.transaction)
            let entry = try #require(try store.history(since: transaction - 1).first)
            #expect(entry.transaction == transaction)
            let recorded = try #require(entry.changes.first { $0.objectID == authorID })
            #expect(recorded.changedKeys == ["books"])
            #expect(recorded.oldRelationships == ["books": [leaving.objectID]])
            let moved = try #require(entry.changes.first { $0.objectID == leaving.objectID })
            #expect(moved.oldRelationships == ["author": [authorID]])

            // A second context merging the save sees the relationship as the store holds it.
            let other = ObjectContext(store: store)
            let otherAuthor = try other.object(with: authorID)
            let now = try otherAuthor.objects(forKey: "books").map(\.objectID).sorted()
            #expect(now == (before.filter { $0 != leaving.objectID } + [newcomer.objectID]).sorted())

            // A delete keeps every old target in the history: the store no longer holds them.
            try context.delete(author)
            try context.save()
            let deleteEntry = try #require(try store.history(since: transaction).first)
            let deleted = try #require(deleteEntry.changes.first { $0.objectID == authorID })
            #expect(deleted.kind == .delete)
            #expect(deleted.oldRelationships["books"]?.count == 3_000)
            #expect(deleted.oldRelationships["books"] == now)
        }
    }

    @Test func savesOfOneLinkToALargeRelationshipDoNotGrowTheStoreWithIt() throws {
        try withStore { store, temporary in
            let authorID = try prolificAuthor(store, books: 5_000)
            let context = ObjectContext(store: store)
            let author = try context.object(with: authorID)
            func fileSize() throws -> Int {
                try #require(
                    try FileManager.default.attributesOfItem(atPath: temporary.path + "/data.mdb")[.size] as? Int)
            }
            // Warm up the free pages the saves reuse.
            for i in 0..<20 {
                let book = try context.insert("Book")
                try book.setValue(.string("warm \(i)"), forKey: "title")
                try book.setObject(author, forKey: "author")
                try context.save()
            }
            let start = try fileSize()
            for i in 0..<100 {
                let book = try context.insert("Book")
                try book.setValue(.string("one more \(i)"), forKey: "title")
                try book.setObject(author, forKey: "author")
                try context.save()
            }
            // Each save's history entry held the 5,000+ earlier targets (~45 KB): 100 saves grew the file by
            // ~4.5 MB. Now a save adds a few hundred bytes.
            #expect(try fileSize() - start < 512 * 1024)
            #expect(try author.objects(forKey: "books").count == 5_120)
        }
    }
}
