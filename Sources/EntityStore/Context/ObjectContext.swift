import Foundation
import LMDB

/// A scratchpad of managed objects on a ``PersistentStore``: insert, fetch, change, delete, then save or roll back.
///
/// A context is not `Sendable`: it lives in one isolation domain (the main actor, say), and the compiler keeps it
/// there. Several contexts can work on one store; what crosses between them is object IDs and change records.
///
/// <!-- snippet
/// uses: library
/// let store = try openLibrary()
/// -->
/// ```swift
/// let context = ObjectContext(store: store)
/// let author = try context.insert("Author")
/// try author.setValue("Ursula", forKey: "name")
/// try context.save()
/// ```
public final class ObjectContext {
    /// The store the context reads from and saves to.
    public let store: PersistentStore
    /// A name for the context, recorded as the author of its saves.
    public var name: String?

    // The bookkeeping below is `@exclusivity(unchecked)`: a context is confined to one isolation domain and only its
    // own methods touch these properties, none across a call that could re-enter; the run-time exclusivity checks
    // on them cost about a tenth of an insert's and a fetch's instructions (callgrind, session 4).

    /// One object per ID (uniquing).
    @exclusivity(unchecked) var registered = ObjectRegistry()
    /// Objects touched since the last save or rollback (some may have been changed back), all registered.
    @exclusivity(unchecked) var dirty = UnsavedObjects()
    /// The processed entries behind the objects-did-change record being delivered, in ID order (the array
    /// processing made, not a copy): a controller recomputing its rows finds each changed object here by a walk in
    /// step with its IDs (``FetchReader/subject(for:among:from:)``) where a lookup in the registry hashed each ID
    /// into a table of every registered object (a cache miss each). Their recorded states are released by then
    /// (`.absent`): only the objects are read. Empty outside a delivery.
    @exclusivity(unchecked) var deliveringEntries: [PendingChanges.Entry] = []
    /// The records the last scan of a fetch read, for a tracer (``PersistentStore/trace(_:_:)``).
    @exclusivity(unchecked) var recordsReadByLastScan = 0
    /// When set, the state of every object before its first change, for restoring after a failed save.
    @exclusivity(unchecked) var saveSnapshot: [ObjectID: ObjectState?]?
    /// Undo and redo of unsaved changes.
    ///
    /// Made with the context, unlike its observers: every change reaches it several times, and a lazily made one
    /// (an optional, its reference counted per access) cost a value set ~180 instructions.
    let undo = UndoStack()
    /// Faults from a batched fetch: faulting one loads its whole batch.
    @exclusivity(unchecked) var faultBatches: [ObjectID: FaultBatch] = [:]
    /// The storage a fault read last: faults come in runs of one entity, and comparing a name costs less than
    /// hashing it for the store's dictionary.
    @exclusivity(unchecked) private var lastFaultStorage: EntityStorage?

