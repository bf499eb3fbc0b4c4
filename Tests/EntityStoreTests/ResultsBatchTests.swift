import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// The snapshots `batches()` streams carry: each the controller's results after its batch, however late and in
/// whatever order the consumer reads them, built on demand from the batches' changes.
@Suite struct ResultsBatchTests {
    /// Records the controller's snapshot after every batch it delivers, user-driven ones included.
    final class SnapshotRecorder: FetchedResultsControllerDelegate {
        var after: [(snapshot: ResultsSnapshot, isUserDriven: Bool)] = []
        var deliversUserDrivenChanges: Bool { true }
        /// Whether the controller computes whole batches (a `ChangeSet`) rather than incremental ones.
        var deliversWholeBatches = false
        func controllerDidChangeContent(_ controller: FetchedResultsController) {
            after.append((controller.snapshot, controller.isUserDrivenBatch))
        }
        func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
            Issue.record("the controller failed: \(error)")
        }
    }

    /// One random edit of the items: inserts, deletes, moves within and across sections, in-place updates, and
    /// user-driven reorders (which a stream not asking for them never sees).
    func edit(
        _ world: ItemWorld, _ controller: FetchedResultsController, _ random: inout SeededGenerator,
        serial: inout Int
    ) throws {
        let groups: [String?] = ["A", "B", "C", "D", nil]
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            let live = world.items.values.filter { !$0.isDeleted }.sorted { $0.objectID < $1.objectID }
            switch Int.random(in: 0..<10, using: &random) {
            case 0...2,
                _ where live.isEmpty:
                serial += 1
                try world.add(
                    "i\(serial)", group: groups.randomElement(using: &random)!,
                    position: Double(Int.random(in: 0..<50, using: &random)))
            case 3:
                try world.context.delete(live.randomElement(using: &random)!)
            case 4, 5:
                try live.randomElement(using: &random)!.setValue(
                    .double(Double(Int.random(in: 0..<50, using: &random))), forKey: "position")
            case 6:
                try live.randomElement(using: &random)!.setValue(
                    groups.randomElement(using: &random)!.map(Value.string) ?? .null, forKey: "group")
            case 7:
                try live.randomElement(using: &random)!.setValue(.string("t\(serial)"), forKey: "title")
                serial += 1
            default:
                // A user's reorder, alone in its batch.
                try world.context.save()
                let sections = controller.sections
                guard let from = sections.indices.randomElement(using: &random), sections[from].numberOfObjects > 0,
                    let to = sections.indices.randomElement(using: &random)
                else { continue }
                let source = ItemPath(
                    section: from, item: Int.random(in: 0..<sections[from].numberOfObjects, using: &random))
                let room = sections[to].numberOfObjects - (from == to ? 1 : 0)
                let destination = ItemPath(section: to, item: Int.random(in: 0...room, using: &random))
                try controller.moveObject(from: source, to: destination, orderKey: "position")
            }
        }
        if Bool.random(using: &random) { try world.context.save() } else { world.context.processPendingChanges() }
    }

    @Test(arguments: TestScale.seeds(3, stress: 20))
    func everyBatchOfAStreamHoldsTheResultsAfterItWhereverAndWhenItIsRead(seed: UInt64) async throws {
        let world = try ItemWorld()
        defer { world.remove() }
        var random = SeededGenerator(seed: seed)
        var request = FetchRequest(entity: "Item", sortKeys: [SortKey("position")])
        request.includesPendingChanges = true
        let controller = FetchedResultsController(
            fetchRequest: request, context: world.context, sectionNameKeyPath: "group")
        let recorder = SnapshotRecorder()
        recorder.deliversWholeBatches = seed % 2 == 1
        controller.delegate = recorder
        // A stream made before the first fetch, one with the user's batches too, and one made later.
        let early = controller.batches()
        let withUsers = controller.batches(includingUserDriven: true)
        var serial = 0
        for _ in 0..<40 {
            serial += 1
            try world.add("i\(serial)", group: ["A", "B", nil][serial % 3], position: Double(serial % 7))
        }
        try world.context.save()
        try controller.performFetch()
        let steps = TestScale.size(150, stress: 1500)
        for _ in 0..<steps / 3 { try edit(world, controller, &random, serial: &serial) }
        let lateFrom = recorder.after.count
        let late = controller.batches()
        for _ in steps / 3..<steps { try edit(world, controller, &random, serial: &serial) }

        let all = recorder.after
        let others = all.filter { !$0.isUserDriven }.map(\.snapshot)
        let othersLate = all[lateFrom...].filter { !$0.isUserDriven }.map(\.snapshot)
        #expect(all.contains { $0.isUserDriven } && others.count > steps / 2, "the workload made both kinds")

        /// The stream's first `count` batches.
        func read(_ stream: AsyncThrowingStream<ResultsBatch, any Error>, _ count: Int) async throws -> [ResultsBatch] {
            var batches: [ResultsBatch] = []
            var iterator = stream.makeAsyncIterator()
            while batches.count < count, let batch = try await iterator.next() { batches.append(batch) }
            return batches
        }
        // Read in order, every other one only, backwards: each is the results after its batch.
        let earlyBatches = try await read(early, others.count)
        #expect(earlyBatches.map(\.snapshot) == others)
        let userBatches = try await read(withUsers, all.count)
        #expect(userBatches.map(\.isUserDriven) == all.map(\.isUserDriven))
        for index in stride(from: 0, to: userBatches.count, by: 2) {
            #expect(userBatches[index].snapshot == all[index].snapshot, "batch \(index) of \(all.count)")
        }
        let lateBatches = try await read(late, othersLate.count)
        #expect(lateBatches.reversed().map(\.snapshot) == othersLate.reversed())
        // The stream with every batch built its snapshots on demand but for the first and one per 256 changes at
        // most (the results are fewer than 256 objects: a chain ends when its changes outnumber them).
        let built = userBatches.filter(\.isBuiltOnDemand).count
        let changes = userBatches.reduce(0) { $0 + $1.changes.count }
        #expect(
            userBatches.count - built <= 1 + changes / 256, "\(built) of \(userBatches.count) built on demand")
    }

    @Test func aLongStreamKeepsBatchesTheSizeOfTheirChanges() async throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let count = TestScale.size(1_000, stress: 5_000)
        for index in 0..<count { try world.add("i\(index)", group: "G\(index % 10)", position: Double(index)) }
        try world.context.save()
        let controller = try world.controller(sort: [SortKey("position")], delegate: RecordingDelegate())
        let batches = controller.batches()
        // One change per batch: until the changes add up to the results' size, each batch is built on demand (no
        // copy of the 1,000 or 5,000 rows per batch), then one is built from the controller and a new chain
        // starts.
        let changes = count + 10
        for step in 0..<changes {
            try world.items["i\(step % count)"]!.setValue(.double(Double(count + step)), forKey: "position")
            try world.context.save()
        }
        var iterator = batches.makeAsyncIterator()
        var onDemand = 0
        var last: ResultsBatch?
        for _ in 0..<changes {
            let batch = try #require(try await iterator.next())
            if batch.isBuiltOnDemand { onDemand += 1 }
            last = batch
        }
        #expect(onDemand >= changes - 3, "\(onDemand) of \(changes) batches built on demand")
        #expect(try #require(last).snapshot == controller.snapshot)
    }
}
