import CLMDB
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// An open LMDB environment: one store directory holding `data.mdb` and `lock.mdb`.
///
/// There is at most one `Environment` per data file in a process (LMDB's caveat: closing a second handle on the
/// same file would release the first one's locks). ``open(path:options:)`` returns the environment already open
/// for that file, or throws ``LMDBError/Code/alreadyOpen`` when the options cannot be shared.
///
/// ```swift
/// let env = try Environment.open(path: "app.store")
/// let users = try env.openDatabase("users")
/// try env.write { txn in try txn.put(Array("alice".utf8), Array("admin".utf8), in: users) }
/// let role = try env.read { txn in try txn.get(Array("alice".utf8), in: users).map { Array($0) } }
/// ```
///
/// Transactions are synchronous, non-escaping closures; they never cross an `await` or a thread. The map grows by
/// itself when a write fills it (the write closure is run again, so it must not have effects outside the
/// transaction). The environment closes when the last reference to it goes away.
public final class Environment: @unchecked Sendable {
    // @unchecked Sendable: the MDB_env pointer is used only through LMDB calls that are thread-safe with MDB_NOTLS;
    // `gate` (its own pthread mutex) orders map resizes against transactions, and `handles` serialises handle
    // opening (its own lock) and keeps the published handles behind a lock (`Locked`).

    /// How commits reach the disk.
    public enum SyncMode: Sendable, Equatable {
        /// Flush data and meta page on every commit (LMDB's default): a committed transaction survives a power loss.
        case durable
        /// `MDB_NOMETASYNC`: skip the meta page flush; the last transaction may be lost on a crash, never corrupted.
        case noMetaSync
        /// `MDB_NOSYNC`: leave flushing to the OS. For tests and bulk loads only.
        case noSync
    }

    /// Options for opening an environment.
    public struct Options: Sendable, Equatable {
        /// The initial map size in bytes. The map grows by itself when a write fills it.
        public var mapSize: Int = 8 << 20
        /// The largest the map may grow to by itself.
        public var maximumMapSize: Int = 1 << 40
        /// Concurrent read transactions across all processes.
        public var maxReaders: Int = 126
        /// Named databases in the environment.
        public var maxDatabases: Int = 256
        /// How commits reach the disk.
        public var sync: SyncMode = .durable
        /// Open with `MDB_RDONLY`: no writes, and the directory is not created.
        public var readOnly: Bool = false

        /// The default options: 8 MiB initial map, durable, read-write.
        public init() {}

        /// Options with the given fields changed.
        public init(
            mapSize: Int = 8 << 20, maximumMapSize: Int = 1 << 40, maxReaders: Int = 126, maxDatabases: Int = 256,
            sync: SyncMode = .durable, readOnly: Bool = false
        ) {
            self.mapSize = mapSize
            self.maximumMapSize = maximumMapSize
            self.maxReaders = maxReaders
            self.maxDatabases = maxDatabases
            self.sync = sync
            self.readOnly = readOnly
        }
    }

    /// The store directory.
    public let path: String
    /// The options the environment was opened with.
    public let options: Options

    @usableFromInline let handle: OpaquePointer
    let identity: FileIdentity
    let gate = TransactionGate()
    /// Makes writers of several processes wait in the kernel rather than on LMDB's mutex (nil when read-only).
    let writerLock: WriterLock?
    let handles = HandleTable()
    /// The process that opened the environment, as a count of forks: a forked child must not use it (lmdb.h).
    let forkGeneration: Int
    /// A fault to inject (tests): the write-path call that brings the count to zero fails with the code.
    let faultPlan = Locked<(remaining: Int, code: Int32)?>(nil)
    /// Whether a fault plan may be set: write-path calls look here first and take no lock when none is.
    let faultArmed = Atomic<Bool>(false)
    /// LMDB's largest key (and DUPSORT value) in bytes: 511 with the default build.
    public let maxKeySize: Int
    /// Set when LMDB said `MDB_PANIC`: a write of a meta page failed, and LMDB refuses every later transaction on
    /// this handle. Every later use throws ``failedError(_:)`` without touching the handle.
    let failed = Atomic<Bool>(false)
    /// Set (inside ``TransactionGate/exclusively(_:_:)``) once the failed handle is closed, so that the store can
    /// be opened afresh in the process.
    let handleClosed = Atomic<Bool>(false)
    /// The environment's information when the handle closed (nothing has committed through it since).
    let infoAtClose = Locked<EnvironmentInfo?>(nil)

