import EntityStore
import Foundation
import Synchronization

/// Syncs one store with the other stores of its zone through PostgreSQL.
///
/// A sync pushes the store's history entries not yet pushed (each an idempotent server transaction: a retried push
/// writes nothing twice), then pulls the other stores' changes since its cursor and saves them locally, one save per
/// batch, so that contexts merging the store's saves and their controllers see one batch each. Pulled saves are
/// marked as remote in the history (``isRemote(_:)``) and never pushed back.
///
/// Conflicts resolve property by property, last writer wins by a hybrid logical clock (``HybridLogicalClock``):
/// every store converges to the server's state. See the "Sync" article for the server tables and the guarantees.
///
/// An engine is used from any thread; its syncs run one at a time. One engine per store across processes (a lock
/// file beside the store says so).
public final class SyncEngine: @unchecked Sendable {
    /// The store synced.
    public let store: PersistentStore
    /// How it syncs.
    public let configuration: SyncConfiguration

    /// Serializes syncs, and guards everything below.
    private let lock = NSLock()
    private var connection: PostgresConnection?
    private var state: SyncState
    /// The state as last written, for ``status``.
    private let published: Mutex<SyncState>
    /// The store's ID on the server (the state's, fixed).
    private let storeID: UUID
    private let fileLock: SyncLock
    private let directory: String
    let plan: SyncPlan
    /// The background loop's flag (see ``start(interval:onError:)``).
    private let running = RunFlag()

    /// The author of pulled saves: `entitystore.sync remote stamp=N`, N their largest clock stamp.
    static let remoteAuthorPrefix = "entitystore.sync remote"

    /// Prepares a store to sync.
    ///
    /// - Throws: ``SyncError/Code/notSyncable`` when no entity has the global ID attribute, or one has it with
    ///   another type or not unique; ``SyncError/Code/busy`` when another engine (in any process) syncs the store;
    ///   ``SyncError/Code/state`` when the state file belongs to another zone or cannot be read.
    public init(store: PersistentStore, configuration: SyncConfiguration) throws {
        self.store = store
        self.configuration = configuration
        directory = store.environment.path
        plan = try SyncPlan(schema: store.schema, globalIDKey: configuration.globalIDKey)
        fileLock = try SyncLock(storeDirectory: directory)
        if let saved = try SyncState.read(storeDirectory: directory) {
            guard saved.zone == configuration.zone else {
                throw SyncError(
                    .state,
                    "the store syncs with zone '\(saved.zone)', not '\(configuration.zone)' (its state is in "
                        + "\(SyncState.url(inStore: directory).path))")
            }
            state = saved
        } else {
            state = SyncState(zone: configuration.zone, storeID: store.storeID)
        }
        storeID = state.storeID
        published = Mutex(state)
    }

    deinit { running.stop() }

    /// The sync state: cursors, clock, pending work and the last error.
    /// Read without waiting for a sync in progress (a sync offline can take the connect timeout).
    public var status: SyncState { published.withLock { $0 } }

    /// Writes the state file and publishes the state to ``status``.
    private func saveState() throws {
        try state.write(storeDirectory: directory)
        published.withLock { $0 = state }
    }

    /// Whether a history entry holds changes pulled from other stores (they are not pushed back).
    public static func isRemote(_ record: ChangeRecord) -> Bool { remoteStamp(of: record) != nil }

    /// An object's global ID: its global ID attribute when it has one (objects that came from other stores, or
    /// that the app gave one), otherwise one derived from this store's ID and the object's key, which never
    /// changes and needs no write.
    public func globalID(of object: ManagedObject) throws -> UUID {
        if case .uuid(let id) = try object.value(forKey: plan.globalIDKey) { return id }
        return derivedGlobalID(object.objectID)
    }

    /// The global ID of a model's object (see ``globalID(of:)-(ManagedObject)``).
    public func globalID(of model: Model) throws -> UUID { try globalID(of: model.managedObject) }

    func derivedGlobalID(_ id: ObjectID) -> UUID {
        GlobalID.derived(store: storeID, hierarchy: plan.root(of: id.entityName), key: id.primaryKey)
    }

    static func remoteStamp(of record: ChangeRecord) -> UInt64? {
        guard let author = record.author, author.hasPrefix(remoteAuthorPrefix + " stamp=") else { return nil }
        return UInt64(author.dropFirst(remoteAuthorPrefix.count + 7))
    }

