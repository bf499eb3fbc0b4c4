import Foundation
import LMDB

/// What a batch insert does with an object whose unique value another object already holds: a stored object, or
/// an earlier object of the same batch.
///
/// <!-- snippet
/// uses: library
/// let store = try openLibrary()
/// let context = ObjectContext(store: store)
/// let feed = [(name: "sf", color: "blue")]
/// -->
/// ```swift
/// // An import that runs again: existing tags (by their unique name) are updated, new ones inserted.
/// try store.batchInsert(into: "Tag", objects: feed.map { ["name": .string($0.name), "color": .string($0.color)] },
///                       onConflict: .update)
/// ```
public enum UniqueConflictPolicy: Sendable, Hashable {
    /// Refuse the whole batch, listing every duplicate (the default).
    case fail
    /// Update the object that holds the value with the values the object gives; the attributes it leaves out keep
    /// theirs. An upsert: Core Data's batch insert under a merge-by-property policy, GRDB's `upsert`, Realm's
    /// `add(_:update: .modified)`. The holder keeps its ID and its relationships.
    case update
    /// Keep the object that holds the value as it is and skip the object.
    case ignore
}

extension PersistentStore {
    /// What a batch insert under ``UniqueConflictPolicy/update`` or ``UniqueConflictPolicy/ignore`` knows of each
    /// object before it reads the store: the attributes its caller gave (only those update a holder), those given
    /// with a wrong type (already listed), and the problems found so far.
    struct UpsertInput {
        var policy: UniqueConflictPolicy
        var given: [[Int]]
        var mistyped: [Set<Int>]
        var failures: [EntityStoreError.Failure]
    }

    /// The object a batch object ends as: the `n`th new one, or a stored one it updates or is skipped for.
    private enum UpsertTarget: Hashable {
        case new(Int)
        case stored(ObjectID)
    }

    /// A stored object an upsert updates (of the batch's entity or one of its sub-entities, whose records hold the
    /// inherited attributes at the same positions): its storage, its values as stored and as the batch leaves
    /// them, and its row version.
    private struct StoredTarget {
        var storage: EntityStorage
        var old: [Value]
        var current: [Value]
        var rowVersion: UInt64
    }

    /// Inserts `rows` (every attribute, in order; defaults and generated values where the caller gave none), each
    /// object whose unique value is held already updating or skipping for the holder, in one write transaction
    /// with one history entry. Every problem is listed in one error and nothing is written then.
    func upsertRows(
        _ rows: [[Value]], _ storage: EntityStorage, _ input: UpsertInput, author: String?
    ) throws -> [ObjectID] {
        let entity = storage.entity
        let allDerivations = try derivations()
        let now = Date()
        let ids = try mappingStorageErrors("batch inserting into \(entity.name)") {
            try write { txn -> [ObjectID] in
                var failures = input.failures
                var plan = try resolve(rows, storage, input, txn, &failures)
                if !failures.isEmpty { throw Self.batchFailure(failures) }
                let newRows = try derivingValues(plan.newRows, entity)
                var changes: [ObjectChange] = []
                var keys: [UInt64] = []
                if !newRows.isEmpty {
                    keys = try takeKeys(newRows.count, of: entity.name, txn)
                    var writer = ChangeWriter(store: self, txn: txn)
                    try writer.insertAppending(newRows, keys: keys, storage)
                    // The history keeps an insert's keys only: its values are in its record.
                    for key in keys {
                        changes.append(
                            ObjectChange(
                                objectID: ObjectID(entityName: entity.name, primaryKey: key), kind: .insert,
                                changedKeys: storage.attributeNames, old: .dictionary([:]), new: .dictionary([:])))
                    }
                }
                var updated: [ObjectID] = []
                var buffer: [UInt8] = []
                var keyBuffer: [UInt8] = []
                for id in plan.storedOrder {
                    guard var target = plan.stored[id.primaryKey] else { continue }
                    let storage = target.storage
                    for derivation in (allDerivations[id.entityName] ?? []) where derivation.firstStep == nil {
                        target.current[derivation.index] = try derivation.value(
                            ValuesSubject(values: target.current), now: now, of: id)
                    }
                    plan.stored[id.primaryKey] = target
                    let (changedKeys, old, new) = ObjectChange.differences(
                        storage.entityBox, from: target.old, to: target.current)
                    guard !changedKeys.isEmpty else { continue }
                    let pk = id.primaryKey
                    for (position, database, caseInsensitive) in storage.indexList
                    where target.old[position] != target.current[position] {
                        IndexKey.encode(target.old[position], caseInsensitive: caseInsensitive, into: &keyBuffer)
                        try txn.delete(keyBuffer, value: IndexKey.primaryKey(pk), in: database)
                        IndexKey.encode(target.current[position], caseInsensitive: caseInsensitive, into: &keyBuffer)
                        try keyBuffer.withUnsafeBytes { key in
                            try withUnsafeBytes(of: pk.bigEndian) { try txn.put(key, $0, in: database) }
                        }
                    }
                    RecordCodec.encode(target.current, rowVersion: target.rowVersion + 1, into: &buffer)
                    try buffer.withUnsafeBytes { try txn.put(pk, $0, in: storage.records) }
                    changes.append(
                        ObjectChange(objectID: id, kind: .update, changedKeys: changedKeys, old: old, new: new))
                    updated.append(id)
                }
                // The objects whose derived attributes read the updated values through a relationship.
                let owners = try derivationOwners(reading: updated, allDerivations, txn)
                mergeRederived(try rederive(owners, allDerivations, txn), into: &changes)
                if !changes.isEmpty {
                    _ = try appendHistory(ChangeRecord(kind: .didSave, changes: changes, author: author), txn)
                }
                return plan.targets.map { target in
                    switch target {
                    case .new(let n): ObjectID(entityName: entity.name, primaryKey: keys[n])
                    case .stored(let id): id
                    }
                }
            }
        }
        publisher.catchUp(self, force: true)
        return ids
    }

