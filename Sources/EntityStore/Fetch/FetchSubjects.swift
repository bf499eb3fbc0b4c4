import LMDB

/// Reads related objects for predicate evaluation inside one fetch's read transaction, seeing the context's
/// unsaved changes when the fetch includes them.
final class FetchReader {
    let txn: ReadTransaction
    let store: PersistentStore
    let context: ObjectContext
    let includesPending: Bool
    private var records: [ObjectID: RecordSubject] = [:]

    init(txn: ReadTransaction, store: PersistentStore, context: ObjectContext, includesPending: Bool) {
        self.txn = txn
        self.store = store
        self.context = context
        self.includesPending = includesPending
    }

    /// The subject for an object: its pending state when it has unsaved changes, else its stored record.
    func subject(for id: ObjectID) throws -> (any PredicateSubject)? {
        if includesPending {
            // The nearest context with unsaved changes to the object has its current state (a child's parents
            // count: their unsaved changes are the child's stored state).
            var current: ObjectContext? = context
            while let level = current {
                if !level.dirty.isEmpty, let object = level.registered[id], level.dirty.contains(object) {
                    // (One deleted elsewhere, its unsaved changes not merged, is as gone as a deleted one.)
                    return try object.isDeleted || !level.hasRecord(object)
                        ? nil : ContextSubject(object: object, reader: self)
                }
                current = level.parent
            }
        }
        if let cached = records[id] { return cached }
        let storage = try store.storage(for: id.entityName)
        guard let bytes = try txn.get(id.primaryKey, in: storage.records) else { return nil }
        let subject = RecordSubject(
            id: id, entity: storage.entity,
            values: try RecordCodec.decode(bytes, entity: storage.entity, key: id.primaryKey).values,
            reader: self)
        records[id] = subject
        return subject
    }

    /// ``subject(for:)``, with the object registered under `id` found among the objects of `candidates` (entries in
    /// ID order, as ``ObjectContext/deliveringEntries``; an entry whose object did not change is harmless) from
    /// `next` on, when it is there: a caller asking for IDs in order walks the candidates once (`next` is where the
    /// walk stands). An object of the context that it has changed is the subject itself; anything else takes the
    /// lookups of ``subject(for:)``, so that the answer is the same.
    func subject(
        for id: ObjectID, among candidates: [PendingChanges.Entry], from next: inout Int
    ) throws -> (any PredicateSubject)? {
        if includesPending {
            while next < candidates.count && candidates[next].object.objectID < id { next += 1 }
            if next < candidates.count, candidates[next].object.objectID == id {
                let object = candidates[next].object
                // Registered here (a context clears `context` on every object it unregisters), with changes the
                // context has not saved: the first level ``subject(for:)`` looks at.
                if object.context === context && context.dirty.contains(object) {
                    assert(context.registered[id] === object, "\(id) is not the registered object")
                    return try object.isDeleted || !context.hasRecord(object)
                        ? nil : ContextSubject(object: object, reader: self)
                }
            }
        }
        return try subject(for: id)
    }

    /// The stored targets of a relationship of a stored object.
    func storedTargets(of id: ObjectID, _ relationship: Relationship) throws -> [ObjectID] {
        try store.storedTargets(of: id, relationship, try store.storage(for: id.entityName), txn)
    }
}

/// The value a key path through to-one relationships (`shelf.name`, `shelf.room.floor`) reaches from each stored
/// row of one scan, for sorting and sectioning by it: the first link read with one `get` (no cursor) and the rest of
/// the path taken once per object it lands on. A list of 50,000 books on 100 shelves sectioned by `shelf.name`
/// walked the path from every book: a cursor opened, the shelf looked up, arrays of subjects made, for each.
///
/// The value is what ``CompiledPredicate/values(of:_:)`` gives for the row (the rest of the path from the linked
/// object, the context's unsaved state of it included when the fetch includes pending changes), since everything
/// past the first link depends on the linked object alone. A to-one holds one link (the integrity check reports a
/// second).
final class ToOneValues {
    private let database: Database?
    private let first: Relationship
    private let rest: ResolvedKeyPath
    private unowned let reader: FetchReader
    /// The value reached through each linked object, by its primary key (unique in its hierarchy).
    private var reached: [UInt64: Value] = [:]

    /// `nil` unless `path` walks to-one relationships to an attribute.
    init?(_ path: ResolvedKeyPath, from storage: EntityStorage, reader: FetchReader) {
        guard let first = path.steps.first, !path.isToMany, case .attribute = path.terminal else { return nil }
        database = storage.relationships[first.name]
        self.first = first
        rest = ResolvedKeyPath(steps: Array(path.steps.dropFirst()), terminal: path.terminal, text: path.text)
        self.reader = reader
    }

    /// The value reached from the stored object `id` (of the storage's entity).
    func value(from id: ObjectID) throws -> Value {
        guard let database, let link = try reader.txn.get(id.primaryKey, in: database) else { return .null }
        let pk = try IndexKey.primaryKey(from: link)
        if let value = reached[pk] { return value }
        let target = try reader.store.relatedID(pk, destination: first.destination, reader.txn)
        let value = try reader.subject(for: target).map { try CompiledPredicate.values(of: rest, $0).first } ?? nil
        reached[pk] = value ?? .null
        return value ?? .null
    }
}

/// A stored object seen through its (partly) decoded record.
struct RecordSubject: PredicateSubject {
    let id: ObjectID
    var objectID: ObjectID? { id }
    let entity: Entity
    let values: [Value]
    /// Unowned: the reader caches its subjects, and a strong reference back would keep the reader, its context and
    /// its store alive for good. A subject never outlives the read it came from.
    unowned let reader: FetchReader

    func attribute(_ index: Int) throws -> Value { values[index] }

    func relatedIDs(_ relationship: Relationship) throws -> [ObjectID] {
        try reader.storedTargets(of: id, relationship)
    }

    func related(_ relationship: Relationship) throws -> [any PredicateSubject] {
        try relatedIDs(relationship).compactMap { try reader.subject(for: $0) }
    }
}

/// An object with unsaved changes, seen through the context.
struct ContextSubject: PredicateSubject {
    let object: ManagedObject
    var objectID: ObjectID? { object.objectID }
    /// Unowned, as ``RecordSubject/reader``.
    unowned let reader: FetchReader

    func attribute(_ index: Int) throws -> Value { try object.loadedValues()[index] }

    func relatedIDs(_ relationship: Relationship) throws -> [ObjectID] {
        try (object.context ?? reader.context).targets(of: object, relationship).sorted()
    }

    func related(_ relationship: Relationship) throws -> [any PredicateSubject] {
        try relatedIDs(relationship).compactMap { try reader.subject(for: $0) }
    }
}