    /// Pushes the local changes not yet pushed, then pulls the other stores' changes.
    ///
    /// - Throws: ``SyncError``: with ``SyncError/Code/serverUnavailable`` the store keeps working and the next sync
    ///   resumes from the cursors; the error is also kept in ``status`` (`lastError`).
    @discardableResult
    public func syncNow() throws -> SyncReport {
        try lock.withLock {
            var report = SyncReport()
            do {
                let connection = try connected()
                try push(connection, &report)
                try pull(connection, &report)
                state.lastError = nil
                try saveState()
            } catch let error as SyncError {
                try fail(error)
            } catch let error as EntityStoreError {
                try fail(SyncError(.store, error.description))
            }
            return report
        }
    }

    /// Keeps `error` in the state (for `store-inspect sync-status`) and throws it; a broken connection is dropped so
    /// the next sync reconnects.
    private func fail(_ error: SyncError) throws -> Never {
        if error.code == .serverUnavailable { connection = nil }
        state.lastError = error.description
        try saveState()
        throw error
    }

    private func connected() throws -> PostgresConnection {
        if let connection, connection.isOpen { return connection }
        connection = nil
        let fresh = try PostgresConnection(configuration.connectionWithTimeout)
        try ServerSchema.create(fresh)
        connection = fresh
        return fresh
    }

    // MARK: - Background

    /// Syncs in the background: at once, right after every local save, when another store pushes (PostgreSQL's
    /// `NOTIFY`), and every `interval` seconds. Errors go to `onError` and the loop goes on (with PostgreSQL down
    /// it retries at the next save or after `interval`). `onSync` gets each sync's report that did something: its
    /// uniqueness conflicts and problems reach the app there.
    ///
    /// - Throws: A storage error when the store's saves cannot be observed.
    public func start(
        interval: Double = 5, onSync: @escaping @Sendable (SyncReport) -> Void = { _ in },
        onError: @escaping @Sendable (SyncError) -> Void = { _ in }
    ) throws {
        let wake = try WakePipe()
        guard running.begin(wake) else { return }
        let token: ObservationToken
        do {
            token = try store.observeCommits(
                onError: { onError(SyncError(.store, "watching the store's saves: \($0.description)")) },
                onChange: { record in if !SyncEngine.isRemote(record) { wake.signal() } })
        } catch {
            running.finished()
            throw error
        }
        let thread = Thread { [self] in
            var due = Date.distantPast
            var dirty = true
            // The loop's own connection, for LISTEN (the sync connection is the syncs', under the lock).
            var listener: PostgresConnection?
            while running.isRunning {
                if dirty || Date() >= due {
                    dirty = false
                    due = Date().addingTimeInterval(interval)
                    do {
                        let report = try syncNow()
                        if report != SyncReport() { onSync(report) }
                    } catch let error as SyncError {
                        onError(error)
                    } catch {
                        onError(SyncError(.store, "\(error)"))
                    }
                }
                let timeout = max(0, due.timeIntervalSinceNow)
                if listener == nil {
                    do {
                        listener = try Self.listen(configuration)
                    } catch {
                        // The server is unreachable: each sync reports that (once); until it answers, saves and
                        // the interval wake the loop.
                        listener = nil
                    }
                }
                guard let current = listener else {
                    wake.wait(timeout: timeout)
                    dirty = wake.drain()
                    continue
                }
                do {
                    let notified = try current.waitForNotification(timeout: timeout, alsoWatching: wake.readDescriptor)
                    dirty = wake.drain() || notified
                } catch {
                    // The server went away while we waited: sync at once (it reports the failure) and listen anew.
                    listener = nil
                    dirty = true
                }
            }
            token.cancel()
            running.finished()
        }
        thread.name = "EntityStoreSync"
        thread.start()
    }

    /// Stops the background loop and waits for its current sync to end.
    public func stop() { running.stop() }

    /// A connection listening to the zone's pushes.
    private static func listen(_ configuration: SyncConfiguration) throws -> PostgresConnection {
        let connection = try PostgresConnection(configuration.connectionWithTimeout)
        try connection.listen(ServerSchema.channel)
        return connection
    }

    // MARK: - Push

