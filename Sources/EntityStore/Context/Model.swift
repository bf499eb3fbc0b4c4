import Foundation

/// A Swift type that maps to one attribute type.
public protocol ValueConvertible {
    /// The attribute type values of this Swift type are stored as.
    static var attributeType: AttributeType { get }
    /// Whether the Swift type admits nil.
    static var isOptional: Bool { get }
    /// The value to show when the object's record cannot be read (it was deleted elsewhere).
    static var fallback: Self { get }
    /// Converts from a stored value; `nil` when the value is of another type.
    init?(value: Value)
    /// The stored value.
    var value: Value { get }
}

extension ValueConvertible {
    /// Non-optional by default.
    public static var isOptional: Bool { false }
}

extension String: ValueConvertible {
    public static var attributeType: AttributeType { .string }
    public static var fallback: String { "" }
    public init?(value: Value) { guard case .string(let v) = value else { return nil }; self = v }
    public var value: Value { .string(self) }
}

extension Int64: ValueConvertible {
    public static var attributeType: AttributeType { .int64 }
    public static var fallback: Int64 { 0 }
    public init?(value: Value) { guard case .int(let v) = value else { return nil }; self = v }
    public var value: Value { .int(self) }
}

extension Int: ValueConvertible {
    public static var attributeType: AttributeType { .int64 }
    public static var fallback: Int { 0 }
    public init?(value: Value) { guard case .int(let v) = value, let n = Int(exactly: v) else { return nil }; self = n }
    public var value: Value { .int(Int64(self)) }
}

extension Double: ValueConvertible {
    public static var attributeType: AttributeType { .double }
    public static var fallback: Double { 0 }
    public init?(value: Value) { guard case .double(let v) = value else { return nil }; self = v }
    public var value: Value { .double(self) }
}

extension Bool: ValueConvertible {
    public static var attributeType: AttributeType { .bool }
    public static var fallback: Bool { false }
    public init?(value: Value) { guard case .bool(let v) = value else { return nil }; self = v }
    public var value: Value { .bool(self) }
}

extension Date: ValueConvertible {
    public static var attributeType: AttributeType { .date }
    public static var fallback: Date { Date(timeIntervalSinceReferenceDate: 0) }
    public init?(value: Value) { guard case .date(let v) = value else { return nil }; self = v }
    public var value: Value { .date(self) }
}

extension Data: ValueConvertible {
    public static var attributeType: AttributeType { .binary }
    public static var fallback: Data { Data() }
    public init?(value: Value) { guard case .data(let v) = value else { return nil }; self = Data(v) }
    public var value: Value { .data(Array(self)) }
}

extension UUID: ValueConvertible {
    public static var attributeType: AttributeType { .uuid }
    public static var fallback: UUID { UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)) }
    public init?(value: Value) { guard case .uuid(let v) = value else { return nil }; self = v }
    public var value: Value { .uuid(self) }
}

extension Decimal: ValueConvertible {
    public static var attributeType: AttributeType { .decimal }
    public static var fallback: Decimal { 0 }
    public init?(value: Value) { guard case .decimal(let v) = value else { return nil }; self = v }
    public var value: Value { .decimal(self) }
}

extension Optional: ValueConvertible where Wrapped: ValueConvertible {
    public static var attributeType: AttributeType { Wrapped.attributeType }
    public static var isOptional: Bool { true }
    public static var fallback: Wrapped? { nil }
    public init?(value: Value) {
        if value.isNull {
            self = .none
        } else if let wrapped = Wrapped(value: value) {
            self = .some(wrapped)
        } else {
            return nil
        }
    }
    public var value: Value { self?.value ?? .null }
}

/// A typed model class over a ``ManagedObject``, for apps.
///
/// ```swift
/// final class Book: Model {
///     override class var entityName: String { "Book" }
///     @Stored("title") var title: String
///     @Stored("pages") var pages: Int64?
/// }
/// let book = try context.insert(Book.self)
/// book.title = "Dune"
/// ```
///
/// Every `@Stored` key is checked against the schema (name, type, optionality) the first time the class is used
/// with a store, so a typo fails at once with a clear error rather than on some later access. Property accessors
/// cannot throw: when the object's record cannot be read (it was deleted elsewhere) a getter returns the type's
/// fallback and ``lastError`` says why; a setter that cannot write (a deleted object, `Decimal.nan`) writes
/// nothing, sets ``lastError``, and makes the context's next ``ObjectContext/save()`` throw that error, so a lost
/// write cannot go unnoticed. Dynamic access throws instead.
open class Model {
    /// The managed object the model wraps.
    public let managedObject: ManagedObject
    /// The last error of a property accessor (which cannot throw).
    public internal(set) var lastError: EntityStoreError?

    /// Wraps a managed object (of the model's entity).
    public required init(managedObject: ManagedObject) {
        self.managedObject = managedObject
    }

    /// The entity the class maps to; the class's name by default.
    open class var entityName: String { String(describing: self) }

    /// The object's ID.
    public var objectID: ObjectID { managedObject.objectID }

