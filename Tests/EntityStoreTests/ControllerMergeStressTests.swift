import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// Another context's saves, merged into a screen whose controllers section by an integer key, where sections come
/// and go with nearly every batch: after each processing every controller equals a fresh fetch, and its delegate's
/// replica equals the controller.
@Suite struct ControllerMergeStressTests {
    /// The regression behind a crash in the sync convergence test: a batch taking the one-pass merge that changed
    /// the row count measured the last section's old size against the new count, so a section added after it
    /// started too late (its rows shown in the section before), and a last section emptied by the batch stayed,
    /// with a start past the rows (a trap when its rows were listed).
    @Test(arguments: [true, false])
    func aBatchThatAddsALastSectionStartsItWhereItsRowsAre(ascending: Bool) throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let request = FetchRequest(entity: "Item", sortKeys: [SortKey("rank", ascending: ascending), SortKey("title")])
        let controller = FetchedResultsController(
            fetchRequest: request, context: world.context, sectionNameKeyPath: "rank")
        controller.mergeThreshold = 0  // every batch takes the one-pass merge
        try controller.performFetch()
        try world.add("a", group: nil, rank: 3)
        try world.add("b", group: nil, rank: 3)
        let lonely = try world.add("c", group: nil, rank: ascending ? 4 : 1)
        world.context.processPendingChanges()
        #expect(controller.sections.map(\.objectIDs.count) == [2, 1])
        // The last section's only row goes; a row in a new last section and one more in the first come.
        try world.context.delete(lonely)
        try world.add("d", group: nil, rank: ascending ? 5 : 0)
        try world.add("e", group: nil, rank: 3)
        world.context.processPendingChanges()
        #expect(world.layout(controller) == (ascending ? "3:a,b,e 5:d" : "3:a,b,e 0:d"))
        // The last section empties while the row count grows: it goes.
        try world.context.delete(try #require(world.items["d"]))
        try world.add("f", group: nil, rank: 3)
        try world.add("g", group: nil, rank: 3)
        world.context.processPendingChanges()
        #expect(world.layout(controller) == "3:a,b,e,f,g")
    }

    @Test(arguments: [(true, 0), (true, Int.max), (false, 0), (false, 16)])
    func mergedSavesKeepSectionedControllersEqualToAFreshFetch(ascending: Bool, threshold: Int) throws {
        let world = try ItemWorld()
        defer { world.remove() }
        var g = SeededGenerator(seed: ascending ? 0x5EC7 : 0xD5EC)
        let screen = world.context
        screen.automaticallyMergesChangesFromStore = true
        let writer = ObjectContext(store: world.store, name: "writer")
        let request = FetchRequest(entity: "Item", sortKeys: [SortKey("rank", ascending: ascending), SortKey("title")])
        let controller = FetchedResultsController(fetchRequest: request, context: screen, sectionNameKeyPath: "rank")
        controller.mergeThreshold = threshold
        let delegate = ReplicaDelegate(controller, wholeBatches: false)
        controller.delegate = delegate
        try controller.performFetch()
        var live: [ManagedObject] = []
        var next = 0
        let rounds = TestScale.size(150, stress: 1_200)
        for round in 0..<rounds {
            // One or two saves, merged in one processing: the second may change or delete what the first made.
            for _ in 0..<Int.random(in: 1...2, using: &g) {
                for _ in 0..<Int.random(in: 1...[3, 12, 40].randomElement(using: &g)!, using: &g) {
                    switch Int.random(in: 0..<8, using: &g) {
                    case 0, 1, 2:
                        let title = "t\(Int.random(in: 0..<30, using: &g))-\(next)"
                        live.append(
                            try world.add(title, group: nil, rank: Int64.random(in: 0..<6, using: &g), in: writer))
                        next += 1
                    case 3, 4:
                        guard !live.isEmpty else { continue }
                        try writer.delete(live.remove(at: Int.random(in: 0..<live.count, using: &g)))
                    case 5, 6:
                        try live.randomElement(using: &g)?.setValue(
                            .int(Int64.random(in: 0..<6, using: &g)), forKey: "rank")
                    default:
                        try live.randomElement(using: &g)?.setValue(
                            .string("t\(Int.random(in: 0..<30, using: &g))"), forKey: "title")
                    }
                }
                try writer.save()
            }
            screen.processPendingChanges()
            try Self.expectAsFreshFetch(controller, delegate, "round \(round)")
        }
        #expect(delegate.problems.isEmpty, "\(delegate.problems.prefix(5))")
        #expect(delegate.batches > rounds * 3 / 4)
        #expect(next > rounds)
    }

