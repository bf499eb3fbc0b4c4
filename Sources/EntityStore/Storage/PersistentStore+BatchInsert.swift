import Foundation
import LMDB

extension PersistentStore {
    /// Inserts many objects of one entity in one write transaction, without a context: for imports, like Core
    /// Data's `NSBatchInsertRequest`.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// let rows = [(title: "Dune", pages: 412)]
    /// -->
    /// ```swift
    /// let ids = try store.batchInsert(into: "Book", objects: rows.map { ["title": .string($0.title)] })
    /// ```
    ///
    /// Each dictionary maps attribute names to values; attributes left out take their defaults. Relationships are
    /// not set here (connect the objects through a context afterwards), so an entity with a required to-one
    /// relationship is refused. It is all or nothing: every unknown key, wrong type, missing required value and
    /// duplicate of a unique value (within the batch or against the store) is listed in one error and nothing is
    /// written. The batch is one history entry (one insert per object), so contexts that merge from the store, their
    /// controllers, and other processes see the new objects like any save.
    ///
    /// With `onConflict: .update` it is an upsert: an object whose given unique values an object already holds (a
    /// stored one, matched as uniqueness compares values, or one made earlier in the batch) updates that object
    /// with the values it gives, and the others keep theirs; `.ignore` skips it instead. Only the values an object
    /// gives match: its defaults and generated values do not. An object whose values belong to two objects is
    /// refused (under `.ignore`, skipped), and a stored holder must be of `entityName` or one of its
    /// sub-entities. Required values are checked on each object as it ends: a new object needs them (one it
    /// leaves out may come from a later object of the batch that updates it), an updated one has them; a required
    /// value given as nil is refused, whatever later objects give. The history entry holds an update per changed object (with its old and new values); an
    /// object that changes nothing writes nothing.
    ///
    /// - Parameters:
    ///   - entityName: The entity of the new objects.
    ///   - objects: The attribute values of each new object.
    ///   - onConflict: What an object whose unique value is held does: fail the batch (the default), update the
    ///     holder, or be skipped.
    ///   - author: The history entry's author.
    /// - Returns: The new objects' IDs, in the order of `objects`; for an object that updated or was skipped, the
    ///   holder's.
    /// - Throws: ``EntityStoreError/Code/unknownEntity``; ``EntityStoreError/Code/validationFailed`` with every
    ///   problem in ``EntityStoreError/failures``; ``EntityStoreError/Code/storage`` from LMDB.
    @discardableResult
    public func batchInsert(
        into entityName: String, objects: [[String: Value]], onConflict: UniqueConflictPolicy = .fail,
        author: String? = nil
    ) throws
        -> [ObjectID]
    {
        let storage = try insertableStorage(for: entityName)
        let entity = storage.entity
        try Self.refuseRequiredToOne(entity)
        guard !objects.isEmpty else { return [] }
        // An upsert: which values each object gives decides what it updates; its missing values are checked once
        // it is known to be new.
        var upsert =
            onConflict == .fail || storage.entityBox.uniqueAttributeIndices.isEmpty
            ? nil : UpsertInput(policy: onConflict, given: [], mistyped: [], failures: [])
        var failures: [EntityStoreError.Failure] = []
        var rows: [[Value]] = []
        rows.reserveCapacity(objects.count)
        let defaults = entity.attributes.map(\.defaultValue)
        let types = entity.attributes.map(\.type)
        let rules = entity.attributes.map(\.validation)
        // Per attribute, found once: reading them per key copied the attribute.
        let derived = entity.attributes.map { $0.derivation != nil }
        let required = entity.attributes.indices.filter { !entity.attributes[$0].isOptional }
        let generated = storage.entityBox.generatedDefaults
        let names = storage.entityBox.attributeNames
        for (position, object) in objects.enumerated() {
            var values = defaults.ownCopy()
            for (index, made) in generated where object[names[index]] == nil {
                values[index] = made.make()
            }
            var mistyped = Set<Int>()  // reported once, as a wrong type
            var givenIndexes: [Int] = []  // for an upsert: the attributes the object gives
            for (key, given) in object {
                guard let index = entity.attributeIndex(key) else {
                    failures.append(Self.notAnAttribute(key, of: entity, position: "object \(position)"))
                    continue
                }
                if upsert != nil { givenIndexes.append(index) }
                if derived[index] {
                    failures.append(Self.derivedKey(key, of: entity, position: "object \(position)"))
                    continue
                }
                let value = given.converting(to: types[index])
                if let (failure, wrongType) = Self.check(value, types[index], rules[index], entity, index, position) {
                    failures.append(failure)
                    if wrongType {
                        mistyped.insert(index)
                        continue
                    }
                }
                values[index] = value
            }
            if upsert != nil {
                upsert!.given.append(givenIndexes)
                upsert!.mistyped.append(mistyped)
            } else if required.contains(where: { values[$0].isNull }) {
                Self.checkRequired(values, entity, position: position, except: mistyped, &failures)
            }
            rows.append(values)
        }
        if var upsert {
            upsert.failures = failures
            return try upsertRows(rows, storage, upsert, author: author)
        }
        if !failures.isEmpty { throw Self.batchFailure(failures) }
        return try insertRows(rows, storage, author: author)
    }