    private func push(_ connection: PostgresConnection, _ report: inout SyncReport) throws {
        let limit = try store.lastTransaction()
        if !state.pendingTombstones.isEmpty {
            let tombstones = state.pendingTombstones
            try connection.transaction {
                try ServerSchema.lockZone(connection, configuration.zone)
                for tombstone in tombstones {
                    let pushed = PushedObject(
                        entity: tombstone.entity, globalID: tombstone.globalID, originKey: nil, deleted: true,
                        onlyIfAlive: false, values: [:])
                    _ = try send([pushed], seq: nil, stamp: tombstone.stamp, connection)
                }
            }
            report.pushedChanges += tombstones.count
            state.pendingTombstones = []
            try saveState()
        }
        while state.pushedThrough < limit {
            let entries = try store.history(since: state.pushedThrough, limit: configuration.batchSize)
                .filter { ($0.transaction ?? .max) <= limit }
            guard let first = entries.first, let last = entries.last?.transaction else { break }
            if let number = first.transaction, number > state.pushedThrough + 1 {
                report.problems.append(
                    "history entries \(state.pushedThrough + 1)-\(number - 1) were pruned before they were pushed: "
                        + "their changes reach other stores only when later saves change the same properties")
            }
            var clock = state.clock
            var batch: [(seq: UInt64, stamp: UInt64, objects: [PushedObject])] = []
            let reader = ObjectContext(store: store)
            for entry in entries {
                if let stamp = Self.remoteStamp(of: entry) {
                    clock = max(clock, stamp)
                    // A pulled delete can cascade to objects the other stores still have (this store had put
                    // them in the deleted object): those deletes are this store's to tell.
                    let deletes = remoteDeletes(entry)
                    if !deletes.isEmpty { batch.append((entry.transaction ?? 0, stamp, deletes)) }
                    continue
                }
                let stamp = HybridLogicalClock.stamp(after: clock, at: entry.date)
                clock = stamp
                let objects = try pushedObjects(entry, reader, &report)
                batch.append((entry.transaction ?? 0, stamp, objects))
            }
            var counts = (entries: 0, changes: 0, refused: 0)
            var refused: [UUID] = []
            try connection.transaction {
                counts = (0, 0, 0)
                refused = []
                try ServerSchema.lockZone(connection, configuration.zone)
                try connection.execute(
                    """
                    INSERT INTO entitystore_stores (zone, store_id, schema_version, last_push, pushed_through)
                    VALUES ($1, $2, $3, now(), $4)
                    ON CONFLICT (zone, store_id) DO UPDATE SET schema_version = EXCLUDED.schema_version,
                        last_push = now(),
                        pushed_through = GREATEST(entitystore_stores.pushed_through, EXCLUDED.pushed_through)
                    """,
                    [configuration.zone, storeID.uuidString, "\(store.schema.version)", "\(last)"])
                for (seq, stamp, objects) in batch {
                    // A push already recorded (a retry after a kill or a lost answer) writes nothing again.
                    let first = try connection.execute(
                        """
                        INSERT INTO entitystore_pushes (zone, store_id, seq, stamp) VALUES ($1, $2, $3, $4)
                        ON CONFLICT DO NOTHING RETURNING seq
                        """, [configuration.zone, storeID.uuidString, "\(seq)", "\(stamp)"])
                    if first.rows.isEmpty {
                        // Pushed before: by this store (the same stamp, recomputed from the same state), or by a copy
                        // of its directory, which shares its store ID and would have its changes dropped here.
                        let earlier = try connection.execute(
                            "SELECT stamp FROM entitystore_pushes WHERE zone = $1 AND store_id = $2 AND seq = $3",
                            [configuration.zone, storeID.uuidString, "\(seq)"])
                        guard earlier.rows.first?.first == .some("\(stamp)") else {
                            throw SyncError(
                                .state,
                                "the server holds another entry \(seq) of store \(storeID.uuidString): this "
                                    + "store is a copy of another replica's directory (copies share the store ID), "
                                    + "or its sync-state.json was lost; sync a new, empty store instead")
                        }
                        continue
                    }
                    guard !objects.isEmpty else { continue }
                    let outcome = try send(objects, seq: seq, stamp: stamp, connection)
                    counts.entries += 1
                    counts.changes += objects.reduce(0) { $0 + ($1.deleted ? 1 : $1.values.count) }
                    counts.refused += outcome.count
                    refused += outcome
                }
                try connection.execute("SELECT pg_notify($1, $2)", [ServerSchema.channel, configuration.zone])
            }
            report.pushedEntries += counts.entries
            report.pushedChanges += counts.changes
            report.refusedChanges += counts.refused
            state.refetch = Array(Set(state.refetch + refused)).sorted { $0.uuidString < $1.uuidString }
            state.pushedThrough = last
            state.clock = clock
            state.lastPush = Date()
            try saveState()
        }
    }

