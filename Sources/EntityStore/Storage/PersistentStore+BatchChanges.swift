import Foundation
import LMDB

/// What a batch update or delete did.
public struct BatchResult: Sendable, Hashable {
    /// The objects changed: for an update, those the predicate matched; for a delete, those it matched and those
    /// their cascade rules deleted with them.
    public var objectIDs: [ObjectID]
    /// How many objects were changed.
    public var count: Int { objectIDs.count }
}

/// One attribute a typed batch update sets: `.set(\Book.inPrint, false)`.
public struct ModelAssignment<M: Model>: Sendable {
    /// The attribute's key.
    public let key: String
    /// The value set.
    public let value: Value

    /// Sets the attribute a key path reads to `value`.
    public static func set<T: ValueConvertible>(_ keyPath: KeyPath<M, T>, _ value: T) -> ModelAssignment {
        ModelAssignment(key: ModelKeys.text(keyPath), value: value.value)
    }
}

extension PersistentStore {
    /// Sets attributes of every object a predicate matches, in one write transaction, without loading the objects
    /// into a context: Core Data's `NSBatchUpdateRequest`.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// -->
    /// ```swift
    /// let result = try store.batchUpdate("Book", where: try FetchPredicate("pages > %d", 1000), set: ["inPrint": false])
    /// ```
    ///
    /// Values are checked as a save checks them (type, storable, required, attribute rules, uniqueness: a unique
    /// attribute can be set to a value only for one object that no other object holds) and every problem is listed
    /// in one error; nothing is written then. Index entries follow the new values, each record's row version
    /// advances (a context that read an object before and saves it meets a conflict under
    /// ``MergePolicy/error``), and the batch is one history entry (an update per object naming the keys set), so
    /// contexts that merge from the store, their controllers, and other processes see the changes like any save.
    /// The store's custom rules (``addValidation(for:_:)-(String,_)``) are not run: they take objects.
    ///
    /// - Parameters:
    ///   - entityName: The entity whose objects change.
    ///   - predicate: Which objects; `nil` for all.
    ///   - values: The attributes to set (relationships are set through a context).
    ///   - author: The history entry's author.
    /// - Returns: The objects updated.
    /// - Throws: ``EntityStoreError/Code/unknownEntity``, ``EntityStoreError/Code/invalidPredicate``,
    ///   ``EntityStoreError/Code/validationFailed`` with every problem, a storage error.
    @discardableResult
    public func batchUpdate(
        _ entityName: String, where predicate: FetchPredicate? = nil, set values: [String: Value],
        author: String? = nil
    ) throws -> BatchResult {
        let storage = try storage(for: entityName)
        let entity = storage.entity
        var failures: [EntityStoreError.Failure] = []
        var assignments: [(index: Int, value: Value)] = []
        for (key, given) in values.sorted(by: { $0.key < $1.key }) {
            guard let index = entity.attributeIndex(key) else {
                let what =
                    entity.relationship(key) != nil
                    ? "is a relationship: set it through a context" : "is not an attribute of \(entity.name)"
                failures.append(.init(entity: entity.name, key: key, message: "'\(key)' \(what)"))
                continue
            }
            let attribute = entity.attributes[index]
            // A number of the other numeric type is taken when it converts exactly.
            let value = given.converting(to: attribute.type)
            if attribute.derivation != nil {
                failures.append(
                    .init(entity: entity.name, key: key, message: "'\(key)' is derived: it is computed when saved"))
            } else if let type = value.type, type != attribute.type {
                failures.append(
                    .init(
                        entity: entity.name, key: key,
                        message: "\(entity.name).\(key) is \(attribute.type.withArticle); got \(value)"))
            } else if let problem = value.storageProblem {
                failures.append(.init(entity: entity.name, key: key, message: problem))
            } else if value.isNull && !attribute.isOptional {
                failures.append(.init(entity: entity.name, key: key, message: "a required value is missing"))
            } else if let problem = attribute.validation?.problem(with: value) {
                failures.append(.init(entity: entity.name, key: key, message: problem))
            } else {
                assignments.append((index, value))
            }
        }
        if !failures.isEmpty { throw Self.batchChangeFailure(failures) }
        guard !assignments.isEmpty else { return BatchResult(objectIDs: []) }
        // Derived attributes of the object's own values follow the update; those of related objects that read the
        // updated values through a relationship are recomputed after it.
        let allDerivations = try derivations()
        let now = Date()
        let result = try mappingStorageErrors("batch updating \(entity.name)") {
            try write { txn -> BatchResult in
                let ids = try matches(entityName, predicate, txn)
                try checkUniqueness(assignments, of: ids, storage, txn)
                var buffer: [UInt8] = []
                var keyBuffer: [UInt8] = []
                var changes: [ObjectChange] = []
                changes.reserveCapacity(ids.count)
                // The objects of each concrete entity (a superentity's batch reaches its sub-entities: inherited
                // attributes sit at the same positions in their records).
                var current: (name: String, storage: EntityStorage, derivations: [Derivation], keys: [String])?
                for id in ids {
                    if current?.name != id.entityName {
                        let storage = try self.storage(for: id.entityName)
                        let derivations = (allDerivations[id.entityName] ?? []).filter { $0.firstStep == nil }
                        current = (
                            id.entityName, storage, derivations,
                            assignments.map { entity.attributes[$0.index].name } + derivations.map(\.attribute.name)
                        )
                    }
                    let (_, storage, ownDerivations, changedKeys) = current!
                    let entity = storage.entity
                    changes.append(ObjectChange(objectID: id, kind: .update, changedKeys: changedKeys))
                    let pk = id.primaryKey
                    guard let bytes = try txn.get(pk, in: storage.records) else { continue }
                    var (record, rowVersion) = try RecordCodec.decode(bytes, entity: entity, key: pk)
                    for (index, value) in assignments {
                        let old = record[index]
                        record[index] = value
                        guard let database = storage.indexes[index] else { continue }
                        let caseInsensitive = entity.attributes[index].isCaseInsensitive
                        IndexKey.encode(old, caseInsensitive: caseInsensitive, into: &keyBuffer)
                        try txn.delete(keyBuffer, value: IndexKey.primaryKey(pk), in: database)
                        IndexKey.encode(value, caseInsensitive: caseInsensitive, into: &keyBuffer)
                        try keyBuffer.withUnsafeBytes { key in
                            try withUnsafeBytes(of: pk.bigEndian) { try txn.put(key, $0, in: database) }
                        }
                    }
                    for derivation in ownDerivations {
                        let value = try derivation.value(ValuesSubject(values: record), now: now, of: id)
                        guard value != record[derivation.index] else { continue }
                        if let database = storage.indexes[derivation.index] {
                            let caseInsensitive = entity.attributes[derivation.index].isCaseInsensitive
                            IndexKey.encode(
                                record[derivation.index], caseInsensitive: caseInsensitive, into: &keyBuffer)
                            try txn.delete(keyBuffer, value: IndexKey.primaryKey(pk), in: database)
                            IndexKey.encode(value, caseInsensitive: caseInsensitive, into: &keyBuffer)
                            try keyBuffer.withUnsafeBytes { key in
                                try withUnsafeBytes(of: pk.bigEndian) { try txn.put(key, $0, in: database) }
                            }
                        }
                        record[derivation.index] = value
                    }
                    rowVersion += 1
                    RecordCodec.encode(record, rowVersion: rowVersion, into: &buffer)
                    try buffer.withUnsafeBytes { try txn.put(pk, $0, in: storage.records) }
                }
                // The objects whose derived attributes read the updated values through a relationship.
                let owners = try derivationOwners(reading: ids, allDerivations, txn)
                mergeRederived(try rederive(owners, allDerivations, txn), into: &changes)
                // Nothing matched: no history entry (a save of nothing leaves none either).
                if !changes.isEmpty {
                    _ = try appendHistory(ChangeRecord(kind: .didSave, changes: changes, author: author), txn)
                }
                return BatchResult(objectIDs: ids)
            }
        }
        publisher.catchUp(self, force: true)
        return result
    }

