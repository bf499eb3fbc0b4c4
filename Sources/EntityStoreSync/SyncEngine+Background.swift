import EntityStore
import Foundation

/// Syncing in the background: on local saves, on other stores' pushes, and every interval.
extension SyncEngine {
    /// Syncs in the background: at once, right after every local save, when another store pushes (PostgreSQL's
    /// `NOTIFY`), and every `interval` seconds. It listens for the other stores' pushes before its first sync, and
    /// returns once it does (or once the server was found unreachable), so a push made after it returns wakes it.
    /// Errors go to `onError`: with PostgreSQL down (``SyncError/Code/serverUnavailable``) the loop goes on and
    /// retries at the next save or after `interval`; an error that retrying cannot mend
    /// (``SyncError/isRetryable``: credentials refused, a connection string that cannot work) is reported once and
    /// ends the loop (``status`` keeps it; ``start(interval:onSync:onError:)`` again after fixing it). `onSync`
    /// gets each sync's report that did something: its uniqueness conflicts and problems reach the app there.
    ///
    /// - Throws: A storage error when the store's saves cannot be observed.
    public func start(
        interval: Double = 5, onSync: @escaping @Sendable (SyncReport) -> Void = { _ in },
        onError: @escaping @Sendable (SyncError) -> Void = { _ in }
    ) throws {
        let wake = try WakePipe()
        guard running.begin(wake) else { return }
        let token: ObservationToken
        do {
            token = try store.observeCommits(
                onError: { onError(SyncError(.store, "watching the store's saves: \($0.description)")) },
                onChange: { record in if !SyncEngine.isRemote(record) { wake.signal() } })
        } catch {
            running.finished()
            throw error
        }
        let listening = DispatchSemaphore(value: 0)
        let thread = Thread { [self] in
            var due = Date.distantPast
            var dirty = true
            // The loop's own connection, for LISTEN (the sync connection is the syncs', under the lock): made before
            // the first sync, so that no other store's push during it goes unheard.
            var listener: PostgresConnection?
            var listenFailure: SyncError?
            do {
                listener = try Self.listen(configuration)
            } catch let error as SyncError {
                listenFailure = error
            } catch {
                listenFailure = SyncError(.serverUnavailable, "\(error)")
            }
            listening.signal()
            while running.isRunning {
                if dirty || Date() >= due {
                    dirty = false
                    due = Date().addingTimeInterval(interval)
                    do {
                        let report = try syncNow()
                        if report != SyncReport() { onSync(report) }
                    } catch let error as SyncError {
                        onError(error)
                        // Credentials or a connection string that cannot work: retrying mends nothing.
                        if error.code == .authenticationFailed || error.code == .configurationInvalid { break }
                    } catch {
                        onError(SyncError(.store, "\(error)"))
                    }
                }
                let timeout = max(0, due.timeIntervalSinceNow)
                if listener == nil, listenFailure?.isRetryable ?? true {
                    do {
                        listener = try Self.listen(configuration)
                    } catch let error as SyncError {
                        // The server is unreachable: each sync reports that (once); until it answers, saves and
                        // the interval wake the loop.
                        listenFailure = error
                        listener = nil
                    } catch {
                        listener = nil
                    }
                }
                guard let current = listener else {
                    wake.wait(timeout: timeout)
                    dirty = wake.drain()
                    continue
                }
                do {
                    let notified = try current.waitForNotification(timeout: timeout, alsoWatching: wake.readDescriptor)
                    dirty = wake.drain() || notified
                } catch {
                    // The server went away while we waited: sync at once (it reports the failure) and listen anew.
                    listener = nil
                    dirty = true
                }
            }
            token.cancel()
            running.finished()
        }
        thread.name = "EntityStoreSync"
        thread.start()
        listening.wait()
    }

    /// Stops the background loop and waits for its current sync to end.
    public func stop() { running.stop() }

    /// Whether the background loop runs (it ends on ``stop()``, or by itself on an error retrying cannot mend).
    public var isSyncingInBackground: Bool { running.isRunning }

    /// A connection listening to the zone's pushes.
    static func listen(_ configuration: SyncConfiguration) throws -> PostgresConnection {
        let connection = try PostgresConnection(configuration.connectionWithTimeout)
        try connection.listen(ServerSchema.channel)
        return connection
    }
}

/// A pipe that wakes the background loop (a local save, ``SyncEngine/stop()``), polled beside the server's socket.
final class WakePipe: @unchecked Sendable {
    // @unchecked Sendable: two file descriptors set once at init; writes to a pipe are safe from any thread.
    let readDescriptor: Int32
    private let writeDescriptor: Int32

    init() throws {
        var descriptors: [Int32] = [-1, -1]
        guard pipe(&descriptors) == 0 else {
            throw SyncError(.state, "cannot make the background loop's pipe: \(String(cString: strerror(errno)))")
        }
        for descriptor in descriptors {
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
            _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        }
        readDescriptor = descriptors[0]
        writeDescriptor = descriptors[1]
    }

    deinit {
        close(readDescriptor)
        close(writeDescriptor)
    }

    /// Wakes the waiter (a full pipe already wakes it).
    func signal() {
        var byte: UInt8 = 1
        _ = write(writeDescriptor, &byte, 1)
    }

    /// Empties the pipe: whether anything was signalled.
    func drain() -> Bool {
        var buffer = [UInt8](repeating: 0, count: 64)
        var any = false
        while read(readDescriptor, &buffer, buffer.count) > 0 { any = true }
        return any
    }

    /// Waits up to `timeout` seconds for a signal.
    func wait(timeout: Double) {
        var descriptor = pollfd(fd: readDescriptor, events: Int16(POLLIN), revents: 0)
        _ = poll(&descriptor, 1, Int32(min(Double(Int32.max), timeout * 1000)))
    }
}

/// The background loop's state.
final class RunFlag: @unchecked Sendable {
    // @unchecked Sendable: `wake`, `running` and `active` are read and written only while `condition` is locked.
    /// The running loop's pipe.
    private(set) var wake: WakePipe?
    private let condition = NSCondition()
    private var running = false
    private var active = false

    var isRunning: Bool { condition.withLock { running } }

    /// Marks the loop started, with its pipe; false when one runs already.
    func begin(_ pipe: WakePipe) -> Bool {
        condition.withLock {
            guard !running && !active else { return false }
            running = true
            active = true
            wake = pipe
            return true
        }
    }

    /// The loop ended (stopped, or on an error retrying cannot mend): a new one may start.
    func finished() {
        condition.withLock {
            running = false
            active = false
            condition.broadcast()
        }
    }

    func stop() {
        condition.withLock { running = false }
        condition.withLock { wake }?.signal()
        condition.withLock { while active { condition.wait() } }
    }
}