    private init(
        handle: OpaquePointer, path: String, options: Options, identity: FileIdentity, writerLock: WriterLock?
    ) {
        self.writerLock = writerLock
        self.handle = handle
        self.path = path
        self.options = options
        self.identity = identity
        self.maxKeySize = Int(mdb_env_get_maxkeysize(handle))
        self.forkGeneration = ForkDetector.generation
    }

    deinit {
        // A forked child leaves an inherited environment alone: LMDB's state in it belongs to the parent.
        if !isInheritedThroughFork && !handleClosed.load(ordering: .sequentiallyConsistent) {
            for idle in gate.drainIdleReads() { mdb_txn_abort(idle) }
            mdb_env_close(handle)
        }
        Environment.registry.withLock { entries in
            if let entry = entries[identity], entry.token == ObjectIdentifier(self) { entries[identity] = nil }
        }
    }

    /// The version of the LMDB library linked, as LMDB states it (`"LMDB 0.9.24: (July 24, 2019)"`).
    public static var lmdbVersion: String {
        guard let text = mdb_version(nil, nil, nil) else { return "LMDB (unknown version)" }
        return String(cString: text)
    }

    /// The data file inside the store directory.
    public var dataFilePath: String { path + "/data.mdb" }
    /// The lock file inside the store directory.
    public var lockFilePath: String { path + "/lock.mdb" }

    // MARK: - Opening

    struct FileIdentity: Hashable {
        var device: UInt64
        var inode: UInt64
    }

    struct RegistryEntry {
        weak var environment: Environment?
        var token: ObjectIdentifier
    }

    static let registry = Locked<[FileIdentity: RegistryEntry]>([:])

    /// Installed with the first environment: at a normal exit, the idle read transactions of the environments still
    /// open give their reader slots back (an exit runs no deinit), so that no slot of a process that has gone
    /// stays in the reader table. A killed process leaves its slots for `mdb_reader_check`, as any reader does.
    private static let exitHook: Void = {
        atexit {
            let open = Environment.registry.withLock { $0.values.compactMap(\.environment) }
            for environment in open where !environment.isInheritedThroughFork {
                for idle in environment.gate.drainIdleReads() { mdb_txn_abort(idle) }
            }
        }
    }()

    /// Opens (or creates) the environment in the directory at `path`.
    ///
    /// Before LMDB touches the files, the data file is checked: a symbolic link or a non-regular data or lock
    /// file is refused, as is an empty file, a file that is not LMDB's, and a data file shorter than its own meta
    /// page says (LMDB itself would die of SIGBUS on it). A new directory is created 0700 and its files 0600.
    ///
    /// - Parameters:
    ///   - path: The store directory.
    ///   - options: Map size, readers, databases, sync mode, read-only.
    /// - Returns: The environment for that file; the one already open in this process if there is one.
    /// - Throws: ``LMDBError`` naming the file and what is wrong with it.
    public static func open(path: String, options: Options = Options()) throws(LMDBError) -> Environment {
        while true {
            // An environment looked up here must not be released inside the lock: its deinit takes the lock too.
            var keepAlive: Environment?
            let result: Result<Environment, LMDBError>? = registry.withLock { entries in
                do throws(LMDBError) {
                    let preflight = try Preflight.run(path: path, readOnly: options.readOnly)
                    if let identity = preflight.identity, let entry = entries[identity] {
                        guard let existing = entry.environment else { return nil }  // closing right now: wait
                        if existing.failed.load(ordering: .sequentiallyConsistent) {
                            // Its handle is closed once no transaction of the process is open: then the entry is
                            // gone. Until then the store cannot be opened afresh here.
                            throw existing.failedError("open the store again")
                        }
                        if existing.isInheritedThroughFork {
                            // This process is a forked child: open the file afresh (lmdb.h forbids using the parent's).
                            let environment = try openNew(path: path, options: options, preflight: preflight)
                            entries[environment.identity] = RegistryEntry(
                                environment: environment, token: ObjectIdentifier(environment))
                            keepAlive = existing
                            return .success(environment)
                        }
                        keepAlive = existing
                        if existing.options.readOnly && !options.readOnly {
                            throw LMDBError(
                                code: .alreadyOpen,
                                message: "the environment is already open read-only in this process",
                                context: path)
                        }
                        return .success(existing)
                    }
                    let environment = try openNew(path: path, options: options, preflight: preflight)
                    entries[environment.identity] = RegistryEntry(
                        environment: environment, token: ObjectIdentifier(environment))
                    return .success(environment)
                } catch {
                    return .failure(error)
                }
            }
            withExtendedLifetime(keepAlive) {}
            if let result { return try result.get() }
            sched_yield()
        }
    }

