import Foundation
import LMDB

/// Running a ``MigrationPlan``: its stages in order, each with its code, inside the opening write transaction.
extension Migration {
    /// Where a migration runs: the environment and the store's meta database and identity.
    struct Site {
        var environment: Environment
        var meta: Database
        var storeID: UUID
    }

    /// What a stage allows the structural step beyond the lightweight rules, and whom it tells how it goes.
    struct StageRules {
        var removals: Set<MigrationRemoval> = []
        var transforms: [String: MigrationTransform] = [:]
        /// Declared conversions, by entity and attribute (new names).
        var conversions: [String: [String: AttributeConversion]] = [:]
        /// The values the conversions refused so far.
        let unconvertible = UnconvertibleValues()
        /// Objects rewritten so far, and the total: called every few thousand objects and at each entity's end.
        var progress: ((_ entity: String, _ completed: Int) -> Void)?

        init() {}

        init(_ stage: MigrationStage) {
            removals = Set(stage.removals)
            transforms = Dictionary(stage.transforms.map { ($0.entity, $0) }, uniquingKeysWith: { first, _ in first })
            for conversion in stage.conversions {
                conversions[conversion.entity, default: [:]][conversion.attribute] = conversion
            }
        }
    }

    /// Refuses a plan that cannot be run whatever the store: versions that do not ascend, a stage that joins no two
    /// consecutive listed versions, two stages for one step, a transform or resolution of an entity the stage's new
    /// schema lacks.
    static func check(_ plan: MigrationPlan) throws {
        let versions = plan.schemas.map(\.version)
        for (earlier, later) in zip(versions, versions.dropFirst()) where earlier >= later {
            throw EntityStoreError(
                .migrationRefused,
                "the migration plan's schemas must ascend by version: \(earlier) is followed by \(later)")
        }
        var steps = Set<[Int]>()
        for stage in plan.stages {
            guard let from = versions.firstIndex(of: stage.fromVersion), from + 1 < versions.count,
                versions[from + 1] == stage.toVersion
            else {
                throw EntityStoreError(
                    .migrationRefused,
                    "the stage from version \(stage.fromVersion) to \(stage.toVersion) does not join two consecutive"
                        + " schemas of the plan (its versions: \(versions.map(String.init).joined(separator: ", ")))")
            }
            guard steps.insert([stage.fromVersion, stage.toVersion]).inserted else {
                throw EntityStoreError(
                    .migrationRefused,
                    "the plan has two stages from version \(stage.fromVersion) to \(stage.toVersion)")
            }
            let target = plan.schemas[from + 1]
            for conversion in stage.conversions
            where target.entity(conversion.entity)?.attributeIndex(conversion.attribute) == nil {
                throw EntityStoreError(
                    .migrationRefused,
                    "the stage from version \(stage.fromVersion) to \(stage.toVersion) converts"
                        + " \(conversion.entity).\(conversion.attribute), which version \(stage.toVersion) does not have",
                    entity: conversion.entity, key: conversion.attribute)
            }
            for name in stage.transforms.map(\.entity) + stage.uniqueness.map(\.entity)
            where target.entity(name) == nil {
                throw EntityStoreError(
                    .migrationRefused,
                    "the stage from version \(stage.fromVersion) to \(stage.toVersion) names entity '\(name)', which"
                        + " version \(stage.toVersion) does not have", entity: name)
            }
        }
    }

    /// Brings the store from `stored` to the plan's last schema: each listed version above the stored one in
    /// turn, by its stage (lightweight where the plan gives none). Returns `false` when a stage was started in
    /// chunks (its first transaction is `txn`; ``resume(_:declared:storeID:startVersion:environment:)`` goes on), or when the
    /// store is in the middle of one.
    ///
    /// Stages are numbered for progress among those from `startVersion` (the store's version when this open began).
    static func run(
        _ plan: MigrationPlan, stored: Schema, startVersion: Int? = nil, _ txn: WriteTransaction, _ site: Site
    ) throws -> Bool {
        guard let declared = plan.schemas.last else { return true }
        if try readMarker(txn, meta: site.meta) != nil { return false }
        // A custom stage runs even between schemas of one shape (a migration of the data alone).
        let customAhead = plan.stages.contains { $0.isCustom && $0.toVersion > stored.version }
        if declared.version <= stored.version || (stored.fingerprint == declared.fingerprint && !customAhead) {
            // Nothing to run, a version raised without a change, or a refusal (older, or changed without a new
            // version): the lightweight path says which.
            try bringUpToDate(txn, meta: site.meta, stored: stored, declared: declared)
            return true
        }
        var current = listed(stored, in: plan)
        for target in plan.schemas where target.version > stored.version {
            let context = StageContext(
                stage: stage(from: current, to: target, in: plan), old: current, new: target, plan: plan,
                startVersion: startVersion ?? stored.version)
            if try rewrittenObjects(context, txn) > plan.chunkSize {
                try beginChunked(context, txn, site)
                return false
            }
            try runStage(
                context.stage, index: context.index, of: context.count, from: current, to: target, plan.progress, txn,
                site)
            current = target
        }
        return true
    }

