import Foundation
import LMDB

/// Publishes a store's committed saves, in transaction order, exactly once to each subscriber: this process's
/// saves right after they commit, other processes' saves when the ``CommitWatcher`` sees the data file change.
///
/// Everything is published from the change history, so in-process and cross-process saves arrive through one path,
/// in one order. Who gets what is decided under the lock; handlers run outside it, each subscriber's on one thread
/// at a time. A handler may cancel, subscribe or save (its save reaches it after it returns). When a thread finds a
/// subscriber busy in its handler on another thread, it leaves that subscriber's catch-up to that thread, so a slow
/// handler delays only its own deliveries, never another thread's save; the store's own quick subscribers (a
/// merging context's inbox, a `changes()` stream) are waited for instead, so that a save is in them when it returns.
///
/// A history entry that cannot be read reaches each subscriber as a failure naming its transaction, and delivery
/// goes on after it. So do entries pruned before a subscriber read them (transaction numbers follow each other, so
/// the numbers missing before the next entry, or before the last saved transaction, were pruned): a
/// ``EntityStoreError/Code/historyPruned`` failure naming them, never a silent skip.
final class StorePublisher: Sendable {
    typealias Handler = @Sendable (Result<ChangeRecord, EntityStoreError>) -> Void

    struct Subscriber {
        var lastDelivered: UInt64
        var handler: Handler
        /// Whether the handler returns at once (it only queues the record): a saving thread waits for it rather
        /// than leave the delivery to another thread.
        var isQuick: Bool
        /// Whether a thread is running the handler now.
        var isBusy = false
        /// Another thread found it busy and left it entries: the thread running its handler reads once more.
        var needsCatchUp = false
    }

    struct State {
        var subscribers: [Int: Subscriber] = [:]
        var nextID = 0
        /// The newest LMDB transaction of a history snapshot read.
        var lastSnapshot = -1
        /// The last failure to read the history at all, reported once until a read succeeds.
        var lastFailure: String?
        /// The watcher for other processes' commits, while there are subscribers.
        var watcher: CommitWatcher?
        var isShutDown = false
    }

    let state = Locked(State())
    /// Signalled when a subscriber stops being busy (for threads waiting on a quick subscriber).
    private let idle = Condition()

    /// Adds a subscriber that receives every save with a transaction number above `since`.
    ///
    /// - Parameter isQuick: The handler only queues the record (it never blocks or saves).
    func subscribe(since: UInt64, isQuick: Bool = false, _ handler: @escaping Handler) -> Int {
        state.withLock { state in
            defer { state.nextID += 1 }
            state.subscribers[state.nextID] = Subscriber(lastDelivered: since, handler: handler, isQuick: isQuick)
            return state.nextID
        }
    }

    /// Removes a subscriber; the watcher stops with the last one.
    func unsubscribe(_ id: Int) {
        let watcher = state.withLock { state -> CommitWatcher? in
            state.subscribers[id] = nil
            guard state.subscribers.isEmpty else { return nil }
            defer { state.watcher = nil }
            return state.watcher
        }
        watcher?.stop()
        idle.broadcast()
    }

    /// Stops watching for good (the store is going away).
    func shutDown() {
        let watcher = state.withLock { state -> CommitWatcher? in
            state.isShutDown = true
            state.subscribers = [:]
            defer { state.watcher = nil }
            return state.watcher
        }
        watcher?.stop()
        idle.broadcast()
    }

    /// Delivers the history past each subscriber's position.
    ///
    /// - Parameter force: Read the history even if LMDB's last transaction is the one read last time.
    func catchUp(_ store: PersistentStore, force: Bool = false) {
        var force = force
        while deliverOnce(store, force: force) { force = true }
        // A quick subscriber another thread has claimed an entry for (the commit watcher, woken by this very save)
        // may not hold it yet: wait the moment its handler takes, so that a save returns with its record in every
        // merging context's inbox. (Skipping the subscriber because its position was past the entry let a context
        // process its pending changes right after a save without the save's merge.)
        idle.wait { state.withLock { state in !state.subscribers.values.contains { $0.isQuick && $0.isBusy } } }
    }