    /// The deletes of a pulled save, as tombstones that change only objects the server still has.
    private func remoteDeletes(_ entry: ChangeRecord) -> [PushedObject] {
        entry.changes.compactMap { change in
            guard change.kind == .delete, let entity = plan.entities[change.objectID.entityName] else { return nil }
            let id: UUID
            if case .uuid(let given)? = change.oldValues[plan.globalIDKey] {
                id = given
            } else {
                id = derivedGlobalID(change.objectID)
            }
            return PushedObject(
                entity: entity.name, globalID: id, originKey: nil, deleted: true, onlyIfAlive: true, values: [:])
        }
    }

    /// One object's change as pushed: its values by key (relationships as `r:` texts), or its delete.
    struct PushedObject {
        var entity: String
        var globalID: UUID
        /// The object's key here, when this store made it (other stores find their copies by global ID).
        var originKey: UInt64?
        var deleted: Bool
        /// For a delete: only when the server has not deleted the object (a cascade of a pulled delete).
        var onlyIfAlive = false
        var values: [String: String?]
    }

    /// The objects an entry changed, with their current values of the changed keys (a later entry's values are
    /// pushed again with its own, later stamp).
    private func pushedObjects(
        _ entry: ChangeRecord, _ reader: ObjectContext, _ report: inout SyncReport
    ) throws
        -> [PushedObject]
    {
        var objects: [PushedObject] = []
        for change in entry.changes {
            guard let entity = plan.entities[change.objectID.entityName] else { continue }
            if change.kind == .delete {
                let id: UUID
                if case .uuid(let given)? = change.oldValues[plan.globalIDKey] {
                    id = given
                } else {
                    id = derivedGlobalID(change.objectID)
                }
                objects.append(
                    PushedObject(
                        entity: entity.name, globalID: id, originKey: nil, deleted: true, onlyIfAlive: false,
                        values: [:]))
                continue
            }
            let object: ManagedObject
            do {
                object = try reader.existingObject(with: change.objectID)
            } catch let error as EntityStoreError where error.code == .objectNotFound {
                continue  // deleted by a later entry, which pushes the delete
            }
            let given = try object.value(forKey: plan.globalIDKey)
            let id = try globalID(of: object)
            let keys = change.kind == .insert ? entity.keys : Set(change.changedKeys).intersection(entity.keys)
            var values: [String: String?] = [:]
            for attribute in entity.attributes where keys.contains(attribute.name) {
                values[attribute.name] = SyncValue.text(try object.value(forKey: attribute.name))
            }
            for relationship in entity.relationships where keys.contains(relationship.name) {
                var targets: [UUID] = []
                for targetID in try object.objectIDs(forKey: relationship.name)
                where plan.entities[targetID.entityName] != nil {
                    do {
                        targets.append(try globalID(of: try reader.existingObject(with: targetID)))
                    } catch let error as EntityStoreError where error.code == .objectNotFound {
                        continue  // deleted since: a later entry pushes the delete
                    }
                }
                values[relationship.name] = SyncValue.text(targets: targets)
            }
            guard change.kind == .insert || !values.isEmpty else { continue }
            objects.append(
                PushedObject(
                    entity: entity.name, globalID: id, originKey: given.isNull ? change.objectID.primaryKey : nil,
                    deleted: false, onlyIfAlive: false, values: values))
        }
        return objects
    }

