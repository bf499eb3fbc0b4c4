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
    case renamedFrom(StaticString)
    /// Rules the values must follow, checked by every save: `.validated(.range(1, 5))`, `.validated(.length(1...80))`,
    /// `.validated(.pattern("[A-Z]{3}"))` (see ``AttributeValidation``).
    case validated(AttributeValidation)
    /// A derived attribute: computed at every save from the expression (see ``Attribute/derivation``), e.g.
    /// `@Stored(.derived("tickets.@count")) var ticketCount: Int = 0`.
    case derived(StaticString)
    /// A transient attribute: tracked by the context (changes, undo, events), never stored.
    case transient

    public static func == (lhs: StoredOption, rhs: StoredOption) -> Bool {
        switch (lhs, rhs) {
        case (.indexed, .indexed), (.unique, .unique), (.caseInsensitive, .caseInsensitive), (.transient, .transient):
            true
        case (.renamedFrom(let a), .renamedFrom(let b)): a.description == b.description
        case (.validated(let a), .validated(let b)): a == b
        case (.derived(let a), .derived(let b)): a.description == b.description
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .indexed: hasher.combine(0)
        case .unique: hasher.combine(1)
        case .caseInsensitive: hasher.combine(2)
        case .transient: hasher.combine(3)
        case .renamedFrom(let name): hasher.combine(name.description)
        case .validated(let rules): hasher.combine(rules)
        case .derived(let expression): hasher.combine(expression.description)
        }
    }
}

/// A wrapper's rarer options (rename source, rules, derivation), boxed: only wrappers given one carry the box.
@usableFromInline
final class StoredExtras: Sendable {
    let renamedFrom: StaticString?
    let validation: AttributeValidation?
    let derivation: StaticString?
    @usableFromInline
    init(renamedFrom: StaticString?, validation: AttributeValidation?, derivation: StaticString?) {
        self.renamedFrom = renamedFrom
        self.validation = validation
        self.derivation = derivation
    }
}

/// A ``Stored`` wrapper's options, packed: what a model instance carries per attribute (wrappers are made with
/// every instance, so they are small and hold at most one reference: the extras, when given).
@usableFromInline
struct StoredOptions: Sendable {
    @usableFromInline let flags: UInt8
    @usableFromInline let extras: StoredExtras?

    /// No options.
    @inlinable
    init() {
        flags = 0
        extras = nil
    }

    @inlinable
    init(_ options: [StoredOption]) {
        var flags: UInt8 = 0
        var renamedFrom: StaticString?
        var validation: AttributeValidation?
        var derivation: StaticString?
        for option in options {
            switch option {
            case .indexed: flags |= 1
            case .unique: flags |= 2
            case .caseInsensitive: flags |= 4
            case .transient: flags |= 8
            case .renamedFrom(let name): renamedFrom = name
            case .validated(let rules): validation = rules
            case .derived(let expression): derivation = expression
            }
        }
        self.flags = flags
        extras =
            renamedFrom == nil && validation == nil && derivation == nil
            ? nil : StoredExtras(renamedFrom: renamedFrom, validation: validation, derivation: derivation)
    }

    var renamedFrom: StaticString? { extras?.renamedFrom }
    var validation: AttributeValidation? { extras?.validation }
    var derivation: StaticString? { extras?.derivation }

    var list: [StoredOption] {
        var list: [StoredOption] = []
        if flags & 1 != 0 { list.append(.indexed) }
        if flags & 2 != 0 { list.append(.unique) }
        if flags & 4 != 0 { list.append(.caseInsensitive) }
        if flags & 8 != 0 { list.append(.transient) }
        if let renamedFrom { list.append(.renamedFrom(renamedFrom)) }
        if let validation { list.append(.validated(validation)) }
        if let derivation { list.append(.derived(derivation)) }
        return list
    }
}

