import Foundation
import LMDB

/// An observer's registration; the observer is removed by ``cancel()`` or when the token is released.
public final class ObservationToken: @unchecked Sendable {
    // @unchecked Sendable: `onCancel` is set once at creation and cleared under `lock`.
    private let lock = NSLock()
    private var onCancel: (() -> Void)?

    init(_ onCancel: @escaping () -> Void) { self.onCancel = onCancel }

    /// Stops the observation.
    public func cancel() {
        let action = lock.withLock { () -> (() -> Void)? in
            defer { onCancel = nil }
            return onCancel
        }
        action?()
    }

    deinit { cancel() }
}

extension Notification.Name {
    /// Posted by a context after it processes changes (`object`: the context; `userInfo["record"]`: the
    /// ``ChangeRecord``), as Core Data's `NSManagedObjectContextObjectsDidChange`.
    public static let entityStoreObjectsDidChange = Notification.Name("EntityStoreObjectsDidChange")
    /// Posted by a context after a save commits, as Core Data's `NSManagedObjectContextDidSave`.
    public static let entityStoreDidSave = Notification.Name("EntityStoreDidSave")
}

/// An observer told of a failure to merge the store's changes: `fail` runs only while `isFollowing` holds (a
/// controller that already failed, or has not fetched, has nothing to stop).
struct MergeFailureReceiver {
    let isFollowing: () -> Bool
    let fail: (EntityStoreError) -> Void
}

/// The observers of one context.
final class ContextObservers {
    /// The observers, behind a lock: a token (`Sendable`) may be cancelled from any thread while the context
    /// delivers on its own (that race edited the tables unlocked and crashed the process).
    struct Tables {
        var nextID = 0
        var handlers: [Int: (ChangeRecord) -> Void] = [:]
        /// Called when a batch of records ends (a save delivers up to three records: its processed changes before
        /// the write, those of its delete rules, the did-save record); controllers deliver one batch then.
        var batchEnds: [Int: () -> Void] = [:]
        /// Told of a failure to read the store's changes as soon as a merge meets it (controllers, whose results
        /// may lack the saves it names; see ``ObjectContext/tellMergeFailure()``).
        var mergeFailureReceivers: [Int: MergeFailureReceiver] = [:]

        /// The next observer's ID.
        mutating func takeID() -> Int {
            defer { nextID += 1 }
            return nextID
        }
    }
    let tables = Locked(Tables())
    /// Open batches: records delivered meanwhile belong to one batch (touched from the context's isolation only).
    var batchDepth = 0
    /// The ``ObjectContext/changes`` streams, by ID: a stream leaves (from any thread) as soon as its consumer
    /// stops or cancels.
    var streams: Locked<[Int: AsyncStream<ChangeRecord>.Continuation]> { madeOnFirstUse(&streamsIfAny) { Locked([:]) } }
    /// Made for the first stream: most contexts have none, and making the lock (a generic class of another module,
    /// its type metadata looked up at run time) was paid by every context made for one small fetch. The property is
    /// touched from the context's isolation only; the lock itself from anywhere.
    private(set) var streamsIfAny: Locked<[Int: AsyncStream<ChangeRecord>.Continuation]>?
}

extension ObjectContext {
    // MARK: - Observing

    /// Calls `handler` with every processed change (objects-did-change and merged records) and every save, in
    /// the context's isolation domain, until the token is cancelled or released.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// -->
    /// ```swift
    /// let token = context.addObserver { record in print(record.insertedIDs) }
    /// ```
    public func addObserver(_ handler: @escaping (ChangeRecord) -> Void) -> ObservationToken {
        addObserver(handler, endOfBatch: nil)
    }

    /// Adds an observer that is also told when a batch of records ends (see ``beginBatch()``) and, when it asks,
    /// of a failure to merge the store's changes (see ``tellMergeFailure()``).
    func addObserver(
        _ handler: @escaping (ChangeRecord) -> Void, endOfBatch: (() -> Void)?,
        onMergeFailure: MergeFailureReceiver? = nil
    ) -> ObservationToken {
        let id = observers.tables.withLock { tables in
            let id = tables.takeID()
            tables.handlers[id] = handler
            tables.batchEnds[id] = endOfBatch
            tables.mergeFailureReceivers[id] = onMergeFailure
            return id
        }
        // Cancelled from any thread: the tables are edited under their lock.
        return ObservationToken { [weak observers] in
            observers?.tables.withLock { tables in
                tables.handlers[id] = nil
                tables.batchEnds[id] = nil
                tables.mergeFailureReceivers[id] = nil
            }
        }
    }

    /// Whether records delivered now belong to a batch that ends later (inside ``save()``).
    var isInBatch: Bool { observers.batchDepth > 0 }

    /// Opens a batch: the records delivered until the matching ``endBatch()`` are one batch for controllers.
    func beginBatch() { observers.batchDepth += 1 }

    /// Closes a batch; the outermost one tells the observers that asked.
    func endBatch() {
        observers.batchDepth -= 1
        guard observers.batchDepth == 0 else { return }
        let ends = observers.tables.withLock { $0.batchEnds.sorted(by: { $0.key < $1.key }) }
        for (_, end) in ends { end() }
    }

