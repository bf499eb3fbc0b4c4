import EntityStore
import Foundation
import LMDB
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
    // @unchecked Sendable: the mutable state is guarded by `lock` (one sync at a time), `published` by its own
    // lock; the rest is immutable after init.
    /// The store synced.
    public let store: PersistentStore
    /// How it syncs.
    public let configuration: SyncConfiguration

    /// Serializes syncs, and guards everything below.
    let lock = NSLock()
    var connection: PostgresConnection?
    var state: SyncState
    /// The state as last written, for ``status``.
    /// (``Locked``, which ThreadSanitizer sees.)
    let published: Locked<SyncState>
    /// Whether the state was found (in the store, or in a state file of an earlier version) rather than made new:
    /// a new state of a store the server knows means the state was lost (see `agreeWithServer`).
    let stateWasFound: Bool
    let fileLock: SyncLock
    let directory: String
    let plan: SyncPlan
    /// The first entry of an earlier version's state file that may have been saved after a restore (see `init`):
    /// checked against the server by the first push.
    var suspectsFrom: UInt64?
    /// What ``syncNow(progress:)`` tells after each batch (under ``lock``).
    var progress: ((SyncReport) -> Void)?
    /// The background loop's flag (see ``start(interval:onError:)``).
    let running = RunFlag()

    /// The store's ID on the server as a replica (the state's; a new one when the store becomes a new replica).
    var storeID: UUID { state.storeID }

    /// The author of pulled saves: `entitystore.sync remote stamp=N`, N their largest clock stamp.
    static let remoteAuthorPrefix = "entitystore.sync remote"
    /// The author of the saves that give a new replica's own objects global IDs of their own.
    static let identityAuthor = "entitystore.sync identity"

    /// Prepares a store to sync.
    ///
    /// The sync state lives in the store (``SyncState``). A store whose data file is not the one it last synced
    /// with (its directory was copied elsewhere, or restored from a backup) becomes a new replica here: it keeps
    /// what it pushed before, and pushes its changes since under a new ID (``SyncState/ownObjectsFrom``).
    ///
    /// - Throws: ``SyncError/Code/notSyncable`` when no entity has the global ID attribute, or one has it with
    ///   another type or not unique; ``SyncError/Code/busy`` when another engine (in any process) syncs the store;
    ///   ``SyncError/Code/state`` when the store's state belongs to another zone or cannot be read or written.
    public init(store: PersistentStore, configuration: SyncConfiguration) throws {
        self.store = store
        self.configuration = configuration
        directory = store.environment.path
        plan = try SyncPlan(schema: store.schema, globalIDKey: configuration.globalIDKey)
        fileLock = try SyncLock(storeDirectory: directory)
        let last = try Self.storeRead { try store.lastTransaction() }
        var found = try SyncState.read(from: store)
        // A state file of an earlier version, taken over once.
        var fromFile: SyncState?
        if found == nil, let file = try SyncState.read(storeDirectory: directory) {
            fromFile = file
            found = file
        }
        if let found, found.zone != configuration.zone {
            throw SyncError(
                .state, "the store syncs with zone '\(found.zone)', not '\(configuration.zone)'")
        }
        stateWasFound = found != nil
        state = found ?? SyncState(zone: configuration.zone, storeID: store.storeID)
        published = Locked(state)
        let dataFile = SyncState.FileIdentity.of(directory + "/data.mdb")
        // The file may be newer than the store, restored from a backup older than it (and saving since, climbing
        // back past the cursor): entries saved at or after the file's last push (it kept whole seconds) are
        // suspects. A cursor past the history settles it; otherwise the first push compares the suspects with when
        // the server took their numbers (`agreeWithServer`).
        let suspect = try fromFile.map { file in
            try Self.storeRead { try store.history(since: 0) }.first {
                $0.date >= (file.lastPush ?? .distantPast).addingTimeInterval(-1) && !Self.isRemote($0)
            }?.transaction ?? last + 1
        }
        if let file = fromFile, let first = suspect, file.pushedThrough > last {
            try becomeNewReplica(from: first, clock: nil)
            // The file's pull cursor is as new as the file: the changes pulled since the backup are pulled again.
            state.pulledThrough = 0
        } else if let file = fromFile, let first = suspect, first <= file.pushedThrough {
            suspectsFrom = first
        } else if found != nil, let recorded = state.dataFile, let dataFile, recorded != dataFile {
            // Another data file: a copy of the directory, or a restore. What it saved since its last push is its own.
            try becomeNewReplica(from: state.pushedThrough + 1, clock: state.clock)
        }
        state.dataFile = dataFile
        try saveState()
        if fromFile != nil {
            // Taken over: the store holds the state now, and is read first, so a file that cannot be removed is
            // never read again.
            do {
                try FileManager.default.removeItem(at: SyncState.url(inStore: directory))
            } catch {
                state.lastError = "the state file of an earlier version could not be removed (it is not read): \(error)"
                try saveState()
            }
        }
    }

    deinit { running.stop() }

    /// The sync state: cursors, clock, identity, pending work and the last error.
    /// Read without waiting for a sync in progress (a sync offline can take the connect timeout).
    public var status: SyncState { published.withLock { $0 } }

    /// Writes the state into the store (its metadata) and publishes it to ``status``.
    func saveState() throws {
        let bytes = try state.encoded()
        try Self.storeWrite("writing the sync state") {
            try store.setMetadata(bytes, forKey: SyncState.metadataKey)
        }
        published.withLock { $0 = state }
    }

    /// Makes the store a new replica whose own history starts at transaction `first`: a new ID on the server, the
    /// push cursor before `first` (the clock as of it, when known: `nil` recomputes it from the history), and the
    /// objects inserted from `first` on given global IDs of their own by the next push.
    func becomeNewReplica(from first: UInt64, clock: UInt64?) throws {
        state.formerStoreIDs.append(state.storeID)
        state.storeID = UUID()
        state.ownObjectsFrom = max(1, first)
        try moveCursor(before: first, clock: clock)
    }

    /// Puts the push cursor right before transaction `first` (when it is past it), with the clock as of it: `clock`
    /// when known, else recomputed from the history.
    func moveCursor(before first: UInt64, clock: UInt64?) throws {
        if state.pushedThrough >= first {
            state.pushedThrough = first - 1
            state.clock = clock ?? 0
            state.pullMarks = []
        } else if let clock {
            state.clock = clock
        }
        if clock == nil {
            // The clock as of the cursor, from the stamps the history holds (pulled entries) and the entries' dates.
            var value: UInt64 = 0
            for entry in try Self.storeRead({ try store.history(since: 0) }) {
                guard let number = entry.transaction, number <= state.pushedThrough else { break }
                value =
                    Self.remoteStamp(of: entry).map { max(value, $0) }
                    ?? HybridLogicalClock.stamp(after: value, at: entry.date)
            }
            state.clock = max(state.clock, value)
        }
    }

    /// Runs a read of the store, its failure a ``SyncError/Code/store``.
    static func storeRead<R>(_ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch let error as EntityStoreError {
            throw SyncError(.store, error.description)
        }
    }

    /// Runs a write to the store, its failure a ``SyncError/Code/state`` naming `what`.
    func storeWriteState(_ body: () throws -> Void) throws { try Self.storeWrite("writing the sync state", body) }

    static func storeWrite(_ what: String, _ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as EntityStoreError {
            throw SyncError(.state, "\(what): \(error.description)")
        }
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
        GlobalID.derived(store: state.originID, hierarchy: plan.root(of: id.entityName), key: id.primaryKey)
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
    public func syncNow() throws -> SyncReport { try syncNow(progress: { _ in }) }

    /// Syncs as ``syncNow()-5ukp6`` does, telling `progress` what it did so far after each batch it pushed and each page
    /// it pulled (each one committed on the server, or in the store, with its cursor): a long first sync can show
    /// it, and a test can stop a process at a known point.
    @discardableResult
    public func syncNow(progress: (SyncReport) -> Void) throws -> SyncReport {
        try withoutActuallyEscaping(progress) { progress in
            try lock.withLock {
                var report = SyncReport()
                // Held only while this sync runs.
                self.progress = progress
                defer { self.progress = nil }
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
    }

    /// Syncs as ``syncNow()-5ukp6`` does, on a thread of its own, so that an async caller (the main actor) does not wait
    /// on the network: `let report = try await engine.syncNow()`.
    @discardableResult
    public func syncNow() async throws -> SyncReport {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { [self] in
                continuation.resume(with: Result { try syncNow() as SyncReport })
            }
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
