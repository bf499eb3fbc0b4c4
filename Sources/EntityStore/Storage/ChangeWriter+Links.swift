import LMDB

/// A save's relationship writes: each object's changed links in both directions, and the links between two objects
/// the save inserts, kept and written sorted once every record is (see ``ChangeWriter/writeNewLinks()``).
extension ChangeWriter {
    /// Keeps a direction of a link between two new objects for ``writeNewLinks()``.
    private mutating func addNewLink(_ source: UInt64, _ target: UInt64, _ database: Database) {
        if lastNewLinks >= newLinks.count || newLinks[lastNewLinks].database.number != database.number {
            if let place = newLinks.firstIndex(where: { $0.database.number == database.number }) {
                lastNewLinks = place
            } else {
                newLinks.append((database, []))
                lastNewLinks = newLinks.count - 1
            }
        }
        newLinks[lastNewLinks].pairs.append(UInt128(source) << 64 | UInt128(target))
    }

    /// Writes the links between new objects that ``writeRelationships(of:_:)`` kept (it must be called after the
    /// last object is written and before anything reads the relationships in this transaction): each database's
    /// sorted, through one cursor. A key above every stored one is appended without a search, and the further
    /// targets of a key follow it without a search of its values.
    mutating func writeNewLinks() throws {
        for (database, unsorted) in newLinks {
            let pairs = unsorted.sorted()
            let cursor = try txn.putCursor(on: database)
            var appends = true
            var previous: UInt128?
            for pair in pairs {
                // A link of an object to itself through a relationship that is its own inverse is kept twice.
                if pair == previous { continue }
                let (source, target) = (UInt64(truncatingIfNeeded: pair >> 64), UInt64(truncatingIfNeeded: pair))
                try withUnsafeBytes(of: source.bigEndian) { key in
                    try withUnsafeBytes(of: target.bigEndian) { value in
                        if let previous, source == UInt64(truncatingIfNeeded: previous >> 64) {
                            try cursor.put(key, value, flags: .appendDuplicate)
                            return
                        }
                        guard appends else { return try cursor.put(key, value, flags: .noDuplicateData) }
                        do {
                            try cursor.put(key, value, flags: .append)
                        } catch let error as LMDBError where error.code == .keyExists {
                            // A key below the last stored one (another context's objects were saved first): LMDB
                            // refused the append without writing; put it in its place, and stop appending here.
                            appends = false
                            try cursor.put(key, value, flags: .noDuplicateData)
                        }
                    }
                }
                previous = pair
            }
        }
        newLinks = []
        lastNewLinks = 0
    }

    /// Writes the difference between a relationship's stored and current targets, in both directions.
    ///
    /// A to-one holds one target whatever other writers did since the context read it (``toOneConflicts(_:)``
    /// refuses that under ``MergePolicy/error`` before anything is written): the context's target replaces the
    /// stored one, and an object whose to-one inverse now names this object leaves the object it named before. The
    /// objects that lose a link this way, which the context may not hold, are collected in ``collateral`` for the
    /// save's change record.
    mutating func writeRelationships(of object: ManagedObject, _ storage: EntityStorage) throws {
        // (An entity without relationships, most inserts' in a bulk load, looks up no plans.)
        guard !storage.relationships.isEmpty else { return }
        for plan in try linkPlans(of: storage) {
            let relationship = plan.relationship
            guard let current = object.related[relationship.name] else { continue }
            var stored = object.isInserted ? [] : object.committedRelated[relationship.name] ?? []
            guard current != stored else { continue }
            let (forward, direct, inverseRelationship) = (plan.forward, plan.direct, plan.inverse)
            /// The database of the inverse on `target`'s own entity (a superentity's relationship holds its
            /// sub-entities' objects too).
            func inverse(at target: ObjectID) throws -> Database? {
                target.entityName == relationship.destination
                    ? direct : try store.storage(for: target.entityName).relationships[relationship.inverse]
            }
            let source = IndexKey.primaryKey(object.objectID.primaryKey)
            if !relationship.isToMany && !object.isInserted {
                // A to-one holds one target: the save's replaces what is stored now, whoever wrote that (another
                // writer since the context read it, or this save through the inverse of another of its objects).
                let read = stored
                stored = TargetSet(try store.storedTargets(of: object.objectID, relationship, storage, txn))
                for other in stored where !read.contains(other) && !current.contains(other) {
                    // Linked elsewhere since the context read it: it loses the link (if it exists: a reference left
                    // by a `noAction` delete names nothing).
                    guard let backward = try inverse(at: other) else { continue }
                    let target = IndexKey.primaryKey(other.primaryKey)
                    try txn.delete(source, value: target, in: forward)
                    if try txn.delete(target, value: source, in: backward) {
                        collateral[other, default: []].insert(relationship.inverse)
                    }
                    stored.remove(other)
                }
            }
            // Two versions of one set: compared chunk by chunk, the chunks they share passed over. (Nothing stored:
            // every current target is added, read where it is.)
            let changes = stored.isEmpty ? nil : current.changes(since: stored)
            for removed in changes?.removed ?? [] {
                guard let backward = try inverse(at: removed) else { continue }
                let target = IndexKey.primaryKey(removed.primaryKey)
                try txn.delete(source, value: target, in: forward)
                if try txn.delete(target, value: source, in: backward) {
                    inverseWrites.append(
                        .init(
                            target: removed, relationship: relationship.inverse, source: object.objectID, added: false))
                }
            }
            func link(_ added: ObjectID) throws {
                guard let backward = try inverse(at: added) else { return }
                let pk = object.objectID.primaryKey
                // The other object of the link is in this save too, and wrote it already.
                if writtenLinks.remove(WrittenLink(database: forward.number, source: pk, target: added.primaryKey))
                    != nil
                {
                    return
                }
                writtenLinks.insert(WrittenLink(database: backward.number, source: added.primaryKey, target: pk))
                if object.isInserted && isInsertedHere(added) {
                    addNewLink(pk, added.primaryKey, forward)
                    addNewLink(added.primaryKey, pk, backward)
                    return
                }
                addedLinks.append((object.objectID, relationship.name, added))
                let target = IndexKey.primaryKey(added.primaryKey)
                // A new object holds no link but those this save writes, which the context keeps consistent.
                if let inverseRelationship, !inverseRelationship.isToMany, !isInsertedHere(added) {
                    try leave(
                        added, relationship, backward, sources: inverseRelationship.destination, except: object.objectID
                    )
                }
                try putPair(source, target, forward)
                if try putPair(target, source, backward) {
                    inverseWrites.append(
                        .init(target: added, relationship: relationship.inverse, source: object.objectID, added: true))
                }
            }
            if let changes {
                for added in changes.added { try link(added) }
            } else {
                for added in current { try link(added) }
            }
        }
    }

