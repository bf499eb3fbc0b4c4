/// Why a sync step failed. The store is never left half-changed by one: a failed push or pull is retried from its
/// cursor by the next ``SyncEngine/syncNow()``.
public struct SyncError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The kind of failure.
    public enum Code: String, Sendable {
        /// PostgreSQL cannot be reached, or the connection broke: the app keeps working offline, and the next sync
        /// resumes from the cursors.
        case serverUnavailable
        /// PostgreSQL refused a statement (permissions, a full disk, a damaged table).
        case server
        /// The server holds changes made with a newer schema version than this store's: they wait there until this
        /// store migrates.
        case schemaTooNew
        /// The store cannot sync as configured (an entity's global ID attribute is missing or of the wrong type).
        case notSyncable
        /// Another process is syncing this store.
        case busy
        /// The sync state file beside the store cannot be read or written.
        case state
        /// The local store refused a change (the underlying `EntityStoreError` is in the message).
        case store
    }

    /// The kind of failure.
    public var code: Code
    /// What went wrong, naming the object, key or statement.
    public var message: String

    /// A failure.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
