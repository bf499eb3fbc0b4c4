import LMDB

extension ObjectContext {
    /// The targets a relationship of `object` holds now, loading them from the store the first time.
    func targets(of object: ManagedObject, _ relationship: Relationship) throws -> TargetSet {
        if let loaded = object.related[relationship.name] { return loaded }
        let stored = object.isInserted ? [] : try storedTargets(of: object.objectID, relationship)
        keepStored(stored, relationship, of: object)
        return stored
    }

    /// The targets stored for `id`'s relationship.
    func storedTargets(of id: ObjectID, _ relationship: Relationship) throws -> TargetSet {
        if let parent {
            // A child's stored state is its parent's current one.
            let source = try parent.object(with: id)
            return try parent.targets(of: source, relationship)
        }
        let storage = try store.storage(for: id.entityName)
        return try mappingStorageErrors("loading \(id).\(relationship.name)") {
            try store.read { txn in TargetSet(try store.storedTargets(of: id, relationship, storage, txn)) }
        }
    }

    /// Loads, as ``targets(of:_:)`` would, every relationship of `objects` (in ID order) not loaded yet, in one read
    /// transaction through one cursor per relationship database (each alone opened both a transaction and a
    /// cursor): a cascade's delete rules read every relationship of every object it reaches.
    func loadRelationships(of objects: [ManagedObject]) throws {
        guard parent == nil else { return }
        let unloaded = objects.filter { object in
            !object.isInserted && object.entityBox.entity.relationships.contains { object.related[$0.name] == nil }
        }
        guard unloaded.count > 1 else { return }
        try mappingStorageErrors("loading the relationships of \(unloaded.count) objects") {
            try store.read { txn in
                var start = 0
                while start < unloaded.count {
                    // A run of one entity's objects, then each of its relationships over the run.
                    let entityName = unloaded[start].objectID.entityName
                    var end = start + 1
                    while end < unloaded.count, unloaded[end].objectID.entityName == entityName { end += 1 }
                    let storage = try lastStorage(for: entityName)
                    for relationship in storage.entity.relationships {
                        let run = unloaded[start..<end].filter { $0.related[relationship.name] == nil }
                        guard !run.isEmpty else { continue }
                        guard let database = storage.relationships[relationship.name] else {
                            for object in run { keepStored([], relationship, of: object) }
                            continue
                        }
                        try txn.withCursor(on: database) { cursor in
                            for object in run {
                                let stored = try store.storedTargets(
                                    of: object.objectID, relationship, through: cursor, txn)
                                keepStored(TargetSet(stored), relationship, of: object)
                            }
                        }
                    }
                    start = end
                }
            }
        }
    }

    /// Keeps `stored` as what `object`'s relationship holds, loaded and committed.
    private func keepStored(_ stored: TargetSet, _ relationship: Relationship, of object: ManagedObject) {
        object.related[relationship.name] = stored
        object.committedRelated[relationship.name] = stored
    }

    func setToOne(_ source: ManagedObject, _ relationship: Relationship, _ target: ManagedObject?) throws {
        try mutation {
            if let target {
                try linkIDs(source, relationship, target)
            } else {
                for old in try targets(of: source, relationship) {
                    try unlinkIDs(source, relationship, old)
                }
            }
        }
    }

    func link(_ source: ManagedObject, _ relationship: Relationship, _ target: ManagedObject) throws {
        try mutation { try linkIDs(source, relationship, target) }
    }

    func unlink(_ source: ManagedObject, _ relationship: Relationship, _ target: ManagedObject) throws {
        try mutation { try unlinkIDs(source, relationship, target.objectID) }
    }

    /// Adds `target` to `source`'s relationship and `source` to the inverse; a to-one side first lets go of the
    /// object it held.
    func linkIDs(_ source: ManagedObject, _ relationship: Relationship, _ target: ManagedObject) throws {
        // Each checked in turn, not through an array of the two (made and freed for every link).
        func checkLinkable(_ object: ManagedObject) throws {
            try checkRegistered(object)
            guard !object.isDeleted else {
                throw EntityStoreError(
                    .invalidObject, "\(object.objectID) is deleted", entity: object.entity.name,
                    objectID: object.objectID)
            }
        }
        try checkLinkable(source)
        try checkLinkable(target)
        guard
            target.entity.name == relationship.destination
                || store.schema.isKind(target.entity.name, of: relationship.destination),
            let inverse = target.entity.relationship(relationship.inverse)
        else {
            throw EntityStoreError(
                .typeMismatch,
                "\(source.entity.name).\(relationship.name) holds \(relationship.destination) objects, not"
                    + " \(target.entity.name)",
                entity: source.entity.name, key: relationship.name, objectID: source.objectID)
        }
        if try targets(of: source, relationship).contains(target.objectID) { return }
        if !relationship.isToMany {
            for old in try targets(of: source, relationship) { try unlinkIDs(source, relationship, old) }
        }
        if !inverse.isToMany {
            for old in try targets(of: target, inverse) { try unlinkIDs(target, inverse, old) }
        } else {
            // Load the inverse before adding to it: a partial set would stand for all of the target's objects.
            _ = try targets(of: target, inverse)
        }
        willChange(source, relationship, target.objectID, added: true)
        willChange(target, inverse, source.objectID, added: true)
        source.related[relationship.name, default: []].insert(target.objectID)
        target.related[inverse.name, default: []].insert(source.objectID)
        dirty.insert(source)
        dirty.insert(target)
    }

    /// Removes `targetID` from `source`'s relationship and `source` from the inverse.
    func unlinkIDs(_ source: ManagedObject, _ relationship: Relationship, _ targetID: ObjectID) throws {
        let target = try object(with: targetID)
        guard let inverse = target.entity.relationship(relationship.inverse) else { return }
        _ = try targets(of: source, relationship)
        _ = try targets(of: target, inverse)
        willChange(source, relationship, targetID, added: false)
        willChange(target, inverse, source.objectID, added: false)
        source.related[relationship.name]?.remove(targetID)
        target.related[inverse.name]?.remove(source.objectID)
        dirty.insert(source)
        dirty.insert(target)
    }
}
