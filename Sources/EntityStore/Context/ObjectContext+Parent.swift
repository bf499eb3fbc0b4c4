import LMDB

/// Child contexts: reading through the parent and saving into it.
extension ObjectContext {
    /// Loads an object of a child context from its parent's current state (its unsaved changes included).
    func faultFromParent(_ object: ManagedObject, _ parent: ObjectContext) throws {
        let source = try parent.object(with: object.objectID)
        if source.isDeleted {
            throw EntityStoreError(
                .objectNotFound, "\(object.objectID) is deleted in the parent context", entity: object.entity.name,
                objectID: object.objectID)
        }
        let values = try source.loadedValues()
        object.values = values
        object.committed = values
        object.rowVersion = source.rowVersion
    }

    /// A child's fetch: the parent's answer (its unsaved changes included), with the child's own changes on top.
    func runInChild(_ request: FetchRequest, shape: Shape, parent: ObjectContext) throws -> [Candidate] {
        try validateWindow(request)
        let storage = try store.storage(for: request.entity)
        let entity = storage.entity
        var unwindowed = request
        unwindowed.fetchLimit = 0
        unwindowed.fetchOffset = 0
        let prepared = try store.preparedFetches.prepared(request, store: store)
        let judgesAll = request.includesPendingChanges && changedAnObjectReached(by: prepared)
        // The parent's matches in order, each with its sort values (what a controller keeps per row); or, to be
        // judged here, all of the parent's objects.
        var candidates: [Candidate]
        if judgesAll {
            var everything = FetchRequest(entity: request.entity)
            everything.includesSubentities = request.includesSubentities
            candidates = try parent.run(everything, shape: .objectIDs)
        } else {
            candidates = try parent.run(unwindowed, shape: .objectIDs)
        }
        let entities = Set(self.entities(of: request))
        let own =
            request.includesPendingChanges
            ? Set(dirty.lazy.map(\.objectID).filter { entities.contains($0.entityName) }) : []
        return try mappingStorageErrors("fetching \(entity.name)") {
            try store.read { txn in
                let reader = FetchReader(txn: txn, store: store, context: self, includesPending: true)
                /// `id` as a candidate when `subject` matches, with the sort values this context sees.
                func judged(_ id: ObjectID, _ subject: any PredicateSubject) throws -> Candidate? {
                    if let predicate = prepared.predicate, try !predicate.evaluate(subject) { return nil }
                    let sortValues = try prepared.sortPaths.map {
                        try CompiledPredicate.values(of: $0, subject).first ?? .null
                    }
                    return Candidate(id: id, sortValues: sortValues)
                }
                if judgesAll {
                    // Each object as the nearest context with changes to it holds it, else as stored.
                    candidates = try candidates.compactMap { candidate in
                        guard !own.contains(candidate.id), let subject = try reader.subject(for: candidate.id) else {
                            return nil
                        }
                        return try judged(candidate.id, subject)
                    }
                }
                if !own.isEmpty || judgesAll {
                    candidates.removeAll { own.contains($0.id) }
                    for id in own.sorted() {
                        guard let object = registered[id], !object.isDeleted, try hasRecord(object) else { continue }
                        if let candidate = try judged(id, ContextSubject(object: object, reader: reader)) {
                            candidates.append(candidate)
                        }
                    }
                    // Sorted again by the values this context sees.
                    Self.sort(&candidates, by: request.sortKeys)
                }
                let windowed = Self.window(candidates, request)
                switch shape {
                case .objects, .objectIDs:
                    return windowed
                case .count(let counter):
                    counter.value &+= windowed.count
                    return []
                case .dictionaries(let keys):
                    let paths = try keys.map { key in
                        (
                            key,
                            try ResolvedKeyPath.resolve(
                                key.keyPathComponents, from: entity, in: store.schema)
                        )
                    }
                    return try windowed.map { candidate in
                        let id = candidate.id
                        let subject = ContextSubject(object: try object(with: id), reader: reader)
                        var candidate = Candidate(id: id, sortValues: [])
                        var dictionary: [String: Value] = [:]
                        for (key, path) in paths {
                            dictionary[key] = try CompiledPredicate.values(of: path, subject).first ?? .null
                        }
                        candidate.dictionary = dictionary
                        return candidate
                    }
                case .aggregate(let sink):
                    let paths = try sink.keys.map {
                        try ResolvedKeyPath.resolve(
                            $0.keyPathComponents, from: entity, in: store.schema)
                    }
                    for candidate in windowed {
                        let subject = ContextSubject(object: try object(with: candidate.id), reader: reader)
                        try sink.add(try paths.map { try CompiledPredicate.values(of: $0, subject).first ?? .null })
                    }
                    return []
                }
            }
        }
    }

    /// Whether this child changed an object of an entity that `prepared`'s predicate or sort keys read through a
    /// relationship: then its fetch judges every object itself, since a change to a related object (a project the
    /// child archived) changes which objects `project.archived == NO` finds, whatever the parent found.
    private func changedAnObjectReached(by prepared: PreparedFetch) -> Bool {
        guard !dirty.isEmpty else { return false }
        var reached = Set(prepared.sortPaths.flatMap { $0.steps.map(\.destination) })
        if let predicate = prepared.predicate {
            // A subquery may reach any entity.
            guard let entities = predicate.reachedEntities else { return true }
            reached.formUnion(entities)
        }
        guard !reached.isEmpty else { return false }
        let schema = store.schema
        return dirty.contains { object in reached.contains { schema.isKind(object.objectID.entityName, of: $0) } }
    }

