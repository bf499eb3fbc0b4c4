import Foundation

/// The type of an attribute's values.
public enum AttributeType: String, Codable, Sendable, CaseIterable {
    /// Booleans, 64-bit integers, doubles, strings, dates, binary data, UUIDs and decimals.
    case bool, int64, double, string, date, binary, uuid, decimal

    /// Booleans, integers, doubles and dates: one index key per value, ordered as the values are.
    var isScalar: Bool {
        switch self {
        case .bool, .int64, .double, .date: true
        case .string, .binary, .uuid, .decimal: false
        }
    }
}

/// A default made anew for each object: a new UUID, or the time the object is made.
public enum GeneratedDefault: String, Codable, Sendable, Hashable {
    /// A new random UUID, for a `uuid` attribute.
    case uuid
    /// The time the object is made (inserted, or, for an attribute added by a migration, migrated), for a `date`
    /// attribute.
    case now

    /// A new value.
    func make() -> Value {
        switch self {
        case .uuid: .uuid(UUID())
        case .now: .date(Date())
        }
    }

    /// The attribute type it makes values of.
    var type: AttributeType { self == .uuid ? .uuid : .date }
}

/// A typed attribute of an entity.
///
/// ```swift
/// Attribute("title", .string, indexed: true)
/// Attribute("rating", .int64, default: 3)
/// Attribute("id", .uuid, unique: true, generated: .uuid)   // a new UUID for each object
/// Attribute("created", .date, generated: .now)             // when each object was made
/// Attribute("nickname", .string, optional: true, renamedFrom: "alias")
/// Attribute("stars", .int64, default: 3, validation: .range(1, 5))
/// Attribute("bookCount", .int64, default: 0, indexed: true, derived: "books.@count")
/// ```
public struct Attribute: Codable, Sendable, Hashable {
    /// The attribute's name, unique in its entity.
    public var name: String
    /// The type of its values.
    public var type: AttributeType
    /// Whether the value may be nil.
    public var isOptional: Bool
    /// The value a new object starts with; `.null` for none.
    public var defaultValue: Value
    /// A default made anew for each object (a new UUID, the time it is made), instead of ``defaultValue``: for every
    /// insert (through a context, a batch insert, an import) and for the objects a migration adds the attribute to.
    public var generatedDefault: GeneratedDefault?
    /// Whether an index serves predicates and sorts on this attribute.
    public var isIndexed: Bool
    /// Whether no two objects of the entity may hold the same value (implies an index).
    public var isUnique: Bool
    /// Whether the index compares strings without case and diacritics.
    public var isCaseInsensitive: Bool
    /// The attribute's name in the previous schema version, for a rename migration.
    public var renamedFrom: String?
    /// Rules its values must follow (range, length, pattern), checked by every save; nil for none.
    public var validation: AttributeValidation?
    /// For a derived attribute, the expression its value is computed from at every save (Core Data's derived
    /// attributes): a key path (`"author.name"`), a to-many relationship's `@count` or `@sum`/`@avg`/`@min`/`@max` of an
    /// attribute (`"books.@sum.pages"`), `lowercase(keyPath)`, `uppercase(keyPath)` or `now()`. A derived attribute
    /// is stored and can be indexed; the app does not set it (``ManagedObject/setValue(_:forKey:)`` refuses). One
    /// read through a relationship is computed again inside the save's transaction from what the store then holds,
    /// so another context's concurrent links, a merge policy that keeps stored values, or a batch update or delete of
    /// the related objects never leaves it wrong (``PersistentStore/checkIntegrity(progress:)`` verifies it).
    public var derivation: String?
    /// Whether the attribute is transient: tracked by its context (changes, undo, events) but never stored. It
    /// lives in ``Entity/transientAttributes``, apart from the stored ones.
    public var isTransient: Bool { transientFlag == true }
    /// Stored as an optional so that schemas written before transient attributes existed still decode.
    var transientFlag: Bool?

    /// Declares an attribute.
    public init(
        _ name: String, _ type: AttributeType, optional: Bool = false, default defaultValue: Value = .null,
        indexed: Bool = false, unique: Bool = false, caseInsensitive: Bool = false, renamedFrom: String? = nil,
        validation: AttributeValidation? = nil, derived derivation: String? = nil, transient: Bool = false,
        generated: GeneratedDefault? = nil
    ) {
        self.transientFlag = transient ? true : nil
        self.generatedDefault = generated
        self.validation = validation
        self.derivation = derivation
        self.name = name
        self.type = type
        self.isOptional = optional
        self.defaultValue = defaultValue
        self.isIndexed = indexed || unique
        self.isUnique = unique
        self.isCaseInsensitive = caseInsensitive
        self.renamedFrom = renamedFrom
        normalizeNumbers()
    }
}

extension Attribute {
    /// Gives the default and the rules' bounds the attribute's numeric type where they convert exactly
    /// (``Value/converted(to:)``): `Attribute("rating", .double, default: 0)` means `0.0`. A value that does not
    /// convert is left as it is, for the schema's validation to name.
    mutating func normalizeNumbers() {
        if let converted = defaultValue.converted(to: type) { defaultValue = converted }
        if var rules = validation {
            if let minimum = rules.minimum, let converted = minimum.converted(to: type) { rules.minimum = converted }
            if let maximum = rules.maximum, let converted = maximum.converted(to: type) { rules.maximum = converted }
            validation = rules
        }
    }

    /// Whether a new object gets a value without one given: a default, or one made for it.
    var hasDefault: Bool { !defaultValue.isNull || generatedDefault != nil }

    /// The value a new object starts with: one made for it, or the default.
    func initialValue() -> Value { generatedDefault?.make() ?? defaultValue }

    /// The attribute with ``normalizeNumbers()`` applied.
    func normalizingNumbers() -> Attribute {
        var attribute = self
        attribute.normalizeNumbers()
        return attribute
    }
}

/// What happens to related objects when an object is deleted.
public enum DeleteRule: String, Codable, Sendable {
    /// Remove the deleted object from the related objects' inverse relationship.
    case nullify
    /// Delete the related objects too.
    case cascade
    /// Refuse the delete while the relationship holds any object.
    case deny
    /// Leave the related objects as they are (their inverse may point at a deleted object).
    case noAction
}

/// A relationship from an entity to another (or the same) entity.
///
/// ```swift
/// Relationship("books", to: "Book", inverse: "author", toMany: true, deleteRule: .cascade)
/// Relationship("author", to: "Author", inverse: "books")
/// ```
public struct Relationship: Codable, Sendable, Hashable {
    /// The relationship's name, unique among the entity's properties.
    public var name: String
    /// The entity it points to.
    public var destination: String
    /// The name of the inverse relationship on the destination.
    public var inverse: String
    /// Whether it holds several objects.
    public var isToMany: Bool
    /// What deleting the source does to the destination objects.
    public var deleteRule: DeleteRule
    /// Whether a to-one relationship may be nil (to-many relationships may always be empty).
    public var isOptional: Bool
    /// The relationship's name in the previous schema version, for a rename migration.
    public var renamedFrom: String?

    /// Declares a relationship.
    public init(
        _ name: String, to destination: String, inverse: String, toMany: Bool = false,
        deleteRule: DeleteRule = .nullify, optional: Bool = true, renamedFrom: String? = nil
    ) {
        self.name = name
        self.destination = destination
        self.inverse = inverse
        self.isToMany = toMany
        self.deleteRule = deleteRule
        self.isOptional = optional
        self.renamedFrom = renamedFrom
    }
}
