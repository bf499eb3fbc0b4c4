import LMDB

extension PersistentStore {
    /// Where a unique attribute's values must be unique: the attribute's slot name (for claims within one save)
    /// and the storages of the entities that share its values. An inherited attribute is one attribute across the
    /// hierarchy under the entity that declares it (as in Core Data, whose sub-entities share their parent's table).
    func uniquenessScope(of attribute: String, in entity: String) throws -> (slot: String, storages: [EntityStorage]) {
        guard !hierarchies.isEmpty else { return ("\(entity).\(attribute)", [try storage(for: entity)]) }
        let declaring = schema.declaringEntity(of: attribute, in: entity)
        return ("\(declaring).\(attribute)", try hierarchies.concrete(declaring).map { try storage(for: $0) })
    }

    /// The stored objects whose unique attribute at `index` holds `value` as uniqueness compares it (canonical
    /// strings, one NaN, one zero; folded when case-insensitive), across the attribute's scope.
    func holders(
        of value: Value, at index: Int, in scope: [EntityStorage], _ txn: ReadTransaction, keyBuffer: inout [UInt8]
    ) throws -> [ObjectID] {
        guard let attribute = scope.first?.entity.attributes[index] else { return [] }
        let truncated = IndexKey.encode(value, caseInsensitive: attribute.isCaseInsensitive, into: &keyBuffer)
        let claim = ValueSemantics.uniquenessKey(value, caseInsensitive: attribute.isCaseInsensitive)
        var result: [ObjectID] = []
        for storage in scope {
            guard let database = storage.indexes[index] else { continue }
            var keys: [UInt64] = []
            try txn.forEach(in: database, range: .exactly(keyBuffer)) { _, pk in
                keys.append(try IndexKey.primaryKey(from: pk))
                return .continue
            }
            for key in keys {
                if truncated || attribute.isCaseInsensitive {
                    // The key does not identify the value exactly: compare with the stored record.
                    guard let bytes = try txn.get(key, in: storage.records) else { continue }
                    let stored = try RecordCodec.decode(bytes, entity: storage.entity, key: key).values[index]
                    if ValueSemantics.uniquenessKey(stored, caseInsensitive: attribute.isCaseInsensitive) != claim {
                        continue
                    }
                }
                result.append(ObjectID(entityName: storage.entity.name, primaryKey: key))
            }
        }
        return result
    }
}
