#if canImport(Glibc)
import Glibc
#endif

/// The checks made on a store's files before LMDB opens them.
///
/// LMDB trusts its data file: a truncated one makes it die of SIGBUS, and it follows symbolic links. These checks
/// read the two meta pages themselves and refuse what LMDB would mishandle.
///
/// An empty data file is left to LMDB, which initialises it: it is what a first open leaves when it is killed
/// between creating the file and writing its two meta pages (one write), and what a second process sees while a
/// first one creates the store (LMDB's lock file then makes it wait). Refusing it would make such a store
/// unopenable for good.
struct Preflight {
    /// The data file's device and inode, when it exists.
    var identity: Environment.FileIdentity?
    /// The map size recorded in the newest meta page.
    var storedMapSize: Int?
    /// The bytes the newest meta page says the data file holds.
    var requiredSize: Int?

    static let magic: UInt32 = 0xBEEF_C0DE
    static let dataVersion: UInt32 = 1

    /// Checks the data file; the lock file is allocated by ``allocateLockFile(_:maxReaders:)`` only when LMDB
    /// opens the environment anew (see there).
    static func run(path: String, readOnly: Bool) throws(LMDBError) -> Preflight {
        try check(path: path, readOnly: readOnly)
    }

    /// Gives the lock file real blocks before LMDB maps it. LMDB sizes it with `ftruncate` (a hole) and writes its
    /// header and reader slots through a shared memory map: on a full disk the first such write kills the process
    /// with SIGBUS. Allocated here, a full disk is a clear ENOSPC instead.
    ///
    /// Only before this process opens the environment: closing a descriptor of the lock file releases every POSIX
    /// lock the process holds on it, LMDB's included (the lock that says this process is alive and its readers are
    /// not stale, and the one that keeps another process from resetting the lock file as if it were the first).
    static func allocateLockFile(_ lockPath: String, maxReaders: Int) throws(LMDBError) {
        // LMDB's size: a header and one 64-byte slot per reader, in a cache line each; rounded up to pages.
        let needed = (128 + 64 * maxReaders + 4095) / 4096 * 4096
        let fd = Glibc.open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            let code = errno
            throw LMDBError(code: .init(rawValue: code), message: describe(errno: code), context: lockPath)
        }
        defer { close(fd) }
        let rc = posix_fallocate(fd, 0, off_t(needed))
        guard rc == 0 else {
            throw LMDBError(
                code: .init(rawValue: rc),
                message: rc == ENOSPC
                    ? "no space left on the device for the store's lock file (\(needed) bytes)"
                    : "cannot allocate the store's lock file: \(describe(errno: rc))",
                context: lockPath)
        }
    }

    private static func check(path: String, readOnly: Bool) throws(LMDBError) -> Preflight {
        var directoryInfo = stat()
        if stat(path, &directoryInfo) != 0 {
            let code = errno
            guard code == ENOENT, !readOnly else {
                throw LMDBError(code: .init(rawValue: code), message: describe(errno: code), context: path)
            }
            if mkdir(path, 0o700) != 0 && errno != EEXIST {
                let code = errno
                throw LMDBError(
                    code: .init(rawValue: code),
                    message: "cannot create the store directory: \(describe(errno: code))", context: path)
            }
            return Preflight()
        }
        guard (directoryInfo.st_mode & S_IFMT) == S_IFDIR else {
            throw LMDBError(
                code: .notAnEnvironment, message: "not a directory (a store is a directory holding data.mdb)",
                context: path)
        }
        var result = Preflight()
        let lockPath = path + "/lock.mdb"
        var lockInfo = stat()
        if lstat(lockPath, &lockInfo) == 0 {
            try requireRegular(lockInfo, lockPath)
        }
        let dataPath = path + "/data.mdb"
        var dataInfo = stat()
        if lstat(dataPath, &dataInfo) != 0 {
            let code = errno
            if code == ENOENT {
                if readOnly {
                    throw LMDBError(code: .noSuchFile, message: "the store has no data file", context: dataPath)
                }
                return result
            }
            throw LMDBError(code: .init(rawValue: code), message: describe(errno: code), context: dataPath)
        }
        try requireRegular(dataInfo, dataPath)
        result.identity = Environment.FileIdentity(device: UInt64(dataInfo.st_dev), inode: UInt64(dataInfo.st_ino))
        let fileSize = Int(dataInfo.st_size)
        if fileSize == 0 {
            if readOnly {
                throw LMDBError(
                    code: .notAnEnvironment,
                    message: "the data file is empty (0 bytes): the store was never created, or is being created",
                    context: dataPath)
            }
            return result
        }
        let meta = try readNewestMeta(dataPath, fileSize: fileSize)
        result.storedMapSize = meta.mapSize
        result.requiredSize = meta.requiredSize
        // The size was read before the meta page: a commit of another process in between can make the meta page
        // newer than the size. The file only grows, so its size read after the meta page is the one to judge by.
        var sizeAfterMeta = fileSize
        if fileSize < meta.requiredSize, lstat(dataPath, &dataInfo) == 0 { sizeAfterMeta = Int(dataInfo.st_size) }
        if sizeAfterMeta < meta.requiredSize {
            throw LMDBError(
                code: .truncatedDataFile,
                message:
                    "the data file is truncated: \(sizeAfterMeta) bytes, but its meta page needs \(meta.requiredSize)"
                    + " (\(meta.lastPage + 1) pages of \(meta.pageSize) bytes)",
                context: dataPath)
        }
        return result
    }

    private static func requireRegular(_ info: stat, _ path: String) throws(LMDBError) {
        let kind = info.st_mode & S_IFMT
        if kind == S_IFLNK {
            throw LMDBError(code: .unsafeFile, message: "refusing a symbolic link as a store file", context: path)
        }
        guard kind == S_IFREG else {
            throw LMDBError(
                code: .unsafeFile, message: "refusing a store file that is not a regular file", context: path)
        }
    }

    struct Meta {
        var pageSize: Int
        var mapSize: Int
        var lastPage: Int
        var transactionID: UInt64
        var requiredSize: Int { (lastPage + 1) * pageSize }
    }

    /// Reads both meta pages (page 0 and page 1) and returns the one with the newer transaction.
    static func readNewestMeta(_ dataPath: String, fileSize: Int) throws(LMDBError) -> Meta {
        let fd = Glibc.open(dataPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else {
            let code = errno
            throw LMDBError(code: .init(rawValue: code), message: describe(errno: code), context: dataPath)
        }
        defer { close(fd) }
        let first = try readMeta(fd: fd, offset: 0, dataPath: dataPath)
        guard let first else {
            throw LMDBError(
                code: .notAnEnvironment, message: "not an LMDB data file (no LMDB meta page at the start)",
                context: dataPath)
        }
        guard first.pageSize >= 512, first.pageSize <= 65536, first.pageSize & (first.pageSize - 1) == 0 else {
            throw LMDBError(
                code: .notAnEnvironment, message: "not an LMDB data file (page size \(first.pageSize))",
                context: dataPath)
        }
        if fileSize < 2 * first.pageSize {
            throw LMDBError(
                code: .truncatedDataFile,
                message: "the data file is truncated: \(fileSize) bytes, shorter than its two meta pages",
                context: dataPath)
        }
        guard let second = try readMeta(fd: fd, offset: first.pageSize, dataPath: dataPath) else {
            return first
        }
        return second.transactionID > first.transactionID ? second : first
    }

    // Offsets in a meta page on 64-bit builds: a 16-byte page header, then MDB_meta (magic, version, address,
    // mapsize, two 48-byte MDB_db records whose first field holds the page size, last page, transaction id).
    private static func readMeta(fd: Int32, offset: Int, dataPath: String) throws(LMDBError) -> Meta? {
        var buffer = [UInt8](repeating: 0, count: 152)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 152, off_t(offset)) }
        if count < 0 {
            let code = errno
            throw LMDBError(code: .init(rawValue: code), message: describe(errno: code), context: dataPath)
        }
        guard count == 152 else { return nil }
        func u32(_ at: Int) -> UInt32 {
            buffer.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt32.self) }
        }
        func u64(_ at: Int) -> UInt64 {
            buffer.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt64.self) }
        }
        guard u32(16) == magic else { return nil }
        guard u32(20) == dataVersion else {
            throw LMDBError(
                code: .versionMismatch, message: "LMDB data format version \(u32(20)) is not supported",
                context: dataPath)
        }
        let lastPage = u64(136)
        let mapSize = u64(32)
        guard lastPage < UInt64(Int.max / 65536), mapSize < UInt64(Int.max) else {
            throw LMDBError(
                code: .corrupted, message: "the meta page holds impossible sizes", context: dataPath)
        }
        return Meta(pageSize: Int(u32(40)), mapSize: Int(mapSize), lastPage: Int(lastPage), transactionID: u64(144))
    }
}

func describe(errno code: Int32) -> String {
    String(cString: strerror(code))
}
