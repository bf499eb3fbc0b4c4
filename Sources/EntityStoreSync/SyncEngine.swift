import EntityStore
import Foundation
import Synchronization

/// Syncs one store with the other stores of its zone through PostgreSQL.
///
/// A sync pushes the store's history entries not yet pushed (each an idempotent server transaction: a retried push
/// writes nothing twice), then pulls the other stores' changes since its cursor and saves them locally, one save per
/// batch, so that contexts merging the store's saves and their controllers see one batch each. Pulled saves are
/// marked as remote in the history (``isRemote(_:)``) and never pushed back.
///
/// Conflicts resolve property by property, last writer wins by a hybrid logical clock (``HybridLogicalClock``):
/// every store converges to the server's state. See the "Sync" article for the server tables and the guarantees.
///
/// An engine is used from any thread; its syncs run one at a time. One engine per store across processes (a lock
/// file beside the store says so).
public final class SyncEngine: @unchecked Sendable {
    /// The store synced.
    public let store: PersistentStore
    /// How it syncs.
    public let configuration: SyncConfiguration

    /// Serializes syncs, and guards everything below.
    let lock = NSLock()
    var connection: PostgresConnection?
    var state: SyncState
    /// The state as last written, for ``status``.
    let published: Mutex<SyncState>
    /// The store's ID on the server (the state's, fixed).
    let storeID: UUID
    let fileLock: SyncLock
    let directory: String
    let plan: SyncPlan
    /// The background loop's flag (see ``start(interval:onError:)``).
    let running = RunFlag()

    /// The author of pulled saves: `entitystore.sync remote stamp=N`, N their largest clock stamp.
    static let remoteAuthorPrefix = "entitystore.sync remote"

    /// Prepares a store to sync.
    ///
    /// - Throws: ``SyncError/Code/notSyncable`` when no entity has the global ID attribute, or one has it with
    ///   another type or not unique; ``SyncError/Code/busy`` when another engine (in any process) syncs the store;
    ///   ``SyncError/Code/state`` when the state file belongs to another zone, cannot be read, or says the store
    ///   pushed past its own history (another store's file, or a store restored from an older backup).
    public init(store: PersistentStore, configuration: SyncConfiguration) throws {
        self.store = store
        self.configuration = configuration
        directory = store.environment.path
        plan = try SyncPlan(schema: store.schema, globalIDKey: configuration.globalIDKey)
        fileLock = try SyncLock(storeDirectory: directory)
        if let saved = try SyncState.read(storeDirectory: directory) {
            guard saved.zone == configuration.zone else {
                throw SyncError(
                    .state,
                    "the store syncs with zone '\(saved.zone)', not '\(configuration.zone)' (its state is in "
                        + "\(SyncState.url(inStore: directory).path))")
            }
            // Pushed past the store's own history: the file is another store's, or the store was restored from a
            // backup older than it. Taken as it is, the saves in between would never be pushed.
            let last = try store.lastTransaction()
            guard saved.pushedThrough <= last else {
                throw SyncError(
                    .state,
                    "\(SyncState.url(inStore: directory).path) says the store pushed through transaction "
                        + "\(saved.pushedThrough), but its last is \(last): the file belongs to another store, or the "
                        + "store was restored from an older backup; sync a new, empty store instead")
            }
            state = saved
        } else {
            state = SyncState(zone: configuration.zone, storeID: store.storeID)
        }
        storeID = state.storeID
        published = Mutex(state)
    }

    deinit { running.stop() }

    /// The sync state: cursors, clock, pending work and the last error.
    /// Read without waiting for a sync in progress (a sync offline can take the connect timeout).
    public var status: SyncState { published.withLock { $0 } }

    /// Writes the state file and publishes the state to ``status``.
    func saveState() throws {
        try state.write(storeDirectory: directory)
        published.withLock { $0 = state }
    }

    /// Whether a history entry holds changes pulled from other stores (they are not pushed back).
    public static func isRemote(_ record: ChangeRecord) -> Bool { remoteStamp(of: record) != nil }

    /// An object's global ID: its global ID attribute when it has one (objects that came from other stores, or
    /// that the app gave one), otherwise one derived from this store's ID and the object's key, which never
    /// changes and needs no write.
    public func globalID(of object: ManagedObject) throws -> UUID {
        if case .uuid(let id) = try object.value(forKey: plan.globalIDKey) { return id }
        return derivedGlobalID(object.objectID)
    }

    /// The global ID of a model's object (see ``globalID(of:)-(ManagedObject)``).
    public func globalID(of model: Model) throws -> UUID { try globalID(of: model.managedObject) }

    /// The global ID of a deleted object, from its values before the delete.
    func globalID(ofDeleted change: ObjectChange) -> UUID {
        if case .uuid(let given)? = change.oldValues[plan.globalIDKey] { return given }
        return derivedGlobalID(change.objectID)
    }

    func derivedGlobalID(_ id: ObjectID) -> UUID {
        GlobalID.derived(store: storeID, hierarchy: plan.root(of: id.entityName), key: id.primaryKey)
    }

    static func remoteStamp(of record: ChangeRecord) -> UInt64? {
        guard let author = record.author, author.hasPrefix(remoteAuthorPrefix + " stamp=") else { return nil }
        return UInt64(author.dropFirst(remoteAuthorPrefix.count + 7))
    }

    /// Pushes the local changes not yet pushed, then pulls the other stores' changes.
    ///
    /// - Throws: ``SyncError``: with ``SyncError/Code/serverUnavailable`` the store keeps working and the next sync
    ///   resumes from the cursors; the error is also kept in ``status`` (`lastError`).
    @discardableResult
    public func syncNow() throws -> SyncReport {
        try lock.withLock {
            var report = SyncReport()
            do {
                let connection = try connected()
                try push(connection, &report)
                try pull(connection, &report)
                state.lastError = nil
                try saveState()
            } catch let error as SyncError {
                try fail(error)
            } catch let error as EntityStoreError {
                try fail(SyncError(.store, error.description))
            }
            return report
        }
    }

    /// Keeps `error` in the state (for `store-inspect sync-status`) and throws it; a broken connection is dropped so
    /// the next sync reconnects.
    func fail(_ error: SyncError) throws -> Never {
        if error.code == .serverUnavailable { connection = nil }
        state.lastError = error.description
        try saveState()
        throw error
    }

    func connected() throws -> PostgresConnection {
        if let connection, connection.isOpen { return connection }
        connection = nil
        let fresh = try PostgresConnection(configuration.connectionWithTimeout)
        try ServerSchema.create(fresh)
        connection = fresh
        return fresh
    }

}
