/// Why a sync step failed. The store is never left half-changed by one: a failed push or pull is retried from its
/// cursor by the next ``SyncEngine/syncNow()-5ukp6``.
public struct SyncError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The kind of failure.
    public enum Code: String, Sendable {
        /// PostgreSQL cannot be reached, or the connection broke: the app keeps working offline, and the next sync
        /// resumes from the cursors. The one code to retry later by itself.
        case serverUnavailable
        /// PostgreSQL refused who the store connects as (a wrong password, no `pg_hba.conf` entry for it, a
        /// certificate that does not verify): retrying changes nothing until the configuration does.
        case authenticationFailed
        /// The connection string cannot be used: it is malformed, names an unknown option, or names a database or
        /// user that does not exist. Retrying changes nothing until the configuration does.
        case configurationInvalid
        /// PostgreSQL refused a statement (permissions, a full disk, a damaged table); the message names the
        /// SQLSTATE.
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

    /// Whether retrying can help without a change of the configuration: only for ``Code/serverUnavailable`` (and a
    /// busy store); a background sync stops on the others that concern the connection and reports them once.
    public var isRetryable: Bool { code == .serverUnavailable || code == .busy }
}
