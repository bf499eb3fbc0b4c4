import Foundation
import LMDB

#if canImport(Glibc)
import Glibc
#endif

/// Wakes a store's publisher when another process commits: LMDB writes every commit's pages and meta page into the
/// data file, so an inotify watch for `IN_MODIFY` on it fires on the commit itself. The thread sleeps in `poll` while
/// nothing happens (no CPU use while idle), and stops when its pipe is written to: the last subscriber left or the
/// store went away.
///
/// The thread holds the store weakly, and strongly only while it catches up: releasing the store stops it.
final class CommitWatcher: @unchecked Sendable {
    // @unchecked Sendable: the descriptors are set once at creation; the thread alone reads `inotify` and the stop
    // pipe's read end, `stop()` writes its write end once (guarded by `stopped`, a flag behind a lock).
    private let inotify: Int32
    private let stopReader: Int32
    private let stopWriter: Int32
    private let stopped = Locked(false)

    /// How long the thread sleeps without an event before it looks anyway: a safety net for an event the kernel
    /// dropped (a full inotify queue is itself reported, and handled as an event).
    static let fallbackMilliseconds: Int32 = 2000

    private init(inotify: Int32, stopReader: Int32, stopWriter: Int32) {
        self.inotify = inotify
        self.stopReader = stopReader
        self.stopWriter = stopWriter
    }

    deinit {
        close(inotify)
        close(stopReader)
        close(stopWriter)
    }

    /// Creates the watch on the store's data file and starts the thread.
    ///
    /// - Throws: ``EntityStoreError/Code/storage`` naming the system call that failed (out of inotify watches or
    ///   descriptors, say).
    static func start(_ store: PersistentStore) throws -> CommitWatcher {
        let path = store.environment.dataFilePath
        let inotify = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard inotify >= 0 else { throw systemFailure("inotify_init1", path) }
        guard inotify_add_watch(inotify, path, UInt32(IN_MODIFY)) >= 0 else {
            let error = systemFailure("inotify_add_watch", path)
            close(inotify)
            throw error
        }
        var pipeEnds: [Int32] = [-1, -1]
        guard pipe(&pipeEnds) == 0 else {
            let error = systemFailure("pipe", path)
            close(inotify)
            throw error
        }
        for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let watcher = CommitWatcher(inotify: inotify, stopReader: pipeEnds[0], stopWriter: pipeEnds[1])
        let thread = Thread { [weak store] in
            while watcher.step({ store }) {}
        }
        thread.name = "EntityStore watcher"
        thread.start()
        return watcher
    }

    static func systemFailure(_ call: String, _ path: String) -> EntityStoreError {
        let code = errno
        return EntityStoreError(
            .storage,
            "cannot watch \(path) for other processes' commits: \(call) failed: \(String(cString: strerror(code)))",
            underlying: LMDBError(code: .init(rawValue: code), message: String(cString: strerror(code)), context: call))
    }

    /// Asks the thread to stop; it closes nothing itself (the descriptors go with the last reference).
    func stop() {
        let first = stopped.withLock { stopped -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        var byte: UInt8 = 1
        _ = write(stopWriter, &byte, 1)
    }

    /// Catches up, then sleeps until the data file changes or the watcher is stopped; `false` when it should end.
    private func step(_ weakStore: () -> PersistentStore?) -> Bool {
        // Strong only while catching up: a released store ends the loop.
        if let store = weakStore(), store.publisher.shouldWatch(self) {
            catchUp(store)
        } else {
            return false
        }
        var fds = [
            pollfd(fd: inotify, events: Int16(POLLIN), revents: 0),
            pollfd(fd: stopReader, events: Int16(POLLIN), revents: 0),
        ]
        let ready = poll(&fds, 2, Self.fallbackMilliseconds)
        if ready < 0 && errno != EINTR { usleep(10_000) }  // should not happen; never spin
        if fds[1].revents != 0 { return false }
        drainEvents()
        return true
    }

    /// Catches up; if LMDB's meta page already shows a commit that a new read does not see yet (the reader table's
    /// snapshot is published just after the meta page), tries again a moment later instead of waiting for the next
    /// commit's event.
    private func catchUp(_ store: PersistentStore) {
        for attempt in 0..<50 where store.publisher.shouldWatch(self) {
            store.publisher.catchUp(store)
            if store.environment.info().lastTransactionID <= store.publisher.lastSnapshot { return }
            usleep(attempt < 10 ? 100 : 1000)
        }
    }

    private func drainEvents() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while buffer.withUnsafeMutableBytes({ read(inotify, $0.baseAddress, $0.count) }) > 0 {}
    }
}
