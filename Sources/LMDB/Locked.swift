#if canImport(Glibc)
import Glibc
#endif

/// A value behind a pthread mutex, for state shared between threads.
///
/// It reads like `Synchronization.Mutex`, but ThreadSanitizer sees a pthread mutex (`make tsan`), while `Mutex` is
/// built on raw futexes that it cannot see, so every access through one looks like a race to it.
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked Sendable: `value` is only read or written between pthread_mutex_lock and pthread_mutex_unlock.
    // @exclusivity(unchecked): the mutex is what orders the accesses (the run-time check only sees one thread's, and
    // cost more than the locking itself).
    @usableFromInline @exclusivity(unchecked) var mutex = pthread_mutex_t()
    @usableFromInline @exclusivity(unchecked) var value: Value

    /// A lock holding `value`.
    package init(_ value: Value) {
        pthread_mutex_init(&mutex, nil)
        self.value = value
    }

    deinit { pthread_mutex_destroy(&mutex) }

    /// Runs `body` with the value, the lock held.
    @inlinable
    package func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return try body(&value)
    }
}
