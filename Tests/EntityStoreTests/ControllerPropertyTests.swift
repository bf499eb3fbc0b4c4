import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// A delegate that keeps a replica from callbacks and checks each batch with the strict validator.
final class ReplicaDelegate: FetchedResultsControllerDelegate {
    var replica: CallbackReplica<ObjectID>
    var problems: [String] = []
    var batches = 0
    var updates: [ObjectID] = []
    /// Every callback, for comparing the incremental and the whole-list computations.
    var log: [String] = []

    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        problems.append("the controller failed: \(error)")
    }
    let deliversWholeBatches: Bool

    init(_ controller: FetchedResultsController, wholeBatches: Bool = true) {
        replica = CallbackReplica(controller.sections.map(\.objectIDs))
        deliversWholeBatches = wholeBatches
    }

    func controllerWillChangeContent(_ controller: FetchedResultsController) {
        before = replica.sections
        replica.begin()
        updates = []
        batches += 1
        log.append("will")
    }
    func controller(
        _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
        for type: ResultsChangeType, newIndexPath: ItemPath?
    ) {
        log.append(
            "\(type) \(objectID) \(indexPath.map(\.description) ?? "-") \(newIndexPath.map(\.description) ?? "-")")
        switch type {
        case .delete: replica.delete(at: indexPath!.section, indexPath!.item)
        case .insert: replica.insert(objectID, at: newIndexPath!.section, newIndexPath!.item)
        case .move:
            replica.move(
                objectID, from: (indexPath!.section, indexPath!.item), to: (newIndexPath!.section, newIndexPath!.item))
        case .update: updates.append(objectID)
        }
    }
    func controller(
        _ controller: FetchedResultsController, didChange section: SectionInfo, atSectionIndex index: Int,
        for type: ResultsChangeType
    ) {
        log.append("section \(type) \(index) \(section.name) \(section.objectIDs)")
        if type == .insert {
            replica.insertSection(index, items: section.objectIDs)
        } else {
            replica.deleteSection(index)
        }
    }
    /// The whole-batch forms of the batch being delivered, checked against the callbacks when it ends.
    var wholeBatch: (changes: [[ObjectID]]?, snapshot: [[ObjectID]]?, difference: CollectionDifference<ObjectID>?)
    var before: [[ObjectID]] = []

    func controller(_ controller: FetchedResultsController, didChangeContentWith changes: ChangeSet<Value, ObjectID>) {
        problems += BatchValidator.problems(changes)
        if (try? changes.apply(to: changes.old)) != changes.new { problems.append("apply(old) != new") }
        wholeBatch.changes = changes.new.sections.map(\.items)
    }
    func controller(_ controller: FetchedResultsController, didChangeContentWith snapshot: ResultsSnapshot) {
        wholeBatch.snapshot = snapshot.itemIdentifiers
    }
    func controller(
        _ controller: FetchedResultsController, didChangeContentWith difference: CollectionDifference<ObjectID>
    ) {
        wholeBatch.difference = difference
    }
    func controllerDidChangeContent(_ controller: FetchedResultsController) {
        if let problem = replica.end() { problems.append(problem) }
        // The whole-batch forms agree with what the callbacks did.
        if deliversWholeBatches {
            if wholeBatch.changes != replica.sections { problems.append("the change set's new lists differ") }
            if wholeBatch.snapshot != replica.sections { problems.append("the snapshot differs") }
            if controller.sectionNameKeyPath == nil {
                let flat = before.flatMap { $0 }
                if let difference = wholeBatch.difference {
                    if flat.applying(difference) != replica.sections.flatMap({ $0 }) {
                        problems.append("the CollectionDifference does not lead to the new list")
                    }
                } else {
                    problems.append("no CollectionDifference for a controller without sections")
                }
            }
        }
        wholeBatch = (nil, nil, nil)
        // Updates name objects that are still there, at their new paths.
        for id in updates where controller.indexPath(for: id) == nil { problems.append("update of a vanished \(id)") }
    }
}

@Suite struct ControllerPropertyTests {
    @Test func randomBatchesKeepEveryControllerAndReplicaEqualToAFreshFetch() throws { try randomBatches(seed: 0xF00D) }

