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

    /// One object's values and relationships from one read, for tools; `nil` when it does not exist.
    package func readObject(
        _ id: ObjectID
    ) throws -> (values: [Value], relationships: [String: [ObjectID]], transaction: Int)? {
        let storage = try storage(for: id.entityName)
        return try mappingStorageErrors("reading \(id)") {
            try read { txn in
                guard let bytes = try txn.get(id.primaryKey, in: storage.records) else { return nil }
                let values = try RecordCodec.decode(bytes, entity: storage.entity, key: id.primaryKey).values
                var relationships: [String: [ObjectID]] = [:]
                for relationship in storage.entity.relationships {
                    relationships[relationship.name] = try storedTargets(of: id, relationship, storage, txn)
                }
                return (values, relationships, Int(try historySequence(txn)))
            }
        }
    }

    /// Whether the stored object matches `predicate` (for `watch --where`); `false` when it does not exist.
    package func storedObject(_ id: ObjectID, matches predicate: FetchPredicate) throws -> Bool {
        let storage = try storage(for: id.entityName)
        let compiled = try CompiledPredicate(predicate, entity: storage.entity, schema: schema)
        let context = ObjectContext(store: self)
        return try mappingStorageErrors("reading \(id)") {
            try read { txn in
                let reader = FetchReader(txn: txn, store: self, context: context, includesPending: false)
                guard let subject = try reader.subject(for: id) else { return false }
                return try compiled.evaluate(subject)
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
