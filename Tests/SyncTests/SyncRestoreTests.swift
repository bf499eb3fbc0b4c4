import EntityStore
import EntityStoreSync
import Foundation
import TestSupport
import Testing

/// A store restored from an older backup (its files copied back over it, or its directory put back), with the
/// state of an earlier version's file or without it, pushes every change the server lacks and pulls every change
/// it lacks: afterwards it and another store hold every task exactly once. Saves and syncs run in processes of
/// their own (`es-sync-helper`); the test process reads the stores only at the end.
@Suite(
    "Sync: restored backups",
    .enabled(if: ScratchPostgres.isAvailable, "PostgreSQL is not installed (apt-get install postgresql libpq-dev)"))
struct SyncRestoreTests {
    enum Restore: String, CaseIterable, CustomTestStringConvertible {
        /// The backup's files copied over the store's (the data file keeps its inode).
        case filesInPlace
        /// The backup's directory put back in place of the store's.
        case directory
        /// A store of an earlier version (its state in `sync-state.json`) restored, the newer state file kept.
        case olderStoreNewerStateFile
        /// A store of an earlier version whose state file was lost.
        case stateFileLost

        var testDescription: String { rawValue }
    }

    final class World {
        let server: ScratchPostgres
        let directory: TemporaryDirectory
        let helper = ChildProcess.executable("es-sync-helper")

        init() throws {
            server = try ScratchPostgres()
            directory = try TemporaryDirectory()
        }

        func path(_ name: String) -> String { directory.path(name) }

        func add(_ name: String, _ titles: String...) throws {
            let output = try ChildProcess.run(helper, ["add", path(name)] + titles)
            #expect(output.status == 0, "\(output.stderr)")
        }

        func sync(_ name: String) throws {
            let output = try ChildProcess.run(helper, ["sync", path(name), server.connection])
            #expect(output.status == 0 && output.stdout.hasSuffix("synced\n"), "\(name): \(output.stderr)")
        }

        func remove() {
            server.remove()
            directory.remove()
        }
    }

    /// Moves a store's sync state from its metadata into `sync-state.json`, as an earlier version kept it (or drops
    /// it, for a lost file).
    static func makeEarlierVersion(_ path: String, keepingFile: Bool) throws {
        let store = try PersistentStore.open(path: path, schema: Fixtures.syncSchema())
        let bytes = try #require(try store.metadata(forKey: SyncState.metadataKey))
        if keepingFile { try Data(bytes).write(to: SyncState.url(inStore: path)) }
        try store.setMetadata(nil, forKey: SyncState.metadataKey)
    }

    @Test(
        "a restored store pushes what the server lacks and pulls what it lacks, each task once",
        arguments: Restore.allCases)
    func aRestoredStoreLosesNothingAndRepeatsNothing(restore: Restore) throws {
        let world = try World()
        defer { world.remove() }
        try world.add("a.store", "before the backup")
        try world.sync("a.store")
        if restore == .olderStoreNewerStateFile || restore == .stateFileLost {
            try Self.makeEarlierVersion(world.path("a.store"), keepingFile: true)
        }
        // The backup.
        try FileManager.default.copyItem(atPath: world.path("a.store"), toPath: world.path("backup.store"))
        // Changes after it, synced: the server has them, the backup does not.
        try world.add("a.store", "after the backup 1", "after the backup 2")
        try world.sync("a.store")
        switch restore {
        case .filesInPlace:
            for file in ["data.mdb", "lock.mdb"] {
                let backup = try Data(contentsOf: URL(fileURLWithPath: world.path("backup.store/" + file)))
                let handle = try #require(FileHandle(forWritingAtPath: world.path("a.store/" + file)))
                try handle.truncate(atOffset: 0)
                try handle.write(contentsOf: backup)
                try handle.close()
            }
        case .directory:
            try FileManager.default.removeItem(atPath: world.path("a.store"))
            try FileManager.default.copyItem(atPath: world.path("backup.store"), toPath: world.path("a.store"))
        case .olderStoreNewerStateFile:
            // The store's state in the file of an earlier version, as the newer one, beside the older store.
            try Self.makeEarlierVersion(world.path("a.store"), keepingFile: true)
            let newer = try Data(contentsOf: SyncState.url(inStore: world.path("a.store")))
            try FileManager.default.removeItem(atPath: world.path("a.store"))
            try FileManager.default.copyItem(atPath: world.path("backup.store"), toPath: world.path("a.store"))
            try newer.write(to: SyncState.url(inStore: world.path("a.store")))
        case .stateFileLost:
            try FileManager.default.removeItem(atPath: world.path("a.store"))
            try FileManager.default.copyItem(atPath: world.path("backup.store"), toPath: world.path("a.store"))
            try FileManager.default.removeItem(at: SyncState.url(inStore: world.path("a.store")))
        }
        // Saves on the restored store before its engine starts.
        try world.add("a.store", "after the restore 1", "after the restore 2")
        try world.sync("a.store")
        try world.sync("b.store")
        try world.sync("a.store")
        let expected = [
            "after the backup 1", "after the backup 2", "after the restore 1", "after the restore 2",
            "before the backup",
        ].map(Value.string)
        for name in ["a.store", "b.store"] {
            let store = try PersistentStore.open(path: world.path(name), schema: Fixtures.syncSchema())
            let context = ObjectContext(store: store)
            let titles = try context.fetch(FetchRequest(entity: "Task")).map { try $0.value(forKey: "title") }
            #expect(titles.sorted { $0.description < $1.description } == expected, "\(name): \(titles)")
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }
}
