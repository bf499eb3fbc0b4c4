import LMDB

/// An error from EntityStore: what went wrong, and on which entity, key and object.
///
/// Match on ``code``:
///
/// <!-- snippet
/// let context: ObjectContext = ObjectContext(store: try PersistentStore.open(path: "x", schema: Schema(version: 1) {}))
/// -->
/// ```swift
/// do { try context.save() }
/// catch let error as EntityStoreError where error.code == .validationFailed {
///     for failure in error.failures { print(failure) }   // every failure at once
/// }
/// ```
public struct EntityStoreError: Error, CustomStringConvertible, Sendable {
    /// What kind of failure.
    public enum Code: String, Sendable {
        /// The schema declaration is inconsistent (see ``EntityStoreError/failures``).
        case invalidSchema
        /// The stored schema cannot be migrated to the declared one by itself.
        case migrationRefused
        /// The declared schema is older than the one stored.
        case schemaOlderThanStore
        /// The store was written by a newer EntityStore format.
        case storeFormatTooNew
        /// The store's schema was migrated (by another process, or another store instance) after this store was
        /// opened: reopen it with the current schema. Nothing was read or written.
        case schemaChanged
        /// The store's files are not an EntityStore store.
        case notAStore
        /// Stored bytes do not decode: the record, key or entry is corrupt.
        case corruptData
        /// The object does not exist in the store (never saved, or deleted elsewhere).
        case objectNotFound
        /// A save was refused: every failure is listed in ``EntityStoreError/failures``.
        case validationFailed
        /// Another context or process saved an object this save changes (optimistic locking).
        case conflict
        /// A value of the wrong type for the attribute.
        case typeMismatch
        /// A value the store cannot hold (`Decimal.nan`).
        case invalidValue
        /// A key that the entity does not have.
        case unknownKey
        /// An entity that the schema does not have.
        case unknownEntity
        /// An object ID string that does not parse, or belongs to another store.
        case invalidObjectID
        /// An object used with a context it does not belong to, or after it was deleted.
        case invalidObject
        /// A predicate that does not parse, or names keys the entity does not have.
        case invalidPredicate
        /// A fetch request that cannot run (an unknown sort key, a negative limit, ...).
        case invalidFetchRequest
        /// An undo or redo with nothing to undo or redo.
        case nothingToUndo
        /// History entries were pruned (`pruneHistory(before:)`, by this process or another)
        /// before an observer or a merging context read them: the changes they held were not delivered. Fetch again
        /// (or reset the context) to see the store as it is; delivery goes on with the saves after them. Core Data's
        /// `NSPersistentHistoryTokenExpiredError`.
        case historyPruned
        /// The device holding the store is full: nothing was written; free space and try again (the same save can be
        /// retried).
        case diskFull
        /// The storage layer failed (see ``EntityStoreError/underlying``).
        case storage
    }

    /// What went wrong.
    public var code: Code
    /// A sentence naming what was wrong.
    public var message: String
    /// The entity involved.
    public var entity: String?
    /// The attribute or relationship involved.
    public var key: String?
    /// The object involved.
    public var objectID: ObjectID?
    /// Every failure, for ``Code/validationFailed``, ``Code/invalidSchema`` and ``Code/migrationRefused``.
    public var failures: [Failure]
    /// The LMDB error behind a ``Code/storage`` failure.
    public var underlying: LMDBError?

    /// One failure of several, with its own location.
    public struct Failure: Sendable, Equatable, CustomStringConvertible {
        /// The entity involved.
        public var entity: String?
        /// The attribute or relationship involved.
        public var key: String?
        /// The object involved.
        public var objectID: ObjectID?
        /// What is wrong.
        public var message: String

        /// Creates a failure.
        public init(entity: String? = nil, key: String? = nil, objectID: ObjectID? = nil, message: String) {
            self.entity = entity
            self.key = key
            self.objectID = objectID
            self.message = message
        }

        public var description: String {
            var location = entity ?? ""
            if let key { location += location.isEmpty ? key : ".\(key)" }
            if let objectID { location += " (\(objectID))" }
            return location.isEmpty ? message : "\(location): \(message)"
        }
    }

    /// Creates an error.
    public init(
        _ code: Code, _ message: String, entity: String? = nil, key: String? = nil, objectID: ObjectID? = nil,
        failures: [Failure] = [], underlying: LMDBError? = nil
    ) {
        self.code = code
        self.message = message
        self.entity = entity
        self.key = key
        self.objectID = objectID
        self.failures = failures
        self.underlying = underlying
    }

    public var description: String {
        var text = "\(code.rawValue): \(message)"
        // A single failure is listed only when the message does not already say it (errors read once).
        if failures.count > 1 || (failures.count == 1 && !message.contains(failures[0].message)) {
            text += failures.map { "\n  - \($0)" }.joined()
        }
        return text
    }
}

extension EntityStoreError {
    /// `error` as an EntityStoreError: itself, a storage error around an LMDBError, or a storage error naming it.
    package static func wrapping(_ error: any Error, _ what: String) -> EntityStoreError {
        if let error = error as? EntityStoreError { return error }
        if let error = error as? LMDBError {
            return EntityStoreError(
                error.code == .noSpace ? .diskFull : .storage, "\(what): \(error)", underlying: error)
        }
        return EntityStoreError(.storage, "\(what): \(error)")
    }
}

/// Runs `body`, turning an ``LMDBError`` into an ``EntityStoreError`` with code ``EntityStoreError/Code/storage``.
func mappingStorageErrors<R>(_ what: @autoclosure () -> String, _ body: () throws -> R) throws -> R {
    do {
        return try body()
    } catch let error as LMDBError {
        throw EntityStoreError(error.code == .noSpace ? .diskFull : .storage, "\(what()): \(error)", underlying: error)
    }
}
