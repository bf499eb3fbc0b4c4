import Synchronization

/// An object of an entity, registered in one ``ObjectContext``.
///
/// A context holds one `ManagedObject` per ``ObjectID`` (uniquing). An object starts as a fault and loads its
/// record the first time a value is read. Values are read and written by key, with ``Value``:
///
/// <!-- snippet
/// uses: library
/// let store = try openLibrary()
/// let context = ObjectContext(store: store)
/// -->
/// ```swift
/// let book = try context.insert("Book")
/// try book.setValue("Dune", forKey: "title")
/// let title = try book["title"]            // .string("Dune")
/// ```
///
/// Writing a value equal to the current one is no change. Managed objects are not `Sendable`: pass ``objectID``
/// between threads and look the object up in the other context.
public final class ManagedObject: Hashable, CustomStringConvertible {
    // @exclusivity(unchecked) on the mutable state below: an object is touched only from its context's isolation domain, one access at a time
    // (the compiler keeps a context in one isolation domain; a debug build checks its entry points), so no two
    // accesses overlap; the run-time checks cost more than the work of a typed read or write itself.
    /// The object's identity, permanent from insertion.
    public let objectID: ObjectID
    /// The object's entity.
    ///
    /// Yielded in place rather than returned: a returned `Entity` is a copy, retaining and releasing each of its
    /// arrays and strings, and every dynamic read (`value(forKey:)`) and record decode asked for it.
    public var entity: Entity {
        _read { yield entityBox.entity }
    }
    /// The entity, shared with the other objects of it.
    let entityBox: EntityBox
    /// The context the object is registered in; `nil` once it is deleted and saved, the context is reset, or the
    /// context is gone.
    public internal(set) var context: ObjectContext? {
        get { contextReference?.takeUnretainedValue() }
        set { contextReference = newValue.map { Unmanaged.passUnretained($0) } }
    }
    /// The context, unretained. Not `weak`: a weak reference is an atomic side-table update when every object is
    /// made and released and an atomic load on every value set through the object. Every path that stops
    /// registering an object clears it (a save of its delete, a rollback of its insert, `reset()`, a merge of its
    /// delete), and the context clears it on every object it still registers when it deinitializes, so it never
    /// outlives the context (see ``ObjectContext/detachRegisteredObjects()``).
    @exclusivity(unchecked) private var contextReference: Unmanaged<ObjectContext>?

    // `@exclusivity(unchecked)` on the state below, as on the context's bookkeeping (see `ObjectContext`): an object
    // lives in its context's isolation domain and is read and written on every access.

    /// Current attribute values in schema order; `nil` while the object is a fault.
    var values: [Value]? {
        get {
            if pendingRecord != nil { materialize() }
            return loaded
        }
        // In place: `values?[i] = v` must not copy the array (a setter would see it shared with the getter's copy).
        _modify {
            if pendingRecord != nil { materialize() }
            yield &loaded
        }
        set {
            if pendingRecord != nil { materialize() }
            loaded = newValue
        }
    }
    /// Values as last read from or written to the store; `nil` for an inserted object.
    var committed: [Value]? {
        get {
            if pendingRecord != nil { materialize() }
            return loadedCommitted
        }
        _modify {
            if pendingRecord != nil { materialize() }
            yield &loadedCommitted
        }
        set {
            if pendingRecord != nil { materialize() }
            loadedCommitted = newValue
        }
    }
    @exclusivity(unchecked) private var loaded: [Value]?
    @exclusivity(unchecked) private var loadedCommitted: [Value]?
    /// The record a fetch read for this object, kept as bytes (checked when read) and decoded into ``values`` the
    /// first time they are used: a fetch whose objects are only counted, passed on or partly read decodes nothing it
    /// does not need. The bytes are the fetch's snapshot, so the values are those of the fetch whenever they are
    /// decoded.
    @exclusivity(unchecked) private var pendingRecord: [UInt8]?
    /// The fixed-size values read from ``pendingRecord`` without decoding it (see ``loadedValue(at:)``).
    @exclusivity(unchecked) private var pendingReads: UInt8 = 0
    /// The object's entry in its context's pending changes, while it has one (``Tracking/pending``). Beside
    /// ``pendingReads``, in the padding before the next word.
    @exclusivity(unchecked) var pendingIndex: UInt32 = 0
    /// Transient values (``Entity/transientAttributes``), and their values at the last save; empty until set.
    @exclusivity(unchecked) var transientValues: [Value] = []
    @exclusivity(unchecked) var committedTransients: [Value] = []
    /// The transient values, their defaults before any was set.
    var currentTransients: [Value] {
        transientValues.isEmpty ? entity.transientAttributes.map(\.defaultValue) : transientValues
    }
    var savedTransients: [Value] {
        committedTransients.isEmpty ? entity.transientAttributes.map(\.defaultValue) : committedTransients
    }
    /// The row version the values were read at (optimistic locking).
    @exclusivity(unchecked) var rowVersion: UInt64 = 0
    /// Current relationship targets, by relationship name, loaded one relationship at a time.
    @exclusivity(unchecked) var related = RelationshipTargets() {
        // Changed in place or replaced: either way counted, without a copy (the observer does not read oldValue).
        didSet { relatedVersion &+= 1 }
    }
    /// Moves with every change to ``related``: what a typed to-many read last returned (see
    /// ``ObjectContext/lastToMany``) is current while it has not moved.
    @exclusivity(unchecked) var relatedVersion: UInt32 = 0
    /// Relationship targets as stored, for the relationships loaded so far.
    @exclusivity(unchecked) var committedRelated = RelationshipTargets()

