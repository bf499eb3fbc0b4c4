import EntityStore
import Foundation

/// Pull: the other stores' changes since the cursor, saved locally one page at a time.
extension SyncEngine {
    func pull(_ connection: PostgresConnection, _ report: inout SyncReport) throws {
        while true {
            let page = try connection.transaction(readOnly: true) { try readPage(connection) }
            report.pulledEntries += page.entries
            // The state once the page is applied: committed with the page's save, in its transaction.
            var next = state
            next.refetch.removeAll { page.objects[$0] != nil || page.gone.contains($0) }
            if let last = page.lastID { next.pulledThrough = last }
            next.lastPull = Date()
            var saved = false
            if !page.objects.isEmpty {
                saved = try apply(page.objects, page.largestStamp, &next, &report, connection)
                report.pulledObjects += page.objects.count
            }
            if saved {
                report.pulledSaves += 1
                state = next
                published.withLock { $0 = state }
            } else {
                // Nothing saved here: a change saved after this pull is still stamped after what it brought.
                if page.largestStamp > 0 {
                    next.pullMarks.append(SyncState.PullMark(date: Date(), stamp: page.largestStamp))
                }
                state = next
                try saveState()
            }
            progress?(report)
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

    func readPage(_ connection: PostgresConnection) throws -> Page {
        var page = Page()
        let rows = try connection.execute(
            """
            SELECT id, gid::text, store_id::text, schema_version, seq IS NULL FROM entitystore_log
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
            // This store's own entries are its changes, but for the deletes it decided for uniqueness: those it
            // pushed before its own save of them, which an error or a kill may have kept from happening.
            if row[2]?.lowercased() != me || row[4] == "t" { wanted.insert(gid) }
        }
        // The objects, and the targets of their synced relationships (whose state is applied too, so every
        // relationship can be set even to an object this store never had), until nothing is missing.
        var missing = wanted
        var revivedAsked = Set<UUID>()
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
            if missing.isEmpty {
                missing = try linksToRevived(&revivedAsked, page, connection)
            }
        }
        return page
    }

    /// The objects whose synced relationships hold an object of the page that was deleted once and lives again
    /// (under `newestWins`, a change newer than its delete): a store that deleted it dropped those links, and
    /// makes it again from this page, so the page carries their state too. Each revived object is asked for once.
    func linksToRevived(
        _ asked: inout Set<UUID>, _ page: Page, _ connection: PostgresConnection
    ) throws -> Set<UUID> {
        let revived = page.objects.filter { id, object in
            object.deletedStamp != nil && !object.isDeleted(configuration.deletePolicy) && !asked.contains(id)
        }.keys
        guard !revived.isEmpty else { return [] }
        asked.formUnion(revived)
        let rows = try connection.execute(
            """
            SELECT DISTINCT p.gid::text FROM entitystore_properties p
            WHERE p.zone = $1 AND p.value LIKE 'r:%'
                AND EXISTS (SELECT 1 FROM unnest($2::text[]) AS t(g) WHERE strpos(p.value, t.g) > 0)
            """, [configuration.zone, postgresArray(revived.map(\.uuidString))]
        ).rows
        return Set(rows.compactMap { $0[0].flatMap(UUID.init(uuidString:)) }).subtracting(page.objects.keys)
            .subtracting(page.gone)
    }

    /// The local objects of these server objects, by global ID: this store's own by their key, the others' (and a
    /// copy of one of its own, made again after a delete here) by the global ID attribute.
    func localObjects(
        for objects: [UUID: ServerObject], in context: ObjectContext
    ) throws
        -> [UUID: ManagedObject]
    {
        var found: [UUID: ManagedObject] = [:]
        var byEntity: [String: [Value]] = [:]
        for (id, object) in objects {
            if object.originStore == state.originID, let key = object.originKey {
                do {
                    let mine = try context.existingObject(with: ObjectID(entityName: object.entity, primaryKey: key))
                    // Unless this store, a new replica, gave the object of that key a global ID of its own: then
                    // the server's object is another copy's, found (when this store has it) by its ID attribute.
                    if try globalID(of: mine) == id {
                        found[id] = mine
                        continue
                    }
                } catch let error as EntityStoreError where error.code == .objectNotFound {
                    // Deleted here; its delete is pushed, or waits to be. A copy made again has the ID attribute.
                }
            }
            if plan.entities[object.entity] != nil {
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
    /// with a local change not pushed yet (it is pushed next, and the server decides), with the sync state `next`
    /// in the same transaction; whether anything was saved (else `next` is left for the caller to write).
    ///
    /// A local save in between (the app saving while a background sync applies) is a conflict: the objects are
    /// read again, with that save's changes among those left alone, a few times before the error reaches the app.
    func apply(
        _ objects: [UUID: ServerObject], _ largestStamp: UInt64, _ next: inout SyncState, _ report: inout SyncReport,
        _ connection: PostgresConnection
    ) throws -> Bool {
        var attempt = 0
        while true {
            attempt += 1
            var attempted = report
            var state = next
            do {
                let saved = try applyOnce(objects, largestStamp, &state, &attempted, connection)
                report = attempted
                next = state
                return saved
            } catch let error as EntityStoreError
                where (error.code == .conflict || error.code == .validationFailed) && attempt < Self.applyAttempts
            {
                // The app is saving: give it a moment, longer each time.
                Thread.sleep(forTimeInterval: 0.002 * Double(attempt))
                continue
            } catch let error as EntityStoreError {
                throw SyncError(.store, "applying pulled changes: \(error.description)")
            }
        }
    }

    /// How many times a pulled page is applied when local saves keep changing its objects in between.
    static let applyAttempts = 8

    func applyOnce(
        _ objects: [UUID: ServerObject], _ largestStamp: UInt64, _ next: inout SyncState, _ report: inout SyncReport,
        _ connection: PostgresConnection
    ) throws -> Bool {
        let stamp = max(next.clock, largestStamp)
        let context = ObjectContext(store: store, name: "\(Self.remoteAuthorPrefix) stamp=\(stamp)")
        var local = try localObjects(for: objects, in: context)
        // Read after the objects: an object not found was deleted before, so its delete is among these (a local
        // save in between is a conflict at the save instead). Read before them, a delete in between made the page
        // copy the object in again.
        let pending = try unpushedChanges(&next)
        let version = store.schema.version
        var touched: [ManagedObject] = []
        // Deletes, then values, then relationships (whose targets may be objects made here). An object with a
        // unique value is deleted last: when it lost a uniqueness clash elsewhere, it is merged into the winner
        // here too, so that what this store linked to it since moves to the winner instead of going with it.
        var doomed: [ManagedObject] = []
        for (id, object) in objects where object.isDeleted(configuration.deletePolicy) {
            guard let existing = local.removeValue(forKey: id) else { continue }
            if plan.entities[existing.entity.name]?.uniqueAttributes.isEmpty == false {
                doomed.append(existing)
            } else {
                try context.delete(existing)
            }
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
                    // A relationship that is its own inverse syncs on both sides, which concurrent edits can leave
                    // disagreeing: each link follows the side with the smaller global ID, on every store alike (its
                    // other side, when it is in the page, decides it; otherwise the link stays as it is).
                    let symmetric = plan.isSymmetric(relationship)
                    func decides(_ other: ManagedObject) throws -> Bool {
                        try !symmetric || id.uuidString <= globalID(of: other).uuidString
                    }
                    let wanted = Set(targets.map(\.objectID))
                    let current = try source.objects(forKey: relationship.name)
                    for old in current where try !wanted.contains(old.objectID) && decides(old) {
                        try source.remove(old, fromKey: relationship.name)
                    }
                    let have = Set(current.map(\.objectID))
                    for new in targets where try !have.contains(new.objectID) && decides(new) {
                        try source.add(new, toKey: relationship.name)
                    }
                } else if plan.isSymmetric(relationship) {
                    let partner = try mutualPartner(
                        of: id, claiming: SyncValue.targets(property.text).first, relationship, objects, local, pending)
                    if try source.object(forKey: relationship.name)?.objectID != partner?.objectID {
                        try source.setObject(partner, forKey: relationship.name)
                    }
                } else {
                    try source.setObject(targets.first, forKey: relationship.name)
                }
            }
        }
        let (merges, tombstones) = try mergeClashes(
            touched + doomed, context, doomed: Set(doomed.map(\.objectID)),
            server: { ids in
                var found = objects.filter { ids.contains($0.key) }
                let missing = ids.subtracting(found.keys)
                if !missing.isEmpty {
                    for (id, object) in try ServerObject.read(missing, zone: configuration.zone, connection) {
                        found[id] = object
                    }
                }
                return found
            }, pending: pending.keys, seen: stamp, &report)
        for object in doomed where !object.isDeleted { try context.delete(object) }
        guard context.hasChanges else { return false }
        // What other stores must hear of (the merges' changes and removals), and the cursor past the page, commit
        // with the page's save.
        var updated = next
        updated.pendingTombstones += tombstones
        updated.pendingMerges += merges
        try context.save(settingMetadata: [SyncState.metadataKey: try updated.encoded()])
        next = updated
        return true
    }

    /// Whom an object holds through a to-one relationship that is its own inverse (`spouse` ↔ `spouse`).
    ///
    /// Both sides sync, each as its own property, so concurrent edits can leave the server's sides disagreeing (A
    /// says B while B says C). Applied one after the other, each store's result would depend on the order it met
    /// them in. Instead a link stands where two sides name each other, on every store alike: the object holds the
    /// one its side names when that one's side (in the page, which holds every target) names it back, and nobody
    /// otherwise. A partner with a local change of the relationship not pushed yet is not taken: the push names its
    /// side anew, stamped after everything this store has seen.
    func mutualPartner(
        of id: UUID, claiming claimed: UUID?, _ relationship: Relationship, _ objects: [UUID: ServerObject],
        _ local: [UUID: ManagedObject], _ pending: (keys: [ObjectID: Set<String>], deleted: Set<UUID>)
    ) throws -> ManagedObject? {
        guard let claimed, let other = objects[claimed], !other.isDeleted(configuration.deletePolicy),
            let side = other.properties[relationship.name], side.version <= store.schema.version,
            try SyncValue.targets(side.text).first == id, let partner = local[claimed],
            !(pending.keys[partner.objectID]?.contains(relationship.name) ?? false)
        else { return nil }
        return partner
    }

    /// Local changes not pushed yet: the keys changed per object, and the global IDs of objects deleted.
    func unpushedChanges(_ state: inout SyncState) throws -> (keys: [ObjectID: Set<String>], deleted: Set<UUID>) {
        var keys: [ObjectID: Set<String>] = [:]
        var deleted = Set<UUID>()
        var skippable = true
        for entry in try store.history(since: state.pushedThrough) {
            if let stamp = Self.remoteStamp(of: entry) {
                // Pulled saves with nothing to push (no cascaded deletes) need not be read again: the cursor passes
                // them (a pull of many pages would otherwise read its own earlier pages' saves page after page).
                // Its cascaded deletes wait to be pushed like this store's own: an earlier page's delete must not
                // be undone by a later page that still holds the object.
                let cascaded = remoteDeletes(entry)
                if skippable, cascaded.isEmpty, let number = entry.transaction {
                    state.pushedThrough = number
                    state.clock = max(state.clock, stamp)
                } else {
                    skippable = false
                    deleted.formUnion(cascaded.map(\.globalID))
                }
                continue
            }
            skippable = false
            for change in entry.changes where plan.entities[change.objectID.entityName] != nil {
                switch change.kind {
                case .delete:
                    deleted.insert(globalID(ofDeleted: change))
                case .insert, .update:
                    keys[change.objectID, default: []].formUnion(change.changedKeys)
                }
            }
        }
        return (keys, deleted)
    }
}
