import Foundation
import SectionedDiff
import TestSupport
import Testing

@testable import EntityStore

// The patterns of the Concurrency article, compiled in Swift 6 mode: a main-actor screen, background importers on
// their own actors, `performBackgroundTask`, Sendable snapshots and batches, and streams that end cleanly.

/// A long-lived importer: an actor that owns a context on its own thread.
actor TicketImporter: ContextActor {
    nonisolated let contextExecutor: ContextExecutor

    init(store: PersistentStore, name: String) {
        contextExecutor = ContextExecutor(store: store, name: name)
    }

    /// Inserts tickets into the project named `project` and saves, one save per call.
    func importTickets(_ titles: [String], into project: String, rank: Int) throws -> [ObjectID] {
        let owner = try context.first(Project.self, where: \Project.name == project)
        let tickets = try titles.map { title in
            let ticket = try context.insert(Ticket.self)
            ticket.title = title
            ticket.rank = rank
            ticket.project = owner
            return ticket
        }
        try context.save()
        return tickets.map(\.objectID)
    }

    /// Snapshots of the tickets the actor's context sees (merged from other contexts on its own).
    func titles() throws -> [String] {
        try context.snapshots(Ticket.self, sortedBy: [SortKey(\Ticket.title)]).map(\.title)
    }

    /// Merges the actor's context delivered: on the executor's thread, and elsewhere.
    nonisolated let merges = MergeCounts()
    private var observation: ObservationToken?

    /// Counts the merges the actor's context delivers, and where they ran.
    func startCountingMerges() {
        let executor = contextExecutor
        let merges = self.merges
        observation = context.addObserver { record in
            guard record.kind == .merged else { return }
            merges.add(onExecutor: executor.isCurrent)
        }
    }

    /// Whether the actor runs on its executor's thread.
    func isOnItsThread() -> Bool {
        contextExecutor.checkIsolated()
        return true
    }
}

/// A long-lived editor on its own actor: random inserts, deletes, moves between projects, renames and re-ranks of
/// tickets, one save each.
actor TicketEditor: ContextActor {
    nonisolated let contextExecutor: ContextExecutor
    private var g: SeededGenerator

    init(store: PersistentStore, name: String, seed: UInt64, policy: MergePolicy) {
        contextExecutor = ContextExecutor(store: store, name: name)
        contextExecutor.context.mergePolicy = policy
        g = SeededGenerator(seed: seed)
    }

    /// One edit and its save; false when it lost a race (an object deleted meanwhile) and was rolled back.
    func edit(_ step: Int) throws -> Bool {
        let tickets = try context.fetch(Ticket.self)
        // A fetch merges what other contexts saved: a ticket fetched above may be deleted by now.
        let projects = try context.fetch(Project.self)
        do {
            switch Int.random(in: 0..<6, using: &g) {
            case 0, 1:
                let ticket = try context.insert(Ticket.self)
                ticket.title = "new \(step)"
                ticket.rank = Int.random(in: 0..<50, using: &g)
                ticket.project = projects.randomElement(using: &g)
            case 2: if let ticket = tickets.randomElement(using: &g) { try context.delete(ticket) }
            case 3: tickets.randomElement(using: &g)?.rank = Int.random(in: 0..<50, using: &g)
            case 4: tickets.randomElement(using: &g)?.project = projects.randomElement(using: &g)
            default: tickets.randomElement(using: &g)?.title = "renamed \(step)"
            }
            try context.save()
            return true
        } catch let error as EntityStoreError where [.conflict, .objectNotFound, .invalidObject].contains(error.code) {
            context.rollback()
            return false
        }
    }

    /// The tickets the actor's context shows.
    func ticketIDs() throws -> Set<ObjectID> { Set(try context.fetch(Ticket.self).map(\.objectID)) }
}

/// A main-actor screen: a context made on the main actor, a controller and a delegate conformance isolated to
/// the main actor.
@MainActor
final class TicketScreen: @MainActor FetchedResultsControllerDelegate {
    let context: ObjectContext
    let controller: ModelResultsController<Ticket>
    private(set) var shown = ResultsSnapshot(sectionIdentifiers: [], itemIdentifiers: [])
    private(set) var delegateBatches = 0
    private(set) var failure: EntityStoreError?