    /// Whether the object was inserted and not yet saved.
    @exclusivity(unchecked) public internal(set) var isInserted = false
    /// Whether the object is deleted (until the delete is saved or rolled back).
    @exclusivity(unchecked) public internal(set) var isDeleted = false
    /// The first typed model made of this object, while it is alive (a typed lookup gives it again). Unretained
    /// rather than weak (a weak reference gives the model a side table, a cost on every model made): the model
    /// clears it in its deinit, while this object is still alive (the model holds it).
    @exclusivity(unchecked) var modelReference: Unmanaged<Model>?
    var model: Model? { modelReference?.takeUnretainedValue() }
    /// The other live models of this object, unretained as ``modelReference``: of other classes (two model classes
    /// of one entity, a superclass's and a subclass's) or made by the app with `init(managedObject:)`. Each is told
    /// of every change, as the first is. Empty (no allocation) for nearly every object.
    @usableFromInline @exclusivity(unchecked) var otherModels: [Unmanaged<Model>] = []
    /// For a recording instance of a model (key paths, schemas): where the keys read are recorded.
    @usableFromInline let recorder: KeyRecorder?
    /// The context's bookkeeping of this object (see ``Tracking``): whether it is unsaved, pending processing, and
    /// how it was touched. Kept on the object so that each change is a bit test rather than a hash of its ID in
    /// one of the context's sets.
    @exclusivity(unchecked) var tracking: Tracking = []

    init(objectID: ObjectID, entity: EntityBox, context: ObjectContext) {
        self.objectID = objectID
        self.entityBox = entity
        self.contextReference = Unmanaged.passUnretained(context)
        self.recorder = nil
    }

    /// An object of no context that records the keys read through its model.
    init(recordingFor entityName: String, recorder: KeyRecorder) {
        self.objectID = ObjectID(entityName: entityName, primaryKey: 0)
        self.entityBox = EntityBox(Entity(entityName))
        self.contextReference = nil
        self.recorder = recorder
    }

    /// What the context's bookkeeping records of the object, as bits.
    ///
    /// The context keeps each kind of tracked object in a list (``ObjectContext/dirty``, the pending changes);
    /// these bits say whether the object is a member, so joining, leaving and testing never hash the object's ID.
    struct Tracking: OptionSet {
        let rawValue: UInt8
        /// In the context's unsaved objects.
        static let unsaved = Tracking(rawValue: 1 << 0)
        /// In the unsaved objects' list (possibly no longer unsaved: the list drops such objects lazily).
        static let unsavedListed = Tracking(rawValue: 1 << 1)
        /// Its state before its first change since the last processing is recorded.
        static let pending = Tracking(rawValue: 1 << 2)
        /// Changed inside a user-driven scope since the last processing.
        static let touchedUserDriven = Tracking(rawValue: 1 << 3)
        /// Changed outside a user-driven scope since the last processing.
        static let touchedOther = Tracking(rawValue: 1 << 4)
        /// Has processed changes not saved yet; ``userDrivenSoFar`` says whether all of them were user-driven.
        static let processedUnsaved = Tracking(rawValue: 1 << 5)
        static let userDrivenSoFar = Tracking(rawValue: 1 << 6)
    }

