import EntityStore
import Foundation

/// What of a schema syncs: the concrete entities that have the global ID attribute, their attributes (not
/// transient, not derived, not the ID), and one side of each relationship pair.
struct SyncPlan {
    struct SyncedEntity {
        var name: String
        var attributes: [Attribute]
        var relationships: [Relationship]
        var uniqueAttributes: [Attribute]
        /// The names of ``attributes`` and ``relationships``.
        var keys: Set<String>
    }

    let globalIDKey: String
    /// By entity name.
    let entities: [String: SyncedEntity]
    private let schema: Schema

    init(schema: Schema, globalIDKey: String) throws {
        self.schema = schema
        self.globalIDKey = globalIDKey
        var entities: [String: SyncedEntity] = [:]
        for entity in schema.entities where !entity.isAbstract {
            guard let id = entity.attribute(globalIDKey) else { continue }
            guard id.type == .uuid, id.isUnique, !id.isTransient else {
                throw SyncError(
                    .notSyncable,
                    "\(entity.name).\(globalIDKey) must be a unique, stored uuid attribute to carry global IDs "
                        + "(it is \(id.isTransient ? "transient " : "")\(id.isUnique ? "" : "not unique, ")"
                        + "\(id.type.withArticle))")
            }
            let attributes = entity.attributes.filter {
                $0.name != globalIDKey && !$0.isTransient && $0.derivation == nil
            }
            // Relationships whose destination (or one of its sub-entities) syncs; one side of each pair.
            let relationships = entity.relationships.filter { relationship in
                schema.entities.contains {
                    schema.isKind($0.name, of: relationship.destination) && $0.attribute(globalIDKey) != nil
                } && Self.isCanonical(relationship, in: schema)
            }
            entities[entity.name] = SyncedEntity(
                name: entity.name, attributes: attributes, relationships: relationships,
                uniqueAttributes: attributes.filter(\.isUnique),
                keys: Set(attributes.map(\.name) + relationships.map(\.name)))
        }
        guard !entities.isEmpty else {
            throw SyncError(
                .notSyncable,
                "no entity has a '\(globalIDKey)' attribute: give each entity that syncs a unique uuid attribute "
                    + "of that name (or name another one in the configuration's globalIDKey)")
        }
        self.entities = entities
    }

    /// Whether a relationship is the side of its pair that syncs (the other side follows through the inverse):
    /// the to-one side of a one-to-many; otherwise the side whose name (then owner's name) sorts first; both sides
    /// of a relationship that is its own inverse.
    static func isCanonical(_ relationship: Relationship, in schema: Schema) -> Bool {
        guard let inverse = schema.entity(relationship.destination)?.relationship(relationship.inverse) else {
            return true
        }
        if relationship.isToMany != inverse.isToMany { return !relationship.isToMany }
        if relationship.name != inverse.name { return relationship.name < inverse.name }
        // Same names: the side owned by the entity that sorts first (both sides when it is one relationship).
        return inverse.destination <= relationship.destination
    }

    /// Whether a relationship is its own inverse (`links` ↔ `links` on one entity): both its sides sync.
    func isSymmetric(_ relationship: Relationship) -> Bool {
        relationship.inverse == relationship.name
            && schema.entity(relationship.destination)?.relationship(relationship.inverse)?.destination
                == relationship.destination
    }

    /// The root of an entity's hierarchy (whose key sequence the hierarchy's objects share).
    func root(of entity: String) -> String {
        var root = entity
        while let parent = schema.entity(root)?.superentity { root = parent }
        return root
    }

    /// The entity whose objects share the uniqueness of `key` with objects of `entity`: the highest ancestor that
    /// has the attribute (uniqueness holds across a hierarchy).
    func uniquenessScope(of key: String, in entity: String) -> String {
        var scope = entity
        while let parent = schema.entity(scope)?.superentity, schema.entity(parent)?.attribute(key) != nil {
            scope = parent
        }
        return scope
    }
}

/// The server's tables, made on first use.
enum ServerSchema {
    /// The channel pushes notify (the payload is the zone).
    static let channel = "entitystore_sync"

    static func create(_ connection: PostgresConnection) throws {
        try connection.transaction {
            // Stores that start together must not race to create the same tables.
            try connection.execute("SELECT pg_advisory_xact_lock(72160001)")
            try connection.execute(
                """
                CREATE TABLE IF NOT EXISTS entitystore_stores (
                    zone text NOT NULL, store_id uuid NOT NULL, schema_version integer NOT NULL,
                    first_seen timestamptz NOT NULL DEFAULT now(), last_push timestamptz,
                    pushed_through bigint NOT NULL DEFAULT 0,
                    PRIMARY KEY (zone, store_id));
                CREATE TABLE IF NOT EXISTS entitystore_pushes (
                    zone text NOT NULL, store_id uuid NOT NULL, seq bigint NOT NULL, stamp bigint NOT NULL,
                    pushed_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (zone, store_id, seq));
                CREATE TABLE IF NOT EXISTS entitystore_objects (
                    zone text NOT NULL, gid uuid NOT NULL, entity text NOT NULL,
                    origin_store uuid, origin_key bigint, deleted_stamp bigint, deleted_by uuid,
                    PRIMARY KEY (zone, gid));
                CREATE TABLE IF NOT EXISTS entitystore_properties (
                    zone text NOT NULL, gid uuid NOT NULL, key text NOT NULL, value text,
                    stamp bigint NOT NULL, store_id uuid NOT NULL, schema_version integer NOT NULL,
                    PRIMARY KEY (zone, gid, key));
                CREATE TABLE IF NOT EXISTS entitystore_log (
                    id bigserial PRIMARY KEY, zone text NOT NULL, gid uuid NOT NULL, entity text NOT NULL,
                    store_id uuid NOT NULL, seq bigint, schema_version integer NOT NULL,
                    logged_at timestamptz NOT NULL DEFAULT now());
                CREATE INDEX IF NOT EXISTS entitystore_log_zone_id ON entitystore_log (zone, id);
                """)
        }
    }

