import LMDB

extension PersistentStore {
    /// Runs `body` in a read transaction of the store, after checking that the stored schema is still the one this
    /// store was opened with (another process, or another store instance of this process, may have migrated it:
    /// its records would no longer decode with this schema).
    ///
    /// The check reads one meta key, once per snapshot: reads of a snapshot already checked skip it.
    ///
    /// - Throws: ``EntityStoreError/Code/schemaChanged``, or what `body` or LMDB throws.
    func read<R>(_ body: (ReadTransaction) throws -> R) throws -> R {
        try environment.read { txn in
            try verifySchema(txn)
            return try body(txn)
        }
    }

    /// Runs `body` in a write transaction of the store, after checking inside it that the stored schema is still
    /// the one this store was opened with: a process whose schema no longer matches writes nothing.
    ///
    /// - Throws: ``EntityStoreError/Code/schemaChanged``, or what `body` or LMDB throws.
    func write<R>(_ body: (WriteTransaction) throws -> R) throws -> R {
        try environment.write { txn in
            try verifySchema(txn)
            return try body(txn)
        }
    }

    func verifySchema(_ txn: ReadTransaction) throws {
        let snapshot = try txn.id
        if txn.isReadOnly && verifiedSnapshot.load(ordering: .relaxed) == snapshot { return }
        let stored = try txn.get(StoreNames.MetaKey.schemaStamp, in: meta).map(Array.init)
        guard stored == schemaStamp else {
            let now: String
            do {
                now = try Self.readSchema(txn, meta: meta).map { "version \($0.version)" } ?? "missing"
            } catch {
                now = "unreadable: \(error)"
            }
            throw EntityStoreError(
                .schemaChanged,
                "the store's schema was changed (now \(now)) since this store was opened with version"
                    + " \(schema.version): open the store again with the current schema")
        }
        if txn.isReadOnly { verifiedSnapshot.store(snapshot, ordering: .relaxed) }
    }
}