    /// The store's storage of `entity`, through ``lastFaultStorage``.
    func lastStorage(for entity: String) throws -> EntityStorage {
        if let storage = lastFaultStorage, storage.entity.name == entity { return storage }
        let storage = try store.storage(for: entity)
        lastFaultStorage = storage
        return storage
    }
    /// The storage and key block of the entity inserted last: inserts come in runs of one entity, and comparing a
    /// name costs less than finding the entity and its key sequence by name (two dictionaries, each hashing it).
    @exclusivity(unchecked) private var lastInserted: (storage: EntityStorage, keys: KeyBlock)?
    /// The identity of this context instance, recorded with its saves.
    ///
    /// Made when first asked for (by a save, a merge or the app): a random UUID costs a system call, which was half
    /// of making and releasing a context (contexts made per query, as in the benchmarks, paid it every time).
    public private(set) lazy var contextID = UUID()
    /// States of objects before their first change since the last `processPendingChanges()`, and the scopes they
    /// were changed in.
    @exclusivity(unchecked) var pending = PendingChanges()
    @exclusivity(unchecked) var userDrivenDepth = 0
    /// The objects with processed changes not saved yet; each one's bits say whether all of those changes were
    /// user-driven, for the save's record.
    @exclusivity(unchecked) var processedUnsaved: [ManagedObject] = []
    /// Who is told about changes.
    var observers: ContextObservers { madeOnFirstUse(&observersIfAny, ContextObservers.init) }
    /// Made for the first observer, stream or batch: a context made for one fetch makes none.
    @exclusivity(unchecked) private(set) var observersIfAny: ContextObservers?
    /// Store changes waiting to be merged (automatic merging).
    var inbox: ChangeInbox { madeOnFirstUse(&inboxIfAny, ChangeInbox.init) }
    /// Made when the context first merges or fails to: most contexts never merge, and an inbox is four locks to make
    /// and tear down (a fifth of a small fetch in a context made for it).
    @exclusivity(unchecked) var inboxIfAny: ChangeInbox?
    /// Observation registrars of released models, for the next models to read (see `Model.deinit`).
    var registrarPool: RegistrarPool { madeOnFirstUse(&registrarPoolIfAny, RegistrarPool.init) }
    /// Made when the context first wraps an object in a model.
    @exclusivity(unchecked) private var registrarPoolIfAny: RegistrarPool?
    /// The model classes already checked against the store's schema.
    @exclusivity(unchecked) var checkedModels: [ObjectIdentifier: String] = [:]
    @exclusivity(unchecked) var lastCheckedModel: ObjectIdentifier?
    @exclusivity(unchecked) var lastCheckedEntityName = ""
    /// The last model class inserted, and its initial values made anew per instance (a typed insert in a loop
    /// looks them up without a lock).
    @exclusivity(unchecked) var lastInsertedModel: ObjectIdentifier?
    @exclusivity(unchecked) var lastInsertedPerObject: [(key: String, index: Int)] = []
    /// The models a typed to-many read returned last, while they are current (see `ToMany`): appending to a typed
    /// to-many in a loop (`folder.notes.append(note)`) read and wrapped every object of it again for each append.
    @exclusivity(unchecked) var lastToMany: LastToMany?
    /// Metadata the save in progress writes in its transaction (``save(settingMetadata:)``); emptied once written.
    @exclusivity(unchecked) var pendingMetadata: [(key: [UInt8], value: [UInt8]?)] = []
    /// Failures of typed-model setters (which cannot throw), thrown by the next save.
    @exclusivity(unchecked) var accessorFailures: [EntityStoreError] = []
    /// How a save resolves conflicts with changes saved elsewhere since the objects were read.
    public var mergePolicy: MergePolicy = .error

    /// The actor the context was made on, where its automatic merges run (none outside an actor).
    weak var home: (any Actor)?
    /// Whether the context processes its pending changes at the end of its actor's turn, and whether that is
    /// scheduled (see ``processesPendingChangesAtEndOfTurn``).
    @exclusivity(unchecked) var turn = EndOfTurn.off
    /// For a ``ContextActor``'s context (made outside any actor, run by its executor): enqueues work on the
    /// executor, after the job running now.
    var turnQueue: (@Sendable (@escaping @Sendable () -> Void) -> Void)?
    /// The context this one reads through and saves into (a child context's); nil for a context on the store.
    public let parent: ObjectContext?

    /// Creates a context on `store`, living in the caller's isolation domain.
    ///
    /// Made on an actor (the main actor, a ``ContextActor``), the context stays there: the compiler keeps it from
    /// being sent elsewhere, and with ``automaticallyMergesChangesFromStore`` on, other contexts' saves are merged
    /// on that actor as they arrive. Made outside any actor, it merges them at its next processing point instead.
    ///
    /// - Parameters:
    ///   - store: The store to read from and save to.
    ///   - name: A name for the context, recorded as the author of its saves.
    ///   - isolation: The actor the context lives on; the caller's by default.
    public init(store: PersistentStore, name: String? = nil, isolation: isolated (any Actor)? = #isolation) {
        self.store = store
        self.name = name
        parent = nil
        home = isolation
        if isolation != nil { turn = .armed }
    }

    /// Creates a child context of `parent`: a scratchpad (Core Data's child context) whose fetches and objects see
    /// the parent's unsaved changes, whose ``save()`` pushes its changes into the parent (not the store), and which
    /// can be dropped without a trace. The parent's own save writes everything to the store. Children can have
    /// children.
    ///
    /// A child lives in the same isolation domain as its parent. Its save runs the delete rules (cascades, nullified
    /// links, a deny rule refusing the save), checks that what it changes still exists in the parent and hands the
    /// changes over as one batch (the parent's controllers and observers see one change, its undo one group); a save
    /// refused leaves the child as it was. Validation (required values, rules, uniqueness, conflicts with the store)
    /// happens when the parent saves to the store. Its fetches judge predicates and sort keys read through
    /// relationships by the related objects as the child holds them.
    public init(parent: ObjectContext, name: String? = nil, isolation: isolated (any Actor)? = #isolation) {
        self.store = parent.store
        self.name = name
        self.parent = parent
        home = isolation
        if isolation != nil { turn = .armed }
    }

