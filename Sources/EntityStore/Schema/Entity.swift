/// A kind of object: its attributes (stored in the record, in order) and its relationships.
public struct Entity: Codable, Sendable, Equatable {
    /// The entity's name, unique in the schema.
    public var name: String
    /// The attributes, in storage order.
    public var attributes: [Attribute]
    /// The relationships.
    public var relationships: [Relationship]
    /// The entity's name in the previous schema version, for a rename migration.
    public var renamedFrom: String?
    /// Transient attributes: tracked by contexts, never stored (declared with `transient: true`).
    public var transientAttributes: [Attribute] {
        get { transients ?? [] }
        set { transients = newValue.isEmpty ? nil : newValue }
    }
    /// Stored as an optional so that schemas written before transient attributes existed still decode.
    var transients: [Attribute]?
    /// The entity this one inherits from (Core Data's superentity), or nil for a root. A sub-entity has its
    /// parent's attributes (first, in the parent's order) and relationships, besides its own; relationships to the
    /// parent accept its objects, and fetches of the parent include them (``FetchRequest/includesSubentities``).
    public var superentity: String? {
        get { parent }
        set { parent = newValue }
    }
    var parent: String?
    /// Whether the entity is abstract: it has no objects of its own (inserts are refused), only its sub-entities'.
    public var isAbstract: Bool {
        get { abstractFlag == true }
        set { abstractFlag = newValue ? true : nil }
    }
    /// Stored as an optional so that schemas written before inheritance existed still decode.
    var abstractFlag: Bool?

    /// Declares an entity with its properties.
    ///
    /// ```swift
    /// Entity("Book") {
    ///     Attribute("title", .string)
    ///     Relationship("author", to: "Author", inverse: "books")
    /// }
    /// Entity("Animal", abstract: true) {
    ///     Attribute("name", .string)
    /// }
    /// Entity("Dog", inherits: "Animal") {
    ///     Attribute("breed", .string, optional: true)
    /// }
    /// ```
    public init(
        _ name: String, inherits superentity: String? = nil, abstract: Bool = false, renamedFrom: String? = nil,
        @PropertyBuilder _ properties: () -> [Property] = { [] }
    ) {
        self.name = name
        self.renamedFrom = renamedFrom
        self.parent = superentity
        self.abstractFlag = abstract ? true : nil
        var attributes: [Attribute] = []
        var relationships: [Relationship] = []
        var transients: [Attribute] = []
        for property in properties() {
            switch property {
            case .attribute(let attribute) where attribute.isTransient: transients.append(attribute)
            case .attribute(let attribute): attributes.append(attribute)
            case .relationship(let relationship): relationships.append(relationship)
            }
        }
        self.attributes = attributes
        self.relationships = relationships
        self.transients = transients.isEmpty ? nil : transients
    }

    /// The attribute named `name`.
    public func attribute(_ name: String) -> Attribute? { attributes.first { $0.name == name } }

    /// The position of the attribute named `name` in the record.
    public func attributeIndex(_ name: String) -> Int? {
        // Through the buffer: each attribute's name is compared in place (no copy of the attribute per step; this
        // runs on every dynamic read and write by key).
        attributes.withUnsafeBufferPointer { buffer in
            // Names of the same length first: comparing the lengths is a few instructions, and a string comparison
            // that fails costs a call into the runtime. Then every name, for a canonically equivalent spelling of
            // another length ("e\u{301}" for "é").
            let length = name.utf8.count
            for i in buffer.indices where buffer[i].name.utf8.count == length && buffer[i].name == name { return i }
            for i in buffer.indices where buffer[i].name == name { return i }
            return nil
        }
    }

    /// Whether the attribute at `index` (any integer) is named `name`.
    func hasAttribute(named name: String, at index: Int) -> Bool {
        attributes.withUnsafeBufferPointer { buffer in
            // Through the element's address: `buffer[index].name` copies the whole attribute (retaining its strings).
            guard let base = buffer.baseAddress, buffer.indices.contains(index) else { return false }
            return (base + index).pointee.name == name
        }
    }

    /// The position of the transient attribute named `name`.
    func transientIndex(_ name: String) -> Int? { transients?.firstIndex { $0.name == name } }

    /// The relationship named `name`.
    public func relationship(_ name: String) -> Relationship? { relationships.first { $0.name == name } }
}

/// A property in an entity declaration.
public enum Property: Sendable {
    /// An attribute.
    case attribute(Attribute)
    /// A relationship.
    case relationship(Relationship)
}

/// Builds an entity's property list from `Attribute` and `Relationship` declarations.
@resultBuilder
public enum PropertyBuilder {
    /// An attribute declaration.
    public static func buildExpression(_ attribute: Attribute) -> [Property] { [.attribute(attribute)] }
    /// A relationship declaration.
    public static func buildExpression(_ relationship: Relationship) -> [Property] { [.relationship(relationship)] }
    /// Declarations in sequence.
    public static func buildBlock(_ parts: [Property]...) -> [Property] { parts.flatMap { $0 } }
    /// Declarations under an `if`.
    public static func buildOptional(_ part: [Property]?) -> [Property] { part ?? [] }
    /// The first branch of an `if`/`else`.
    public static func buildEither(first part: [Property]) -> [Property] { part }
    /// The second branch of an `if`/`else`.
    public static func buildEither(second part: [Property]) -> [Property] { part }
    /// Declarations from a `for` loop.
    public static func buildArray(_ parts: [[Property]]) -> [Property] { parts.flatMap { $0 } }
}

/// Builds a schema's entity list.
@resultBuilder
public enum EntityBuilder {
    /// An entity declaration.
    public static func buildExpression(_ entity: Entity) -> [Entity] { [entity] }
    /// Declarations in sequence.
    public static func buildBlock(_ parts: [Entity]...) -> [Entity] { parts.flatMap { $0 } }
    /// Declarations under an `if`.
    public static func buildOptional(_ part: [Entity]?) -> [Entity] { part ?? [] }
    /// The first branch of an `if`/`else`.
    public static func buildEither(first part: [Entity]) -> [Entity] { part }
    /// The second branch of an `if`/`else`.
    public static func buildEither(second part: [Entity]) -> [Entity] { part }
    /// Declarations from a `for` loop.
    public static func buildArray(_ parts: [[Entity]]) -> [Entity] { parts.flatMap { $0 } }
}