    /// Writes objects' changes stamped `stamp`, logs them for the other stores, and gives the objects whose values
    /// the server refused (it holds newer ones).
    private func send(
        _ objects: [PushedObject], seq: UInt64?, stamp: UInt64, _ connection: PostgresConnection
    ) throws
        -> [UUID]
    {
        let zone = configuration.zone
        let store = storeID.uuidString
        let version = "\(self.store.schema.version)"
        try connection.execute(
            """
            INSERT INTO entitystore_objects (zone, gid, entity, origin_store, origin_key)
            SELECT $1, g, e, CASE WHEN k IS NULL THEN NULL ELSE $5::uuid END, k
            FROM unnest($2::uuid[], $3::text[], $4::bigint[]) AS t(g, e, k)
            ON CONFLICT (zone, gid) DO NOTHING
            """,
            [
                zone, postgresArray(objects.map(\.globalID.uuidString)), postgresArray(objects.map(\.entity)),
                postgresArray(objects.map { $0.originKey.map { "\(Int64(bitPattern: $0))" } }), store,
            ])
        var logged = Set<UUID>()
        for onlyIfAlive in [false, true] {
            let deleted = objects.filter { $0.deleted && $0.onlyIfAlive == onlyIfAlive }.map(\.globalID.uuidString)
            guard !deleted.isEmpty else { continue }
            // A later delete moves the stamp on (it matters to `newestWins`); a cascade only deletes what lives.
            let changed = try connection.execute(
                """
                UPDATE entitystore_objects SET deleted_stamp = $3, deleted_by = $4
                WHERE zone = $1 AND gid = ANY($2::uuid[])
                    AND (deleted_stamp IS NULL OR (NOT $5::boolean AND deleted_stamp < $3))
                RETURNING gid::text
                """, [zone, postgresArray(deleted), "\(stamp)", store, onlyIfAlive ? "true" : "false"])
            for row in changed.rows { if let id = row[0].flatMap(UUID.init(uuidString:)) { logged.insert(id) } }
        }
        var gids: [String?] = []
        var keys: [String?] = []
        var texts: [String?] = []
        for object in objects where !object.deleted {
            for (key, text) in object.values.sorted(by: { $0.key < $1.key }) {
                gids.append(object.globalID.uuidString)
                keys.append(key)
                texts.append(text)
            }
        }
        var refused = Set<UUID>()
        if !gids.isEmpty {
            let accepted = try connection.execute(
                """
                INSERT INTO entitystore_properties AS p (zone, gid, key, value, stamp, store_id, schema_version)
                SELECT $1, g, k, v, $5, $6, $7 FROM unnest($2::uuid[], $3::text[], $4::text[]) AS t(g, k, v)
                ON CONFLICT (zone, gid, key) DO UPDATE SET value = EXCLUDED.value, stamp = EXCLUDED.stamp,
                    store_id = EXCLUDED.store_id, schema_version = EXCLUDED.schema_version
                WHERE (p.stamp, p.store_id) < (EXCLUDED.stamp, EXCLUDED.store_id)
                RETURNING gid::text, key
                """,
                [zone, postgresArray(gids), postgresArray(keys), postgresArray(texts), "\(stamp)", store, version])
            var acceptedPairs = Set<String>()
            for row in accepted.rows {
                guard let gid = row[0].flatMap(UUID.init(uuidString:)), let key = row[1] else { continue }
                logged.insert(gid)
                acceptedPairs.insert(gid.uuidString + "/" + key)
            }
            for (gid, key) in zip(gids, keys) where !acceptedPairs.contains(gid! + "/" + key!) {
                if let id = UUID(uuidString: gid!) { refused.insert(id) }
            }
        }
        let loggedObjects = objects.filter { logged.contains($0.globalID) }
        if !loggedObjects.isEmpty {
            try connection.execute(
                """
                INSERT INTO entitystore_log (zone, gid, entity, store_id, seq, schema_version)
                SELECT $1, g, e, $4, $5, $6 FROM unnest($2::uuid[], $3::text[]) AS t(g, e)
                """,
                [
                    zone, postgresArray(loggedObjects.map(\.globalID.uuidString)),
                    postgresArray(loggedObjects.map(\.entity)), store, seq.map { "\($0)" }, version,
                ])
        }
        return refused.sorted { $0.uuidString < $1.uuidString }
    }

    // MARK: - Pull

