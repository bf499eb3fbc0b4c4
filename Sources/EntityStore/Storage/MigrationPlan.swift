import Foundation

/// The versions of an app's schema in order, and how to go from each to the next: what Core Data's staged
/// migration, SwiftData's `SchemaMigrationPlan`, Realm's migration block and GRDB's migrator do.
///
/// Open a store with ``PersistentStore/open(path:plan:options:)``. A store several versions behind runs every stage
/// from its version to the last schema's, in order, all in the one write transaction that opens it: when any stage
/// fails, nothing of any stage is kept and the store opens as it was with the next attempt. A stage that rewrites
/// more than ``chunkSize`` objects runs in chunks instead, resumable after a kill (<doc:Migration>).
///
/// Between two listed versions without a stage of their own the migration is lightweight. Old data is read with
/// the schema stored in the store (the listed schema of that version lends it its model classes, for typed reads,
/// when the two are the same).
///
/// <!-- snippet
/// uses: library
/// let v1 = try Schema(version: 1) { Entity("Person") { Attribute("name", .string) } }
/// let v2 = try Schema(version: 2) {
///     Entity("Person") {
///         Attribute("first", .string, default: "")
///         Attribute("last", .string, default: "")
///     }
/// }
/// -->
/// ```swift
/// let plan = MigrationPlan(
///     schemas: [v1, v2],
///     stages: [
///         .custom(
///             from: 1, to: 2, removing: [.attribute("name", of: "Person")],
///             transforms: [
///                 .init("Person") { old, new in
///                     guard case .string(let name) = old["name"] else { return }
///                     let parts = name.split(separator: " ", maxSplits: 1)
///                     try new.setValue(.string(parts.first.map(String.init) ?? ""), forKey: "first")
///                     try new.setValue(.string(parts.count > 1 ? String(parts[1]) : ""), forKey: "last")
///                 }
///             ])
///     ])
/// let store = try PersistentStore.open(path: "people.store", plan: plan)
/// ```
public struct MigrationPlan: Sendable {
    /// The schemas, oldest first; the last one is the schema the store opens with.
    public var schemas: [Schema]
    /// The stages between listed versions (lightweight where none is given).
    public var stages: [MigrationStage]
    /// Told how a migration goes, on the opening thread (see ``MigrationProgress``).
    public var progress: (@Sendable (MigrationProgress) -> Void)?

    /// A stage that rewrites more objects than this runs in chunks of this many objects, each its own
    /// transaction, and resumes where it stopped when its process dies (see <doc:Migration>).
    public var chunkSize: Int

    /// A plan over `schemas` (oldest first) with `stages`.
    public init(
        schemas: [Schema], stages: [MigrationStage] = [], chunkSize: Int = 100_000,
        progress: (@Sendable (MigrationProgress) -> Void)? = nil
    ) {
        self.schemas = schemas
        self.stages = stages
        self.chunkSize = chunkSize
        self.progress = progress
    }
}

/// How a store goes from one schema version to the next.
///
/// A stage runs in this order, inside the opening write transaction:
/// 1. `willMigrate`, with a context on the store in the old schema (read, fix, delete; its changes are saved
///    with the stage);
/// 2. the declared duplicate resolutions (``UniquenessResolution``), in the old schema;
/// 3. the structural change, object by object, each object's new values made from its old ones by the
///    lightweight rules and then by the entity's ``MigrationTransform``;
/// 4. `didMigrate`, with a context on the store in the new schema.
///
/// A throw anywhere (a closure's, or a save's inside one, even if the closure caught it) fails the migration,
/// and nothing of it is kept. When the store's map has to grow, the transaction starts over and the closures run
/// again: keep their effects inside the store.
public struct MigrationStage: Sendable {
    /// The version the stage starts from.
    public var fromVersion: Int
    /// The version the stage ends at.
    public var toVersion: Int
    /// What the stage may drop although it holds values (see ``MigrationRemoval``).
    public var removals: [MigrationRemoval]
    /// How to resolve stored duplicates of attributes the new schema makes unique.
    public var uniqueness: [UniquenessResolution]
    /// Per-object transforms, by entity of the new schema.
    public var transforms: [MigrationTransform]
    /// Retyped attributes the stage converts by itself (see ``AttributeConversion``).
    public var conversions: [AttributeConversion] = []
    /// Runs first, with a context in the old schema.
    public var willMigrate: (@Sendable (ObjectContext) throws -> Void)?
    /// Runs last, with a context in the new schema.
    public var didMigrate: (@Sendable (ObjectContext) throws -> Void)?

