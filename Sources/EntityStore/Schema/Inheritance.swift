import LMDB

/// Entity inheritance (Core Data's sub-entities).
///
/// A sub-entity is stored as an entity of its own (its own records, indexes and relationship databases) with its
/// superentity's properties first, in the superentity's order: a record of a `Dog` has `Animal`'s attributes at the
/// positions `Animal` has them, so anything compiled against `Animal` (a predicate, a sort, a controller) reads a
/// `Dog`'s record as it reads an `Animal`'s. The entities of one hierarchy take their primary keys from one
/// sequence (the root's), so a key names one object of the whole hierarchy, and a relationship to `Animal` stores
/// keys alone whatever kind of animal it holds.
extension Schema {
    /// Gives every sub-entity its superentity's properties, first; a property the sub-entity already has with the
    /// same declaration counts as inherited (so resolving twice changes nothing), one declared differently is a
    /// failure.
    static func resolvingInheritance(_ declared: [Entity]) -> (entities: [Entity], failures: [EntityStoreError.Failure])
    {
        guard declared.contains(where: { $0.parent != nil }) else { return (declared, []) }
        var positions: [String: Int] = [:]
        for (i, entity) in declared.enumerated() where positions[entity.name] == nil { positions[entity.name] = i }
        var resolved: [String: Entity] = [:]
        var failures: [EntityStoreError.Failure] = []
        var reported = Set<String>()
        func fail(_ entity: String, _ key: String?, _ message: String) {
            guard reported.insert("\(entity).\(key ?? "")|\(message)").inserted else { return }
            failures.append(.init(entity: entity, key: key, message: message))
        }
        func merge<P: Equatable>(
            _ inherited: [P], _ own: [P], name: (P) -> String, in entity: String, from parent: String
        ) -> [P] {
            var result = inherited
            for property in own {
                if let same = inherited.first(where: { name($0) == name(property) }) {
                    if same != property {
                        fail(
                            entity, name(property),
                            "'\(name(property))' is inherited from \(parent) and cannot be declared again differently")
                    }
                } else {
                    result.append(property)
                }
            }
            return result
        }
        func resolve(_ name: String, _ chain: [String]) -> Entity? {
            if let done = resolved[name] { return done }
            guard let position = positions[name] else { return nil }
            var entity = declared[position]
            guard let parentName = entity.parent else {
                resolved[name] = entity
                return entity
            }
            if chain.contains(name) {
                fail(name, nil, "inheritance cycle: \((chain + [name]).joined(separator: " → "))")
                return nil
            }
            guard positions[parentName] != nil else {
                fail(name, nil, "unknown superentity '\(parentName)'")
                return nil
            }
            guard let parent = resolve(parentName, chain + [name]) else { return nil }
            entity.attributes = merge(
                parent.attributes, entity.attributes, name: \.name, in: name, from: parentName)
            entity.relationships = merge(
                parent.relationships, entity.relationships, name: \.name, in: name, from: parentName)
            entity.transientAttributes = merge(
                parent.transientAttributes, entity.transientAttributes, name: \.name, in: name, from: parentName)
            resolved[name] = entity
            return entity
        }
        let entities = declared.map { resolve($0.name, []) ?? $0 }
        return (entities, failures)
    }

    /// The entities that inherit directly from `name`.
    public func subentities(of name: String) -> [Entity] { entities.filter { $0.parent == name } }

    /// Whether `name` is `ancestor` or inherits from it (through any number of levels).
    public func isKind(_ name: String, of ancestor: String) -> Bool { Self.isKind(name, of: ancestor, in: entities) }

    /// Whether `name` is `ancestor` or inherits from it among `entities` (a cycle ends the walk).
    static func isKind(_ name: String, of ancestor: String, in entities: [Entity]) -> Bool {
        var current: String? = name
        var steps = 0
        while let step = current, steps <= entities.count {
            if step == ancestor { return true }
            current = entities.first { $0.name == step }?.parent
            steps += 1
        }
        return false
    }

    /// `name` and every entity that inherits from it: `name`, its sub-entities, theirs, each level in declaration
    /// order.
    func family(of name: String) -> [String] {
        var result = [name]
        var next = 0
        while next < result.count {
            let current = result[next]
            next += 1
            for child in entities where child.parent == current && !result.contains(child.name) {
                result.append(child.name)
            }
        }
        return result
    }