    deinit {
        // An automatically merging context leaves the store's subscribers, or its inbox would grow with every save
        // and the watcher would never stop.
        stopMerging()
        detachRegisteredObjects()
    }

    /// Clears the context of every registered object, whose reference to it is unretained: an object the app still
    /// holds then reports no context instead of pointing at a released one.
    func detachRegisteredObjects() {
        for object in registered.objects { object.context = nil }
    }

    // MARK: - State

    /// Whether the context has unsaved inserts, updates or deletes.
    public var hasChanges: Bool { dirty.contains { $0.hasChanges } }

    /// The inserted, unsaved objects, ordered by ID.
    public var insertedObjects: [ManagedObject] { dirtyObjects { $0.isInserted && !$0.isDeleted } }
    /// The changed, unsaved objects (not inserted, not deleted), ordered by ID.
    public var updatedObjects: [ManagedObject] { dirtyObjects { $0.isUpdated } }
    /// The deleted, unsaved objects (inserted-then-deleted objects are simply gone), ordered by ID.
    public var deletedObjects: [ManagedObject] { dirtyObjects { $0.isDeleted && !$0.isInserted } }
    /// Every object registered in the context, ordered by ID.
    public var registeredObjects: [ManagedObject] { registered.objects.sorted { $0.objectID < $1.objectID } }

    private func dirtyObjects(_ filter: (ManagedObject) -> Bool) -> [ManagedObject] {
        var objects = dirty.filter(filter)
        objects.sortByID()
        return objects
    }

    // MARK: - Objects

    /// Inserts a new object of `entityName`, with its attributes' default values.
    ///
    /// Its ``ObjectID`` is permanent at once.
    public func insert(_ entityName: String) throws -> ManagedObject {
        checkIsolation()
        let target: (storage: EntityStorage, keys: KeyBlock)
        if let last = lastInserted, last.storage.entity.name == entityName {
            target = last
        } else {
            target = (try store.insertableStorage(for: entityName), store.keyBlock(for: entityName))
            lastInserted = target
        }
        let storage = target.storage
        let id = ObjectID(entityName: entityName, primaryKey: try store.newPrimaryKey(from: target.keys))
        return mutation {
            let object = ManagedObject(objectID: id, entity: storage.entityBox, context: self)
            // Its own copy now: the values are written next, and a write to shared storage copies it slowly.
            object.values = storage.entityBox.newValues()
            object.isInserted = true
            object.related = storage.entityBox.emptyRelationships
            object.committedRelated = storage.entityBox.emptyRelationships
            registered.append(new: object)
            willInsert(object)
            dirty.insert(object)
            return object
        }
    }

    /// The object for `id`: the registered one, or a new fault (no read happens until a value is needed).
    /// - Throws: ``EntityStoreError/Code/unknownEntity`` when the schema has no such entity.
    public func object(with id: ObjectID) throws -> ManagedObject {
        // One access, so one hash of the ID (a lookup then an insert hashed it twice), and the entity found by the
        // last one used.
        try registered.object(for: id) {
            ManagedObject(objectID: id, entity: try lastStorage(for: id.entityName).entityBox, context: self)
        }
    }

    /// The object for `id` of `entity`: registered, or a new fault, with one dictionary access.
    @inline(__always)
    func registered(_ id: ObjectID, entity: EntityBox) -> ManagedObject {
        registered.object(for: id) { ManagedObject(objectID: id, entity: entity, context: self) }
    }

    /// The object for an ID of an entity the store has (a controller's or a fetch's): registered, or a new fault.
    func registeredObject(for id: ObjectID) -> ManagedObject {
        if let object = registered[id] { return object }
        let entity = store.storages[id.entityName]?.entityBox ?? EntityBox(store.schema.entity(id.entityName)!)
        let object = ManagedObject(objectID: id, entity: entity, context: self)
        registered[id] = object
        return object
    }