    /// Deletes every object a predicate matches, in one write transaction, without loading the objects into a
    /// context: Core Data's `NSBatchDeleteRequest`, with the delete rules honoured.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// let cutoff = Date()
    /// -->
    /// ```swift
    /// let result = try store.batchDelete("Loan", where: try FetchPredicate("returned < %@", cutoff))
    /// ```
    ///
    /// The relationships' delete rules run as in a save: `cascade` deletes the related objects too (over as many
    /// levels as the relationships go), `nullify` removes the deleted objects from the related objects' inverse
    /// relationships (refused when that would empty a required to-one), `deny` refuses the whole batch while the
    /// relationship holds objects, listing each; `noAction` leaves the related objects as they are. The batch is
    /// one history entry (a delete per object, an update per object whose inverse relationship lost objects), so
    /// contexts that merge from the store and their controllers follow. The store's custom rules
    /// (``addValidation(for:_:)-(String,_)``) are not run: they take objects.
    ///
    /// - Parameters:
    ///   - entityName: The entity whose objects are deleted.
    ///   - predicate: Which objects; `nil` for all.
    ///   - author: The history entry's author.
    /// - Returns: The objects deleted, cascades included.
    /// - Throws: ``EntityStoreError/Code/unknownEntity``, ``EntityStoreError/Code/invalidPredicate``,
    ///   ``EntityStoreError/Code/validationFailed`` listing every deny rule and required relationship in the way
    ///   (nothing is deleted then), a storage error.
    @discardableResult
    public func batchDelete(
        _ entityName: String, where predicate: FetchPredicate? = nil, author: String? = nil
    ) throws -> BatchResult {
        _ = try storage(for: entityName)
        let result = try mappingStorageErrors("batch deleting \(entityName)") {
            try write { txn -> BatchResult in
                var order = try matches(entityName, predicate, txn)
                var deleted = Set(order)
                // Targets of each deleted object's relationships, read once.
                var targets: [ObjectID: [String: [ObjectID]]] = [:]
                var nullified: [ObjectID: Set<String>] = [:]
                var failures: [EntityStoreError.Failure] = []
                var position = 0
                while position < order.count {
                    let id = order[position]
                    position += 1
                    let storage = try storage(for: id.entityName)
                    for relationship in storage.entity.relationships {
                        let held = try storedTargets(of: id, relationship, storage, txn)
                        guard !held.isEmpty else { continue }
                        targets[id, default: [:]][relationship.name] = held
                        switch relationship.deleteRule {
                        case .deny:
                            failures.append(
                                .init(
                                    entity: id.entityName, key: relationship.name, objectID: id,
                                    message: "cannot delete: '\(relationship.name)' holds \(held.count) object(s)"
                                        + " and its delete rule is deny"))
                        case .cascade:
                            for target in held where deleted.insert(target).inserted { order.append(target) }
                        case .nullify:
                            for target in held { nullified[target, default: []].insert(relationship.inverse) }
                        case .noAction:
                            break
                        }
                    }
                }
                for (target, keys) in nullified where !deleted.contains(target) {
                    let entity = try storage(for: target.entityName).entity
                    for key in keys.sorted() {
                        guard let inverse = entity.relationship(key), !inverse.isToMany, !inverse.isOptional else {
                            continue
                        }
                        failures.append(
                            .init(
                                entity: target.entityName, key: key, objectID: target,
                                message: "a required relationship would be empty"))
                    }
                }
                if !failures.isEmpty {
                    throw Self.batchChangeFailure(failures.sorted { $0.description < $1.description })
                }

                var keyBuffer: [UInt8] = []
                // Each record's values: their indexed ones name the index entries to remove, and the delete's
                // change holds them all (a history entry's delete is all a reader, a sync engine among them, has of
                // the object).
                var oldValues: [[Value]] = []
                oldValues.reserveCapacity(order.count)
                for id in order {
                    let storage = try storage(for: id.entityName)
                    let entity = storage.entity
                    let pk = id.primaryKey
                    if let bytes = try txn.get(pk, in: storage.records) {
                        let stored = try RecordCodec.decode(bytes, entity: entity, key: pk).values
                        for (index, database) in storage.indexes {
                            IndexKey.encode(
                                stored[index], caseInsensitive: entity.attributes[index].isCaseInsensitive,
                                into: &keyBuffer)
                            try txn.delete(keyBuffer, value: IndexKey.primaryKey(pk), in: database)
                        }
                        try txn.delete(pk, in: storage.records)
                        oldValues.append(stored)
                    } else {
                        oldValues.append([])
                    }
                    for relationship in entity.relationships {
                        guard let forward = storage.relationships[relationship.name] else { continue }
                        try txn.delete(pk, in: forward)
                        // The other side forgets this object, unless the rule leaves it as it is.
                        guard relationship.deleteRule != .noAction,
                            let held = targets[id]?[relationship.name]
                        else { continue }
                        for target in held {
                            // The target's own entity: a relationship to a superentity holds its sub-entities too.
                            guard
                                let backward = try self.storage(for: target.entityName)
                                    .relationships[relationship.inverse]
                            else { continue }
                            try txn.delete(
                                IndexKey.primaryKey(target.primaryKey), value: IndexKey.primaryKey(pk), in: backward)
                        }
                    }
                }
                // Each entity's shared list of attribute names, not a list made per object.
                var changes = try zip(order, oldValues).map { id, old -> ObjectChange in
                    let names = try storage(for: id.entityName).entityBox.attributeNames
                    return ObjectChange(
                        objectID: id, kind: .delete, changedKeys: names, old: .positional(names: names, values: old),
                        new: .dictionary([:]))
                }
                // Derived attributes of the objects that lost links, read through those links.
                let survivors = Set(nullified.keys.filter { !deleted.contains($0) })
                let rederived = try rederive(survivors, try derivations(), txn)
                for (target, keys) in nullified.sorted(by: { $0.key < $1.key }) where !deleted.contains(target) {
                    let names = keys.sorted() + (rederived[target] ?? [])
                    changes.append(ObjectChange(objectID: target, kind: .update, changedKeys: names))
                }
                if !changes.isEmpty {
                    _ = try appendHistory(ChangeRecord(kind: .didSave, changes: changes, author: author), txn)
                }
                return BatchResult(objectIDs: order)
            }
        }
        publisher.catchUp(self, force: true)
        return result
    }

