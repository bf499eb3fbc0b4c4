import LMDB

extension PersistentStore {
    /// Inserts many objects of one entity in one write transaction, without a context: for imports, like Core
    /// Data's `NSBatchInsertRequest`.
    ///
    /// ```swift
    /// let ids = try store.batchInsert(into: "Book", objects: rows.map { ["title": .string($0.title)] })
    /// ```
    ///
    /// Each dictionary maps attribute names to values; attributes left out take their defaults. Relationships are
    /// not set here (connect the objects through a context afterwards), so an entity with a required to-one
    /// relationship is refused. It is all or nothing: every unknown key, wrong type, missing required value and
    /// duplicate of a unique value (within the batch or against the store) is listed in one error and nothing is
    /// written. The batch is one history entry (one insert per object), so contexts that merge from the store, their
    /// controllers, and other processes see the new objects like any save.
    ///
    /// - Parameters:
    ///   - entityName: The entity of the new objects.
    ///   - objects: The attribute values of each new object.
    ///   - author: The history entry's author.
    /// - Returns: The new objects' IDs, in the order of `objects`.
    /// - Throws: ``EntityStoreError/Code/unknownEntity``; ``EntityStoreError/Code/validationFailed`` with every
    ///   problem in ``EntityStoreError/failures``; ``EntityStoreError/Code/storage`` from LMDB.
    @discardableResult
    public func batchInsert(
        into entityName: String, objects: [[String: Value]], author: String? = nil
    ) throws
        -> [ObjectID]
    {
        let storage = try storage(for: entityName)
        let entity = storage.entity
        if let required = entity.relationships.first(where: { !$0.isToMany && !$0.isOptional }) {
            throw EntityStoreError(
                .validationFailed,
                "\(entity.name) cannot be batch inserted: its to-one relationship '\(required.name)' is required",
                entity: entity.name, key: required.name)
        }
        guard !objects.isEmpty else { return [] }
        var failures: [EntityStoreError.Failure] = []
        var rows: [[Value]] = []
        rows.reserveCapacity(objects.count)
        let defaults = entity.attributes.map(\.defaultValue)
        for (position, object) in objects.enumerated() {
            var values = defaults
            var mistyped = Set<Int>()  // reported once, as a wrong type
            for (key, value) in object {
                guard let index = entity.attributeIndex(key) else {
                    let what =
                        entity.relationship(key) != nil
                        ? "is a relationship: set it through a context" : "is not an attribute"
                    failures.append(
                        .init(entity: entity.name, key: key, message: "object \(position): '\(key)' \(what)"))
                    continue
                }
                let attribute = entity.attributes[index]
                if let type = value.type, type != attribute.type {
                    mistyped.insert(index)
                    failures.append(
                        .init(
                            entity: entity.name, key: key,
                            message:
                                "object \(position): \(entity.name).\(key) is \(attribute.type.withArticle); got \(value)"
                        ))
                    continue
                }
                if let problem = value.storageProblem {
                    mistyped.insert(index)
                    failures.append(
                        .init(entity: entity.name, key: key, message: "object \(position): \(key): \(problem)"))
                    continue
                }
                values[index] = value
            }
            for (index, attribute) in entity.attributes.enumerated()
            where !attribute.isOptional && values[index].isNull && !mistyped.contains(index) {
                failures.append(
                    .init(
                        entity: entity.name, key: attribute.name,
                        message: "object \(position): \(attribute.name) is required"))
            }
            rows.append(values)
        }
        if !failures.isEmpty { throw Self.batchFailure(failures) }

        let carrier = ObjectContext(store: self, name: "batch insert")
        let ids = try mappingStorageErrors("batch inserting into \(entity.name)") {
            try write { txn -> [ObjectID] in
                // Keys from the entity's sequence, past every block a context has reserved.
                let first = try nextKey(of: entity.name, txn)
                try txn.put(
                    StoreNames.MetaKey.sequence(entity.name), IndexKey.primaryKey(first + UInt64(rows.count)), in: meta)
                let objects = rows.enumerated().map { offset, values in
                    let object = ManagedObject(
                        objectID: ObjectID(entityName: entity.name, primaryKey: first + UInt64(offset)), entity: entity,
                        context: carrier)
                    object.values = values
                    object.isInserted = true
                    return object
                }
                var writer = ChangeWriter(store: self, txn: txn)
                let duplicates = try writer.checkUniqueness(objects)
                if !duplicates.isEmpty { throw Self.batchFailure(duplicates) }
                // Fresh keys above every stored one: LMDB appends the records.
                for object in objects { try writer.insert(object, appending: true) }
                let names = entity.attributes.map(\.name)
                var record = ChangeRecord(
                    kind: .didSave,
                    changes: objects.map { ObjectChange(objectID: $0.objectID, kind: .insert, changedKeys: names) },
                    author: author)
                record.transaction = try appendHistory(record, txn)
                return objects.map(\.objectID)
            }
        }
        publisher.catchUp(self, force: true)
        return ids
    }

    private static func batchFailure(_ failures: [EntityStoreError.Failure]) -> EntityStoreError {
        EntityStoreError(
            .validationFailed,
            failures.count == 1 ? failures[0].description : "\(failures.count) validation failures",
            entity: failures[0].entity, key: failures[0].key, objectID: failures[0].objectID, failures: failures)
    }
}
