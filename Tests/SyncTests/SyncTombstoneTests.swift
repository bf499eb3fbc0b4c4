import EntityStore
import Foundation
import TestSupport
import Testing

@testable import EntityStoreSync

/// The deletes a store decides for uniqueness are kept in its sync state before the save that makes them; a kill in
/// between leaves a delete pushed that the store never made.
@Suite(
    "Sync: uniqueness deletes a store kept but never made",
    .enabled(if: ScratchPostgres.isAvailable, "PostgreSQL is not installed (apt-get install postgresql libpq-dev)"))
struct SyncTombstoneTests {
    /// The kept delete names the store's own tag, never pushed: the server first hears of the tag by its delete. The
    /// store reads its own delete back and makes it, found by its key (the server records where the tag came from).
    @Test("a kept delete of the store's own object, never pushed, is made when it is read back")
    func keptDeleteOfAnObjectNeverPushed() throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let a = try PersistentStore.open(path: directory.path("a.store"), schema: Fixtures.syncSchema())
        let b = try PersistentStore.open(path: directory.path("b.store"), schema: Fixtures.syncSchema())
        let configuration = SyncConfiguration(connection: server.connection)
        let context = ObjectContext(store: a)
        let tag = try context.insert("Tag")
        do {
            let syncA = try SyncEngine(store: a, configuration: configuration)
            try syncA.syncNow()  // writes the state file
            try tag.setValue("work", forKey: "name")
            try context.save()
            // As a pull that lost the tag to another store's would: the delete kept, then a kill before the save.
            var state = try #require(try SyncState.read(storeDirectory: directory.path("a.store")))
            state.pendingTombstones.append(
                .init(
                    entity: "Tag", globalID: try syncA.globalID(of: tag),
                    stamp: HybridLogicalClock.stamp(after: state.clock, at: Date()),
                    originKey: tag.objectID.primaryKey))
            try state.write(storeDirectory: directory.path("a.store"))
        }

        let syncA = try SyncEngine(store: a, configuration: configuration)
        let syncB = try SyncEngine(store: b, configuration: configuration)
        try syncA.syncNow()
        try syncB.syncNow()
        #expect(try ObjectContext(store: a).count(for: FetchRequest(entity: "Tag")) == 0, "A kept the tag")
        #expect(try ObjectContext(store: b).count(for: FetchRequest(entity: "Tag")) == 0)
        #expect(
            try Fixtures.syncedContents(of: a, globalID: syncA.globalID(of:))
                == Fixtures.syncedContents(of: b, globalID: syncB.globalID(of:)))
    }
}