    init(store: PersistentStore) throws {
        context = ObjectContext(store: store, name: "screen")
        context.automaticallyMergesChangesFromStore = true
        controller = ModelResultsController(
            ModelFetchRequest<Ticket>(sortedBy: [SortKey(\Ticket.title)]), context: context,
            sectionedBy: \Ticket.project?.name)
        controller.delegate = self
        try controller.performFetch()
        shown = controller.snapshot
    }

    func controllerDidChangeContent(_ controller: FetchedResultsController) {
        MainActor.assertIsolated()
        delegateBatches += 1
        shown = controller.snapshot
    }

    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        failure = error
    }

    var titles: [String] { controller.fetchedObjects.map(\.title) }
}

final class MergeCounts: @unchecked Sendable {
    // @unchecked Sendable: the counts are only touched while `lock` is held.
    private let lock = NSLock()
    private var counts = (onExecutor: 0, elsewhere: 0)
    func add(onExecutor: Bool) {
        lock.withLock {
            if onExecutor { counts.onExecutor += 1 } else { counts.elsewhere += 1 }
        }
    }
    var onExecutor: Int { lock.withLock { counts.onExecutor } }
    var elsewhere: Int { lock.withLock { counts.elsewhere } }
}

/// Applies a batch's changes to the results before it, as a list UI would.
func replay(_ batch: ResultsBatch, on old: ResultsSnapshot) -> ResultsSnapshot {
    var sections = zip(old.sectionIdentifiers, old.itemIdentifiers).map { (name: $0, items: $1) }
    var removals: [ItemPath] = []
    var additions: [(ItemPath, ObjectID)] = []
    var deletedSections: [Int] = []
    var insertedSections: [(Int, SectionInfo)] = []
    for change in batch.changes {
        switch change {
        case .deleteItem(_, let at): removals.append(at)
        case .deleteSection(_, let at): deletedSections.append(at)
        case .insertSection(let info, let at): insertedSections.append((at, info))
        case .insertItem(let id, let at): additions.append((at, id))
        case .moveItem(let id, let from, let to):
            removals.append(from)
            additions.append((to, id))
        case .updateItem: break
        }
    }
    for path in removals.sorted(by: >) { sections[path.section].items.remove(at: path.item) }
    for index in deletedSections.sorted(by: >) { sections.remove(at: index) }
    // A section arrives with its objects (no object inserts inside a new section).
    for (index, info) in insertedSections.sorted(by: { $0.0 < $1.0 }) {
        sections.insert((info.name, info.objectIDs), at: index)
    }
    for (path, id) in additions.sorted(by: { $0.0 < $1.0 }) { sections[path.section].items.insert(id, at: path.item) }
    return ResultsSnapshot(sectionIdentifiers: sections.map(\.name), itemIdentifiers: sections.map(\.items))
}

/// Waits (yielding the actor it runs on) until `condition` holds, or fails after `seconds`.
func eventually(
    _ what: String, seconds: Double = RunningProcess.hangDeadline, isolation: isolated (any Actor)? = #isolation,
    _ condition: () -> Bool
) async throws {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        guard Date() < deadline else {
            Issue.record(Comment(rawValue: "timed out waiting until \(what)"))
            return
        }
        try await Task.sleep(nanoseconds: 2_000_000)
    }
}

@Suite struct ConcurrencyTests {
    @Test @MainActor func aMainActorScreenFollowsTwoBackgroundImportersWithoutCodeOfItsOwn() async throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let screen = try TicketScreen(store: world.store)
        let initial = screen.titles
        let batches = screen.controller.batches()
        var streamed: [ResultsBatch] = []
        let consumer = Task { @MainActor in
            var last = screen.shown
            for try await batch in batches {
                #expect(replay(batch, on: last) == batch.snapshot, "a batch replays onto the results before it")
                last = batch.snapshot
                streamed.append(batch)
            }
        }

