import EntityStore
import Foundation
import TestSupport
import Testing

@Suite struct BatchInsertTests {
    @Test func insertsEveryObjectWithDefaultsAndIndexEntriesInOneHistoryEntry() throws {
        try withStore { store, _ throws in
            let ids = try store.batchInsert(
                into: "Author",
                objects: (0..<500).map { ["name": .string("author \($0)"), "rating": .int(Int64($0 % 7))] },
                author: "import")
            #expect(ids.count == 500 && Set(ids).count == 500)
            let context = ObjectContext(store: store)
            #expect(try context.object(with: ids[42])["name"] == "author 42")
            #expect(try context.object(with: ids[42])["email"] == nil)  // an optional left out
            // The indexed name finds them through its index.
            var request = FetchRequest(entity: "Author", predicate: try FetchPredicate("name == 'author 499'"))
            #expect(String(describing: try context.explain(request)).hasPrefix("index Author.name"))
            #expect(try context.fetch(request).map(\.objectID) == [ids[499]])
            request.predicate = try FetchPredicate("rating == 3")
            #expect(try context.count(for: request) == 71)
            #expect(try store.checkIntegrity().findings.isEmpty)
            let history = try store.history(since: 0)
            #expect(history.count == 1 && history[0].author == "import" && history[0].insertedIDs == ids)

            // A context that had reserved keys before the batch still inserts without a collision.
            let tag = try context.insert("Author")
            try tag.setValue("after", forKey: "name")
            try context.save()
            #expect(try context.count(for: FetchRequest(entity: "Author")) == 501)
        }
    }

    @Test func everyProblemIsListedAndNothingIsWritten() throws {
        try withStore { store, _ throws in
            let error = entityStoreError {
                _ = try store.batchInsert(
                    into: "Author",
                    objects: [
                        ["name": "ok"],
                        ["name": .int(3)],
                        ["nickname": "x", "name": "y"],
                        ["books": "z", "name": "w"],
                        ["rating": 2],
                    ])
            }
            #expect(error?.code == .validationFailed)
            let messages = error?.failures.map(\.message) ?? []
            #expect(messages.count == 4, "\(messages)")
            #expect(messages.contains("object 1: Author.name is a string; got 3"))
            #expect(messages.contains("object 2: 'nickname' is not an attribute"))
            #expect(messages.contains("object 3: 'books' is a relationship: set it through a context"))
            #expect(messages.contains("object 4: name is required"))
            #expect(try store.history(since: 0).isEmpty)
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Author")) == 0)
        }
    }

