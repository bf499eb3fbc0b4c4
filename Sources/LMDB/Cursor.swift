import CLMDB

#if canImport(Glibc)
import Glibc
#endif

/// A cursor over one database, valid inside ``ReadTransaction/withCursor(on:_:)``.
///
/// Every positioning call returns the entry it lands on (key and value borrowed from the map), or `nil` when there
/// is none.
public final class Cursor {
    /// A key and its value, borrowed from the map for the life of the transaction.
    public typealias Entry = (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)

    let pointer: OpaquePointer
    /// The database the cursor walks.
    public let database: Database
    let environment: Environment
    var isLive = true

    init(pointer: OpaquePointer, database: Database, environment: Environment) {
        self.pointer = pointer
        self.database = database
        self.environment = environment
    }

    private func requireLive() throws {
        guard isLive else {
            throw LMDBError(
                code: .misuse, message: "the cursor was used after its closure returned",
                context: "cursor on database \(database)")
        }
    }

    private func move(
        _ op: MDB_cursor_op, key: UnsafeRawBufferPointer? = nil, value: UnsafeRawBufferPointer? = nil
    )
        throws -> Entry?
    {
        try requireLive()
        var keyValue = MDB_val(mv_size: 0, mv_data: nil)
        var data = MDB_val(mv_size: 0, mv_data: nil)
        if let key {
            try environment.checkKey(key, "cursor on database \(database)")
            keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        }
        if let value {
            data = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        }
        let rc = mdb_cursor_get(pointer, &keyValue, &data, op)
        if rc == MDB_NOTFOUND { return nil }
        try check(rc, "mdb_cursor_get on database \(database)")
        return (
            UnsafeRawBufferPointer(start: keyValue.mv_data, count: keyValue.mv_size),
            UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size)
        )
    }

    /// The first entry of the database.
    public func first() throws -> Entry? { try move(MDB_FIRST) }
    /// The last entry of the database.
    public func last() throws -> Entry? { try move(MDB_LAST) }
    /// The next entry (the next value of the same key first, in a DUPSORT database).
    public func next() throws -> Entry? { try move(MDB_NEXT) }
    /// The previous entry.
    public func previous() throws -> Entry? { try move(MDB_PREV) }
    /// The entry under the cursor.
    public func current() throws -> Entry? { try move(MDB_GET_CURRENT) }
    /// The first entry whose key is at least `key`.
    public func seek(atLeast key: UnsafeRawBufferPointer) throws -> Entry? { try move(MDB_SET_RANGE, key: key) }
    /// The entry whose key is exactly `key` (its first value in a DUPSORT database).
    public func seek(exactly key: UnsafeRawBufferPointer) throws -> Entry? { try move(MDB_SET_KEY, key: key) }
    /// DUPSORT: the next value of the current key.
    public func nextDuplicate() throws -> Entry? { try move(MDB_NEXT_DUP) }
    /// DUPSORT: the first value of the next key.
    public func nextKey() throws -> Entry? { try move(MDB_NEXT_NODUP) }
    /// DUPSORT: the last value of the previous key.
    public func previousKey() throws -> Entry? { try move(MDB_PREV_NODUP) }
    /// DUPSORT: the last value of the current key.
    public func lastDuplicate() throws -> Entry? {
        // MDB_LAST_DUP fills in the value only; read the whole entry back.
        guard try move(MDB_LAST_DUP) != nil else { return nil }
        return try current()
    }
    /// DUPSORT: the first value of `key` that is at least `value`.
    ///
    /// The entry's key is read back from the map, as every other move's is: `MDB_GET_BOTH_RANGE` leaves the key it
    /// is given in place, so the entry it returns pointed at the caller's buffer, which is often gone by the time
    /// the entry is read.
    public func seek(key: UnsafeRawBufferPointer, valueAtLeast value: UnsafeRawBufferPointer) throws -> Entry? {
        guard try move(MDB_GET_BOTH_RANGE, key: key, value: value) != nil else { return nil }
        return try current()
    }

    /// DUPSORT: how many values the current key holds.
    public func duplicateCount() throws -> Int {
        try requireLive()
        var count: Int = 0
        try check(mdb_cursor_count(pointer, &count), "mdb_cursor_count on database \(database)")
        return count
    }

    /// Positions at the first entry of `range` (forward iteration).
    func positionAtStart(of range: KeyRange) throws -> Entry? {
        guard let lower = range.lower else { return try first() }
        var entry = try lower.bytes.withUnsafeBytes { try seek(atLeast: $0) }
        if !lower.inclusive {
            while let current = entry, compare(current.key, lower.bytes) == 0 {
                entry = database.isDupSort ? try nextKey() : try next()
            }
        }
        return entry
    }

    /// Positions at the last entry of `range` (backward iteration).
    func positionAtEnd(of range: KeyRange) throws -> Entry? {
        guard let upper = range.upper else { return try last() }
        guard var entry = try upper.bytes.withUnsafeBytes({ try seek(atLeast: $0) }) else { return try last() }
        let order = compare(entry.key, upper.bytes)
        if order > 0 || (order == 0 && !upper.inclusive) {
            return database.isDupSort ? try previousKey() : try previous()
        }
        if database.isDupSort, let lastValue = try lastDuplicate() { entry = lastValue }
        return entry
    }
}

