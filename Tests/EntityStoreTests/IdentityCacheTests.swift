import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// The lock-free caches typed access reads: model classes' entity names and the keys of model key paths.
@Suite struct IdentityCacheTests {
    final class Entry: Sendable {
        let value: Int
        init(_ value: Int) { self.value = value }
    }
    final class Key: Sendable {}

    @Test func aCacheFindsWhatWasAddedKeepsTheFirstValueAndDeclinesPastItsLimit() {
        let cache = IdentityCache<Entry>(limit: 3)
        let keys = (0..<5).map { _ in Key() }
        #expect(cache.value(for: ObjectIdentifier(keys[0])) == nil, "an empty cache finds nothing")
        for (i, key) in keys.prefix(3).enumerated() {
            let added = cache.add(Entry(i), for: ObjectIdentifier(key), retaining: key)
            #expect(added?.takeUnretainedValue().value == i)
        }
        // A second value for a key already there: the first stays, and is what `add` answers.
        let again = cache.add(Entry(99), for: ObjectIdentifier(keys[1]), retaining: keys[1])
        #expect(again?.takeUnretainedValue().value == 1)
        #expect(cache.add(Entry(3), for: ObjectIdentifier(keys[3]), retaining: keys[3]) == nil, "full: declined")
        for (i, key) in keys.enumerated() {
            #expect(cache.value(for: ObjectIdentifier(key))?.takeUnretainedValue().value == (i < 3 ? i : nil))
        }
        #expect(cache.count == 3)
    }

    @Test func aRetainedKeyOutlivesItsOwnersSoItsAddressIsNeverReused() {
        let cache = IdentityCache<Entry>(limit: 100)
        weak var weakKey: Key?
        var id: ObjectIdentifier?
        do {
            let key = Key()
            weakKey = key
            id = ObjectIdentifier(key)
            cache.add(Entry(7), for: id!, retaining: key)
        }
        #expect(weakKey != nil, "the cache keeps the key object alive")
        // New objects made now cannot take the key's address.
        let others = (0..<1000).map { _ in Key() }
        #expect(!others.contains { ObjectIdentifier($0) == id })
        #expect(cache.value(for: id!)?.takeUnretainedValue().value == 7)
    }

    @Test func readersOnOtherThreadsSeeEveryEntryOnceAdded() async {
        let cache = IdentityCache<Entry>(limit: 10_000)
        let keys = (0..<2000).map { _ in Key() }
        let ids = keys.map(ObjectIdentifier.init)
        await withTaskGroup(of: Int.self) { group in
            group.addTask {
                for (i, id) in ids.enumerated() { cache.add(Entry(i), for: id, retaining: keys[i]) }
                return 0
            }
            for _ in 0..<2 {
                group.addTask {
                    // Whatever a reader finds is the value added for that key, never another key's.
                    var wrong = 0
                    for _ in 0..<20 {
                        for (i, id) in ids.enumerated() {
                            if let found = cache.value(for: id), found.takeUnretainedValue().value != i { wrong += 1 }
                        }
                    }
                    return wrong
                }
            }
            var wrong = 0
            for await count in group { wrong += count }
            #expect(wrong == 0)
        }
        for (i, id) in ids.enumerated() { #expect(cache.value(for: id)?.takeUnretainedValue().value == i) }
    }
}

/// Keys of typed key paths, however the key path object was made.
@Suite struct ModelKeyPathKeysTests {
    final class Shelf: Model {
        @Stored var label: String
        @ToMany(inverse: "shelf") var volumes: [Volume]
    }
    final class Volume: Model {
        @Stored var title: String
        @Stored(.indexed) var pages: Int = 0
        @ToOne var shelf: Shelf?
    }

    @Test func keyPathsBuiltAtRunTimeReadTheSameKeysAsLiterals() {
        // Appending makes a new key path object each time: each is named by recording, or by equality, and they
        // all agree with the literal.
        let literal = ModelKeys.text(\Volume.shelf?.label)
        #expect(literal == "shelf.label")
        for _ in 0..<50 {
            let built = (\Volume.shelf).appending(path: \Shelf?.?.label)
            #expect(ModelKeys.text(built) == literal)
            #expect(ModelKeys.components(built) == ["shelf", "label"])
            #expect(ModelKeys.path(built) == ["shelf", "label"])
        }
        #expect(ModelKeys.text(\Volume.pages) == "pages")
        #expect(ModelKeys.text(\Volume.objectID).hasPrefix("<"), "a key path of no typed property names the problem")
    }

    @Test func modelsWithTheDefaultEntityNameFetchCountAndAggregateByTheirClassName() throws {
        #expect(ModelKeys.entityName(of: Volume.self) == "Volume")
        try withStore(schema: try Schema(version: 1, models: [Shelf.self, Volume.self])) { store, _ in
            let context = ObjectContext(store: store)
            for pages in [100, 300, 500] {
                let volume = try context.insert(Volume.self)
                volume.title = "v\(pages)"
                volume.pages = pages
            }
            let shelf = try context.insert(Shelf.self)
            shelf.label = "A"
            try context.save()
            // A fresh context each time, alternating the classes: each check of a class is remembered right.
            for _ in 0..<3 {
                let fresh = ObjectContext(store: store)
                #expect(try fresh.fetch(Volume.self, where: \Volume.pages > 200).count == 2)
                #expect(try fresh.fetch(Shelf.self).map(\.label) == ["A"])
                #expect(try fresh.count(Volume.self, where: \Volume.pages >= 100) == 3)
                #expect(
                    try fresh.fetch(Volume.self, sortedBy: [SortKey(\Volume.pages, ascending: false)]).map(\.pages)
                        == [500, 300, 100])
                let other = try fresh.existingObject(Shelf.self, with: shelf.objectID)
                #expect(other.label == "A")
                #expect(throws: EntityStoreError.self) { try fresh.existingObject(Volume.self, with: shelf.objectID) }
            }
        }
    }
}
