import EntityStore
import Foundation
import LMDB
import TestSupport
import Testing

@Suite struct MigrationTests {
    /// Version 1: one entity with a few objects.
    func v1() throws -> Schema {
        try Schema(version: 1) {
            Entity("Item") {
                Attribute("name", .string)
                Attribute("count", .int64, default: 0)
                Attribute("note", .string, optional: true)
            }
        }
    }

    func seed(_ path: String) throws -> [ObjectID] {
        let store = try PersistentStore.open(path: path, schema: try v1(), options: .init(sync: .noSync))
        let context = ObjectContext(store: store)
        let ids = try (0..<3).map { i in
            let item = try context.insert("Item")
            try item.setValue("item \(i)", forKey: "name")
            try item.setValue(.int(Int64(i)), forKey: "count")
            return item.objectID
        }
        try context.save()
        return ids
    }

    func open(_ path: String, _ schema: Schema) throws -> PersistentStore {
        try PersistentStore.open(path: path, schema: schema, options: .init(sync: .noSync))
    }

    @Test func addingAttributesWithDefaultsOrOptionalFillsExistingObjects() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("m.store")
        let ids = try seed(path)
        let v2 = try Schema(version: 2) {
            Entity("Item") {
                Attribute("name", .string)
                Attribute("count", .int64, default: 0)
                Attribute("note", .string, optional: true)
                Attribute("color", .string, default: "red")
                Attribute("weight", .double, optional: true)
            }
        }
        let store = try open(path, v2)
        let item = try ObjectContext(store: store).existingObject(with: ids[1])
        #expect(try item["name"] == "item 1")
        #expect(try item["color"] == "red")
        #expect(try item["weight"] == .null)
        #expect(try store.schemaHistory().map(\.version) == [1, 2])
    }

    /// A generated default (a model's `= UUID()` or `= Date()`) added by a migration gives each stored object its
    /// own value: a unique UUID each, and the time of the migration.
    @Test func addingAttributesWithGeneratedDefaultsGivesEachObjectItsOwn() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("m.store")
        let ids = try seed(path)
        let before = Date()
        let v2 = try Schema(version: 2) {
            Entity("Item") {
                Attribute("name", .string)
                Attribute("count", .int64, default: 0)
                Attribute("note", .string, optional: true)
                Attribute("key", .uuid, unique: true, generated: .uuid)
                Attribute("added", .date, generated: .now)
            }
        }
        let store = try open(path, v2)
        let context = ObjectContext(store: store)
        let items = try ids.map { try context.existingObject(with: $0) }
        let keys = try items.map { try $0["key"] }
        #expect(Set(keys).count == 3 && !keys.contains(.null))
        for item in items {
            guard case .date(let added) = try item["added"] else {
                Issue.record("no date for \(item.objectID)")
                continue
            }
            #expect(added >= before && added <= Date())
        }
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    @Test func removingAndRenamingAttributesKeepsTheRestOfTheData() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("m.store")
        let ids = try seed(path)
        let v2 = try Schema(version: 2) {
            Entity("Item") {
                Attribute("title", .string, renamedFrom: "name")
                Attribute("count", .int64, default: 0, indexed: true)
            }
        }
        let store = try open(path, v2)
        let item = try ObjectContext(store: store).existingObject(with: ids[2])
        #expect(try item["title"] == "item 2")
        #expect(try item["count"] == 2)
        #expect(entityStoreError { _ = try item["note"] }?.code == .unknownKey)
        // The new index was built from the existing records.
        let index = try store.environment.openDatabase("index.Item.count", dupSort: true, create: false)
        #expect(try store.environment.read { try $0.statistics(index).entries } == 3)
    }

    @Test func addingRemovingAndRenamingEntities() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("m.store")
        let ids = try seed(path)
        let v2 = try Schema(version: 2) {
            Entity("Thing", renamedFrom: "Item") {
                Attribute("name", .string)
                Attribute("count", .int64, default: 0)
                Attribute("note", .string, optional: true)
            }
            Entity("Box") {
                Attribute("label", .string)
            }
        }
        let store = try open(path, v2)
        let context = ObjectContext(store: store)
        let renamed = ObjectID(entityName: "Thing", primaryKey: ids[0].primaryKey)
        #expect(try context.existingObject(with: renamed)["name"] == "item 0")
        let box = try context.insert("Box")
        try box.setValue("b", forKey: "label")
        try context.save()
        let names = try store.environment.read { try $0.databaseNames() }
        #expect(!names.contains("records.Item"))
        #expect(names.contains("records.Thing"))
    }

    @Test func addingAUniqueConstraintOverDuplicatesIsRefusedAndChangesNothing() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("m.store")
        do {
            let store = try open(path, try v1())
            let context = ObjectContext(store: store)
            for _ in 0..<2 {
                let item = try context.insert("Item")
                try item.setValue("same", forKey: "name")
            }
            try context.save()
        }
        let v2 = try Schema(version: 2) {
            Entity("Item") {
                Attribute("name", .string, unique: true)
                Attribute("count", .int64, default: 0)
                Attribute("note", .string, optional: true)
            }
        }
        let error = entityStoreError { _ = try open(path, v2) }
        #expect(error?.code == .migrationRefused)
        #expect(error?.message.contains("cannot make 'name' unique") == true)
        let store = try open(path, try v1())
        #expect(try store.schemaHistory().map(\.version) == [1])
    }

    @Test(arguments: [
        ("type", "the type changed from int64 to string"),
        ("required", "a required attribute was added without a default value"),
        ("optionalToRequired", "an optional attribute became required without a default value for nil values"),
    ])
    func aChangeThatIsNotLightweightIsRefusedWithEntityAttributeAndReason(kind: String, reason: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("m.store")
        let ids = try seed(path)
        let v2 = try Schema(version: 2) {
            Entity("Item") {
                Attribute("name", .string)
                if kind == "type" {
                    Attribute("count", .string)
                } else {
                    Attribute("count", .int64, default: 0)
                }
                Attribute("note", .string, optional: kind != "optionalToRequired")
                if kind == "required" {
                    Attribute("size", .int64)
                }
            }
        }
        let error = entityStoreError { _ = try open(path, v2) }
        #expect(error?.code == .migrationRefused)
        #expect(error?.entity == "Item")
        #expect(error?.failures.first?.message.hasPrefix(reason) == true, "\(String(describing: error))")
        // Nothing was touched: the old schema still opens, with its data.
        let store = try open(path, try v1())
        #expect(try ObjectContext(store: store).existingObject(with: ids[0])["name"] == "item 0")
    }

    @Test func anOlderSchemaOrAChangeWithoutANewVersionIsRefused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("m.store")
        _ = try seed(path)
        let v3 = try Schema(version: 3, entities: try v1().entities)
        _ = try open(path, v3)
        let older = entityStoreError { _ = try open(path, try v1()) }
        #expect(older?.code == .schemaOlderThanStore)
        let sameVersion = try Schema(version: 3) {
            Entity("Item") {
                Attribute("name", .string)
            }
        }
        let unbumped = entityStoreError { _ = try open(path, sameVersion) }
        #expect(unbumped?.code == .migrationRefused)
        #expect(unbumped?.message.contains("raise the version") == true)
    }

    @Test func aPlainLMDBEnvironmentIsNotAStore() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("plain")
        do {
            let env = try Environment.open(path: path)
            let db = try env.openDatabase("something")
            try env.write { txn in try txn.put(Array("k".utf8), Array("v".utf8), in: db) }
        }
        let error = entityStoreError { _ = try open(path, try v1()) }
        #expect(error?.code == .notAStore)
        let readOnly = entityStoreError { _ = try PersistentStore.openReadOnly(path: path) }
        #expect(readOnly?.code == .notAStore)
    }

    @Test func aReadOnlyOpenReadsTheStoredSchemaWithoutAppCode() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("m.store")
        let ids = try seed(path)
        let store = try PersistentStore.openReadOnly(path: path)
        #expect(store.schema == (try v1()))
        #expect(try ObjectContext(store: store).existingObject(with: ids[0])["count"] == 0)
    }
}