        let first = TicketImporter(store: world.store, name: "importer 1")
        let second = TicketImporter(store: world.store, name: "importer 2")
        async let a = first.importTickets(["A1", "A2", "A3"], into: "Alpha", rank: 1)
        async let b = second.importTickets(["B1", "B2"], into: "Beta", rank: 2)
        let imported = try await a + b
        #expect(imported.count == 5)
        #expect(await first.isOnItsThread())

        // No merge call, no processPendingChanges: the screen's context merges on the main actor by itself.
        try await eventually("the screen shows both imports") { screen.titles.count == initial.count + 5 }
        #expect(Set(screen.titles) == Set(initial + ["A1", "A2", "A3", "B1", "B2"]))
        #expect(screen.titles == screen.titles.sorted() || screen.controller.sections.count > 1)
        #expect(screen.delegateBatches >= 1)
        #expect(screen.shown == screen.controller.snapshot)
        try await eventually("the stream delivered the last batch") {
            streamed.last?.snapshot == screen.controller.snapshot
        }
        #expect(screen.failure == nil)

        // Each importer merged the other's save into its own context, on its own actor.
        let seenByFirst = try await first.titles()
        #expect(Set(["B1", "B2"]).isSubset(of: Set(seenByFirst)), "\(seenByFirst)")

