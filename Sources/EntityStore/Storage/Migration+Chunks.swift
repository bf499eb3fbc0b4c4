import Foundation
import LMDB

/// A stage too large for one transaction: its objects are rewritten in chunks, each its own transaction, into
/// shadow databases beside the old records, which stay as they were until the last transaction swaps them in.
///
/// A durable marker in the store's meta database says which stage runs and how far each entity got; the schema
/// stamp says "migrating", so that no process reads or writes the store meanwhile. A process killed at any moment
/// leaves either the old version (the marker not yet committed) or the marker and the chunks committed so far: the
/// next open with the same plan goes on from there, and an open with the old schema abandons the stage (drops the
/// shadows and the marker) and opens the old version. A stage whose code throws, or whose result is refused (a
/// duplicate of a new unique attribute), is abandoned the same way before the error is thrown.
extension Migration {
    /// How far a chunked stage got.
    struct Marker: Codable {
        var fromVersion: Int
        var toVersion: Int
        var fromFingerprint: String
        var toFingerprint: String
        /// By entity (new name), the last primary key rewritten into its shadow.
        var done: [String: UInt64] = [:]
        /// The entities whose objects are all rewritten.
        var finished: [String] = []
        /// The objects rewritten so far, and in all.
        var rewritten = 0
        var total = 0
        var started: Date
    }

    /// The stamp of a store in the middle of a chunked stage.
    static func migratingStamp(_ marker: Marker) -> [UInt8] { Array("migrating:\(marker.toFingerprint)".utf8) }

    static func readMarker(_ txn: ReadTransaction, meta: Database) throws -> Marker? {
        try txn.get(StoreNames.MetaKey.migrationInProgress, in: meta).map {
            try PersistentStore.decodeJSON(Marker.self, $0, what: "migration marker")
        }
    }

    static func writeMarker(_ marker: Marker, _ txn: WriteTransaction, meta: Database) throws {
        try txn.put(StoreNames.MetaKey.migrationInProgress, Array(try JSONEncoder().encode(marker)), in: meta)
    }

    /// The first transaction of a chunked stage: its `willMigrate` and duplicate resolutions, its checks, and the
    /// marker (the stamp then keeps every process out until the stage ends).
    static func beginChunked(_ context: StageContext, _ txn: WriteTransaction, _ site: Site) throws {
        let (old, new, stage) = (context.old, context.new, context.stage)
        let started = Date()
        try txn.put(StoreNames.MetaKey.schemaStamp, Array(old.fingerprint.utf8), in: site.meta)
        if let willMigrate = stage.willMigrate {
            try withContext(old, txn, site) { try willMigrate($0) }
        }
        if !stage.uniqueness.isEmpty {
            try withContext(old, txn, site) { try resolveDuplicates(stage.uniqueness, from: old, to: new, in: $0) }
        }
        let rules = context.rules
        let entityPlan = try plan(from: old, to: new, rules: rules)
        try checkHierarchies(entityPlan, stored: old, declared: new, txn)
        try checkLosses(entityPlan, rules: rules, txn)
        try dropShadows(txn)
        let marker = Marker(
            fromVersion: old.version, toVersion: new.version, fromFingerprint: old.fingerprint,
            toFingerprint: new.fingerprint, total: try rewrittenObjects(context, txn), started: started)
        try writeMarker(marker, txn, meta: site.meta)
        try txn.put(StoreNames.MetaKey.schemaStamp, migratingStamp(marker), in: site.meta)
    }

    /// Goes on with a migration an open could not finish in its transaction: the chunks of the stage under way, its
    /// end, then the plan's later stages, a transaction (or a chunked stage) at a time.
    static func resume(
        _ plan: MigrationPlan, declared: Schema, storeID: UUID, startVersion: Int, environment: Environment
    ) throws {
        // Progress is reported once a transaction has committed what it reports.
        var report: MigrationProgress?
        while true {
            let finished = try environment.write { txn -> Bool in
                report = nil
                let meta = try PersistentStore.openMeta(txn)
                let site = Site(environment: environment, meta: meta, storeID: storeID)
                guard let stored = try PersistentStore.readSchema(txn, meta: meta) else {
                    throw EntityStoreError(.corruptData, "the store's schema is missing while it migrates")
                }
                guard var marker = try readMarker(txn, meta: meta) else {
                    // Between stages: the plan goes on (a later chunked stage starts in this transaction).
                    return try run(plan, stored: stored, startVersion: startVersion, txn, site)
                }
                guard let context = locate(marker, stored: stored, startVersion: startVersion, in: plan) else {
                    if marker.fromFingerprint == stored.fingerprint && declared.fingerprint == stored.fingerprint {
                        // The app of the old version: the stage is dropped and the store opens as it was.
                        try abandon(stored, txn, meta: meta)
                        return true
                    }
                    throw EntityStoreError(
                        .migrationRefused,
                        "the store is in the middle of a migration from version \(marker.fromVersion) to"
                            + " \(marker.toVersion) (begun \(marker.started.formatted(.iso8601))): open it with a plan"
                            + " that has that stage to finish it, or with schema version \(marker.fromVersion) to"
                            + " abandon it")
                }
                if marker.rewritten == 0 && marker.finished.isEmpty {
                    // The stage's start, committed by the transaction before.
                    context.plan.progress?(context.progress(entity: nil, completed: 0, total: marker.total))
                }
                report = try step(&marker, context, txn, site)
                return false
            }
            // The pages the transaction read (a chunk's old records; at the end, the shadows) leave the process's
            // resident memory: a stage over millions of objects would otherwise hold the whole store by its end.
            environment.releaseResidentPages()
            if let report { plan.progress?(report) }
            if finished { return }
        }
    }