    @Test func uniqueValuesAreCheckedWithinTheBatchAndAgainstTheStore() throws {
        try withStore { store, _ throws in
            try store.batchInsert(into: "Tag", objects: [["name": "swift"]])
            let error = entityStoreError {
                _ = try store.batchInsert(
                    into: "Tag", objects: [["name": "lmdb"], ["name": "lmdb"], ["name": "swift"]])
            }
            #expect(error?.code == .validationFailed)
            #expect(error?.failures.count == 2)
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Tag")) == 1)
            // Case-insensitive uniqueness, as a save checks it.
            try store.batchInsert(into: "Author", objects: [["name": "a", "email": "A@example.com"]])
            #expect(
                entityStoreError {
                    _ = try store.batchInsert(into: "Author", objects: [["name": "b", "email": "a@EXAMPLE.com"]])
                }?.code == .validationFailed)
        }
    }

    @Test func rowsOfValuesForNamedKeysInsertLikeDictionaries() throws {
        try withStore { store, _ throws in
            // Keys in another order than the schema's, one attribute left to its default.
            let ids = try store.batchInsert(
                into: "Author", keys: ["rating", "name"],
                rows: (0..<300).map { [.int(Int64($0 % 5)), .string("author \($0)")] }, author: "rows")
            #expect(ids.count == 300 && Set(ids).count == 300)
            let context = ObjectContext(store: store)
            #expect(try context.object(with: ids[7])["name"] == "author 7")
            #expect(try context.object(with: ids[7])["rating"] == 2)
            #expect(try context.object(with: ids[7])["email"] == nil)
            let request = FetchRequest(entity: "Author", predicate: try FetchPredicate("name == 'author 299'"))
            #expect(try context.fetch(request).map(\.objectID) == [ids[299]])
            #expect(try store.checkIntegrity().findings.isEmpty)
            let history = try store.history(since: 0)
            #expect(history.count == 1 && history[0].author == "rows" && history[0].insertedIDs == ids)

            // Every attribute in the schema's order: the rows are stored as given.
            let names = try #require(store.schema.entity("Author")).attributes.map(\.name)
            let complete = try store.batchInsert(
                into: "Author", keys: names,
                rows: [names.map { $0 == "name" ? "complete" : $0 == "rating" ? 4 : .null }])
            #expect(try context.object(with: complete[0])["name"] == "complete")
            #expect(try store.batchInsert(into: "Author", keys: ["name"], rows: []).isEmpty)
        }
    }

    @Test func rowsWithBadKeysLengthsOrValuesAreListedAndNothingIsWritten() throws {
        try withStore { store, _ throws in
            let keys = entityStoreError {
                _ = try store.batchInsert(into: "Author", keys: ["name", "nickname", "books", "name"], rows: [])
            }
            #expect(keys?.code == .validationFailed)
            #expect(
                keys?.failures.map(\.message).sorted() == [
                    "keys: 'books' is a relationship: set it through a context", "keys: 'name' is given twice",
                    "keys: 'nickname' is not an attribute",
                ])
            let rows = entityStoreError {
                _ = try store.batchInsert(
                    into: "Author", keys: ["name", "rating"],
                    rows: [["ok", 1], [.int(3), 1], ["short"], [.null, 2], ["nan", .double(.nan)]])
            }
            #expect(rows?.code == .validationFailed)
            let messages = rows?.failures.map(\.message) ?? []
            #expect(messages.contains("object 1: Author.name is a string; got 3"), "\(messages)")
            #expect(messages.contains("object 2: 1 values for 2 keys"), "\(messages)")
            #expect(messages.contains("object 3: name is required"), "\(messages)")
            #expect(messages.contains("object 4: Author.rating is an int64; got nan"), "\(messages)")
            #expect(messages.count == 4, "\(messages)")
            #expect(try store.history(since: 0).isEmpty)
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Author")) == 0)
            // Uniqueness as with dictionaries.
            try store.batchInsert(into: "Tag", keys: ["name"], rows: [["swift"]])
            let unique = entityStoreError {
                _ = try store.batchInsert(into: "Tag", keys: ["name"], rows: [["lmdb"], ["lmdb"], ["swift"]])
            }
            #expect(unique?.code == .validationFailed && unique?.failures.count == 2)
        }
    }

    @Test func anEntityWithARequiredToOneIsRefused() throws {
        let schema = try Schema(version: 1) {
            Entity("Owner") { Relationship("pets", to: "Pet", inverse: "owner", toMany: true) }
            Entity("Pet") {
                Attribute("name", .string)
                Relationship("owner", to: "Owner", inverse: "pets", optional: false)
            }
        }
        try withStore(schema: schema) { store, _ throws in
            let error = entityStoreError { _ = try store.batchInsert(into: "Pet", objects: [["name": "Rex"]]) }
            #expect(error?.code == .validationFailed && error?.key == "owner")
            #expect(
                entityStoreError { _ = try store.batchInsert(into: "Nope", objects: [[:]]) }?.code == .unknownEntity)
        }
    }

    @Test func aControllerOverAMergingContextShowsTheBatch() throws {
        try withStore { store, _ throws in
            let context = ObjectContext(store: store)
            context.automaticallyMergesChangesFromStore = true
            let controller = FetchedResultsController(
                fetchRequest: FetchRequest(entity: "Author", sortKeys: [SortKey("name")]), context: context)
            let delegate = InsertCounter()
            controller.delegate = delegate
            try controller.performFetch()
            try store.batchInsert(into: "Author", objects: (0..<20).map { ["name": .string("n\($0)")] })
            context.processPendingChanges()
            #expect(delegate.inserts == 20)
            #expect(controller.fetchedObjectIDs.count == 20)
        }
    }
}