/// A migration that adds derived attributes (or changes one) computes them for the objects already stored, when the
/// store opens: they are never left at their defaults.
@Suite struct DerivedAttributeMigrationTests {
    func schema(_ version: Int, derived: String?) throws -> Schema {
        try Schema(version: version) {
            Entity("Writer") {
                Attribute("name", .string)
                if let derived {
                    Attribute("bookCount", .int64, default: 0, indexed: true, derived: derived)
                    Attribute("shout", .string, optional: true, derived: "uppercase(name)")
                }
                Relationship("books", to: "Volume", inverse: "writer", toMany: true)
            }
            Entity("Volume") {
                Attribute("title", .string)
                Attribute("pages", .int64, default: 0)
                Relationship("writer", to: "Writer", inverse: "books")
            }
        }
    }

    @Test func addedAndChangedDerivedAttributesAreComputedForStoredObjects() throws {
        let dir = try TemporaryDirectory(prefix: "derived-migration")
        defer { dir.remove() }
        let path = dir.path("s.store")
        let writerID: ObjectID
        do {
            let store = try PersistentStore.open(path: path, schema: try schema(1, derived: nil))
            let context = ObjectContext(store: store)
            let writer = try context.insert("Writer")
            try writer.setValue("ann", forKey: "name")
            for pages in [10, 20] as [Int64] {
                let volume = try context.insert("Volume")
                try volume.setValue("v", forKey: "title")
                try volume.setValue(.int(pages), forKey: "pages")
                try volume.setObject(writer, forKey: "writer")
            }
            try context.save()
            writerID = writer.objectID
        }
        func check(_ version: Int, _ derived: String, _ expected: Int64) throws {
            let store = try PersistentStore.open(path: path, schema: try schema(version, derived: derived))
            let writer = try ObjectContext(store: store).existingObject(with: writerID)
            #expect(try writer.value(forKey: "bookCount") == .int(expected))
            #expect(try writer.value(forKey: "shout") == .string("ANN"))
            // The index holds the computed value too.
            var request = FetchRequest(entity: "Writer")
            request.predicate = try FetchPredicate("bookCount == \(expected)")
            #expect(try ObjectContext(store: store).fetch(request).map(\.objectID) == [writerID])
            let (findings, _) = try store.checkIntegrity()
            #expect(findings.isEmpty, "\(findings)")
        }
        try check(2, "books.@count", 2)
        try check(3, "books.@sum.pages", 30)  // the derivation changed
    }
}
