import EntityStore
import Foundation
import Synchronization
import TestSupport
import Testing

/// What a tracer hears (`PersistentStore.trace`): fetches with their plan and what they read, saves with what
/// their commit wrote, merges and controller batches; nothing once its token ends.
@Suite struct TracingTests {
    final class Heard: Sendable {
        let events = Mutex<[TraceEvent]>([])
        func add(_ event: TraceEvent) { events.withLock { $0.append(event) } }
        func take() -> [TraceEvent] {
            events.withLock { events in
                let taken = events
                events = []
                return taken
            }
        }
    }

    @Test func fetchesSavesMergesAndBatchesAreTraced() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        for i in 0..<30 { try world.add("i\(i)", group: i % 3 == 0 ? "A" : "B", rank: Int64(i)) }
        try world.context.save()
        let heard = Heard()
        let token = world.store.trace { heard.add($0) }

        // A fetch by the indexed group: the plan names the index; every record read matched.
        let hits = try world.context.fetch(FetchRequest(entity: "Item", predicate: try FetchPredicate("group == 'A'")))
        guard case .fetch(let indexed)? = heard.take().first else { Issue.record("no fetch event"); return }
        #expect(indexed.entity == "Item" && indexed.predicate == "group == \"A\"" && indexed.context == "ui")
        #expect(indexed.returned == hits.count && hits.count == 10 && indexed.recordsRead == 10, "\(indexed)")
        #expect(indexed.plan.contains("index Item.group"), "\(indexed.plan)")
        // A full scan reads every record; a count returns the matches counted.
        let count = try world.context.count(
            for: FetchRequest(entity: "Item", predicate: try FetchPredicate("rank < 5")))
        guard case .fetch(let scan)? = heard.take().first else { Issue.record("no fetch event"); return }
        #expect(
            count == 5 && scan.returned == 5 && scan.recordsRead == 30 && scan.plan.contains("full scan"), "\(scan)")

        // A save: its changes, and the pages its commit wrote.
        try world.add("new", group: "A")
        try hits[0].setValue(.int(99), forKey: "rank")
        try world.context.delete(hits[1])
        try world.context.save()
        let saves = heard.take().compactMap { if case .save(let save) = $0 { save } else { nil } }
        #expect(saves.count == 1)
        if let save = saves.first {
            #expect(save.inserted == 1 && save.updated == 1 && save.deleted == 1, "\(save)")
            #expect(save.bytesWritten >= 4_096 && save.pagesWritten >= 1, "\(save)")
            #expect(save.commitSeconds > 0 && save.commitSeconds <= save.seconds, "\(save)")
        }

        // Another context's save, merged; a controller's batch.
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Item", sortKeys: [SortKey("rank")]), context: world.context)
        try controller.performFetch()
        world.context.automaticallyMergesChangesFromStore = true
        _ = heard.take()
        let other = ObjectContext(store: world.store, name: "other")
        try world.add("elsewhere", group: "B", in: other)
        try other.save()
        _ = heard.take()  // the other context's save
        world.context.processPendingChanges()
        let merged = heard.take()
        #expect(
            merged.contains {
                if case .merge(let merge) = $0 { merge.changes == 1 && merge.context == "ui" } else { false }
            }, "\(merged)")
        #expect(
            merged.contains {
                if case .batch(let batch) = $0 { batch.entity == "Item" && batch.rowsTouched == 1 } else { false }
            }, "\(merged)")

        // Once the token ends, nothing.
        token.cancel()
        _ = try world.context.fetch(FetchRequest(entity: "Item"))
        try world.add("after", group: "A")
        try world.context.save()
        #expect(heard.take().isEmpty)
    }

    @Test func aTracerHearsOnlyWhatItAskedForUntilItsTokenIsReleased() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let heard = Heard()
        var token: TraceToken? = world.store.trace(.saves) { heard.add($0) }
        try world.add("a", group: "A")
        try world.context.save()
        _ = try world.context.fetch(FetchRequest(entity: "Item"))
        let events = heard.take()
        #expect(events.count == 1 && events.allSatisfy { if case .save = $0 { true } else { false } }, "\(events)")
        #expect(token != nil)
        token = nil
        try world.add("b", group: "A")
        try world.context.save()
        #expect(heard.take().isEmpty)
    }
}
