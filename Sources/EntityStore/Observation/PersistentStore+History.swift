import Foundation
import LMDB

extension PersistentStore {
    /// The number of the last saved transaction in the history (0 before the first save).
    public func lastTransaction() throws -> UInt64 {
        try mappingStorageErrors("reading the last transaction") {
            try readUnchecked { txn in try historySequence(txn) }
        }
    }

    /// The saves after transaction `since`, oldest first, as change records.
    ///
    /// Each record holds what its save delivered, but an insert's values (see ``ObjectChange/newValues``).
    ///
    /// This returns what the history still holds: transactions follow each other, so when the first record's
    /// ``ChangeRecord/transaction`` is above `since + 1`, the ones between were pruned (`pruneHistory(before:)`, by
    /// number or date). The live deliveries (``changes(since:)``, ``observeCommits(since:onError:onChange:)``, merging
    /// contexts) report such a gap as ``EntityStoreError/Code/historyPruned``.
    ///
    /// - Parameters:
    ///   - since: Return transactions numbered above this.
    ///   - limit: At most this many (at least 1); `nil` for all.
    /// - Throws: ``EntityStoreError/Code/corruptData`` naming the first entry that does not decode;
    ///   ``EntityStoreError/Code/invalidValue`` for a limit below 1.
    public func history(since: UInt64 = 0, limit: Int? = nil) throws -> [ChangeRecord] {
        if let limit, limit < 1 {
            throw EntityStoreError(.invalidValue, "a history limit must be at least 1, not \(limit)")
        }
        return try historyEntries(since: since, limit: limit).entries.map { try $0.record.get() }
    }

    /// One history entry: its transaction number and its record, or why it does not decode.
    struct HistoryEntry {
        var number: UInt64
        var record: Result<ChangeRecord, EntityStoreError>
    }

    /// The entries after `since`, each decoded on its own (a bad entry does not hide the ones after it), the LMDB
    /// transaction of the snapshot they were read from, and the number of the last saved transaction in it
    /// (``historySequence(_:)``: above the last entry's when the newest entries were pruned; without a limit, when
    /// no entry follows `since` and the history was never pruned past it, a number no greater than `since`).
    func historyEntries(
        since: UInt64, limit: Int? = nil
    ) throws -> (entries: [HistoryEntry], snapshot: Int, sequence: UInt64) {
        try mappingStorageErrors("reading the history") {
            try readUnchecked { txn in
                var entries: [HistoryEntry] = []
                try txn.forEach(
                    in: historyDatabase, range: KeyRange(lower: .init(IndexKey.primaryKey(since), inclusive: false))
                ) { key, value in
                    let number = try IndexKey.primaryKey(from: key)
                    do {
                        let record = withInsertKeys(try HistoryCodec.decode(value).0)
                        entries.append(HistoryEntry(number: number, record: .success(record)))
                    } catch let error as EntityStoreError {
                        entries.append(
                            HistoryEntry(
                                number: number,
                                record: .failure(
                                    EntityStoreError(
                                        error.code, "history entry \(number) does not decode: \(error.message)"))))
                    }
                    return limit.map { entries.count >= $0 ? .stop : .continue } ?? .continue
                }
                // Read to the end, the last entry is the newest: only the mark is left to read.
                let sequence =
                    limit == nil ? max(try pruningMark(txn), entries.last?.number ?? 0) : try historySequence(txn)
                return (entries, try txn.id, sequence)
            }
        }
    }

    /// `record` with every insert's changed keys: all the attributes of its entity (entries store none for inserts;
    /// older entries that list them keep their list).
    func withInsertKeys(_ record: ChangeRecord) -> ChangeRecord {
        guard record.changes.contains(where: { $0.kind == .insert && $0.changedKeys.isEmpty }) else { return record }
        var record = record
        for i in record.changes.indices where record.changes[i].kind == .insert && record.changes[i].changedKeys.isEmpty
        {
            record.changes[i].changedKeys = storages[record.changes[i].objectID.entityName]?.attributeNames ?? []
        }
        return record
    }

    /// Deletes history entries numbered below `transaction`.
    /// - Returns: How many entries were deleted.
    @discardableResult
    public func pruneHistory(before transaction: UInt64) throws -> Int {
        try prune { number, _ in number < transaction }
    }

    /// Deletes history entries saved before `date`.
    /// - Returns: How many entries were deleted.
    @discardableResult
    public func pruneHistory(before date: Date) throws -> Int {
        try prune { _, record in record.date < date }
    }

    private func prune(_ doomed: (UInt64, ChangeRecord) -> Bool) throws -> Int {
        try mappingStorageErrors("pruning the history") {
            try environment.write { txn in
                // Keep the sequence's high-water mark: numbering goes on after the newest entries are pruned.
                try txn.put(StoreNames.MetaKey.historySequence, IndexKey.primaryKey(try historySequence(txn)), in: meta)
                var keys: [UInt64] = []
                try txn.forEach(in: historyDatabase) { key, value in
                    let (record, number) = try HistoryCodec.decode(value)
                    guard doomed(number, record) else { return .stop }
                    keys.append(try IndexKey.primaryKey(from: key))
                    return .continue
                }
                for key in keys { try txn.delete(key, in: historyDatabase) }
                return keys.count
            }
        }
    }

    /// The number of the last saved transaction: the newest history entry's, or the high-water mark kept in the
    /// meta database when pruning (stores written before the mark was only kept at pruning hold it too).
    func historySequence(_ txn: ReadTransaction) throws -> UInt64 {
        let mark = try pruningMark(txn)
        var newest: UInt64 = 0
        try txn.forEach(in: historyDatabase, reverse: true) { key, _ in
            newest = try IndexKey.primaryKey(from: key)
            return .stop
        }
        return max(mark, newest)
    }

    /// The high-water mark pruning keeps in the meta database (0 when the history was never pruned).
    private func pruningMark(_ txn: ReadTransaction) throws -> UInt64 {
        try txn.get(StoreNames.MetaKey.historySequence, in: meta).map { try IndexKey.primaryKey(from: $0) } ?? 0
    }

    /// Appends one history entry in the save's write transaction; returns its transaction number. The entry goes
    /// at the end of the history database (appended), and nothing else is written: a save of one object touches
    /// as few pages as it can.
    func appendHistory(_ record: ChangeRecord, _ txn: WriteTransaction) throws -> UInt64 {
        try appendHistory(txn) { HistoryCodec.encode(record, transaction: $0) }
    }

    /// Appends the entry `encode` makes for the next transaction number; returns the number.
    func appendHistory(_ txn: WriteTransaction, _ encode: (UInt64) -> [UInt8]) throws -> UInt64 {
        let number = try historySequence(txn) + 1
        let bytes = encode(number)
        try bytes.withUnsafeBytes { try txn.put(number, $0, in: historyDatabase, flags: .append) }
        return number
    }
}