    /// Whether the stage runs custom code (a transform or a closure): it may retype attributes it transforms.
    public var isCustom: Bool { !transforms.isEmpty || willMigrate != nil || didMigrate != nil }

    /// A lightweight stage: the rules of an open without a plan, with the removals, duplicate resolutions and
    /// type conversions it declares.
    public static func lightweight(
        from: Int, to: Int, removing removals: [MigrationRemoval] = [],
        resolving uniqueness: [UniquenessResolution] = [], converting conversions: [AttributeConversion] = []
    ) -> MigrationStage {
        MigrationStage(
            fromVersion: from, toVersion: to, removals: removals, uniqueness: uniqueness, transforms: [],
            conversions: conversions, willMigrate: nil, didMigrate: nil)
    }

    /// A custom stage: Swift code over the old data and the new.
    ///
    /// An attribute whose type changed takes its initial value (its default, or nil) and the entity's transform
    /// sets it from the old value: a stage that retypes an attribute needs a transform for its entity.
    public static func custom(
        from: Int, to: Int, removing removals: [MigrationRemoval] = [],
        resolving uniqueness: [UniquenessResolution] = [], converting conversions: [AttributeConversion] = [],
        transforms: [MigrationTransform] = [], willMigrate: (@Sendable (ObjectContext) throws -> Void)? = nil,
        didMigrate: (@Sendable (ObjectContext) throws -> Void)? = nil
    ) -> MigrationStage {
        MigrationStage(
            fromVersion: from, toVersion: to, removals: removals, uniqueness: uniqueness, transforms: transforms,
            conversions: conversions, willMigrate: willMigrate, didMigrate: didMigrate)
    }
}

/// Stored values a stage drops on purpose. Without it, a migration that would drop an entity holding objects, an
/// attribute holding values or a relationship holding links is refused, naming what and how many.
public struct MigrationRemoval: Sendable, Hashable, CustomStringConvertible {
    /// The entity (of the old schema).
    public var entity: String
    /// The attribute or relationship (of the old schema); `nil` for the whole entity.
    public var key: String?

    /// An entity removed with its objects.
    public static func entity(_ name: String) -> MigrationRemoval { MigrationRemoval(entity: name, key: nil) }
    /// An attribute removed with its values.
    public static func attribute(_ name: String, of entity: String) -> MigrationRemoval {
        MigrationRemoval(entity: entity, key: name)
    }
    /// A relationship removed with its links.
    public static func relationship(_ name: String, of entity: String) -> MigrationRemoval {
        MigrationRemoval(entity: entity, key: name)
    }

    public var description: String { key.map { "\(entity).\($0)" } ?? entity }
}

/// How to resolve stored duplicates of an attribute a stage makes unique. Without one, such a migration is refused,
/// naming the duplicates.
public struct UniquenessResolution: Sendable {
    /// What to do with each group of objects sharing a value.
    public enum Rule: Sendable {
        /// Keep the object made first (the lowest primary key); delete the others.
        case keepFirst
        /// Keep the object made last (the highest primary key); delete the others.
        case keepNewest
        /// Keep the object made first, call the closure with it and each other one (to move what the other holds
        /// onto it, in the old schema), then delete the other.
        case merge(@Sendable (_ keeper: ManagedObject, _ duplicate: ManagedObject) throws -> Void)
    }

    /// The entity (of the new schema).
    public var entity: String
    /// The attribute made unique (of the new schema).
    public var attribute: String
    /// What to do.
    public var rule: Rule

    /// Resolves duplicates of `attribute` of `entity` (names of the new schema) by `rule`.
    public init(_ entity: String, _ attribute: String, by rule: Rule) {
        self.entity = entity
        self.attribute = attribute
        self.rule = rule
    }
}

/// A custom stage's code for each object of one entity: its new values from its old ones.
public struct MigrationTransform: Sendable {
    /// The entity, by its name in the new schema.
    public var entity: String
    /// Sets `new` (already holding what the lightweight rules give) from `old`.
    public var body: @Sendable (_ old: MigratingObject, _ new: inout MigratedValues) throws -> Void

    /// A transform of the objects of `entity` (its name in the new schema).
    public init(
        _ entity: String,
        _ body: @escaping @Sendable (_ old: MigratingObject, _ new: inout MigratedValues) throws -> Void
    ) {
        self.entity = entity
        self.body = body
    }
}

/// An object as stored before a stage, read by the old schema's keys.
public struct MigratingObject: Sendable {
    /// The object, with its entity's old name.
    public let objectID: ObjectID
    let entity: Entity
    let values: [Value]

