import LMDB

/// Brings a store written with one schema up to another, inside the caller's write transaction.
///
/// The plan is checked in full before anything is written; a refused change throws with every reason, and the
/// transaction is aborted, so the store is left as it was.
enum Migration {
    static func bringUpToDate(
        _ txn: WriteTransaction, meta: Database, stored: Schema, declared: Schema, rules: StageRules = StageRules(),
        shadows: Bool = false, entityDone: () -> Void = {}
    ) throws {
        if declared.version < stored.version {
            throw EntityStoreError(
                .schemaOlderThanStore,
                "the declared schema has version \(declared.version), older than the store's version"
                    + " \(stored.version)")
        }
        let history =
            try txn.get(StoreNames.MetaKey.schemaHistory, in: meta).map {
                try PersistentStore.decodeJSON([Schema].self, $0, what: "schema history")
            } ?? [stored]
        if stored.fingerprint == declared.fingerprint && rules.transforms.isEmpty {
            if declared.version > stored.version {
                try PersistentStore.writeSchema(declared, history: history + [declared], txn, meta: meta)
            }
            return
        }
        if declared.version == stored.version && stored.fingerprint != declared.fingerprint {
            throw EntityStoreError(
                .migrationRefused,
                "the declared schema differs from the stored one but has the same version \(declared.version):"
                    + " raise the version to migrate")
        }
        let plan = try plan(from: stored, to: declared, rules: rules)
        try checkHierarchies(plan, stored: stored, declared: declared, txn)
        try checkLosses(plan, rules: rules, txn)
        try apply(plan, rules: rules, txn, shadows: shadows, entityDone: entityDone)
        if derivationsChanged(from: stored, to: declared) {
            try txn.put(StoreNames.MetaKey.derivationsPending, [1], in: meta)
        }
        try reconcileSequences(declared, txn, meta: meta)
        try PersistentStore.writeSchema(declared, history: history + [declared], txn, meta: meta)
    }

    /// Whether `declared` has a derived attribute the stored objects do not hold computed: one added, or whose
    /// derivation or entity's relationships changed.
    static func derivationsChanged(from stored: Schema, to declared: Schema) -> Bool {
        declared.entities.contains { entity in
            guard entity.attributes.contains(where: { $0.derivation != nil }) else { return false }
            let old = stored.entity(entity.renamedFrom ?? entity.name) ?? stored.entity(entity.name)
            guard let old, old.relationships == entity.relationships else { return true }
            return entity.attributes.contains { attribute in
                guard let derivation = attribute.derivation else { return false }
                let previous = old.attributes.first { $0.name == (attribute.renamedFrom ?? attribute.name) }
                return previous?.derivation != derivation
            }
        }
    }

    /// Refuses what inheritance cannot migrate by itself: an entity that holds objects becoming abstract, and
    /// entities that hold objects with the same primary key joining one hierarchy (a key must name one object of
    /// a hierarchy). Run before anything is written.
    static func checkHierarchies(_ plan: Plan, stored: Schema, declared: Schema, _ txn: WriteTransaction) throws {
        var failures: [EntityStoreError.Failure] = []
        var holders: [String: (old: String, records: Database)] = [:]
        for entityPlan in plan.kept {
            let records = try txn.openDatabase(StoreNames.records(entityPlan.old.name), create: true)
            let count = try txn.statistics(records).entries
            guard count > 0 else { continue }
            holders[entityPlan.new.name] = (entityPlan.old.name, records)
            if entityPlan.new.isAbstract {
                failures.append(
                    .init(
                        entity: entityPlan.new.name,
                        message: "\(entityPlan.new.name) became abstract but holds \(count) object(s)"))
            }
        }
        // Each declared hierarchy whose entities holding objects came from more than one sequence.
        for root in declared.entities where root.parent == nil {
            let members = declared.family(of: root.name).filter { holders[$0] != nil }
            let sequences = Set(members.map { stored.root(of: holders[$0]!.old) })
            guard sequences.count > 1 else { continue }
            var owner: [UInt64: String] = [:]
            for member in members {
                try txn.forEachEntry(in: holders[member]!.records) { key, _ in
                    let pk = try IndexKey.primaryKey(from: key)
                    if let other = owner[pk] {
                        failures.append(
                            .init(
                                entity: member,
                                message: "\(member)/p\(pk) and \(other)/p\(pk) would share a primary key in the"
                                    + " hierarchy of \(root.name): entities holding objects with the same keys cannot"
                                    + " join one hierarchy"))
                        return .stop
                    }
                    owner[pk] = member
                    return .continue
                }
            }
        }
        guard !failures.isEmpty else { return }
        throw EntityStoreError(
            .migrationRefused,
            failures.count == 1 ? "cannot migrate: \(failures[0])" : "cannot migrate: \(failures.count) problems",
            entity: failures[0].entity, failures: failures)
    }

