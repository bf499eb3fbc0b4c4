import CLMDB

/// A handle on a named database inside an ``Environment``.
///
/// Handles are cheap values: open them once (``Environment/openDatabase(_:dupSort:create:)``) and keep them.
public struct Database: Hashable, Sendable, CustomStringConvertible {
    @usableFromInline let dbi: MDB_dbi
    /// The database's name; `nil` for the environment's main database.
    public let name: String?
    /// Whether keys may hold several values, kept sorted (`MDB_DUPSORT`).
    public let isDupSort: Bool
    /// When the handle was published to the environment (0: not yet, or the main database): a transaction can use
    /// it only if it began after that.
    @usableFromInline let generation: UInt64
    /// The generation of a handle opened in a transaction that has not committed.
    static let pending = UInt64.max

    init(dbi: MDB_dbi, name: String?, isDupSort: Bool, generation: UInt64 = 0) {
        self.dbi = dbi
        self.name = name
        self.isDupSort = isDupSort
        self.generation = generation
    }

    public var description: String { name.map { "'\($0)'" } ?? "the main database" }

    /// The handle's number in its environment (`MDB_dbi`): two handles of one environment with the same number are
    /// the same database, for as long as neither is dropped.
    public var number: UInt32 { dbi }
}

/// Statistics of a database or of the whole environment (`mdb_stat`, `mdb_env_stat`).
public struct DatabaseStatistics: Sendable, Equatable {
    /// The page size in bytes.
    public var pageSize: Int
    /// The depth of the B-tree.
    public var depth: Int
    /// Internal (non-leaf) pages.
    public var branchPages: Int
    /// Leaf pages.
    public var leafPages: Int
    /// Overflow pages (values larger than about half a page).
    public var overflowPages: Int
    /// Key/value pairs.
    public var entries: Int

    init(_ stat: MDB_stat) {
        pageSize = Int(stat.ms_psize)
        depth = Int(stat.ms_depth)
        branchPages = stat.ms_branch_pages
        leafPages = stat.ms_leaf_pages
        overflowPages = stat.ms_overflow_pages
        entries = stat.ms_entries
    }

    /// The bytes held by all pages of the tree.
    public var bytes: Int { (branchPages + leafPages + overflowPages) * pageSize }
}

/// Information about an environment (`mdb_env_info`).
public struct EnvironmentInfo: Sendable, Equatable {
    /// The current map size in bytes.
    public var mapSize: Int
    /// The number of the last page in use.
    public var lastPageNumber: Int
    /// The last committed transaction's ID.
    public var lastTransactionID: Int
    /// The reader table's size.
    public var maxReaders: Int
    /// Reader slots in use.
    public var readersUsed: Int
}

/// How `put` treats an existing key.
public struct PutFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Fail with ``LMDBError/Code/keyExists`` if the key is already there.
    public static let noOverwrite = PutFlags(rawValue: UInt32(MDB_NOOVERWRITE))
    /// DUPSORT: fail with ``LMDBError/Code/keyExists`` if this key/value pair is already there.
    public static let noDuplicateData = PutFlags(rawValue: UInt32(MDB_NODUPDATA))
    /// The key sorts after every key in the database (a fast bulk load).
    public static let append = PutFlags(rawValue: UInt32(MDB_APPEND))
    /// DUPSORT: the value sorts after every value of the key.
    public static let appendDuplicate = PutFlags(rawValue: UInt32(MDB_APPENDDUP))
}