    /// The top of `name`'s hierarchy: the entity whose primary-key sequence it shares.
    func root(of name: String) -> String {
        var current = name
        var steps = 0
        while let parent = entity(current)?.parent, steps <= entities.count {
            current = parent
            steps += 1
        }
        return current
    }

    /// The entity that declares the property `name` in `entity`'s hierarchy: the highest ancestor that has it
    /// (an inherited attribute is the same attribute at every level, so uniqueness holds across all of them).
    package func declaringEntity(of name: String, in entity: String) -> String {
        func has(_ entity: Entity?) -> Bool {
            guard let entity else { return false }
            return entity.attributeIndex(name) != nil || entity.relationship(name) != nil
                || entity.transientIndex(name) != nil
        }
        var current = entity
        var steps = 0
        while let parent = self.entity(current)?.parent, has(self.entity(parent)), steps <= entities.count {
            current = parent
            steps += 1
        }
        return current
    }
}

/// What the store needs of the schema's hierarchies on its hot paths, computed once per store.
struct Hierarchies: Sendable {
    /// For each entity, the entities a fetch of it reads (itself and its descendants that are not abstract), when
    /// that is not just itself.
    private let families: [String: [String]]
    /// For each sub-entity, the root whose primary-key sequence it uses.
    private let roots: [String: String]
    /// Whether any entity inherits from another.
    let isEmpty: Bool

    init(_ schema: Schema) {
        var families: [String: [String]] = [:]
        var roots: [String: String] = [:]
        for entity in schema.entities {
            let family = schema.family(of: entity.name).filter { schema.entity($0)?.isAbstract == false }
            if family != [entity.name] { families[entity.name] = family }
            let root = schema.root(of: entity.name)
            if root != entity.name { roots[entity.name] = root }
        }
        self.families = families
        self.roots = roots
        isEmpty = roots.isEmpty
    }

    /// The entities a fetch of `entity` reads with its sub-entities: itself (unless abstract) and its descendants.
    func concrete(_ entity: String) -> [String] { families[entity] ?? [entity] }

    /// Whether `entity` has sub-entities, or is abstract: a fetch of it reads another list than its own records.
    func hasFamily(_ entity: String) -> Bool { !families.isEmpty && families[entity] != nil }

    /// The entity whose sequence gives `entity`'s primary keys.
    func sequenceOwner(_ entity: String) -> String { roots[entity] ?? entity }
}

extension PersistentStore {
    /// The targets stored for `id`'s relationship, read in `txn`, each with its own entity.
    func storedTargets(
        of id: ObjectID, _ relationship: Relationship, _ storage: EntityStorage, _ txn: ReadTransaction
    ) throws -> [ObjectID] {
        guard let database = storage.relationships[relationship.name] else { return [] }
        return try txn.withCursor(on: database) { try storedTargets(of: id, relationship, through: $0, txn) }
    }

    /// ``storedTargets(of:_:_:_:)`` through `cursor`, a cursor on the relationship's database: a caller reading
    /// the relationship of many objects, in key order, opens one.
    func storedTargets(
        of id: ObjectID, _ relationship: Relationship, through cursor: Cursor, _ txn: ReadTransaction
    ) throws -> [ObjectID] {
        var targets: [ObjectID] = []
        try withUnsafeBytes(of: id.primaryKey.bigEndian) { key in
            var entry = try cursor.seek(exactly: key)
            while let (_, value) = entry {
                let pk = try IndexKey.primaryKey(from: value)
                targets.append(try relatedID(pk, destination: relationship.destination, txn))
                entry = try cursor.nextDuplicate()
            }
        }
        return targets
    }

    /// The object of `destination`'s hierarchy with primary key `pk`: a relationship stores keys alone, and keys
    /// are unique in a hierarchy, so the entity holding the key is the object's. A key no entity holds (a dangling
    /// entry, which the integrity check reports) is named by the destination.
    func relatedID(_ pk: UInt64, destination: String, _ txn: ReadTransaction) throws -> ObjectID {
        guard hierarchies.hasFamily(destination) else { return ObjectID(entityName: destination, primaryKey: pk) }
        for name in hierarchies.concrete(destination) {
            guard let storage = storages[name] else { continue }
            if try txn.get(pk, in: storage.records) != nil { return ObjectID(entityName: name, primaryKey: pk) }
        }
        return ObjectID(entityName: destination, primaryKey: pk)
    }
}