    /// Inserts many objects of one entity in one write transaction, each given as a row of values for `keys`:
    /// the fastest import path.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// let books = [(title: "Dune", pages: 412)]
    /// -->
    /// ```swift
    /// try store.batchInsert(into: "Book", keys: ["title", "pages"], rows: books.map { [.string($0.title), .int($0.pages)] })
    /// ```
    ///
    /// The keys are resolved once and no dictionary is made per object; when `keys` names every attribute in the
    /// entity's order, each row is stored as given. Attributes left out take their defaults. Otherwise it is
    /// ``batchInsert(into:objects:onConflict:author:)``: all or nothing, every problem listed in one error, one
    /// history entry, and an upsert under `onConflict: .update` (each row gives the values of `keys`).
    ///
    /// - Parameters:
    ///   - entityName: The entity of the new objects.
    ///   - keys: The attributes each row gives values for, in the rows' order; each at most once.
    ///   - rows: One row of `keys.count` values per new object.
    ///   - onConflict: What a row whose unique value is held does: fail the batch (the default), update the
    ///     holder, or be skipped.
    ///   - author: The history entry's author.
    /// - Returns: The new objects' IDs, in the order of `rows`; for a row that updated or was skipped, the
    ///   holder's.
    /// - Throws: ``EntityStoreError/Code/unknownEntity``; ``EntityStoreError/Code/validationFailed`` for a key
    ///   that is not an attribute or is given twice, a row of the wrong length, and every value problem (in
    ///   ``EntityStoreError/failures``); ``EntityStoreError/Code/storage`` from LMDB.
    @discardableResult
    public func batchInsert(
        into entityName: String, keys: [String], rows: [[Value]], onConflict: UniqueConflictPolicy = .fail,
        author: String? = nil
    ) throws
        -> [ObjectID]
    {
        let storage = try insertableStorage(for: entityName)
        let entity = storage.entity
        try Self.refuseRequiredToOne(entity)
        var failures: [EntityStoreError.Failure] = []
        var positions: [Int] = []
        for key in keys {
            guard let index = entity.attributeIndex(key) else {
                failures.append(Self.notAnAttribute(key, of: entity, position: "keys"))
                continue
            }
            if positions.contains(index) {
                failures.append(.init(entity: entity.name, key: key, message: "keys: '\(key)' is given twice"))
            }
            if entity.attributes[index].derivation != nil {
                failures.append(Self.derivedKey(key, of: entity, position: "keys"))
            }
            positions.append(index)
        }
        if !failures.isEmpty { throw Self.batchFailure(failures) }
        guard !rows.isEmpty else { return [] }
        var rows = rows
        let complete = positions == Array(entity.attributes.indices)
        let defaults = entity.attributes.map(\.defaultValue)
        var full: [[Value]] = []
        if !complete { full.reserveCapacity(rows.count) }
        // Per column: the attribute's type, checked per value without copying the attribute.
        let types = positions.map { entity.attributes[$0].type }
        let rules = positions.map { entity.attributes[$0].validation }
        let required = entity.attributes.indices.filter { !entity.attributes[$0].isOptional }
        // Defaults made anew for each row, for the attributes the rows do not give.
        let generated = storage.entityBox.generatedDefaults
        let given = Set(positions)
        var wrongLength = false  // a row of the wrong length: listed, and no upsert is worked out
        var upsert =
            onConflict == .fail || storage.entityBox.uniqueAttributeIndices.isEmpty
            ? nil : UpsertInput(policy: onConflict, given: [], mistyped: [], failures: [])
        for (position, row) in rows.enumerated() {
            guard row.count == keys.count else {
                wrongLength = true
                failures.append(
                    .init(
                        entity: entity.name,
                        message: "object \(position): \(row.count) values for \(keys.count) keys"))
                continue
            }
            var values = complete ? row : defaults.ownCopy()
            if !complete {
                for (index, made) in generated where !given.contains(index) { values[index] = made.make() }
            }
            var mistyped = Set<Int>()
            var converted = false
            for (column, index) in positions.enumerated() {
                let value = row[column].converting(to: types[column])
                // A number converted to the attribute's type: the row is not stored as given.
                if value.type != row[column].type { converted = true }
                if let (failure, wrongType) = Self.check(value, types[column], rules[column], entity, index, position) {
                    failures.append(failure)
                    if wrongType {
                        mistyped.insert(index)
                        continue
                    }
                }
                if !complete || converted { values[index] = value }
            }
            if upsert != nil {
                upsert!.given.append(positions)
                upsert!.mistyped.append(mistyped)
            } else if required.contains(where: { values[$0].isNull }) {
                Self.checkRequired(values, entity, position: position, except: mistyped, &failures)
            }
            if !complete {
                full.append(values)
            } else if converted {
                rows[position] = values
            }
        }
        if var upsert, !wrongLength {
            upsert.failures = failures
            return try upsertRows(complete ? rows : full, storage, upsert, author: author)
        }
        if !failures.isEmpty { throw Self.batchFailure(failures) }
        return try insertRows(complete ? rows : full, storage, author: author)
    }