    /// Whether the object's values have not been loaded yet.
    public var isFault: Bool { loaded == nil && pendingRecord == nil && !isInserted }

    /// Whether the object has unsaved changes to its values or relationships (and is neither inserted nor deleted).
    public var isUpdated: Bool { !isInserted && !isDeleted && hasChanges }

    /// Whether any value or relationship differs from the stored state.
    public var hasChanges: Bool {
        if isInserted && isDeleted { return false }  // inserted, then deleted: nothing to save
        if isInserted || isDeleted { return true }
        if pendingRecord == nil, let values, let committed, values != committed { return true }
        return related.contains { committedRelated[$0.key] != $0.value }
    }

    public static func == (lhs: ManagedObject, rhs: ManagedObject) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    public var description: String {
        guard let values else { return "<\(objectID) fault>" }
        let fields = zip(entity.attributes, values).map { "\($0.name)=\($1)" }.joined(separator: " ")
        return "<\(objectID) \(fields)>"
    }

    // MARK: - Values

    /// The value of an attribute, loading the object if it is a fault.
    /// - Throws: ``EntityStoreError/Code/unknownKey``; ``EntityStoreError/Code/objectNotFound`` when the object was
    ///   deleted from the store.
    public func value(forKey key: String) throws -> Value {
        guard let index = entity.attributeIndex(key) else {
            if let transient = entity.transientIndex(key) { return currentTransients[transient] }
            throw unknownAttribute(key)
        }
        return try loadedValue(at: index)
    }

    /// The value of an attribute (dynamic access for tools).
    public subscript(key: String) -> Value {
        get throws { try value(forKey: key) }
    }

    /// Sets an attribute. Setting the value it already has is no change. A number of the other numeric type is
    /// taken when it converts exactly (`setValue(4, forKey: "rating")` for a double attribute stores `4.0`).
    /// - Throws: ``EntityStoreError/Code/typeMismatch`` for a value of another type (or nil for a required
    ///   attribute is allowed here and refused by `save()`), ``EntityStoreError/Code/invalidValue`` for a value the
    ///   store cannot hold (`Decimal.nan`), ``EntityStoreError/Code/unknownKey``,
    ///   ``EntityStoreError/Code/invalidObject`` for a deleted object.
    public func setValue(_ value: Value, forKey key: String) throws {
        guard let index = entity.attributeIndex(key) else {
            guard let transient = entity.transientIndex(key) else { throw unknownAttribute(key) }
            try setTransient(value, at: transient, key: key)
            return
        }
        try setValue(value, at: index, key: key)
    }

    private func setTransient(_ value: Value, at index: Int, key: String) throws {
        let attribute = entity.transientAttributes[index]
        guard let converted = value.converted(to: attribute.type) else {
            throw EntityStoreError(
                .typeMismatch, "\(entity.name).\(key) is \(attribute.type.withArticle); got \(value)",
                entity: entity.name, key: key, objectID: objectID)
        }
        try liveContext().setTransient(self, index: index, to: converted)
    }

    /// The value of a typed property's attribute, found through its slot (see `PropertySlot`).
    @usableFromInline
    func value(for slot: Unmanaged<PropertySlot>) throws -> Value {
        try slot._withUnsafeGuaranteedRef { slot in
            guard let index = storedIndex(slot) else { return try value(forKey: slot.key) }
            return try loadedValue(at: index)
        }
    }

    /// Sets a typed property's attribute, found through its slot.
    @usableFromInline
    func setValue(_ value: Value, for slot: Unmanaged<PropertySlot>) throws {
        try slot._withUnsafeGuaranteedRef { slot in
            guard let index = storedIndex(slot) else { return try setValue(value, forKey: slot.key) }
            try setValue(value, at: index, key: slot.key)
        }
    }