    /// Serializes the pushes of a zone, so log entries become visible in the order of their IDs (a puller never
    /// passes an entry that commits later with a smaller ID).
    static func lockZone(_ connection: PostgresConnection, _ zone: String) throws {
        try connection.execute("SELECT pg_advisory_xact_lock(72160002, hashtext($1))", [zone])
    }
}

/// An object's state on the server: its entity, its delete, and each property's value, stamp and schema version.
struct ServerObject {
    struct Property {
        var text: String?
        var stamp: UInt64
        var version: Int
    }

    var entity: String
    /// The store that made the object and its key there (nil for an object first pushed by a store that had it
    /// from elsewhere, which does not happen in normal operation).
    var originStore: UUID?
    var originKey: UInt64?
    var deletedStamp: UInt64?
    var properties: [String: Property] = [:]

    var largestStamp: UInt64 { properties.values.reduce(deletedStamp ?? 0) { max($0, $1.stamp) } }

    func isDeleted(_ policy: SyncConfiguration.DeletePolicy) -> Bool {
        guard let deletedStamp else { return false }
        switch policy {
        case .deleteWins: return true
        case .newestWins: return properties.values.allSatisfy { $0.stamp < deletedStamp }
        }
    }

    static func read(_ ids: Set<UUID>, zone: String, _ connection: PostgresConnection) throws -> [UUID: ServerObject] {
        let rows = try connection.execute(
            """
            SELECT o.gid::text, o.entity, o.deleted_stamp, p.key, p.value, p.stamp, p.schema_version,
                o.origin_store::text, o.origin_key
            FROM entitystore_objects o
            LEFT JOIN entitystore_properties p ON p.zone = o.zone AND p.gid = o.gid
            WHERE o.zone = $1 AND o.gid = ANY($2::uuid[])
            """, [zone, postgresArray(ids.map(\.uuidString))]
        ).rows
        var objects: [UUID: ServerObject] = [:]
        for row in rows {
            guard let id = row[0].flatMap(UUID.init(uuidString:)), let entity = row[1] else {
                throw SyncError(.server, "entitystore_objects holds a row without an ID or entity: \(row)")
            }
            var object =
                objects[id]
                ?? ServerObject(
                    entity: entity, originStore: row[7].flatMap(UUID.init(uuidString:)),
                    originKey: row[8].flatMap { Int64($0) }.map { UInt64(bitPattern: $0) },
                    deletedStamp: row[2].flatMap { UInt64($0) })
            if let key = row[3], let stamp = row[5].flatMap({ UInt64($0) }), let version = row[6].flatMap({ Int($0) }) {
                object.properties[key] = Property(text: row[4], stamp: stamp, version: version)
            }
            objects[id] = object
        }
        return objects
    }
}

/// Global IDs derived from a store's ID and an object's key: 128 bits of two seeded 64-bit hashes (FNV-1a
/// finished by SplitMix64) of the store's ID, the entity hierarchy's root and the key, as a version-8 UUID.
enum GlobalID {
    static func derived(store: UUID, hierarchy: String, key: UInt64) -> UUID {
        var bytes: [UInt8] = withUnsafeBytes(of: store.uuid) { Array($0) }
        bytes += Array(hierarchy.utf8)
        bytes.append(0)
        withUnsafeBytes(of: key.littleEndian) { bytes += $0 }
        let high = hash(bytes, seed: 0x9E37_79B9_7F4A_7C15)
        let low = hash(bytes, seed: 0xC2B2_AE3D_27D4_EB4F)
        var uuid = [UInt8](repeating: 0, count: 16)
        for i in 0..<8 {
            uuid[i] = UInt8(truncatingIfNeeded: high >> (8 * UInt64(i)))
            uuid[8 + i] = UInt8(truncatingIfNeeded: low >> (8 * UInt64(i)))
        }
        uuid[6] = (uuid[6] & 0x0F) | 0x80  // version 8: custom
        uuid[8] = (uuid[8] & 0x3F) | 0x80  // RFC 4122 variant
        return UUID(
            uuid: (
                uuid[0], uuid[1], uuid[2], uuid[3], uuid[4], uuid[5], uuid[6], uuid[7], uuid[8], uuid[9], uuid[10],
                uuid[11], uuid[12], uuid[13], uuid[14], uuid[15]
            ))
    }

    private static func hash(_ bytes: [UInt8], seed: UInt64) -> UInt64 {
        var value = 0xCBF2_9CE4_8422_2325 ^ seed
        for byte in bytes {
            value ^= UInt64(byte)
            value &*= 0x0000_0100_0000_01B3
        }
        value ^= value >> 30
        value &*= 0xBF58_476D_1CE4_E5B9
        value ^= value >> 27
        value &*= 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}
