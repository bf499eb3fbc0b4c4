import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// The integrity check recomputes derived attributes read through relationships, and a store whose migration left
/// derived values to compute (a crash between the migration and the computation) computes them at its next open.
@Suite struct DerivedIntegrityTests {
    /// Overwrites `id`'s stored `bookCount` with `count`, behind every context's back; marks the derivations pending
    /// when asked, as a migration does.
    private func tamper(_ store: PersistentStore, _ id: ObjectID, count: Int64, markPending: Bool) throws {
        try store.write { txn in
            let storage = try store.storage(for: id.entityName)
            let bytes = try #require(try txn.get(id.primaryKey, in: storage.records))
            var (values, version) = try RecordCodec.decode(bytes, entity: storage.entity, key: id.primaryKey)
            let position = storage.entity.attributeIndex("bookCount")!
            // The index follows the record: only the derivation disagrees.
            if let index = storage.indexes[position] {
                let pk = IndexKey.primaryKey(id.primaryKey)
                try txn.delete(IndexKey.encode(values[position], caseInsensitive: false), value: pk, in: index)
                try txn.put(IndexKey.encode(.int(count), caseInsensitive: false), pk, in: index)
            }
            values[position] = .int(count)
            var buffer: [UInt8] = []
            RecordCodec.encode(values, rowVersion: version, into: &buffer)
            try buffer.withUnsafeBytes { try txn.put(id.primaryKey, $0, in: storage.records) }
            if markPending { try txn.put(StoreNames.MetaKey.derivationsPending, [1], in: store.meta) }
        }
    }

    @Test func aWrongDerivedValueIsFoundAndAPendingComputationIsDoneAtTheNextOpen() throws {
        let dir = try TemporaryDirectory(prefix: "derived-integrity")
        defer { dir.remove() }
        let path = dir.path("s.store")
        let schema = try DerivedAttributeMigrationTests().schema(1, derived: "books.@count")
        let writerID: ObjectID
        do {
            let store = try PersistentStore.open(path: path, schema: schema)
            let context = ObjectContext(store: store)
            let writer = try context.insert("Writer")
            try writer.setValue("ann", forKey: "name")
            let volume = try context.insert("Volume")
            try volume.setValue("v", forKey: "title")
            try volume.setObject(writer, forKey: "writer")
            try context.save()
            writerID = writer.objectID
            #expect(try store.checkIntegrity().findings.isEmpty)

            try tamper(store, writerID, count: 7, markPending: true)
            let findings = try store.checkIntegrity().findings
            #expect(findings.map(\.kind) == [.staleDerivedValue])
            #expect(findings.first?.location == "\(writerID)")
            #expect(findings.first?.detail == "bookCount is 7, its derivation gives 1")
        }
        do {
            let store = try PersistentStore.open(path: path, schema: schema)
            let writer = try ObjectContext(store: store).existingObject(with: writerID)
            #expect(try writer.value(forKey: "bookCount") == .int(1))
            #expect(try store.checkIntegrity().findings.isEmpty)
            // The mark is gone: a value wrong again stays wrong at the next open (nothing recomputes every open).
            try tamper(store, writerID, count: 9, markPending: false)
        }
        let reopened = try PersistentStore.open(path: path, schema: schema)
        #expect(try reopened.checkIntegrity().findings.map(\.kind) == [.staleDerivedValue])
    }
}