    private static func openNew(
        path: String, options: Options, preflight: Preflight
    ) throws(LMDBError)
        -> Environment
    {
        if !options.readOnly { try Preflight.allocateLockFile(path + "/lock.mdb", maxReaders: options.maxReaders) }
        Environment.exitHook
        var envPointer: OpaquePointer?
        try check(mdb_env_create(&envPointer), "mdb_env_create for \(path)")
        guard let handle = envPointer else {
            throw LMDBError(code: .outOfMemory, message: "mdb_env_create returned no environment", context: path)
        }
        do throws(LMDBError) {
            try check(mdb_env_set_maxreaders(handle, UInt32(options.maxReaders)), "mdb_env_set_maxreaders")
            try check(mdb_env_set_maxdbs(handle, MDB_dbi(options.maxDatabases)), "mdb_env_set_maxdbs")
            let mapSize = max(options.mapSize, preflight.storedMapSize ?? 0, preflight.requiredSize ?? 0)
            try check(mdb_env_set_mapsize(handle, mapSize), "mdb_env_set_mapsize(\(mapSize))")
            var flags = UInt32(MDB_NOTLS)
            switch options.sync {
            case .durable: break
            case .noMetaSync: flags |= UInt32(MDB_NOMETASYNC)
            case .noSync: flags |= UInt32(MDB_NOSYNC)
            }
            if options.readOnly { flags |= UInt32(MDB_RDONLY) }
            try check(mdb_env_open(handle, path, flags, 0o600), "mdb_env_open at \(path)")
            var fd: Int32 = -1
            try check(mdb_env_get_fd(handle, &fd), "mdb_env_get_fd")
            var info = stat()
            guard fstat(fd, &info) == 0 else {
                throw LMDBError(code: .init(rawValue: errno), message: "fstat of the data file failed", context: path)
            }
            let identity = FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
            let writerLock = options.readOnly ? nil : try WriterLock(dataFile: path + "/data.mdb")
            let environment = Environment(
                handle: handle, path: path, options: options, identity: identity, writerLock: writerLock)
            _ = environment.checkReaders()
            return environment
        } catch {
            mdb_env_close(handle)
            if !options.readOnly && preflight.identity == nil { abandonCreation(path + "/data.mdb") }
            throw error
        }
    }

    /// After a creation failed (a write of the meta pages failed or was short, say): a data file left shorter than
    /// two meta pages holds nothing (LMDB's first commit writes past them) and would be refused at every later open,
    /// so it is emptied, and the next open creates the store afresh. A file another process has since initialised
    /// is at least that long and is left alone.
    private static func abandonCreation(_ dataPath: String) {
        let fd = Glibc.open(dataPath, O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return }  // no data file was made
        defer { close(fd) }
        var info = stat()
        let metaPages = 2 * Int(sysconf(Int32(_SC_PAGESIZE)))
        if fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, Int(info.st_size) < metaPages {
            // Best effort: if even this fails, the next open names the file as truncated.
            _ = ftruncate(fd, 0)
        }
    }

    // MARK: - Fault injection

    /// For reliability tests: makes the `calls`-th write-path LMDB call from now (transaction begin, put, delete,
    /// drop, commit) fail with `code` (an `MDB_*` code or an errno such as `EIO`), once.
    package func injectFault(afterCalls calls: Int, code: Int32) {
        faultPlan.withLock { $0 = (calls, code) }
        faultArmed.store(true, ordering: .sequentiallyConsistent)
    }

    /// Removes an injected fault that has not fired.
    package func clearInjectedFault() {
        faultPlan.withLock { $0 = nil }
    }

    /// Whether a fault is still waiting to fire.
    package var hasPendingFault: Bool { faultPlan.withLock { $0 != nil } }