    /// Sets attributes of every model a predicate matches (see ``batchUpdate(_:where:set:author:)``).
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// -->
    /// ```swift
    /// try store.batchUpdate(Book.self, where: \Book.pages > 1000, .set(\Book.inPrint, false))
    /// ```
    @discardableResult
    public func batchUpdate<M: Model>(
        _ type: M.Type, where predicate: ModelPredicate<M>? = nil, _ assignments: ModelAssignment<M>...,
        author: String? = nil
    ) throws -> BatchResult {
        let entityName = ModelKeys.entityName(of: type)
        try type.check(against: try storage(for: entityName).entity)
        var values: [String: Value] = [:]
        for assignment in assignments { values[assignment.key] = assignment.value }
        return try batchUpdate(entityName, where: predicate?.predicate, set: values, author: author)
    }

    /// Deletes every model a predicate matches, with the delete rules (see ``batchDelete(_:where:author:)-(String,_,_)``).
    @discardableResult
    public func batchDelete<M: Model>(
        _ type: M.Type, where predicate: ModelPredicate<M>? = nil, author: String? = nil
    ) throws -> BatchResult {
        let entityName = ModelKeys.entityName(of: type)
        try type.check(against: try storage(for: entityName).entity)
        return try batchDelete(entityName, where: predicate?.predicate, author: author)
    }

