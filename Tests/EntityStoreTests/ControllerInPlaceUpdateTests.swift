import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// Rows whose changes name no key the controller reads are updated in place: not read, removed or re-inserted. The
/// batch must still be exactly the one the whole-list computation gives.
@Suite struct ControllerInPlaceUpdateTests {
    /// A controller on the incremental path (its delegate takes no whole batches) and a twin on the whole-list one.
    static func twins(
        _ world: ItemWorld, sectioned: Bool = false, predicate: String? = nil
    ) throws -> (incremental: RecordingDelegate, whole: RecordingDelegate, controllers: [FetchedResultsController]) {
        let incremental = RecordingDelegate()
        let whole = RecordingDelegate()
        whole.deliversWholeBatches = true
        let controllers = [
            try world.controller(sectioned: sectioned, predicate: predicate, delegate: incremental),
            try world.controller(sectioned: sectioned, predicate: predicate, delegate: whole),
        ]
        return (incremental, whole, controllers)
    }

    @Test func aChangeToAKeyNotReadIsAnUpdateAtItsOldAndNewPaths() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        for (i, title) in ["a", "b", "c", "d"].enumerated() { try world.add(title, group: "G", rank: Int64(i)) }
        try world.add("out", group: "G", rank: 99)
        try world.context.save()
        let (incremental, whole, controllers) = try Self.twins(world, predicate: "rank < 50")
        // c's title (not read) and a's rank (read): a moves past d, so c's update goes from [0,2] to [0,1].
        try world.items["c"]!.setValue(.string("c2"), forKey: "title")
        try world.items["a"]!.setValue(.int(10), forKey: "rank")
        // A row outside the results whose change reads nothing stays out, unreported.
        try world.items["out"]!.setValue(.string("still out"), forKey: "title")
        world.context.processPendingChanges()
        #expect(incremental.take() == ["move a [0,0]->[0,3]", "upd c [0,2]->[0,1]"])
        #expect(whole.take() == ["move a [0,0]->[0,3]", "upd c [0,2]->[0,1]"])
        #expect(world.layout(controllers[0]) == ":b,c,d,a")
        // Only keys nobody reads: one update, nothing moves.
        try world.items["d"]!.setValue(.double(5), forKey: "position")
        world.context.processPendingChanges()
        #expect(incremental.take() == ["upd d [0,2]->[0,2]"])
        #expect(whole.take() == ["upd d [0,2]->[0,2]"])
    }

    /// Two rows swap: moving either is one move, and the tie goes to moving the one whose keys changed. A row
    /// updated in place counts as changed (its run weighs less) exactly as in the whole-list computation.
    @Test func aRowUpdatedInPlaceWeighsAsChangedWhenRunsTie() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        try world.add("a", group: "G", rank: 1)
        try world.add("b", group: "G", rank: 2)
        try world.context.save()
        let (incremental, whole, controllers) = try Self.twins(world)
        try world.items["a"]!.setValue(.string("a2"), forKey: "title")
        try world.items["b"]!.setValue(.int(0), forKey: "rank")
        world.context.processPendingChanges()
        let expected = whole.take()
        #expect(expected == ["move a [0,0]->[0,1]", "upd b [0,1]->[0,0]"])
        #expect(incremental.take() == expected)
        #expect(world.layout(controllers[0]) == ":b,a")
    }

    /// Sections: an in-place row in a section where other rows move, and one in a section nothing else touches.
    @Test func inPlaceRowsInTouchedAndUntouchedSectionsMatchTheWholeListBatch() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        var g = SeededGenerator(seed: 77)
        for i in 0..<40 { try world.add("t\(i)", group: ["A", "B", "C"][i % 3], rank: Int64(i)) }
        try world.context.save()
        let (incremental, whole, controllers) = try Self.twins(world, sectioned: true)
        for round in 0..<60 {
            let items = world.items.values.sorted { $0.objectID.primaryKey < $1.objectID.primaryKey }
            for _ in 0..<Int.random(in: 1...6, using: &g) {
                let item = items.randomElement(using: &g)!
                switch Int.random(in: 0..<3, using: &g) {
                case 0: try item.setValue(.int(Int64.random(in: 0..<40, using: &g)), forKey: "rank")
                case 1: try item.setValue(.string("r\(round)"), forKey: "title")
                default: try item.setValue(.double(Double(round)), forKey: "position")
                }
            }
            world.context.processPendingChanges()
            #expect(incremental.take() == whole.take(), "round \(round)")
            #expect(controllers[0].sections.map(\.objectIDs) == controllers[1].sections.map(\.objectIDs))
        }
    }

    /// A row inserted and then changed in one batch is an insert, whatever keys the later change names: the
    /// membership change sticks to the row across the batch's records.
    @Test func anInsertFollowedByAnUpdateInOneBatchStaysAnInsert() {
        let id = ObjectID(entityName: "Item", primaryKey: 7)
        var affected = FetchedResultsController.AffectedRows()
        affected.note(id, [], false, structural: true)
        affected.note(id, ["title"], false, structural: false)
        #expect(affected.ids == [id])
        #expect(affected.rows.first?.isStructural == true && affected.rows.first?.keys == ["title"])
        var updated = FetchedResultsController.AffectedRows()
        updated.note(id, ["title"], true, structural: false)
        updated.note(id, ["position"], false, structural: false)
        #expect(updated.rows.first?.isStructural == false && updated.rows.first?.isUserDriven == false)
    }

    /// Rows noted out of order (several records of one save, dependents found through relationships) come out in
    /// ID order, each ID once, its changes joined in the order noted.
    @Test func affectedRowsComeOutInIDOrderEachOnce() {
        var g = SeededGenerator(seed: 5)
        var affected = FetchedResultsController.AffectedRows()
        var reference: [ObjectID: (keys: [String], userDriven: Bool, structural: Bool)] = [:]
        for step in 0..<400 {
            let id = ObjectID(
                entityName: Bool.random(using: &g) ? "Item" : "Group", primaryKey: UInt64.random(in: 1...60, using: &g))
            let keys = step % 3 == 0 ? [] : ["k\(step % 5)"]
            let userDriven = Bool.random(using: &g)
            let structural = step % 7 == 0
            affected.note(id, keys, userDriven, structural: structural)
            let before = reference[id]
            reference[id] = (
                (before?.keys ?? []) + keys, (before?.userDriven ?? true) && userDriven,
                (before?.structural ?? false) || structural
            )
        }
        affected.normalize()
        #expect(affected.ids == reference.keys.sorted())
        for (id, row) in zip(affected.ids, affected.rows) {
            #expect(row.keys == reference[id]?.keys)
            #expect(row.isUserDriven == reference[id]?.userDriven)
            #expect(row.isStructural == reference[id]?.structural)
        }
    }

    /// A new row whose owner is deleted in the same save: the insert, the delete rule's nullification and the save
    /// are one batch, delivered as an insert on both paths.
    @Test func anInsertAndARelationshipNullifiedInOneSaveIsDeliveredAsAnInsert() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        try world.add("a", group: "G", rank: 1)
        try world.context.save()
        let (incremental, whole, controllers) = try Self.twins(world)
        let owner = try world.context.insert("Owner")
        try owner.setValue(.string("o"), forKey: "name")
        let fresh = try world.add("new", group: "G", rank: 2)
        try fresh.setObject(owner, forKey: "owner")
        world.context.processPendingChanges()
        _ = (incremental.take(), whole.take())
        let second = try world.add("second", group: "G", rank: 3)
        try second.setObject(owner, forKey: "owner")
        try world.context.delete(owner)
        try world.context.save()
        let expected = whole.take()
        #expect(expected.contains { $0.hasPrefix("ins") })
        #expect(incremental.take() == expected)
        #expect(controllers[0].fetchedObjectIDs == controllers[1].fetchedObjectIDs)
        #expect(controllers[0].fetchedObjectIDs.contains(second.objectID))
    }
}
