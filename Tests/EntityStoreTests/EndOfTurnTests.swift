import EntityStore
import Foundation
import LMDB
import TestSupport
import Testing

/// An actor's context processes the edits of each turn by itself, as Core Data's main-queue context does at the end
/// of each pass of the run loop: one batch per turn reaches its controllers, and nothing before the turn ends.
@Suite struct EndOfTurnTests {
    /// A main-actor screen: a context, a controller over the items by rank, and the delegate's calls.
    @MainActor
    final class Screen {
        let temporary: TemporaryStore
        let context: ObjectContext
        let controller: FetchedResultsController
        let delegate = RecordingDelegate()

        init() throws {
            temporary = try TemporaryStore(schema: try controllerSchema())
            context = ObjectContext(store: temporary.store, name: "screen")
            controller = FetchedResultsController(
                fetchRequest: FetchRequest(entity: "Item", sortKeys: [SortKey("rank"), SortKey("title")]),
                context: context)
            controller.delegate = delegate
            try controller.performFetch()
        }

        /// The batches delivered so far.
        var batches: Int { delegate.calls.filter { $0 == "will" }.count }

        func titles() throws -> [String] {
            try controller.fetchedObjects.map { "\(try $0.value(forKey: "title"))" }
        }

        @discardableResult
        func add(_ title: String, rank: Int64) throws -> ManagedObject {
            let item = try context.insert("Item")
            try item.setValue(.string(title), forKey: "title")
            try item.setValue(.int(rank), forKey: "rank")
            return item
        }
    }

    @MainActor @Test func aMainActorScreensEditsAndUndoArriveAsOneBatchOnceTheTurnEnds() async throws {
        let screen = try Screen()
        defer { screen.temporary.remove() }
        #expect(screen.context.processesPendingChangesAtEndOfTurn)
        // One turn: three inserts and a change of one of them.
        let a = try screen.add("a", rank: 3)
        try screen.add("b", rank: 2)
        try screen.add("c", rank: 1)
        try a.setValue(.int(0), forKey: "rank")
        #expect(screen.batches == 0, "nothing is delivered before the turn ends")
        await Task.yield()
        #expect(screen.batches == 1)
        #expect(screen.delegate.calls.filter { $0.hasPrefix("ins") }.count == 3)
        #expect(try screen.titles() == ["\"a\"", "\"c\"", "\"b\""])
        for _ in 0..<5 { await Task.yield() }
        #expect(screen.batches == 1, "one batch for the turn")

        // An edit in one turn, its undo in the next: one batch each.
        screen.delegate.calls = []
        try a.setValue(.int(9), forKey: "rank")
        #expect(screen.batches == 0)
        await Task.yield()
        #expect(screen.batches == 1)
        #expect(try screen.titles() == ["\"c\"", "\"b\"", "\"a\""])
        try screen.context.undoLastChange()
        #expect(screen.batches == 1, "the undo is not delivered before its turn ends")
        await Task.yield()
        #expect(screen.batches == 2)
        #expect(try screen.titles() == ["\"a\"", "\"c\"", "\"b\""])

        // A save processes at once; the end of the turn then has nothing to deliver.
        screen.delegate.calls = []
        try screen.add("d", rank: 5)
        try screen.context.save()
        #expect(screen.batches == 1)
        for _ in 0..<3 { await Task.yield() }
        #expect(screen.batches == 1)
    }

    @MainActor @Test func editsInALoopAcrossTurnsGiveOneBatchPerTurn() async throws {
        let screen = try Screen()
        defer { screen.temporary.remove() }
        let turns = 40
        for turn in 0..<turns {
            let item = try screen.add("t\(turn)", rank: Int64(turn))
            try item.setValue(.int(Int64(-turn)), forKey: "rank")
            try screen.add("u\(turn)", rank: Int64(turn))
            await Task.yield()
            #expect(screen.batches == turn + 1, "turn \(turn)")
        }
        #expect(screen.controller.fetchedObjects.count == turns * 2)
        // Each batch held its own turn's two inserts.
        #expect(screen.delegate.calls.filter { $0.hasPrefix("ins") }.count == turns * 2)
    }

    @MainActor @Test func aScreenThatTurnsItOffIsToldOnlyWhenItProcesses() async throws {
        let screen = try Screen()
        defer { screen.temporary.remove() }
        screen.context.processesPendingChangesAtEndOfTurn = false
        try screen.add("a", rank: 1)
        for _ in 0..<5 { await Task.yield() }
        #expect(screen.batches == 0)
        screen.context.processPendingChanges()
        #expect(screen.batches == 1)
        // Turned on again with changes waiting: they arrive at the end of this turn.
        try screen.add("b", rank: 2)
        screen.context.processesPendingChangesAtEndOfTurn = true
        #expect(screen.batches == 1)
        await Task.yield()
        #expect(screen.batches == 2)
    }

    @Test func aContextOutsideAnyActorHasNoTurns() throws {
        let temporary = try TemporaryStore(schema: try controllerSchema())
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        #expect(!context.processesPendingChangesAtEndOfTurn)
        context.processesPendingChangesAtEndOfTurn = true
        #expect(!context.processesPendingChangesAtEndOfTurn, "no actor, no turns")
    }

    actor Importer: ContextActor {
        nonisolated let contextExecutor: ContextExecutor
        init(store: PersistentStore) { contextExecutor = ContextExecutor(store: store, name: "importer") }

        /// Adds items in one job.
        func add(_ titles: [String]) throws {
            for title in titles {
                let item = try context.insert("Item")
                try item.setValue(.string(title), forKey: "title")
            }
        }

        func observe(into records: Locked<[ChangeRecord]>) -> ObservationToken {
            context.addObserver { record in records.withLock { $0.append(record) } }
        }

        func delivered(_ records: Locked<[ChangeRecord]>) -> Int { records.withLock { $0.count } }
    }

    @Test func aContextActorsJobsAreTurnsToo() async throws {
        let temporary = try TemporaryStore(schema: try controllerSchema())
        defer { temporary.remove() }
        let importer = Importer(store: temporary.store)
        let records = Locked<[ChangeRecord]>([])
        let token = await importer.observe(into: records)
        defer { token.cancel() }
        func inserted() -> Int { records.withLock { $0.reduce(0) { $0 + $1.insertedIDs.count } } }
        for job in 0..<10 {
            try await importer.add(["x\(job)", "y\(job)"])
            // Processed once the executor's job ends (a caller may go on running on its thread a little while):
            // the wait ends a hang only.
            let deadline = Date().addingTimeInterval(60)
            while inserted() < 2 * (job + 1), Date() < deadline { try await Task.sleep(nanoseconds: 1_000_000) }
            #expect(inserted() == 2 * (job + 1), "job \(job)")
        }
        #expect(records.withLock { $0.allSatisfy { !$0.insertedIDs.isEmpty } }, "no empty batch")
    }
}
