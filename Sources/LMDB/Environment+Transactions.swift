import CLMDB

#if canImport(Glibc)
import Glibc
#endif

extension Environment {
    /// Runs `body` in a read transaction: one consistent snapshot, ended when `body` returns.
    ///
    /// Bytes handed out by the transaction are valid only inside `body`. Keep read transactions short: a long one
    /// keeps old pages alive and makes the file grow.
    ///
    /// - Throws: What `body` throws, or an ``LMDBError`` from LMDB.
    public func read<R>(_ body: (ReadTransaction) throws -> R) throws -> R {
        // The result goes into a slot of its own and the attempt returns a plain step: a generic `Outcome<R>` was
        // copied and destroyed through its value witnesses, ~300 instructions per read. The slot is allocated, not
        // a temporary allocation: that one, generic over the result, looked up `Result<R, Error>`'s metadata on every
        // read (~300 instructions, more than a `malloc` and a `free`).
        let result = UnsafeMutablePointer<R>.allocate(capacity: 1)
        defer { result.deallocate() }
        do {
            var triedReaderCheck = false
            while true {
                let step: Step = try gate.withRead { idle, keep in
                    let generation = handles.generation.load(ordering: .sequentiallyConsistent)
                    let pointer: OpaquePointer
                    switch try beginRead(renewing: idle, triedReaderCheck: triedReaderCheck) {
                    case .began(let began): pointer = began
                    case .retry(let reason): return reason.step
                    }
                    let transaction = ReadTransaction(environment: self, pointer: pointer, beginGeneration: generation)
                    do {
                        result.initialize(to: try body(transaction))
                    } catch {
                        mdb_txn_abort(pointer)
                        transaction.end(committed: false)
                        if transaction.needsRetry { return .handleRetry }
                        throw error
                    }
                    if transaction.needsRetry {
                        result.deinitialize(count: 1)
                        mdb_txn_abort(pointer)
                        transaction.end(committed: false)
                        return .handleRetry
                    }
                    // A read that opened no database handle is reset and kept for the next read to renew.
                    if transaction.opened.isEmpty && !transaction.holdsOpenLock {
                        mdb_txn_reset(pointer)
                        transaction.end(committed: true)
                        keep = pointer
                        return .done
                    }
                    // Commit (not abort) keeps database handles opened in this transaction.
                    let rc = mdb_txn_commit(pointer)
                    transaction.end(committed: rc == MDB_SUCCESS)
                    if rc != MDB_SUCCESS {
                        result.deinitialize(count: 1)
                        try check(rc, "mdb_txn_commit (read) at \(path)")
                    }
                    return .done
                }
                switch step {
                case .done: return result.move()
                case .mapResized: try adoptResizedMap()
                case .readersFull:
                    triedReaderCheck = true
                    checkReaders()
                case .mapFull, .handleRetry: continue
                case .panicked: throw retireAfterPanic("mdb_txn_begin (read) at \(path)")
                }
            }
        }
    }

