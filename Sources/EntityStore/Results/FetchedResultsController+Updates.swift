import LMDB
import SectionedDiff

extension FetchedResultsController {
    /// What a change record did to one of the controller's objects.
    struct AffectedRow {
        /// The keys that changed (empty for an insert or a delete).
        var keys: [String]
        /// Whether every change to it was user-driven.
        var isUserDriven: Bool
        /// Whether it was inserted or deleted (or changed without named keys): its membership may have changed,
        /// whatever keys later changes name.
        var isStructural: Bool
    }

    /// Applies a processed change record: user-driven changes first (silently, unless the delegate asks for
    /// them), then the others, delivered against the state after the user's changes.
    func handle(_ record: ChangeRecord) {
        guard isFollowingChanges, let plan else { return }
        do {
            let affected = try collect(record, plan)
            guard !affected.isEmpty else { return }
            if context.isInBatch {
                // One batch for the whole save: rows are read when it ends.
                pendingBatch.note(affected)
            } else {
                try apply(affected, plan)
            }
        } catch {
            fail(EntityStoreError.wrapping(error, "updating the results of \(fetchRequest.entity)"))
        }
    }

    /// Delivers the rows a batch touched, as one batch.
    func endBatch() {
        guard !pendingBatch.isEmpty else { return }
        var affected = pendingBatch
        pendingBatch = AffectedRows()
        affected.normalize()
        guard isFollowingChanges, let plan else { return }
        do {
            try apply(affected, plan)
        } catch {
            fail(EntityStoreError.wrapping(error, "updating the results of \(fetchRequest.entity)"))
        }
    }

    /// Stops following changes after a batch could not be computed, and tells the delegate; ``performFetch()``
    /// starts again.
    func fail(_ error: EntityStoreError) {
        failure = error
        pendingBatch = AffectedRows()
        for receiver in receivers { receiver.controller(self, didFailWith: error) }
    }

    /// The controller's objects a record touches: its own changed objects and the objects whose predicate, sort or
    /// section values read what changed.
    func collect(_ record: ChangeRecord, _ plan: Plan) throws -> AffectedRows {
        // With pending changes the controller follows the context's processed changes (a save's record repeats
        // them); without, it shows the stored state: saves and merges only.
        if fetchRequest.includesPendingChanges ? record.kind == .didSave : record.kind == .objectsDidChange {
            return AffectedRows()
        }
        // One entry per affected object: the keys that changed, and whether every change to it was user-driven.
        var affected = AffectedRows(minimumCapacity: record.changes.count)
        // By index: a change copied out of the array took a reference on each of its arrays and dictionaries.
        let changes = record.changes
        for index in changes.indices {
            let flag = changes[index].isUserDriven && record.kind != .merged
            if plan.holds(changes[index].objectID.entityName) {
                let structural = changes[index].kind != .update || changes[index].changedKeys.isEmpty
                affected.note(
                    changes[index].objectID, structural ? [] : changes[index].changedKeys, flag, structural: structural)
            }
            if !plan.dependencies.isEmpty {
                for (dependent, keyPath) in try dependents(of: changes[index], plan) {
                    affected.note(dependent, [keyPath], flag, structural: false)
                }
            }
        }
        affected.normalize()
        return affected
    }

    /// Recomputes the affected rows and delivers the batch (two when some changes were user-driven).
    func apply(_ affected: AffectedRows, _ plan: Plan) throws {
        let tracers = context.store.tracers
        let traced = tracers.wants(.batches) ? Tracers.now() : nil
        defer {
            if let traced {
                tracers.emit(
                    .batches,
                    .batch(
                        BatchTrace(
                            entity: fetchRequest.entity, rowsTouched: affected.rows.count,
                            seconds: Tracers.now() - traced)))
            }
        }
        // In ID order, as the affected rows are (most batches have no user-driven rows: no split to make).
        var user = AffectedRows()
        var other = affected
        if affected.rows.contains(where: \.isUserDriven) {
            other = AffectedRows(minimumCapacity: affected.count)
            for (id, row) in zip(affected.ids, affected.rows) {
                if row.isUserDriven {
                    user.note(id, row.keys, true, structural: row.isStructural)
                } else {
                    other.note(id, row.keys, false, structural: row.isStructural)
                }
            }
        }
        let receivers = self.receivers
        let wantsUserDriven = receivers.contains { $0.deliversUserDrivenChanges }
        if isUnwindowed && !receivers.contains(where: \.deliversWholeBatches) {
            // O(k log n): no window to shift, no whole-list forms to build.
            if !user.isEmpty {
                let batch = try applyIncrementally(user, plan)
                if wantsUserDriven { deliver(batch, userDriven: true) }
            }
            if !other.isEmpty { deliver(try applyIncrementally(other, plan), userDriven: false) }
            return
        }
        func changedKeys(_ rows: AffectedRows) -> [ObjectID: Set<String>] {
            Dictionary(uniqueKeysWithValues: zip(rows.ids, rows.rows.lazy.map { Set($0.keys) }))
        }
        if !user.isEmpty {
            batchStartGeneration = resultsGeneration
            let before = displayed
            _ = try updateRows(user.ids, plan)
            if wantsUserDriven {
                deliver(try ChangeSet(from: before, to: displayed, changedKeys: changedKeys(user)), userDriven: true)
            }
        }
        if !other.isEmpty {
            batchStartGeneration = resultsGeneration
            let before = displayed
            _ = try updateRows(other.ids, plan)
            deliver(try ChangeSet(from: before, to: displayed, changedKeys: changedKeys(other)), userDriven: false)
        }
    }