/// An attribute of a ``Model`` subclass, read and written through the wrapped managed object.
///
/// ```swift
/// @Stored var title: String                              // key "title", required
/// @Stored var rank: Int = 0                               // the initial value is the default
/// @Stored(.unique, .caseInsensitive) var email: String?   // optional, unique without regard to case
/// @Stored("pages", .indexed) var pageCount: Int?          // an explicit key
/// ```
///
/// Keys and renamed-from names are string literals (`StaticString`): a wrapper is made with every model instance,
/// and holds nothing that must be released with it.
@propertyWrapper
public struct Stored<T: ValueConvertible>: ModelProperty {
    @usableFromInline let key: StaticString?
    @usableFromInline let packedOptions: StoredOptions
    @usableFromInline let initialValue: T?

    /// The key given explicitly, if any; the property's name otherwise.
    public var explicitKey: String? { key?.description }
    /// The options.
    public var options: [StoredOption] { packedOptions.list }

    /// An attribute keyed by the property's name, without options.
    @inlinable
    public init() {
        key = nil
        packedOptions = StoredOptions()
        initialValue = nil
    }

    /// An attribute keyed by the property's name.
    @inlinable
    public init(_ options: StoredOption...) {
        key = nil
        packedOptions = StoredOptions(options)
        initialValue = nil
    }

    /// An attribute with an explicit key.
    @inlinable
    public init(_ key: StaticString, _ options: StoredOption...) {
        self.key = key
        packedOptions = StoredOptions(options)
        initialValue = nil
    }

    /// An attribute keyed by the property's name whose default is the initial value.
    @inlinable
    public init(wrappedValue: T, _ options: StoredOption...) {
        key = nil
        packedOptions = StoredOptions(options)
        initialValue = wrappedValue
    }

    /// An attribute with an explicit key whose default is the initial value.
    @inlinable
    public init(wrappedValue: T, _ key: StaticString, _ options: StoredOption...) {
        self.key = key
        packedOptions = StoredOptions(options)
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
            let slot = ModelKeys.slot(of: owner, storageKeyPath)
            if let recorder = owner.managedObject.recorder {
                recorder.keys.append(slot.takeUnretainedValue().key)
                return T.fallback
            }
            ModelObservation.access(owner, wrappedKeyPath)
            do {
                let value = try owner.managedObject.value(for: slot)
                guard let typed = T(value: value) else {
                    let key = slot.takeUnretainedValue().key
                    owner.report(
                        EntityStoreError(
                            .typeMismatch, "\(owner.objectID).\(key) holds \(value), not \(T.self)",
                            entity: owner.managedObject.entity.name, key: key, objectID: owner.objectID),
                        "reading", key: key, write: false)
                    return T.fallback
                }
                return typed
            } catch {
                owner.report(error, "reading", key: slot.takeUnretainedValue().key, write: false)
                return T.fallback
            }
        }
        set {
            let slot = ModelKeys.slot(of: owner, storageKeyPath)
            ModelObservation.mutation(owner, wrappedKeyPath) {
                do {
                    try owner.managedObject.setValue(newValue.value, for: slot)
                } catch {
                    owner.report(error, "setting", key: slot.takeUnretainedValue().key, write: true)
                }
            }
        }
    }

    @usableFromInline
    func declaration(key: String) -> Property {
        let flags = packedOptions.flags
        let defaultValue: Value = initialValue?.value ?? .null
        let renamedFrom: String? = packedOptions.renamedFrom?.description
        let validation: AttributeValidation? = packedOptions.validation
        let derivation: String? = packedOptions.derivation?.description
        let indexed: Bool = flags & 1 != 0
        let unique: Bool = flags & 2 != 0
        let caseInsensitive: Bool = flags & 4 != 0
        let type: AttributeType = T.attributeType
        let optional: Bool = T.isOptional
        let attribute = Attribute(
            key, type, optional: optional, default: defaultValue, indexed: indexed, unique: unique,
            caseInsensitive: caseInsensitive, renamedFrom: renamedFrom, validation: validation, derived: derivation,
            transient: flags & 8 != 0)
        return .attribute(attribute)
    }

    @usableFromInline
    func mismatches(key: String, in entity: Entity, model: String) -> [EntityStoreError.Failure] {
        guard let attribute = entity.attribute(key) ?? entity.transientAttributes.first(where: { $0.name == key })
        else {
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