    /// The test's workload from `seed` (other seeds: a scratch harness's sweeps).
    func randomBatches(seed: UInt64) throws {
        let world = try ItemWorld()
        defer { world.remove() }
        var g = SeededGenerator(seed: seed)
        let groups: [String?] = ["A", "B", "C", "D", nil]
        for i in 0..<25 {
            try world.add("i\(i)", group: groups.randomElement(using: &g)!, rank: Int64.random(in: 0..<100, using: &g))
        }
        try world.context.save()

        func makeController(
            _ configure: (inout FetchRequest) throws -> Void, section: String?
        ) throws
            -> FetchedResultsController
        {
            var request = FetchRequest(entity: "Item", sortKeys: [SortKey("rank")])
            try configure(&request)
            let controller = FetchedResultsController(
                fetchRequest: request, context: world.context, sectionNameKeyPath: section)
            try controller.performFetch()
            return controller
        }
        let controllers = [
            try makeController({ $0.predicate = try FetchPredicate("rank < 70") }, section: "group"),
            try makeController(
                {
                    $0.fetchOffset = 3; $0.fetchLimit = 8
                }, section: nil),
            try makeController(
                { $0.sortKeys = [SortKey("group", ascending: false), SortKey("title")] }, section: "group"),
        ]
        // Twins of the unwindowed controllers whose delegates do not want whole batches: they take the incremental
        // path, and must deliver exactly what the whole-list computation delivers.
        let twins = [
            try makeController({ $0.predicate = try FetchPredicate("rank < 70") }, section: "group"),
            try makeController(
                { $0.sortKeys = [SortKey("group", ascending: false), SortKey("title")] }, section: "group"),
        ]
        // One twin always rebuilds its rows in one pass, the other always moves them one by one.
        twins[0].mergeThreshold = .max
        twins[1].mergeThreshold = 0
        let delegates = controllers.map { ReplicaDelegate($0) }
        let twinDelegates = twins.map { ReplicaDelegate($0, wholeBatches: false) }
        for (controller, delegate) in zip(controllers + twins, delegates + twinDelegates) {
            controller.delegate = delegate
        }

        var next = 25
        for round in 0..<TestScale.size(400, stress: 3_000) {
            let live = try world.context.fetch(FetchRequest(entity: "Item"))
            let userDriven = Int.random(in: 0..<8, using: &g) == 0
            func mutate() throws {
                for _ in 0..<Int.random(in: 1...4, using: &g) {
                    switch Int.random(in: 0..<10, using: &g) {
                    case 0, 1:
                        try world.add(
                            "i\(next)", group: groups.randomElement(using: &g)!,
                            rank: Int64.random(in: 0..<100, using: &g))
                        next += 1
                    case 2:
                        if let victim = live.randomElement(using: &g), !victim.isDeleted {
                            try world.context.delete(victim)
                        }
                    // (An object deleted earlier in this round is skipped: a write to it is refused.)
                    case 3, 4:
                        if let object = live.randomElement(using: &g), !object.isDeleted {
                            try object.setValue(.int(Int64.random(in: 0..<100, using: &g)), forKey: "rank")
                        }
                    case 5, 6:
                        if let object = live.randomElement(using: &g), !object.isDeleted {
                            try object.setValue(
                                groups.randomElement(using: &g)!.map(Value.string) ?? .null, forKey: "group")
                        }
                    case 7:
                        if let object = live.randomElement(using: &g), !object.isDeleted {
                            try object.setValue(.string("t\(round)"), forKey: "title")
                        }
                    default:
                        if let object = live.randomElement(using: &g), !object.isDeleted {
                            try object.setValue(try object["rank"], forKey: "rank")  // an equal write
                        }
                    }
                }
            }
            if userDriven {
                try world.context.performUserDrivenChanges(mutate)
                // The UI made these changes itself (a user's drag): it shows the new state already.
                for (controller, delegate) in zip(controllers + twins, delegates + twinDelegates) {
                    delegate.replica.sections = controller.sections.map(\.objectIDs)
                }
            } else {
                try mutate()
            }
            switch Int.random(in: 0..<6, using: &g) {
            case 0: try world.context.save()
            case 1: world.context.rollback()
            default: world.context.processPendingChanges()
            }
            world.context._checkInvariants()
            for (twin, original) in [(0, 0), (1, 2)] {
                // Before anything builds the display: the lookups answer from the rows by binary search.
                for (section, ids) in twinDelegates[twin].replica.sections.enumerated() {
                    for (item, id) in ids.enumerated() {
                        let path = ItemPath(section: section, item: item)
                        if twins[twin].indexPath(for: id) != path || twins[twin].objectID(at: path) != id {
                            Issue.record("round \(round) twin \(twin): lookups disagree at \(path)")
                        }
                    }
                }
                #expect(twinDelegates[twin].log == delegates[original].log, "round \(round) twin \(twin)")
                #expect(twins[twin].sections.map(\.objectIDs) == controllers[original].sections.map(\.objectIDs))
                #expect(twinDelegates[twin].replica.sections == twins[twin].sections.map(\.objectIDs), "round \(round)")
                for (section, info) in twins[twin].sections.enumerated() {
                    for (item, id) in info.objectIDs.enumerated()
                    where twins[twin].indexPath(for: id) != ItemPath(section: section, item: item) {
                        Issue.record("round \(round): indexPath(for:) disagrees")
                    }
                }
                twinDelegates[twin].log = []
                delegates[original].log = []
            }
            delegates[1].log = []
            for (index, controller) in controllers.enumerated() {
                let fresh = FetchedResultsController(
                    fetchRequest: controller.fetchRequest, context: world.context,
                    sectionNameKeyPath: controller.sectionNameKeyPath)
                try fresh.performFetch()
                #expect(
                    controller.sections.map(\.objectIDs) == fresh.sections.map(\.objectIDs),
                    "round \(round) controller \(index)")
                #expect(
                    controller.sections.map(\.name) == fresh.sections.map(\.name), "round \(round) controller \(index)")
                #expect(
                    delegates[index].replica.sections == controller.sections.map(\.objectIDs),
                    "round \(round) controller \(index)")
            }
        }
        for delegate in delegates + twinDelegates {
            #expect(delegate.problems.isEmpty, "\(delegate.problems.prefix(5))")
            #expect(delegate.batches > 100)
        }
    }
}

