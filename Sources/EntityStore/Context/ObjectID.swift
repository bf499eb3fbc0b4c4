/// The identity of a stored object: its entity and its 64-bit primary key.
///
/// Object IDs are permanent from the moment an object is inserted (the key is reserved then), so they never change
/// at save and can cross threads and processes. The string form `Entity/p42` round-trips through
/// ``init(string:)``; ``PersistentStore/uri(for:)`` adds the store's identity.
public struct ObjectID: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The entity's name.
    public let entityName: String
    /// The primary key, unique within the entity; never 0.
    public let primaryKey: UInt64

    /// Creates an ID; it names an object only if the store has one with this key.
    public init(entityName: String, primaryKey: UInt64) {
        self.entityName = entityName
        self.primaryKey = primaryKey
    }

    /// Parses the string form `Entity/p42`.
    public init?(string: String) {
        guard let slash = string.lastIndex(of: "/") else { return nil }
        let entity = string[..<slash]
        let key = string[string.index(after: slash)...]
        guard !entity.isEmpty, key.first == "p", let number = UInt64(key.dropFirst()), number > 0 else { return nil }
        self.init(entityName: String(entity), primaryKey: number)
    }

    /// Equal IDs have equal primary keys and entities; the key is compared first, the name only on a tie.
    public static func == (lhs: ObjectID, rhs: ObjectID) -> Bool {
        lhs.primaryKey == rhs.primaryKey && lhs.entityName == rhs.entityName
    }

    /// Hashes the primary key only: IDs of several entities that share a key just compare their names, and the
    /// sets and dictionaries of the controller and the diff do not hash a string per object.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(primaryKey)
    }

    /// The hash the standard library's sets and dictionaries ask for, without running a `Hasher` (SipHash): a
    /// context's bookkeeping, the controller and the diff hash an ID many times per object, and SipHash was a
    /// seventh of an insert's instructions. The key, mixed with the table's seed, goes through a 64-bit finalizer
    /// (splitmix64's), so sequential keys spread over every bucket. Keys are the store's own, not an attacker's
    /// input, so the flooding resistance SipHash buys is not needed here.
    public func _rawHashValue(seed: Int) -> Int { mixedHash(primaryKey, seed: seed) }

    /// The string form: `Entity/p42`.
    public var description: String { "\(entityName)/p\(primaryKey)" }

    /// Orders by entity name, then primary key: the tie-breaker that makes every sort total.
    public static func < (lhs: ObjectID, rhs: ObjectID) -> Bool {
        lhs.entityName == rhs.entityName ? lhs.primaryKey < rhs.primaryKey : lhs.entityName < rhs.entityName
    }
}

/// `key` mixed with a table's seed through splitmix64's finalizer: a hash for the store's own keys, without a
/// `Hasher` (see ``ObjectID/_rawHashValue(seed:)``).
@inline(__always)
func mixedHash(_ key: UInt64, seed: Int) -> Int {
    var x = key ^ UInt64(bitPattern: Int64(seed))
    x = (x ^ (x >> 30)) &* 0xbf58_476d_1ce4_e5b9
    x = (x ^ (x >> 27)) &* 0x94d0_49bb_1331_11eb
    return Int(bitPattern: UInt(truncatingIfNeeded: x ^ (x >> 31)))
}

extension Sequence where Element == ObjectID {
    /// The IDs in order (entity name, then primary key): when they share one entity, as they usually do, by
    /// primary key alone, without comparing names.
    func sortedIDs() -> [ObjectID] {
        var ids = Array(self)
        guard let first = ids.first?.entityName else { return ids }
        if ids.allSatisfy({ $0.entityName == first }) {
            ids.sortByKey(\.primaryKey)
        } else {
            ids.sort()
        }
        return ids
    }
}

extension ObjectID: Codable {
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let id = ObjectID(string: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "bad object ID"))
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