    private func pull(_ connection: PostgresConnection, _ report: inout SyncReport) throws {
        while true {
            let page = try connection.transaction(readOnly: true) { try readPage(connection) }
            report.pulledEntries += page.entries
            if !page.objects.isEmpty {
                try apply(page.objects, &report)
                report.pulledSaves += 1
                report.pulledObjects += page.objects.count
            }
            state.refetch.removeAll { page.objects[$0] != nil || page.gone.contains($0) }
            if let last = page.lastID { state.pulledThrough = last }
            state.clock = max(state.clock, page.largestStamp)
            state.lastPull = Date()
            try saveState()
            if let newer = page.newerSchema {
                throw SyncError(
                    .schemaTooNew,
                    "the server holds changes made with schema version \(newer); this store is at version "
                        + "\(store.schema.version): they wait on the server until the store migrates")
            }
            if !page.more { break }
        }
    }

    /// A page of the server's log and the state of the objects it names.
    struct Page {
        var entries = 0
        var lastID: Int64?
        var objects: [UUID: ServerObject] = [:]
        /// Global IDs asked for that the server does not have.
        var gone = Set<UUID>()
        var largestStamp: UInt64 = 0
        var newerSchema: Int?
        var more = false
    }

    private func readPage(_ connection: PostgresConnection) throws -> Page {
        var page = Page()
        let rows = try connection.execute(
            """
            SELECT id, gid::text, store_id::text, schema_version FROM entitystore_log
            WHERE zone = $1 AND id > $2 ORDER BY id LIMIT $3
            """, [configuration.zone, "\(state.pulledThrough)", "\(configuration.batchSize)"]
        ).rows
        page.more = rows.count == configuration.batchSize
        var wanted = Set(state.refetch)
        let me = storeID.uuidString.lowercased()
        for row in rows {
            guard let id = row[0].flatMap({ Int64($0) }), let gid = row[1].flatMap(UUID.init(uuidString:)),
                let version = row[3].flatMap({ Int($0) })
            else { throw SyncError(.server, "entitystore_log holds a row that is not a log entry: \(row)") }
            if version > store.schema.version {
                page.newerSchema = version
                page.more = false
                break
            }
            page.entries += 1
            page.lastID = id
            if row[2]?.lowercased() != me { wanted.insert(gid) }
        }
        // The objects, and the targets of their relationships this store does not have yet (so every
        // relationship can be set), until nothing is missing.
        var missing = wanted
        while !missing.isEmpty {
            let found = try ServerObject.read(missing, zone: configuration.zone, connection)
            for id in missing where found[id] == nil { page.gone.insert(id) }
            var targets = Set<UUID>()
            for (id, object) in found {
                page.objects[id] = object
                page.largestStamp = max(page.largestStamp, object.largestStamp)
                guard let entity = plan.entities[object.entity], !object.isDeleted(configuration.deletePolicy) else {
                    continue
                }
                for relationship in entity.relationships {
                    guard let property = object.properties[relationship.name],
                        property.version <= store.schema.version
                    else { continue }
                    for target in try SyncValue.targets(property.text) where page.objects[target] == nil {
                        targets.insert(target)
                    }
                }
            }
            missing = targets.subtracting(page.objects.keys).subtracting(page.gone)
        }
        return page
    }

    /// The local objects of these server objects, by global ID: this store's own by their key, the others' by the
    /// global ID attribute.
    private func localObjects(
        for objects: [UUID: ServerObject], in context: ObjectContext
    ) throws
        -> [UUID: ManagedObject]
    {
        var found: [UUID: ManagedObject] = [:]
        var byEntity: [String: [Value]] = [:]
        for (id, object) in objects {
            if object.originStore == storeID, let key = object.originKey {
                do {
                    found[id] = try context.existingObject(with: ObjectID(entityName: object.entity, primaryKey: key))
                } catch let error as EntityStoreError where error.code == .objectNotFound {
                    continue  // deleted here; the delete is pushed, or was
                }
            } else if plan.entities[object.entity] != nil {
                byEntity[object.entity, default: []].append(.uuid(id))
            }
        }
        for (entity, list) in byEntity {
            var request = FetchRequest(
                entity: entity,
                predicate: .comparison(.init(keyPath: [plan.globalIDKey], op: .in, operand: .list(list))))
            request.includesSubentities = false
            for object in try context.fetch(request) {
                if case .uuid(let id) = try object.value(forKey: plan.globalIDKey) { found[id] = object }
            }
        }
        return found
    }