    /// The objects of `entityName` a predicate matches, in the transaction (a fetch's plan, without a context's
    /// objects).
    private func matches(
        _ entityName: String, _ predicate: FetchPredicate?, _ txn: ReadTransaction
    ) throws -> [ObjectID] {
        var request = FetchRequest(entity: entityName, predicate: predicate)
        request.includesPendingChanges = false
        let carrier = ObjectContext(store: self, name: "batch")
        return try carrier.run(request, shape: .objectIDs, in: txn).map(\.id)
    }

    /// A unique attribute set by a batch: one object at most, and no other object may hold the value.
    private func checkUniqueness(
        _ assignments: [(index: Int, value: Value)], of ids: [ObjectID], _ storage: EntityStorage,
        _ txn: ReadTransaction
    ) throws {
        let entity = storage.entity
        var failures: [EntityStoreError.Failure] = []
        for (index, value) in assignments where entity.attributes[index].isUnique && !value.isNull {
            let attribute = entity.attributes[index]
            if ids.count > 1 {
                failures.append(
                    .init(
                        entity: entity.name, key: attribute.name,
                        message: "the value \(value) must be unique; the batch would give it to \(ids.count) objects"))
                continue
            }
            guard let only = ids.first else { continue }
            var keyBuffer: [UInt8] = []
            let scope = try uniquenessScope(of: attribute.name, in: only.entityName).storages
            if let holder = try holders(of: value, at: index, in: scope, txn, keyBuffer: &keyBuffer)
                .first(where: { $0 != only })
            {
                failures.append(
                    .init(
                        entity: entity.name, key: attribute.name, objectID: only,
                        message: "the value \(value) must be unique; \(holder) already has it"))
            }
        }
        if !failures.isEmpty { throw Self.batchChangeFailure(failures) }
    }

    private static func batchChangeFailure(_ failures: [EntityStoreError.Failure]) -> EntityStoreError {
        EntityStoreError(
            .validationFailed,
            failures.count == 1 ? failures[0].description : "\(failures.count) validation failures",
            entity: failures[0].entity, key: failures[0].key, objectID: failures[0].objectID, failures: failures)
    }
}

