import Foundation
import LMDB
import TestSupport
import Testing

@testable import EntityStore

/// The store's publisher: handlers run outside its lock (re-entrant cancel, subscribe and save), a slow handler
/// stalls no other thread's save, subscriptions end with their context, and a damaged history entry is reported
/// and passed.
@Suite struct PublisherTests {
    static func saveTag(_ store: PersistentStore, _ name: String) throws {
        let context = ObjectContext(store: store, name: "saver")
        let tag = try context.insert("Tag")
        try tag.setValue(.string(name), forKey: "name")
        try context.save()
    }

    /// A context made where the caller runs, merging the store's saves automatically, and a controller of its tags
    /// by name.
    static func mergingTagController(
        _ store: PersistentStore, isolation: isolated (any Actor)? = #isolation
    ) -> (ObjectContext, FetchedResultsController) {
        let context = ObjectContext(store: store, isolation: isolation)
        context.automaticallyMergesChangesFromStore = true
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Tag", sortKeys: [SortKey("name")]), context: context)
        return (context, controller)
    }

    /// Another process saves `count` tags to `temporary`'s store and prunes each save's entry at once (an app that
    /// keeps no history), while this process's watcher is held in a slow observer, subscribed after the store's
    /// merging contexts: the watcher delivers to them first, then stops there on whatever it read first, until the
    /// other process is done. The watcher then catches up and meets the gap.
    static func saveAndPruneBehindAHeldWatcher(_ temporary: TemporaryStore, _ count: Int) throws {
        let store = temporary.store
        let release = DispatchSemaphore(value: 0)
        let held = Failures()
        let hold: @Sendable (String) -> Void = { what in
            held.add(what)
            if held.all.count == 1 { release.wait() }
        }
        let slow = try store.observeCommits(onError: { hold("\($0.code)") }) { hold("\($0.transaction ?? 0)") }
        defer { slow.cancel() }
        let output = try ChildProcess.helper(["tag-saver", temporary.path, "\(count)", "prune"])
        #expect(output.status == 0, "\(output.stderr)")
        release.signal()
        store.publisher.catchUp(store, force: true)
    }

