import Foundation
import LMDB
import Synchronization

/// Publishes a store's committed saves, in transaction order, exactly once to each subscriber: this process's
/// saves right after they commit, other processes' saves when a watcher thread sees the store's last
/// transaction move (it polls LMDB's meta page, backing off from 5 ms to 50 ms while idle: no busy waiting).
///
/// Everything is published from the change history, so in-process and cross-process saves arrive through one path,
/// in one order.
final class StorePublisher: Sendable {
    struct Subscriber {
        var lastDelivered: UInt64
        var handler: @Sendable (ChangeRecord) -> Void
    }

    struct State {
        var subscribers: [Int: Subscriber] = [:]
        var nextID = 0
        var watcherRunning = false
        var lastSeenLMDBTransaction = -1
    }

    let state = Mutex(State())

    /// Adds a subscriber that receives every save with a transaction number above `since`.
    func subscribe(since: UInt64, _ handler: @escaping @Sendable (ChangeRecord) -> Void) -> Int {
        state.withLock { state in
            defer { state.nextID += 1 }
            state.subscribers[state.nextID] = Subscriber(lastDelivered: since, handler: handler)
            return state.nextID
        }
    }

    func unsubscribe(_ id: Int) {
        state.withLock { _ = $0.subscribers.removeValue(forKey: id) }
    }

    /// Reads the history past the oldest subscriber's position and delivers each entry to those that have not had
    /// it. Held under the lock: deliveries are in order and exactly once even when several threads catch up.
    func catchUp(_ store: PersistentStore, force: Bool = false) {
        state.withLock { state in
            guard !state.subscribers.isEmpty else { return }
            // The meta page (env info) can show a commit of another process before a new read transaction sees it
            // (LMDB publishes the reader table's snapshot after the meta page): remember the snapshot actually read,
            // not the meta page's transaction, or that last commit would wait for the next one to be delivered.
            let lmdbTransaction = store.environment.info().lastTransactionID
            if !force && lmdbTransaction == state.lastSeenLMDBTransaction { return }
            let oldest = state.subscribers.values.map(\.lastDelivered).min() ?? 0
            guard let (records, snapshot) = try? store.historySnapshot(since: oldest) else { return }
            state.lastSeenLMDBTransaction = snapshot
            for record in records {
                guard let number = record.transaction else { continue }
                for (id, subscriber) in state.subscribers where subscriber.lastDelivered < number {
                    subscriber.handler(record)
                    state.subscribers[id]?.lastDelivered = number
                }
            }
        }
    }

    /// Starts the watcher thread for other processes' commits, once.
    func startWatching(_ store: PersistentStore) {
        let start = state.withLock { state -> Bool in
            defer { state.watcherRunning = true }
            return !state.watcherRunning
        }
        guard start else { return }
        let thread = Thread { [weak store] in
            var delay: UInt32 = 5_000
            while let current = store {
                let before = current.publisher.state.withLock { $0.lastSeenLMDBTransaction }
                current.publisher.catchUp(current)
                let after = current.publisher.state.withLock { $0.lastSeenLMDBTransaction }
                let idle = current.publisher.state.withLock { $0.subscribers.isEmpty }
                if idle {
                    current.publisher.state.withLock { $0.watcherRunning = false }
                    return
                }
                delay = before == after ? min(delay * 2, 50_000) : 5_000
                usleep(delay)
            }
        }
        thread.name = "EntityStore watcher"
        thread.start()
    }
}

/// Store records waiting for a context that merges automatically.
final class ChangeInbox: Sendable {
    let records = Mutex<[ChangeRecord]>([])
    let subscription = Mutex<Int?>(nil)

    func take() -> [ChangeRecord] {
        records.withLock { records in
            defer { records = [] }
            return records
        }
    }
}

extension PersistentStore {
    /// Every save committed to the store from now on (or after transaction `since`), by any context of any process,
    /// in transaction order, each exactly once.
    ///
    /// Merge them into a context where it lives:
    /// ```swift
    /// for await record in store.changes() { context.merge(record) }   // on the context's actor
    /// ```
    public func changes(since: UInt64? = nil) -> AsyncStream<ChangeRecord> {
        let (stream, continuation) = AsyncStream<ChangeRecord>.makeStream()
        let start = since ?? ((try? lastTransaction()) ?? 0)
        let id = publisher.subscribe(since: start) { continuation.yield($0) }
        continuation.onTermination = { [weak self] _ in self?.publisher.unsubscribe(id) }
        publisher.catchUp(self, force: true)
        publisher.startWatching(self)
        return stream
    }

    /// Calls `handler` (on the watcher's or the saving thread) with every save after transaction `since`, in
    /// order, each exactly once, until the token is cancelled or released.
    public func observeCommits(
        since: UInt64? = nil, _ handler: @escaping @Sendable (ChangeRecord) -> Void
    )
        -> ObservationToken
    {
        let start = since ?? ((try? lastTransaction()) ?? 0)
        let id = publisher.subscribe(since: start, handler)
        publisher.catchUp(self, force: true)
        publisher.startWatching(self)
        return ObservationToken { [weak self] in self?.publisher.unsubscribe(id) }
    }
}
