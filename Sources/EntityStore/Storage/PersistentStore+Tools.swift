import LMDB

extension PersistentStore {
    /// The format version recorded in the store.
    package func storedFormatVersion() throws -> UInt32 {
        try mappingStorageErrors("reading the format version") {
            try read { txn in
                guard let bytes = try txn.get(StoreNames.MetaKey.format, in: meta), bytes.count == 4 else { return 0 }
                return UInt32(littleEndian: bytes.loadUnaligned(as: UInt32.self))
            }
        }
    }

    /// One object's values (a decimal as its stored text, as in a snapshot row) and relationships from one read,
    /// for tools; `nil` when it does not exist.
    package func readObject(
        _ id: ObjectID, keyPaths: [[String]] = []
    ) throws -> (values: [Value], relationships: [[ObjectID]], pathValues: [Value], transaction: Int)? {
        let storage = try storage(for: id.entityName)
        return try mappingStorageErrors("reading \(id)") {
            try read { txn in
                guard let bytes = try txn.get(id.primaryKey, in: storage.records) else { return nil }
                let values = try RecordCodec.decode(
                    bytes, entity: storage.entity, key: id.primaryKey, decimalsAsText: true
                ).values
                let relationships = try storage.entity.relationships.map {
                    try storedTargets(of: id, $0, storage, txn)
                }
                var paths = ToOnePathReader(store: self, txn: txn, paths: keyPaths)
                let pathValues = try paths.values(from: id, relationships: relationships)
                return (values, relationships, pathValues, Int(try historySequence(txn)))
            }
        }
    }

    /// Whether the object of a history change matched `predicate` as the change left it: an insert or an update
    /// with the values it set over the object's other values (as stored now, or, for an object deleted since, as
    /// it was when deleted), a delete with the values the object had then. Relationships are read as they are now.
    /// For `store-inspect watch --where`.
    package func object(
        _ change: ObjectChange, in transaction: UInt64?, matches predicate: FetchPredicate
    ) throws -> Bool {
        let storage = try storage(for: change.objectID.entityName)
        let entity = storage.entity
        let compiled = try CompiledPredicate(predicate, entity: entity, schema: schema)
        let context = ObjectContext(store: self)
        let stored = try mappingStorageErrors("reading \(change.objectID)") {
            try read { txn in
                try txn.get(change.objectID.primaryKey, in: storage.records).map {
                    try RecordCodec.decode($0, entity: entity, key: change.objectID.primaryKey).values
                }
            }
        }
        var values = stored ?? entity.attributes.map(\.defaultValue)
        var overlays: [[String: Value]] = []
        if change.kind == .delete {
            overlays = [change.oldValues]
        } else {
            if stored == nil, let transaction {
                // Deleted since: its values when deleted stand for the ones this change did not set.
                // (An entry that does not decode is reported by the watch's own reading of the history.)
                let later = try historyEntries(since: transaction).entries.compactMap { entry -> ChangeRecord? in
                    if case .success(let record) = entry.record { return record }
                    return nil
                }
                if let deletion = later.lazy.flatMap(\.changes).first(where: {
                    $0.objectID == change.objectID && $0.kind == .delete
                }) {
                    overlays.append(deletion.oldValues)
                }
            }
            overlays.append(change.newValues)
        }
        for overlay in overlays {
            for (key, value) in overlay {
                if let index = entity.attributeIndex(key) { values[index] = value }
            }
        }
        return try mappingStorageErrors("reading \(change.objectID)") {
            try read { txn in
                let reader = FetchReader(txn: txn, store: self, context: context, includesPending: false)
                return try compiled.evaluate(
                    RecordSubject(id: change.objectID, entity: entity, values: values, reader: reader))
            }
        }
    }

    /// The size in bytes of the largest records of an entity, with their IDs.
    package func largestRecords(_ entity: String, count: Int) throws -> [(ObjectID, Int)] {
        let storage = try storage(for: entity)
        return try mappingStorageErrors("reading \(entity)") {
            try read { txn in
                var largest: [(ObjectID, Int)] = []
                try txn.forEach(in: storage.records) { key, value in
                    let id = ObjectID(entityName: entity, primaryKey: try IndexKey.primaryKey(from: key))
                    if largest.count < count || value.count > largest[largest.count - 1].1 {
                        largest.append((id, value.count))
                        largest.sort { $0.1 > $1.1 }
                        if largest.count > count { largest.removeLast() }
                    }
                    return .continue
                }
                return largest
            }
        }
    }
}

/// The values key paths through to-one relationships (`shelf.name`, `shelf.owner.name`, `shelf.owner`) reach from
/// objects read in one transaction, for tools that list them (`store-inspect ls --fields shelf.name`). Each
/// object a path lands on is read once per reader. A path ending at a to-one relationship gives the target's ID as
/// text; a missing link gives nil.
package struct ToOnePathReader {
    let store: PersistentStore
    let txn: ReadTransaction
    /// The paths, each as its components.
    package let paths: [[String]]
    private var objects: [ObjectID: (values: [Value], storage: EntityStorage)] = [:]

    init(store: PersistentStore, txn: ReadTransaction, paths: [[String]]) {
        self.store = store
        self.txn = txn
        self.paths = paths
    }

    /// Why `path` is not a key path through to-one relationships from `entity` (as a message), or nil when it is.
    package static func problem(_ path: [String], from entity: Entity, in schema: Schema) -> String? {
        var current = entity
        for (index, component) in path.enumerated() {
            let last = index == path.count - 1
            if last, current.attribute(component) != nil { return nil }
            guard let relationship = current.relationship(component) else {
                return "\(current.name) has no \(last ? "attribute or relationship" : "relationship") '\(component)'"
            }
            guard !relationship.isToMany else {
                return "'\(component)' is a to-many relationship of \(current.name): a path goes through to-ones only"
            }
            if last { return nil }
            guard let next = schema.entity(relationship.destination) else {
                return "\(current.name).\(component) leads to no entity"
            }
            current = next
        }
        return "an empty path"
    }

    /// Each path's value from the object `id`, whose own relationship targets are `relationships`.
    mutating func values(from id: ObjectID, relationships: [[ObjectID]]) throws -> [Value] {
        try paths.map { try value($0, from: id, relationships: relationships) }
    }

    private mutating func value(_ path: [String], from id: ObjectID, relationships: [[ObjectID]]) throws -> Value {
        var storage = try store.storage(for: id.entityName)
        guard let first = storage.entity.relationships.firstIndex(where: { $0.name == path[0] }) else {
            return .null
        }
        var target = relationships[first].first
        for component in path.dropFirst() {
            guard let at = target else { return .null }
            let object = try load(at)
            storage = object.storage
            if let index = storage.entity.attributeIndex(component) { return object.values[index] }
            guard let relationship = storage.entity.relationship(component) else { return .null }
            target = try store.storedTargets(of: at, relationship, storage, txn).first
        }
        return target.map { .string($0.description) } ?? .null
    }

    private mutating func load(_ id: ObjectID) throws -> (values: [Value], storage: EntityStorage) {
        if let known = objects[id] { return known }
        let storage = try store.storage(for: id.entityName)
        guard let bytes = try txn.get(id.primaryKey, in: storage.records) else {
            throw EntityStoreError(
                .corruptData, "\(id) is linked but has no record", entity: id.entityName, objectID: id)
        }
        let values = try RecordCodec.decode(bytes, entity: storage.entity, key: id.primaryKey, decimalsAsText: true)
            .values
        objects[id] = (values, storage)
        return (values, storage)
    }
}