    /// Every processed change and save of this context, as an asynchronous sequence.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// -->
    /// ```swift
    /// for await record in context.changes { print(record.updatedIDs) }
    /// ```
    ///
    /// The stream leaves the context's observers as soon as its consumer ends or cancels the iteration.
    public var changes: AsyncStream<ChangeRecord> {
        let (stream, continuation) = AsyncStream<ChangeRecord>.makeStream()
        let id = observers.tables.withLock { $0.takeID() }
        let streams = observers.streams
        streams.withLock { $0[id] = continuation }
        continuation.onTermination = { _ in streams.withLock { $0[id] = nil } }
        return stream
    }

    func deliver(_ record: ChangeRecord) {
        guard !record.isEmpty else { return }
        if let observers = observersIfAny {
            // Called outside the lock: a handler may cancel its token or add another.
            let handlers = observers.tables.withLock { $0.handlers.sorted(by: { $0.key < $1.key }) }
            for (_, handler) in handlers { handler(record) }
        }
        if let streams = observersIfAny?.streamsIfAny {
            for (_, stream) in streams.withLock({ $0 }).sorted(by: { $0.key < $1.key }) { stream.yield(record) }
        }
        NotificationCenter.default.post(
            name: record.kind == .didSave ? .entityStoreDidSave : .entityStoreObjectsDidChange, object: self,
            userInfo: ["record": record])
    }

    // MARK: - Processing

    /// Coalesces the changes made since the last call into one objects-did-change event and delivers it.
    ///
    /// Runs before a save, at the end of ``perform(_:)`` and ``performUserDrivenChanges(_:)``, and whenever the app
    /// calls it. Changes that cancel out (a value set and set back, an object inserted and deleted) deliver nothing.
    public func processPendingChanges() {
        checkIsolation()
        mergeInbox()
        tellMergeFailure()
        guard !pending.isEmpty else { return }
        var entries = pending.take { registered[$0] }
        var changes: [ObjectChange] = []
        changes.reserveCapacity(entries.count)
        entries.withUnsafeMutableBufferPointer { entries in
            for index in entries.indices {
                let object = entries[index].object
                let isUserDriven = entries[index].isUserDriven
                // Appended as made, without a copy of the change (a reference more on each of its arrays, and back).
                let changed = appendDifference(object, entries[index].before, isUserDriven: isUserDriven, to: &changes)
                // The recorded state is read once: released now, while it is in the cache. Released with the
                // entries after the delivery, each recorded array was a cache miss (a twentieth of a batch of 1,000
                // changes under a controller).
                entries[index].before = .absent
                if changed { noteProcessed(object, userDriven: isUserDriven) }
            }
        }
        // A delivery inside a delivery (an observer that changes objects and processes them) restores the outer
        // one's entries when it ends.
        let outer = deliveringEntries
        deliveringEntries = entries
        defer { deliveringEntries = outer }
        deliver(ChangeRecord(kind: .objectsDidChange, changes: changes, author: name, contextID: contextID))
    }

    /// Runs `body` and then processes its changes into one event.
    public func perform<R>(_ body: () throws -> R) rethrows -> R {
        defer { processPendingChanges() }
        return try body()
    }

    /// Runs `body` as a user-driven change (the UI already shows it, as when the user reorders rows): the
    /// changes are flagged user-driven in events and in the history, and a fetched-results controller applies them
    /// without delivering them (seed 000's "user-driven updates").
    public func performUserDrivenChanges<R>(_ body: () throws -> R) rethrows -> R {
        userDrivenDepth += 1
        defer {
            userDrivenDepth -= 1
            if userDrivenDepth == 0 { processPendingChanges() }
        }
        return try body()
    }

    /// Whether changes made now are user-driven.
    public var isInUserDrivenScope: Bool { userDrivenDepth > 0 }

    /// Records `object`'s state before its first change since the last processing, and the scope it is changed in.
    @inline(__always)
    func recordPending(_ object: ManagedObject) {
        pending.record(object, userDriven: userDrivenDepth > 0) { ObjectState(object) }
        noteChangeForEndOfTurn()
    }

    /// Notes that `object` has processed changes not saved yet, and whether they were user-driven (all of them must
    /// be for its save to be).
    private func noteProcessed(_ object: ManagedObject, userDriven: Bool) {
        if !object.tracking.contains(.processedUnsaved) {
            object.tracking.insert([.processedUnsaved, .userDrivenSoFar])
            processedUnsaved.append(object)
        }
        if !userDriven { object.tracking.remove(.userDrivenSoFar) }
    }

    /// Whether every processed change of `object` since its last save was user-driven (false when it has none).
    func isUserDrivenSinceSave(_ object: ManagedObject) -> Bool {
        object.tracking.isSuperset(of: [.processedUnsaved, .userDrivenSoFar])
    }

    /// Forgets which objects have processed changes (after a save or a rollback).
    func clearProcessedUnsaved() {
        for object in processedUnsaved { object.tracking.subtract([.processedUnsaved, .userDrivenSoFar]) }
        processedUnsaved = []
    }

