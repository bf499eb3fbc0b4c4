import Foundation

/// How a save resolves a conflict: an object it changes or deletes was saved or deleted elsewhere since the
/// context read it.
///
/// Deletes take part like updates (Core Data's policies treat them alike). For an object the context deleted:
///
/// | Policy | Saved elsewhere since read | Deleted elsewhere since read |
/// |---|---|---|
/// | ``error`` | listed conflict, nothing written | listed conflict, nothing written |
/// | ``storeWins`` | the delete is dropped, with what it cascaded to: the object stays, as stored | nothing written |
/// | ``contextWins`` | deleted | nothing written |
/// | ``propertyLevel`` | deleted (a delete changes every property) | nothing written |
///
/// "Nothing written" means no second delete and no history entry for it. Objects reached only by a cascade and
/// never read are deleted as they are in the store.
///
/// An object the context changed that was deleted elsewhere since it read it is a listed conflict under ``error``.
/// Under every other policy the delete stands: nothing of the object is written (its links, its cascade targets
/// and perhaps its unique values are gone or taken since, so no version of it could be written whole), the rest of
/// the save goes through, and the object is deleted in the context once the save ends.
///
/// Relationships are stored apart from the objects' records, and a save writes the targets it adds and removes:
/// what other writers added to or removed from a to-many meanwhile stays. A to-one holds one target: one the save
/// changes that was changed elsewhere since the context read it is a listed conflict under ``error``; under the
/// other policies the save's target replaces the stored one (and the object that held it loses it, in the save's
/// change record too). A link to an object deleted elsewhere, or from one, is refused under every policy (see
/// ``ObjectContext/save()``). Whatever the saving context had loaded, the save's record names every object whose
/// stored relationships it changed, so that merging contexts refresh them.
///
/// A policy resolves conflicts between versions of one object, not between two objects: a save that would give a
/// unique value to a second object is refused under every policy, listing each duplicate (Core Data's merge-by-
/// property policies instead merge the new object into the stored one). For imports that update the object
/// holding a unique value, use a batch upsert:
/// ``PersistentStore/batchInsert(into:objects:onConflict:author:)`` with ``UniqueConflictPolicy/update``.
public enum MergePolicy: Sendable, Equatable {
    /// Refuse the save and list every conflict (the default).
    case error
    /// Keep the stored version of conflicting objects; the context's changes to them (a delete included) are
    /// dropped.
    case storeWins
    /// Write the context's version of conflicting objects over the stored one; its deletes go through. (An object
    /// deleted elsewhere stays deleted.)
    case contextWins
    /// Per attribute: the context's value where it changed it, the stored value elsewhere; deletes go through.
    case propertyLevel
}

extension ObjectContext {
    /// Merges another context's or process's save into this context: registered objects are refreshed (keeping
    /// their unsaved changes on top), deleted ones are removed (and taken out of the relationships of objects with
    /// unsaved changes, which the next processing point reports), and one merged event is delivered.
    ///
    /// Changes this context made itself are skipped.
    public func merge(_ record: ChangeRecord) {
        checkIsolation()
        guard record.contextID != contextID || record.contextID == nil else { return }
        guard store.tracers.wants(.merges) else { return mergeUntraced(record) }
        let start = Tracers.now()
        mergeUntraced(record)
        store.tracers.emit(
            .merges,
            .merge(
                MergeTrace(
                    context: name, transaction: record.transaction, changes: record.changes.count,
                    seconds: Tracers.now() - start)))
    }