    /// Fifteen controllers on one screen (sections by a string with nil or by an integer, flat, with a predicate,
    /// windowed; each on both batch paths and the default threshold) follow random batches of one to sixty changes,
    /// made by the screen itself (processed or saved) or saved by another context and merged.
    @Test(arguments: [11, 12, 13, 14])
    func ownAndMergedBatchesKeepEveryKindOfControllerEqualToAFreshFetch(seed: Int) throws {
        let world = try ItemWorld()
        defer { world.remove() }
        var g = SeededGenerator(seed: UInt64(seed))
        let screen = world.context
        screen.automaticallyMergesChangesFromStore = true
        screen.mergePolicy = .propertyLevel
        let writer = ObjectContext(store: world.store, name: "writer")
        writer.automaticallyMergesChangesFromStore = true
        writer.mergePolicy = .propertyLevel
        let groups: [String?] = ["A", "B", "C", nil]
        var filtered = FetchRequest(entity: "Item", sortKeys: [SortKey("rank"), SortKey("title")])
        filtered.predicate = try FetchPredicate("rank < 6")
        var windowed = FetchRequest(entity: "Item", sortKeys: [SortKey("rank"), SortKey("title")])
        (windowed.fetchOffset, windowed.fetchLimit) = (3, 10)
        let configurations: [(FetchRequest, String?)] = [
            (FetchRequest(entity: "Item", sortKeys: [SortKey("group"), SortKey("rank")]), "group"),
            (FetchRequest(entity: "Item", sortKeys: [SortKey("group", ascending: false), SortKey("title")]), "group"),
            (FetchRequest(entity: "Item", sortKeys: [SortKey("rank", ascending: false)]), nil),
            (filtered, "rank"),
            (windowed, "rank"),
        ]
        var controllers: [FetchedResultsController] = []
        var delegates: [ReplicaDelegate] = []
        for (request, section) in configurations {
            for threshold in [0, 16, Int.max] {
                let controller = FetchedResultsController(
                    fetchRequest: request, context: screen, sectionNameKeyPath: section)
                controller.mergeThreshold = threshold
                try controller.performFetch()
                let delegate = ReplicaDelegate(controller, wholeBatches: Bool.random(using: &g))
                controller.delegate = delegate
                controllers.append(controller)
                delegates.append(delegate)
            }
        }
        var next = 0
        for round in 0..<TestScale.size(30, stress: 180) {
            let own = Bool.random(using: &g)
            let context = own ? screen : writer
            context.processPendingChanges()  // the other context's last save
            let live = try context.fetch(FetchRequest(entity: "Item"))
            func someLive() -> ManagedObject? { live.filter { !$0.isDeleted }.randomElement(using: &g) }
            for _ in 0..<Int.random(in: 1...[2, 10, 60].randomElement(using: &g)!, using: &g) {
                switch Int.random(in: 0..<9, using: &g) {
                case 0, 1, 2:
                    let title = "t\(Int.random(in: 0..<20, using: &g))-\(next)"
                    let rank = Int64.random(in: 0..<8, using: &g)
                    try world.add(title, group: groups.randomElement(using: &g)!, rank: rank, in: context)
                    next += 1
                case 3, 4:
                    if let victim = someLive() { try context.delete(victim) }
                case 5:
                    try someLive()?.setValue(.int(Int64.random(in: 0..<8, using: &g)), forKey: "rank")
                case 6:
                    try someLive()?.setValue(
                        groups.randomElement(using: &g)!.map(Value.string) ?? .null, forKey: "group")
                case 7:
                    try someLive()?.setValue(.string("t\(Int.random(in: 0..<20, using: &g))"), forKey: "title")
                default:
                    try someLive()?.setValue(.double(Double(round)), forKey: "position")  // read by no controller
                }
            }
            if own && Bool.random(using: &g) {
                screen.processPendingChanges()
            } else {
                try context.save()
                screen.processPendingChanges()
            }
            for (index, (controller, delegate)) in zip(controllers, delegates).enumerated() {
                try Self.expectAsFreshFetch(controller, delegate, "round \(round) controller \(index)")
            }
        }
        for (index, delegate) in delegates.enumerated() {
            #expect(delegate.problems.isEmpty, "controller \(index): \(delegate.problems.prefix(3))")
        }
        #expect(delegates.allSatisfy { $0.batches > 10 })
    }

    /// Expects `controller` to show what a fresh fetch of its request in its context shows (rows and section
    /// names), its delegate's replica to show the same, and its lookups to agree with its sections.
    static func expectAsFreshFetch(
        _ controller: FetchedResultsController, _ delegate: ReplicaDelegate, _ label: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let fresh = FetchedResultsController(
            fetchRequest: controller.fetchRequest, context: controller.context,
            sectionNameKeyPath: controller.sectionNameKeyPath)
        try fresh.performFetch()
        let shown = controller.sections.map(\.objectIDs)
        #expect(shown == fresh.sections.map(\.objectIDs), "\(label)", sourceLocation: sourceLocation)
        #expect(
            controller.sections.map(\.name) == fresh.sections.map(\.name), "\(label)", sourceLocation: sourceLocation)
        #expect(delegate.replica.sections == shown, "\(label): the replica differs", sourceLocation: sourceLocation)
        for (section, ids) in shown.enumerated() {
            for (item, id) in ids.enumerated()
            where controller.indexPath(for: id) != ItemPath(section: section, item: item) {
                Issue.record("\(label): indexPath(for: \(id)) disagrees", sourceLocation: sourceLocation)
            }
        }
    }
}
