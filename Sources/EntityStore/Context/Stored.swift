import Foundation
import LMDB
import Synchronization

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

/// A wrapper's rarer options (rename source, rules, derivation).
struct StoredExtras: Hashable, Sendable {
    let renamedFrom: StaticString?
    let validation: AttributeValidation?
    let derivation: StaticString?

    static func == (lhs: StoredExtras, rhs: StoredExtras) -> Bool {
        lhs.renamedFrom?.description == rhs.renamedFrom?.description && lhs.validation == rhs.validation
            && lhs.derivation?.description == rhs.derivation?.description
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(renamedFrom?.description)
        hasher.combine(validation)
        hasher.combine(derivation?.description)
    }

    /// Every combination given to a wrapper so far, each once: wrappers hold a position in it (a wrapper is made
    /// with every model instance, and one holding no reference needs no release when the instance goes).
    private static let table = Locked<(list: [StoredExtras], positions: [StoredExtras: UInt32])>(([], [:]))

    /// The position of `extras` in the table (from 1), added if new.
    static func intern(_ extras: StoredExtras) -> UInt32 {
        table.withLock { table in
            if let position = table.positions[extras] { return position }
            table.list.append(extras)
            let position = UInt32(table.list.count)
            table.positions[extras] = position
            return position
        }
    }

    /// The extras at `position` (from 1).
    static func at(_ position: UInt32) -> StoredExtras {
        table.withLock { $0.list[Int(position) - 1] }
    }
}

/// A ``Stored`` wrapper's options, packed: what a model instance carries per attribute (wrappers are made with
/// every instance, so they are small and hold no reference: the rare options are a position in a shared table).
@usableFromInline
struct StoredOptions: Sendable {
    @usableFromInline let flags: UInt8
    /// The position of the rename source, rules and derivation in `StoredExtras`'s table; 0 for none.
    @usableFromInline let extras: UInt32

    /// No options.
    @inlinable
    init() {
        flags = 0
        extras = 0
    }

    @usableFromInline
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
            ? 0
            : StoredExtras.intern(
                StoredExtras(renamedFrom: renamedFrom, validation: validation, derivation: derivation))
    }

    private var extrasIfAny: StoredExtras? { extras == 0 ? nil : StoredExtras.at(extras) }
    var renamedFrom: String? { extrasIfAny?.renamedFrom?.description }
    var validation: AttributeValidation? { extrasIfAny?.validation }
    var derivation: String? { extrasIfAny?.derivation?.description }

    var list: [StoredOption] {
        var list: [StoredOption] = []
        if flags & 1 != 0 { list.append(.indexed) }
        if flags & 2 != 0 { list.append(.unique) }
        if flags & 4 != 0 { list.append(.caseInsensitive) }
        if flags & 8 != 0 { list.append(.transient) }
        guard let extras = extrasIfAny else { return list }
        if let renamedFrom = extras.renamedFrom { list.append(.renamedFrom(renamedFrom)) }
        if let validation = extras.validation { list.append(.validated(validation)) }
        if let derivation = extras.derivation { list.append(.derived(derivation)) }
        return list
    }
}

/// Keeps the initial values of `@Stored` wrappers while a schema is made from model classes (``Entity/init(model:renamedFrom:)``),
/// for the thread making it: wrappers made at any other time keep nothing (one load and a branch).
@usableFromInline
enum DefaultCapture {
    /// How many threads are capturing now.
    private static let capturing = Atomic<Int>(0)
    /// The values kept by each capturing thread.
    private static let sessions = Locked<[ObjectIdentifier: [Value]]>([:])

    /// Runs `body` with the initial values of the wrappers it makes kept for ``value(at:)``.
    static func capturing<R>(_ body: () throws -> R) rethrows -> R {
        let thread = ObjectIdentifier(Thread.current)
        let outer = sessions.withLock { sessions -> Bool in
            if sessions[thread] != nil { return true }
            sessions[thread] = []
            return false
        }
        if outer { return try body() }
        capturing.add(1, ordering: .sequentiallyConsistent)
        defer {
            capturing.subtract(1, ordering: .sequentiallyConsistent)
            sessions.withLock { $0[thread] = nil }
        }
        return try body()
    }

    /// Keeps `value` when this thread captures, and says where (from 1); 0 otherwise.
    @inlinable
    static func keep<T: ValueConvertible>(_ value: T) -> UInt32 {
        isCapturing ? keep(value.value) : 0
    }

    @usableFromInline
    static var isCapturing: Bool { capturing.load(ordering: .relaxed) != 0 }

    @usableFromInline
    static func keep(_ value: Value) -> UInt32 {
        let thread = ObjectIdentifier(Thread.current)
        return sessions.withLock { sessions in
            guard sessions[thread] != nil else { return 0 }
            sessions[thread]!.append(value)
            return UInt32(sessions[thread]!.count)
        }
    }

