/// The declared shape of a store: its entities and a version number.
///
/// ```swift
/// let schema = try Schema(version: 1) {
///     Entity("Author") {
///         Attribute("name", .string, indexed: true)
///         Relationship("books", to: "Book", inverse: "author", toMany: true, deleteRule: .cascade)
///     }
///     Entity("Book") {
///         Attribute("title", .string)
///         Relationship("author", to: "Author", inverse: "books")
///     }
/// }
/// ```
///
/// The declaration is validated when it is made: duplicate names, an unknown destination or inverse, an inverse
/// that does not point back, a default of the wrong type and the like are all reported at once.
public struct Schema: Codable, Sendable, Equatable {
    /// The version: raise it with every change; the store keeps the history of versions.
    public var version: Int
    /// The entities. A list changed after the schema was made is validated, and its sub-entities given their
    /// superentities' properties, when a store opens with the schema.
    public var entities: [Entity]
    /// The model classes a schema made from models maps its entities to (not stored, not compared): a fetch of a
    /// superentity wraps each object in its own entity's class.
    var modelClasses: ModelClasses?

    private enum CodingKeys: String, CodingKey {
        case version, entities
    }

    /// Equal schemas have the same version and entities (the model classes they were made from do not count).
    public static func == (lhs: Schema, rhs: Schema) -> Bool {
        lhs.version == rhs.version && lhs.entities == rhs.entities
    }

    /// Declares and validates a schema.
    /// - Throws: ``EntityStoreError`` with code ``EntityStoreError/Code/invalidSchema`` listing every problem.
    public init(version: Int, @EntityBuilder _ entities: () -> [Entity]) throws {
        try self.init(version: version, entities: entities())
    }

    /// Validates and wraps an entity list; sub-entities get their superentity's properties (see
    /// ``Entity/superentity``).
    public init(version: Int, entities: [Entity]) throws {
        self.version = version
        // Attributes may have been changed since they were declared: their numbers are given their types again.
        let entities = entities.map { entity in
            var entity = entity
            entity.attributes = entity.attributes.map { $0.normalizingNumbers() }
            entity.transientAttributes = entity.transientAttributes.map { $0.normalizingNumbers() }
            return entity
        }
        let (resolved, failures) = Self.resolvingInheritance(entities)
        self.entities = resolved
        try validate(inheritanceFailures: failures)
    }

    /// This schema made again from its entities: validated, and its sub-entities given their superentities'
    /// properties (an entity list changed after the schema was made has had neither).
    func validatedAgain() throws -> Schema {
        var schema = try Schema(version: version, entities: entities)
        schema.modelClasses = modelClasses
        return schema
    }

    /// The entity named `name`.
    public func entity(_ name: String) -> Entity? { entities.first { $0.name == name } }