/// A cursor that puts into one database, from ``WriteTransaction/putCursor(on:)``: valid until its transaction ends
/// (or drops the database).
public final class PutCursor {
    let pointer: OpaquePointer
    /// The database the cursor puts into.
    public let database: Database
    let transaction: WriteTransaction
    let environment: Environment
    var isLive = true

    init(pointer: OpaquePointer, database: Database, transaction: WriteTransaction) {
        self.pointer = pointer
        self.database = database
        self.transaction = transaction
        self.environment = transaction.environment
    }

    /// Stores `value` under `key`, like ``WriteTransaction/put(_:_:in:flags:)-(UnsafeRawBufferPointer,_,_,_)``.
    ///
    /// - Throws: what ``WriteTransaction/put(_:_:in:flags:)-(UnsafeRawBufferPointer,_,_,_)`` throws;
    ///   ``LMDBError/Code/misuse`` after its transaction ended.
    public func put(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, flags: PutFlags = []) throws {
        guard isLive else {
            throw LMDBError(
                code: .misuse, message: "the cursor was used after its transaction ended",
                context: "put in database \(database)")
        }
        try environment.checkPut(key, value, in: database)
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        let rc = environment.injectedFault() ?? mdb_cursor_put(pointer, &keyValue, &data, flags.rawValue)
        try transaction.fail(rc, "mdb_cursor_put in database \(database)")
    }

    /// Stores `value` under an 8-byte big-endian integer key.
    public func put(_ key: UInt64, _ value: UnsafeRawBufferPointer, flags: PutFlags = []) throws {
        try withUnsafeBytes(of: key.bigEndian) { try put($0, value, flags: flags) }
    }

    /// Stores `value` under `key`, both as byte arrays.
    public func put(_ key: [UInt8], _ value: [UInt8], flags: PutFlags = []) throws {
        try key.withUnsafeBytes { key in try value.withUnsafeBytes { try put(key, $0, flags: flags) } }
    }
}

/// A range of keys in LMDB's order (bytes compared lexicographically, a shorter prefix first).
public struct KeyRange: Sendable, Equatable {
    /// One end of a range.
    public struct Bound: Sendable, Equatable {
        /// The key at the end.
        public var bytes: [UInt8]
        /// Whether the key itself is in the range.
        public var inclusive: Bool

        /// A bound at `bytes`, inclusive by default.
        public init(_ bytes: [UInt8], inclusive: Bool = true) {
            self.bytes = bytes
            self.inclusive = inclusive
        }
    }

    /// The smallest keys in the range; `nil` for no lower end.
    public var lower: Bound?
    /// The largest keys in the range; `nil` for no upper end.
    public var upper: Bound?

    /// A range between two optional bounds.
    public init(lower: Bound? = nil, upper: Bound? = nil) {
        self.lower = lower
        self.upper = upper
    }

    /// Every key.
    public static let all = KeyRange()

    /// Keys at least `key`.
    public static func from(_ key: [UInt8]) -> KeyRange { KeyRange(lower: Bound(key)) }

    /// Keys at most `key`.
    public static func through(_ key: [UInt8]) -> KeyRange { KeyRange(upper: Bound(key)) }

    /// Keys starting with `prefix`.
    public static func prefix(_ prefix: [UInt8]) -> KeyRange {
        var successor = prefix
        while let last = successor.last, last == 0xFF { successor.removeLast() }
        guard !successor.isEmpty else { return KeyRange(lower: Bound(prefix)) }
        successor[successor.count - 1] += 1
        return KeyRange(lower: Bound(prefix), upper: Bound(successor, inclusive: false))
    }

    /// Keys equal to `key` (all its values, in a DUPSORT database).
    public static func exactly(_ key: [UInt8]) -> KeyRange { KeyRange(lower: Bound(key), upper: Bound(key)) }

    func allows(upperSideOf key: UnsafeRawBufferPointer) -> Bool {
        guard let upper else { return true }
        let order = compare(key, upper.bytes)
        return order < 0 || (order == 0 && upper.inclusive)
    }

    func allows(lowerSideOf key: UnsafeRawBufferPointer) -> Bool {
        guard let lower else { return true }
        let order = compare(key, lower.bytes)
        return order > 0 || (order == 0 && lower.inclusive)
    }
}

/// Compares like LMDB's default key order: bytes lexicographically, then the shorter first.
func compare(_ lhs: UnsafeRawBufferPointer, _ rhs: [UInt8]) -> Int {
    rhs.withUnsafeBytes { right in
        let common = min(lhs.count, right.count)
        if common > 0 {
            let order = memcmp(lhs.baseAddress!, right.baseAddress!, common)
            if order != 0 { return Int(order) }
        }
        return lhs.count - right.count
    }
}
