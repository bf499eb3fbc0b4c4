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
        let zone = try SyncZone()
        defer { zone.remove() }
        let a = try zone.open("a")
        let b = try zone.open("b")
        let context = ObjectContext(store: a)
        let tag = try context.insert("Tag")
        try zone.sync("a")  // writes the state
        try tag.setValue("work", forKey: "name")
        try context.save()
        // As a pull that lost the tag to another store's would: the delete kept, then a kill before the save.
        var state = try #require(try SyncState.read(from: a))
        state.pendingTombstones.append(
            .init(
                entity: "Tag", globalID: try zone.engine("a").globalID(of: tag),
                stamp: HybridLogicalClock.stamp(after: state.clock, at: Date()),
                originKey: tag.objectID.primaryKey))
        try a.setMetadata(try state.encoded(), forKey: SyncState.metadataKey)

        try zone.restartEngine("a")
        try zone.sync("a", "b")
        #expect(try ObjectContext(store: a).count(for: FetchRequest(entity: "Tag")) == 0, "A kept the tag")
        #expect(try ObjectContext(store: b).count(for: FetchRequest(entity: "Tag")) == 0)
        #expect(try zone.contents("a") == zone.contents("b"))
    }
}