    /// Runs `body` in a write transaction and commits it when `body` returns; aborts it when `body` throws.
    ///
    /// Write transactions are serialised across threads and processes. When the map is full the transaction is
    /// aborted, the map grows and `body` runs again: it must not have effects outside the transaction, or they
    /// must be safe to repeat.
    ///
    /// - Throws: What `body` throws, or an ``LMDBError``; ``LMDBError/Code/readOnly`` in a read-only environment,
    ///   ``LMDBError/Code/misuse`` for a write nested in a write on the same thread.
    public func write<R>(_ body: (WriteTransaction) throws -> R) throws -> R {
        guard !options.readOnly, let writerLock else {
            throw LMDBError(code: .readOnly, message: "the environment was opened read-only", context: path)
        }
        if gate.callerIsWriting() {
            throw LMDBError(
                code: .misuse, message: "a write transaction is already open on this thread", context: path)
        }
        var triedReaderCheck = false
        var growths = 0
        while true {
            // Through the writer lock: one process at a time waits for LMDB's writer mutex (see `WriterLock`).
            let outcome: Outcome<R> = try gate.withTransaction(write: true) {
                try writerLock.withLock("a write transaction at \(path)") { () throws -> Outcome<R> in
                    let generation = handles.generation.load(ordering: .sequentiallyConsistent)
                    let pointer: OpaquePointer
                    switch try begin(write: true, triedReaderCheck: triedReaderCheck) {
                    case .began(let began): pointer = began
                    case .retry(let reason): return reason.outcome()
                    }
                    let transaction = WriteTransaction(environment: self, pointer: pointer, beginGeneration: generation)
                    let result: R
                    do {
                        result = try body(transaction)
                    } catch {
                        mdb_txn_abort(pointer)
                        transaction.end(committed: false)
                        if transaction.needsRetry { return .handleRetry }
                        if transaction.sawMapFull || (error as? LMDBError)?.code == .mapFull { return .mapFull }
                        if let error = error as? LMDBError { throw spaceError(for: error) }
                        throw error
                    }
                    if transaction.needsRetry {
                        mdb_txn_abort(pointer)
                        transaction.end(committed: false)
                        return .handleRetry
                    }
                    let commit: Int32
                    if let injected = injectedFault() {
                        mdb_txn_abort(pointer)
                        commit = injected
                    } else {
                        commit = mdb_txn_commit(pointer)
                    }
                    transaction.end(committed: commit == MDB_SUCCESS)
                    if commit == MDB_MAP_FULL { return .mapFull }
                    if commit != MDB_SUCCESS {
                        var error = LMDBError(lmdbCode: commit, context: "mdb_txn_commit at \(path)")
                        if stoppedAfterFailedCommit() {
                            error.message +=
                                "; nothing was committed, and LMDB stopped using the store in this"
                                + " process (a meta page could not be written): close the store and open it again"
                        }
                        throw spaceError(for: error)
                    }
                    return .done(result)
                }
            }
            switch outcome {
            case .done(let result): return result
            case .mapResized: try adoptResizedMap()
            case .readersFull:
                triedReaderCheck = true
                checkReaders()
            case .handleRetry: continue
            case .panicked: throw retireAfterPanic("mdb_txn_begin (write) at \(path)")
            case .mapFull:
                growths += 1
                try growMap(attempt: growths)
            }
        }
    }

