import EntityStore
import Foundation
import TestSupport
import Testing

/// Values kept inside the store beside its objects: read, written alone, or committed with a save (both or neither).
@Suite struct MetadataTests {
    @Test func metadataIsReadWrittenAndRemoved() throws {
        try withStore { store, temporary in
            #expect(try store.metadata(forKey: "importer.position") == nil)
            try store.setMetadata(Array("page 1".utf8), forKey: "importer.position")
            try store.setMetadata(["a": [1], "b": [2, 3]])
            #expect(try store.metadata(forKey: "importer.position") == Array("page 1".utf8))
            // It lives in the store's files: a store opened again reads it.
            let reopened = try PersistentStore.openReadOnly(path: temporary.path)
            #expect(try reopened.metadata(forKey: "b") == [2, 3])
            try store.setMetadata(nil, forKey: "a")
            #expect(try store.metadata(forKey: "a") == nil)
            // Not part of the history: nobody hears of it.
            #expect(try store.lastTransaction() == 0)
        }
    }

    @Test func badKeysAndValuesAreRefusedByName() throws {
        try withStore { store, _ in
            let empty = try #require(throws: EntityStoreError.self) { try store.setMetadata([1], forKey: "") }
            #expect(empty.code == .invalidValue && empty.message.contains("empty"))
            let long = String(repeating: "k", count: 401)
            let tooLong = try #require(throws: EntityStoreError.self) { try store.setMetadata([1], forKey: long) }
            #expect(tooLong.message.contains("401 bytes"))
            let big = [UInt8](repeating: 0, count: PersistentStore.maximumMetadataSize + 1)
            let tooBig = try #require(throws: EntityStoreError.self) { try store.setMetadata(big, forKey: "big") }
            #expect(tooBig.message.contains("'big'"))
        }
    }

    @Test func metadataSetWithASaveCommitsWithItOrNotAtAll() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let tag = try context.insert("Tag")
            try tag.setValue("one", forKey: "name")
            try context.save(settingMetadata: ["position": [1]])
            #expect(try store.metadata(forKey: "position") == [1])
            #expect(try context.count(for: FetchRequest(entity: "Tag")) == 1)
            // A save that fails (a unique name taken) writes no metadata either.
            let clash = try context.insert("Tag")
            try clash.setValue("one", forKey: "name")
            #expect(throws: EntityStoreError.self) { try context.save(settingMetadata: ["position": [2]]) }
            #expect(try store.metadata(forKey: "position") == [1])
            // With nothing to save, the metadata is written alone.
            context.rollback()
            try context.save(settingMetadata: ["position": [3]])
            #expect(try store.metadata(forKey: "position") == [3])
            #expect(try store.lastTransaction() == 1)
        }
    }
}