    /// A fingerprint of the schema's structure (names, types, options, relationships; not the version or the
    /// rename hints): equal fingerprints need no migration.
    public var fingerprint: String {
        var text = ""
        for entity in entities.sorted(by: { $0.name < $1.name }) {
            text += "E\(entity.name){"
            if let parent = entity.parent { text += "<\(parent)" }
            if entity.isAbstract { text += "!abstract" }
            for a in entity.attributes {
                text += "A\(a.name):\(a.type.rawValue):\(a.isOptional):\(a.defaultValue):\(a.isIndexed)"
                text += ":\(a.isUnique):\(a.isCaseInsensitive)"
                if let derivation = a.derivation { text += ":=\(derivation)" }
                if let generated = a.generatedDefault { text += ":gen=\(generated.rawValue)" }
                text += ";"
            }
            for r in entity.relationships.sorted(by: { $0.name < $1.name }) {
                text += "R\(r.name):\(r.destination):\(r.inverse):\(r.isToMany):\(r.deleteRule.rawValue)"
                text += ":\(r.isOptional);"
            }
            text += "}"
        }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    func validate(inheritanceFailures: [EntityStoreError.Failure] = []) throws {
        var failures = inheritanceFailures
        if version < 1 { failures.append(.init(message: "the schema version must be at least 1, not \(version)")) }
        var entityNames = Set<String>()
        for entity in entities {
            if !isValidName(entity.name) {
                failures.append(.init(entity: entity.name, message: "'\(entity.name)' is not a valid entity name"))
            }
            if !entityNames.insert(entity.name).inserted {
                failures.append(.init(entity: entity.name, message: "duplicate entity name '\(entity.name)'"))
            }
            var propertyNames = Set<String>()
            // Stored and transient attributes share names, defaults and rules checks; transient ones cannot be
            // indexed, unique, derived or validated (nothing of theirs is stored or saved).
            for attribute in entity.attributes + entity.transientAttributes {
                let name = attribute.name
                if attribute.isTransient
                    && (attribute.isIndexed || attribute.derivation != nil || attribute.validation != nil)
                {
                    failures.append(
                        .init(
                            entity: entity.name, key: name,
                            message: "a transient attribute cannot be indexed, unique, derived or validated"))
                }
                if !isValidName(name) {
                    failures.append(.init(entity: entity.name, key: name, message: "'\(name)' is not a valid name"))
                }
                if !propertyNames.insert(name).inserted {
                    failures.append(.init(entity: entity.name, key: name, message: "duplicate property name '\(name)'"))
                }
                if let type = attribute.defaultValue.type, type != attribute.type {
                    failures.append(
                        .init(
                            entity: entity.name, key: name,
                            message: "the default \(attribute.defaultValue) is \(type.withArticle), not"
                                + " \(attribute.type.withArticle)"))
                }
                if let generated = attribute.generatedDefault {
                    if generated.type != attribute.type {
                        failures.append(
                            .init(
                                entity: entity.name, key: name,
                                message:
                                    "a generated \(generated.rawValue) default is for \(generated.type.withArticle)"
                                    + " attribute, not \(attribute.type.withArticle)"))
                    }
                    if !attribute.defaultValue.isNull || attribute.derivation != nil {
                        failures.append(
                            .init(
                                entity: entity.name, key: name,
                                message: "a generated default cannot go with a default value or a derivation"))
                    }
                }
                if let problem = attribute.defaultValue.storageProblem {
                    failures.append(.init(entity: entity.name, key: name, message: "the default: \(problem)"))
                }
                for problem in attribute.validation?.problems(for: attribute.type) ?? [] {
                    failures.append(.init(entity: entity.name, key: name, message: "validation: \(problem)"))
                }
                if let validation = attribute.validation,
                    let problem = validation.problem(with: attribute.defaultValue),
                    validation.problems(for: attribute.type).isEmpty
                {
                    failures.append(
                        .init(entity: entity.name, key: name, message: "the default breaks its rules: \(problem)"))
                }
                if attribute.isCaseInsensitive && attribute.type != .string {
                    failures.append(
                        .init(entity: entity.name, key: name, message: "only string attributes can be case-insensitive")
                    )
                }
            }
            for relationship in entity.relationships {
                let name = relationship.name
                if !isValidName(name) {
                    failures.append(.init(entity: entity.name, key: name, message: "'\(name)' is not a valid name"))
                }
                if !propertyNames.insert(name).inserted {
                    failures.append(.init(entity: entity.name, key: name, message: "duplicate property name '\(name)'"))
                }
                guard let destination = entities.first(where: { $0.name == relationship.destination }) else {
                    failures.append(
                        .init(
                            entity: entity.name, key: name,
                            message: "unknown destination entity '\(relationship.destination)'"))
                    continue
                }
                guard let inverse = destination.relationship(relationship.inverse) else {
                    failures.append(
                        .init(
                            entity: entity.name, key: name,
                            message: "unknown inverse '\(relationship.inverse)' on '\(destination.name)'"))
                    continue
                }
                // An inherited relationship's inverse points back to the entity that declared it (an ancestor).
                if !isKind(entity.name, of: inverse.destination) || inverse.inverse != name {
                    failures.append(
                        .init(
                            entity: entity.name, key: name,
                            message: "the inverse '\(destination.name).\(inverse.name)' does not point back to"
                                + " '\(entity.name).\(name)'"))
                }
            }
        }
        if failures.isEmpty {
            // Derivations resolve key paths through the schema: checked once the rest holds.
            for entity in entities {
                for index in entity.attributes.indices where entity.attributes[index].derivation != nil {
                    do {
                        _ = try Derivation(entity.attributes[index].derivation!, index: index, of: entity, in: self)
                    } catch let error as EntityStoreError {
                        failures.append(
                            .init(entity: entity.name, key: entity.attributes[index].name, message: error.message))
                    }
                }
            }
        }
        if !failures.isEmpty {
            let summary = failures.count == 1 ? failures[0].description : "\(failures.count) problems in the schema"
            throw EntityStoreError(.invalidSchema, summary, failures: failures)
        }
    }

    private func isValidName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first.properties.isAlphabetic || first == "_" else {
            return false
        }
        return name.unicodeScalars.allSatisfy { $0.properties.isAlphabetic || $0 == "_" || ("0"..."9").contains($0) }
            && name.utf8.count <= 128
    }
}