    /// The value of attribute `key` of the old schema.
    ///
    /// - Throws: ``EntityStoreError/Code/unknownKey`` for a key the old entity does not have.
    public func value(forKey key: String) throws -> Value {
        guard let index = entity.attributeIndex(key) else {
            throw EntityStoreError(
                .unknownKey, "\(entity.name) had no attribute '\(key)' before the migration", entity: entity.name,
                key: key, objectID: objectID)
        }
        return values[index]
    }

    /// The value of attribute `key` of the old schema; `.null` for a key it does not have.
    public subscript(key: String) -> Value { entity.attributeIndex(key).map { values[$0] } ?? .null }
}

/// An object's values after a stage, set by the new schema's keys.
public struct MigratedValues: Sendable {
    /// The object, with its entity's new name.
    public let objectID: ObjectID
    let entity: Entity
    var values: [Value]

    /// The value of attribute `key` of the new schema, as the lightweight rules or the transform set it.
    public subscript(key: String) -> Value { entity.attributeIndex(key).map { values[$0] } ?? .null }

    /// Sets attribute `key` of the new schema; a number of the other numeric type is taken when it converts
    /// exactly.
    ///
    /// - Throws: ``EntityStoreError/Code/unknownKey`` for a key the new entity does not have,
    ///   ``EntityStoreError/Code/typeMismatch`` for a value of another type, ``EntityStoreError/Code/invalidValue``
    ///   for a derived attribute (computed by the store).
    public mutating func setValue(_ value: Value, forKey key: String) throws {
        guard let index = entity.attributeIndex(key) else {
            throw EntityStoreError(
                .unknownKey, "\(entity.name) has no attribute '\(key)' after the migration", entity: entity.name,
                key: key, objectID: objectID)
        }
        let attribute = entity.attributes[index]
        if let derivation = attribute.derivation {
            throw EntityStoreError(
                .invalidValue, "\(entity.name).\(key) is derived (\(derivation)): the store computes it",
                entity: entity.name, key: key, objectID: objectID)
        }
        guard let converted = value.converted(to: attribute.type) else {
            throw EntityStoreError(
                .typeMismatch, "\(entity.name).\(key) is \(attribute.type.withArticle); got \(value)",
                entity: entity.name, key: key, objectID: objectID)
        }
        values[index] = converted
    }
}

/// How a migration goes: reported at each stage's start and end and as its objects are rewritten.
public struct MigrationProgress: Sendable, Hashable {
    /// The stage (0-based) among ``stageCount``.
    public var stage: Int
    /// The number of stages this migration runs.
    public var stageCount: Int
    /// The stage's versions.
    public var fromVersion: Int
    /// The stage's versions.
    public var toVersion: Int
    /// The entity whose objects are being rewritten (`nil` between entities).
    public var entity: String?
    /// Objects rewritten so far in this stage.
    public var completed: Int
    /// Objects the stage rewrites.
    public var total: Int
}

/// One stage a store ran (``PersistentStore/migrationLog()``).
public struct MigrationLogEntry: Sendable, Hashable, Codable {
    /// The stage's versions.
    public var fromVersion: Int
    /// The stage's versions.
    public var toVersion: Int
    /// `lightweight` or `custom`.
    public var kind: String
    /// When it ran.
    public var date: Date
    /// How long it took, in seconds.
    public var seconds: Double
    /// The objects it rewrote.
    public var objects: Int
}

/// A retyped attribute a stage converts by itself, with what to do with a value that does not convert.
///
/// Conversions are exact: int64 ↔ double when the number survives, a number or a boolean ↔ its text, text → a
/// number, a boolean (`true`/`false`, `yes`/`no`, `1`/`0`), a UUID, a date (ISO 8601) or a decimal when it parses
/// whole, a UUID, a date (ISO 8601) or a decimal → text, int64 ↔ bool for 0 and 1, text ↔ binary as UTF-8. Nil stays
/// nil (or takes the default of a required attribute).
public struct AttributeConversion: Sendable, Hashable {
    /// What becomes of a value that does not convert.
    public enum Unconvertible: Sendable, Hashable {
        /// The migration is refused, listing the objects and values.
        case refuse
        /// The attribute's default (refused for a required attribute without one).
        case useDefault
        /// Nil (refused for a required attribute).
        case setNil
    }

    /// The entity (of the new schema).
    public var entity: String
    /// The attribute (of the new schema; its stored values are of the old type).
    public var attribute: String
    /// What becomes of a value that does not convert.
    public var unconvertible: Unconvertible

    /// Converts the stored values of `attribute` of `entity` (names of the new schema) to its new type.
    public init(_ entity: String, _ attribute: String, unconvertible: Unconvertible = .refuse) {
        self.entity = entity
        self.attribute = attribute
        self.unconvertible = unconvertible
    }
}