final class InsertCounter: FetchedResultsControllerDelegate {
    var inserts = 0
    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        Issue.record("the controller failed: \(error)")
    }
    func controller(
        _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
        for type: ResultsChangeType, newIndexPath: ItemPath?
    ) {
        if type == .insert { inserts += 1 }
    }
}

/// Many new objects write each index's entries sorted (key bytes, then primary key): keys that share their first
/// eight bytes and differ after them or in length, negative numbers, nil, and a save that also moves and removes
/// entries of stored objects. Every entry must be found by its value afterwards.
@Suite struct SortedIndexWriteTests {
    static func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Entry") {
                Attribute("code", .string, indexed: true)
                Attribute("amount", .double, indexed: true)
                Attribute("rank", .int64, optional: true, indexed: true)
            }
        }
    }

    /// Row `i`'s values: codes with a long shared prefix (some a prefix of others), amounts around zero.
    static func values(_ i: Int) -> [String: Value] {
        let code = "shared-prefix-" + String(repeating: "z", count: i % 5) + "\(i % 37)"
        return [
            "code": .string(code), "amount": .double(Double(i % 11) - 5.5),
            "rank": i % 6 == 0 ? .null : .int(Int64(i % 13) - 6),
        ]
    }

    static func expectFound(_ context: ObjectContext, _ expected: [ObjectID: [String: Value]]) throws {
        for (id, values) in expected {
            for (key, value) in values {
                let predicate =
                    value.isNull
                    ? try FetchPredicate("\(key) == nil") : try FetchPredicate("\(key) == %@", value)
                let found = try context.fetch(FetchRequest(entity: "Entry", predicate: predicate)).map(\.objectID)
                #expect(found.contains(id), "\(id) by \(key) == \(value)")
                #expect(found.count == expected.values.filter { $0[key] == value }.count, "\(key) == \(value)")
            }
        }
    }

    @Test func aBatchInsertOfManyRowsFindsEveryRowThroughEachIndex() throws {
        try withStore(schema: try Self.schema()) { store, _ throws in
            let rows = (0..<300).map(Self.values)
            let ids = try store.batchInsert(into: "Entry", objects: rows)
            try Self.expectFound(ObjectContext(store: store), Dictionary(uniqueKeysWithValues: zip(ids, rows)))
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func aSaveOfManyNewObjectsWithUpdatesAndDeletesKeepsEveryIndexRight() throws {
        try withStore(schema: try Self.schema()) { store, _ throws in
            let context = ObjectContext(store: store)
            var expected: [ObjectID: [String: Value]] = [:]
            for i in 0..<100 {
                let entry = try context.insert("Entry")
                for (key, value) in Self.values(i) { try entry.setValue(value, forKey: key) }
                expected[entry.objectID] = Self.values(i)
            }
            try context.save()
            // One save: 200 new objects, stored ones moved to other keys, and some deleted.
            let stored = Array(expected.keys).sorted()
            for (n, id) in stored.prefix(30).enumerated() {
                let object = try context.object(with: id)
                if n % 3 == 0 {
                    try context.delete(object)
                    expected[id] = nil
                } else {
                    let moved = Self.values(1000 + n)
                    for (key, value) in moved { try object.setValue(value, forKey: key) }
                    expected[id] = moved
                }
            }
            for i in 100..<300 {
                let entry = try context.insert("Entry")
                for (key, value) in Self.values(i) { try entry.setValue(value, forKey: key) }
                expected[entry.objectID] = Self.values(i)
            }
            try context.save()
            try Self.expectFound(ObjectContext(store: store), expected)
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }
}