    /// One read of the history and its deliveries. Returns whether another pass is needed: a subscriber this
    /// thread handed entries to was found busy meanwhile by another thread, which left it newer entries.
    private func deliverOnce(_ store: PersistentStore, force: Bool) -> Bool {
        let last = store.environment.info().lastTransactionID
        guard
            let oldest = state.withLock({ state -> UInt64? in
                if state.subscribers.isEmpty || (!force && last <= state.lastSnapshot) { return nil }
                return state.subscribers.values.map(\.lastDelivered).min()
            })
        else { return false }
        // Each entry, and the last saved transaction when the newest entries were pruned: nothing to deliver there
        // but the gap before it.
        var deliveries: [(number: UInt64, record: Result<ChangeRecord, EntityStoreError>?)]
        do {
            let read = try store.historyEntries(since: oldest)
            deliveries = read.entries.map { ($0.number, $0.record) }
            if read.sequence > (read.entries.last?.number ?? oldest) { deliveries.append((read.sequence, nil)) }
            state.withLock {
                $0.lastSnapshot = max($0.lastSnapshot, read.snapshot)
                $0.lastFailure = nil
            }
        } catch {
            let failure = EntityStoreError.wrapping(error, "reading the history")
            let handlers = state.withLock { state -> [Handler] in
                guard state.lastFailure != failure.description else { return [] }
                state.lastFailure = failure.description
                return state.subscribers.keys.sorted().compactMap { state.subscribers[$0]?.handler }
            }
            for handler in handlers { handler(.failure(failure)) }
            return false
        }
        var again = false
        for delivery in deliveries {
            let ids = state.withLock { state in
                state.subscribers.keys.sorted().filter { state.subscribers[$0]!.lastDelivered < delivery.number }
            }
            for id in ids {
                guard let (handler, previous) = claim(id, for: delivery.number) else { continue }
                // Numbers follow each other: the ones between the subscriber's last and this one were pruned.
                let missing = (previous + 1, delivery.record == nil ? delivery.number : delivery.number - 1)
                if missing.0 <= missing.1 { handler(.failure(Self.pruned(missing.0, missing.1))) }
                if let record = delivery.record { handler(record) }
                again =
                    state.withLock { state -> Bool in
                        guard state.subscribers[id] != nil else { return false }
                        defer {
                            state.subscribers[id]?.isBusy = false
                            state.subscribers[id]?.needsCatchUp = false
                        }
                        return state.subscribers[id]!.needsCatchUp
                    } || again
                idle.broadcast()
            }
        }
        return again
    }

    /// The failure a subscriber gets for the transactions `first...last`, pruned before it read them.
    static func pruned(_ first: UInt64, _ last: UInt64) -> EntityStoreError {
        let entries =
            first == last
            ? "history entry \(first) was pruned before it was delivered here: its changes were"
            : "history entries \(first)-\(last) were pruned before they were delivered here: their changes were"
        return EntityStoreError(
            .historyPruned,
            "\(entries) not merged or observed; fetch again (or reset the context) to see the store as it is")
    }

    /// Marks subscriber `id` busy with entry `number` and returns its handler and the number it had before; `nil`
    /// when it has the entry already, is gone, or is busy on another thread (then that thread is asked for another
    /// pass).
    private func claim(_ id: Int, for number: UInt64) -> (Handler, UInt64)? {
        while true {
            let outcome = state.withLock { state -> (handler: (Handler, UInt64)?, wait: Bool) in
                guard let subscriber = state.subscribers[id], subscriber.lastDelivered < number else {
                    return (nil, false)
                }
                if subscriber.isBusy {
                    if subscriber.isQuick { return (nil, true) }
                    state.subscribers[id]?.needsCatchUp = true
                    return (nil, false)
                }
                state.subscribers[id]?.isBusy = true
                state.subscribers[id]?.lastDelivered = number
                return ((subscriber.handler, subscriber.lastDelivered), false)
            }
            if let handler = outcome.handler { return handler }
            guard outcome.wait else { return nil }
            // A quick subscriber is being handed an earlier entry: wait the moment it takes.
            idle.wait { state.withLock { $0.subscribers[id]?.isBusy != true } }
        }
    }

    /// Starts the watcher for other processes' commits, unless it runs.
    func startWatching(_ store: PersistentStore) throws {
        try state.withLock { state in
            guard state.watcher == nil, !state.isShutDown, !state.subscribers.isEmpty else { return }
            state.watcher = try CommitWatcher.start(store)
        }
    }

    /// Whether the watcher `watcher` should go on (it is the current one and there are subscribers).
    func shouldWatch(_ watcher: CommitWatcher) -> Bool {
        state.withLock { $0.watcher === watcher && !$0.subscribers.isEmpty }
    }

    /// The newest LMDB transaction of a history snapshot read.
    var lastSnapshot: Int { state.withLock { $0.lastSnapshot } }
}

/// A condition to wait on without holding the publisher's lock: waiters re-check their predicate on every
/// broadcast.
final class Condition: Sendable {
    private let condition = ConditionBox()

    func broadcast() { condition.broadcast() }