    /// Inserts many models of a class's entity in one write transaction, each given as the attributes it sets,
    /// through key paths the compiler checks; otherwise it is ``batchInsert(into:objects:onConflict:author:)``.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// final class Label: Model {
    ///     @Stored(.unique) var name: String
    /// }
    /// let feed = [(name: "sf", color: "blue")]
    /// -->
    /// ```swift
    /// try store.batchInsert(Label.self, objects: feed.map { [.set(\Label.name, $0.name)] }, onConflict: .ignore)
    /// ```
    ///
    /// No model instance is made: a property's initial value is the attribute's default, and one made anew per
    /// instance is a generated default (a UUID or a date) or must be given.
    @discardableResult
    public func batchInsert<M: Model>(
        _ type: M.Type, objects: [[ModelAssignment<M>]], onConflict: UniqueConflictPolicy = .fail,
        author: String? = nil
    ) throws -> [ObjectID] {
        let entityName = ModelKeys.entityName(of: type)
        try type.check(against: try storage(for: entityName).entity)
        let dictionaries = objects.map { assignments in
            var values: [String: Value] = [:]
            for assignment in assignments { values[assignment.key] = assignment.value }
            return values
        }
        return try batchInsert(into: entityName, objects: dictionaries, onConflict: onConflict, author: author)
    }

    private static func refuseRequiredToOne(_ entity: Entity) throws {
        if let required = entity.relationships.first(where: { !$0.isToMany && !$0.isOptional }) {
            throw EntityStoreError(
                .validationFailed,
                "\(entity.name) cannot be batch inserted: its to-one relationship '\(required.name)' is required",
                entity: entity.name, key: required.name)
        }
    }

    private static func notAnAttribute(
        _ key: String, of entity: Entity, position: String
    ) -> EntityStoreError.Failure {
        let what =
            entity.relationship(key) != nil ? "is a relationship: set it through a context" : "is not an attribute"
        return .init(entity: entity.name, key: key, message: "\(position): '\(key)' \(what)")
    }

    /// What is wrong with `value` for the attribute at `index` (its type, or a value the format cannot hold).
    private static func problem(
        _ value: Value, _ entity: Entity, _ index: Int, position: Int
    ) -> EntityStoreError.Failure? {
        let attribute = entity.attributes[index]
        let key = attribute.name
        if let type = value.type, type != attribute.type {
            return .init(
                entity: entity.name, key: key,
                message: "object \(position): \(entity.name).\(key) is \(attribute.type.withArticle); got \(value)")
        }
        if let problem = value.storageProblem {
            return .init(entity: entity.name, key: key, message: "object \(position): \(key): \(problem)")
        }
        return nil
    }

    private static func derivedKey(_ key: String, of entity: Entity, position: String) -> EntityStoreError.Failure {
        .init(entity: entity.name, key: key, message: "\(position): '\(key)' is derived: it is computed when saved")
    }

    /// Rows with their derived attributes computed (a batch sets no relationships: counts are 0, sums 0, the rest
    /// reached through relationships nil).
    func derivingValues(_ rows: [[Value]], _ entity: Entity) throws -> [[Value]] {
        let derivations = try self.derivations()[entity.name] ?? []
        guard !derivations.isEmpty else { return rows }
        let now = Date()
        return try rows.map { row in
            var values = row
            for derivation in derivations {
                values[derivation.index] = try derivation.value(ValuesSubject(values: values), now: now)
            }
            return values
        }
    }

