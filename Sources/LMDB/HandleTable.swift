import CLMDB
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The named-database handles of one environment, and the lock LMDB requires around opening them.
///
/// lmdb.h on `mdb_dbi_open`: it "must not be called from multiple concurrent transactions in the same process. A
/// transaction that uses this function must finish (either commit or abort) before any other transaction in the
/// process may use this function", a handle opened in a transaction that aborts is closed, and a transaction sees
/// only the handles that existed when it began. So:
///
/// - the first `mdb_dbi_open` (or `mdb_drop`, which closes a handle) of a transaction takes ``openLock`` and the
///   transaction keeps it until it ends;
/// - a handle goes into the cache only after its transaction committed, stamped with a new generation;
/// - a transaction uses a cached handle only if it was published before the transaction began (its generation is
///   at most the one read before `mdb_txn_begin`); otherwise the transaction is run again, as after a map resize.
final class HandleTable: @unchecked Sendable {
    // @unchecked Sendable: `openLock` is a pthread mutex, held by one transaction (one thread) at a time;
    // `owner` and `cache` are behind `state`; `generation` is atomic.
    private var openLock = pthread_mutex_t()
    struct State {
        var cache: [String: Database] = [:]
        /// The thread whose transaction holds `openLock`.
        var owner: UInt?
    }
    let state = Locked(State())
    /// Raised each time handles are published; a transaction reads it before it begins.
    let generation = Atomic<UInt64>(0)

    init() { pthread_mutex_init(&openLock, nil) }
    deinit { pthread_mutex_destroy(&openLock) }

    /// The cached handle for `name`.
    func cached(_ name: String) -> Database? { state.withLock { $0.cache[name] } }

    /// Takes the open lock for a transaction of the calling thread.
    ///
    /// - Throws: ``LMDBError/Code/misuse`` when another transaction of the same thread holds it (waiting would never
    ///   end, and LMDB forbids the second open anyway).
    func lockForOpening(_ what: @autoclosure () -> String) throws(LMDBError) {
        let thread = currentThread()
        if state.withLock({ $0.owner == thread }) {
            throw LMDBError(
                code: .misuse,
                message: "another transaction of this thread is opening databases; open them before nesting"
                    + " transactions", context: what())
        }
        pthread_mutex_lock(&openLock)
        state.withLock { $0.owner = thread }
    }

    /// Releases the open lock, publishing what the transaction opened when it committed.
    func unlock(publishing opened: [Database]) {
        if !opened.isEmpty {
            let next = generation.add(1, ordering: .sequentiallyConsistent).newValue
            state.withLock { state in
                for database in opened {
                    state.cache[database.name ?? ""] = Database(
                        dbi: database.dbi, name: database.name, isDupSort: database.isDupSort, generation: next)
                }
            }
        }
        state.withLock { $0.owner = nil }
        pthread_mutex_unlock(&openLock)
    }

    /// Forgets a handle that `mdb_drop` closed (at once, whether or not its transaction commits).
    func forget(_ name: String?) {
        state.withLock { _ = $0.cache.removeValue(forKey: name ?? "") }
    }
}

func currentThread() -> UInt { UInt(bitPattern: Int(bitPattern: pthread_self())) }

/// Thrown inside a transaction that needs a handle published after it began: the transaction runs again.
struct HandleRetry: Error {}