    /// Waits until `predicate` holds (checked under the condition's own lock, so no broadcast is missed).
    func wait(until predicate: () -> Bool) { condition.wait(until: predicate) }
}

/// NSCondition in a Sendable box.
private final class ConditionBox: @unchecked Sendable {
    // @unchecked Sendable: NSCondition is thread-safe; it is used only through its lock.
    private let condition = NSCondition()

    func broadcast() {
        condition.lock()
        condition.broadcast()
        condition.unlock()
    }

    func wait(until predicate: () -> Bool) {
        condition.lock()
        while !predicate() { condition.wait() }
        condition.unlock()
    }
}

/// Store records waiting for a context that merges automatically, and a failure to read them.
final class ChangeInbox: Sendable {
    let records = Locked<[ChangeRecord]>([])
    let failure = Locked<EntityStoreError?>(nil)
    let subscription = Locked<Int?>(nil)

    func take() -> [ChangeRecord] {
        records.withLock { records in
            defer { records = [] }
            return records
        }
    }

    /// The failure waiting to be reported, once.
    func takeFailure() -> EntityStoreError? {
        failure.withLock { failure in
            defer { failure = nil }
            return failure
        }
    }

    /// How to run the context's merge where it lives, and whether that run is pending.
    let wake = Locked<(run: (@Sendable () -> Void)?, isPending: Bool)>((nil, false))

    func receive(_ result: Result<ChangeRecord, EntityStoreError>) {
        switch result {
        case .success(let record): records.withLock { $0.append(record) }
        case .failure(let error): failure.withLock { $0 = $0 ?? error }
        }
        let run = wake.withLock { wake -> (@Sendable () -> Void)? in
            guard let run = wake.run, !wake.isPending else { return nil }
            wake.isPending = true
            return run
        }
        run?()
    }

    /// The woken merge runs now: what arrives from here on wakes the context again.
    func woken() { wake.withLock { $0.isPending = false } }
}

extension PersistentStore {
    /// Every save committed to the store from now on (or after transaction `since`), by any context of any process,
    /// in transaction order, each exactly once.
    ///
    /// Merge them into a context where it lives:
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// -->
    /// ```swift
    /// for try await record in store.changes() { context.merge(record) }   // on the context's actor
    /// ```
    ///
    /// The stream ends by throwing when the history cannot be read: ``EntityStoreError/Code/corruptData`` names a
    /// history entry that does not decode (subscribe again `since:` its number to go on past it),
    /// ``EntityStoreError/Code/historyPruned`` entries pruned before the stream read them (their saves cannot be
    /// delivered: fetch again, and subscribe again from ``lastTransaction()``), a ``EntityStoreError/Code/storage``
    /// error a failing read. It unsubscribes when it ends or is cancelled.
    public func changes(since: UInt64? = nil) -> AsyncThrowingStream<ChangeRecord, any Error> {
        let (stream, continuation) = AsyncThrowingStream<ChangeRecord, any Error>.makeStream()
        do {
            let start = try since ?? lastTransaction()
            let id = publisher.subscribe(since: start, isQuick: true) { result in
                switch result {
                case .success(let record): continuation.yield(record)
                case .failure(let error): continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { [weak self] _ in self?.publisher.unsubscribe(id) }
            publisher.catchUp(self, force: true)
            try publisher.startWatching(self)
        } catch {
            continuation.finish(throwing: error)
        }
        return stream
    }

    /// Calls `onChange` (on the thread that delivers: the saving thread or the watcher's) with every save after
    /// transaction `since`, in order, each exactly once, until the token is cancelled or released.
    ///
    /// `onError` is called when a history entry cannot be read (naming its transaction; delivery goes on after it),
    /// when entries were pruned before they were delivered here (``EntityStoreError/Code/historyPruned``, naming
    /// them; delivery goes on after them), or when the history cannot be read at all (once, until a read succeeds
    /// again).
    ///
    /// - Throws: A storage error when the starting transaction cannot be read or the watcher cannot start.
    public func observeCommits(
        since: UInt64? = nil, onError: @escaping @Sendable (EntityStoreError) -> Void,
        onChange: @escaping @Sendable (ChangeRecord) -> Void
    ) throws -> ObservationToken {
        let start = try since ?? lastTransaction()
        let id = publisher.subscribe(since: start) { result in
            switch result {
            case .success(let record): onChange(record)
            case .failure(let error): onError(error)
            }
        }
        let token = ObservationToken { [weak self] in self?.publisher.unsubscribe(id) }
        publisher.catchUp(self, force: true)
        try publisher.startWatching(self)
        return token
    }
}
