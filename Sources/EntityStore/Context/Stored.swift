import Foundation

/// An option of a ``Stored`` attribute.
public enum StoredOption: Sendable, Hashable {
    /// Keep an index on the attribute (fetches and sorts by it use it).
    case indexed
    /// No two objects may hold the same value (implies an index).
    case unique
    /// Index and compare the attribute case-, diacritic- and width-insensitively (strings).
    case caseInsensitive
    /// The attribute's name in the previous schema version, for a rename migration.
    case renamedFrom(String)
}

/// An attribute of a ``Model`` subclass, read and written through the wrapped managed object.
///
/// ```swift
/// @Stored var title: String                              // key "title", required
/// @Stored var rank: Int = 0                               // the initial value is the default
/// @Stored(.unique, .caseInsensitive) var email: String?   // optional, unique without regard to case
/// @Stored("pages", .indexed) var pageCount: Int?          // an explicit key
/// ```
@propertyWrapper
public struct Stored<T: ValueConvertible>: ModelProperty {
    /// The key given explicitly, if any; the property's name otherwise.
    public let explicitKey: String?
    /// The options.
    public let options: [StoredOption]
    @usableFromInline let initialValue: T?

    /// An attribute keyed by the property's name, without options.
    @inlinable
    public init() {
        explicitKey = nil
        options = []
        initialValue = nil
    }

    /// An attribute keyed by the property's name.
    @inlinable
    public init(_ options: StoredOption...) {
        explicitKey = nil
        self.options = options
        initialValue = nil
    }

    /// An attribute with an explicit key.
    @inlinable
    public init(_ key: String, _ options: StoredOption...) {
        explicitKey = key
        self.options = options
        initialValue = nil
    }

    /// An attribute keyed by the property's name whose default is the initial value.
    @inlinable
    public init(wrappedValue: T, _ options: StoredOption...) {
        explicitKey = nil
        self.options = options
        initialValue = wrappedValue
    }

    /// An attribute with an explicit key whose default is the initial value.
    @inlinable
    public init(wrappedValue: T, _ key: String, _ options: StoredOption...) {
        explicitKey = key
        self.options = options
        initialValue = wrappedValue
    }

    @available(*, unavailable, message: "@Stored is only available on Model subclasses")
    public var wrappedValue: T {
        get { fatalError("unreachable: @Stored outside a Model") }
        set { fatalError("unreachable: @Stored outside a Model") }
    }

    @inlinable
    public static subscript<Owner: Model>(
        _enclosingInstance owner: Owner, wrapped wrappedKeyPath: ReferenceWritableKeyPath<Owner, T>,
        storage storageKeyPath: ReferenceWritableKeyPath<Owner, Stored<T>>
    ) -> T {
        get {
            let key = ModelKeys.key(of: owner, storageKeyPath)
            if let recorder = owner.managedObject.recorder {
                recorder.keys.append(key)
                return T.fallback
            }
            ModelObservation.access(owner, wrappedKeyPath)
            do {
                let value = try owner.managedObject.value(forKey: key)
                guard let typed = T(value: value) else {
                    owner.report(
                        EntityStoreError(
                            .typeMismatch, "\(owner.objectID).\(key) holds \(value), not \(T.self)",
                            entity: owner.managedObject.entity.name, key: key, objectID: owner.objectID),
                        "reading", key: key, write: false)
                    return T.fallback
                }
                return typed
            } catch {
                owner.report(error, "reading", key: key, write: false)
                return T.fallback
            }
        }
        set {
            let key = ModelKeys.key(of: owner, storageKeyPath)
            ModelObservation.mutation(owner, wrappedKeyPath) {
                do {
                    try owner.managedObject.setValue(newValue.value, forKey: key)
                } catch {
                    owner.report(error, "setting", key: key, write: true)
                }
            }
        }
    }

    @usableFromInline
    func declaration(key: String) -> Property {
        var renamedFrom: String?
        for case .renamedFrom(let name) in options { renamedFrom = name }
        return .attribute(
            Attribute(
                key, T.attributeType, optional: T.isOptional, default: initialValue?.value ?? .null,
                indexed: options.contains(.indexed), unique: options.contains(.unique),
                caseInsensitive: options.contains(.caseInsensitive), renamedFrom: renamedFrom))
    }

    @usableFromInline
    func mismatches(key: String, in entity: Entity, model: String) -> [EntityStoreError.Failure] {
        guard let attribute = entity.attribute(key) else {
            let hint = entity.relationship(key) != nil ? " as an attribute (it is a relationship)" : ""
            return [
                .init(
                    entity: entity.name, key: key,
                    message: "\(model) maps '\(key)', which \(entity.name) does not have\(hint)")
            ]
        }
        var failures: [EntityStoreError.Failure] = []
        if attribute.type != T.attributeType {
            failures.append(
                .init(
                    entity: entity.name, key: key,
                    message: "\(model) maps \(T.attributeType.withArticle) to \(attribute.type.withArticle)"))
        }
        if attribute.isOptional && !T.isOptional {
            failures.append(
                .init(
                    entity: entity.name, key: key,
                    message: "\(model) maps an optional attribute to a non-optional type"))
        }
        return failures
    }
}

extension AttributeType {
    /// The type's name with its article: "an int64", "a string".
    public var withArticle: String {
        let name = rawValue
        return (["a", "e", "i", "o", "u"].contains(name.prefix(1)) ? "an " : "a ") + name
    }
}