    /// Counts one write-path call; returns the injected code when it is this call's turn.
    @usableFromInline
    func injectedFault() -> Int32? {
        // Armed only by tests (and never disarmed: a plan that fired is simply empty).
        guard faultArmed.load(ordering: .relaxed) else { return nil }
        return faultPlan.withLock { plan -> Int32? in
            guard var current = plan else { return nil }
            current.remaining -= 1
            if current.remaining <= 0 {
                plan = nil
                return current.code
            }
            plan = current
            return nil
        }
    }

    // MARK: - Maintenance

    /// Clears reader slots left by processes that died (`mdb_reader_check`).
    /// - Returns: The number of stale slots cleared.
    @discardableResult
    public func checkReaders() -> Int {
        guard !handleClosed.load(ordering: .sequentiallyConsistent) else { return 0 }
        var dead: Int32 = 0
        _ = mdb_reader_check(handle, &dead)
        return Int(dead)
    }

    /// Whether readers register in the lock file's reader table. A read-only environment on a read-only file
    /// system has no lock file LMDB can use, and LMDB then reads without one: nothing tells a writer elsewhere (if
    /// one could write at all) which pages are still being read, and ``readers()`` is empty.
    public var registersReaders: Bool {
        guard options.readOnly else { return true }
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return true }
        return info.f_flag & UInt(ST_RDONLY) == 0
    }

    /// One slot of the reader table (`mdb_reader_list`, `mdb_stat -r`).
    public struct Reader: Sendable, Equatable {
        /// The process holding the slot.
        public var processID: Int32
        /// The thread (as LMDB prints it, in hex).
        public var thread: String
        /// The snapshot the reader holds, or nil when the slot holds none now.
        public var transactionID: Int?
    }

    /// The reader table's slots in use.
    public func readers() -> [Reader] {
        final class Lines { var text = "" }
        let lines = Lines()
        guard !handleClosed.load(ordering: .sequentiallyConsistent) else { return [] }
        _ = mdb_reader_list(
            handle,
            { message, context in
                guard let message, let context else { return 0 }
                Unmanaged<Lines>.fromOpaque(context).takeUnretainedValue().text += String(cString: message)
                return 0
            }, Unmanaged.passUnretained(lines).toOpaque())
        // "    pid     thread     txnid" then one line per slot: pid, thread (hex), txnid or "-".
        return lines.text.split(separator: "\n").dropFirst().compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 3, let pid = Int32(fields[0]) else { return nil }
            return Reader(processID: pid, thread: String(fields[1]), transactionID: Int(fields[2]))
        }
    }

    /// Flushes the data buffers to disk (`mdb_env_sync`), for the faster sync modes.
    public func sync(force: Bool = true) throws(LMDBError) {
        guard !options.readOnly else { return }
        try gate.withTransaction(write: false) { () throws(LMDBError) in
            if failed.load(ordering: .sequentiallyConsistent) { throw failedError("mdb_env_sync at \(path)") }
            try check(mdb_env_sync(handle, force ? 1 : 0), "mdb_env_sync at \(path)")
        }
    }

    /// Writes a consistent copy of the environment into the directory `destination` (created 0700 if missing;
    /// it must not already hold a data file). The copy is taken from one read snapshot while writers go on.
    ///
    /// The copy is written to `data.mdb.partial` and flushed, then linked as `data.mdb` (never replacing one) and
    /// the directory flushed: a crash or a power loss at any moment leaves no `data.mdb` or a whole one, never a
    /// data file with pages missing. A `data.mdb.partial` left by a copy that did not finish is replaced.
    ///
    /// - Parameters:
    ///   - destination: A directory for the copy's `data.mdb`.
    ///   - compact: Omit free pages and renumber the rest (`MDB_CP_COMPACT`).
    public func copy(to destination: String, compact: Bool = true) throws(LMDBError) {
        if mkdir(destination, 0o700) != 0 && errno != EEXIST {
            throw LMDBError(
                code: .init(rawValue: errno), message: "cannot create the backup directory", context: destination)
        }
        let target = destination + "/data.mdb"
        let partial = target + ".partial"
        var info = stat()
        if lstat(target, &info) == 0 {
            throw LMDBError(
                code: .invalidArgument, message: "the backup directory already holds a data.mdb",
                context: destination)
        }
        func failure(_ what: String, _ file: String) -> LMDBError {
            let code = errno
            return LMDBError(code: .init(rawValue: code), message: "\(what): \(describe(errno: code))", context: file)
        }
        if unlink(partial) != 0 && errno != ENOENT { throw failure("cannot remove an unfinished backup", partial) }
        // The data file is made here, 0600 whatever the umask (a store is private: LMDB's own copy would make it
        // 0666 less the umask), exclusively, and written through its descriptor.
        let fd = Glibc.open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw failure("cannot create the backup's data file", partial) }
        do throws(LMDBError) {
            if fchmod(fd, 0o600) != 0 { throw failure("cannot make the backup private", partial) }
            try gate.withTransaction(write: false) { () throws(LMDBError) in
                if failed.load(ordering: .sequentiallyConsistent) { throw failedError("mdb_env_copyfd2 to \(partial)") }
                try check(
                    mdb_env_copyfd2(handle, fd, compact ? UInt32(MDB_CP_COMPACT) : 0), "mdb_env_copyfd2 to \(partial)")
            }
            if fsync(fd) != 0 { throw failure("cannot flush the backup", partial) }
        } catch {
            close(fd)
            unlink(partial)
            throw error
        }
        if close(fd) != 0 {
            let error = failure("cannot finish the backup", partial)
            unlink(partial)
            throw error
        }
        // A link, not a rename: it fails rather than replace a data.mdb another process put there meanwhile.
        if link(partial, target) != 0 {
            let error = failure("cannot name the finished backup data.mdb", target)
            unlink(partial)
            throw error
        }
        if unlink(partial) != 0 { throw failure("cannot remove the backup's temporary name", partial) }
        let directory = Glibc.open(destination, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { throw failure("cannot open the backup directory to flush it", destination) }
        defer { close(directory) }
        if fsync(directory) != 0 { throw failure("cannot flush the backup directory", destination) }
    }
}