    /// The object for `id`, loaded: throws when the store has no such object.
    /// - Throws: ``EntityStoreError/Code/objectNotFound`` naming entity and ID.
    public func existingObject(with id: ObjectID) throws -> ManagedObject {
        let object = try object(with: id)
        if object.isDeleted && !dirty.contains(object) {
            throw EntityStoreError(
                .objectNotFound, "\(id) was deleted", entity: id.entityName, objectID: id)
        }
        try object.loadIfFault()
        return object
    }

    /// Throws unless `object` is registered in this context; an object no longer in any context (its delete saved,
    /// the context reset) is named as such rather than as another context's.
    func checkRegistered(_ object: ManagedObject) throws {
        guard object.context !== self else { return }
        _ = try object.liveContext()
        throw EntityStoreError(
            .invalidObject, "\(object.objectID) belongs to another context", entity: object.entity.name,
            objectID: object.objectID)
    }

    /// Marks `object` deleted; the delete rules run and the record goes away at ``save()``.
    ///
    /// Deleting an inserted object forgets it: it leaves its relationships at once, and its cascade rules delete their
    /// targets at once (whatever the other rules, nothing of it reaches the store).
    public func delete(_ object: ManagedObject) throws {
        checkIsolation()
        try checkRegistered(object)
        guard !object.isDeleted else { return }
        if !object.isInserted { _ = try object.loadedValues() }
        try mutation {
            willChange(object)
            object.isDeleted = true
            dirty.insert(object)
            if object.isInserted {
                // An unsaved object leaves its relationships at once: nothing of it reaches the store. Its cascade
                // rules delete their targets now (a stored object's run when it is saved): a new project deleted
                // takes the tasks given to it along, as it would once saved.
                var cascaded: [ManagedObject] = []
                for relationship in object.entity.relationships {
                    for target in try targets(of: object, relationship) {
                        if relationship.deleteRule == .cascade { cascaded.append(try self.object(with: target)) }
                        try unlinkIDs(object, relationship, target)
                    }
                }
                for target in cascaded { try delete(target) }
            }
        }
    }

    /// Loads a fault's record (and the rest of its fetch batch, if it has one).
    func fault(in object: ManagedObject) throws {
        if let parent {
            try faultFromParent(object, parent)
            return
        }
        // (An empty dictionary still hashes the key it is asked for.)
        if !faultBatches.isEmpty, let batch = faultBatches[object.objectID] {
            try loadFaults(batch.ids.compactMap { registered[$0] })
            if object.values != nil { return }
        }
        let loaded = try mappingStorageErrors("loading \(object.objectID)") {
            try store.read { txn in try storedRecord(of: object.objectID, in: txn) }
        }
        guard let (record, rowVersion) = loaded else {
            throw EntityStoreError(
                .objectNotFound, "\(object.objectID) does not exist in the store (deleted elsewhere?)",
                entity: object.entity.name, objectID: object.objectID)
        }
        object.keep(record: record, rowVersion: rowVersion)
    }

    /// The stored record of `id` as `txn` sees it, checked (every check decoding makes) and copied, with its row
    /// version; nil when the store does not hold the object. Kept as bytes by `ManagedObject.keep(record:rowVersion:)`
    /// and decoded when the values are first used: an object looked up for one number decodes nothing else (see
    /// `ManagedObject.loadedValue(at:)`).
    func storedRecord(of id: ObjectID, in txn: ReadTransaction) throws -> ([UInt8], UInt64)? {
        let storage = try lastStorage(for: id.entityName)
        guard let bytes = try txn.get(id.primaryKey, in: storage.records) else { return nil }
        return try RecordCodec.checkedCopy(bytes, storage.entityBox, key: id.primaryKey)
    }

    // MARK: - Discarding changes

    /// Discards every unsaved change: inserted objects go away, deleted ones come back, values return to their
    /// stored state. The undo history is cleared.
    public func rollback() {
        checkIsolation()
        accessorFailures = []
        for object in dirty {
            recordPending(object)
            object.announceChange()
        }
        defer { processPendingChanges() }
        clearProcessedUnsaved()
        for object in dirty {
            if object.isInserted {
                registered[object.objectID] = nil
                object.context = nil
                continue
            }
            object.isDeleted = false
            object.values = object.committed
            object.related = object.committedRelated
            object.transientValues = object.committedTransients
        }
        dirty.removeAll()
        undo.clear()
    }