    private func setValue(_ value: Value, at index: Int, key: String) throws {
        // The attribute's fields read in place (a copy of the `Attribute` retained and released its strings).
        if let derivation = entity.attributes[index].derivation {
            throw EntityStoreError(
                .invalidValue, "\(entity.name).\(key) is derived (\(derivation)): it is computed when saved",
                entity: entity.name, key: key, objectID: objectID)
        }
        let attributeType = entity.attributes[index].type
        if let type = value.type, type != attributeType {
            // A number of the other numeric type is taken when it converts exactly (4 for a double).
            guard let converted = value.converted(to: attributeType) else {
                throw EntityStoreError(
                    .typeMismatch, "\(entity.name).\(key) is \(attributeType.withArticle); got \(value)",
                    entity: entity.name, key: key, objectID: objectID)
            }
            return try setValue(converted, at: index, key: key)
        }
        if let problem = value.storageProblem {
            throw EntityStoreError(
                .invalidValue, "\(entity.name).\(key): \(problem)", entity: entity.name, key: key, objectID: objectID)
        }
        let context = try liveContext()
        try context.setAttribute(self, index: index, to: value)
    }

    /// The attributes whose values differ from the stored ones, with their new values.
    public func changedValues() -> [String: Value] {
        var changes: [String: Value] = [:]
        if !transientValues.isEmpty {
            let saved = savedTransients
            for (i, attribute) in entity.transientAttributes.enumerated() where saved[i] != transientValues[i] {
                changes[attribute.name] = transientValues[i]
            }
        }
        guard let values else { return changes }
        for (i, attribute) in entity.attributes.enumerated() where committed?[i] != values[i] {
            changes[attribute.name] = values[i]
        }
        return changes
    }

    /// The relationships whose targets differ from the stored ones, with their new targets.
    public func changedRelationships() -> [String: [ObjectID]] {
        var changes: [String: [ObjectID]] = [:]
        for (name, targets) in related where committedRelated[name] != targets {
            changes[name] = targets.sorted()
        }
        return changes
    }

    /// The stored values of `keys` (every attribute when `nil`), as they were before unsaved changes.
    ///
    /// An inserted object has no stored values: the result is empty.
    /// - Throws: ``EntityStoreError/Code/objectNotFound`` when a fault's record cannot be loaded.
    public func committedValues(forKeys keys: [String]? = nil) throws -> [String: Value] {
        if isInserted && committed == nil { return [:] }
        if committed == nil { _ = try loadedValues() }
        guard let committed else { return [:] }
        var result: [String: Value] = [:]
        for (i, attribute) in entity.attributes.enumerated() where keys?.contains(attribute.name) ?? true {
            result[attribute.name] = committed[i]
        }
        return result
    }

    // MARK: - Relationships

    /// The object a to-one relationship points at, or nil.
    public func object(forKey key: String) throws -> ManagedObject? {
        let relationship = try relationship(key, toMany: false)
        let context = try liveContext()
        guard let target = try context.targets(of: self, relationship).first else { return nil }
        return try context.object(with: target)
    }

    /// The objects of a to-many relationship, ordered by object ID.
    ///
    /// The records of the ones not loaded yet are read together, in one read transaction, as a fetch reads its
    /// results (read one by one, each first use opened its own): a relationship is asked for its objects to use them.
    public func objects(forKey key: String) throws -> [ManagedObject] {
        let relationship = try relationship(key, toMany: true)
        let context = try liveContext()
        let objects = try context.targets(of: self, relationship).sortedIDs().map { try context.object(with: $0) }
        try context.loadTargets(objects)
        return objects
    }

    /// The IDs of the objects a relationship holds, ordered.
    public func objectIDs(forKey key: String) throws -> [ObjectID] {
        let relationship = try relationship(key, toMany: nil)
        return try liveContext().targets(of: self, relationship).sortedIDs()
    }

    /// Points a to-one relationship at `target` (or nil); the inverse is kept consistent.
    public func setObject(_ target: ManagedObject?, forKey key: String) throws {
        let relationship = try relationship(key, toMany: false)
        try liveContext().setToOne(self, relationship, target)
    }

    /// Adds `target` to a to-many relationship; the inverse is kept consistent.
    public func add(_ target: ManagedObject, toKey key: String) throws {
        let relationship = try relationship(key, toMany: true)
        try liveContext().link(self, relationship, target)
    }

    /// Removes `target` from a to-many relationship; the inverse is kept consistent.
    public func remove(_ target: ManagedObject, fromKey key: String) throws {
        let relationship = try relationship(key, toMany: true)
        try liveContext().unlink(self, relationship, target)
    }

