import Foundation

/// Codable bridging: a `Codable` type's fields are an object's attributes, by name.
///
/// <!-- snippet
/// uses: library
/// let store = try openLibrary()
/// let context = ObjectContext(store: store)
/// let dictionaries: [[String: Value]] = []
/// -->
/// ```swift
/// struct BookForm: Codable { var title: String; var pages: Int? }
/// let book = try context.insert("Book", from: BookForm(title: "Dune", pages: 412))
/// let form = try book.decode(BookForm.self)
/// let rows = try ValueCoding.decode([BookForm].self, from: dictionaries)   // dictionary results
/// ```
///
/// Only flat types map: each field is one attribute (`String`, integers, `Double`, `Bool`, `Date`, `Data`, `UUID`,
/// `Decimal`, optionals of those). A nested type or an array is refused with an error naming the field; a field the
/// entity does not have is ``EntityStoreError/Code/unknownKey``, a field of another type
/// ``EntityStoreError/Code/typeMismatch``: the errors of dynamic access.
public enum ValueCoding {
    /// The fields of `value` as attribute values.
    public static func encode(_ value: some Encodable) throws -> [String: Value] {
        let encoder = FieldEncoder()
        try value.encode(to: encoder)
        if let failure = encoder.failure { throw failure }
        return encoder.fields
    }

    /// A `Decodable` value from attribute values.
    public static func decode<T: Decodable>(_ type: T.Type, from fields: [String: Value]) throws -> T {
        do {
            return try T(from: FieldDecoder(fields: fields, entity: nil))
        } catch let error as DecodingError {
            throw EntityStoreError.decoding(error, entity: nil)
        }
    }

    /// `Decodable` values from dictionary results.
    public static func decode<T: Decodable>(_ type: [T].Type, from rows: [[String: Value]]) throws -> [T] {
        try rows.map { try decode(T.self, from: $0) }
    }
}

extension ManagedObject {
    /// Sets the attributes named by `value`'s fields (the others keep their values).
    ///
    /// - Throws: ``EntityStoreError/Code/unknownKey`` or ``EntityStoreError/Code/typeMismatch`` naming the field,
    ///   before anything is set.
    public func update(from value: some Encodable) throws {
        let fields = try ValueCoding.encode(value)
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            let index = try attributeIndex(key)
            if value.converted(to: entity.attributes[index].type) == nil {
                throw EntityStoreError(
                    .typeMismatch,
                    "\(entity.name).\(key) is \(entity.attributes[index].type.withArticle); got \(value)",
                    entity: entity.name, key: key, objectID: objectID)
            }
        }
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) { try setValue(value, forKey: key) }
    }

    /// The object's attributes as a `Decodable` value (fields by attribute name).
    ///
    /// - Throws: ``EntityStoreError/Code/unknownKey`` for a field the entity does not have,
    ///   ``EntityStoreError/Code/typeMismatch`` for one of another type.
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        var fields: [String: Value] = [:]
        let values = try loadedValues()
        for (i, attribute) in entity.attributes.enumerated() { fields[attribute.name] = values[i] }
        do {
            return try T(from: FieldDecoder(fields: fields, entity: entity.name))
        } catch let error as DecodingError {
            throw EntityStoreError.decoding(error, entity: entity.name, objectID: objectID)
        }
    }
}

extension Model {
    /// Sets the attributes named by `value`'s fields.
    public func update(from value: some Encodable) throws { try managedObject.update(from: value) }

    /// The model's attributes as a `Decodable` value.
    public func decode<T: Decodable>(_ type: T.Type) throws -> T { try managedObject.decode(type) }
}