extension PersistentStore {
    /// Each derived attribute's first relationship, with the entity that has the attribute.
    func relationshipDerivationSteps(_ derivations: [String: [Derivation]]) -> [(owner: String, step: Relationship)] {
        derivations.flatMap { owner, list in list.compactMap { $0.firstStep.map { (owner, $0) } } }
    }

    /// The objects whose derived attributes read values of `ids` through a relationship.
    func derivationOwners(
        reading ids: [ObjectID], _ derivations: [String: [Derivation]], _ txn: WriteTransaction
    ) throws -> Set<ObjectID> {
        var owners = Set<ObjectID>()
        for (owner, step) in relationshipDerivationSteps(derivations) {
            for id in ids
            where id.entityName == step.destination || schema.isKind(id.entityName, of: step.destination) {
                let storage = try self.storage(for: id.entityName)
                guard let inverse = storage.entity.relationship(step.inverse) else { continue }
                for target in try storedTargets(of: id, inverse, storage, txn)
                where target.entityName == owner || schema.isKind(target.entityName, of: owner) {
                    owners.insert(target)
                }
            }
        }
        return owners
    }

    /// Adds the attributes ``rederive(_:_:_:)`` recomputed to the batch's changes: to an object's change when the
    /// batch changed it, else as an update of its own.
    func mergeRederived(_ rederived: [ObjectID: [String]], into changes: inout [ObjectChange]) {
        guard !rederived.isEmpty else { return }
        var positions: [ObjectID: Int] = [:]
        for (position, change) in changes.enumerated() where change.kind == .update {
            positions[change.objectID] = position
        }
        for (id, names) in rederived.sorted(by: { $0.key < $1.key }) {
            if let position = positions[id] {
                changes[position].changedKeys += names.filter { !changes[position].changedKeys.contains($0) }
            } else {
                changes.append(ObjectChange(objectID: id, kind: .update, changedKeys: names))
            }
        }
    }

    /// Recomputes in `txn` the derived attributes read through relationships of `candidates` from what the store
    /// holds (see ``ChangeWriter/rederive(_:_:context:now:includingOwnValues:tellsFromStored:version:)``), each
    /// rewritten record at its next row version; returns the names of the attributes recomputed for each rewritten
    /// object.
    func rederive(
        _ candidates: Set<ObjectID>, _ derivations: [String: [Derivation]], _ txn: WriteTransaction
    ) throws -> [ObjectID: [String]] {
        guard !candidates.isEmpty, !relationshipDerivationSteps(derivations).isEmpty else { return [:] }
        var writer = ChangeWriter(store: self, txn: txn)
        let fixed = try writer.rederive(candidates, derivations, context: ObjectContext(store: self), now: Date()) {
            $1 + 1
        }
        var names: [ObjectID: [String]] = [:]
        for id in fixed.keys { names[id] = Self.namesDerivedThroughRelationships(of: id.entityName, derivations) }
        return names
    }

    /// The names of `entity`'s derived attributes that read through a relationship.
    static func namesDerivedThroughRelationships(of entity: String, _ derivations: [String: [Derivation]]) -> [String] {
        (derivations[entity] ?? []).filter { $0.firstStep != nil }.map(\.attribute.name)
    }

    /// Computes every derived attribute (but `now()`) of every stored object after a migration added or changed
    /// some (see ``StoreNames/MetaKey/derivationsPending``), in one write transaction that clears the mark.
    func computePendingDerivations() throws {
        let pending = try mappingStorageErrors("reading the store's migration state") {
            try read { txn in try txn.get(StoreNames.MetaKey.derivationsPending, in: meta) != nil }
        }
        guard pending else { return }
        let derivations = try derivations()
        try mappingStorageErrors("computing the derived attributes a migration added") {
            try write { txn in
                var ids = Set<ObjectID>()
                for entityName in derivations.keys {
                    guard let storage = storages[entityName] else { continue }
                    try txn.forEachEntry(in: storage.records) { key, _ in
                        ids.insert(ObjectID(entityName: entityName, primaryKey: try IndexKey.primaryKey(from: key)))
                        return .continue
                    }
                }
                var writer = ChangeWriter(store: self, txn: txn)
                _ = try writer.rederive(
                    ids, derivations, context: ObjectContext(store: self), now: Date(), includingOwnValues: true
                ) { $1 }
                try txn.delete(StoreNames.MetaKey.derivationsPending, in: meta)
            }
        }
    }
}
