import LMDB

/// Values an app or a library keeps inside the store beside its objects, as Core Data keeps a store's metadata: a
/// sync engine's cursors, an importer's last position. They live in the store's files, so a backup, a restore or
/// a copy of the store carries them with the objects they describe, and a value written with a save
/// (``ObjectContext/save(settingMetadata:)``) is committed in the save's transaction: both, or neither.
///
/// Metadata is not part of the history (observers and controllers hear nothing of it) and not part of the schema.
/// Keys are the app's own; the library's modules use keys beginning with `entitystore.`.
extension PersistentStore {
    /// The largest metadata value, in bytes: a value is one LMDB record, read whole.
    public static let maximumMetadataSize = 16 << 20

    /// The metadata value under `key`, or `nil` when there is none.
    ///
    /// - Throws: ``EntityStoreError/Code/invalidValue`` for an empty key or one longer than 400 bytes; a storage
    ///   error.
    public func metadata(forKey key: String) throws -> [UInt8]? {
        let stored = try Self.metadataKey(key)
        return try mappingStorageErrors("reading the metadata '\(key)'") {
            try read { txn in try txn.get(stored, in: meta).map(Array.init) }
        }
    }

    /// Sets (or, with `nil`, removes) the metadata value under `key`, in a write transaction of its own, durable
    /// when it returns (as a save is, by the store's sync mode).
    ///
    /// - Throws: ``EntityStoreError/Code/invalidValue`` for an empty or overlong key or a value over
    ///   ``maximumMetadataSize``; a storage error (in a read-only store too).
    public func setMetadata(_ value: [UInt8]?, forKey key: String) throws {
        try setMetadata([key: value])
    }

    /// Sets several metadata values in one write transaction (see ``setMetadata(_:forKey:)``).
    public func setMetadata(_ values: [String: [UInt8]?]) throws {
        guard !values.isEmpty else { return }
        let checked = try Self.checkedMetadata(values)
        try mappingStorageErrors("setting the metadata '\(values.keys.sorted().joined(separator: "', '"))'") {
            try write { txn in try writeMetadata(checked, txn) }
        }
    }

    /// The stored keys and values, checked (see ``setMetadata(_:forKey:)``).
    static func checkedMetadata(_ values: [String: [UInt8]?]) throws -> [(key: [UInt8], value: [UInt8]?)] {
        try values.sorted { $0.key < $1.key }.map { key, value in
            if let value, value.count > maximumMetadataSize {
                throw EntityStoreError(
                    .invalidValue,
                    "the metadata '\(key)' is \(value.count) bytes; at most \(maximumMetadataSize) are kept")
            }
            return (try metadataKey(key), value)
        }
    }

    /// Writes checked metadata in a write transaction (a save's, or its own).
    func writeMetadata(_ values: [(key: [UInt8], value: [UInt8]?)], _ txn: WriteTransaction) throws {
        for (key, value) in values {
            if let value {
                try txn.put(key, value, in: meta)
            } else {
                _ = try txn.delete(key, in: meta)
            }
        }
    }

    /// The meta database's key of an app's metadata key.
    static func metadataKey(_ key: String) throws -> [UInt8] {
        guard !key.isEmpty, key.utf8.count <= 400 else {
            throw EntityStoreError(
                .invalidValue,
                key.isEmpty
                    ? "a metadata key cannot be empty"
                    : "the metadata key '\(key.prefix(40))...' is \(key.utf8.count) bytes; at most 400 are allowed")
        }
        return StoreNames.MetaKey.metadata(key)
    }
}

extension ObjectContext {
    /// Saves (see ``save()``) and sets the store's metadata values in the same write transaction: the changes and
    /// the metadata are committed together, or neither is. With nothing to save, the metadata is written alone.
    ///
    /// <!-- snippet
    /// uses: library
    /// let context = ObjectContext(store: try openLibrary())
    /// -->
    /// ```swift
    /// // An importer that must not apply a page twice: its position commits with the page.
    /// try context.save(settingMetadata: ["importer.position": Array("page 42".utf8)])
    /// ```
    ///
    /// - Throws: what ``save()`` throws (then no metadata is written either), and what
    ///   ``PersistentStore/setMetadata(_:)`` throws for the values.
    public func save(settingMetadata values: [String: [UInt8]?]) throws {
        guard parent == nil else {
            throw EntityStoreError(
                .invalidValue, "a child context hands its changes to its parent: save the parent with metadata")
        }
        let checked = try PersistentStore.checkedMetadata(values)
        pendingMetadata = checked
        defer { pendingMetadata = [] }
        try save()
        // A save with nothing to write leaves the metadata to write: alone, then.
        if !pendingMetadata.isEmpty {
            try mappingStorageErrors("setting metadata") {
                try store.write { txn in try store.writeMetadata(checked, txn) }
            }
        }
    }
}
