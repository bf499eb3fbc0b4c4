import CLMDB

#if canImport(Glibc)
import Glibc
#endif

/// An error from the LMDB layer: the failing code, LMDB's message and what was being done.
///
/// Match on ``code`` in a `catch`:
///
/// <!-- snippet
/// let env = try Environment.open(path: "numbers.mdb")
/// let db = try env.openDatabase("numbers")
/// let (key, value) = (Array("k".utf8), Array("v".utf8))
/// -->
/// ```swift
/// do { try env.write { txn in try txn.put(key, value, in: db, flags: .noOverwrite) } }
/// catch let error as LMDBError where error.code == .keyExists { print("already there") }
/// ```
public struct LMDBError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The code of an LMDB failure: an `MDB_*` return code, an `errno` value, or one of this layer's own checks.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The raw value: LMDB's code (negative), an errno (positive), or this layer's own (from 1_000_000).
        public let rawValue: Int32

        /// Wraps a raw code.
        public init(rawValue: Int32) { self.rawValue = rawValue }

        /// `MDB_KEYEXIST`: the key (or key/value pair) is already there.
        public static let keyExists = Code(rawValue: MDB_KEYEXIST)
        /// `MDB_NOTFOUND`: no such key.
        public static let notFound = Code(rawValue: MDB_NOTFOUND)
        /// `MDB_PAGE_NOTFOUND`: a requested page was not found: the file is damaged.
        public static let pageNotFound = Code(rawValue: MDB_PAGE_NOTFOUND)
        /// `MDB_CORRUPTED`: a page has the wrong type: the file is damaged.
        public static let corrupted = Code(rawValue: MDB_CORRUPTED)
        /// `MDB_PANIC`: an earlier fatal error; the environment must be closed.
        public static let panic = Code(rawValue: MDB_PANIC)
        /// `MDB_VERSION_MISMATCH`: the data file was written by another LMDB version.
        public static let versionMismatch = Code(rawValue: MDB_VERSION_MISMATCH)
        /// `MDB_INVALID`: the file is not an LMDB file.
        public static let invalid = Code(rawValue: MDB_INVALID)
        /// `MDB_MAP_FULL`: the map is full (this layer grows it by itself).
        public static let mapFull = Code(rawValue: MDB_MAP_FULL)
        /// `MDB_DBS_FULL`: more named databases than the environment allows.
        public static let dbsFull = Code(rawValue: MDB_DBS_FULL)
        /// `MDB_READERS_FULL`: the reader table is full.
        public static let readersFull = Code(rawValue: MDB_READERS_FULL)
        /// `MDB_TLS_FULL`: too many thread-local slots (not used: environments are MDB_NOTLS).
        public static let tlsFull = Code(rawValue: MDB_TLS_FULL)
        /// `MDB_TXN_FULL`: the transaction has too many dirty pages.
        public static let txnFull = Code(rawValue: MDB_TXN_FULL)
        /// `MDB_CURSOR_FULL`: the cursor stack is too deep.
        public static let cursorFull = Code(rawValue: MDB_CURSOR_FULL)
        /// `MDB_PAGE_FULL`: a page has no room.
        public static let pageFull = Code(rawValue: MDB_PAGE_FULL)
        /// `MDB_MAP_RESIZED`: another process grew the map (this layer adopts the new size).
        public static let mapResized = Code(rawValue: MDB_MAP_RESIZED)
        /// `MDB_INCOMPATIBLE`: the database exists with other flags.
        public static let incompatible = Code(rawValue: MDB_INCOMPATIBLE)
        /// `MDB_BAD_RSLOT`: a reader slot was reused wrongly.
        public static let badReaderSlot = Code(rawValue: MDB_BAD_RSLOT)
        /// `MDB_BAD_TXN`: the transaction cannot be used any more.
        public static let badTransaction = Code(rawValue: MDB_BAD_TXN)
        /// `MDB_BAD_VALSIZE`: a key or DUPSORT value is empty or too long.
        public static let badValueSize = Code(rawValue: MDB_BAD_VALSIZE)
        /// `MDB_BAD_DBI`: the database handle is not valid.
        public static let badDatabase = Code(rawValue: MDB_BAD_DBI)

        /// `EACCES`: the file or directory may not be read or written.
        public static let permissionDenied = Code(rawValue: EACCES)
        /// `ENOENT`: the file or directory does not exist.
        public static let noSuchFile = Code(rawValue: ENOENT)
        /// `EINVAL`: an argument is not valid.
        public static let invalidArgument = Code(rawValue: EINVAL)
        /// `ENOSPC`: the disk is full.
        public static let noSpace = Code(rawValue: ENOSPC)
        /// `EIO`: the disk reported an I/O error.
        public static let ioError = Code(rawValue: EIO)
        /// `ENOMEM`: out of memory.
        public static let outOfMemory = Code(rawValue: ENOMEM)
        /// `EBUSY`: the resource is busy.
        public static let busy = Code(rawValue: EBUSY)
        /// `EROFS`: the file system is read-only.
        public static let readOnlyFileSystem = Code(rawValue: EROFS)
        /// `EAGAIN`: try again.
        public static let tryAgain = Code(rawValue: EAGAIN)

        /// The data file is shorter than its own meta page says: opening it would crash inside LMDB.
        public static let truncatedDataFile = Code(rawValue: 1_000_001)
        /// The data or lock file is a symbolic link or not a regular file.
        public static let unsafeFile = Code(rawValue: 1_000_002)
        /// The data file is not an LMDB data file (bad magic, empty, too short).
        public static let notAnEnvironment = Code(rawValue: 1_000_003)
        /// A named database does not exist (and was not asked to be created).
        public static let databaseNotFound = Code(rawValue: 1_000_004)
        /// A write was attempted where only reads are allowed (a read-only environment or transaction).
        public static let readOnly = Code(rawValue: 1_000_005)
        /// The environment is already open in this process with incompatible options.
        public static let alreadyOpen = Code(rawValue: 1_000_006)
        /// A transaction or cursor was used after its scope ended, or nested where it cannot be.
        public static let misuse = Code(rawValue: 1_000_007)

        /// The symbolic name: `MDB_MAP_FULL`, `EACCES`, `TRUNCATED_DATA_FILE`, ...
        public var name: String {
            switch self {
            case .keyExists: "MDB_KEYEXIST"
            case .notFound: "MDB_NOTFOUND"
            case .pageNotFound: "MDB_PAGE_NOTFOUND"
            case .corrupted: "MDB_CORRUPTED"
            case .panic: "MDB_PANIC"
            case .versionMismatch: "MDB_VERSION_MISMATCH"
            case .invalid: "MDB_INVALID"
            case .mapFull: "MDB_MAP_FULL"
            case .dbsFull: "MDB_DBS_FULL"
            case .readersFull: "MDB_READERS_FULL"
            case .tlsFull: "MDB_TLS_FULL"
            case .txnFull: "MDB_TXN_FULL"
            case .cursorFull: "MDB_CURSOR_FULL"
            case .pageFull: "MDB_PAGE_FULL"
            case .mapResized: "MDB_MAP_RESIZED"
            case .incompatible: "MDB_INCOMPATIBLE"
            case .badReaderSlot: "MDB_BAD_RSLOT"
            case .badTransaction: "MDB_BAD_TXN"
            case .badValueSize: "MDB_BAD_VALSIZE"
            case .badDatabase: "MDB_BAD_DBI"
            case .permissionDenied: "EACCES"
            case .noSuchFile: "ENOENT"
            case .invalidArgument: "EINVAL"
            case .noSpace: "ENOSPC"
            case .ioError: "EIO"
            case .outOfMemory: "ENOMEM"
            case .busy: "EBUSY"
            case .readOnlyFileSystem: "EROFS"
            case .tryAgain: "EAGAIN"
            case .truncatedDataFile: "TRUNCATED_DATA_FILE"
            case .unsafeFile: "UNSAFE_FILE"
            case .notAnEnvironment: "NOT_AN_ENVIRONMENT"
            case .databaseNotFound: "DATABASE_NOT_FOUND"
            case .readOnly: "READ_ONLY"
            case .alreadyOpen: "ALREADY_OPEN"
            case .misuse: "MISUSE"
            default: rawValue > 0 ? "errno \(rawValue)" : "MDB error \(rawValue)"
            }
        }

        public var description: String { name }
    }

    /// What failed.
    public var code: Code
    /// A human-readable message: LMDB's `mdb_strerror` text, or this layer's own explanation.
    public var message: String
    /// What was being done, and on what: `"mdb_put in database 'users'"`, a path, ...
    public var context: String

    /// Creates an error.
    public init(code: Code, message: String, context: String) {
        self.code = code
        self.message = message
        self.context = context
    }

    /// Creates an error from an LMDB return code, with `mdb_strerror`'s message.
    public init(lmdbCode: Int32, context: String) {
        self.code = Code(rawValue: lmdbCode)
        self.message = String(cString: mdb_strerror(lmdbCode))
        self.context = context
    }

    public var description: String { "\(code.name): \(message) (\(context))" }
}

/// Throws an ``LMDBError`` unless `rc` is `MDB_SUCCESS`.
@inline(__always)
func check(_ rc: Int32, _ context: @autoclosure () -> String) throws(LMDBError) {
    if rc != MDB_SUCCESS { throw LMDBError(lmdbCode: rc, context: context()) }
}