    /// What an upsert writes: the new objects' rows, each stored object it updates, and each batch object's target.
    private struct UpsertPlan {
        var newRows: [[Value]] = []
        /// The batch object each new row began as (for messages).
        var newOrigins: [Int] = []
        /// By primary key: every holder is of the batch entity's hierarchy, which shares one key sequence.
        var stored: [UInt64: StoredTarget] = [:]
        var storedOrder: [ObjectID] = []
        var targets: [UpsertTarget] = []
    }

    /// Finds, object by object in the batch's order, the object each one becomes: an object whose given unique
    /// values no one holds is new; one whose values one object holds (stored, or new earlier in the batch) updates
    /// it or is skipped for it; one whose values several objects hold is listed. The values each object takes and
    /// gives up are followed, so that a later object of the batch sees what the earlier ones left.
    private func resolve(
        _ rows: [[Value]], _ storage: EntityStorage, _ input: UpsertInput, _ txn: WriteTransaction,
        _ failures: inout [EntityStoreError.Failure]
    ) throws -> UpsertPlan {
        let entity = storage.entity
        let unique = storage.entityBox.uniqueAttributeIndices
        // Per attribute position (read per value, so no attribute is copied per object): where its values must be
        // unique, and whether without regard to case.
        var scopes = [[EntityStorage]](repeating: [], count: entity.attributes.count)
        for i in unique { scopes[i] = try uniquenessScope(of: entity.attributes[i].name, in: entity.name).storages }
        let caseInsensitive = entity.attributes.map(\.isCaseInsensitive)
        var plan = UpsertPlan()
        plan.targets.reserveCapacity(rows.count)
        // Per unique attribute, the values the batch's objects hold now where that differs from the store: who holds
        // each. (Two attributes never share a scope: one list per attribute.)
        var claims = [[Value: UpsertTarget]](repeating: [:], count: entity.attributes.count)
        for i in unique { claims[i].reserveCapacity(rows.count) }
        var keyBuffer: [UInt8] = []
        let requiredInOrder = entity.attributes.indices.filter { !entity.attributes[$0].isOptional }
        let required = Set(requiredInOrder)

        func describe(_ target: UpsertTarget) -> String {
            switch target {
            case .new(let n): "object \(plan.newOrigins[n]) of the batch"
            case .stored(let id): "\(id)"
            }
        }
        func current(_ target: UpsertTarget) -> [Value] {
            switch target {
            case .new(let n): plan.newRows[n]
            case .stored(let id): plan.stored[id.primaryKey]!.current
            }
        }
        /// The required attributes the object at `position` gives as nil, each listed as a failure: refused for a
        /// new object as for one the batch updates (a later object of the batch does not make it right: each object
        /// is checked as given, as SQL checks a row).
        @discardableResult func refusedNils(at position: Int) -> Set<Int> {
            let values = rows[position]
            let refused = input.given[position].filter {
                required.contains($0) && values[$0].isNull && !input.mistyped[position].contains($0)
            }
            for i in refused {
                failures.append(Self.missing(entity.attributes[i].name, of: entity, position: position))
            }
            return Set(refused)
        }
        func claimKey(_ value: Value, _ i: Int) -> Value {
            ValueSemantics.uniquenessKey(value, caseInsensitive: caseInsensitive[i])
        }
        /// Who holds `value` of the unique attribute at `i` now: a claim of the batch, else a stored object that has
        /// not given it up in the batch.
        func holders(of value: Value, at i: Int) throws -> [UpsertTarget] {
            let key = claimKey(value, i)
            if let claimed = claims[i][key] { return [claimed] }
            return try self.holders(of: value, at: i, in: scopes[i], txn, keyBuffer: &keyBuffer).compactMap { id in
                if let target = plan.stored[id.primaryKey], claimKey(target.current[i], i) != key { return nil }
                return .stored(id)
            }
        }

        for (position, values) in rows.enumerated() {
            let given = input.given[position]
            let mistyped = input.mistyped[position]
            // The objects the given unique values name.
            var matched: [(index: Int, target: UpsertTarget)] = []
            for i in unique where given.contains(i) && !mistyped.contains(i) && !values[i].isNull {
                for holder in try holders(of: values[i], at: i) where !matched.contains(where: { $0.target == holder })
                {
                    matched.append((i, holder))
                }
            }
            // Under ignore it is skipped all the same, for the object its first unique attribute names.
            if matched.count > 1 && input.policy == .update {
                let named = matched.map {
                    "\(entity.attributes[$0.index].name) \(values[$0.index]) is \(describe($0.target))'s"
                }
                failures.append(
                    .init(
                        entity: entity.name, key: entity.attributes[matched[0].index].name,
                        message: "object \(position): its unique values belong to different objects ("
                            + named.joined(separator: ", ") + "): it can update only one"))
                plan.targets.append(matched[0].target)
                continue
            }
            guard let (index, target) = matched.first else {
                // New.
                refusedNils(at: position)
                // Its unique values the caller did not give (defaults) must be free too.
                let n = plan.newRows.count
                for i in unique where !values[i].isNull && !mistyped.contains(i) {
                    if !given.contains(i), let holder = try holders(of: values[i], at: i).first {
                        failures.append(
                            .init(
                                entity: entity.name, key: entity.attributes[i].name,
                                message: "object \(position): the value \(values[i]) must be unique; "
                                    + "\(describe(holder)) already has it"))
                    }
                    claims[i][claimKey(values[i], i)] = .new(n)
                }
                plan.newRows.append(values)
                plan.newOrigins.append(position)
                plan.targets.append(.new(n))
                continue
            }
            plan.targets.append(target)
            guard input.policy == .update else { continue }
            if case .stored(let id) = target, plan.stored[id.primaryKey] == nil {
                guard id.entityName == entity.name || schema.isKind(id.entityName, of: entity.name) else {
                    failures.append(
                        .init(
                            entity: entity.name, key: entity.attributes[index].name,
                            message: "object \(position): \(entity.attributes[index].name) \(values[index]) belongs "
                                + "to \(id), which is not a \(entity.name): an upsert updates only objects of its "
                                + "entity"))
                    continue
                }
                let holder = try self.storage(for: id.entityName)
                guard let bytes = try txn.get(id.primaryKey, in: holder.records) else {
                    throw EntityStoreError(
                        .corruptData, "\(id) is in the index of \(entity.attributes[index].name) but has no record",
                        entity: id.entityName, objectID: id)
                }
                let (stored, rowVersion) = try RecordCodec.decode(bytes, entity: holder.entity, key: id.primaryKey)
                plan.stored[id.primaryKey] = StoredTarget(
                    storage: holder, old: stored, current: stored, rowVersion: rowVersion)
                plan.storedOrder.append(id)
            }
            var updated = current(target)
            let refused = refusedNils(at: position)
            for i in given where !mistyped.contains(i) && !refused.contains(i) {
                if !scopes[i].isEmpty {
                    // The value given up is free for later objects; the value taken is this target's.
                    if !updated[i].isNull {
                        let old = claimKey(updated[i], i)
                        if claims[i][old] == target { claims[i][old] = nil }
                    }
                    if !values[i].isNull { claims[i][claimKey(values[i], i)] = target }
                }
                updated[i] = values[i]
            }
            switch target {
            case .new(let n): plan.newRows[n] = updated
            case .stored(let id): plan.stored[id.primaryKey]!.current = updated
            }
        }
        // New objects: every required value the caller left out, once the batch's later objects have given theirs
        // (those given as nil are listed already).
        for (n, values) in plan.newRows.enumerated() where requiredInOrder.contains(where: { values[$0].isNull }) {
            let position = plan.newOrigins[n]
            let listed = input.mistyped[position].union(input.given[position].filter { rows[position][$0].isNull })
            Self.checkRequired(values, entity, position: position, except: listed, &failures)
        }
        return plan
    }
}
