import CLMDB

#if canImport(Glibc)
import Glibc
#endif

/// Orders map resizes against this process's transactions.
///
/// `mdb_env_set_mapsize` while any transaction of the process is open returns 0 and later segfaults (DESIGN.md,
/// platform notes). Every transaction passes through the gate; a resize closes it, waits until no transaction is
/// open, resizes, and opens it again. The gate also remembers which threads hold transactions, so that a write
/// nested in another write on the same thread (a self-deadlock in LMDB) and a resize that would wait for the
/// calling thread's own read are reported as errors instead of hanging.
final class TransactionGate: @unchecked Sendable {
    // @unchecked Sendable: every field is read and written only while `mutex` is held.
    // @exclusivity(unchecked): the mutex orders every access; the run-time checks (which only see one thread's
    // accesses) were a tenth of a small fetch's instructions.
    @exclusivity(unchecked) private var mutex = pthread_mutex_t()
    @exclusivity(unchecked) private var condition = pthread_cond_t()
    @exclusivity(unchecked) private var open = 0
    @exclusivity(unchecked) private var resizing = false
    /// Threads with open reads and how many; threads in a write. A few threads at most: a linear search is cheaper
    /// than hashing on every transaction.
    @exclusivity(unchecked) private var readers: [(thread: UInt, count: Int)] = []
    @exclusivity(unchecked) private var writers: [UInt] = []
    /// Read transactions ended with `mdb_txn_reset`, for the next reads to renew: `mdb_txn_begin` allocates a
    /// transaction and searches the reader table under LMDB's process-shared mutex, a renew does neither (each idle
    /// one keeps its reader slot, holding no snapshot). Taken and given back inside the gate's own lock; aborted
    /// before a resize (``exclusively(_:_:)``) and when the environment closes (``drainIdleReads()``).
    @exclusivity(unchecked) private var idleReads: [OpaquePointer] = []
    /// At most this many idle reads are kept (each holds a reader slot).
    static let idleReadLimit = 4

    init() {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&condition, nil)
    }

    deinit {
        pthread_cond_destroy(&condition)
        pthread_mutex_destroy(&mutex)
    }

    /// Runs `body` counted as an open transaction of the calling thread.
    func withTransaction<R, E: Error>(write: Bool, _ body: () throws(E) -> R) throws(E) -> R {
        try withTransaction(write: write, taking: false) { (_, _: inout OpaquePointer?) throws(E) -> R in try body() }
    }

    /// Runs `body` counted as a read of the calling thread, with an idle read transaction to renew if there is one;
    /// `body` may give back a reset transaction (`keep`) for a later read.
    func withRead<R, E: Error>(
        _ body: (_ idle: OpaquePointer?, _ keep: inout OpaquePointer?) throws(E) -> R
    ) throws(E) -> R {
        try withTransaction(write: false, taking: true, body)
    }

    private func withTransaction<R, E: Error>(
        write: Bool, taking: Bool, _ body: (_ idle: OpaquePointer?, _ keep: inout OpaquePointer?) throws(E) -> R
    ) throws(E) -> R {
        let thread = UInt(bitPattern: Int(bitPattern: pthread_self()))
        pthread_mutex_lock(&mutex)
        // A thread that already holds a transaction goes on: a pending resize waits for that transaction to end, so
        // it cannot be running, and making the thread wait for it would deadlock both.
        if !holdsTransaction(thread) {
            while resizing { pthread_cond_wait(&condition, &mutex) }
        }
        open += 1
        if write {
            writers.append(thread)
        } else if let index = readers.firstIndex(where: { $0.thread == thread }) {
            readers[index].count += 1
        } else {
            readers.append((thread, 1))
        }
        let idle = taking ? idleReads.popLast() : nil
        pthread_mutex_unlock(&mutex)
        var keep: OpaquePointer?
        defer {
            pthread_mutex_lock(&mutex)
            open -= 1
            if write {
                if let index = writers.firstIndex(of: thread) { writers.remove(at: index) }
            } else if let index = readers.firstIndex(where: { $0.thread == thread }) {
                readers[index].count -= 1
                if readers[index].count == 0 { readers.remove(at: index) }
            }
            var surplus: OpaquePointer?
            if let kept = keep {
                if idleReads.count < Self.idleReadLimit && !resizing { idleReads.append(kept) } else { surplus = kept }
            }
            if open == 0 { pthread_cond_broadcast(&condition) }
            pthread_mutex_unlock(&mutex)
            if let surplus { mdb_txn_abort(surplus) }
        }
        return try body(idle, &keep)
    }

    /// Whether `thread` holds a transaction (call with `mutex` held).
    private func holdsTransaction(_ thread: UInt) -> Bool {
        writers.contains(thread) || readers.contains { $0.thread == thread }
    }

    /// Whether the calling thread holds a transaction (read or write).
    func callerHoldsTransaction() -> Bool {
        let thread = UInt(bitPattern: Int(bitPattern: pthread_self()))
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return holdsTransaction(thread)
    }

    /// Whether the calling thread holds a write transaction.
    func callerIsWriting() -> Bool {
        let thread = UInt(bitPattern: Int(bitPattern: pthread_self()))
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return writers.contains(thread)
    }

    /// Runs `body` with no transaction open in the process and no new one starting.
    ///
    /// - Throws: ``LMDBError/Code/misuse`` when the calling thread itself holds a transaction (waiting for it would
    ///   never end).
    func exclusively<R>(_ what: String, _ body: () throws(LMDBError) -> R) throws(LMDBError) -> R {
        let thread = UInt(bitPattern: Int(bitPattern: pthread_self()))
        pthread_mutex_lock(&mutex)
        if holdsTransaction(thread) {
            pthread_mutex_unlock(&mutex)
            throw LMDBError(
                code: .misuse,
                message: "cannot \(what) while this thread holds another transaction on the environment",
                context: "map resize")
        }
        while resizing { pthread_cond_wait(&condition, &mutex) }
        resizing = true
        while open > 0 { pthread_cond_wait(&condition, &mutex) }
        let idle = idleReads
        idleReads = []
        pthread_mutex_unlock(&mutex)
        // No transaction of the process may exist across a resize, idle ones included.
        for transaction in idle { mdb_txn_abort(transaction) }
        defer {
            pthread_mutex_lock(&mutex)
            resizing = false
            pthread_cond_broadcast(&condition)
            pthread_mutex_unlock(&mutex)
        }
        return try body()
    }

    /// Takes the idle read transactions (for the environment to abort before it closes).
    func drainIdleReads() -> [OpaquePointer] {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        let idle = idleReads
        idleReads = []
        return idle
    }
}