    /// The `@Stored` keys of an instance with their Swift types.
    func storedProperties() -> [(key: String, type: AttributeType, optional: Bool)] {
        var result: [(String, AttributeType, Bool)] = []
        var mirror: Mirror? = Mirror(reflecting: self)
        while let current = mirror {
            for child in current.children {
                if let stored = child.value as? any StoredProperty {
                    result.append((stored.key, stored.attributeType, stored.isOptional))
                }
            }
            mirror = current.superclassMirror
        }
        return result
    }

    /// Checks the class's `@Stored` keys against `entity`.
    static func check(_ instance: Model, against entity: Entity) throws {
        let model = type(of: instance)
        var failures: [EntityStoreError.Failure] = []
        for (key, type, optional) in instance.storedProperties() {
            guard let attribute = entity.attribute(key) else {
                failures.append(
                    .init(
                        entity: entity.name, key: key,
                        message: "\(model) maps '\(key)', which \(entity.name) does not have"))
                continue
            }
            if attribute.type != type {
                failures.append(
                    .init(
                        entity: entity.name, key: key,
                        message: "\(model) maps a \(type.rawValue) to a \(attribute.type.rawValue)"))
            }
            if attribute.isOptional && !optional {
                failures.append(
                    .init(
                        entity: entity.name, key: key,
                        message: "\(model) maps an optional attribute to a non-optional type"))
            }
        }
        if !failures.isEmpty {
            throw EntityStoreError(
                .typeMismatch, failures.count == 1 ? failures[0].description : "\(model) does not match \(entity.name)",
                entity: entity.name, key: failures[0].key, failures: failures)
        }
    }
}

/// The type-erased view of `@Stored` the schema check reads.
protocol StoredProperty {
    var key: String { get }
    var attributeType: AttributeType { get }
    var isOptional: Bool { get }
}

/// An attribute of a ``Model`` subclass, read and written through the wrapped managed object.
@propertyWrapper
public struct Stored<T: ValueConvertible>: StoredProperty {
    /// The attribute's name.
    public let key: String

    /// Maps the property to the attribute `key`.
    public init(_ key: String) { self.key = key }

    var attributeType: AttributeType { T.attributeType }
    var isOptional: Bool { T.isOptional }

    @available(*, unavailable, message: "@Stored is only available on Model subclasses")
    public var wrappedValue: T {
        get { fatalError("unreachable: @Stored outside a Model") }
        set { fatalError("unreachable: @Stored outside a Model") }
    }

    public static subscript<Owner: Model>(
        _enclosingInstance owner: Owner, wrapped wrappedKeyPath: ReferenceWritableKeyPath<Owner, T>,
        storage storageKeyPath: ReferenceWritableKeyPath<Owner, Stored<T>>
    ) -> T {
        get {
            let key = owner[keyPath: storageKeyPath].key
            do {
                let value = try owner.managedObject.value(forKey: key)
                guard let typed = T(value: value) else {
                    owner.lastError = EntityStoreError(
                        .typeMismatch, "\(owner.managedObject.objectID).\(key) holds \(value), not a \(T.self)",
                        entity: owner.managedObject.entity.name, key: key, objectID: owner.managedObject.objectID)
                    return T.fallback
                }
                return typed
            } catch {
                owner.lastError = EntityStoreError.wrapping(error, "reading \(key)")
                return T.fallback
            }
        }
        set {
            let key = owner[keyPath: storageKeyPath].key
            do {
                try owner.managedObject.setValue(newValue.value, forKey: key)
            } catch {
                // A setter cannot throw: the failure is kept, and the context's next save throws it.
                let failure = EntityStoreError.wrapping(error, "setting \(key)")
                owner.lastError = failure
                owner.managedObject.context?.accessorFailures.append(failure)
            }
        }
    }
}

extension ObjectContext {
    /// Inserts a new object of a model class's entity and wraps it.
    /// - Throws: When the class's `@Stored` keys do not match the schema, or the entity is unknown.
    public func insert<M: Model>(_ type: M.Type) throws -> M {
        let model = M(managedObject: try insert(type.entityName))
        try checkModel(model)
        return model
    }

    /// The object for `id`, loaded and wrapped in a model class.
    public func existingObject<M: Model>(_ type: M.Type, with id: ObjectID) throws -> M {
        guard id.entityName == type.entityName else {
            throw EntityStoreError(
                .typeMismatch, "\(id) is not a \(type.entityName)", entity: id.entityName, objectID: id)
        }
        let model = M(managedObject: try existingObject(with: id))
        try checkModel(model)
        return model
    }

    /// Wraps a managed object of the model's entity.
    public func model<M: Model>(_ type: M.Type, for object: ManagedObject) throws -> M {
        guard object.entity.name == type.entityName else {
            throw EntityStoreError(
                .typeMismatch, "\(object.objectID) is not a \(type.entityName)", entity: object.entity.name,
                objectID: object.objectID)
        }
        let model = M(managedObject: object)
        try checkModel(model)
        return model
    }

    private func checkModel(_ model: Model) throws {
        let name = String(reflecting: type(of: model))
        if store.checkedModels.withLock({ $0.contains(name) }) { return }
        try Model.check(model, against: model.managedObject.entity)
        store.checkedModels.withLock { _ = $0.insert(name) }
    }
}
