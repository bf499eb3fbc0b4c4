import LMDB

/// The named databases of a store.
///
/// - `meta`: format version, store ID, the schema and its history, primary-key sequences.
/// - `records.Entity`: 8-byte big-endian primary key → record (``RecordCodec``).
/// - `index.Entity.attribute` (DUPSORT): ``IndexKey`` of the value → primary key.
/// - `rel.Entity.relationship` (DUPSORT): source primary key → destination primary key. Both directions of every
///   relationship are stored, so either side is read with one lookup and inverses stay consistent in the same
///   write transaction. (DESIGN.md plans records to hold to-one keys; one layout for every kind of relationship
///   keeps inverse maintenance and delete rules uniform, and costs one put per direction.)
/// - `history`: transaction number → change entry (the observation issue).
enum StoreNames {
    static let meta = "meta"
    static let history = "history"
    static func records(_ entity: String) -> String { "records.\(entity)" }
    /// The records of `entity` a chunked migration stage has rewritten so far (new layout, new name).
    static func migrating(_ entity: String) -> String { "migrating.\(entity)" }
    static func index(_ entity: String, _ attribute: String) -> String { "index.\(entity).\(attribute)" }
    static func relationship(_ entity: String, _ name: String) -> String { "rel.\(entity).\(name)" }

    enum MetaKey {
        static let format = Array("format".utf8)
        static let storeID = Array("storeID".utf8)
        static let schema = Array("schema".utf8)
        static let schemaHistory = Array("schemaHistory".utf8)
        static let historySequence = Array("historySequence".utf8)
        /// The fingerprint of the schema the records are written in: a store opened with another one must not read
        /// or write them.
        static let schemaStamp = Array("schemaStamp".utf8)
        /// The format of index keys (``IndexKey/currentFormat``); missing in stores written before format 2.
        static let indexFormat = Array("indexFormat".utf8)
        /// Present while a migration's new or changed derived attributes wait to be computed for the stored objects
        /// (done when the store opens; a crash in between leaves it for the next open).
        static let derivationsPending = Array("derivationsPending".utf8)
        /// Present while a stage rewrites its objects in chunks (``Migration/Marker``), JSON.
        static let migrationInProgress = Array("migrationInProgress".utf8)
        /// The stages a plan ran (``PersistentStore/migrationLog()``), JSON.
        static let migrationLog = Array("migrationLog".utf8)
        static func sequence(_ entity: String) -> [UInt8] { Array("seq.\(entity)".utf8) }
        /// An app's metadata value (``PersistentStore/setMetadata(_:forKey:)``).
        static func metadata(_ key: String) -> [UInt8] { Array("app.\(key)".utf8) }
    }
}

/// The database handles of one entity (a class: fetches and faults pass it around, one retain instead of one per
/// field).
final class EntityStorage: Sendable {
    let entity: Entity
    /// The entity, shared by reference with every managed object of it.
    let entityBox: EntityBox
    let records: Database
    /// Index databases by attribute position.
    let indexes: [Int: Database]
    /// Relationship databases by relationship name.
    let relationships: [String: Database]
    /// The attributes' names in record order (one shared array for every change record of the entity).
    let attributeNames: [String]
    /// The indexed attributes, in record order, with what writing their keys needs (no `Attribute` copied per put).
    let indexList: [(position: Int, database: Database, caseInsensitive: Bool)]

    init(
        entity: Entity, records: Database, indexes: [Int: Database], relationships: [String: Database],
        attributeNames: [String]
    ) {
        self.entity = entity
        entityBox = EntityBox(entity)
        self.records = records
        self.indexes = indexes
        self.relationships = relationships
        self.attributeNames = attributeNames
        indexList = indexes.sorted { $0.key < $1.key }.map {
            ($0.key, $0.value, entity.attributes[$0.key].isCaseInsensitive)
        }
    }

    static func open(_ entity: Entity, in txn: ReadTransaction, create: Bool) throws -> EntityStorage {
        let records = try txn.openDatabase(StoreNames.records(entity.name), create: create)
        var indexes: [Int: Database] = [:]
        for (i, attribute) in entity.attributes.enumerated() where attribute.isIndexed {
            indexes[i] = try txn.openDatabase(
                StoreNames.index(entity.name, attribute.name), dupSort: true, create: create)
        }
        var relationships: [String: Database] = [:]
        for relationship in entity.relationships {
            relationships[relationship.name] = try txn.openDatabase(
                StoreNames.relationship(entity.name, relationship.name), dupSort: true, create: create)
        }
        return EntityStorage(
            entity: entity, records: records, indexes: indexes, relationships: relationships,
            attributeNames: entity.attributes.map(\.name))
    }

    /// The storage with the handles its opening transaction published (see ``Environment/published(_:)``).
    func published(in environment: Environment) -> EntityStorage {
        EntityStorage(
            entity: entity, records: environment.published(records),
            indexes: indexes.mapValues(environment.published),
            relationships: relationships.mapValues(environment.published),
            attributeNames: attributeNames)
    }
}

/// An entity held by reference: every managed object of a store's entity shares one (a copy per object was several
/// reference counts to take at each object's creation and to drop at its release, and most of the object's size).
final class EntityBox: Sendable {
    let entity: Entity
    /// The attributes' names in record order, shared by the change records of the entity's objects.
    let attributeNames: [String]
    /// Each attribute's name alone, in record order: the changed keys of an update of one attribute (the usual
    /// update), shared instead of made per change.
    let singleAttributeNames: [[String]]
    /// The attributes' default values in record order: a new object's values before any is set.
    let defaultValues: [Value]
    /// How the entity's format 2 records are laid out, for checking a fetched record in one pass.
    let recordLayout: RecordLayout
    /// The places of the attributes that must be unique (most entities have none).
    let uniqueAttributeIndices: [Int]
    /// The attributes whose default is made anew for each object, by place (most entities have none).
    let generatedDefaults: [(index: Int, generated: GeneratedDefault)]
    /// Each relationship, holding nothing: a new object's relationships, shared until it links (built per insert,
    /// the names were hashed twice and the tables grown for every new object).
    let emptyRelationships: RelationshipTargets

    init(_ entity: Entity) {
        self.entity = entity
        attributeNames = entity.attributes.map(\.name)
        singleAttributeNames = attributeNames.map { [$0] }
        defaultValues = entity.attributes.map(\.defaultValue)
        recordLayout = RecordLayout(entity)
        uniqueAttributeIndices = entity.attributes.indices.filter { entity.attributes[$0].isUnique }
        generatedDefaults = entity.attributes.indices.compactMap { index in
            entity.attributes[index].generatedDefault.map { (index, $0) }
        }
        emptyRelationships = RelationshipTargets(entity.relationships.map(\.name), each: [])
    }

    /// A new object's values: the defaults, and those made for it.
    func newValues() -> [Value] {
        var values = defaultValues.ownCopy()
        for (index, generated) in generatedDefaults { values[index] = generated.make() }
        return values
    }
}