    /// Saves the server's state of `objects` locally, in one save marked remote, leaving alone every property
    /// with a local change not pushed yet (it is pushed next, and the server decides).
    private func apply(_ objects: [UUID: ServerObject], _ report: inout SyncReport) throws {
        let pending = try unpushedChanges()
        let stamp = objects.values.reduce(state.clock) { max($0, $1.largestStamp) }
        let context = ObjectContext(store: store, name: "\(Self.remoteAuthorPrefix) stamp=\(stamp)")
        var local = try localObjects(for: objects, in: context)
        let version = store.schema.version
        var touched: [ManagedObject] = []
        // Deletes, then values, then relationships (whose targets may be objects made here).
        for (id, object) in objects where object.isDeleted(configuration.deletePolicy) {
            if let existing = local.removeValue(forKey: id) { try context.delete(existing) }
        }
        for (id, object) in objects where !object.isDeleted(configuration.deletePolicy) {
            guard let entity = plan.entities[object.entity] else {
                report.problems.append("\(object.entity) \(id.uuidString): this store's schema has no such entity")
                continue
            }
            var target = local[id]
            if target == nil {
                guard !pending.deleted.contains(id) else { continue }  // this store's delete is pushed next
                let made = try context.insert(entity.name)
                try made.setValue(.uuid(id), forKey: plan.globalIDKey)
                local[id] = made
                target = made
            }
            guard let target else { continue }
            touched.append(target)
            let kept = pending.keys[target.objectID] ?? []
            for attribute in entity.attributes {
                guard let property = object.properties[attribute.name], property.version <= version,
                    !kept.contains(attribute.name)
                else { continue }
                do {
                    try target.setValue(try SyncValue.value(property.text, as: attribute.type), forKey: attribute.name)
                } catch let error as SyncError {
                    report.problems.append("\(entity.name) \(id.uuidString).\(attribute.name): \(error.message)")
                }
            }
        }
        for (id, object) in objects where !object.isDeleted(configuration.deletePolicy) {
            guard let entity = plan.entities[object.entity], let source = local[id] else { continue }
            let kept = pending.keys[source.objectID] ?? []
            for relationship in entity.relationships {
                guard let property = object.properties[relationship.name], property.version <= version,
                    !kept.contains(relationship.name)
                else { continue }
                let targets = try SyncValue.targets(property.text).compactMap { local[$0] }
                if relationship.isToMany {
                    let wanted = Set(targets.map(\.objectID))
                    let current = try source.objects(forKey: relationship.name)
                    for old in current where !wanted.contains(old.objectID) {
                        try source.remove(old, fromKey: relationship.name)
                    }
                    let have = Set(current.map(\.objectID))
                    for new in targets where !have.contains(new.objectID) {
                        try source.add(new, toKey: relationship.name)
                    }
                } else {
                    try source.setObject(targets.first, forKey: relationship.name)
                }
            }
        }
        try resolveUniqueness(touched, context, &report)
        guard context.hasChanges else { return }
        do {
            try context.save()
        } catch let error as EntityStoreError {
            throw SyncError(.store, "applying pulled changes: \(error.description)")
        }
    }

    /// Local changes not pushed yet: the keys changed per object, and the global IDs of objects deleted.
    private func unpushedChanges() throws -> (keys: [ObjectID: Set<String>], deleted: Set<UUID>) {
        var keys: [ObjectID: Set<String>] = [:]
        var deleted = Set<UUID>()
        var skippable = true
        for entry in try store.history(since: state.pushedThrough) {
            if let stamp = Self.remoteStamp(of: entry) {
                // Pulled saves with nothing to push (no cascaded deletes) need not be read again: the cursor passes
                // them (a pull of many pages would otherwise read its own earlier pages' saves page after page).
                if skippable, remoteDeletes(entry).isEmpty, let number = entry.transaction {
                    state.pushedThrough = number
                    state.clock = max(state.clock, stamp)
                } else {
                    skippable = false
                }
                continue
            }
            skippable = false
            for change in entry.changes where plan.entities[change.objectID.entityName] != nil {
                switch change.kind {
                case .delete:
                    if case .uuid(let id)? = change.oldValues[plan.globalIDKey] {
                        deleted.insert(id)
                    } else {
                        deleted.insert(derivedGlobalID(change.objectID))
                    }
                case .insert, .update:
                    keys[change.objectID, default: []].formUnion(change.changedKeys)
                }
            }
        }
        return (keys, deleted)
    }

