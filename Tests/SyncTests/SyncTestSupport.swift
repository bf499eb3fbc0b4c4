import EntityStore
import EntityStoreSync
import Synchronization
import TestSupport
import Testing

/// Syncs each engine in turn until a whole pass pushes and pulls nothing, at most `passes` passes; whether it got
/// there.
func syncUntilQuiet(_ engines: [SyncEngine], passes: Int = 10) throws -> Bool {
    for _ in 0..<passes {
        var quiet = true
        for engine in engines {
            let report = try engine.syncNow()
            if report.pushedChanges > 0 || report.pulledObjects > 0 { quiet = false }
        }
        if quiet { return true }
    }
    return false
}

/// `count` stores (`s0.store`, `s1.store`, ...) in `directory` on `schema`, each with an engine syncing through
/// `server` under `deletePolicy`, pulling `batchSize` log entries per page.
func openReplicas(
    _ count: Int, schema: Schema, in directory: TemporaryDirectory, server: ScratchPostgres,
    deletePolicy: SyncConfiguration.DeletePolicy, batchSize: Int
) throws -> [(store: PersistentStore, engine: SyncEngine)] {
    try (0..<count).map { i in
        let store = try PersistentStore.open(path: directory.path("s\(i).store"), schema: schema)
        let engine = try SyncEngine(
            store: store,
            configuration: .init(connection: server.connection, deletePolicy: deletePolicy, batchSize: batchSize))
        return (store, engine)
    }
}

/// Engines syncing in the background (none when `engines` is empty), keeping the errors they report;
/// ``stop()`` stops them and expects none.
final class BackgroundSyncs: Sendable {
    let engines: [SyncEngine]
    private let errors = Mutex<[String]>([])

    init(_ engines: [SyncEngine], interval: Double) throws {
        self.engines = engines
        for engine in engines {
            try engine.start(
                interval: interval, onError: { error in self.errors.withLock { $0.append("\(error)") } })
        }
    }

    func stop() {
        for engine in engines { engine.stop() }
        let failed = errors.withLock { $0 }
        #expect(failed.isEmpty, "background syncs failed: \(failed)")
    }
}

/// Stores named by letter, syncing through one scratch PostgreSQL server; `remove()` removes the server and the
/// stores.
final class SyncZone {
    let server: ScratchPostgres
    let directory: TemporaryDirectory
    private(set) var stores: [String: (store: PersistentStore, engine: SyncEngine)] = [:]

    init() throws {
        server = try ScratchPostgres()
        directory = try TemporaryDirectory()
    }

    /// Opens a store (`name`.store in the zone's directory) that pulls `pageSize` log entries per page, under
    /// `deletePolicy`.
    @discardableResult
    func open(
        _ name: String, pageSize: Int = 500, deletePolicy: SyncConfiguration.DeletePolicy = .deleteWins
    ) throws -> PersistentStore {
        let store = try PersistentStore.open(path: path(name), schema: Fixtures.syncSchema())
        stores[name] = (store, try engine(for: store, pageSize: pageSize, deletePolicy: deletePolicy))
        return store
    }

    /// Replaces a store's engine with a new one, which reads the store's sync state again (as a restart does).
    func restartEngine(_ name: String) throws {
        let store = stores[name]!.store
        stores[name] = nil
        stores[name] = (store, try engine(for: store, pageSize: 500, deletePolicy: .deleteWins))
    }

    private func engine(
        for store: PersistentStore, pageSize: Int, deletePolicy: SyncConfiguration.DeletePolicy
    ) throws -> SyncEngine {
        try SyncEngine(
            store: store,
            configuration: .init(connection: server.connection, deletePolicy: deletePolicy, batchSize: pageSize))
    }

    /// The directory of the store `name`.
    func path(_ name: String) -> String { directory.path("\(name).store") }

    func store(_ name: String) -> PersistentStore { stores[name]!.store }

    func engine(_ name: String) -> SyncEngine { stores[name]!.engine }

    func sync(_ names: String...) throws {
        for name in names { try stores[name]!.engine.syncNow() }
    }

    /// What the store `name` holds, by global ID (equal on stores that converged).
    func contents(_ name: String) throws -> String {
        let (store, engine) = stores[name]!
        return try Fixtures.syncedContents(of: store, globalID: engine.globalID(of:))
    }

    func count(_ entity: String, in name: String) throws -> Int {
        try ObjectContext(store: stores[name]!.store).count(for: FetchRequest(entity: entity))
    }

    func remove() {
        server.remove()
        directory.remove()
    }
}