    /// The objects of the controller's entity whose predicate, sort or section values read what `change` changed,
    /// with the key path they read it by. An update of a related object counts only if it changed the key read at
    /// its depth (a project's `tasks` changing does not touch tasks sectioned by `project.name`); a related object
    /// deleted, or inserted (a rollback or an undo brings a deleted one back with its links), changes everything
    /// read through it: before a save its delete rules have not run, yet the objects that read it no longer see it.
    func dependents(of change: ObjectChange, _ plan: Plan) throws -> [(ObjectID, String)] {
        let includesPending = fetchRequest.includesPendingChanges
        var result: [(ObjectID, String)] = []
        for dependency in plan.dependencies {
            let chain = dependency.steps
            for depth in 1...chain.count
            where chain[depth - 1].destination == change.objectID.entityName
                || context.store.schema.isKind(change.objectID.entityName, of: chain[depth - 1].destination)
            {
                guard let key = dependency.key(atDepth: depth),
                    change.kind != .update || change.changedKeys.contains(key)
                else { continue }
                // Walk back from the changed object to the controller's entity through the inverses.
                var current: Set<ObjectID> = [change.objectID]
                for step in chain[0..<depth].reversed() {
                    var previous = Set<ObjectID>()
                    for id in current {
                        if id == change.objectID, let old = change.links.old(step.inverse) {
                            previous.formUnion(old)
                        }
                        let object = try context.object(with: id)
                        // A deleted object's relationships are gone from the store: its old ones were noted above.
                        if object.isDeleted && object.context == nil { continue }
                        guard let inverse = object.entity.relationship(step.inverse) else { continue }
                        // A controller of saved state walks the stored links (as last read or merged), not the
                        // context's unsaved ones.
                        previous.formUnion(
                            try includesPending
                                ? context.targets(of: object, inverse)
                                : object.committedRelated[inverse.name] ?? context.targets(of: object, inverse))
                    }
                    current = previous
                }
                let text = (chain[0..<depth].map(\.name) + [key]).joined(separator: ".")
                for id in current { result.append((id, text)) }
            }
        }
        return result
    }

    /// The rows `ids` (distinct, in ID order: the order the store is read in) have now: the IDs of those that exist
    /// and match, in the same order, and their primary keys and keys as rows to insert.
    func newRows(for ids: [ObjectID], _ plan: Plan) throws -> (ids: [ObjectID], rows: NewRows) {
        let includesPending = fetchRequest.includesPendingChanges
        // Each key the object's own attribute (read directly; the general walk returns an array per key), found
        // once per batch: a key path read per row was copied per row, a reference on each of its parts.
        let direct: [Int?] = plan.keyPaths.map { path in
            if path.steps.isEmpty, case .attribute(let index, _) = path.terminal { index } else { nil }
        }
        return try context.store.read { txn in
            let reader = FetchReader(txn: txn, store: context.store, context: context, includesPending: includesPending)
            var found: [ObjectID] = []
            found.reserveCapacity(ids.count)
            var rows = NewRows(width: direct.count)
            rows.reserveCapacity(ids.count)
            // The IDs are in order, as the context's delivered entries are: one walk finds each changed object.
            let delivering = context.deliveringEntries
            var next = 0
            for id in ids {
                guard let subject = try reader.subject(for: id, among: delivering, from: &next) else { continue }
                if let predicate = plan.predicate, try !predicate.evaluate(subject) { continue }
                try rows.append(id.primaryKey) { keys in
                    for column in direct.indices {
                        if let index = direct[column] {
                            keys.append(try subject.attribute(index))
                        } else {
                            keys.append(
                                try CompiledPredicate.values(of: plan.keyPaths[column], subject).first ?? .null)
                        }
                    }
                }
                found.append(id)
            }
            return (found, rows)
        }
    }