    // MARK: - Helpers

    func attributeIndex(_ key: String) throws -> Int {
        guard let index = entity.attributeIndex(key) else { throw unknownAttribute(key) }
        return index
    }

    func unknownAttribute(_ key: String) -> EntityStoreError {
        EntityStoreError(
            .unknownKey, "\(entity.name) has no attribute '\(key)'", entity: entity.name, key: key, objectID: objectID)
    }

    /// The position of a typed property's attribute: where the slot last found it when the name there matches.
    /// The position of a typed property's stored attribute (nil for a transient or unknown key).
    func storedIndex(_ slot: PropertySlot) -> Int? {
        let hint = slot.hint.load(ordering: .relaxed)
        if entity.hasAttribute(named: slot.key, at: hint) { return hint }
        guard let index = entity.attributeIndex(slot.key) else { return nil }
        slot.hint.store(index, ordering: .relaxed)
        return index
    }

    func relationship(_ key: String, toMany: Bool?) throws -> Relationship {
        guard let relationship = entity.relationship(key) else {
            throw EntityStoreError(
                .unknownKey, "\(entity.name) has no relationship '\(key)'", entity: entity.name, key: key,
                objectID: objectID)
        }
        if let toMany, relationship.isToMany != toMany {
            throw EntityStoreError(
                .typeMismatch,
                "\(entity.name).\(key) is a to-\(relationship.isToMany ? "many" : "one") relationship",
                entity: entity.name, key: key, objectID: objectID)
        }
        return relationship
    }

    func liveContext() throws -> ObjectContext {
        guard let context else {
            // A deleted one: its context saved the delete, or merged another's (a fetch of a merging context may).
            let why = isDeleted ? " (it was deleted, by its context's save or a save merged into it)" : ""
            throw EntityStoreError(
                .invalidObject, "\(objectID) is no longer registered in a context\(why)", entity: entity.name,
                objectID: objectID)
        }
        return context
    }

    /// The value at `index` of the loaded values (faulting them in first), read in place rather than through a
    /// copy of the array (a retain and a release per read).
    @inline(__always)
    func loadedValue(at index: Int) throws -> Value {
        if let record = pendingRecord {
            // The first two fixed-size values read from a kept record are read alone: an object fetched or looked up
            // for a number or a date decodes (and allocates) none of its strings and data. A third read decodes all.
            if pendingReads < 2,
                let value = try record.withUnsafeBytes({
                    try RecordCodec.fixedSizeValue(
                        at: index, $0, entityBox.entity.name, entityBox.entity.attributes, key: objectID.primaryKey)
                })
            {
                pendingReads += 1
                return value
            }
            return try loadedValues()[index]
        }
        if let value = loaded?[index] { return value }
        return try loadedValues()[index]
    }

    /// Reads the object's record when it is a fault, kept to decode when its values are first used.
    /// - Throws: ``EntityStoreError/Code/objectNotFound`` when the store has no such object.
    func loadIfFault() throws {
        if isFault { try liveContext().fault(in: self) }
    }

    func loadedValues() throws -> [Value] {
        if let values { return values }
        try liveContext().fault(in: self)
        return values ?? []
    }

    /// Whether the object holds its values, decoded or as a fetched record (neither a fault nor inserted).
    var hasStoredState: Bool { loaded != nil || pendingRecord != nil }

    /// Keeps a fetched record (checked by `RecordCodec.validate`) to decode when the values are first used.
    func keep(record: consuming [UInt8], rowVersion: UInt64) {
        loaded = nil
        loadedCommitted = nil
        pendingRecord = record
        pendingReads = 0
        self.rowVersion = rowVersion
    }

    /// Decodes the kept record into the values. The bytes were checked when fetched, so this does not fail; if it
    /// ever did, the object is left a fault, and the next use reads the record again and reports what is wrong.
    private func materialize() {
        guard let record = pendingRecord else { return }
        pendingRecord = nil
        do {
            let decoded = try record.withUnsafeBytes {
                try RecordCodec.decode($0, entityBox, key: objectID.primaryKey)
            }
            loaded = decoded.values
            loadedCommitted = decoded.values
        } catch {
            loaded = nil
            loadedCommitted = nil
        }
    }
}