extension ObjectContext {
    /// Inserts an object of `entityName` with the attributes named by `value`'s fields; nothing is inserted when a
    /// field does not fit. A nil field leaves a generated default (``GeneratedDefault``) as the insert made it.
    public func insert(_ entityName: String, from value: some Encodable) throws -> ManagedObject {
        let fields = try ValueCoding.encode(value)
        let entity = try store.storage(for: entityName).entity
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            guard let attribute = entity.attribute(key) else {
                throw EntityStoreError(
                    .unknownKey, "\(entityName) has no attribute '\(key)'", entity: entityName, key: key)
            }
            if value.converted(to: attribute.type) == nil {
                throw EntityStoreError(
                    .typeMismatch, "\(entityName).\(key) is \(attribute.type.withArticle); got \(value)",
                    entity: entityName, key: key)
            }
            if let problem = value.storageProblem {
                throw EntityStoreError(.invalidValue, "\(entityName).\(key): \(problem)", entity: entityName, key: key)
            }
        }
        let object = try insert(entityName)
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            // A nil field (an optional left out) keeps a generated default: the UUID or date the insert made.
            if value.isNull && entity.attribute(key)?.generatedDefault != nil { continue }
            try object.setValue(value, forKey: key)
        }
        return object
    }

    /// Inserts a model with the attributes named by `value`'s fields.
    public func insert<M: Model>(_ type: M.Type, from value: some Encodable) throws -> M {
        try wrapInserted(try insert(try checkModel(type), from: value), as: type)
    }
}

extension EntityStoreError {
    static func decoding(_ error: DecodingError, entity: String?, objectID: ObjectID? = nil) -> EntityStoreError {
        let what = entity ?? "the values"
        switch error {
        case .keyNotFound(let key, _):
            return EntityStoreError(
                .unknownKey, "\(what) has no attribute '\(key.stringValue)'", entity: entity, key: key.stringValue,
                objectID: objectID)
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            let key = context.codingPath.last?.stringValue
            return EntityStoreError(
                .typeMismatch, "\(what)\(key.map { ".\($0)" } ?? ""): \(context.debugDescription)", entity: entity,
                key: key, objectID: objectID)
        @unknown default:
            return EntityStoreError(.typeMismatch, "\(what): \(error)", entity: entity, objectID: objectID)
        }
    }
}

// MARK: - The encoder

/// Encodes a flat type's fields into attribute values.
final class FieldEncoder: Encoder {
    var fields: [String: Value] = [:]
    var failure: EntityStoreError?
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] = [:]

    func fail(_ message: String, key: String?) {
        if failure == nil { failure = EntityStoreError(.typeMismatch, message, key: key) }
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(FieldEncodingContainer<Key>(encoder: self))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        fail("only a type with named fields maps to an object, not a list", key: nil)
        return RefusingUnkeyedContainer()
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        fail("only a type with named fields maps to an object, not a single value", key: nil)
        return RefusingSingleValueContainer()
    }
}

struct FieldEncodingContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let encoder: FieldEncoder
    var codingPath: [any CodingKey] { [] }

    func put(_ value: Value, _ key: Key) { encoder.fields[key.stringValue] = value }

    mutating func encodeNil(forKey key: Key) throws { put(.null, key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: String, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: Float, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: Int, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { put(value.value, key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws {
        guard let exact = Int64(exactly: value) else {
            return encoder.fail("\(key.stringValue): \(value) does not fit an int64", key: key.stringValue)
        }
        put(.int(exact), key)
    }
    mutating func encode(_ value: UInt64, forKey key: Key) throws {
        guard let exact = Int64(exactly: value) else {
            return encoder.fail("\(key.stringValue): \(value) does not fit an int64", key: key.stringValue)
        }
        put(.int(exact), key)
    }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        if let convertible = value as? any ValueConvertible {
            put(convertible.value, key)
        } else {
            encoder.fail(
                "\(key.stringValue): a \(T.self) is not one attribute value (nested values are not stored; use a"
                    + " relationship)", key: key.stringValue)
        }
    }
    // A nil optional clears the attribute (the default implementations would leave it out).
    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws {
        guard let value else { return put(.null, key) }
        try encode(value, forKey: key)
    }
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: Float?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: Int8?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: Int16?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: UInt?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: UInt8?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: UInt16?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type, forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        encoder.fail("\(key.stringValue): nested values are not stored; use a relationship", key: key.stringValue)
        return KeyedEncodingContainer(FieldEncodingContainer<NestedKey>(encoder: FieldEncoder()))
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        encoder.fail("\(key.stringValue): lists are not stored; use a to-many relationship", key: key.stringValue)
        return RefusingUnkeyedContainer()
    }
    mutating func superEncoder() -> any Encoder { encoder }
    mutating func superEncoder(forKey key: Key) -> any Encoder { encoder }
}

/// Swallows what a refused container is given: the encoder already holds the failure it reports.
struct RefusingUnkeyedContainer: UnkeyedEncodingContainer {
    var codingPath: [any CodingKey] { [] }
    var count: Int { 0 }
    mutating func encodeNil() throws {}
    mutating func encode<T: Encodable>(_ value: T) throws {}
    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type
    ) -> KeyedEncodingContainer<
        NestedKey
    > {
        KeyedEncodingContainer(FieldEncodingContainer<NestedKey>(encoder: FieldEncoder()))
    }
    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { self }
    mutating func superEncoder() -> any Encoder { FieldEncoder() }
}

