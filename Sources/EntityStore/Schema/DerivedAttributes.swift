import Foundation
import LMDB

/// How a derived attribute's value is computed (see ``Attribute/derivation``): parsed and checked against the schema.
///
/// The expression language is Core Data's for derived attributes, as far as it goes here:
/// - a key path to an attribute of the object or of an object reached through to-one relationships: `"author.name"`;
/// - a to-many relationship's `@count`, or `@sum`, `@avg`, `@min`, `@max` of one of its attributes:
///   `"books.@count"`, `"books.@sum.pages"`;
/// - `lowercase(keyPath)` and `uppercase(keyPath)` of a string key path;
/// - `now()`: when the object was last saved.
struct Derivation {
    enum Kind {
        case keyPath(ResolvedKeyPath)
        case lowercase(ResolvedKeyPath)
        case uppercase(ResolvedKeyPath)
        case now
    }

    let index: Int
    let attribute: Attribute
    let kind: Kind
    /// The entity whose attribute it is, and the expression as written (for errors).
    let entityName: String
    let text: String

    /// Whether the value is `now()`: the time of the save, which nothing else can compute again.
    var isNow: Bool { if case .now = kind { true } else { false } }

    /// The relationship the value is read through first, if any: changes on its other end recompute the value.
    var firstStep: Relationship? {
        switch kind {
        case .keyPath(let path), .lowercase(let path), .uppercase(let path): path.steps.first
        case .now: nil
        }
    }

    init(_ text: String, index: Int, of entity: Entity, in schema: Schema) throws {
        let attribute = entity.attributes[index]
        self.index = index
        self.attribute = attribute
        entityName = entity.name
        self.text = text
        func fail(_ message: String) -> EntityStoreError {
            EntityStoreError(
                .invalidSchema, "derived attribute \(entity.name).\(attribute.name): \(message)", entity: entity.name,
                key: attribute.name)
        }
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        func path(_ text: String) throws -> ResolvedKeyPath {
            let components = text.trimmingCharacters(in: .whitespaces).keyPathComponents
            guard !components.isEmpty else { throw fail("an empty key path") }
            do {
                return try ResolvedKeyPath.resolve(components, from: entity, in: schema)
            } catch let error as EntityStoreError {
                throw fail(error.message)
            }
        }
        func argument(of function: String) -> String? {
            guard trimmed.hasPrefix(function + "("), trimmed.hasSuffix(")") else { return nil }
            return String(trimmed.dropFirst(function.count + 1).dropLast())
        }
        if trimmed == "now()" {
            kind = .now
            guard attribute.type == .date else {
                throw fail("now() is a date; the attribute is \(attribute.type.withArticle)")
            }
        } else if let inner = argument(of: "lowercase") {
            kind = .lowercase(try path(inner))
        } else if let inner = argument(of: "uppercase") {
            kind = .uppercase(try path(inner))
        } else {
            kind = .keyPath(try path(trimmed))
        }
        guard let type = resultType else {
            throw fail("'\(text)' does not give a value (a relationship, or a key path through a to-many relationship)")
        }
        if case .lowercase = kind, type != .string { throw fail("lowercase() needs a string key path") }
        if case .uppercase = kind, type != .string { throw fail("uppercase() needs a string key path") }
        if type != attribute.type {
            throw fail("'\(text)' gives \(type.withArticle); the attribute is \(attribute.type.withArticle)")
        }
        if attribute.isUnique { throw fail("a derived attribute cannot be unique") }
    }

    /// The type of the computed value; nil when the expression gives none.
    private var resultType: AttributeType? {
        switch kind {
        case .now: return .date
        case .keyPath(let path), .lowercase(let path), .uppercase(let path):
            switch path.terminal {
            case .attribute(_, let attribute): return path.isToMany ? nil : attribute.type
            case .count: return path.isToMany ? nil : .int64
            case .collection(let function, _, let attribute):
                if path.isToMany { return nil }
                switch function {
                case .sum: return attribute.type == .decimal ? .decimal : attribute.type == .double ? .double : .int64
                case .avg: return attribute.type == .decimal ? .decimal : .double
                case .min, .max: return attribute.type
                }
            case .relationship, .object: return nil
            }
        }
    }

    /// The value for `subject`, saved at `now`.
    ///
    /// - Throws: ``EntityStoreError/Code/validationFailed`` when the value does not fit the attribute: a sum of
    ///   integers beyond 64 bits, or of decimals beyond what a decimal holds.
    func value<S: PredicateSubject>(_ subject: S, now: Date, of object: ObjectID? = nil) throws -> Value {
        let value = try computed(subject, now: now)
        // An int64 sum past 64 bits comes as a double, a decimal one as the NaN the store refuses.
        guard value.isNull || (value.type == attribute.type && value.storageProblem == nil) else {
            throw EntityStoreError(
                .validationFailed,
                "\(entityName).\(attribute.name): '\(text)' gives a value \(attribute.type.withArticle) cannot hold"
                    + " (it overflows)\(object.map { " for \($0)" } ?? "")", entity: entityName, key: attribute.name,
                objectID: object)
        }
        return value
    }