    /// Appends the change between an object's recorded state and its state now to `changes`; returns false (and
    /// appends nothing) when nothing changed.
    func appendDifference(
        _ object: ManagedObject, _ before: PendingChanges.Before, isUserDriven: Bool = false,
        to changes: inout [ObjectChange]
    ) -> Bool {
        let id = object.objectID
        var isAlive = !object.isDeleted && object.context === self
        // A refresh turned the object into a fault after its state was recorded with values (or deleted): its
        // stored values are what it shows now.
        if isAlive, object.values == nil, case .state(let state) = before, state.values != nil || state.isDeleted {
            do {
                try fault(in: object)
            } catch let error as EntityStoreError where error.code == .objectNotFound && error.objectID == id {
                // Deleted elsewhere (a delete this context has not merged): a fetch no longer finds it, so it is
                // gone from what the context shows too. Reading it throws `objectNotFound`.
                isAlive = false
            } catch {
                // Processing cannot throw: the next fetch or save does.
                inbox.receive(.failure(EntityStoreError.wrapping(error, "loading \(id) after its refresh")))
                return false
            }
        }
        let names = object.entityBox.attributeNames
        // The whole state when one was recorded; with values alone, the rest of the state is the object's own.
        let (state, previous, wasAlive): (ObjectState?, [Value]?, Bool) =
            switch before {
            case .absent: (nil, nil, false)
            case .values(let values): (nil, values, true)
            case .state(let state): (state, state.values ?? state.committed, !state.isDeleted)
            }
        switch (wasAlive, isAlive) {
        case (false, true):
            changes.append(
                ObjectChange(
                    objectID: id, kind: .insert, changedKeys: names, old: .dictionary([:]),
                    new: .positional(names: names, values: object.values ?? []), isUserDriven: isUserDriven))
            return true
        case (true, false):
            changes.append(
                ObjectChange(
                    objectID: id, kind: .delete, changedKeys: names,
                    old: .positional(names: names, values: previous ?? []),
                    new: .dictionary([:]),
                    links: .sets((state?.related ?? object.related).map { ($0.key, $0.value, nil) }),
                    isUserDriven: isUserDriven))
            return true
        case (false, false):
            return false
        case (true, true):
            break
        }
        guard let state else {
            // Values alone changed (the usual update): one comparison, no temporaries to copy into the change.
            guard let previous, let current = object.values else { return false }
            let (keys, old, new) = ObjectChange.differences(object.entityBox, from: previous, to: current)
            guard !keys.isEmpty else { return false }
            changes.append(
                ObjectChange(
                    objectID: id, kind: .update, changedKeys: keys, old: old, new: new, isUserDriven: isUserDriven))
            return true
        }
        // The changed attributes' names and values as they are: the dictionaries are built only when read.
        var (keys, old, new): ([String], ObjectChange.ValueStorage, ObjectChange.ValueStorage) =
            ([], .dictionary([:]), .dictionary([:]))
        if let previous, let current = object.values {
            (keys, old, new) = ObjectChange.differences(object.entityBox, from: previous, to: current)
        }
        appendTransientDifferences(object, state, &keys, &old, &new)
        var links: [(name: String, old: TargetSet, new: TargetSet?)] = []
        for relationship in object.entity.relationships {
            // A relationship loaded after the state was recorded held what the store holds then (it cannot change
            // before it is loaded): the targets it was loaded with. One loaded then and unloaded since (by a
            // refresh) is loaded again to compare.
            var current = object.related[relationship.name]
            if current == nil, state.related[relationship.name] != nil {
                do {
                    current = try targets(of: object, relationship)
                } catch {
                    inbox.receive(.failure(EntityStoreError.wrapping(error, "loading \(id) after its refresh")))
                }
            }
            guard let current,
                let previous = state.related[relationship.name] ?? object.committedRelated[relationship.name],
                previous != current
            else { continue }
            keys.append(relationship.name)
            links.append((relationship.name, previous, current))
        }
        guard !keys.isEmpty else { return false }
        changes.append(
            ObjectChange(
                objectID: id, kind: .update, changedKeys: keys, old: old, new: new,
                links: links.isEmpty ? .none : .sets(links), isUserDriven: isUserDriven))
        return true
    }

    /// Adds the transient attributes whose values differ between `state` and `object` to an update's keys and
    /// values.
    private func appendTransientDifferences(
        _ object: ManagedObject, _ state: ObjectState, _ keys: inout [String], _ old: inout ObjectChange.ValueStorage,
        _ new: inout ObjectChange.ValueStorage
    ) {
        guard state.transients != object.transientValues else { return }
        let names = object.entity.transientAttributes.map(\.name)
        let previous = state.transients.isEmpty ? object.savedTransients : state.transients
        let current = object.currentTransients
        var (oldValues, newValues) = (old.values(of: keys), new.values(of: keys))
        for i in names.indices where previous[i] != current[i] {
            keys.append(names[i])
            oldValues.append(previous[i])
            newValues.append(current[i])
        }
        (old, new) = (.positional(names: keys, values: oldValues), .positional(names: keys, values: newValues))
    }
}