    /// What is wrong with `value` for the attribute at `index` of type `type` under `rules`, if anything, and
    /// whether it is its type (a value of the wrong type or that the store cannot hold) rather than a rule it breaks.
    /// The common case (the right type, storable, no rules) decides without building anything.
    private static func check(
        _ value: Value, _ type: AttributeType, _ rules: AttributeValidation?, _ entity: Entity, _ index: Int,
        _ position: Int
    ) -> (failure: EntityStoreError.Failure, wrongType: Bool)? {
        if let valueType = value.type, valueType != type || value.storageProblem != nil,
            let failure = problem(value, entity, index, position: position)
        {
            return (failure, true)
        }
        guard let rules, let broken = rules.problem(with: value) else { return nil }
        let key = entity.attributes[index].name
        return (.init(entity: entity.name, key: key, message: "object \(position): \(key): \(broken)"), false)
    }

    static func checkRequired(
        _ values: [Value], _ entity: Entity, position: Int, except mistyped: Set<Int>,
        _ failures: inout [EntityStoreError.Failure]
    ) {
        for (index, attribute) in entity.attributes.enumerated()
        where !attribute.isOptional && values[index].isNull && !mistyped.contains(index) {
            failures.append(missing(attribute.name, of: entity, position: position))
        }
    }

    /// A required attribute the batch's object at `position` leaves without a value.
    static func missing(_ key: String, of entity: Entity, position: Int) -> EntityStoreError.Failure {
        .init(entity: entity.name, key: key, message: "object \(position): \(key) is required")
    }

    /// Writes validated rows (every attribute, in order) in one transaction with one history entry.
    private func insertRows(_ given: [[Value]], _ storage: EntityStorage, author: String?) throws -> [ObjectID] {
        let entity = storage.entity
        let rows = try derivingValues(given, entity)
        let ids = try mappingStorageErrors("batch inserting into \(entity.name)") {
            try write { txn -> [ObjectID] in
                let keys = try takeKeys(rows.count, of: entity.name, txn)
                var writer = ChangeWriter(store: self, txn: txn)
                if entity.attributes.contains(where: \.isUnique) {
                    let ids = keys.map { ObjectID(entityName: entity.name, primaryKey: $0) }
                    // Uniqueness is checked on objects (within the batch and against the store): made only here.
                    let carrier = ObjectContext(store: self, name: "batch insert")
                    let box = EntityBox(entity)
                    let objects = zip(ids, rows).map { id, values in
                        let object = ManagedObject(objectID: id, entity: box, context: carrier)
                        object.values = values
                        object.isInserted = true
                        return object
                    }
                    // The objects' reference to the carrier is unretained: detached before either is released.
                    defer { for object in objects { object.context = nil } }
                    let duplicates = try withExtendedLifetime(carrier) { try writer.checkUniqueness(objects) }
                    if !duplicates.isEmpty { throw Self.batchFailure(duplicates) }
                }
                // Fresh keys above every stored one: LMDB appends the records.
                try writer.insertAppending(rows, keys: keys, storage)
                // One insert per object, written straight (no ObjectChange made per object).
                let header = ChangeRecord(kind: .didSave, changes: [], author: author)
                _ = try appendHistory(txn) {
                    HistoryCodec.encodeInserts(header, entity: entity.name, keys: keys, transaction: $0)
                }
                return keys.map { ObjectID(entityName: entity.name, primaryKey: $0) }
            }
        }
        publisher.catchUp(self, force: true)
        return ids
    }

    /// `count` fresh primary keys of `entityName`, taken from its sequence past every block a context has reserved:
    /// above every stored key, so that their records append.
    func takeKeys(_ count: Int, of entityName: String, _ txn: WriteTransaction) throws -> [UInt64] {
        let first = try nextKey(of: entityName, txn)
        try txn.put(
            StoreNames.MetaKey.sequence(hierarchies.sequenceOwner(entityName)),
            IndexKey.primaryKey(first + UInt64(count)), in: meta)
        return (0..<UInt64(count)).map { first + $0 }
    }

    static func batchFailure(_ failures: [EntityStoreError.Failure]) -> EntityStoreError {
        EntityStoreError(
            .validationFailed,
            failures.count == 1 ? failures[0].description : "\(failures.count) validation failures",
            entity: failures[0].entity, key: failures[0].key, objectID: failures[0].objectID, failures: failures)
    }
}