    private func computed<S: PredicateSubject>(_ subject: S, now: Date) throws -> Value {
        switch kind {
        case .now: return .date(now)
        case .keyPath(let path): return try CompiledPredicate.values(of: path, subject).first ?? .null
        case .lowercase(let path):
            guard case .string(let text) = try CompiledPredicate.values(of: path, subject).first else { return .null }
            return .string(text.lowercased())
        case .uppercase(let path):
            guard case .string(let text) = try CompiledPredicate.values(of: path, subject).first else { return .null }
            return .string(text.uppercased())
        }
    }

    /// The derived attributes of `entity`.
    static func all(of entity: Entity, in schema: Schema) throws -> [Derivation] {
        try entity.attributes.indices.compactMap { index in
            guard let text = entity.attributes[index].derivation else { return nil }
            return try Derivation(text, index: index, of: entity, in: schema)
        }
    }
}

extension PersistentStore {
    /// The derived attributes of the schema's entities (those that have any), parsed once per store: every save
    /// and batch asks.
    func derivations() throws -> [String: [Derivation]] {
        if let parsed = parsedDerivations.withLock({ $0 }) { return parsed }
        var derivations: [String: [Derivation]] = [:]
        for entity in schema.entities where entity.attributes.contains(where: { $0.derivation != nil }) {
            derivations[entity.name] = try Derivation.all(of: entity, in: schema)
        }
        parsedDerivations.withLock { $0 = derivations }
        return derivations
    }
}

extension ObjectContext {
    /// Computes the derived attributes of the objects a save stores: those that changed, and those whose derivations
    /// read through a relationship from an object that changed (one relationship away) and that the store still
    /// holds.
    func computeDerivedAttributes() throws {
        let derivations = try store.derivations()
        guard !derivations.isEmpty else { return }
        var objects: [ObjectID: ManagedObject] = [:]
        for object in dirty where !object.isDeleted && derivations[object.objectID.entityName] != nil {
            objects[object.objectID] = object
        }
        // Objects whose derivation reads through a relationship whose other end changed.
        var reachedOnly = Set<ObjectID>()
        for (entityName, list) in derivations {
            for derivation in list {
                guard let step = derivation.firstStep else { continue }
                for changed in dirty
                where changed.objectID.entityName == step.destination
                    || store.schema.isKind(changed.objectID.entityName, of: step.destination)
                {
                    guard let inverse = changed.entity.relationship(step.inverse) else { continue }
                    var owners = changed.isInserted ? [] : changed.committedRelated[inverse.name] ?? []
                    if !changed.isDeleted { owners.formUnion(try targets(of: changed, inverse)) }
                    for owner in owners where owner.entityName == entityName && objects[owner] == nil {
                        let object = try self.object(with: owner)
                        if !object.isDeleted {
                            objects[owner] = object
                            reachedOnly.insert(owner)
                        }
                    }
                }
            }
        }
        guard !objects.isEmpty else { return }
        let now = Date()
        try mappingStorageErrors("computing derived attributes") {
            try store.read { txn in
                let reader = FetchReader(txn: txn, store: store, context: self, includesPending: true)
                for id in objects.keys.sorted() {
                    guard let object = objects[id], let list = derivations[id.entityName] else { continue }
                    // One reached only through a relationship and deleted elsewhere since the context read it (a
                    // delete it has not merged) has nothing left to derive: the save leaves it alone. A fault is
                    // filled from this transaction's read, so that a delete committed meanwhile cannot fail it.
                    if reachedOnly.contains(id) {
                        if object.isFault {
                            guard let (record, rowVersion) = try storedRecord(of: id, in: txn) else { continue }
                            object.keep(record: record, rowVersion: rowVersion)
                        } else if try txn.get(id.primaryKey, in: try lastStorage(for: id.entityName).records) == nil {
                            continue
                        }
                    }
                    let values = try object.loadedValues()
                    for derivation in list {
                        let value = try derivation.value(
                            ContextSubject(object: object, reader: reader), now: now, of: id)
                        guard value != values[derivation.index] else { continue }
                        willChange(object, attribute: derivation.index)
                        object.values?[derivation.index] = value
                        dirty.insert(object)
                    }
                }
            }
        }
    }
}