    private func mergeUntraced(_ record: ChangeRecord) {
        processPendingChangesWithoutMerging()
        var merged: [ObjectChange] = []
        var deleted = Set<ObjectID>()
        // Objects refreshed under unsaved changes: their stored relationships may now differ from the ones kept.
        var keptChanges: [ManagedObject] = []
        for change in record.changes {
            let id = change.objectID
            guard store.storages[id.entityName] != nil else { continue }
            switch change.kind {
            case .insert:
                if let object = registered[id], object.isFault { faultBatches[id] = nil }
                merged.append(change)
            case .update:
                var mergedChange = change
                // An object with values, or a fault with unsaved relationship changes (kept over the new stored
                // state like any unsaved change), is refreshed; a plain fault only forgets what it loaded.
                if let object = registered[id], object.values != nil || object.hasChanges, !object.isInserted {
                    let before = ObjectState(object)
                    do {
                        try reload(object, mergeChanges: true)
                    } catch let error as EntityStoreError where error.code == .objectNotFound {
                        // Deleted by a later save, whose record comes after this one (in the same batch of merged
                        // records, or next): left as it was, unsaved changes and all, for that record's delete to
                        // take out of the context as it takes any deleted object. Reported as a failure, it made
                        // the next save throw though nothing had failed, and the half-done reload had left the
                        // object without values.
                        before.apply(to: object)
                    } catch {
                        // merge() cannot throw: the next fetch or save does.
                        inbox.receive(.failure(EntityStoreError.wrapping(error, "merging \(id)")))
                    }
                    if object.hasChanges { keptChanges.append(object) }
                    if let values = before.values {
                        for (i, attribute) in object.entity.attributes.enumerated()
                        where change.changedKeys.contains(attribute.name) {
                            mergedChange.oldValues[attribute.name] = values[i]
                        }
                    }
                } else if let object = registered[id] {
                    object.related = [:]
                    object.committedRelated = [:]
                    object.announceChange()
                }
                merged.append(mergedChange)
            case .delete:
                if let object = registered[id] {
                    object.announceChange()
                    registered[id] = nil
                    dirty.remove(object)
                    object.context = nil
                    object.isDeleted = true
                }
                deleted.insert(id)
                merged.append(change)
            }
        }
        if !deleted.isEmpty { unlinkUnsaved(from: deleted) }
        if !keptChanges.isEmpty {
            // merge() cannot throw: the next fetch or save does.
            reconcileInverses(of: keptChanges) { inbox.receive(.failure(EntityStoreError.wrapping($0, "merging"))) }
        }
        deliver(
            ChangeRecord(
                kind: .merged, changes: merged, transaction: record.transaction, author: record.author,
                date: record.date, processID: record.processID, contextID: record.contextID))
    }

    /// Takes objects deleted in the store out of the relationships of objects with unsaved changes: a link this
    /// context made to one of them (or kept while the store nullified it) would be a reference to nothing. The
    /// objects changed are reported at the next processing point, like any change. (The store's delete rules
    /// already changed the saved relationships; the merge refreshed the objects that had them.)
    ///
    /// Where the deleted object's side of the link has the `noAction` rule, the store keeps this side's link (a
    /// reference to nothing, which the integrity check reports, as in Core Data): only the links this context
    /// made are taken out, and the stored ones stay, as they are in the store and in every other context. (Taken
    /// out here too, an object whose changes were then undone or saved said it held nothing where the store, and a
    /// fetch through it, still had the link.)
    private func unlinkUnsaved(from deleted: Set<ObjectID>) {
        for object in dirty where !object.related.isEmpty {
            for (name, targets) in object.related where !targets.isDisjoint(with: deleted) {
                let stored = object.committedRelated[name]
                let keptByStore =
                    object.entity.relationship(name).flatMap { relationship in
                        store.schema.entity(relationship.destination)?.relationship(relationship.inverse)
                    }?.deleteRule == .noAction
                let gone = keptByStore ? Set(targets.intersection(deleted).subtracting(stored ?? [])) : deleted
                guard !targets.isDisjoint(with: gone) else { continue }
                recordPending(object)
                object.announceChange()
                object.related[name] = targets.subtracting(gone)
                if !keptByStore, let stored {
                    object.committedRelated[name] = stored.subtracting(deleted)
                }
            }
        }
    }

    /// Keeps both sides of to-ones consistent where the merge put a new stored target under an unsaved one: an
    /// object whose unsaved to-one names another target than the one stored now is taken out of that target's
    /// inverse (the save will unlink it there too), so that the target does not list it meanwhile. A target this
    /// context has not met yet is registered, and its inverse loaded and changed, as a link made here does: left
    /// to load later, the inverse read from the store listed the object, whose own to-one named another target.
    /// A target that cannot be read is handed to `failing` and skipped.
    func reconcileInverses(of objects: [ManagedObject], failing: (EntityStoreError) throws -> Void) rethrows {
        for object in objects where !object.related.isEmpty && !object.isDeleted {
            for relationship in object.entity.relationships where !relationship.isToMany {
                guard let current = object.related[relationship.name],
                    let stored = object.committedRelated[relationship.name], current != stored
                else { continue }
                for id in stored.subtracting(current) {
                    let inverse: TargetSet
                    let target: ManagedObject
                    do {
                        target = try self.object(with: id)
                        guard !target.isDeleted,
                            let inverseRelationship = target.entity.relationship(relationship.inverse)
                        else { continue }
                        inverse = try targets(of: target, inverseRelationship)
                    } catch {
                        try failing(EntityStoreError.wrapping(error, "reading \(id).\(relationship.inverse)"))
                        continue
                    }
                    guard inverse.contains(object.objectID) else { continue }
                    recordPending(target)
                    target.announceChange()
                    target.related[relationship.inverse] = inverse.subtracting([object.objectID])
                    dirty.insert(target)
                }
            }
        }
    }

    /// Core Data's name for ``merge(_:)``.
    public func mergeChanges(fromContextDidSave record: ChangeRecord) { merge(record) }