    /// A child's save: its changes handed to the parent as one batch (see ``init(parent:name:isolation:)``).
    ///
    /// The delete rules run first, here, as a plain context's save runs them: the parent receives the cascaded
    /// deletes and the nullified links with the rest, and the child's objects stop listing what it deleted. A save
    /// refused (a deny rule, a conflict with the parent) leaves the child as it was.
    func pushToParent(_ parent: ObjectContext) throws {
        processPendingChanges()
        guard dirty.contains(where: { $0.isDeleted && !$0.isInserted }) else { return try handOver(to: parent) }
        undo.isSuspended = true
        saveSnapshot = [:]
        defer {
            saveSnapshot = nil
            undo.isSuspended = false
        }
        do {
            let denied = try propagateDeletes()
            if !denied.isEmpty {
                throw EntityStoreError(
                    .validationFailed,
                    denied.count == 1 ? denied[0].description : "\(denied.count) validation failures",
                    entity: denied[0].entity, key: denied[0].key, objectID: denied[0].objectID, failures: denied)
            }
            // What the delete rules changed reaches the child's observers and controllers, as a plain save's does.
            processPendingChanges()
            try handOver(to: parent)
        } catch {
            // Restored, and the restore processed: observers that saw the delete rules' changes see them undone
            // (changes never delivered cancel out and deliver nothing).
            restore(saveSnapshot ?? [:])
            processPendingChanges()
            throw error
        }
    }

    /// Hands the child's processed changes to the parent as one batch.
    private func handOver(to parent: ObjectContext) throws {
        let objects = dirty.sortedByID()
        guard objects.contains(where: \.hasChanges) else {
            // Nothing to hand over. Objects inserted and deleted since the last save never existed: forgotten now,
            // as a plain context's save forgets them.
            for object in objects where object.isInserted && object.isDeleted {
                registered[object.objectID] = nil
                object.context = nil
            }
            dirty.removeAll()
            return
        }
        // Checked first, so that nothing reaches the parent when something cannot: every object changed or
        // deleted, and every object a relationship now points to, must still be there.
        var failures: [EntityStoreError.Failure] = []
        let inserted = Set(objects.filter { $0.isInserted && !$0.isDeleted }.map(\.objectID))
        func check(_ id: ObjectID) {
            if inserted.contains(id) { return }
            let source = parent.registered[id]
            if source?.isDeleted == true {
                failures.append(
                    .init(entity: id.entityName, objectID: id, message: "it was deleted in the parent context"))
                return
            }
            if source == nil || source?.isFault == true {
                do {
                    _ = try parent.object(with: id).loadedValues()
                } catch {
                    failures.append(
                        .init(
                            entity: id.entityName, objectID: id,
                            message:
                                "the parent context cannot load it: \(EntityStoreError.wrapping(error, "loading").message)"
                        ))
                }
            }
        }
        for object in objects where !(object.isInserted && object.isDeleted) {
            if !object.isInserted { check(object.objectID) }
            if object.isDeleted { continue }
            for targets in object.related.values { for target in targets { check(target) } }
        }
        if !failures.isEmpty {
            throw EntityStoreError(
                .conflict,
                failures.count == 1 ? failures[0].description : "\(failures.count) conflicts with the parent",
                entity: failures[0].entity, objectID: failures[0].objectID, failures: failures)
        }
        parent.beginBatch()
        defer { parent.endBatch() }
        try parent.mutation {
            for object in objects where object.isInserted && !object.isDeleted {
                parent.adoptInserted(object)
            }
            for object in objects where !object.isDeleted && !object.isInserted {
                let target = try parent.object(with: object.objectID)
                guard let values = object.values, let committed = object.committed else { continue }
                for index in values.indices where values[index] != committed[index] {
                    try parent.setAttribute(target, index: index, to: values[index])
                }
            }
            // Transient values go along too (they live in contexts, and the parent is one).
            for object in objects where !object.isDeleted && !object.isInserted && !object.transientValues.isEmpty {
                let target = try parent.object(with: object.objectID)
                for (index, value) in object.transientValues.enumerated() where target.currentTransients[index] != value
                {
                    try parent.setTransient(target, index: index, to: value)
                }
            }
            for object in objects where !object.isDeleted {
                let source = try parent.object(with: object.objectID)
                for relationship in object.entity.relationships {
                    guard let current = object.related[relationship.name] else { continue }
                    let before = object.isInserted ? [] : object.committedRelated[relationship.name] ?? []
                    for added in current.subtracting(before).sorted() {
                        try parent.linkIDs(source, relationship, try parent.object(with: added))
                    }
                    for removed in before.subtracting(current).sorted() {
                        try parent.unlinkIDs(source, relationship, removed)
                    }
                }
            }
            for object in objects where object.isDeleted && !object.isInserted {
                try parent.delete(try parent.object(with: object.objectID))
            }
        }
        parent.processPendingChanges()
        // The child's state is now the parent's: nothing is unsaved any more.
        for object in objects {
            if object.isDeleted {
                registered[object.objectID] = nil
                object.context = nil
                continue
            }
            object.isInserted = false
            object.committed = object.values
            object.committedRelated = object.related
            if let source = parent.registered[object.objectID] { object.rowVersion = source.rowVersion }
        }
        dirty.removeAll()
        undo.clear()
    }

    /// Registers a copy of a child's inserted object as inserted here, under the same ID.
    ///
    /// The ID is new to this context: the child reserved it from the store when it inserted the object.
    func adoptInserted(_ child: ManagedObject) {
        let object = ManagedObject(objectID: child.objectID, entity: child.entityBox, context: self)
        object.values = child.values
        object.transientValues = child.transientValues
        object.isInserted = true
        for relationship in child.entity.relationships {
            object.related[relationship.name] = []
            object.committedRelated[relationship.name] = []
        }
        registered[child.objectID] = object
        willInsert(object)
        dirty.insert(object)
    }
}