    /// Finds objects of this pull that share a unique value with another object, and deletes the one with the
    /// larger global ID (every store decides the same); the delete is pushed by the next sync.
    private func resolveUniqueness(
        _ touched: [ManagedObject], _ context: ObjectContext, _ report: inout SyncReport
    )
        throws
    {
        var removed = Set<ObjectID>()
        var tombstones: [SyncState.PendingTombstone] = []
        for object in touched where !object.isDeleted && !removed.contains(object.objectID) {
            guard let entity = plan.entities[object.entity.name] else { continue }
            for attribute in entity.uniqueAttributes {
                let value = try object.value(forKey: attribute.name)
                guard !value.isNull, !removed.contains(object.objectID) else { continue }
                let request = FetchRequest(
                    entity: plan.uniquenessScope(of: attribute.name, in: entity.name),
                    predicate: .comparison(
                        .init(
                            keyPath: [attribute.name], op: .equal, operand: .value(value),
                            options: attribute.isCaseInsensitive ? .caseDiacriticInsensitive : [])))
                for other in try context.fetch(request)
                where other.objectID != object.objectID && !removed.contains(other.objectID) {
                    let mine = try globalID(of: object)
                    let theirs = try globalID(of: other)
                    let (winner, loser, loserObject) =
                        mine.uuidString < theirs.uuidString ? (mine, theirs, other) : (theirs, mine, object)
                    report.conflicts.append(
                        UniquenessConflict(
                            entity: entity.name, key: attribute.name, value: value, kept: winner, removed: loser))
                    tombstones.append(
                        .init(
                            entity: loserObject.entity.name, globalID: loser,
                            stamp: HybridLogicalClock.stamp(after: state.clock, at: Date())))
                    removed.insert(loserObject.objectID)
                    try context.delete(loserObject)
                }
            }
        }
        guard !tombstones.isEmpty else { return }
        // Kept before the save: a kill after the save cannot lose the deletes the other stores must hear of.
        state.pendingTombstones += tombstones
        try saveState()
    }
}

/// A pipe that wakes the background loop (a local save, ``SyncEngine/stop()``), polled beside the server's socket.
final class WakePipe: @unchecked Sendable {
    let readDescriptor: Int32
    private let writeDescriptor: Int32

    init() throws {
        var descriptors: [Int32] = [-1, -1]
        guard pipe(&descriptors) == 0 else {
            throw SyncError(.state, "cannot make the background loop's pipe: \(String(cString: strerror(errno)))")
        }
        for descriptor in descriptors {
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
            _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        }
        readDescriptor = descriptors[0]
        writeDescriptor = descriptors[1]
    }

    deinit {
        close(readDescriptor)
        close(writeDescriptor)
    }

    /// Wakes the waiter (a full pipe already wakes it).
    func signal() {
        var byte: UInt8 = 1
        _ = write(writeDescriptor, &byte, 1)
    }

    /// Empties the pipe: whether anything was signalled.
    func drain() -> Bool {
        var buffer = [UInt8](repeating: 0, count: 64)
        var any = false
        while read(readDescriptor, &buffer, buffer.count) > 0 { any = true }
        return any
    }

    /// Waits up to `timeout` seconds for a signal.
    func wait(timeout: Double) {
        var descriptor = pollfd(fd: readDescriptor, events: Int16(POLLIN), revents: 0)
        _ = poll(&descriptor, 1, Int32(min(Double(Int32.max), timeout * 1000)))
    }
}

/// The background loop's state.
final class RunFlag: @unchecked Sendable {
    /// The running loop's pipe.
    private(set) var wake: WakePipe?
    private let condition = NSCondition()
    private var running = false
    private var active = false

    var isRunning: Bool { condition.withLock { running } }

    /// Marks the loop started, with its pipe; false when one runs already.
    func begin(_ pipe: WakePipe) -> Bool {
        condition.withLock {
            guard !running && !active else { return false }
            running = true
            active = true
            wake = pipe
            return true
        }
    }

    func finished() {
        condition.withLock {
            active = false
            condition.broadcast()
        }
    }

    func stop() {
        condition.withLock { running = false }
        condition.withLock { wake }?.signal()
        condition.withLock { while active { condition.wait() } }
    }
}
