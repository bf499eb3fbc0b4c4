#if canImport(Glibc)
import Glibc
#endif

/// Lets one process at a time wait for LMDB's writer mutex.
///
/// LMDB serialises writers with a process-shared robust mutex in its lock file. When a process is killed while it
/// holds that mutex and two or more processes are waiting for it, one waiter recovers the mutex and the others can
/// sleep for good: the robust-mutex recovery can leave the futex without its waiters flag, so no unlock wakes them
/// (found by the ledger stress test: 1 run in 10 to 30 left two writers asleep on an unlocked mutex; the same with
/// the build before, so it is not ours, and glibc 2.36 with Linux 6.x still does it).
///
/// Writers therefore first take an open-file-description lock (`F_OFD_SETLKW`) on one byte of the data file, far
/// past its end, and a mutex of this process: the kernel releases the byte when its holder dies and wakes the next
/// waiter itself, and at most one process ever waits on LMDB's mutex, which a single waiter always recovers. The
/// lock is on a descriptor of its own, opened once and closed with the environment: closing it drops no lock of
/// LMDB's (LMDB 0.9 locks only its lock file, and an open-file-description lock belongs to its own descriptor).
final class WriterLock: @unchecked Sendable {
    // @unchecked Sendable: `mutex` orders the threads of the process; `descriptor` is set once.
    @exclusivity(unchecked) private var mutex = pthread_mutex_t()
    private let descriptor: Int32
    /// The byte locked: beyond any file LMDB writes (and any byte LMDB itself locks, in its lock file only).
    private static let offset: Int = 1 << 62
    /// `F_OFD_SETLKW` and `F_OFD_SETLK` (Linux 3.15; not exported by Swift's Glibc module).
    private static let waitCommand: Int32 = 38

    /// Opens the descriptor the lock is held on.
    init(dataFile path: String) throws(LMDBError) {
        let fd = Glibc.open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else {
            let code = errno
            throw LMDBError(
                code: .init(rawValue: code),
                message: "cannot open the data file for the writer lock: \(describe(errno: code))",
                context: path)
        }
        descriptor = fd
        pthread_mutex_init(&mutex, nil)
    }

    deinit {
        close(descriptor)
        pthread_mutex_destroy(&mutex)
    }

    /// Runs `body` holding the lock: no other thread of this process, and no other process, holds it meanwhile.
    func withLock<R, E: Error>(_ what: @autoclosure () -> String, _ body: () throws(E) -> R) throws -> R {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        var request = Self.request(F_WRLCK)
        while fcntl(descriptor, Self.waitCommand, &request) != 0 {
            let code = errno
            if code == EINTR { continue }
            throw LMDBError(
                code: .init(rawValue: code), message: "the writer lock failed: \(describe(errno: code))",
                context: what())
        }
        defer {
            // Releasing a byte this description holds fails only for a bad descriptor, which the lock above ruled
            // out; a signal is the one thing to retry.
            var release = Self.request(F_UNLCK)
            while fcntl(descriptor, Self.waitCommand, &release) != 0 && errno == EINTR {}
        }
        return try body()
    }

    private static func request(_ type: Int32) -> flock {
        var request = flock()
        request.l_type = Int16(type)
        request.l_whence = Int16(SEEK_SET)
        request.l_start = off_t(offset)
        request.l_len = 1
        request.l_pid = 0
        return request
    }
}