    /// Forgets every registered object and every unsaved change. Objects held elsewhere are detached.
    ///
    /// The unsaved changes are discarded as ``rollback()`` discards them, and reported the same way: observers and
    /// fetched-results controllers see the inserted objects go, the deleted ones come back and the changed ones
    /// return to their stored values, so that a controller never lists an object the reset threw away.
    public func reset() {
        checkIsolation()
        if !dirty.isEmpty { rollback() }
        accessorFailures = []
        detachRegisteredObjects()
        lastToMany = nil
        registered = ObjectRegistry()
        faultBatches = [:]
        dirty.removeAll()
        undo.clear()
    }

    /// Reloads `object` from the store.
    ///
    /// What the refresh changes (unsaved changes discarded, a deleted object back, values another context saved
    /// meanwhile) is an update, insert or delete at the next processing point, like any change: observers and
    /// fetched-results controllers follow it. An object turned into a fault is loaded again then, when it had
    /// values before; one another context deleted meanwhile (a delete this context has not merged) is then gone, as
    /// a fetch would find it, and reading it throws ``EntityStoreError/Code/objectNotFound``.
    ///
    /// Discarding a relationship change discards both sides of the link: an object linked to the refreshed one
    /// since the last save is unlinked (a to-one of its goes back to the target it has stored), and one unlinked
    /// from it is linked again. Both objects of every link agree, as after any change.
    ///
    /// - Parameters:
    ///   - object: An object registered in this context.
    ///   - mergeChanges: Keep the object's unsaved changes on top of the fresh stored values (`true`), or discard
    ///     them and turn the object into a fault (`false`).
    public func refresh(_ object: ManagedObject, mergeChanges: Bool) throws {
        guard object.context === self, !object.isInserted else { return }
        if object.values != nil || object.isDeleted { recordPending(object) }
        try reload(object, mergeChanges: mergeChanges)
        // A to-one kept over a stored target that changed meanwhile: that target no longer lists the object.
        if mergeChanges && object.hasChanges { try reconcileInverses(of: [object]) { throw $0 } }
    }

    /// Reloads the object a typed model wraps from the store, as `refresh(_:mergeChanges:)` of its managed object
    /// does.
    public func refresh(_ model: some Model, mergeChanges: Bool) throws {
        try refresh(model.managedObject, mergeChanges: mergeChanges)
    }

    /// Reloads every registered object from the store, keeping each one's unsaved changes on top of the values
    /// stored now (Core Data's `refreshAllObjects()`): values other contexts or processes saved meanwhile are read
    /// without waiting for a merge, and nothing unsaved is lost. Inserted objects stay as they are. What changes is
    /// delivered at the next processing point, like any change; an object deleted in the store meanwhile is gone
    /// then, and reading it throws ``EntityStoreError/Code/objectNotFound``.
    public func refreshAllObjects() throws {
        checkIsolation()
        for object in registered.objects where !object.isInserted {
            try refresh(object, mergeChanges: true)
        }
    }

    /// Discards the other side of each unsaved link change of `object`, whose own side a refresh is discarding: a
    /// link is a change of both its objects, and the two must agree. A partner that gained the object loses it (and
    /// a to-one of the partner's goes back to the target it had stored, which gets the partner back); a partner that
    /// lost the object gets it back (leaving the target its to-one had taken instead). Partners this context has not
    /// loaded the inverse of hold nothing to discard.
    private func discardPartnerSides(of object: ManagedObject) {
        let id = object.objectID
        for (name, current) in object.related {
            let stored = object.committedRelated[name] ?? []
            guard current != stored, let relationship = object.entity.relationship(name) else { continue }
            for target in current.subtracting(stored) {
                setLink(of: target, relationship.inverse, to: id, linked: false, back: name)
            }
            for target in stored.subtracting(current) {
                setLink(of: target, relationship.inverse, to: id, linked: true, back: name)
            }
        }
    }