extension Environment {
    /// The error of every use of an environment after LMDB's `MDB_PANIC`.
    func failedError(_ what: String) -> LMDBError {
        LMDBError(
            code: .panic,
            message: "a write to the store's file failed earlier (the disk reported an error, see the error of that"
                + " commit), and LMDB stopped using the store in this process; nothing after the last commit that"
                + " succeeded was written. Close the store and open it again to go on",
            context: what)
    }

    /// After `MDB_PANIC`: marks the environment failed and, once no transaction of the process is open (each fails
    /// at its next step), closes its handle and leaves the registry, so that the store can be opened again in the
    /// process (two handles on one file must never be open at once: closing one drops the process's locks). When
    /// the calling thread itself holds a transaction, the handle closes with the environment instead.
    func retireAfterPanic(_ what: String) -> LMDBError {
        failed.store(true, ordering: .sequentiallyConsistent)
        if !gate.callerHoldsTransaction() {
            do {
                try gate.exclusively("close the failed environment") { () throws(LMDBError) in
                    guard !handleClosed.load(ordering: .sequentiallyConsistent) else { return }
                    infoAtClose.withLock { $0 = unguardedInfo() }
                    mdb_env_close(handle)
                    handleClosed.store(true, ordering: .sequentiallyConsistent)
                    Environment.registry.withLock { entries in
                        if let entry = entries[identity], entry.token == ObjectIdentifier(self) {
                            entries[identity] = nil
                        }
                    }
                }
            } catch {
                return error
            }
        }
        return failedError(what)
    }

    /// Whether this process is a child forked after the environment was opened: lmdb.h forbids using it here.
    var isInheritedThroughFork: Bool { forkGeneration != ForkDetector.generation }

    /// Refuses use of the environment in a forked child.
    func checkNotForked(_ what: @autoclosure () -> String) throws(LMDBError) {
        guard isInheritedThroughFork else { return }
        throw LMDBError(
            code: .misuse,
            message: "the environment was opened before this process was forked; LMDB cannot be used across fork():"
                + " open the store again in the child", context: what())
    }
}

/// Counts the forks this process descends from, so that an environment opened before a fork is recognised in the
/// child without a system call per transaction.
enum ForkDetector {
    private static let forks = Atomic<Int>(0)
    private static let installed: Bool = {
        pthread_atfork(nil, nil) { ForkDetector.forks.add(1, ordering: .relaxed) }
        return true
    }()

    /// The number of forks since the process started (0 in the original process).
    static var generation: Int {
        _ = installed
        return forks.load(ordering: .relaxed)
    }
}