    /// The stored schema as the plan lists it (with its model classes, for typed reads) when it is the same one.
    static func listed(_ stored: Schema, in plan: MigrationPlan) -> Schema {
        plan.schemas.first { $0.version == stored.version && $0.fingerprint == stored.fingerprint } ?? stored
    }

    static func stage(from old: Schema, to new: Schema, in plan: MigrationPlan) -> MigrationStage {
        plan.stages.first { $0.fromVersion == old.version && $0.toVersion == new.version }
            ?? .lightweight(from: old.version, to: new.version)
    }

    /// A stage about to run, where it stands in the migration.
    struct StageContext {
        var stage: MigrationStage
        var old: Schema
        var new: Schema
        var plan: MigrationPlan
        /// The store's version when this open began: stages are numbered among those after it.
        var startVersion: Int

        var rules: StageRules { StageRules(stage) }
        /// The stages this open runs, and this one's place among them.
        var count: Int { plan.schemas.filter { $0.version > startVersion }.count }
        var index: Int { plan.schemas.filter { $0.version > startVersion && $0.version < new.version }.count }

        func progress(entity: String?, completed: Int, total: Int) -> MigrationProgress {
            MigrationProgress(
                stage: index, stageCount: count, fromVersion: old.version, toVersion: new.version, entity: entity,
                completed: completed, total: total)
        }
    }

    /// The number of objects the stage's structural step rewrites (0 for a stage the lightweight rules refuse: the
    /// refusal comes when it runs, in one transaction).
    static func rewrittenObjects(_ context: StageContext, _ txn: WriteTransaction) throws -> Int {
        let entityPlan: Plan
        do {
            entityPlan = try plan(from: context.old, to: context.new, rules: context.rules)
        } catch {
            return 0
        }
        return try entityPlan.kept.filter { needsRewrite($0, context.rules) }.reduce(0) { sum, kept in
            sum + (try txn.statistics(try txn.openDatabase(StoreNames.records(kept.old.name), create: true)).entries)
        }
    }

    static func runStage(
        _ stage: MigrationStage, index: Int, of count: Int, from old: Schema, to new: Schema,
        _ progress: (@Sendable (MigrationProgress) -> Void)?, _ txn: WriteTransaction, _ site: Site
    ) throws {
        let started = Date()
        var rules = StageRules(stage)
        let total = try old.entities.reduce(0) { sum, entity in
            sum + (try txn.statistics(try txn.openDatabase(StoreNames.records(entity.name), create: true)).entries)
        }
        var report = MigrationProgress(
            stage: index, stageCount: count, fromVersion: old.version, toVersion: new.version, entity: nil,
            completed: 0, total: total)
        progress?(report)
        var rewritten = 0
        var doneBefore = 0
        rules.progress = { entity, completed in
            rewritten = doneBefore + completed
            report.entity = entity
            report.completed = min(rewritten, total)
            progress?(report)
        }
        // The records are written in the old schema: its stamp lets the stage's stores read them.
        try txn.put(StoreNames.MetaKey.schemaStamp, Array(old.fingerprint.utf8), in: site.meta)
        if let willMigrate = stage.willMigrate {
            try withContext(old, txn, site) { try willMigrate($0) }
        }
        if !stage.uniqueness.isEmpty {
            try withContext(old, txn, site) { try resolveDuplicates(stage.uniqueness, from: old, to: new, in: $0) }
        }
        try bringUpToDate(
            txn, meta: site.meta, stored: old, declared: new, rules: rules,
            entityDone: { doneBefore = rewritten })
        try txn.put(StoreNames.MetaKey.schemaStamp, Array(new.fingerprint.utf8), in: site.meta)
        if let didMigrate = stage.didMigrate {
            try withContext(new, txn, site) { try didMigrate($0) }
        }
        report.entity = nil
        report.completed = total
        progress?(report)
        try appendLog(
            MigrationLogEntry(
                fromVersion: old.version, toVersion: new.version, kind: stage.isCustom ? "custom" : "lightweight",
                date: started, seconds: Date().timeIntervalSince(started), objects: rewritten),
            txn, meta: site.meta)
    }