    /// Links or unlinks `id` in `name` of the registered object `source` (when loaded there), recording the change.
    /// With `back` (the inverse's name, on the objects `name` holds), one level further for to-ones: a to-one that
    /// loses `id` takes back its stored target, and one that gains it leaves its other target, each of which then
    /// gains or loses `source` (a to-many there needs no more).
    private func setLink(of source: ObjectID, _ name: String, to id: ObjectID, linked: Bool, back: String?) {
        guard let partner = registered[source], !partner.isDeleted,
            let relationship = partner.entity.relationship(name), var targets = partner.related[name],
            targets.contains(id) != linked
        else { return }
        recordPending(partner)
        partner.announceChange()
        dirty.insert(partner)
        var released: TargetSet = []
        var regained: TargetSet = []
        if linked {
            if !relationship.isToMany && back != nil { released = targets }
            targets = relationship.isToMany ? targets.union([id]) : [id]
        } else {
            targets.remove(id)
            if back != nil, !relationship.isToMany, let committed = partner.committedRelated[name],
                !committed.contains(id)
            {
                regained = committed
                targets = committed
            }
        }
        partner.related[name] = targets
        guard let back else { return }
        for other in released where other != id { setLink(of: other, back, to: source, linked: false, back: nil) }
        for other in regained { setLink(of: other, back, to: source, linked: true, back: nil) }
    }

    /// ``refresh(_:mergeChanges:)`` without recording the change for processing (a merge reports its own).
    func reload(_ object: ManagedObject, mergeChanges: Bool) throws {
        guard object.context === self, !object.isInserted else { return }
        object.announceChange()
        if !mergeChanges || !object.hasChanges {
            if !object.isDeleted { discardPartnerSides(of: object) }
            object.values = nil
            object.committed = nil
            object.related = [:]
            object.committedRelated = [:]
            object.isDeleted = false
            dirty.remove(object)
            return
        }
        let changes = object.changedValues()
        let relationshipChanges = object.related.filter { object.committedRelated[$0.key] != $0.value }
        let previouslyCommitted = object.committedRelated
        object.values = nil
        try fault(in: object)
        var values = object.values ?? []
        for (key, value) in changes {
            if let index = object.entity.attributeIndex(key) { values[index] = value }
        }
        object.values = values
        object.committedRelated = [:]
        object.related = [:]
        for (name, targets) in relationshipChanges {
            guard let relationship = object.entity.relationship(name) else { continue }
            let stored = try storedTargets(of: object.objectID, relationship)
            object.committedRelated[name] = stored
            if relationship.isToMany {
                // The context's additions and removals on top of what is stored now: targets added or removed
                // elsewhere meanwhile are kept.
                let before = previouslyCommitted[name] ?? []
                object.related[name] = stored.union(targets.subtracting(before)).subtracting(
                    before.subtracting(targets))
            } else {
                object.related[name] = targets
            }
        }
    }

    // MARK: - Mutation bookkeeping

    /// Runs a public mutation as one undo group (unless an explicit group is open).
    func mutation<R>(_ body: () throws -> R) rethrows -> R {
        undo.open()
        defer { undo.close() }
        return try body()
    }

    /// Records `object`'s state before its first change, for the undo group and a save in progress. A write of
    /// attribute `attribute` records only the old value for undo.
    func willChange(_ object: ManagedObject, attribute: Int? = nil) {
        if let attribute, let values = object.values {
            return willChange(object, attribute: attribute, old: values[attribute])
        }
        recordPending(object)
        object.announceChange()
        undo.record(object, ObjectState(object))
        snapshotForSave(object.objectID, object)
    }

    /// ``willChange(_:attribute:)`` for a change of `object`'s relationship `relationship`: `target` is about to be
    /// added (or removed). A to-many's undo keeps the one target; a to-one's, the object's whole state (a target at
    /// most).
    func willChange(_ object: ManagedObject, _ relationship: Relationship, _ target: ObjectID, added: Bool) {
        guard relationship.isToMany else { return willChange(object) }
        recordPending(object)
        object.announceChange()
        undo.recordLink(object, relationship.name, target, added: added)
        snapshotForSave(object.objectID, object)
    }

    /// Records that `object`, just registered, did not exist before: for processing, the undo group and a save in
    /// progress.
    func willInsert(_ object: ManagedObject) {
        pending.record(object, userDriven: userDrivenDepth > 0) { nil }
        noteChangeForEndOfTurn()
        undo.record(object, nil)
        snapshotForSave(object.objectID, nil)
    }