    /// Delivers one batch to the delegate and the streams, in the contract's causal order.
    func deliver(_ changes: ChangeSet<Value, ObjectID>, userDriven: Bool) {
        let receivers = receivers(userDriven: userDriven)
        guard !changes.isEmpty, !receivers.isEmpty else { return }
        isUserDrivenBatch = userDriven
        defer { isUserDrivenBatch = false }
        let batch = changes.batch
        guard !batch.isEmpty else { return }
        for receiver in receivers { deliver(changes, batch, to: receiver) }
    }

    private func deliver(
        _ changes: ChangeSet<Value, ObjectID>, _ batch: ChangeSet<Value, ObjectID>.Batch,
        to receiver: any FetchedResultsControllerDelegate
    ) {
        receiver.controllerWillChangeContent(self)
        for callback in batch.callbacks {
            switch callback {
            case .deleteItem(let id, let at):
                receiver.controller(self, didChange: id, at: at, for: .delete, newIndexPath: nil)
            case .deleteSection(let index):
                receiver.controller(
                    self, didChange: sectionInfo(changes.old.sections[index]), atSectionIndex: index, for: .delete)
            case .insertSection(let index):
                receiver.controller(
                    self, didChange: sectionInfo(changes.new.sections[index]), atSectionIndex: index, for: .insert)
            case .insertItem(let id, let at):
                receiver.controller(self, didChange: id, at: nil, for: .insert, newIndexPath: at)
            case .moveItem(let id, let from, let to, _):
                receiver.controller(self, didChange: id, at: from, for: .move, newIndexPath: to)
            case .updateItem(let id, let from, let to, _):
                receiver.controller(self, didChange: id, at: from, for: .update, newIndexPath: to)
            }
        }
        if receiver.deliversWholeBatches {
            receiver.controller(self, didChangeContentWith: changes)
            receiver.controller(self, didChangeContentWith: snapshot)
            if sectionNameKeyPath == nil, let difference = changes.flatDifference {
                receiver.controller(self, didChangeContentWith: difference)
            }
        }
        receiver.controllerDidChangeContent(self)
    }

    /// The receivers of a batch: all of them, or for a user-driven batch those that asked for one.
    func receivers(userDriven: Bool) -> [any FetchedResultsControllerDelegate] {
        userDriven ? receivers.filter(\.deliversUserDrivenChanges) : receivers
    }
}

extension FetchedResultsController {
    /// The controller's objects a batch touched, each once, in ID order (after ``normalize()``), with what the
    /// batch did to each: parallel arrays rather than a dictionary by ID, so that the steps of a batch (splitting
    /// off the rows updated in place, reading the rows, reporting) walk them in order without hashing and comparing
    /// an ID per step. A change record lists its changes in ID order, so a batch of one record is in order as noted.
    struct AffectedRows {
        private(set) var ids: [ObjectID] = []
        private(set) var rows: [AffectedRow] = []
        /// Whether `ids` are in order and distinct.
        private var isNormal = true

        var isEmpty: Bool { ids.isEmpty }
        var count: Int { ids.count }

        init(minimumCapacity: Int = 0) {
            ids.reserveCapacity(minimumCapacity)
            rows.reserveCapacity(minimumCapacity)
        }

        /// Adds `keys` to `id`'s entry; the row stays user-driven only if every change to it was, and is structural
        /// if any change to it was.
        mutating func note(_ id: ObjectID, _ keys: [String], _ userDriven: Bool, structural: Bool) {
            if let last = ids.last, isNormal {
                if last == id {
                    rows[rows.count - 1].add(keys, userDriven, structural: structural)
                    return
                }
                if id < last { isNormal = false }
            }
            ids.append(id)
            rows.append(AffectedRow(keys: keys, isUserDriven: userDriven, isStructural: structural))
        }

        /// Adds every entry of `other`.
        mutating func note(_ other: AffectedRows) {
            for (id, row) in zip(other.ids, other.rows) {
                note(id, row.keys, row.isUserDriven, structural: row.isStructural)
            }
        }

        /// Puts the entries in ID order, each ID once (the entries of one ID joined in the order noted).
        mutating func normalize() {
            guard !isNormal else { return }
            var order = Array(ids.indices)
            order.sort { ids[$0] != ids[$1] ? ids[$0] < ids[$1] : $0 < $1 }
            var joined = AffectedRows(minimumCapacity: ids.count)
            for index in order {
                joined.note(
                    ids[index], rows[index].keys, rows[index].isUserDriven, structural: rows[index].isStructural)
            }
            self = joined
        }
    }
}

extension FetchedResultsController.AffectedRow {
    /// Joins another change of the same row.
    mutating func add(_ keys: [String], _ userDriven: Bool, structural: Bool) {
        self.keys += keys
        isUserDriven = isUserDriven && userDriven
        isStructural = isStructural || structural
    }
}