    /// Runs `body` with a context on the store in `schema` inside the migration's transaction, and saves it.
    static func withContext(
        _ schema: Schema, _ txn: WriteTransaction, _ site: Site, _ body: (ObjectContext) throws -> Void
    ) throws {
        let scope = MigrationScope(txn)
        defer { scope.close() }
        let store = try PersistentStore.migrating(
            scope, environment: site.environment, schema: schema, storeID: site.storeID, meta: site.meta)
        let context = ObjectContext(store: store, name: "migration", isolation: nil)
        try body(context)
        if context.hasChanges { try context.save() }
        // A write that failed inside `body` left part of itself in the transaction, whatever `body` did with its
        // error.
        if let failure = scope.failure { throw failure }
    }

    /// Deletes (or merges, then deletes) the stored duplicates of the attributes the resolutions name, in the
    /// old schema, so that the new unique index builds.
    static func resolveDuplicates(
        _ resolutions: [UniquenessResolution], from old: Schema, to new: Schema, in context: ObjectContext
    ) throws {
        for resolution in resolutions {
            guard let entity = new.entity(resolution.entity),
                let attribute = entity.attributes.first(where: { $0.name == resolution.attribute })
            else {
                throw EntityStoreError(
                    .migrationRefused,
                    "a duplicate resolution names \(resolution.entity).\(resolution.attribute), which version"
                        + " \(new.version) does not have", entity: resolution.entity, key: resolution.attribute)
            }
            guard attribute.isUnique else {
                throw EntityStoreError(
                    .migrationRefused,
                    "a duplicate resolution names \(resolution.entity).\(resolution.attribute), which version"
                        + " \(new.version) does not make unique", entity: resolution.entity, key: resolution.attribute)
            }
            // The attribute as stored: under its old name, in the entity's old name. A new attribute holds nothing.
            guard let oldEntity = old.entity(entity.renamedFrom ?? entity.name) ?? old.entity(entity.name),
                let oldKey = [attribute.renamedFrom, attribute.name].compactMap({ $0 }).first(where: {
                    oldEntity.attributeIndex($0) != nil
                })
            else { continue }
            var groups: [Value: [ManagedObject]] = [:]
            for object in try context.fetch(FetchRequest(entity: oldEntity.name)) {
                let value = try object.value(forKey: oldKey)
                guard !value.isNull else { continue }
                let claim = ValueSemantics.uniquenessKey(value, caseInsensitive: attribute.isCaseInsensitive)
                groups[claim, default: []].append(object)
            }
            for group in groups.values where group.count > 1 {
                let ordered = group.sorted { $0.objectID.primaryKey < $1.objectID.primaryKey }
                let keeper: ManagedObject
                switch resolution.rule {
                case .keepFirst, .merge: keeper = ordered[0]
                case .keepNewest: keeper = ordered[ordered.count - 1]
                }
                for duplicate in ordered where duplicate !== keeper {
                    if case .merge(let merge) = resolution.rule { try merge(keeper, duplicate) }
                    try context.delete(duplicate)
                }
            }
        }
    }

    /// Adds a stage to the store's migration log.
    static func appendLog(_ entry: MigrationLogEntry, _ txn: WriteTransaction, meta: Database) throws {
        var log =
            try txn.get(StoreNames.MetaKey.migrationLog, in: meta).map {
                try PersistentStore.decodeJSON([MigrationLogEntry].self, $0, what: "migration log")
            } ?? []
        log.append(entry)
        try txn.put(StoreNames.MetaKey.migrationLog, Array(try JSONEncoder().encode(log)), in: meta)
    }
}

extension PersistentStore {
    /// The chunked migration stage under way in the store, if one is (see <doc:Migration>): begun by a process
    /// that is still at it, or was killed (the next open with the plan goes on with it).
    public func migrationUnderWay() throws -> MigrationProgress? {
        try mappingStorageErrors("reading the migration marker") {
            try readUnchecked { txn in
                try Migration.readMarker(txn, meta: meta).map { marker in
                    MigrationProgress(
                        stage: 0, stageCount: 1, fromVersion: marker.fromVersion, toVersion: marker.toVersion,
                        entity: nil, completed: marker.rewritten, total: marker.total)
                }
            }
        }
    }