    /// ``willChange(_:attribute:)`` for a registered object's write of attribute `attribute`, whose value is `old`:
    /// the object in hand, so no lookup of it by ID.
    func willChange(_ object: ManagedObject, attribute: Int, old: Value) {
        pending.recordValues(object, userDriven: userDrivenDepth > 0)
        noteChangeForEndOfTurn()
        object.announceChange()
        undo.recordAttribute(object, attribute, old)
        snapshotForSave(object.objectID, object)
    }

    /// Records, while a save runs, the state `object` (registered under `id`, or nil) had before the save changed it.
    private func snapshotForSave(_ id: ObjectID, _ object: ManagedObject?) {
        guard saveSnapshot != nil else { return }
        fillIfAbsent(&saveSnapshot![id]) { object.map(ObjectState.init) }
    }

    func setTransient(_ object: ManagedObject, index: Int, to value: Value) throws {
        guard !object.isDeleted else {
            throw EntityStoreError(
                .invalidObject, "\(object.objectID) is deleted", entity: object.entity.name,
                objectID: object.objectID)
        }
        var current = object.currentTransients
        guard current[index] != value else { return }
        mutation {
            willChange(object)
            current[index] = value
            object.transientValues = current
            dirty.insert(object)
        }
    }

    func setAttribute(_ object: ManagedObject, index: Int, to value: Value) throws {
        guard !object.isDeleted else {
            throw EntityStoreError(
                .invalidObject, "\(object.objectID) is deleted", entity: object.entity.name,
                objectID: object.objectID)
        }
        // The old value alone: holding the values array over the write made the write copy it.
        let old = try object.loadedValue(at: index)
        guard old != value else { return }
        mutation {
            willChange(object, attribute: index, old: old)
            object.values?[index] = value
            dirty.insert(object)
        }
    }

    /// Restores objects to recorded states (undo, redo, a failed save).
    func restore(_ states: [ObjectID: ObjectState?]) {
        for (id, state) in states {
            let current = registered[id]
            if let current {
                recordPending(current)
                current.announceChange()
            } else if let state {
                // Nothing is registered under the ID: it did not exist before.
                pending.record(state.object, userDriven: userDrivenDepth > 0) { nil }
                noteChangeForEndOfTurn()
            }
            guard let state else {
                if let current {
                    current.context = nil
                    registered[id] = nil
                    dirty.remove(current)
                }
                continue
            }
            let object = current ?? state.object
            object.context = self
            registered[id] = object
            state.apply(to: object)
            dirty.insert(object)
        }
    }
}

/// The mutable state of a managed object, captured for undo and for restoring after a failed save.
///
/// A class, not a struct: the pending, undo and save snapshots keep one per object, and an inserted object's entry
/// is none at all; as a struct every entry, none included, took the whole state's size in its table.
final class ObjectState {
    let object: ManagedObject
    let values: [Value]?
    let committed: [Value]?
    let rowVersion: UInt64
    let related: RelationshipTargets
    let committedRelated: RelationshipTargets
    let isInserted: Bool
    let isDeleted: Bool
    var transients: [Value] = []
    var committedTransients: [Value] = []

    /// This state with other values.
    func with(values: [Value]) -> ObjectState { with(values: values, committed: committed) }

    /// This state with other relationship targets.
    func with(related: RelationshipTargets) -> ObjectState {
        with(values: values, committed: committed, related: related)
    }

    /// This state with the parts given replaced (its transients and flags kept).
    private func with(
        values: [Value]?, committed: [Value]?, rowVersion: UInt64? = nil, related: RelationshipTargets? = nil,
        committedRelated: RelationshipTargets? = nil
    ) -> ObjectState {
        let state = ObjectState(
            object: object, values: values, committed: committed, rowVersion: rowVersion ?? self.rowVersion,
            related: related ?? self.related, committedRelated: committedRelated ?? self.committedRelated,
            isInserted: isInserted, isDeleted: isDeleted)
        state.transients = transients
        state.committedTransients = committedTransients
        return state
    }

    init(
        object: ManagedObject, values: [Value]?, committed: [Value]?, rowVersion: UInt64,
        related: RelationshipTargets, committedRelated: RelationshipTargets, isInserted: Bool, isDeleted: Bool
    ) {
        self.object = object
        self.values = values
        self.committed = committed
        self.rowVersion = rowVersion
        self.related = related
        self.committedRelated = committedRelated
        self.isInserted = isInserted
        self.isDeleted = isDeleted
    }