/// A single-value container of a refused encoding (see ``RefusingUnkeyedContainer``).
struct RefusingSingleValueContainer: SingleValueEncodingContainer {
    var codingPath: [any CodingKey] { [] }
    mutating func encodeNil() throws {}
    mutating func encode<T: Encodable>(_ value: T) throws {}
}

// MARK: - The decoder

/// Decodes a flat type's fields from attribute values.
struct FieldDecoder: Decoder {
    let fields: [String: Value]
    let entity: String?
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(FieldDecodingContainer<Key>(fields: fields))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch(
            [Any].self, .init(codingPath: [], debugDescription: "an object decodes into a type with named fields"))
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        throw DecodingError.typeMismatch(
            Any.self, .init(codingPath: [], debugDescription: "an object decodes into a type with named fields"))
    }
}

struct FieldDecodingContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let fields: [String: Value]
    var codingPath: [any CodingKey] { [] }
    var allKeys: [Key] { fields.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { fields[key.stringValue] != nil }

    func value(_ key: Key) throws -> Value {
        guard let value = fields[key.stringValue] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: [key], debugDescription: "no such attribute"))
        }
        return value
    }

    func typed<T: ValueConvertible>(_ type: T.Type, _ key: Key) throws -> T {
        let value = try value(key)
        guard let typed = T(value: value) else {
            throw DecodingError.typeMismatch(
                T.self, .init(codingPath: [key], debugDescription: "holds \(value), not \(T.self)"))
        }
        return typed
    }

    func decodeNil(forKey key: Key) throws -> Bool { try value(key).isNull }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try typed(type, key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try typed(type, key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try typed(type, key) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try typed(type, key) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try typed(type, key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try typed(type, key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try typed(type, key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try typed(type, key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try typed(type, key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try typed(type, key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try typed(type, key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try typed(type, key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt {
        guard let value = UInt(exactly: try typed(Int64.self, key)) else {
            throw DecodingError.typeMismatch(type, .init(codingPath: [key], debugDescription: "negative"))
        }
        return value
    }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 {
        guard let value = UInt64(exactly: try typed(Int64.self, key)) else {
            throw DecodingError.typeMismatch(type, .init(codingPath: [key], debugDescription: "negative"))
        }
        return value
    }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard let convertible = T.self as? any ValueConvertible.Type else {
            throw DecodingError.typeMismatch(
                T.self,
                .init(
                    codingPath: [key],
                    debugDescription: "a \(T.self) is not one attribute value (nested values are not stored)"))
        }
        let value = try value(key)
        guard let typed = convertible.init(value: value) as? T else {
            throw DecodingError.typeMismatch(
                T.self, .init(codingPath: [key], debugDescription: "holds \(value), not \(T.self)"))
        }
        return typed
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type, forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        throw DecodingError.typeMismatch(
            type, .init(codingPath: [key], debugDescription: "nested values are not stored; use a relationship"))
    }
    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch(
            [Any].self, .init(codingPath: [key], debugDescription: "lists are not stored; use a to-many relationship"))
    }
    func superDecoder() throws -> any Decoder { FieldDecoder(fields: fields, entity: nil) }
    func superDecoder(forKey key: Key) throws -> any Decoder { FieldDecoder(fields: fields, entity: nil) }
}