    /// What writing one relationship of an entity's objects needs: its database, the database of its inverse on the
    /// destination entity itself, and the inverse. A class: each object's loop takes one reference, not a copy of
    /// the relationships' names.
    final class LinkPlan {
        let relationship: Relationship
        let forward: Database
        let direct: Database?
        let inverse: Relationship?

        init(relationship: Relationship, forward: Database, direct: Database?, inverse: Relationship?) {
            self.relationship = relationship
            self.forward = forward
            self.direct = direct
            self.inverse = inverse
        }
    }

    /// The plans of `storage`'s relationships (those with a database), found once per save: each object looked its
    /// relationships' databases, its inverse's and the destination's storage up by name.
    mutating func linkPlans(of storage: EntityStorage) throws -> [LinkPlan] {
        let id = ObjectIdentifier(storage)
        if let known = linkPlans.first(where: { $0.storage == id }) { return known.plans }
        var plans: [LinkPlan] = []
        for relationship in storage.entity.relationships {
            guard let forward = storage.relationships[relationship.name] else { continue }
            let destination = try store.storage(for: relationship.destination)
            plans.append(
                LinkPlan(
                    relationship: relationship, forward: forward,
                    direct: destination.relationships[relationship.inverse],
                    inverse: destination.entity.relationship(relationship.inverse)))
        }
        linkPlans.append((id, plans))
        return plans
    }

    /// Unlinks `target`, whose to-one inverse of `relationship` is about to name another object, from every other
    /// object it names now (both directions), recording them in ``collateral``.
    private mutating func leave(
        _ target: ObjectID, _ relationship: Relationship, _ backward: Database, sources: String, except kept: ObjectID
    ) throws {
        let key = IndexKey.primaryKey(target.primaryKey)
        var held: [[UInt8]] = []
        try txn.forEach(in: backward, range: .exactly(key)) { _, value in
            held.append(Array(value))
            return .continue
        }
        let keptKey = IndexKey.primaryKey(kept.primaryKey)
        for value in held where value != keptKey {
            let other = try store.relatedID(
                try value.withUnsafeBytes { try IndexKey.primaryKey(from: $0) }, destination: sources, txn)
            guard let forward = try store.storage(for: other.entityName).relationships[relationship.name] else {
                continue
            }
            try txn.delete(key, value: value, in: backward)
            if try txn.delete(value, value: key, in: forward) {
                collateral[other, default: []].insert(relationship.name)
            }
            collateral[target, default: []].insert(relationship.inverse)
        }
    }

    /// Writes one direction of a link; returns whether it was not stored yet.
    @discardableResult
    private func putPair(_ key: [UInt8], _ value: [UInt8], _ database: Database) throws -> Bool {
        try key.withUnsafeBytes { key in try value.withUnsafeBytes { try txn.insert(key, $0, in: database) } }
    }
}