    /// Sets each primary-key sequence (one per hierarchy, the root's) above every key its entities hold: entities
    /// renamed, moved into a hierarchy or out of one keep their keys, and new keys never meet them.
    static func reconcileSequences(_ declared: Schema, _ txn: WriteTransaction, meta: Database) throws {
        var highest: [String: UInt64] = [:]
        for entity in declared.entities {
            let records = try txn.openDatabase(StoreNames.records(entity.name), create: true)
            let last = try txn.withCursor(on: records) { cursor in
                try cursor.last().map { try IndexKey.primaryKey(from: $0.key) }
            }
            let owner = declared.root(of: entity.name)
            highest[owner] = max(highest[owner] ?? 0, last ?? 0)
        }
        for (owner, last) in highest where last > 0 {
            let key = StoreNames.MetaKey.sequence(owner)
            let current = try txn.get(key, in: meta).map { bytes -> UInt64 in
                bytes.count == 8 ? UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self)) : 0
            }
            if (current ?? 0) <= last { try txn.put(key, IndexKey.primaryKey(last + 1), in: meta) }
        }
    }

    struct EntityPlan {
        var old: Entity
        var new: Entity
        /// For each new attribute, the position of the old attribute it comes from.
        var sources: [Int?]
    }

    struct Plan {
        var kept: [EntityPlan]
        var added: [Entity]
        var removed: [Entity]
    }

    static func plan(from stored: Schema, to declared: Schema, rules: StageRules = StageRules()) throws -> Plan {
        var failures: [EntityStoreError.Failure] = []
        var kept: [EntityPlan] = []
        var added: [Entity] = []
        var matchedOld = Set<String>()
        for entity in declared.entities {
            let old =
                stored.entity(entity.name).flatMap { entity.renamedFrom == nil ? $0 : nil }
                ?? entity.renamedFrom.flatMap { stored.entity($0) } ?? stored.entity(entity.name)
            guard let old else {
                added.append(entity)
                continue
            }
            matchedOld.insert(old.name)
            // A transform of the entity sets what the lightweight rules cannot: a retyped attribute, a required
            // one without a default (each object's values are checked after it).
            let transformed = rules.transforms[entity.name] != nil
            let converted = rules.conversions[entity.name] ?? [:]
            var sources: [Int?] = []
            for attribute in entity.attributes {
                var source =
                    attribute.renamedFrom.flatMap { old.attributeIndex($0) } ?? old.attributeIndex(attribute.name)
                if transformed, converted[attribute.name] == nil, let index = source,
                    old.attributes[index].type != attribute.type
                {
                    source = nil
                }
                sources.append(source)
                guard let source else {
                    if !attribute.isOptional && !attribute.hasDefault && !transformed {
                        failures.append(
                            .init(
                                entity: entity.name, key: attribute.name,
                                message: "a required attribute was added without a default value"))
                    }
                    continue
                }
                let previous = old.attributes[source]
                if previous.type != attribute.type && converted[attribute.name] == nil {
                    failures.append(
                        .init(
                            entity: entity.name, key: attribute.name,
                            message: "the type changed from \(previous.type.rawValue) to \(attribute.type.rawValue)"
                                + " (a stage converts the values: converting: AttributeConversion, or a transform of"
                                + " \(entity.name))"))
                }
                if previous.isOptional && !attribute.isOptional && !attribute.hasDefault && !transformed {
                    failures.append(
                        .init(
                            entity: entity.name, key: attribute.name,
                            message: "an optional attribute became required without a default value for nil values"))
                }
            }
            for relationship in entity.relationships {
                let previous =
                    relationship.renamedFrom.flatMap { old.relationship($0) } ?? old.relationship(relationship.name)
                guard let previous else { continue }
                let destination = declared.entity(relationship.destination)
                let expected = destination?.renamedFrom ?? relationship.destination
                if previous.destination != expected && previous.destination != relationship.destination {
                    failures.append(
                        .init(
                            entity: entity.name, key: relationship.name,
                            message: "the destination changed from \(previous.destination) to"
                                + " \(relationship.destination)"))
                }
                if previous.isToMany && !relationship.isToMany {
                    failures.append(
                        .init(
                            entity: entity.name, key: relationship.name,
                            message: "a to-many relationship cannot become to-one by itself"))
                }
            }
            kept.append(EntityPlan(old: old, new: entity, sources: sources))
        }
        if !failures.isEmpty {
            let summary =
                failures.count == 1
                ? "cannot migrate: \(failures[0])" : "cannot migrate: \(failures.count) changes are not lightweight"
            throw EntityStoreError(
                .migrationRefused, summary, entity: failures[0].entity, key: failures[0].key, failures: failures)
        }
        let removed = stored.entities.filter { !matchedOld.contains($0.name) }
        return Plan(kept: kept, added: added, removed: removed)
    }

    /// Refuses a plan that would drop stored values the stage does not declare: an entity holding objects, an
    /// attribute holding values (not nil), a relationship holding links. Each is named with its count, and with a
    /// `renamedFrom:` suggestion when the new schema adds a same-typed attribute or an entity beside it. Run before
    /// anything is written.
    static func checkLosses(_ plan: Plan, rules: StageRules, _ txn: WriteTransaction) throws {
        var failures: [EntityStoreError.Failure] = []
        func declared(_ entity: String, _ key: String?) -> Bool {
            rules.removals.contains(MigrationRemoval(entity: entity, key: key))
                || (key != nil && rules.removals.contains(.entity(entity)))
        }
        let how = "declare its removal in a MigrationPlan stage (removing:)"
        for entity in plan.removed where !declared(entity.name, nil) {
            let records = try txn.openDatabase(StoreNames.records(entity.name), create: true)
            let count = try txn.statistics(records).entries
            guard count > 0 else { continue }
            let candidates = plan.added.filter { $0.parent == entity.parent }.map { "'\($0.name)'" }
            let rename =
                candidates.isEmpty
                ? ""
                : "; if \(candidates.joined(separator: " or ")) is \(entity.name) renamed, declare it with"
                    + " renamedFrom: \"\(entity.name)\""
            failures.append(
                .init(
                    entity: entity.name,
                    message: "removing entity \(entity.name) would delete its \(count) object(s): \(how)\(rename)"))
        }
        for entityPlan in plan.kept {
            let (old, new) = (entityPlan.old, entityPlan.new)
            let sourced = Set(entityPlan.sources.compactMap { $0 })
            let retyped = Set(
                new.attributes.compactMap { attribute -> String? in
                    let name = attribute.renamedFrom ?? attribute.name
                    guard let index = old.attributeIndex(name) ?? old.attributeIndex(attribute.name),
                        old.attributes[index].type != attribute.type
                    else { return nil }
                    return old.attributes[index].name
                })
            // Attributes of the old entity no new one comes from (retyped ones are the transform's to convert).
            let dropped = old.attributes.indices.filter { index in
                !sourced.contains(index) && !retyped.contains(old.attributes[index].name)
                    && old.attributes[index].derivation == nil && !declared(old.name, old.attributes[index].name)
            }
            if !dropped.isEmpty {
                var counts = Array(repeating: 0, count: dropped.count)
                let records = try txn.openDatabase(StoreNames.records(old.name), create: true)
                try txn.forEach(in: records) { key, value in
                    let (values, _) = try RecordCodec.decode(
                        value, entity: old, key: try IndexKey.primaryKey(from: key))
                    for (slot, index) in dropped.enumerated() where !values[index].isNull { counts[slot] += 1 }
                    return .continue
                }
                for (slot, index) in dropped.enumerated() where counts[slot] > 0 {
                    let attribute = old.attributes[index]
                    let candidates = new.attributes.indices.filter {
                        entityPlan.sources[$0] == nil && new.attributes[$0].type == attribute.type
                            && new.attributes[$0].derivation == nil
                    }.map { "'\(new.attributes[$0].name)'" }
                    let rename =
                        candidates.isEmpty
                        ? ""
                        : "; if \(candidates.joined(separator: " or ")) is '\(attribute.name)' renamed, declare it with"
                            + " renamedFrom: \"\(attribute.name)\""
                    failures.append(
                        .init(
                            entity: old.name, key: attribute.name,
                            message: "removing attribute '\(attribute.name)' would lose \(counts[slot]) stored"
                                + " value(s): \(how)\(rename)"))
                }
            }
            for relationship in old.relationships where !declared(old.name, relationship.name) {
                let kept = new.relationships.contains {
                    ($0.renamedFrom.flatMap { old.relationship($0) } ?? old.relationship($0.name))?.name
                        == relationship.name
                }
                guard !kept else { continue }
                let links = try txn.openDatabase(
                    StoreNames.relationship(old.name, relationship.name), dupSort: true, create: true)
                let count = try txn.statistics(links).entries
                guard count > 0 else { continue }
                failures.append(
                    .init(
                        entity: old.name, key: relationship.name,
                        message: "removing relationship '\(relationship.name)' would lose \(count) stored link(s):"
                            + " \(how)"))
            }
        }
        guard !failures.isEmpty else { return }
        throw EntityStoreError(
            .migrationRefused,
            failures.count == 1
                ? "cannot migrate: \(failures[0])" : "cannot migrate: \(failures.count) changes would lose stored data",
            entity: failures[0].entity, key: failures[0].key, failures: failures)
    }

    static func apply(
        _ plan: Plan, rules: StageRules = StageRules(), _ txn: WriteTransaction, shadows: Bool = false,
        entityDone: () -> Void = {}
    ) throws {
        // Old databases of kept entities are read before anything of theirs is dropped.
        for entityPlan in plan.kept {
            let shadow =
                shadows && needsRewrite(entityPlan, rules)
                ? try txn.openDatabase(StoreNames.migrating(entityPlan.new.name), create: true) : nil
            try migrateEntity(entityPlan, rules: rules, txn, shadow: shadow)
            entityDone()
        }
        for entity in plan.removed {
            try dropAll(of: entity, txn)
        }
        for entity in plan.added {
            _ = try EntityStorage.open(entity, in: txn, create: true)
        }
    }

    /// Whether the stage rewrites the entity's records: its layout changed, it was renamed, or a transform runs.
    static func needsRewrite(_ plan: EntityPlan, _ rules: StageRules) -> Bool {
        plan.old.attributes != plan.new.attributes || plan.old.name != plan.new.name
            || rules.transforms[plan.new.name] != nil
    }

    /// A record's bytes in the new layout: its values mapped by the lightweight rules, then transformed.
    static func rewrite(
        _ value: UnsafeRawBufferPointer, primaryKey: UInt64, _ plan: EntityPlan, _ rules: StageRules,
        into buffer: inout [UInt8]
    ) throws {
        let (old, new) = (plan.old, plan.new)
        let transform = rules.transforms[new.name]
        let (values, rowVersion) = try RecordCodec.decode(value, entity: old, key: primaryKey)
        var mapped: [Value] = []
        mapped.reserveCapacity(plan.sources.count)
        let conversions = rules.conversions[new.name]
        for (i, source) in plan.sources.enumerated() {
            let attribute = new.attributes[i]
            var value = source.map { values[$0] } ?? attribute.initialValue()
            if let source, let conversion = conversions?[attribute.name], old.attributes[source].type != attribute.type
            {
                value = convert(
                    value, by: conversion, attribute, ObjectID(entityName: new.name, primaryKey: primaryKey), rules)
            }
            if value.isNull && !attribute.isOptional && transform == nil { value = attribute.initialValue() }
            mapped.append(value)
        }
        if let transform {
            mapped = try transformed(mapped, from: values, primaryKey: primaryKey, old: old, new: new, by: transform)
        }
        RecordCodec.encode(mapped, rowVersion: rowVersion, into: &buffer)
    }

    /// Moves an entity's records to the new schema: rewritten from the old records, or (`shadow`) taken from the
    /// records a chunked stage rewrote; then its indexes and relationships.
    static func migrateEntity(
        _ plan: EntityPlan, rules: StageRules = StageRules(), _ txn: WriteTransaction, shadow: Database? = nil
    ) throws {
        let (old, new) = (plan.old, plan.new)
        let oldRecords = try txn.openDatabase(StoreNames.records(old.name), create: true)
        let renamed = old.name != new.name
        // Read every record once (through the old entity), keep it in the new layout (encoded).
        var rewritten: [(UInt64, [UInt8])] = []
        if shadow == nil && needsRewrite(plan, rules) {
            var buffer: [UInt8] = []
            try txn.forEach(in: oldRecords) { key, value in
                let primaryKey = try IndexKey.primaryKey(from: key)
                try rewrite(value, primaryKey: primaryKey, plan, rules, into: &buffer)
                rewritten.append((primaryKey, buffer))
                if rewritten.count % 4096 == 0 { rules.progress?(new.name, rewritten.count) }
                return .continue
            }
            try rules.unconvertible.throwIfAny()
            rules.progress?(new.name, rewritten.count)
        }
        // Drop the old indexes and (for a rename) the old records; relationships are copied below.
        for attribute in old.attributes where attribute.isIndexed {
            try txn.drop(try txn.openDatabase(StoreNames.index(old.name, attribute.name), dupSort: true, create: true))
        }
        if renamed {
            try txn.drop(oldRecords)
        }
        let storage = try EntityStorage.openRecordsOnly(new, txn)
        for (primaryKey, bytes) in rewritten {
            try bytes.withUnsafeBytes { try txn.put(primaryKey, $0, in: storage) }
        }
        if let shadow {
            // Every record was rewritten there: the old ones go, the new ones come in key order.
            if !renamed { try txn.empty(storage) }
            // Streamed, not gathered: a cursor on one database stays valid while another is written. Appended (in
            // key order into an empty database): each page filled, and no page split in half.
            // The shadow's pages read so far leave the process's memory as it goes (they stay in the page cache).
            var copied = 0
            try txn.forEach(in: shadow) { key, value in
                try txn.put(try IndexKey.primaryKey(from: key), value, in: storage, flags: .append)
                copied += 1
                if copied % 65_536 == 0 { txn.releaseResidentPages() }
                return .continue
            }
            txn.releaseResidentPages()
            try txn.drop(shadow)
        }
        // Rebuild every index of the new entity from the records.
        try rebuildIndexes(of: new, records: storage, txn)
        // Relationships: copy renamed ones, drop removed ones, create new ones.
        var keptOld = Set<String>()
        for relationship in new.relationships {
            let previous =
                relationship.renamedFrom.flatMap { old.relationship($0) } ?? old.relationship(relationship.name)
            let newName = StoreNames.relationship(new.name, relationship.name)
            let target = try txn.openDatabase(newName, dupSort: true, create: true)
            guard let previous else { continue }
            let oldName = StoreNames.relationship(old.name, previous.name)
            keptOld.insert(previous.name)
            if oldName != newName {
                let source = try txn.openDatabase(oldName, dupSort: true, create: true)
                try copy(source, to: target, txn)
                try txn.drop(source)
            }
        }
        for relationship in old.relationships where !keptOld.contains(relationship.name) {
            try txn.drop(
                try txn.openDatabase(StoreNames.relationship(old.name, relationship.name), dupSort: true, create: true))
        }
    }

    /// A stored value converted to `attribute`'s new type by a declared conversion; one that does not convert
    /// follows the conversion's rule, or is noted for the refusal.
    static func convert(
        _ value: Value, by conversion: AttributeConversion, _ attribute: Attribute, _ objectID: ObjectID,
        _ rules: StageRules
    ) -> Value {
        if let converted = value.convertedForMigration(to: attribute.type) { return converted }
        switch conversion.unconvertible {
        case .useDefault where attribute.hasDefault || attribute.isOptional: return attribute.initialValue()
        case .setNil where attribute.isOptional: return .null
        default:
            rules.unconvertible.add(objectID, attribute.name, value, attribute.type)
            return attribute.initialValue()
        }
    }

    /// An object's new values after `transform`: checked as a save would (a required attribute holds a value).
    static func transformed(
        _ mapped: [Value], from values: [Value], primaryKey: UInt64, old: Entity, new: Entity,
        by transform: MigrationTransform
    ) throws -> [Value] {
        let before = MigratingObject(
            objectID: ObjectID(entityName: old.name, primaryKey: primaryKey), entity: old, values: values)
        var after = MigratedValues(
            objectID: ObjectID(entityName: new.name, primaryKey: primaryKey), entity: new, values: mapped)
        do {
            try transform.body(before, &after)
        } catch let error as EntityStoreError {
            throw error
        } catch {
            // The app's own error: its transform refused this object.
            throw EntityStoreError(.migrationRefused, "migrating \(after.objectID): \(error)")
        }
        for (index, attribute) in new.attributes.enumerated() where after.values[index].isNull {
            if !attribute.isOptional && attribute.derivation == nil {
                guard !attribute.hasDefault else {
                    after.values[index] = attribute.initialValue()
                    continue
                }
                throw EntityStoreError(
                    .validationFailed,
                    "\(after.objectID).\(attribute.name) is required, but the migration's transform left it nil",
                    entity: new.name, key: attribute.name, objectID: after.objectID)
            }
        }
        return after.values
    }

    /// Rebuilds every index of `entity` from its records.
    ///
    /// - Parameter enforcingUniqueness: Refuse when two records share a unique value (a migration making an
    ///   attribute unique); off when rebuilding keys in a new format, where such records are the integrity check's
    ///   to report rather than a reason to lock the app out of its store.
    static func rebuildIndexes(
        of entity: Entity, records: Database, _ txn: WriteTransaction, enforcingUniqueness: Bool = true
    ) throws {
        var indexes: [(Int, Attribute, Database)] = []
        for (i, attribute) in entity.attributes.enumerated() where attribute.isIndexed {
            let index = try txn.openDatabase(StoreNames.index(entity.name, attribute.name), dupSort: true, create: true)
            try txn.empty(index)
            indexes.append((i, attribute, index))
        }
        guard !indexes.isEmpty else { return }
        // Each index's entries packed (the keys' bytes in one array, an entry of five words each: a million objects'
        // entries held a tuple with an array and a value each, 110 MB for one index), then written sorted.
        var packed = [(bytes: [UInt8], entries: [ChangeWriter.IndexEntry])](repeating: ([], []), count: indexes.count)
        var keyBuffer: [UInt8] = []
        var seen: [String: [Value: UInt64]] = [:]
        var duplicates: [String: [String]] = [:]
        try txn.forEach(in: records) { key, value in
            let primaryKey = try IndexKey.primaryKey(from: key)
            let (values, _) = try RecordCodec.decode(value, entity: entity, key: primaryKey)
            for (n, (i, attribute, _)) in indexes.enumerated() {
                let value = values[i]
                if enforcingUniqueness && attribute.isUnique && !value.isNull {
                    let claim = ValueSemantics.uniquenessKey(value, caseInsensitive: attribute.isCaseInsensitive)
                    if let other = seen[attribute.name]?[claim] {
                        duplicates[attribute.name, default: []].append(
                            "p\(other) and p\(primaryKey) both hold \(value)")
                        continue
                    }
                    seen[attribute.name, default: [:]][claim] = primaryKey
                }
                IndexKey.encode(value, caseInsensitive: attribute.isCaseInsensitive, into: &keyBuffer)
                packed[n].entries.append(ChangeWriter.indexEntry(keyBuffer, at: packed[n].bytes.count, primaryKey))
                packed[n].bytes += keyBuffer
            }
            return .continue
        }
        if duplicates.isEmpty {
            for (n, (_, _, index)) in indexes.enumerated() {
                try ChangeWriter.appendSorted(&packed[n].entries, packed[n].bytes, into: index, txn)
                packed[n] = ([], [])
            }
        }
        guard duplicates.isEmpty else {
            let failures = duplicates.sorted { $0.key < $1.key }.map { name, pairs in
                EntityStoreError.Failure(
                    entity: entity.name, key: name,
                    message: "cannot make '\(name)' unique: \(pairs.count) duplicate(s): "
                        + pairs.prefix(5).joined(separator: "; ") + (pairs.count > 5 ? "; ..." : "")
                        + " (resolve them in a MigrationPlan stage: resolving: keepFirst, keepNewest or merge)")
            }
            throw EntityStoreError(
                .migrationRefused,
                failures.count == 1
                    ? failures[0].message
                    : "cannot migrate: \(failures.count) attributes"
                        + " made unique hold duplicates", entity: entity.name, key: failures[0].key, failures: failures)
        }
    }

    static func copy(_ source: Database, to target: Database, _ txn: WriteTransaction) throws {
        var pairs: [([UInt8], [UInt8])] = []
        try txn.forEach(in: source) { key, value in
            pairs.append((Array(key), Array(value)))
            return .continue
        }
        for (key, value) in pairs { try txn.put(key, value, in: target) }
    }

    static func dropAll(of entity: Entity, _ txn: WriteTransaction) throws {
        try txn.drop(try txn.openDatabase(StoreNames.records(entity.name), create: true))
        for attribute in entity.attributes where attribute.isIndexed {
            try txn.drop(
                try txn.openDatabase(StoreNames.index(entity.name, attribute.name), dupSort: true, create: true))
        }
        for relationship in entity.relationships {
            try txn.drop(
                try txn.openDatabase(
                    StoreNames.relationship(entity.name, relationship.name), dupSort: true, create: true))
        }
    }
}

extension EntityStorage {
    static func openRecordsOnly(_ entity: Entity, _ txn: WriteTransaction) throws -> Database {
        try txn.openDatabase(StoreNames.records(entity.name), create: true)
    }
}
