import EntityStore
import Foundation

/// How a store syncs: where, as what, and how conflicts resolve.
///
/// <!-- snippet
/// let store = try PersistentStore.open(path: "tasks.store", schema: Schema(version: 1) {})
/// -->
/// ```swift
/// let sync = try SyncEngine(store: store, configuration: .init(connection: "host=db.local dbname=app user=app"))
/// try sync.syncNow()                       // or sync.start() to sync in the background
/// ```
public struct SyncConfiguration: Sendable {
    /// What wins when one store deletes an object another store changes.
    public enum DeletePolicy: String, Sendable, Codable {
        /// A delete wins over every update of the object, earlier or later (the default).
        case deleteWins
        /// The newest change wins by the hybrid logical clock: an update stamped after the delete brings the object
        /// back with the server's values.
        case newestWins
    }

    /// The libpq connection string (`host=… port=… dbname=… user=… password=…`, see PostgreSQL's documentation of
    /// connection strings); `connect_timeout=5` is added when it names none.
    public var connection: String
    /// The data set on the server this store shares: stores sync with the stores of the same zone.
    public var zone: String
    /// The attribute that carries an object's global ID: a unique UUID attribute. Entities that have it sync; the
    /// others stay local. The engine gives objects without one a new ID before pushing them.
    public var globalIDKey: String
    /// What wins between a delete and a concurrent update. Every store of a zone must use the same policy.
    public var deletePolicy: DeletePolicy
    /// History entries per push transaction, and server log entries per pull (one local save each).
    public var batchSize: Int

    /// A configuration.
    public init(
        connection: String, zone: String = "default", globalIDKey: String = "syncID",
        deletePolicy: DeletePolicy = .deleteWins, batchSize: Int = 500
    ) {
        self.connection = connection
        self.zone = zone
        self.globalIDKey = globalIDKey
        self.deletePolicy = deletePolicy
        self.batchSize = max(1, batchSize)
    }

    /// The connection string with a connect timeout, so an unreachable server fails a sync instead of hanging it.
    var connectionWithTimeout: String {
        guard !connection.contains("connect_timeout") else { return connection }
        // A URI takes it as a query parameter, a keyword string as one more keyword.
        if connection.hasPrefix("postgres://") || connection.hasPrefix("postgresql://") {
            return connection + (connection.contains("?") ? "&" : "?") + "connect_timeout=5"
        }
        return connection + " connect_timeout=5"
    }
}

/// What one ``SyncEngine/syncNow()-5ukp6`` did.
public struct SyncReport: Sendable, Equatable {
    /// Local history entries pushed (entries of pulled changes are skipped, and not counted).
    public var pushedEntries = 0
    /// Property values and deletes sent.
    public var pushedChanges = 0
    /// Values the server kept its own newer value for (they are replaced locally by the pull).
    public var refusedChanges = 0
    /// Server log entries read.
    public var pulledEntries = 0
    /// Objects whose server state was applied locally.
    public var pulledObjects = 0
    /// Local saves made by the pull (one per batch).
    public var pulledSaves = 0
    /// Uniqueness conflicts found and resolved.
    public var conflicts: [UniquenessConflict] = []
    /// Values that could not be applied (another store wrote a type this schema does not have under the key), and
    /// history entries that could not be pushed: each names the object and key.
    public var problems: [String] = []

    /// An empty report.
    public init() {}
}

/// Two objects that hold the same value of a unique attribute. Every store resolves it the same way: the object
/// with the larger global ID is merged into the other (its relationships moved to it, its newer values kept) and
/// removed everywhere; nothing that was linked to it is deleted.
public struct UniquenessConflict: Sendable, Equatable, CustomStringConvertible {
    /// The entity the uniqueness applies to.
    public var entity: String
    /// The unique attribute.
    public var key: String
    /// The value both held.
    public var value: Value
    /// The global ID of the object kept.
    public var kept: UUID
    /// The global ID of the object merged into the one kept, and removed.
    public var removed: UUID
    /// The global IDs of the objects whose links moved from the removed object to the one kept.
    public var repointed: [UUID] = []

    public var description: String {
        "\(entity).\(key) = \(value): kept \(kept.uuidString), merged and removed \(removed.uuidString)"
            + (repointed.isEmpty ? "" : ", re-pointed \(repointed.map(\.uuidString).joined(separator: " "))")
    }
}