    /// After a commit failed: whether LMDB has stopped using the environment (it does when a meta page's write
    /// fails), found by beginning a read; marks the environment failed when it has (it is retired at its next use,
    /// outside this transaction).
    func stoppedAfterFailedCommit() -> Bool {
        var probe: OpaquePointer?
        let rc = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &probe)
        if let probe { mdb_txn_abort(probe) }
        guard rc == MDB_PANIC else { return false }
        failed.store(true, ordering: .sequentiallyConsistent)
        return true
    }

    /// A write that failed with `EIO` or `ENOSPC` while the store's device is (nearly) full: LMDB reports a short
    /// write as `EIO`, which says nothing of the cause. Anything else is returned as it is.
    func spaceError(for error: LMDBError) -> LMDBError {
        guard error.code == .ioError || error.code == .noSpace, let free = freeSpace(), free < 1 << 20 else {
            return error
        }
        return LMDBError(
            code: .noSpace,
            message: "no space left on the device holding the store (\(free) bytes free; LMDB reported"
                + " \(error.code)): nothing was committed; free some space and try again",
            context: error.context)
    }

    /// The bytes an unprivileged process may still write on the store's file system.
    func freeSpace() -> Int? {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return nil }
        return Int(info.f_bavail) * Int(info.f_bsize)
    }

    enum Begin {
        case began(OpaquePointer)
        case retry(RetryReason)
    }

    enum RetryReason {
        case mapResized, readersFull, mapFull
        /// LMDB said `MDB_PANIC` (or did earlier): the caller retires the environment and throws.
        case panicked

        func outcome<R>() -> Outcome<R> {
            switch self {
            case .mapResized: .mapResized
            case .readersFull: .readersFull
            case .mapFull: .mapFull
            case .panicked: .panicked
            }
        }

        var step: Step {
            switch self {
            case .mapResized: .mapResized
            case .readersFull: .readersFull
            case .mapFull: .mapFull
            case .panicked: .panicked
            }
        }
    }

    /// Begins a transaction, or says why the caller should retry after adopting the map size, clearing stale
    /// readers or growing the map.
    func begin(write: Bool, triedReaderCheck: Bool) throws(LMDBError) -> Begin {
        // Built only for an error: a begin is on every read's path.
        func what() -> String { write ? "mdb_txn_begin (write) at \(path)" : "mdb_txn_begin (read) at \(path)" }
        try checkNotForked(what())
        if failed.load(ordering: .relaxed) { return .retry(.panicked) }
        if write, let injected = injectedFault() {
            if injected == MDB_MAP_FULL { return .retry(.mapFull) }
            try check(injected, what())
        }
        var pointer: OpaquePointer?
        var rc = mdb_txn_begin(handle, nil, write ? 0 : UInt32(MDB_RDONLY), &pointer)
        // LMDB 0.9 begins a read by taking the newest transaction number, then copying the meta page that number
        // selects (one of two, by parity). A writer in another process that commits twice in between has already
        // overwritten that page with a newer one: the read sees a newer snapshot than its number, and the next
        // read can then see an older one (found by MultiProcessTests: a counter read 192, then 191). libmdbx
        // checks and retries here; so does this layer: while the newest meta is two or more commits past the
        // read's number, begin again. The window is a few instructions wide, so a retry is rare and the next
        // attempt almost always clean; after 64 the read goes on (its snapshot is still consistent).
        var attempts = 0
        while rc == MDB_SUCCESS, !write, let began = pointer, attempts < 64, sawNewerMeta(than: began) {
            mdb_txn_abort(began)
            pointer = nil
            attempts += 1
            rc = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &pointer)
        }
        if rc == MDB_MAP_RESIZED { return .retry(.mapResized) }
        if rc == MDB_READERS_FULL && !triedReaderCheck { return .retry(.readersFull) }
        if rc == MDB_PANIC { return .retry(.panicked) }
        try check(rc, what())
        guard let pointer else {
            throw LMDBError(code: .badTransaction, message: "mdb_txn_begin returned no transaction", context: what())
        }
        return .began(pointer)
    }

    /// Begins a read: by renewing `idle` (a reset read transaction) when there is one, else as ``begin(write:triedReaderCheck:)``.
    func beginRead(renewing idle: OpaquePointer?, triedReaderCheck: Bool) throws(LMDBError) -> Begin {
        if let idle {
            try checkNotForked("mdb_txn_renew at \(path)")
            if failed.load(ordering: .relaxed) {
                mdb_txn_abort(idle)
                return .retry(.panicked)
            }
            var rc = mdb_txn_renew(idle)
            // The same newer-meta race as a begin (see there).
            var attempts = 0
            while rc == MDB_SUCCESS, attempts < 64, sawNewerMeta(than: idle) {
                mdb_txn_reset(idle)
                attempts += 1
                rc = mdb_txn_renew(idle)
            }
            if rc == MDB_SUCCESS { return .began(idle) }
            // A resized map, say: a fresh begin reports it as a begin would.
            mdb_txn_abort(idle)
        }
        return try begin(write: false, triedReaderCheck: triedReaderCheck)
    }

    /// Whether a meta page two or more commits newer than `transaction`'s number exists (so the page its number
    /// selected may have been overwritten before it was copied).
    private func sawNewerMeta(than transaction: OpaquePointer) -> Bool {
        var info = MDB_envinfo()
        guard mdb_env_info(handle, &info) == MDB_SUCCESS else { return false }
        return UInt64(info.me_last_txnid) >= UInt64(mdb_txn_id(transaction)) &+ 2
    }

    /// Adopts the map size another process set (`MDB_MAP_RESIZED`).
    func adoptResizedMap() throws {
        try gate.exclusively("adopt another process's map size") { () throws(LMDBError) in
            if failed.load(ordering: .sequentiallyConsistent) { throw failedError("mdb_env_set_mapsize at \(path)") }
            try check(mdb_env_set_mapsize(handle, 0), "mdb_env_set_mapsize(0) after MDB_MAP_RESIZED at \(path)")
        }
    }

    /// Grows the map after `MDB_MAP_FULL`: doubling up to 1 GiB, then by 1 GiB, up to the maximum map size.
    func growMap(attempt: Int) throws {
        try gate.exclusively("grow the map") { () throws(LMDBError) in
            if failed.load(ordering: .sequentiallyConsistent) { throw failedError("mdb_env_set_mapsize at \(path)") }
            let current = unguardedInfo().mapSize
            let next = current < 1 << 30 ? current * 2 : current + (1 << 30)
            guard next <= options.maximumMapSize, attempt < 64 else {
                throw LMDBError(
                    code: .mapFull,
                    message: "the map is full at \(current) bytes and may not grow past \(options.maximumMapSize)",
                    context: path)
            }
            try check(mdb_env_set_mapsize(handle, next), "mdb_env_set_mapsize(\(next)) at \(path)")
        }
    }

    /// The environment's current information (`mdb_env_info`).
    ///
    /// It reads the meta pages from the map, so it waits for a map resize in progress like a transaction does.
    public func info() -> EnvironmentInfo {
        gate.withTransaction(write: false) { unguardedInfo() }
    }

    /// `mdb_env_info` for callers that already keep the map from moving.
    func unguardedInfo() -> EnvironmentInfo {
        if handleClosed.load(ordering: .sequentiallyConsistent), let last = infoAtClose.withLock({ $0 }) { return last }
        var raw = MDB_envinfo()
        _ = mdb_env_info(handle, &raw)
        return EnvironmentInfo(
            mapSize: raw.me_mapsize, lastPageNumber: raw.me_last_pgno, lastTransactionID: raw.me_last_txnid,
            maxReaders: Int(raw.me_maxreaders), readersUsed: Int(raw.me_numreaders))
    }

    /// Drops the map's pages from this process's resident memory (`madvise(MADV_DONTNEED)` over the map). The pages
    /// stay in the kernel's page cache, and a later read maps them again from there (the map is of the file, shared,
    /// so nothing is lost): a long walk over the whole store, a migration's chunks, otherwise keeps every page it
    /// read resident in the process until the environment closes. Advisory: a kernel that refuses leaves the pages
    /// resident, and reads are the same either way.
    public func releaseResidentPages() {
        gate.withTransaction(write: false) {
            if handleClosed.load(ordering: .sequentiallyConsistent) { return }
            unguardedReleaseResidentPages()
        }
    }

    /// ``releaseResidentPages()`` for callers that already keep the map from moving (a transaction of theirs).
    func unguardedReleaseResidentPages() {
        // LMDB does not say where it mapped the file (`me_mapaddr` is only a fixed map's): the process's maps of the
        // data file do. An unreadable list, or a map not found, leaves the pages resident.
        guard let real = realpath(dataFilePath, nil) else { return }
        let file = String(cString: real)
        free(real)
        let descriptor = Glibc.open("/proc/self/maps", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[..<count]
        }
        close(descriptor)
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") where line.hasSuffix(" " + file) {
            let range = line.prefix { $0 != " " }.split(separator: "-")
            guard range.count == 2, let start = UInt(range[0], radix: 16), let end = UInt(range[1], radix: 16),
                end > start, let address = UnsafeMutableRawPointer(bitPattern: start)
            else { continue }
            _ = madvise(address, Int(end - start), MADV_DONTNEED)
        }
    }

    /// Statistics of the main B-tree (`mdb_env_stat`); the page size is the environment's.
    public func statistics() throws -> DatabaseStatistics {
        var raw = MDB_stat()
        try gate.withTransaction(write: false) { () throws(LMDBError) in
            if failed.load(ordering: .sequentiallyConsistent) { throw failedError("mdb_env_stat at \(path)") }
            try check(mdb_env_stat(handle, &raw), "mdb_env_stat at \(path)")
        }
        return DatabaseStatistics(raw)
    }

    /// The reader table as LMDB prints it (`mdb_reader_list`): one line per slot in use.
    public func readerTable() -> [String] {
        let lines = ReaderLines()
        guard !handleClosed.load(ordering: .sequentiallyConsistent) else { return [] }
        _ = withExtendedLifetime(lines) {
            mdb_reader_list(
                handle,
                { message, context in
                    guard let message, let context else { return 0 }
                    let box = Unmanaged<ReaderLines>.fromOpaque(context).takeUnretainedValue()
                    box.lines.append(String(cString: message).trimmingTrailingNewline())
                    return 0
                }, Unmanaged.passUnretained(lines).toOpaque())
        }
        return lines.lines
    }

    /// Opens a named database, creating it when `create` is true and the environment is writable.
    ///
    /// The handle is cached: later calls return it at once.
    ///
    /// - Parameters:
    ///   - name: The database's name, or `nil` for the main database.
    ///   - dupSort: Whether keys hold several sorted values. Must match how the database was created.
    ///   - create: Create the database when missing.
    /// - Throws: ``LMDBError/Code/databaseNotFound`` when it is missing and not created;
    ///   ``LMDBError/Code/incompatible`` when `dupSort` does not match the stored database.
    public func openDatabase(_ name: String?, dupSort: Bool = false, create: Bool = true) throws -> Database {
        if let name, let cached = handles.cached(name) {
            guard cached.isDupSort == dupSort else {
                throw LMDBError(
                    code: .incompatible, message: "database \(cached) is \(cached.isDupSort ? "" : "not ")DUPSORT",
                    context: "opening database \(cached)")
            }
            return cached
        }
        let opened =
            create && !options.readOnly
            ? try write { txn in try txn.openDatabase(name, dupSort: dupSort, create: true) }
            : try read { txn in try txn.openDatabase(name, dupSort: dupSort, create: false) }
        // The published handle, stamped with the generation that later transactions check.
        return name.flatMap { handles.cached($0) } ?? opened
    }
}

extension Environment {
    /// The published form of a handle a transaction opened and returned: stamped with the generation its commit
    /// published, so that later transactions use it without looking it up. Keep this one rather than the handle
    /// returned from inside the transaction (which still works, at the cost of a lookup per use).
    public func published(_ database: Database) -> Database {
        guard database.generation == Database.pending, let name = database.name,
            let cached = handles.cached(name), cached.dbi == database.dbi
        else { return database }
        return cached
    }
}

/// Collects the lines of `mdb_reader_list`.
private final class ReaderLines {
    var lines: [String] = []
}

/// What one attempt at a read transaction came to (its result, when done, is in the caller's slot).
enum Step {
    case done
    case mapResized
    case readersFull
    case mapFull
    /// The transaction needed a database handle published after it began.
    case handleRetry
    /// The environment failed (`MDB_PANIC`).
    case panicked
}

enum Outcome<R> {
    case done(R)
    case mapResized
    case readersFull
    case mapFull
    /// The transaction needed a database handle published after it began.
    case handleRetry
    /// The environment failed (`MDB_PANIC`).
    case panicked
}

extension String {
    func trimmingTrailingNewline() -> String {
        var copy = self
        while copy.last == "\n" { copy.removeLast() }
        return copy
    }
}
