import EntityStore
import Foundation
import TestSupport
import Testing

@Suite struct ControllerTests {
    @Test func performFetchGroupsSectionsAndAnswersPathQueries() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        try world.add("k1", group: "K", rank: 1)
        try world.add("l1", group: "L", rank: 1)
        try world.add("k2", group: "K", rank: 2)
        try world.add("none", group: nil, rank: 5)
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        #expect(world.layout(controller) == ":none K:k1,k2 L:l1")  // nil sorts first
        #expect(controller.sections.map(\.numberOfObjects) == [1, 2, 1])
        #expect(try controller.object(at: ItemPath(section: 1, item: 1)) === world.items["k2"])
        #expect(controller.indexPath(for: world.items["l1"]!) == ItemPath(section: 2, item: 0))
        #expect(controller.sectionIndexTitles == ["K", "L"])
        #expect(controller.section(forSectionIndexTitle: "L", at: 1) == 2)
        #expect(controller.fetchedObjectIDs.count == 4)
        #expect(
            entityStoreError { _ = try controller.object(at: ItemPath(section: 9, item: 0)) }?.code
                == .invalidFetchRequest)
        #expect(delegate.calls.isEmpty)  // the first fetch delivers nothing
    }

    @Test func theWorkedExamplesOfTheContractThroughRealObjects() throws {
        // K:[k1,k2] L:[l1] | k2 moves to section M | delete [0,1]; section insert 2
        do {
            let world = try ItemWorld()
            defer { world.remove() }
            try world.add("k1", group: "K", rank: 1)
            let k2 = try world.add("k2", group: "K", rank: 2)
            try world.add("l1", group: "L", rank: 1)
            try world.context.save()
            let delegate = RecordingDelegate()
            let controller = try world.controller(delegate: delegate)
            try k2.setValue("M", forKey: "group")
            world.context.processPendingChanges()
            #expect(delegate.calls == ["will", "del k2 [0,1]", "sins 2", "did"])
            #expect(world.layout(controller) == "K:k1 L:l1 M:k2")
        }
        // K:[k1] L:[l1,l2] | k1 moves to section L, before l1 | section delete 0; row insert [0,0]
        do {
            let world = try ItemWorld()
            defer { world.remove() }
            let k1 = try world.add("k1", group: "K", rank: 0)
            try world.add("l1", group: "L", rank: 1)
            try world.add("l2", group: "L", rank: 2)
            try world.context.save()
            let delegate = RecordingDelegate()
            let controller = try world.controller(delegate: delegate)
            try k1.setValue("L", forKey: "group")
            world.context.processPendingChanges()
            #expect(delegate.take() == ["sdel 0", "ins k1 [0,0]"])
            #expect(world.layout(controller) == "L:k1,l1,l2")
        }
        // K:[p,q,r,s] | q's sort key now sorts after s | move [0,1]->[0,3] only
        do {
            let world = try ItemWorld()
            defer { world.remove() }
            try world.add("p", group: "K", rank: 1)
            let q = try world.add("q", group: "K", rank: 2)
            try world.add("r", group: "K", rank: 3)
            try world.add("s", group: "K", rank: 4)
            try world.context.save()
            let delegate = RecordingDelegate()
            let controller = try world.controller(delegate: delegate)
            defer { withExtendedLifetime(controller) {} }
            try q.setValue(9, forKey: "rank")
            world.context.processPendingChanges()
            #expect(delegate.take() == ["move q [0,1]->[0,3]"])
        }
        // K:[p,q] L:[r] M:[t] | q moves to M, sorting last; t's title changes | move [0,1]->[2,1]; update t
        do {
            let world = try ItemWorld()
            defer { world.remove() }
            try world.add("p", group: "K", rank: 1)
            let q = try world.add("q", group: "K", rank: 2)
            try world.add("r", group: "L", rank: 1)
            let t = try world.add("t", group: "M", rank: 1)
            try world.context.save()
            let delegate = RecordingDelegate()
            let controller = try world.controller(delegate: delegate)
            defer { withExtendedLifetime(controller) {} }
            try q.setValue("M", forKey: "group")
            try t.setValue("t2", forKey: "title")
            world.context.processPendingChanges()
            #expect(delegate.take() == ["move q [0,1]->[2,1]", "upd t [2,0]->[2,0]"])
        }
        // K:[p] | p's title is set to the title it already has | nothing: no will/did
        do {
            let world = try ItemWorld()
            defer { world.remove() }
            let p = try world.add("p", group: "K")
            try world.context.save()
            let delegate = RecordingDelegate()
            let controller = try world.controller(delegate: delegate)
            defer { withExtendedLifetime(controller) {} }
            try p.setValue("p", forKey: "title")
            world.context.processPendingChanges()
            try world.context.save()
            #expect(delegate.calls.isEmpty)
        }
    }

    @Test func seed004AnObjectThatChangesSectionAtTheSameIndexPathIsAMove() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let a = try world.add("a", group: "A")
        let x = try world.add("x", group: "B", rank: 1)
        try world.add("b", group: "B", rank: 2)
        try world.add("c", group: "C", rank: 2)
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        try world.context.delete(a)
        try x.setValue("C", forKey: "group")
        world.context.processPendingChanges()
        #expect(delegate.take() == ["sdel 0", "move x [1,0]->[1,0]"])
        #expect(world.layout(controller) == "B:b C:x,c")
    }

    @Test func insertsDeletesAndUpdatesOfUnsavedSavedAndMergedChanges() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        try world.add("a", group: "K", rank: 1)
        let b = try world.add("b", group: "K", rank: 2)
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)

        let c = try world.add("c", group: "K", rank: 3)
        delegate.names[c.objectID] = "c"
        world.context.processPendingChanges()  // unsaved, as in Core Data
        #expect(delegate.take() == ["ins c [0,2]"])
        try world.context.delete(b)
        try world.context.save()  // processed before the save
        #expect(delegate.take() == ["del b [0,1]"])

        // Another context's save, merged.
        let other = ObjectContext(store: world.store)
        let d = try other.insert("Item")
        try d.setValue("d", forKey: "title")
        try d.setValue("K", forKey: "group")
        try d.setValue(0, forKey: "rank")
        try other.existingObject(with: c.objectID).setValue("c!", forKey: "title")
        let saves = Recorder(other)
        try other.save()
        delegate.names[d.objectID] = "d"
        world.context.merge(try #require(saves.saves.last))
        #expect(delegate.take() == ["ins d [0,0]", "upd c [0,1]->[0,2]"])
        #expect(world.layout(controller) == "K:?,a,c")
    }

    @Test func aRollbackDeliversTheInverseBatch() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        try world.add("a", group: "K", rank: 1)
        let b = try world.add("b", group: "K", rank: 2)
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        try b.setValue(0, forKey: "rank")
        try b.setValue("L", forKey: "group")
        world.context.processPendingChanges()
        #expect(delegate.take() == ["del b [0,1]", "sins 1"])
        world.context.rollback()
        #expect(delegate.take() == ["sdel 1", "ins b [0,1]"])
        #expect(world.layout(controller) == "K:a,b")
    }

    @Test func anInsertThenDeleteWithinOneBatchDeliversNothing() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        try world.add("a", group: "K")
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        defer { withExtendedLifetime(controller) {} }
        let temp = try world.add("temp", group: "K")
        try world.context.delete(temp)
        world.context.processPendingChanges()
        #expect(delegate.calls.isEmpty)
    }

    @Test func userDrivenChangesApplySilentlyWhileOthersInTheBatchAreDelivered() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let a = try world.add("a", group: "K", rank: 1)
        try world.add("b", group: "K", rank: 2)
        let c = try world.add("c", group: "K", rank: 3)
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        // Unprocessed: c's title changes (not user-driven); then the user drags a below c.
        try c.setValue("c!", forKey: "title")
        try world.context.performUserDrivenChanges {
            try a.setValue(4, forKey: "rank")
        }
        // The update of c is delivered at c's paths in the state after the user's move: [0,1] -> [0,1].
        #expect(delegate.take() == ["upd c [0,1]->[0,1]"])
        #expect(world.layout(controller) == "K:b,c,a")
        #expect(delegate.userDrivenFlags == [false])
    }

    @Test func aDelegateCanAskForUserDrivenChangesFlagged() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let a = try world.add("a", group: "K", rank: 1)
        try world.add("b", group: "K", rank: 2)
        try world.context.save()
        let delegate = RecordingDelegate()
        delegate.deliversUserDrivenChanges = true
        let controller = try world.controller(delegate: delegate)
        defer { withExtendedLifetime(controller) {} }
        try world.context.performUserDrivenChanges { try a.setValue(3, forKey: "rank") }
        #expect(delegate.take() == ["move a [0,0]->[0,1]"])
        #expect(delegate.userDrivenFlags == [true])
    }

    @Test func theReorderHelperWritesAsLittleAsPossibleAndDeliversNothing() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        for (i, title) in ["a", "b", "c", "d", "e"].enumerated() {
            try world.add(title, group: "K", rank: Int64(i * 10))
        }
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        let writes = Recorder(world.context)
        // Room between b (10) and c (20): one write.
        try controller.moveObject(
            from: ItemPath(section: 0, item: 4), to: ItemPath(section: 0, item: 2), orderKey: "rank")
        #expect(world.layout(controller) == "K:a,b,e,c,d")
        #expect(writes.changes.last?.changes.count == 1)
        #expect(writes.changes.last?.isUserDriven == true)
        #expect(delegate.calls.isEmpty)
        // No room between a (0) and b (10) after packing: b is 10, a is 0; put d between: rank 5, still one write.
        try controller.moveObject(
            from: ItemPath(section: 0, item: 4), to: ItemPath(section: 0, item: 1), orderKey: "rank")
        #expect(world.layout(controller) == "K:a,d,b,e,c")
        // Tightly packed ranks force a shift of the shorter run.
        try world.items["a"]!.setValue(0, forKey: "rank")
        try world.items["d"]!.setValue(1, forKey: "rank")
        try world.items["b"]!.setValue(2, forKey: "rank")
        world.context.processPendingChanges()
        _ = delegate.take()
        try controller.moveObject(
            from: ItemPath(section: 0, item: 4), to: ItemPath(section: 0, item: 1), orderKey: "rank")
        #expect(world.layout(controller) == "K:a,c,d,b,e")
        #expect(delegate.calls.isEmpty)
        try world.context.save()
        let check = FetchedResultsController(
            fetchRequest: controller.fetchRequest, context: ObjectContext(store: world.store),
            sectionNameKeyPath: "group")
        try check.performFetch()
        #expect(check.fetchedObjectIDs == controller.fetchedObjectIDs)
    }

    /// A move whose new order value an int64 cannot hold (after a row at `Int64.max`) fails with the value named,
    /// before any write; moves within range still work there.
    @Test func aReorderPastTheInt64RangeFailsBeforeAnyWrite() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        for (title, rank) in [("a", Int64.min), ("b", Int64.min + 1), ("c", 0), ("d", Int64.max - 1), ("e", Int64.max)]
        {
            try world.add(title, group: "K", rank: rank)
        }
        try world.context.save()
        let controller = try world.controller(delegate: RecordingDelegate())
        for (from, to) in [(2, 4), (2, 0)] {
            let error = entityStoreError {
                try controller.moveObject(
                    from: ItemPath(section: 0, item: from), to: ItemPath(section: 0, item: to), orderKey: "rank")
            }
            #expect(error?.code == .invalidValue && error?.key == "rank", "\(String(describing: error))")
            #expect(!world.context.hasChanges)
            #expect(world.layout(controller) == "K:a,b,c,d,e")
        }
        // Between neighbours with room: one write, in range.
        try controller.moveObject(
            from: ItemPath(section: 0, item: 0), to: ItemPath(section: 0, item: 2), orderKey: "rank")
        #expect(world.layout(controller) == "K:b,c,a,d,e")
        // Descending: after b (Int64.min + 1) there is room for exactly Int64.min, and none after that (planned by
        // negation, without overflow or rounding).
        var descending = controller.fetchRequest
        descending.sortKeys = [SortKey("rank", ascending: false)]
        let reversed = FetchedResultsController(
            fetchRequest: descending, context: world.context, sectionNameKeyPath: "group")
        try reversed.performFetch()
        #expect(world.layout(reversed) == "K:e,d,a,c,b")
        try reversed.moveObject(
            from: ItemPath(section: 0, item: 0), to: ItemPath(section: 0, item: 4), orderKey: "rank")
        #expect(world.layout(reversed) == "K:d,a,c,b,e")
        #expect(try world.items["e"]!["rank"] == .int(.min))
        let past = entityStoreError {
            try reversed.moveObject(
                from: ItemPath(section: 0, item: 0), to: ItemPath(section: 0, item: 4), orderKey: "rank")
        }
        #expect(past?.code == .invalidValue)
        #expect(world.layout(reversed) == "K:d,a,c,b,e")
    }

    @Test func keyPathsThroughToOneRelationshipsReevaluateDependents() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let ann = try world.context.insert("Owner")
        try ann.setValue("Ann", forKey: "name")
        let bob = try world.context.insert("Owner")
        try bob.setValue("Bob", forKey: "name")
        let a = try world.add("a", group: nil, rank: 1)
        let b = try world.add("b", group: nil, rank: 2)
        try a.setObject(ann, forKey: "owner")
        try b.setObject(bob, forKey: "owner")
        try world.context.save()
        let delegate = RecordingDelegate()
        var request = FetchRequest(entity: "Item", sortKeys: [SortKey("rank")])
        request.predicate = try FetchPredicate("owner.name BEGINSWITH 'A'")
        let controller = FetchedResultsController(
            fetchRequest: request, context: world.context, sectionNameKeyPath: "owner.name")
        controller.delegate = delegate
        try controller.performFetch()
        delegate.names = [a.objectID: "a", b.objectID: "b"]
        #expect(controller.sections.map(\.name) == ["Ann"])
        try bob.setValue("Abe", forKey: "name")  // b now matches, in a new section before Ann
        world.context.processPendingChanges()
        #expect(delegate.take() == ["sins 0"])
        #expect(controller.sections.map(\.name) == ["Abe", "Ann"])
        try ann.setValue("Zed", forKey: "name")  // a leaves: its section goes
        world.context.processPendingChanges()
        #expect(delegate.take() == ["sdel 1"])
    }

    @Test func fetchWindowsStayCorrectWhileLive() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        for i in 1...5 { try world.add("i\(i)", group: nil, rank: Int64(i * 10)) }
        try world.context.save()
        let delegate = RecordingDelegate()
        delegate.deliversWholeBatches = true
        var request = FetchRequest(entity: "Item", sortKeys: [SortKey("rank")])
        request.fetchOffset = 1
        request.fetchLimit = 2
        let controller = FetchedResultsController(fetchRequest: request, context: world.context)
        controller.delegate = delegate
        try controller.performFetch()
        for (title, item) in world.items { delegate.names[item.objectID] = title }
        #expect(world.layout(controller) == ":i2,i3")
        let first = try world.add("i0", group: nil, rank: 0)  // before the window: everything shifts by one
        delegate.names[first.objectID] = "i0"
        world.context.processPendingChanges()
        #expect(world.layout(controller) == ":i1,i2")
        #expect(delegate.take() == ["del i3 [0,1]", "ins i1 [0,0]"])
        #expect(delegate.differences.count == 1)
    }

    @Test func changingTheSortDeliversTheDifferenceAsOneBatch() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        try world.add("a", group: nil, rank: 1)
        try world.add("b", group: nil, rank: 2)
        try world.add("c", group: nil, rank: 3)
        try world.context.save()
        let delegate = RecordingDelegate()
        let controller = try world.controller(sectioned: false, delegate: delegate)
        controller.fetchRequest.sortKeys = [SortKey("rank", ascending: false)]
        try controller.performFetch()
        #expect(world.layout(controller) == ":c,b,a")
        #expect(delegate.calls.filter { $0 == "will" }.count == 1)
        #expect(delegate.take().count == 2)  // two moves: minimal for a reversal of three
    }

    /// A delegate that changes another object and processes it when a batch ends runs a delivery inside the
    /// delivery of the first change: a controller that hears the inner change first and the outer one after it
    /// still reads each changed object as it is now (the context hands each delivery's objects to the controllers
    /// and restores the outer ones when the inner delivery ends).
    @Test func changesProcessedInsideAnotherDeliveryReachEveryControllerInOrder() throws {
        final class Nesting: FetchedResultsControllerDelegate {
            var change: (() throws -> Void)?
            func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
                Issue.record("the controller failed: \(error)")
            }
            func controllerDidChangeContent(_ controller: FetchedResultsController) {
                guard let change else { return }
                self.change = nil
                #expect(throws: Never.self) { try change() }
            }
        }
        let world = try ItemWorld()
        defer { world.remove() }
        let a = try world.add("a", group: "K", rank: 1)
        try world.add("b", group: "K", rank: 2)
        let c = try world.add("c", group: "K", rank: 3)
        try world.context.save()
        let first = Nesting()
        let outer = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Item", sortKeys: [SortKey("rank")]), context: world.context)
        outer.delegate = first
        try outer.performFetch()
        let second = RecordingDelegate()
        let inner = try world.controller(sectioned: false, delegate: second)
        first.change = {
            try c.setValue(.int(0), forKey: "rank")
            world.context.processPendingChanges()
        }
        try a.setValue(.int(5), forKey: "rank")
        world.context.processPendingChanges()
        #expect(world.layout(outer) == ":c,b,a")
        #expect(world.layout(inner) == ":c,b,a")
        // The second controller heard c's change (inside the first's batch) before a's.
        #expect(second.take() == ["move c [0,2]->[0,0]", "move a [0,1]->[0,2]"])
        let check = try world.controller(sectioned: false, delegate: RecordingDelegate())
        #expect(check.fetchedObjectIDs == inner.fetchedObjectIDs)
    }
}