    /// Runs `resume`, abandoning the stage under way when its code or its result is refused (not when the disk or
    /// the process fails: those resume at the next open).
    static func resumeOrAbandon(
        _ plan: MigrationPlan, declared: Schema, storeID: UUID, startVersion: Int, environment: Environment
    ) throws {
        do {
            try resume(
                plan, declared: declared, storeID: storeID, startVersion: startVersion, environment: environment)
        } catch {
            if error is LMDBError || [.storage, .diskFull, .corruptData].contains((error as? EntityStoreError)?.code) {
                throw error
            }
            try environment.write { txn in
                let meta = try PersistentStore.openMeta(txn)
                guard try readMarker(txn, meta: meta) != nil,
                    let stored = try PersistentStore.readSchema(txn, meta: meta)
                else { return }
                try abandon(stored, txn, meta: meta)
            }
            throw error
        }
    }

    /// The stage a marker belongs to, when the plan has it.
    static func locate(_ marker: Marker, stored: Schema, startVersion: Int, in plan: MigrationPlan) -> StageContext? {
        guard marker.fromFingerprint == stored.fingerprint,
            let new = plan.schemas.first(where: {
                $0.version == marker.toVersion && $0.fingerprint == marker.toFingerprint
            })
        else { return nil }
        let old = listed(stored, in: plan)
        return StageContext(
            stage: stage(from: old, to: new, in: plan), old: old, new: new, plan: plan, startVersion: startVersion)
    }

    /// One transaction of a chunked stage: the next chunk of the first entity not done, or (all done) the end.
    /// Returns the progress to report once the transaction commits.
    static func step(
        _ marker: inout Marker, _ context: StageContext, _ txn: WriteTransaction, _ site: Site
    ) throws -> MigrationProgress {
        let rules = context.rules
        let entityPlan = try plan(from: context.old, to: context.new, rules: rules)
        for kept in entityPlan.kept where needsRewrite(kept, rules) && !marker.finished.contains(kept.new.name) {
            let name = kept.new.name
            let shadow = try txn.openDatabase(StoreNames.migrating(name), create: true)
            let records = try txn.openDatabase(StoreNames.records(kept.old.name), create: true)
            let range = marker.done[name].map { KeyRange(lower: .init(IndexKey.primaryKey($0), inclusive: false)) }
            var rows: [(UInt64, [UInt8])] = []
            var more = false
            var buffer: [UInt8] = []
            try txn.forEach(in: records, range: range ?? .all) { key, value in
                if rows.count == context.plan.chunkSize {
                    more = true
                    return .stop
                }
                let primaryKey = try IndexKey.primaryKey(from: key)
                try rewrite(value, primaryKey: primaryKey, kept, rules, into: &buffer)
                rows.append((primaryKey, buffer))
                return .continue
            }
            try rules.unconvertible.throwIfAny()
            // In key order above every key the shadow holds (the chunks before, up to the marker): appended, each
            // page filled, where plain puts split every page in half.
            for (primaryKey, bytes) in rows {
                try bytes.withUnsafeBytes { try txn.put(primaryKey, $0, in: shadow, flags: .append) }
            }
            if let last = rows.last { marker.done[name] = last.0 }
            marker.rewritten += rows.count
            if !more { marker.finished.append(name) }
            try writeMarker(marker, txn, meta: site.meta)
            return context.progress(entity: name, completed: min(marker.rewritten, marker.total), total: marker.total)
        }
        try finishChunked(marker, context, txn, site)
        return context.progress(entity: nil, completed: marker.total, total: marker.total)
    }

    /// The last transaction of a chunked stage: the shadows swapped in, indexes and relationships, the schema, then
    /// `didMigrate`, the log, and the marker gone.
    static func finishChunked(_ marker: Marker, _ context: StageContext, _ txn: WriteTransaction, _ site: Site) throws {
        let (old, new) = (context.old, context.new)
        try bringUpToDate(txn, meta: site.meta, stored: old, declared: new, rules: context.rules, shadows: true)
        try txn.put(StoreNames.MetaKey.schemaStamp, Array(new.fingerprint.utf8), in: site.meta)
        if let didMigrate = context.stage.didMigrate {
            try withContext(new, txn, site) { try didMigrate($0) }
        }
        _ = try txn.delete(StoreNames.MetaKey.migrationInProgress, in: site.meta)
        try appendLog(
            MigrationLogEntry(
                fromVersion: old.version, toVersion: new.version,
                kind: context.stage.isCustom ? "custom" : "lightweight",
                date: marker.started, seconds: Date().timeIntervalSince(marker.started), objects: marker.rewritten),
            txn, meta: site.meta)
    }

    /// Drops a chunked stage under way: its shadows and marker go, and the store is its stored version again.
    static func abandon(_ stored: Schema, _ txn: WriteTransaction, meta: Database) throws {
        try dropShadows(txn)
        _ = try txn.delete(StoreNames.MetaKey.migrationInProgress, in: meta)
        try txn.put(StoreNames.MetaKey.schemaStamp, Array(stored.fingerprint.utf8), in: meta)
    }

    /// Drops every shadow database (of a stage abandoned, or killed before it was).
    static func dropShadows(_ txn: WriteTransaction) throws {
        for name in try txn.databaseNames() where name.hasPrefix(StoreNames.migrating("")) {
            try txn.drop(try txn.openDatabase(name, create: false))
        }
    }
}
