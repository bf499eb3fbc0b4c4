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
        if let migration {
            let txn = try migration.transaction()
            try verifySchema(txn)
            return try body(txn)
        }
        return try environment.read { txn in
            try verifySchema(txn)
            return try body(txn)
        }
    }

    /// Runs `body` in a write transaction of the store, after checking inside it that the stored schema is still
    /// the one this store was opened with: a process whose schema no longer matches writes nothing.
    ///
    /// - Throws: ``EntityStoreError/Code/schemaChanged``, or what `body` or LMDB throws.
    func write<R>(_ body: (WriteTransaction) throws -> R) throws -> R {
        if let migration {
            // A write that fails has left part of itself in the migration's transaction: the migration fails with it
            // (even when the stage's code catches the error), and its transaction is aborted.
            let txn = try migration.transaction()
            do {
                try verifySchema(txn)
                return try body(txn)
            } catch {
                migration.fail(error)
                throw error
            }
        }
        return try environment.write { txn in
            try verifySchema(txn)
            return try body(txn)
        }
    }

    /// Runs `body` in a read transaction without the schema check (the history, kept across schemas), or in the
    /// migration's transaction for a migration's store.
    func readUnchecked<R>(_ body: (ReadTransaction) throws -> R) throws -> R {
        if let migration { return try body(try migration.transaction()) }
        return try environment.read(body)
    }

    func verifySchema(_ txn: ReadTransaction) throws {
        let snapshot = try txn.id
        if txn.isReadOnly && verifiedSnapshot.load(ordering: .relaxed) == snapshot { return }
        let stored = try txn.get(StoreNames.MetaKey.schemaStamp, in: meta).map(Array.init)
        guard stored == schemaStamp else {
            let now: String
            do {
                if let marker = try Migration.readMarker(txn, meta: meta) {
                    now = "being migrated from version \(marker.fromVersion) to \(marker.toVersion)"
                } else {
                    now = try Self.readSchema(txn, meta: meta).map { "version \($0.version)" } ?? "missing"
                }
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

/// The write transaction of a running migration, lent to the stores its stages hand their code.
///
/// `@unchecked Sendable`: the stores holding it are `Sendable`, but a migration runs on the opening thread, its
/// stages' code synchronously inside it, and the scope is only touched there; once the stage ends it refuses every
/// use (a context kept by the app's code and used later gets an error, not a dead transaction).
final class MigrationScope: @unchecked Sendable {
    private var txn: WriteTransaction?
    /// The first error a write of the stage threw.
    private(set) var failure: (any Error)?

    init(_ txn: WriteTransaction) { self.txn = txn }

    func transaction() throws -> WriteTransaction {
        guard let txn else {
            throw EntityStoreError(
                .migrationRefused, "a migration stage's store or context was used after its stage ended")
        }
        return txn
    }

    func fail(_ error: any Error) {
        if failure == nil { failure = error }
    }

    /// Ends the stage: every later use throws.
    func close() { txn = nil }
}