    /// Runs `body` capturing the initial values of the wrappers it makes: the values in the order kept, and the
    /// number kept before `body` ran (a wrapper's ``Stored/initialValue`` minus one, minus that number, is its
    /// value's place in the list).
    static func values(during body: () throws -> Void) rethrows -> (values: [Value], before: Int) {
        let thread = ObjectIdentifier(Thread.current)
        return try capturing {
            let before = sessions.withLock { $0[thread]?.count ?? 0 }
            try body()
            let values = sessions.withLock { Array(($0[thread] ?? []).dropFirst(before)) }
            return (values, before)
        }
    }

    /// The value kept at `position` by this thread's capture; `.null` for none.
    static func value(at position: UInt32) -> Value {
        guard position != 0 else { return .null }
        let thread = ObjectIdentifier(Thread.current)
        return sessions.withLock { sessions in
            guard let values = sessions[thread], values.indices.contains(Int(position) - 1) else { return .null }
            return values[Int(position) - 1]
        }
    }
}

/// An attribute of a ``Model`` subclass, read and written through the wrapped managed object.
///
/// <!-- snippet
/// final class Reader: Model {
/// <snippet>
/// }
/// -->
/// ```swift
/// @Stored var title: String                              // key "title", required
/// @Stored var rank: Int = 0                               // the initial value is the default
/// @Stored var id: UUID = UUID()                           // made anew: each inserted object's own
/// @Stored(.unique, .caseInsensitive) var email: String?   // optional, unique without regard to case
/// @Stored("pages", .indexed) var pageCount: Int?          // an explicit key
/// @Stored var level: Int16 = 0                            // stored as int64, bounded to -32768...32767
/// ```
///
/// An integer type narrower than 64 bits (`Int32`, `Int16`, `Int8`, `UInt32`, `UInt16`, `UInt8`) bounds its
/// attribute to the type's range: in a schema made from the model, the attribute's ``AttributeValidation`` minimum
/// and maximum are narrowed to it, so every writer (the dynamic API, batch changes, an import, a sync) is refused a
/// value the property could not hold. A value stored before reads as the type's fallback, with a `typeMismatch` in
/// ``Model/lastError``.
///
/// Keys and renamed-from names are string literals (`StaticString`): a wrapper is made with every model instance,
/// and holds nothing that must be released with it.
@propertyWrapper
public struct Stored<T: ValueConvertible>: ModelProperty {
    @usableFromInline let key: StaticString?
    @usableFromInline let packedOptions: StoredOptions
    /// Where the initial value (the attribute's default) was kept, when the wrapper was made for a schema (see
    /// `DefaultCapture`); 0 otherwise. Not the value itself: a wrapper is made with every model instance, and one
    /// holding no reference needs nothing done when the instance goes.
    @usableFromInline let initialValue: UInt32

    /// The key given explicitly, if any; the property's name otherwise.
    public var explicitKey: String? { key?.description }
    /// The options.
    public var options: [StoredOption] { packedOptions.list }

    /// An attribute keyed by the property's name, without options.
    @inlinable
    public init() {
        key = nil
        packedOptions = StoredOptions()
        initialValue = 0
    }

    /// An attribute keyed by the property's name.
    @inlinable
    public init(_ options: StoredOption...) {
        key = nil
        packedOptions = StoredOptions(options)
        initialValue = 0
    }

    /// An attribute with an explicit key.
    @inlinable
    public init(_ key: StaticString, _ options: StoredOption...) {
        self.key = key
        packedOptions = StoredOptions(options)
        initialValue = 0
    }

    /// An attribute keyed by the property's name whose default is the initial value.
    @inlinable
    public init(wrappedValue: T, _ options: StoredOption...) {
        key = nil
        packedOptions = StoredOptions(options)
        initialValue = DefaultCapture.keep(wrappedValue)
    }

    /// An attribute with an explicit key whose default is the initial value.
    @inlinable
    public init(wrappedValue: T, _ key: StaticString, _ options: StoredOption...) {
        self.key = key
        packedOptions = StoredOptions(options)
        initialValue = DefaultCapture.keep(wrappedValue)
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
        // Inlined into the model's accessor, so that the property's own key path (unused) is never made.
        @inline(__always) get {
            let slot = ModelKeys.slot(of: owner, storageKeyPath)
            if let recorder = owner.managedObject.recorder {
                return recorder.read(slot.takeUnretainedValue().key, on: owner.managedObject, as: T.self)
            }
            ModelObservation.access(owner, storageKeyPath)
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
        @inline(__always) set {
            let slot = ModelKeys.slot(of: owner, storageKeyPath)
            ModelObservation.mutation(owner, storageKeyPath) {
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
        let defaultValue: Value = DefaultCapture.value(at: initialValue)
        let renamedFrom: String? = packedOptions.renamedFrom
        var validation: AttributeValidation? = packedOptions.validation
        if let narrow = T.self as? any NarrowInteger.Type {
            validation = AttributeValidation.narrowed(validation, to: narrow.storedRange)
        }
        let derivation: String? = packedOptions.derivation
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

    /// Where the wrapper's initial value was kept (see `DefaultCapture`); 0 for none.
    var initialValuePosition: UInt32 { initialValue }

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
        // "a uuid" (said "you-you-id"), "an int64".
        return (["a", "e", "i", "o"].contains(name.prefix(1)) ? "an " : "a ") + name
    }
}
