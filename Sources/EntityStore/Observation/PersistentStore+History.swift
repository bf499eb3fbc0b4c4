import Foundation
import LMDB

extension PersistentStore {
    /// The number of the last saved transaction in the history (0 before the first save).
    public func lastTransaction() throws -> UInt64 {
        try mappingStorageErrors("reading the last transaction") {
            try environment.read { txn in try historySequence(txn) }
        }
    }

    /// The saves after transaction `since`, oldest first, as change records.
    ///
    /// - Parameters:
    ///   - since: Return transactions numbered above this.
    ///   - limit: At most this many.
    public func history(since: UInt64 = 0, limit: Int? = nil) throws -> [ChangeRecord] {
        try historySnapshot(since: since, limit: limit).records
    }

    /// The saves after `since`, and the LMDB transaction of the snapshot they were read from.
    func historySnapshot(since: UInt64, limit: Int? = nil) throws -> (records: [ChangeRecord], snapshot: Int) {
        try mappingStorageErrors("reading the history") {
            try environment.read { txn in
                var records: [ChangeRecord] = []
                try txn.forEach(
                    in: historyDatabase, range: KeyRange(lower: .init(IndexKey.primaryKey(since), inclusive: false))
                ) { _, value in
                    records.append(try HistoryCodec.decode(value).0)
                    return limit.map { records.count >= $0 ? .stop : .continue } ?? .continue
                }
                return (records, try txn.id)
            }
        }
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
        let mark =
            try txn.get(StoreNames.MetaKey.historySequence, in: meta).map { try IndexKey.primaryKey(from: $0) } ?? 0
        var newest: UInt64 = 0
        try txn.forEach(in: historyDatabase, reverse: true) { key, _ in
            newest = try IndexKey.primaryKey(from: key)
            return .stop
        }
        return max(mark, newest)
    }

    /// Appends one history entry in the save's write transaction; returns its transaction number. The entry goes
    /// at the end of the history database (appended), and nothing else is written: a save of one object touches
    /// as few pages as it can.
    func appendHistory(_ record: ChangeRecord, _ txn: WriteTransaction) throws -> UInt64 {
        let number = try historySequence(txn) + 1
        let bytes = HistoryCodec.encode(record, transaction: number)
        try bytes.withUnsafeBytes { try txn.put(number, $0, in: historyDatabase, flags: .append) }
        return number
    }
}