    /// Merge every save committed to the store, by other contexts and processes. Off by default.
    ///
    /// A context made on an actor (the main actor, a ``ContextActor``) merges each save on that actor soon after
    /// it commits, telling its observers and controllers there: a main-actor screen follows a background importer
    /// with no code of its own. A context made outside any actor merges at its next processing point
    /// (``processPendingChanges()``, a fetch, a save).
    ///
    /// When the store's history cannot be read (a damaged entry, a failing read), or entries were pruned before the
    /// context merged them (``EntityStoreError/Code/historyPruned``: their changes are not in the context), the
    /// merge that meets it tells the context's fetched-results controllers at once
    /// (``FetchedResultsControllerDelegate/controller(_:didFailWith:)``: their results may lack those saves, and
    /// ``FetchedResultsController/performFetch()`` starts them again); a context with no controller following
    /// throws it from its next fetch or save instead. Either way it is reported once, and merging goes on with the
    /// entries after it.
    public var automaticallyMergesChangesFromStore: Bool {
        get { inboxIfAny?.subscription.withLock { $0 != nil } ?? false }
        set {
            if newValue == automaticallyMergesChangesFromStore { return }
            if newValue {
                startMerging(wake: homeWake())
            } else {
                stopMerging()
            }
        }
    }

    /// Subscribes the context's inbox to the store's saves; `wake` runs the merge where the context lives.
    func startMerging(wake: (@Sendable () -> Void)?) {
        let inbox = self.inbox
        inbox.wake.withLock { $0 = (wake, false) }
        do {
            let id = store.publisher.subscribe(since: try store.lastTransaction(), isQuick: true) {
                inbox.receive($0)
            }
            inbox.subscription.withLock { $0 = id }
            try store.publisher.startWatching(store)
        } catch {
            inbox.receive(.failure(EntityStoreError.wrapping(error, "starting to merge the store's changes")))
        }
    }

    /// Runs the merge on the actor the context was made on, if any.
    private func homeWake() -> (@Sendable () -> Void)? {
        guard let home else { return nil }
        let reference = ContextReference(self)
        return { [weak home] in
            guard let home else { return }
            Task { await ObjectContext.mergeWhenWoken(reference, on: home) }
        }
    }

    private static func mergeWhenWoken(_ reference: ContextReference, on actor: isolated any Actor) {
        reference.context?.mergeWhenWoken()
    }

    /// Merges what arrived, where the context lives.
    func mergeWhenWoken() {
        inbox.woken()
        guard automaticallyMergesChangesFromStore else { return }
        processPendingChanges()
    }

    /// Ends the automatic-merge subscription, if any.
    func stopMerging() {
        guard let inbox = inboxIfAny, let id = inbox.subscription.withLock({ $0 }) else { return }
        store.publisher.unsubscribe(id)
        inbox.subscription.withLock { $0 = nil }
        inbox.wake.withLock { $0 = (nil, false) }
    }

    /// Merges the store changes waiting for an automatically merging context.
    func mergeInbox() {
        guard let inbox = inboxIfAny, inbox.subscription.withLock({ $0 != nil }) else { return }
        for record in inbox.take() { merge(record) }
    }

    /// Tells the context's controllers of a failure to read the store's changes as soon as a merge meets it: their
    /// results may lack the saves it names, and a screen that neither fetches nor saves would not hear of it
    /// otherwise. Told to a controller, the failure is reported; with no controller following, the next fetch or
    /// save throws it (``mergeInboxReportingFailures()``).
    func tellMergeFailure() {
        // Not while a merge of the inbox's records processes the context's changes
        // (`processPendingChangesWithoutMerging` lifts the subscription meanwhile): the records come first.
        guard let inbox = inboxIfAny, inbox.failure.withLock({ $0 != nil }),
            let receivers = observersIfAny?.tables.withLock({ $0.mergeFailureReceivers }), !receivers.isEmpty,
            inbox.subscription.withLock({ $0 != nil })
        else { return }
        let following = receivers.sorted(by: { $0.key < $1.key }).map(\.value).filter { $0.isFollowing() }
        guard !following.isEmpty, let failure = inbox.takeFailure() else { return }
        // A delegate may fail or fetch another controller meanwhile: each is asked again.
        for receiver in following where receiver.isFollowing() { receiver.fail(failure) }
    }

    /// Merges what is waiting, then throws a failure to read the store's changes that has not been reported.
    func mergeInboxReportingFailures() throws {
        mergeInbox()
        tellMergeFailure()
        if let failure = inboxIfAny?.takeFailure() { throw failure }
    }

    func processPendingChangesWithoutMerging() {
        guard let inbox = inboxIfAny else { return processPendingChanges() }
        let subscribed = inbox.subscription.withLock { $0 }
        inbox.subscription.withLock { $0 = nil }
        processPendingChanges()
        inbox.subscription.withLock { $0 = subscribed }
    }
}