    init(_ object: ManagedObject) {
        self.object = object
        values = object.values
        committed = object.committed
        rowVersion = object.rowVersion
        related = object.related
        committedRelated = object.committedRelated
        isInserted = object.isInserted
        isDeleted = object.isDeleted
        transients = object.transientValues
        committedTransients = object.committedTransients
    }

    /// This state without the targets it added to its relationships for which `isGone` is true.
    func dropping(addedTargets isGone: (ObjectID) throws -> Bool) rethrows -> ObjectState {
        var related = related
        var dropped = false
        for (name, targets) in related {
            let stored = committedRelated[name] ?? []
            for target in targets where !stored.contains(target) {
                guard try isGone(target) else { continue }
                related[name]?.remove(target)
                dropped = true
            }
        }
        return dropped ? with(values: values, committed: committed, related: related) : self
    }

    /// This state's unsaved changes on top of what `object` (the same object, later) holds as stored: the values and
    /// relationship targets this state had changed keep its changes, the others take `object`'s stored ones.
    func rebased(onto object: ManagedObject) -> ObjectState {
        var values = values
        if let committed, let base = object.committed, var changed = values, base.count == changed.count {
            for i in changed.indices where ValueSemantics.identical(changed[i], committed[i]) { changed[i] = base[i] }
            values = changed
        } else if values != nil, committed != nil {
            values = object.committed
        }
        var related: RelationshipTargets = [:]
        for (name, targets) in self.related {
            guard let before = committedRelated[name], before != targets else {
                // Unchanged here: what is stored now, loaded when next read if not loaded yet.
                if let stored = object.committedRelated[name] { related[name] = stored }
                continue
            }
            guard let stored = object.committedRelated[name] else {
                related[name] = targets
                continue
            }
            // A to-many keeps the additions and removals made here; a to-one the target chosen here.
            let isToMany = object.entity.relationship(name)?.isToMany ?? false
            related[name] =
                isToMany ? stored.subtracting(before.subtracting(targets)).union(targets.subtracting(before)) : targets
        }
        var committedRelated = object.committedRelated
        for name in related.keys where committedRelated[name] == nil {
            // A changed relationship not loaded now: its stored targets as recorded.
            committedRelated[name] = self.committedRelated[name]
        }
        return with(
            values: values, committed: values == nil ? nil : object.committed, rowVersion: object.rowVersion,
            related: related, committedRelated: committedRelated)
    }

    func apply(to object: ManagedObject) {
        object.transientValues = transients
        object.committedTransients = committedTransients
        object.values = values
        object.committed = committed
        object.rowVersion = rowVersion
        object.related = related
        object.committedRelated = committedRelated
        object.isInserted = isInserted
        object.isDeleted = isDeleted
    }
}

/// Sets a dictionary entry, reached through one access (`&dictionary[key]`), to `make()` when it is absent.
@inline(__always)
func fillIfAbsent<Value>(_ entry: inout Value?, _ make: () -> Value) {
    if case .none = entry { entry = .some(make()) }
}

/// The object in `slot`, made by `make` and kept there on first use: the lazily made parts of contexts (observers,
/// a merge inbox, a registrar pool, a stream lock), which most contexts never need.
@inline(__always)
func madeOnFirstUse<Object: AnyObject>(_ slot: inout Object?, _ make: () -> Object) -> Object {
    if let object = slot { return object }
    let object = make()
    slot = object
    return object
}

extension ObjectContext {
    /// In a debug build, traps a use of the context outside the actor it lives on, at the call, rather than as
    /// memory corrupted later (as GRDB's `preconditionValidQueue` and NIO's `assertInEventLoop` do). The compiler
    /// keeps a context in its isolation domain; this catches what gets past it (`nonisolated(unsafe)`, an
    /// `@unchecked Sendable` wrapper, a context handed to a thread). Release builds check nothing.
    @inline(__always)
    func checkIsolation(_ function: StaticString = #function) {
        #if DEBUG
        if let home {
            home.preconditionIsolated(
                "ObjectContext\(name.map { " '\($0)'" } ?? "") used outside the actor it lives on (in \(function))")
        }
        #endif
    }
}