@Suite struct SectionComparisonTests {
    /// A section key sorted by a comparison that ties distinct values ("a", "A" and "á" ignoring case and
    /// diacritics): each value is a section of its own, side by side in value order, whatever the edits, on the
    /// incremental path and the whole-list one alike, and no two sections share a name.
    @Test(arguments: [SortKey.Comparison.caseInsensitive, .caseDiacriticInsensitive, .localizedStandard])
    func sectionsThatTheComparisonTiesHoldOneValueEach(comparison: SortKey.Comparison) throws {
        let groups: [String?] = ["a", "A", "\u{E1}", "a\u{301}", "\u{C1}", "b", "B", "file2", "File2", "file10", nil]
        try checkSections(comparison: comparison, groups: groups, rounds: 300)
    }

    /// The same over hostile text (decomposed accents, `ß` and `ẞ`, `İ`, the Kelvin sign, NUL, emoji, numbers with
    /// leading zeros), where Swift's `<` and Foundation's `compare` give no consistent order on Linux.
    @Test(arguments: [
        SortKey.Comparison.binary, .caseInsensitive, .diacriticInsensitive, .caseDiacriticInsensitive,
        .localizedStandard,
    ])
    func sectionsOfHostileTextStayInTheirOrder(comparison: SortKey.Comparison) throws {
        var g = SeededGenerator(seed: 0x7E47)
        // Not the empty text, whose section is named as the nil value's is.
        var groups: [String?] = (0..<14).map { _ in TextQueryOracleTests.text(&g) }.filter { !$0.isEmpty }
        groups += groups.compactMap { $0?.decomposedStringWithCanonicalMapping }.prefix(4).map { $0 }
        groups += groups.compactMap { $0?.uppercased() }.prefix(4).map { $0 }
        groups.append(nil)
        try checkSections(comparison: comparison, groups: groups, rounds: 80)
    }