    /// The migrations this store ran, a stage each (an open without a plan runs one lightweight stage), oldest
    /// first: versions, kind, when, how long, how many objects. Stores migrated before the log existed list only
    /// later stages; ``schemaHistory()`` has every version.
    public func migrationLog() throws -> [MigrationLogEntry] {
        try mappingStorageErrors("reading the migration log") {
            try readUnchecked { txn in
                guard let bytes = try txn.get(StoreNames.MetaKey.migrationLog, in: meta) else { return [] }
                return try Self.decodeJSON([MigrationLogEntry].self, bytes, what: "migration log")
            }
        }
    }
}

/// The values a stage's conversions could not convert under the rule `refuse` (or into a required attribute
/// without a default): listed in the refusal. A class: the stage's rules are copied, the list is one.
final class UnconvertibleValues {
    private(set) var values: [(objectID: ObjectID, key: String, value: Value, type: AttributeType)] = []

    func add(_ objectID: ObjectID, _ key: String, _ value: Value, _ type: AttributeType) {
        values.append((objectID, key, value, type))
    }

    /// Throws the refusal when values were refused, naming the first few of each attribute and their number.
    func throwIfAny() throws {
        guard let first = values.first else { return }
        var byKey: [String: [(objectID: ObjectID, key: String, value: Value, type: AttributeType)]] = [:]
        for entry in values { byKey["\(entry.objectID.entityName).\(entry.key)", default: []].append(entry) }
        let failures = byKey.sorted { $0.key < $1.key }.map { name, entries in
            EntityStoreError.Failure(
                entity: entries[0].objectID.entityName, key: entries[0].key,
                message: "\(entries.count) value(s) of \(name) do not convert to \(entries[0].type.rawValue): "
                    + entries.prefix(10).map { "\($0.objectID) \($0.value)" }.joined(separator: ", ")
                    + (entries.count > 10 ? ", ..." : "")
                    + " (convert them with a transform, or declare unconvertible: .useDefault or .setNil)")
        }
        values = []
        throw EntityStoreError(
            .migrationRefused,
            failures.count == 1
                ? "cannot migrate: \(failures[0].message)"
                : "cannot migrate: \(failures.count)"
                    + " conversions met values that do not convert",
            entity: first.objectID.entityName, key: first.key, failures: failures)
    }
}

extension Value {
    /// The value as an attribute of `type` holds it, converted exactly (see ``AttributeConversion``); `nil` when
    /// it does not convert.
    func convertedForMigration(to type: AttributeType) -> Value? {
        if isNull || self.type == type { return self }
        if let number = converted(to: type) { return number }
        switch (self, type) {
        case (.int(let integer), .string): return .string(String(integer))
        case (.double(let double), .string): return .string("\(double)")
        case (.bool(let flag), .string): return .string(flag ? "true" : "false")
        case (.uuid(let uuid), .string): return .string(uuid.uuidString)
        case (.date(let date), .string): return .string(date.formatted(.iso8601))
        case (.decimal(let decimal), .string): return .string("\(decimal)")
        case (.data(let bytes), .string): return String(validating: bytes, as: UTF8.self).map(Value.string)
        case (.string(let text), .binary): return .data(Array(text.utf8))
        case (.int(let integer), .bool) where integer == 0 || integer == 1: return .bool(integer == 1)
        case (.bool(let flag), .int64): return .int(flag ? 1 : 0)
        case (.int(let integer), .decimal): return .decimal(Decimal(integer))
        case (.string(let text), _):
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            switch type {
            case .int64: return Int64(trimmed).map(Value.int)
            case .double: return Double(trimmed).flatMap { $0.isFinite ? Value.double($0) : nil }
            case .bool:
                switch trimmed.lowercased() {
                case "true", "yes", "1": return .bool(true)
                case "false", "no", "0": return .bool(false)
                default: return nil
                }
            case .uuid: return UUID(uuidString: trimmed).map(Value.uuid)
            case .date:
                // Text that is not an ISO 8601 date does not convert: the nil goes to the conversion's rule, which
                // refuses the migration listing the value (or takes the default or nil as declared).
                return (try? Date(trimmed, strategy: .iso8601)).map(Value.date)
            case .decimal:
                guard let decimal = Decimal(string: trimmed), "\(decimal)" == trimmed else { return nil }
                return .decimal(decimal)
            default: return nil
            }
        default: return nil
        }
    }
}