    @Test func aHandlerCanCancelItselfSubscribeAndSave() throws {
        try withStore { store, _ in
            let seen = NumberBox()
            let lateSeen = NumberBox()
            let tokens = TokenBox()
            let failures = Failures()
            tokens.first = try store.observeCommits(onError: { failures.add("\($0)") }) { record in
                seen.append(record.transaction ?? 0)
                guard record.transaction == 1 else { return }
                do {
                    // Re-entrant: subscribe, save, and cancel this very token from inside the handler.
                    tokens.second = try store.observeCommits(onError: { failures.add("\($0)") }) {
                        lateSeen.append($0.transaction ?? 0)
                    }
                    try Self.saveTag(store, "from-handler")
                    tokens.first?.cancel()
                } catch {
                    failures.add("\(error)")
                }
            }
            try Self.saveTag(store, "first")
            // The watcher thread may have taken the delivery (it wakes on the commit too): wait for the handler.
            let start = Date()
            while lateSeen.values.isEmpty && Date().timeIntervalSince(start) < RunningProcess.hangDeadline {
                usleep(1000)
            }
            #expect(failures.all.isEmpty)
            #expect(seen.values == [1], "cancelled inside its handler: no more deliveries")
            #expect(lateSeen.values == [2], "the handler's own save reached the new subscriber")
            try Self.saveTag(store, "third")
            // A handler may be running on the watcher thread: then it receives the save a moment later.
            let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline)
            while lateSeen.values.count < 2 && Date() < deadline { usleep(1000) }
            #expect(lateSeen.values == [2, 3])
        }
    }

    @Test func aSlowHandlerDoesNotStallAnotherThreadsSave() throws {
        try withStore { store, _ in
            let entered = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let token = try store.observeCommits(onError: { _ in }) { record in
                if record.transaction == 1 {
                    entered.signal()
                    release.wait()
                }
            }
            defer { token.cancel() }
            let firstDone = DispatchSemaphore(value: 0)
            Thread {
                try? Self.saveTag(store, "slow")
                firstDone.signal()
            }.start()
            entered.wait()
            // The first save's thread is inside the handler: a save on this thread must not wait for it.
            let saved = Failures()
            let secondDone = DispatchSemaphore(value: 0)
            Thread {
                do { try Self.saveTag(store, "fast") } catch { saved.add("\(error)") }
                secondDone.signal()
            }.start()
            let finished = secondDone.wait(timeout: .now() + 20) == .success
            release.signal()
            firstDone.wait()
            #expect(finished, "the second save waited for the slow handler")
            #expect(saved.all.isEmpty)
        }
    }

    @Test func aReleasedMergingContextLeavesTheSubscribers() throws {
        try withStore { store, _ in
            do {
                let context = ObjectContext(store: store)
                context.automaticallyMergesChangesFromStore = true
                #expect(store.publisher.state.withLock { $0.subscribers.count } == 1)
            }
            #expect(store.publisher.state.withLock { $0.subscribers.isEmpty && $0.watcher == nil })
        }
    }

    @Test func aContextStreamLeavesTheObserversWhenItsConsumerStops() async throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let tag = try context.insert("Tag")
        do {
            let stream = context.changes
            try tag.setValue("a", forKey: "name")
            context.processPendingChanges()
            for await _ in stream { break }
        }
        #expect(context.observers.streams.withLock { $0.isEmpty }, "gone without waiting for another delivery")
        try tag.setValue("b", forKey: "name")
        context.processPendingChanges()
        #expect(context.observers.tables.withLock { $0.handlers.isEmpty })
    }

    @Test func aDamagedHistoryEntryIsReportedAndDeliveryGoesOnPastIt() async throws {
        // Async, and the stream read with `await`: a test that blocks its thread on a semaphore while a task reads
        // the stream holds one of the cooperative pool's threads (two on this machine), and two such tests at once
        // left the tasks nowhere to run.
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        do {
            for name in ["a", "b", "c"] { try Self.saveTag(store, name) }
            try store.environment.write { txn in
                try txn.put(IndexKey.primaryKey(2), [0xFF, 0x01], in: try txn.openDatabase("history"))
            }
            let seen = NumberBox()
            let failures = Failures()
            let token = try store.observeCommits(since: 0, onError: { failures.add($0.message) }) {
                seen.append($0.transaction ?? 0)
            }
            defer { token.cancel() }
            #expect(seen.values == [1, 3])
            #expect(failures.all.count == 1)
            #expect(failures.all.first?.contains("history entry 2 does not decode") == true)

            // A merging context hears of it at its next fetch, once; its merges go on.
            let context = ObjectContext(store: store)
            context.automaticallyMergesChangesFromStore = true
            try store.environment.write { txn in
                try txn.put(IndexKey.primaryKey(4), [0xFF], in: try txn.openDatabase("history"))
            }
            store.publisher.catchUp(store, force: true)
            try Self.saveTag(store, "e")
            let error = entityStoreError { _ = try context.fetch(FetchRequest(entity: "Tag")) }
            #expect(error?.code == .corruptData)
            #expect(error?.message.contains("history entry 4") == true)
            #expect(try context.count(for: FetchRequest(entity: "Tag")) == 4)

            // The history API names the entry too.
            let historyError = entityStoreError { _ = try store.history() }
            #expect(historyError?.message.contains("history entry 2") == true)

            // And a stream ends by throwing it.
            let streamed = Failures()
            do {
                for try await record in store.changes(since: 0) { streamed.add("record \(record.transaction ?? 0)") }
            } catch {
                streamed.add("error \(error)")
            }
            #expect(streamed.all.first == "record 1")
            #expect(streamed.all.last?.contains("history entry 2") == true)
        }
    }

    @Test func entriesPrunedBeforeTheyWereReadAreReportedNeverSkipped() async throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        do {
            for name in ["a", "b", "c", "d"] { try Self.saveTag(store, name) }
            #expect(try store.pruneHistory(before: 3) == 2)
            func observe(since: UInt64) throws -> (seen: NumberBox, failures: Failures, token: ObservationToken) {
                let seen = NumberBox()
                let failures = Failures()
                let token = try store.observeCommits(
                    since: since, onError: { failures.add("\($0.code): \($0.message)") }
                ) { seen.append($0.transaction ?? 0) }
                return (seen, failures, token)
            }
            // From before the pruned entries: told which, then given the rest.
            let early = try observe(since: 0)
            #expect(early.seen.values == [3, 4])
            #expect(
                early.failures.all == [
                    "historyPruned: history entries 1-2 were pruned before they were delivered here: their changes"
                        + " were not merged or observed; fetch again (or reset the context) to see the store as it is"
                ])
            early.token.cancel()
            // From after them: nothing is missing.
            let late = try observe(since: 2)
            #expect(late.seen.values == [3, 4])
            #expect(late.failures.all.isEmpty)
            late.token.cancel()

            // The newest entries pruned too: no entry follows the gap, yet it is told; the next save arrives.
            #expect(try store.pruneHistory(before: 5) == 2)
            #expect(try store.lastTransaction() == 4)
            let newest = try observe(since: 3)
            defer { newest.token.cancel() }
            #expect(newest.seen.values.isEmpty)
            #expect(newest.failures.all.count == 1)
            #expect(newest.failures.all.first?.hasPrefix("historyPruned: history entry 4 was pruned") == true)
            try Self.saveTag(store, "e")
            let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline)
            while newest.seen.values.isEmpty && Date() < deadline { usleep(1000) }
            #expect(newest.seen.values == [5])
            #expect(newest.failures.all.count == 1)

            // A stream from before them ends by throwing it.
            let outcome = Failures()
            do {
                for try await record in store.changes(since: 0) {
                    outcome.add("record \(record.transaction ?? 0)")
                    if record.transaction == 5 { break }
                }
            } catch let error as EntityStoreError {
                outcome.add("\(error.code): \(error.message)")
            }
            #expect(outcome.all.count == 1)
            #expect(outcome.all.first?.hasPrefix("historyPruned: history entries 1-4 were pruned") == true)
            // The history itself returns what is left.
            #expect(try store.history(since: 0).map(\.transaction) == [5])
        }
    }

    @Test func aMergingContextIsToldOfSavesPrunedBeforeItMergedThem() throws {
        try withStore { store, _ in
            try Self.saveTag(store, "a")
            let context = ObjectContext(store: store)
            context.automaticallyMergesChangesFromStore = true
            // Another process's two saves, pruned before this process read them: what the store holds then is a
            // history whose last transaction is two beyond its newest entry.
            try store.environment.write { txn in
                try txn.put(StoreNames.MetaKey.historySequence, IndexKey.primaryKey(3), in: store.meta)
            }
            store.publisher.catchUp(store, force: true)
            let error = entityStoreError { _ = try context.fetch(FetchRequest(entity: "Tag")) }
            #expect(error?.code == .historyPruned)
            #expect(error?.message.hasPrefix("history entries 2-3 were pruned before they were delivered here") == true)
            // Once; merging goes on with the next save.
            let tags = try context.fetch(FetchRequest(entity: "Tag"))
            #expect(tags.count == 1)
            var request = FetchRequest(entity: "Tag", sortKeys: [SortKey("name")])
            request.includesPendingChanges = false
            let controller = FetchedResultsController(fetchRequest: request, context: context)
            try controller.performFetch()
            try Self.saveTag(store, "b")
            context.processPendingChanges()
            #expect(try controller.fetchedObjects.map { try $0.value(forKey: "name") } == ["a", "b"])
        }
    }

    /// A merge that meets a gap tells the context's controllers at once, so that a screen which neither fetches nor
    /// saves hears of it; told to a controller, the gap is reported, and the context's next fetch does not throw
    /// it again. With no controller following, the next fetch throws it.
    @Test func aMergingContextTellsItsControllersOfSavesPrunedBeforeItMergedThem() throws {
        try withStore { store, _ in
            try Self.saveTag(store, "a")
            let context = ObjectContext(store: store)
            context.automaticallyMergesChangesFromStore = true
            var request = FetchRequest(entity: "Tag", sortKeys: [SortKey("name")])
            request.includesPendingChanges = false
            let controller = FetchedResultsController(fetchRequest: request, context: context)
            let delegate = RecordingDelegate()
            controller.delegate = delegate
            try controller.performFetch()
            // Not fetched yet: it follows nothing, and is not told.
            let idle = FetchedResultsController(fetchRequest: request, context: context)
            let idleDelegate = RecordingDelegate()
            idle.delegate = idleDelegate
            func skipSaves(to last: UInt64) throws {
                try store.environment.write { txn in
                    try txn.put(StoreNames.MetaKey.historySequence, IndexKey.primaryKey(last), in: store.meta)
                }
                store.publisher.catchUp(store, force: true)
            }
            try skipSaves(to: 3)
            context.processPendingChanges()
            #expect(
                delegate.calls == [
                    "failed: history entries 2-3 were pruned before they were delivered here: their changes were not"
                        + " merged or observed; fetch again (or reset the context) to see the store as it is"
                ])
            #expect(controller.failure?.code == .historyPruned)
            #expect(idleDelegate.calls.isEmpty)
            #expect(idle.failure == nil)
            // Reported once: the context's fetch does not throw it again, and fetching again starts the controller.
            #expect(try context.fetch(request).count == 1)
            try controller.performFetch()
            #expect(controller.failure == nil)
            try Self.saveTag(store, "b")
            context.processPendingChanges()
            #expect(try controller.fetchedObjects.map { try $0.value(forKey: "name") } == ["a", "b"])

            // Told again; the controller, not fetched since, follows nothing: the next gap waits for the fetch.
            try skipSaves(to: 6)
            context.processPendingChanges()
            #expect(delegate.calls.count(where: { $0.hasPrefix("failed: ") }) == 2)
            #expect(delegate.calls.last?.hasPrefix("failed: history entries 5-6 were pruned") == true)
            try skipSaves(to: 8)
            context.processPendingChanges()
            let unfollowed = entityStoreError { _ = try context.fetch(request) }
            #expect(unfollowed?.message.hasPrefix("history entries 7-8 were pruned") == true)
            #expect(delegate.calls.count(where: { $0.hasPrefix("failed: ") }) == 2)
        }
    }

    /// A main-actor screen whose context merges by itself is told by its controller, with no fetch or save of its
    /// own, of another process's saves pruned before this process read them; fetching again shows them.
    @Test @MainActor func aMainActorScreenIsToldOfAnotherProcesssSavesPrunedBeforeItMergedThem() async throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        let (_, controller) = Self.mergingTagController(store)  // the controller keeps its context
        let delegate = RecordingDelegate()
        controller.delegate = delegate
        try controller.performFetch()
        let count = 30
        try Self.saveAndPruneBehindAHeldWatcher(temporary, count)
        try await eventually("the screen's controller is told of the pruned saves") { controller.failure != nil }
        #expect(controller.failure?.code == .historyPruned, "\(String(describing: controller.failure))")
        #expect(delegate.calls.last?.hasPrefix("failed: history entr") == true, "\(delegate.calls)")
        #expect(controller.fetchedObjects.count < count)
        try controller.performFetch()
        #expect(controller.fetchedObjects.count == count)
        #expect(controller.failure == nil)
    }

    /// Another process saves and prunes each save's entry at once (an app that keeps no history) while this
    /// process's watcher is held up in a slow observer: the merging context's controller is told which saves it
    /// missed by the fetch whose merge meets them (which, the gap told, does not throw it again), and shows them
    /// once fetched again.
    @Test func aMergingContextBehindAnotherProcesssPrunesIsToldWhatItMissed() throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        let (context, controller) = Self.mergingTagController(store)
        try controller.performFetch()
        let count = 30
        try Self.saveAndPruneBehindAHeldWatcher(temporary, count)
        #expect(try store.lastTransaction() == UInt64(count))
        #expect(try store.history().isEmpty)
        #expect(controller.failure == nil)
        #expect(try context.fetch(FetchRequest(entity: "Tag")).count == count)
        #expect(controller.failure?.code == .historyPruned, "\(String(describing: controller.failure))")
        #expect(controller.fetchedObjects.count < count)
        try controller.performFetch()
        #expect(controller.fetchedObjects.count == count)
    }

    @Test func aNewSubscriberRightAfterTheLastOneLeftGetsAnotherProcesssSaves() throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        for round in 0..<5 {
            let old = try store.observeCommits(onError: { _ in }) { _ in }
            old.cancel()
            let received = NumberBox()
            let token = try store.observeCommits(onError: { _ in received.append(0) }) {
                received.append($0.transaction ?? 0)
            }
            defer { token.cancel() }
            let output = try ChildProcess.helper(["tag-saver", temporary.path, "1"])
            #expect(output.status == 0, "\(output.stderr)")
            let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline)
            while received.values.isEmpty && Date() < deadline { usleep(1000) }
            #expect(received.values == [UInt64(round + 1)], "round \(round)")
        }
    }
}

final class TokenBox: @unchecked Sendable {
    // @unchecked Sendable: the tokens are only touched while `lock` is held.
    private let lock = NSLock()
    private var tokens: [ObservationToken?] = [nil, nil]
    var first: ObservationToken? {
        get { lock.withLock { tokens[0] } }
        set { lock.withLock { tokens[0] = newValue } }
    }
    var second: ObservationToken? {
        get { lock.withLock { tokens[1] } }
        set { lock.withLock { tokens[1] = newValue } }
    }
}

final class NumberBox: @unchecked Sendable {
    // @unchecked Sendable: `numbers` is only touched while `lock` is held.
    private let lock = NSLock()
    private var numbers: [UInt64] = []
    func append(_ number: UInt64) { lock.withLock { numbers.append(number) } }
    var values: [UInt64] { lock.withLock { numbers } }
}