    func checkSections(comparison: SortKey.Comparison, groups: [String?], rounds: Int) throws {
        let world = try ItemWorld()
        defer { world.remove() }
        var g = SeededGenerator(seed: 0x5EC7)
        for i in 0..<20 { try world.add("i\(i)", group: groups.randomElement(using: &g)!, rank: Int64(i % 5)) }
        try world.context.save()
        var controllers: [FetchedResultsController] = []
        var delegates: [ReplicaDelegate] = []
        for ascending in [true, false] {
            for threshold in [Int.max, 0] {
                let request = FetchRequest(
                    entity: "Item",
                    sortKeys: [SortKey("group", ascending: ascending, comparison: comparison), SortKey("rank")])
                let controller = FetchedResultsController(
                    fetchRequest: request, context: world.context, sectionNameKeyPath: "group")
                controller.mergeThreshold = threshold
                try controller.performFetch()
                let delegate = ReplicaDelegate(controller, wholeBatches: threshold == 0)
                controller.delegate = delegate
                controllers.append(controller)
                delegates.append(delegate)
            }
        }
        for round in 0..<rounds {
            var live = try world.context.fetch(FetchRequest(entity: "Item"))
            for _ in 0..<Int.random(in: 1...3, using: &g) {
                live.removeAll(where: \.isDeleted)
                switch Int.random(in: 0..<4, using: &g) {
                case 0: try world.add("n\(round)", group: groups.randomElement(using: &g)!)
                case 1:
                    if let victim = live.randomElement(using: &g), !victim.isDeleted {
                        try world.context.delete(victim)
                    }
                default:
                    try live.randomElement(using: &g)?.setValue(
                        groups.randomElement(using: &g)!.map(Value.string) ?? .null, forKey: "group")
                }
            }
            if Bool.random(using: &g) { try world.context.save() } else { world.context.processPendingChanges() }
            for (controller, delegate) in zip(controllers, delegates) {
                let fresh = FetchedResultsController(
                    fetchRequest: controller.fetchRequest, context: world.context, sectionNameKeyPath: "group")
                try fresh.performFetch()
                let names = controller.sections.map(\.name)
                #expect(names == fresh.sections.map(\.name), "round \(round)")
                #expect(controller.sections.map(\.objectIDs) == fresh.sections.map(\.objectIDs), "round \(round)")
                #expect(delegate.replica.sections == controller.sections.map(\.objectIDs), "round \(round)")
                #expect(Set(names).count == names.count, "round \(round): \(names)")
                // In order: by the comparison, then by value.
                let key = controller.fetchRequest.sortKeys[0]
                // Each section's value, read from its first object (every section has one).
                let values = try controller.sections.map { section in
                    try world.context.object(with: try #require(section.objectIDs.first))["group"]
                }
                for (a, b) in zip(values, values.dropFirst()) {
                    let order = key.order(a, b)
                    #expect(
                        order == .orderedAscending
                            || (order == .orderedSame
                                && SortKey("group", ascending: key.ascending).order(a, b)
                                    == .orderedAscending),
                        "round \(round): \(a) then \(b)")
                }
            }
        }
        for delegate in delegates { #expect(delegate.problems.isEmpty, "\(delegate.problems.prefix(3))") }
    }

    /// Values a section treats as one (zeros of either sign, every NaN) give it one name, whichever of its objects
    /// came first: the name a controller kept through edits is the name a fresh fetch gives.
    @Test func aSectionOfEqualValuesHasOneNameWhateverCameFirst() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Item", sortKeys: [SortKey("title")]), context: world.context,
            sectionNameKeyPath: "position")
        try controller.performFetch()
        try world.add("plus", group: nil, position: 0.0)
        try world.add("nan", group: nil, position: .nan)
        try world.context.save()
        try world.add("minus", group: nil, position: -0.0)
        try world.add("other nan", group: nil, position: -Double.nan)
        try world.context.save()
        try world.context.delete(world.items["plus"]!)
        try world.context.delete(world.items["nan"]!)
        try world.context.save()
        let fresh = FetchedResultsController(
            fetchRequest: controller.fetchRequest, context: world.context, sectionNameKeyPath: "position")
        try fresh.performFetch()
        #expect(controller.sections.map(\.name) == ["0.0", "nan"])
        #expect(fresh.sections.map(\.name) == ["0.0", "nan"])
        #expect(controller.snapshot == fresh.snapshot)
    }
}