@Suite struct ControllerSavedOnlyTests {
    /// With `includesPendingChanges == false` the controller shows the saved state: unsaved changes deliver
    /// nothing, and the save delivers them.
    @Test func aControllerWithoutPendingChangesFollowsSaves() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        try world.add("k1", group: "K", rank: 1)
        try world.add("k2", group: "K", rank: 2)
        try world.context.save()
        let delegate = RecordingDelegate()
        var request = FetchRequest(entity: "Item", sortKeys: [SortKey("rank")])
        request.includesPendingChanges = false
        let controller = FetchedResultsController(
            fetchRequest: request, context: world.context, sectionNameKeyPath: "group")
        controller.delegate = delegate
        try controller.performFetch()
        for (title, item) in world.items { delegate.names[item.objectID] = title }

        let k3 = try world.add("k3", group: "K", rank: 0)
        delegate.names[k3.objectID] = "k3"
        try world.items["k2"]!.setValue(.string("L"), forKey: "group")
        world.context.processPendingChanges()
        #expect(delegate.take().isEmpty, "unsaved changes are not shown")
        #expect(world.layout(controller) == "K:k1,k2")

        try world.context.save()
        // k2 moves into a new section: lowered to its delete, the section insert brings it.
        #expect(delegate.take() == ["del k2 [0,1]", "sins 1", "ins k3 [0,0]"])
        #expect(world.layout(controller) == "K:k3,k1 L:k2")
    }

    /// A controller of saved state finds the objects a merged change touches through the stored links: an unsaved
    /// move of the item to another owner does not make that owner the one its saved-elsewhere rank concerns.
    @Test func aControllerOfSavedStateFollowsStoredLinksToWhatChanged() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let owners = try world.addOwners(["a", "b"])
        let x = try world.add("x", group: nil, rank: 1)
        try x.setObject(owners[0], forKey: "owner")
        try world.context.save()
        var request = FetchRequest(entity: "Owner", sortKeys: [SortKey("name")])
        request.predicate = try FetchPredicate("ANY items.rank > 5")
        request.includesPendingChanges = false
        let controller = FetchedResultsController(fetchRequest: request, context: world.context)
        try controller.performFetch()
        try x.setObject(owners[1], forKey: "owner")  // unsaved

        let other = ObjectContext(store: world.store, name: "other")
        let since = try world.store.lastTransaction()
        try other.existingObject(with: x.objectID).setValue(.int(9), forKey: "rank")
        try other.save()
        for record in try world.store.history(since: since) { world.context.merge(record) }
        #expect(controller.sections.map(\.objectIDs) == [[owners[0].objectID]])
    }
}
