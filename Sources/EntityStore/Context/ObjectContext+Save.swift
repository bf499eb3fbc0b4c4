import Foundation
import LMDB

extension ObjectContext {
    /// Saves every unsaved change in one write transaction (a child context's save hands its changes to its parent
    /// instead: see ``init(parent:name:isolation:)``).
    ///
    /// First the delete rules run (cascade over as many levels as the relationships go, nullify, deny); then every
    /// object is validated (required values, attribute rules, the store's custom rules, uniqueness against the store
    /// and within the save, deny rules, conflicts with saves made elsewhere since the object was read) and *every*
    /// failure is reported at once.
    /// Records, index entries and both directions of every relationship are written together. A relationship is
    /// never stored pointing at nothing: a link to an object deleted elsewhere since it was read (and not merged) is
    /// a ``EntityStoreError/Code/conflict`` naming the object, the relationship and the target. A to-one changed
    /// elsewhere is resolved by the ``mergePolicy`` (see ``MergePolicy``).
    ///
    /// On any error the store and the context are exactly as they were before the call, and the save can be
    /// retried.
    ///
    /// - Throws: ``EntityStoreError`` with ``EntityStoreError/Code/validationFailed`` or
    ///   ``EntityStoreError/Code/conflict`` listing every failure, or a storage error. Before anything else: the
    ///   failures of typed-model setters since the last save, and a failure to read the store's changes for
    ///   automatic merging (each thrown once).
    public func save() throws {
        checkIsolation()
        if !accessorFailures.isEmpty {
            let failures = accessorFailures
            accessorFailures = []
            throw failures.count == 1
                ? failures[0]
                : EntityStoreError(
                    failures[0].code, "\(failures.count) typed-model writes failed: \(failures[0].message)",
                    entity: failures[0].entity, key: failures[0].key, objectID: failures[0].objectID,
                    failures: failures.map {
                        .init(entity: $0.entity, key: $0.key, objectID: $0.objectID, message: $0.message)
                    })
        }
        if let parent {
            try pushToParent(parent)
            return
        }
        try mergeInboxReportingFailures()
        // What the save delivers (its processed changes, those of the delete rules, the did-save record) is one batch
        // for controllers.
        beginBatch()
        defer { endBatch() }
        processPendingChanges()
        // Transient values are never written; once saved, what they hold is the baseline of `changedValues()`.
        let transientlyChanged = dirty.filter { !$0.transientValues.isEmpty }
        defer {
            if !hasChanges { for object in transientlyChanged { object.committedTransients = object.transientValues } }
        }
        guard hasChanges else {
            // Nothing to write. Objects inserted and deleted since the last save never existed: forgotten now, as a
            // save that writes forgets them (left registered, they stayed deleted in no list, for good).
            for object in dirty where object.isInserted && object.isDeleted {
                registered[object.objectID] = nil
                object.context = nil
            }
            dirty.removeAll()
            return
        }
        undo.isSuspended = true
        defer {
            saveSnapshot = nil
            undo.isSuspended = false
        }
        // Objects whose delete the store's version overrode (store wins): the delete rules leave them alone.
        var keptByStore = Set<ObjectID>()
        // The state before the save of every object an attempt changed: each attempt's own changes are undone
        // before the next, but not the kept deletes' (the next attempt starts from them), so a save that then
        // fails restores these, its kept deletes included (it left the user's delete dropped, and the views with
        // pending changes no longer matching the context).
        var beforeSave: [ObjectID: ObjectState?] = [:]
        func remember(_ states: [ObjectID: ObjectState?]) {
            for (id, state) in states where beforeSave.index(forKey: id) == nil { beforeSave[id] = state }
        }
        let traced = store.tracers.wants(.saves) ? Tracers.now() : nil
        var commitSeconds = 0.0
        var bytesWritten = 0
        while true {
            saveSnapshot = [:]
            let record: ChangeRecord
            let resolutions: [ObjectID: ChangeWriter.Resolution]
            let collateral: [ObjectChange]
            do {
                var failures = try propagateDeletes(keeping: keptByStore)
                try computeDerivedAttributes()
                // The objects in ID order, sorted once for validation and the write.
                var objects = sortedDirtyObjects()
                failures += validateValues(objects)
                failures += runValidationRules(objects)
                // A custom rule may have changed or deleted other objects.
                if dirty.count != objects.count { objects = sortedDirtyObjects() }
                if traced != nil {
                    let (start, written) = (Tracers.now(), Tracers.threadBytesWritten())
                    (record, resolutions, collateral) = try writeChanges(objects, requiredFailures: failures)
                    commitSeconds += Tracers.now() - start
                    bytesWritten += max(0, (Tracers.threadBytesWritten() ?? 0) - (written ?? 0))
                } else {
                    (record, resolutions, collateral) = try writeChanges(objects, requiredFailures: failures)
                }
            } catch let kept as DeletesKeptByStore {
                // Nothing was written: start over with those objects alive, as stored.
                restore(saveSnapshot ?? [:])
                keptByStore.formUnion(kept.ids)
                for id in kept.ids { keepStoredVersion(of: id) }
                // (After the keeps, which record the states they change in the snapshot too.)
                remember(saveSnapshot ?? [:])
                continue
            } catch {
                remember(saveSnapshot ?? [:])
                restore(beforeSave)
                pending.removeAll()
                throw error
            }
            // Committed with the save.
            pendingMetadata = []
            finishSave(resolutions)
            processPendingChanges()
            if !collateral.isEmpty {
                // Objects the save unlinked without changing them here: this context's screens follow them too.
                deliver(ChangeRecord(kind: .objectsDidChange, changes: collateral, author: name, contextID: contextID))
            }
            deliver(record)
            store.publisher.catchUp(store, force: true)
            if let traced {
                let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))  // LMDB's page: the system's
                store.tracers.emit(
                    .saves,
                    .save(
                        SaveTrace(
                            context: name, inserted: record.insertedIDs.count, updated: record.updatedIDs.count,
                            deleted: record.deletedIDs.count, bytesWritten: bytesWritten,
                            pagesWritten: (bytesWritten + pageSize - 1) / max(pageSize, 1),
                            commitSeconds: commitSeconds,
                            seconds: Tracers.now() - traced)))
            }
            return
        }
    }

    /// Under ``MergePolicy/storeWins``, deletes of objects saved elsewhere since they were read are dropped: the
    /// save starts over without them.
    struct DeletesKeptByStore: Error {
        var ids: Set<ObjectID>
    }

    /// Drops the context's changes to `id` (its delete included): it becomes a fault of the stored version.
    func keepStoredVersion(of id: ObjectID) {
        guard let object = registered[id] else { return }
        willChange(object)
        object.isDeleted = false
        object.values = nil
        object.committed = nil
        object.related = [:]
        object.committedRelated = [:]
        dirty.remove(object)
    }

    /// The unsaved objects (registered, in ``dirty``), ordered by ID.
    func sortedDirtyObjects() -> [ManagedObject] {
        dirty.sortedByID()
    }

    /// Runs the delete rules; returns the deny failures. Objects in `kept` are not cascaded into: their link to the
    /// deleted object is nullified instead (the store's version of them won over a delete).
    func propagateDeletes(keeping kept: Set<ObjectID> = []) throws -> [EntityStoreError.Failure] {
        var queue = dirty.filter { $0.isDeleted && !$0.isInserted }
        // Nothing deleted (an import, say): no set of IDs and no pass over the relationships.
        guard !queue.isEmpty else { return [] }
        var deleted = Set(queue.map(\.objectID))
        var closure: [ManagedObject] = []
        // Cascade: the closure of deleted objects over cascade relationships.
        while let doomed = queue.popLast() {
            closure.append(doomed)
            for relationship in doomed.entity.relationships where relationship.deleteRule == .cascade {
                for targetID in try targets(of: doomed, relationship) where !deleted.contains(targetID) {
                    if kept.contains(targetID) {
                        try unlinkIDs(doomed, relationship, targetID)
                        continue
                    }
                    let target = try object(with: targetID)
                    willChange(target)
                    target.isDeleted = true
                    dirty.insert(target)
                    deleted.insert(targetID)
                    queue.append(target)
                }
            }
        }
        var failures: [EntityStoreError.Failure] = []
        let ordered = closure.sorted(by: { $0.objectID < $1.objectID })
        try loadRelationships(of: ordered)
        for object in ordered {
            for relationship in object.entity.relationships {
                let targets = try targets(of: object, relationship)
                switch relationship.deleteRule {
                case .deny:
                    let remaining = targets.subtracting(deleted)
                    if !remaining.isEmpty {
                        failures.append(
                            .init(
                                entity: object.entity.name, key: relationship.name, objectID: object.objectID,
                                message: "cannot delete: the deny rule of '\(relationship.name)' and"
                                    + " \(remaining.count) related object(s) (\(remaining.sorted().first!))"))
                    }
                case .nullify:
                    for target in targets where !deleted.contains(target) {
                        try unlinkIDs(object, relationship, target)
                    }
                case .cascade, .noAction:
                    break
                }
            }
        }
        return failures
    }

    /// Required attributes, attribute rules (``AttributeValidation``) and required to-one relationships of the
    /// objects that will be stored.
    func validateValues(_ objects: [ManagedObject]) -> [EntityStoreError.Failure] {
        var failures: [EntityStoreError.Failure] = []
        for object in objects where !object.isDeleted {
            if let values = object.values {
                for (i, attribute) in object.entity.attributes.enumerated() {
                    if !attribute.isOptional && values[i].isNull {
                        failures.append(
                            .init(
                                entity: object.entity.name, key: attribute.name, objectID: object.objectID,
                                message: "a required value is missing"))
                    } else if let problem = values[i].storageProblem {
                        // Set by a path that skipped setValue's check (a default, say).
                        failures.append(
                            .init(
                                entity: object.entity.name, key: attribute.name, objectID: object.objectID,
                                message: problem))
                    } else if let validation = attribute.validation, let problem = validation.problem(with: values[i]) {
                        failures.append(
                            .init(
                                entity: object.entity.name, key: attribute.name, objectID: object.objectID,
                                message: problem))
                    }
                }
            }
            for relationship in object.entity.relationships where !relationship.isToMany && !relationship.isOptional {
                let loaded = object.related[relationship.name] ?? (object.isInserted ? [] : nil)
                if let loaded, loaded.isEmpty {
                    failures.append(
                        .init(
                            entity: object.entity.name, key: relationship.name, objectID: object.objectID,
                            message: "a required relationship is empty"))
                }
            }
        }
        return failures
    }

    /// Writes every change in one transaction, with its history entry; uniqueness and conflicts are checked
    /// inside it, against the state it sees, so that no other writer can slip in between.
    func writeChanges(
        _ objects: [ManagedObject], requiredFailures: [EntityStoreError.Failure]
    ) throws
        -> (ChangeRecord, [ObjectID: ChangeWriter.Resolution], collateral: [ObjectChange])
    {
        return try mappingStorageErrors("saving") {
            try store.write { txn in
                var writer = ChangeWriter(store: store, txn: txn)
                writer.appendable = Self.insertedEntities(objects)
                writer.savedObjects = objects
                var failures = requiredFailures
                var conflicts: [EntityStoreError.Failure] = []
                var resolutions: [ObjectID: ChangeWriter.Resolution] = [:]
                var keptByStore = Set<ObjectID>()
                failures += try writer.checkUniqueness(objects)
                if mergePolicy == .error { conflicts += try writer.toOneConflicts(objects) }
                for object in objects {
                    if object.isDeleted {
                        guard !object.isInserted else { continue }
                        let (conflict, outcome) = try writer.delete(object, policy: mergePolicy)
                        if let conflict { conflicts.append(conflict) }
                        switch outcome {
                        case .deleted: break
                        case .alreadyGone: resolutions[object.objectID] = .deletedElsewhere
                        case .keptByStore: keptByStore.insert(object.objectID)
                        }
                    } else if object.isInserted {
                        try writer.insert(object)
                    } else if object.hasChanges {
                        let (conflict, resolution) = try writer.update(object, policy: mergePolicy)
                        if let conflict { conflicts.append(conflict) }
                        if let resolution { resolutions[object.objectID] = resolution }
                    }
                }
                try writer.writeInsertedIndexes()
                try writer.writeNewLinks()
                conflicts += try writer.danglingLinks()
                if !keptByStore.isEmpty && failures.isEmpty && conflicts.isEmpty {
                    throw DeletesKeptByStore(ids: keptByStore)
                }
                if !failures.isEmpty {
                    let summary =
                        failures.count == 1 ? failures[0].description : "\(failures.count) validation failures"
                    throw EntityStoreError(
                        .validationFailed, summary, entity: failures[0].entity, key: failures[0].key,
                        objectID: failures[0].objectID, failures: failures + conflicts)
                }
                if !conflicts.isEmpty {
                    let summary = conflicts.count == 1 ? conflicts[0].description : "\(conflicts.count) conflicts"
                    throw EntityStoreError(
                        .conflict, summary, entity: conflicts[0].entity, objectID: conflicts[0].objectID,
                        failures: conflicts)
                }
                // Derived attributes read through relationships, checked against what the store now holds.
                var rederivedElsewhere: [ObjectID: Set<String>] = [:]
                let derivations = try store.derivations()
                if !derivations.isEmpty {
                    let candidates = try rederivationCandidates(objects, writer, derivations, txn)
                    let fixed =
                        candidates.isEmpty
                        ? [:]
                        : try writer.rederive(
                            candidates, derivations, context: self, now: Date(),
                            tellsFromStored: { id in
                                // A saved object whose attributes the save did not write (only its relationships):
                                // its change runs from what was stored, not from what the context read (perhaps
                                // stale).
                                guard let object = registered[id], dirty.contains(object) else { return false }
                                return !object.isInserted && (object.values == nil || object.values == object.committed)
                            }
                        ) { id, stored in rederivedVersion(id, stored, resolutions) }
                    for (id, (values, version)) in fixed {
                        if let object = registered[id], dirty.contains(object) {
                            resolutions[id] = .wrote(values, version)
                        } else {
                            rederivedElsewhere[id] = Set(
                                PersistentStore.namesDerivedThroughRelationships(of: id.entityName, derivations))
                        }
                    }
                }
                var changes = savedChanges(
                    objects, resolutions, unread: writer.unreadDeletedValues, baselines: writer.baselines)
                var unlinked = writer.collateral
                for (id, names) in rederivedElsewhere { unlinked[id, default: []].formUnion(names) }
                if !writer.inverseWrites.isEmpty {
                    for (id, names) in unreportedInverses(writer.inverseWrites) {
                        unlinked[id, default: []].formUnion(names)
                    }
                }
                let collateral = collateralChanges(unlinked)
                if !collateral.isEmpty { add(collateral, to: &changes) }
                var record = ChangeRecord(kind: .didSave, changes: changes, author: name, contextID: contextID)
                // A save whose every change was already made elsewhere (deletes of deleted objects) leaves no entry.
                if !record.changes.isEmpty { record.transaction = try store.appendHistory(record, txn) }
                if !pendingMetadata.isEmpty { try store.writeMetadata(pendingMetadata, txn) }
                return (record, resolutions, collateral)
            }
        }
    }

    /// The entities of `objects` with an insert: a save's objects come in runs of one entity, so a name goes into
    /// the set once per run, not hashed once per object.
    static func insertedEntities(_ objects: [ManagedObject]) -> Set<String> {
        var names = Set<String>()
        var last: String?
        for object in objects where object.isInserted && !object.isDeleted {
            let name = object.objectID.entityName
            if name != last {
                names.insert(name)
                last = name
            }
        }
        return names
    }

    /// The per-object changes of a save, from each object's committed state (or the stored values in `baselines`,
    /// see ``ChangeWriter/baselines``) to what was written; `unread` holds the stored values of deleted objects the
    /// context never read.
    func savedChanges(
        _ objects: [ManagedObject], _ resolutions: [ObjectID: ChangeWriter.Resolution], unread: [ObjectID: [Value]],
        baselines: [ObjectID: [Value]]
    ) -> [ObjectChange] {
        var changes: [ObjectChange] = []
        changes.reserveCapacity(objects.count)
        // (An empty dictionary still hashes the key it is asked for.)
        let resolves = !resolutions.isEmpty
        for object in objects {
            let names = object.entityBox.attributeNames
            let userDriven = isUserDrivenSinceSave(object)
            if object.isDeleted {
                // An inserted-then-deleted object never reached the store; one deleted elsewhere is not deleted twice.
                guard !object.isInserted, !resolves || resolutions[object.objectID] == nil else { continue }
                let old = object.committed ?? unread[object.objectID] ?? object.values ?? []
                changes.append(
                    ObjectChange(
                        objectID: object.objectID, kind: .delete, changedKeys: names,
                        old: .positional(names: names, values: old), new: .dictionary([:]),
                        links: .sets(object.committedRelated.map { ($0.key, $0.value, nil) }), isUserDriven: userDriven)
                )
                continue
            }
            var final = object.values
            switch resolves ? resolutions[object.objectID] : nil {
            case .keepStored(let stored, _)?: final = stored
            case .wrote(let written, _)?: final = written
            case .deletedElsewhere?: continue
            case nil: break
            }
            if object.isInserted {
                changes.append(
                    ObjectChange(
                        objectID: object.objectID, kind: .insert, changedKeys: names, old: .dictionary([:]),
                        new: .positional(names: names, values: final ?? []), isUserDriven: userDriven))
                continue
            }
            var (keys, old, new): ([String], ObjectChange.ValueStorage, ObjectChange.ValueStorage) =
                ([], .dictionary([:]), .dictionary([:]))
            if let final,
                let committed = baselines.isEmpty ? object.committed : baselines[object.objectID] ?? object.committed
            {
                (keys, old, new) = ObjectChange.differences(object.entityBox, from: committed, to: final)
            }
            var links: [(name: String, old: TargetSet, new: TargetSet?)] = []
            for (name, targets) in object.related.sorted(by: { $0.key < $1.key })
            where object.committedRelated[name] != targets {
                keys.append(name)
                links.append((name, object.committedRelated[name] ?? [], targets))
            }
            guard !keys.isEmpty else { continue }
            changes.append(
                ObjectChange(
                    objectID: object.objectID, kind: .update, changedKeys: keys, old: old, new: new,
                    links: links.isEmpty ? .none : .sets(links), isUserDriven: userDriven))
        }
        return changes
    }

    /// The objects whose derived attributes read through relationships and may differ from what this context
    /// computed: the save's own objects with such attributes, and the objects linked (before or after the save's
    /// writes, as this context saw it and as the store holds it) to the saved objects those attributes read, or
    /// whose links the save changed.
    func rederivationCandidates(
        _ objects: [ManagedObject], _ writer: ChangeWriter, _ derivations: [String: [Derivation]],
        _ txn: ReadTransaction
    ) throws -> Set<ObjectID> {
        let steps = store.relationshipDerivationSteps(derivations)
        guard !steps.isEmpty else { return [] }
        let schema = store.schema
        func isKind(_ id: ObjectID, of entity: String) -> Bool {
            id.entityName == entity || schema.isKind(id.entityName, of: entity)
        }
        var candidates = Set<ObjectID>()
        for object in objects where !object.isDeleted {
            if steps.contains(where: { isKind(object.objectID, of: $0.owner) }) { candidates.insert(object.objectID) }
        }
        for (owner, step) in steps {
            for object in objects where isKind(object.objectID, of: step.destination) {
                guard let inverse = object.entity.relationship(step.inverse) else { continue }
                var owners = (object.committedRelated[inverse.name] ?? []).union(object.related[inverse.name] ?? [])
                if !object.isDeleted {
                    let storage = try store.storage(for: object.entity.name)
                    owners.formUnion(try store.storedTargets(of: object.objectID, inverse, storage, txn))
                }
                for id in owners where isKind(id, of: owner) { candidates.insert(id) }
            }
            for write in writer.inverseWrites where write.relationship == step.name && isKind(write.target, of: owner) {
                candidates.insert(write.target)
            }
            for (id, names) in writer.collateral where names.contains(step.name) && isKind(id, of: owner) {
                candidates.insert(id)
            }
        }
        return candidates
    }

    /// The row version a rederived record is written with: an object this save already rewrote keeps the version
    /// written; any other record gets the next one.
    func rederivedVersion(
        _ id: ObjectID, _ stored: UInt64, _ resolutions: [ObjectID: ChangeWriter.Resolution]
    )
        -> UInt64
    {
        guard let object = registered[id], dirty.contains(object), !object.isDeleted else { return stored + 1 }
        switch resolutions[id] {
        case .wrote?: return stored
        case .keepStored?, .deletedElsewhere?: return stored + 1
        case nil:
            return object.isInserted || (object.values != nil && object.values != object.committed)
                ? stored : stored + 1
        }
    }

    /// The inverse sides a save changed in the store that its changes do not name, or that this context sees
    /// otherwise: targets it had not loaded, or whose loaded relationship was stale (another writer had linked or
    /// unlinked the saved object), so that it saw no change of theirs. Other contexts must refresh them all the
    /// same, and so must this one. (A target the save names is one of its objects, inserted or with that
    /// relationship changed here; one it deletes needs nothing.)
    func unreportedInverses(_ writes: [ChangeWriter.InverseWrite]) -> [ObjectID: Set<String>] {
        var missing: [ObjectID: Set<String>] = [:]
        for write in writes {
            var named = false
            var stale = false
            if let object = registered[write.target] {
                let saved = dirty.contains(object)
                if saved && object.isDeleted { continue }
                let loaded = object.related[write.relationship]
                named = saved && (object.isInserted || loaded != object.committedRelated[write.relationship])
                stale = loaded.map { $0.contains(write.source) != write.added } ?? false
            }
            guard !named || stale else { continue }
            missing[write.target, default: []].insert(write.relationship)
        }
        return missing
    }

    /// Updates for the objects a save unlinked besides its own changes (``ChangeWriter/collateral``); their
    /// relationships here are reloaded when next read.
    func collateralChanges(_ collateral: [ObjectID: Set<String>]) -> [ObjectChange] {
        collateral.sorted(by: { $0.key < $1.key }).map { id, names in
            if let object = registered[id] {
                for name in names {
                    object.related[name] = nil
                    object.committedRelated[name] = nil
                }
                // Attributes rewritten here (derived ones recomputed): the object loads its record again.
                if !dirty.contains(object), names.contains(where: { object.entity.attributeIndex($0) != nil }) {
                    object.values = nil
                    object.committed = nil
                }
                object.announceChange()
            }
            return ObjectChange(objectID: id, kind: .update, changedKeys: names.sorted())
        }
    }

    /// Adds `collateral` to a save's `changes`, for other contexts to merge: keys added to an object's update, or
    /// an update of its own.
    func add(_ collateral: [ObjectChange], to changes: inout [ObjectChange]) {
        var positions: [ObjectID: Int] = [:]
        for (position, change) in changes.enumerated() { positions[change.objectID] = position }
        for change in collateral {
            guard let position = positions[change.objectID] else {
                changes.append(change)
                continue
            }
            guard changes[position].kind == .update else { continue }  // inserted or deleted by the save itself
            changes[position].changedKeys += change.changedKeys.filter { !changes[position].changedKeys.contains($0) }
        }
    }

    /// After the commit: stored state becomes the committed state.
    func finishSave(_ resolutions: [ObjectID: ChangeWriter.Resolution]) {
        // (An empty dictionary still hashes the key it is asked for.)
        let resolves = !resolutions.isEmpty
        for object in dirty {
            let id = object.objectID
            switch resolves ? resolutions[id] : nil {
            case .keepStored(let values, let version)?, .wrote(let values, let version)?:
                // The values the save settled on (the stored ones kept, a per-property merge, derived values
                // recomputed from the store) differ from the ones this context showed: its screens follow them.
                if object.values != values { recordPending(object) }
                object.values = values
                object.committed = values
                object.rowVersion = version
                object.isInserted = false
                for (name, targets) in object.related { object.committedRelated[name] = targets }
                continue
            case .deletedElsewhere?:
                recordPending(object)
                object.isDeleted = true
            case nil:
                break
            }
            if object.isDeleted {
                registered[id] = nil
                object.context = nil
                continue
            }
            if object.isInserted || object.values != object.committed {
                object.rowVersion += 1
            }
            object.isInserted = false
            object.committed = object.values
            for (name, targets) in object.related { object.committedRelated[name] = targets }
        }
        dirty.removeAll()
        clearProcessedUnsaved()
        undo.clear()
    }
}
