import EntityStore
import Foundation

/// Push: the history entries not pushed yet, as idempotent server transactions.
extension SyncEngine {
    func push(_ connection: PostgresConnection, _ report: inout SyncReport) throws {
        try pushSaves(connection, &report)
        // Then the merges of uniqueness clashes (the winners and what moved to them), then the losers' removals:
        // after this store's own saves, so that every object a merge links to is on the server before the link is
        // (a store pulling a link to an object the server lacks drops it, and nothing would bring it back).
        try pushMerges(connection, &report)
        try pushTombstones(connection, &report)
    }

    /// Pushes the history entries past the cursor, a batch per server transaction.
    func pushSaves(_ connection: PostgresConnection, _ report: inout SyncReport) throws {
        try agreeWithServer(connection)
        var limit = try Self.storeRead { try store.lastTransaction() }
        // A new replica's own objects, inserted since it became one, get global IDs of their own before they are
        // pushed (and an insert deleted since goes nowhere: no other copy must lose an object of its key).
        var ownInserts = Set<ObjectID>()
        if let own = state.ownObjectsFrom, limit >= max(own, state.pushedThrough + 1) {
            ownInserts = try giveOwnGlobalIDs(from: max(own, state.pushedThrough + 1), through: limit)
            limit = try Self.storeRead { try store.lastTransaction() }
        }
        while state.pushedThrough < limit {
            let entries = try Self.storeRead {
                try store.history(since: state.pushedThrough, limit: configuration.batchSize)
            }
            .filter { ($0.transaction ?? .max) <= limit }
            guard let first = entries.first, let last = entries.last?.transaction else { break }
            if let number = first.transaction, number > state.pushedThrough + 1 {
                report.problems.append(
                    "history entries \(state.pushedThrough + 1)-\(number - 1) were pruned before they were pushed: "
                        + "their changes reach other stores only when later saves change the same properties")
            }
            var stamper = Stamper(state)
            var batch: [(seq: UInt64, stamp: UInt64, objects: [PushedObject])] = []
            let reader = ObjectContext(store: store)
            for entry in entries {
                let stamp = stamper.stamp(entry)
                if Self.isRemote(entry) {
                    // A pulled delete can cascade to objects the other stores still have (this store had put
                    // them in the deleted object): those deletes are this store's to tell.
                    let deletes = remoteDeletes(entry)
                    if !deletes.isEmpty { batch.append((entry.transaction ?? 0, stamp, deletes)) }
                    continue
                }
                let objects = try Self.storeRead { try pushedObjects(entry, reader, ownInserts, &report) }
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
                        // Pushed before by this replica, while this sync ran (another engine of the store cannot
                        // run: see `SyncLock`), with the stamp recomputed from the same history.
                        let earlier = try connection.execute(
                            "SELECT stamp FROM entitystore_pushes WHERE zone = $1 AND store_id = $2 AND seq = $3",
                            [configuration.zone, storeID.uuidString, "\(seq)"])
                        guard earlier.rows.first?.first == .some("\(stamp)") else {
                            throw SyncError(
                                .state,
                                "the server holds another entry \(seq) of replica \(storeID.uuidString), pushed "
                                    + "while this sync ran: another copy of this store's directory syncs as the same "
                                    + "replica; sync again (this store then becomes a new replica)")
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
            stamper.write(to: &state)
            state.lastPush = Date()
            try saveState()
            progress?(report)
        }
    }

    /// Pushes the removals of the losers of uniqueness clashes merged in pulls.
    func pushTombstones(_ connection: PostgresConnection, _ report: inout SyncReport) throws {
        if !state.pendingTombstones.isEmpty {
            let tombstones = state.pendingTombstones
            try connection.transaction {
                try ServerSchema.lockZone(connection, configuration.zone)
                for tombstone in tombstones {
                    let pushed = PushedObject(
                        entity: tombstone.entity, globalID: tombstone.globalID, originKey: tombstone.originKey,
                        deleted: true, onlyIfAlive: false, values: [:])
                    _ = try send([pushed], seq: nil, stamp: tombstone.stamp, connection)
                }
            }
            report.pushedChanges += tombstones.count
            state.pendingTombstones = []
            try saveState()
        }
    }

    /// Pushes what merges of uniqueness clashes changed (in pulls, which are not pushed), from the objects' current
    /// values, each with its merge's stamp.
    func pushMerges(_ connection: PostgresConnection, _ report: inout SyncReport) throws {
        guard !state.pendingMerges.isEmpty else { return }
        let reader = ObjectContext(store: store)
        var pushes: [(stamp: UInt64, object: PushedObject)] = []
        try Self.storeRead {
            for merge in state.pendingMerges {
                guard let entity = plan.entities[merge.entity] else { continue }
                let object: ManagedObject
                do {
                    object = try reader.existingObject(
                        with: ObjectID(entityName: merge.entity, primaryKey: merge.primaryKey))
                } catch let error as EntityStoreError where error.code == .objectNotFound {
                    continue  // deleted since: its delete is pushed
                }
                let values = try syncedValues(of: object, keys: Set(merge.keys), in: entity, reader)
                guard !values.isEmpty else { continue }
                let given = try object.value(forKey: plan.globalIDKey)
                pushes.append(
                    (
                        merge.stamp,
                        PushedObject(
                            entity: entity.name, globalID: try globalID(of: object),
                            originKey: given.isNull ? object.objectID.primaryKey : nil, deleted: false,
                            onlyIfAlive: false, values: values)
                    ))
            }
        }
        var refused: [UUID] = []
        var sent = 0
        try connection.transaction {
            refused = []
            sent = 0
            try ServerSchema.lockZone(connection, configuration.zone)
            // An object the server does not know (its insert not pushed yet, which `pushSaves` runs first for)
            // goes with its insert, which carries its current values, the merge's among them. Sent alone, the
            // merge's keys would make an object of those keys only on the server, which other stores would copy in
            // without its other (required) values.
            let known = Set(
                try connection.execute(
                    "SELECT gid::text FROM entitystore_objects WHERE zone = $1 AND gid = ANY($2::uuid[])",
                    [configuration.zone, postgresArray(pushes.map(\.object.globalID.uuidString))]
                ).rows.compactMap { $0[0].flatMap(UUID.init(uuidString:)) })
            for (stamp, object) in pushes where known.contains(object.globalID) {
                refused += try send([object], seq: nil, stamp: stamp, connection)
                sent += object.values.count
            }
            try connection.execute("SELECT pg_notify($1, $2)", [ServerSchema.channel, configuration.zone])
        }
        report.pushedChanges += sent
        state.refetch = Array(Set(state.refetch + refused)).sorted { $0.uuidString < $1.uuidString }
        state.pendingMerges = []
        try saveState()
    }

    /// Stamps history entries in their order, from the clock as of the push cursor: a pulled entry raises the clock
    /// to its stamp, a local one is stamped after the clock at its save's time (``HybridLogicalClock``), after
    /// every pull that ended before it (``SyncState/pullMarks``). A change's stamp depends only on what the store
    /// had seen when it was saved, never on when it is pushed.
    struct Stamper {
        var clock: UInt64
        var marks: [SyncState.PullMark]

        init(_ state: SyncState) {
            clock = state.clock
            marks = state.pullMarks
        }

        mutating func stamp(_ entry: ChangeRecord) -> UInt64 {
            if let remote = SyncEngine.remoteStamp(of: entry) {
                clock = max(clock, remote)
                return remote
            }
            while let mark = marks.first, mark.date < entry.date {
                clock = max(clock, mark.stamp)
                marks.removeFirst()
            }
            clock = HybridLogicalClock.stamp(after: clock, at: entry.date)
            return clock
        }

        func write(to state: inout SyncState) {
            state.clock = clock
            state.pullMarks = marks
        }
    }

    /// Checks the server's record of this replica's pushes past the cursor before pushing.
    ///
    /// Entries of this history that the server holds with the stamps this store gives them were pushed by a sync
    /// whose cursor was not written (a kill after PostgreSQL committed): the cursor moves past them. An entry the
    /// server holds with another stamp, a local entry it lacks below one it holds, or an entry past this history's
    /// end, means the server heard another history under this replica's ID: this store was restored from a backup
    /// older than its last push (in place: a copy is caught by its data file). It becomes a new replica from the
    /// first entry that differs. A state made new for a store the server knows (the state of an earlier version
    /// lost with its file) takes the entries saved after the replica's last push as unpushed.
    func agreeWithServer(_ connection: PostgresConnection) throws {
        if let first = suspectsFrom, first <= state.pushedThrough {
            // An entry numbered as one the server took before it was saved is not that entry: the store was restored
            // and saved again.
            let taken = try connection.execute(
                """
                SELECT seq, extract(epoch FROM pushed_at)::text FROM entitystore_pushes
                WHERE zone = $1 AND store_id = $2 AND seq BETWEEN $3 AND $4
                """, [configuration.zone, storeID.uuidString, "\(first)", "\(state.pushedThrough)"]
            ).rows
            var pushedAt: [UInt64: Date] = [:]
            for row in taken {
                guard let seq = row[0].flatMap({ UInt64($0) }), let seconds = row[1].flatMap({ Double($0) }) else {
                    continue
                }
                pushedAt[seq] = Date(timeIntervalSince1970: seconds)
            }
            let entries = try Self.storeRead { try store.history(since: first - 1) }
            let restored = entries.first { entry in
                guard let number = entry.transaction, number <= state.pushedThrough, !Self.isRemote(entry) else {
                    return false
                }
                return pushedAt[number].map { entry.date > $0 } ?? true
            }
            suspectsFrom = nil
            if let restored, let number = restored.transaction {
                try becomeNewReplica(from: number, clock: nil)
                state.pulledThrough = 0
                try saveState()
            }
        }
        let rows = try connection.execute(
            """
            SELECT seq, stamp FROM entitystore_pushes WHERE zone = $1 AND store_id = $2 AND seq > $3 ORDER BY seq
            """, [configuration.zone, storeID.uuidString, "\(state.pushedThrough)"]
        ).rows
        guard !rows.isEmpty else { return }
        var held: [UInt64: UInt64] = [:]
        for row in rows {
            guard let seq = row[0].flatMap({ UInt64($0) }), let stamp = row[1].flatMap({ UInt64($0) }) else {
                throw SyncError(.server, "entitystore_pushes holds a row that is not a push: \(row)")
            }
            held[seq] = stamp
        }
        let highest = held.keys.max() ?? 0
        let entries = try Self.storeRead { try store.history(since: state.pushedThrough) }
        if !stateWasFound && state.pushedThrough == 0 && state.ownObjectsFrom == nil {
            let lastPush = try connection.execute(
                "SELECT extract(epoch FROM last_push)::text FROM entitystore_stores WHERE zone = $1 AND store_id = $2",
                [configuration.zone, storeID.uuidString]
            ).rows.first?.first.flatMap { $0.flatMap { Double($0) } }.map { Date(timeIntervalSince1970: $0) }
            let mine = entries.first { !Self.isRemote($0) && $0.date > (lastPush ?? .distantPast) }
            let first = mine?.transaction ?? ((entries.last?.transaction ?? 0) + 1)
            if first <= highest {
                try becomeNewReplica(from: first, clock: nil)
            } else {
                try moveCursor(before: first, clock: nil)
            }
            try saveState()
            return
        }
        var stamper = Stamper(state)
        var agreed = (through: state.pushedThrough, stamper: stamper)
        var differs: UInt64?
        for entry in entries {
            guard let number = entry.transaction, number <= highest else { break }
            let stamp = stamper.stamp(entry)
            if let server = held[number] {
                guard server == stamp else {
                    differs = number
                    break
                }
            } else if !Self.isRemote(entry) {
                // A local entry the server lacks, below one it holds.
                differs = number
                break
            }
            agreed = (number, stamper)
        }
        if differs == nil && agreed.through < highest { differs = agreed.through + 1 }
        state.pushedThrough = agreed.through
        agreed.stamper.write(to: &state)
        if let differs { try becomeNewReplica(from: differs, clock: state.clock) }
        try saveState()
    }

    /// Gives the objects inserted locally in entries `first...limit` that have no global ID attribute one of their
    /// own, in one save, and returns every object those entries inserted.
    func giveOwnGlobalIDs(from first: UInt64, through limit: UInt64) throws -> Set<ObjectID> {
        var inserted = Set<ObjectID>()
        for entry in try Self.storeRead({ try store.history(since: first - 1) }) {
            guard let number = entry.transaction, number <= limit else { break }
            guard !Self.isRemote(entry) else { continue }
            for change in entry.changes where change.kind == .insert && plan.entities[change.objectID.entityName] != nil
            {
                inserted.insert(change.objectID)
            }
        }
        let context = ObjectContext(store: store, name: Self.identityAuthor)
        do {
            for id in inserted.sorted() {
                let object: ManagedObject
                do {
                    object = try context.existingObject(with: id)
                } catch let error as EntityStoreError where error.code == .objectNotFound {
                    continue  // deleted since: its delete goes nowhere (see `pushedObjects`)
                }
                if try object.value(forKey: plan.globalIDKey).isNull {
                    try object.setValue(.uuid(UUID()), forKey: plan.globalIDKey)
                }
            }
            try context.save()
        } catch let error as EntityStoreError {
            throw SyncError(.store, "giving this replica's new objects global IDs of their own: \(error.description)")
        }
        return inserted
    }

    /// The deletes of a pulled save, as tombstones that change only objects the server still has.
    func remoteDeletes(_ entry: ChangeRecord) -> [PushedObject] {
        entry.changes.compactMap { change in
            guard change.kind == .delete, let entity = plan.entities[change.objectID.entityName] else { return nil }
            let id = globalID(ofDeleted: change)
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
    func pushedObjects(
        _ entry: ChangeRecord, _ reader: ObjectContext, _ ownInserts: Set<ObjectID>, _ report: inout SyncReport
    ) throws
        -> [PushedObject]
    {
        var objects: [PushedObject] = []
        for change in entry.changes {
            guard let entity = plan.entities[change.objectID.entityName] else { continue }
            if change.kind == .delete {
                // An object this new replica made and deleted before it had a global ID of its own: its derived
                // one may be another copy's object of the same key.
                if ownInserts.contains(change.objectID), change.oldValues[plan.globalIDKey]?.isNull ?? true {
                    continue
                }
                let id = globalID(ofDeleted: change)
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
            let keys = change.kind == .insert ? entity.keys : Set(change.changedKeys)
            let values = try syncedValues(of: object, keys: keys, in: entity, reader)
            guard change.kind == .insert || !values.isEmpty else { continue }
            objects.append(
                PushedObject(
                    entity: entity.name, globalID: id, originKey: given.isNull ? change.objectID.primaryKey : nil,
                    deleted: false, onlyIfAlive: false, values: values))
        }
        return objects
    }

    /// An object's current values of the synced keys among `keys`, as pushed (relationships as `r:` texts).
    func syncedValues(
        of object: ManagedObject, keys: Set<String>, in entity: SyncPlan.SyncedEntity, _ reader: ObjectContext
    ) throws -> [String: String?] {
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
        return values
    }

    /// SQL true for an object `o` of `entitystore_objects` deleted once that lives again under `newestWins`: a property
    /// as new as its delete (``ServerObject/isDeleted(_:)`` on the server).
    static let livesAgain = """
        EXISTS (SELECT 1 FROM entitystore_properties p
            WHERE p.zone = o.zone AND p.gid = o.gid AND p.stamp >= o.deleted_stamp)
        """

    /// Writes objects' changes stamped `stamp`, logs them for the other stores, and gives the objects whose values
    /// the server refused (it holds newer ones).
    func send(
        _ objects: [PushedObject], seq: UInt64?, stamp: UInt64, _ connection: PostgresConnection
    ) throws
        -> [UUID]
    {
        let zone = configuration.zone
        let store = storeID.uuidString
        let version = "\(self.store.schema.version)"
        // An object's origin is the store whose key its global ID derives from (the store's own ID, whatever
        // replica it is now).
        try connection.execute(
            """
            INSERT INTO entitystore_objects (zone, gid, entity, origin_store, origin_key)
            SELECT $1, g, e, CASE WHEN k IS NULL THEN NULL ELSE $5::uuid END, k
            FROM unnest($2::uuid[], $3::text[], $4::bigint[]) AS t(g, e, k)
            ON CONFLICT (zone, gid) DO NOTHING
            """,
            [
                zone, postgresArray(objects.map(\.globalID.uuidString)), postgresArray(objects.map(\.entity)),
                postgresArray(objects.map { $0.originKey.map { "\(Int64(bitPattern: $0))" } }),
                state.originID.uuidString,
            ])
        var logged = Set<UUID>()
        var refused = Set<UUID>()
        let newestWins = configuration.deletePolicy == .newestWins
        for onlyIfAlive in [false, true] {
            let deleted = objects.filter { $0.deleted && $0.onlyIfAlive == onlyIfAlive }.map(\.globalID.uuidString)
            guard !deleted.isEmpty else { continue }
            // A later delete moves the stamp on (it matters to `newestWins`); a cascade only deletes what lives,
            // and under `newestWins` an object deleted before lives while a property is as new as its delete.
            let changed = try connection.execute(
                """
                UPDATE entitystore_objects AS o SET deleted_stamp = $3, deleted_by = $4
                WHERE o.zone = $1 AND o.gid = ANY($2::uuid[])
                    AND (o.deleted_stamp IS NULL
                        OR (o.deleted_stamp < $3 AND (NOT $5::boolean OR ($6::boolean AND \(Self.livesAgain)))))
                RETURNING gid::text
                """,
                [
                    zone, postgresArray(deleted), "\(stamp)", store, onlyIfAlive ? "true" : "false",
                    newestWins ? "true" : "false",
                ])
            for row in changed.rows { if let id = row[0].flatMap(UUID.init(uuidString:)) { logged.insert(id) } }
            guard newestWins else { continue }
            // A delete (or a cascade) older than a property the server holds leaves the object alive: this store
            // deleted it, so it reads the object again (and makes it again) on its next pull. (A change pulled
            // while the delete waited to be pushed was left to the delete, and the log never names it again.)
            let alive = try connection.execute(
                """
                SELECT o.gid::text FROM entitystore_objects o
                WHERE o.zone = $1 AND o.gid = ANY($2::uuid[]) AND o.deleted_stamp IS NOT NULL AND \(Self.livesAgain)
                """, [zone, postgresArray(deleted)])
            for row in alive.rows { if let id = row[0].flatMap(UUID.init(uuidString:)) { refused.insert(id) } }
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
}