        consumer.cancel()
        _ = await consumer.result
        try await eventually("the cancelled stream is dropped") { screen.controller.controller.liveStreamCount == 0 }
    }

    @Test @MainActor func aMainActorScreenFollowsAnotherProcesssSaves() async throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        context.automaticallyMergesChangesFromStore = true
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Tag", sortKeys: [SortKey("name")]), context: context)
        try controller.performFetch()
        let batches = controller.batches()
        let consumer = Task { @MainActor in
            var last = controller.snapshot
            var inserted = 0
            for try await batch in batches {
                #expect(replay(batch, on: last) == batch.snapshot)
                last = batch.snapshot
                inserted += batch.changes.filter { if case .insertItem = $0 { true } else { false } }.count
                if inserted == 5 { break }
            }
            return inserted
        }
        let output = try ChildProcess.helper(["tag-saver", temporary.path, "5"])
        #expect(output.status == 0, "\(output.stderr)")
        // Woken by the other process's commits, the context merges on the main actor; the stream reports them.
        try await eventually("the other process's five tags are shown") { controller.fetchedObjectIDs.count == 5 }
        #expect(try await consumer.value == 5)
    }

    /// Four editors on actors of their own and two streams of `performBackgroundTask` (a third of them cancelled)
    /// race, a fixed number of steps each, while a main-actor screen follows by itself. Every batch the screen's stream delivers
    /// replays onto the one before; afterwards the screen, a fresh controller and every editor still alive (two are
    /// released while merges may be on their way) show what the store holds.
    @Test @MainActor func editorsOnActorsAndBackgroundTasksRaceWhileAScreenFollows() async throws {
        let (edits, tasks) = TestScale.size((60, 30), stress: (1_000, 500))
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let store = world.store
        let screen = try TicketScreen(store: store)
        let batches = screen.controller.batches()
        let initial = screen.shown
        let consumer = Task { @MainActor in
            var last = initial
            var wrong = 0
            for try await batch in batches {
                if replay(batch, on: last) != batch.snapshot { wrong += 1 }
                last = batch.snapshot
            }
            return wrong
        }
        let policies: [MergePolicy] = [.propertyLevel, .storeWins, .contextWins, .propertyLevel]
        var editors = (0..<4).map {
            TicketEditor(store: store, name: "editor \($0)", seed: UInt64($0), policy: policies[$0])
        }
        let saves = try await withThrowingTaskGroup(of: Int.self) { group in
            for (index, editor) in editors.enumerated() {
                group.addTask {
                    var saved = 0
                    for step in 1...edits where try await editor.edit(index * 1_000_000 + step) { saved += 1 }
                    return saved
                }
            }
            for stream in 0..<2 {
                group.addTask {
                    var saved = 0
                    for step in 1...tasks {
                        let title = "background \(stream)-\(step)"
                        let task = Task {
                            try await store.performBackgroundTask(name: "background \(stream)") { context in
                                try context.insert(Ticket.self).title = title
                                if let ticket = try context.fetch(Ticket.self).randomElement() { ticket.rank += 1 }
                            }
                        }
                        if step % 3 == 0 { task.cancel() }
                        do {
                            try await task.value
                            saved += 1
                        } catch is CancellationError {
                        } catch let error as EntityStoreError where error.code == .conflict {}
                    }
                    return saved
                }
            }
            var total = 0
            for try await saved in group { total += saved }
            return total
        }
        #expect(saves > 20)
        editors.removeLast(2)
        let stored = Set(try ObjectContext(store: store).fetch(Ticket.self).map(\.objectID))
        try await eventually("the screen shows what the store holds") {
            Set(screen.controller.fetchedObjects.map(\.objectID)) == stored
        }
        #expect(screen.shown == screen.controller.snapshot)
        #expect(screen.failure == nil)
        let fresh = FetchedResultsController(
            fetchRequest: screen.controller.controller.fetchRequest, context: ObjectContext(store: store),
            sectionNameKeyPath: screen.controller.controller.sectionNameKeyPath)
        try fresh.performFetch()
        #expect(fresh.sections.map(\.objectIDs) == screen.controller.controller.sections.map(\.objectIDs))
        for editor in editors {
            let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline)
            while try await editor.ticketIDs() != stored && Date() < deadline {
                try await Task.sleep(nanoseconds: 10_000_000)
            }
            #expect(try await editor.ticketIDs() == stored)
        }
        #expect(try store.checkIntegrity().findings.isEmpty)
        consumer.cancel()
        #expect(try await consumer.value == 0, "every streamed batch replays onto the one before")
    }

    @Test func performBackgroundTaskSavesAndReturnsASendableResult() async throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let before = try world.context.count(Ticket.self)
        let snapshots = try await world.store.performBackgroundTask(name: "bulk") { context in
            for index in 0..<10 {
                let ticket = try context.insert(Ticket.self)
                ticket.title = "bulk \(index)"
                ticket.rank = 100 + index
            }
            return try context.snapshots(Ticket.self, where: \Ticket.rank >= 100, sortedBy: [SortKey(\Ticket.rank)])
        }
        #expect(snapshots.map(\.rank) == Array(100..<110))
        #expect(snapshots.map(\.title).first == "bulk 0")
        let reader = ObjectContext(store: world.store)
        #expect(try reader.count(Ticket.self) == before + 10, "the task's work was saved when it returned")
        #expect(try world.store.history().last?.author == "bulk")

        // A throwing body discards its changes and throws its own error.
        struct Refused: Error {}
        await #expect(throws: Refused.self) {
            try await world.store.performBackgroundTask { context in
                try context.insert(Ticket.self).title = "never"
                throw Refused()
            }
        }
        #expect(try reader.count(Ticket.self, where: \Ticket.title == "never") == 0)

        // A failed typed write reaches the caller through the automatic save.
        let failure = await #expect(throws: EntityStoreError.self) {
            try await world.store.performBackgroundTask { context in
                let ticket = try #require(try context.first(Ticket.self))
                try context.delete(ticket)
                ticket.estimate = 3
                return 1
            }
        }
        #expect(failure?.key == "estimate", "\(String(describing: failure))")
        #expect(try reader.count(Ticket.self) == before + 10, "nothing of the failed task was saved")

        // A cancelled task runs nothing.
        let ran = Flag()
        let store = world.store
        let cancelled = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await store.performBackgroundTask { _ in ran.set() }
        }
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(!ran.value)
    }

    @Test func snapshotsCrossActorsWithValuesAndRelationshipIDs() async throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let ticket = try #require(try world.context.first(Ticket.self, where: \Ticket.title == "Write docs"))
        let snapshot = try world.context.snapshot(of: ticket)
        #expect(snapshot.objectID == ticket.objectID)
        #expect(snapshot.title == "Write docs")
        #expect(snapshot.rank == ticket.rank)
        #expect(snapshot.estimate == ticket.estimate)
        #expect(snapshot.id(\.project) == ticket.project?.objectID)
        #expect(snapshot.ids(\.labels) == ticket.labels.map(\.objectID).sorted())

        // Unsaved changes are in the snapshot; the snapshot does not change with the object afterwards.
        ticket.rank = 77
        let changed = try world.context.snapshot(of: ticket)
        ticket.rank = 78
        #expect(changed.rank == 77)
        #expect(changed != snapshot)

        // It crosses to another actor and back.
        actor Shelf {
            var kept: [ModelSnapshot<Ticket>] = []
            func keep(_ snapshot: ModelSnapshot<Ticket>) -> Int {
                kept.append(snapshot)
                return kept.count
            }
        }
        let shelf = Shelf()
        #expect(await shelf.keep(changed) == 1)
        #expect(await shelf.kept.first?.rank == 77)
    }

    @Test func everyStreamUnregistersWhenItEnds() async throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let context = world.context
        let controller = ModelResultsController(ModelFetchRequest<Ticket>(), context: context)
        try controller.performFetch()

        // A controller's batch stream: gone once its consumer cancels.
        let batches = controller.batches()
        #expect(controller.controller.liveStreamCount == 1)
        let consumer = Task {
            for try await _ in batches {}
        }
        consumer.cancel()
        _ = await consumer.result
        #expect(controller.controller.liveStreamCount == 0)

        // A context's change stream: its handler is removed once the consumer cancels.
        let handlersBefore = context.observers.streams.withLock { $0.count }
        let changes = context.changes
        #expect(context.observers.streams.withLock { $0.count } == handlersBefore + 1)
        let reader = Task {
            for await _ in changes {}
        }
        reader.cancel()
        _ = await reader.result
        #expect(context.observers.streams.withLock { $0.count } == handlersBefore)

        // The store's change stream: its subscription ends with it.
        let subscribersBefore = world.store.publisher.state.withLock { $0.subscribers.count }
        let storeChanges = world.store.changes()
        #expect(world.store.publisher.state.withLock { $0.subscribers.count } == subscribersBefore + 1)
        let follower = Task {
            for try await _ in storeChanges {}
        }
        follower.cancel()
        _ = await follower.result
        try await eventually("the store's stream unsubscribed") {
            world.store.publisher.state.withLock { $0.subscribers.count } == subscribersBefore
        }

        // A released controller finishes its streams.
        var temporary: FetchedResultsController? = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Ticket"), context: context)
        try temporary?.performFetch()
        let orphan = try #require(temporary).batches()
        temporary = nil
        var count = 0
        for try await _ in orphan { count += 1 }
        #expect(count == 0, "the stream of a released controller ends")

    }

    @Test func aFailedControllerEndsItsStreamsByThrowingTheFailure() async throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        let context = ObjectContext(store: store)
        let tag = try context.insert("Tag")
        try tag.setValue("a", forKey: "name")
        try context.save()
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Tag", sortKeys: [SortKey("name")]), context: context)
        try controller.performFetch()
        let stream = controller.batches()

        let other = ObjectContext(store: store)
        try other.existingObject(with: tag.objectID).setValue("b", forKey: "name")
        try other.save()
        let key = withUnsafeBytes(of: tag.objectID.primaryKey.bigEndian) { Array($0) }
        try store.environment.write { txn in try txn.put(key, [1, 7], in: try txn.openDatabase("records.Tag")) }
        context.merge(try store.history().last!)
        var received = 0
        let error = await #expect(throws: EntityStoreError.self) {
            for try await _ in stream { received += 1 }
        }
        #expect(received == 0)
        #expect(error?.code == .corruptData)
        #expect(controller.liveStreamCount == 0)
    }

    @Test func anActorOwnedContextMergesOtherSavesOnItsOwnThread() async throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let importer = TicketImporter(store: world.store, name: "merger")
        await importer.startCountingMerges()
        let other = ObjectContext(store: world.store)
        try other.insert(Ticket.self).title = "from elsewhere"
        try other.save()
        // No call into the actor's context: its executor runs the merge between the actor's jobs.
        let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline)
        while importer.merges.onExecutor == 0 && Date() < deadline {
            try await Task.sleep(nanoseconds: 2_000_000)
        }
        #expect(importer.merges.onExecutor == 1)
        #expect(importer.merges.elsewhere == 0)
        #expect(try await importer.titles().contains("from elsewhere"))
    }
}
