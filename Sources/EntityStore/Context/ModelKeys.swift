import Foundation
import LMDB
import Observation
import Synchronization

/// Collects the keys read through a recording model instance, and what each read was made on and gave back, to
/// tell a key path of stored properties (`\Book.author?.name`) from a computed property that reads them.
@usableFromInline
final class KeyRecorder {
    @usableFromInline var keys: [String] = []
    /// The managed object each read was made on.
    @usableFromInline var readOn: [ObjectIdentifier] = []
    /// What each read gave back: a value naming the read (in a pass with sentinels), the recording instance a
    /// to-one gave, or nothing to compare (a to-many, a value that cannot name it).
    @usableFromInline var gave: [Gave] = []
    /// Whether reads give values naming them (``sentinel(_:)``); `flag` is the boolean they give.
    @usableFromInline var sentinels = false
    @usableFromInline var flag = false

    @usableFromInline
    enum Gave: Equatable {
        case value(Value)
        case instance(ObjectIdentifier)
        case unknown
    }

    @usableFromInline init() {}

    /// Notes a read of an attribute of type `T` and gives the value to return: in a pass with sentinels, a value
    /// of the type that names this read (when the type can hold one), else the type's fallback.
    @usableFromInline
    func read<T: ValueConvertible>(_ key: String, on object: ManagedObject, as type: T.Type) -> T {
        keys.append(key)
        readOn.append(ObjectIdentifier(object))
        if sentinels {
            // The first candidate the type can hold (a narrow integer type takes a small one).
            for value in Self.sentinels(T.attributeType, keys.count, flag) {
                if let typed = T(value: value) {
                    gave.append(.value(value))
                    return typed
                }
            }
        }
        gave.append(.unknown)
        return T.fallback
    }

    /// Notes a read of a relationship: a to-one's recording instance, or a to-many.
    @usableFromInline
    func readRelationship(_ key: String, on object: ManagedObject, giving instance: ManagedObject?) {
        keys.append(key)
        readOn.append(ObjectIdentifier(object))
        gave.append(instance.map { .instance(ObjectIdentifier($0)) } ?? .unknown)
    }

    /// Values of `type` no app stores by chance, different for each read (`index`): the first a property's
    /// type can hold is given.
    static func sentinels(_ type: AttributeType, _ index: Int, _ flag: Bool) -> [Value] {
        let n = Int64(index)
        switch type {
        case .string: return [.string("\u{10FFFE}entitystore key path read \(n)")]
        case .int64: return [.int(Int64.min + 7_919 * n), .int(-30_000 + n), .int(-120 + n), .int(250 - n)]
        case .double: return [.double(-1.234_567_890_123e-300 * Double(n))]
        case .bool: return [.bool(flag)]
        case .date: return [.date(Date(timeIntervalSinceReferenceDate: -9.876_543e15 + Double(n)))]
        case .uuid:
            let last = UInt8(truncatingIfNeeded: n)
            let bytes: uuid_t = (0xE5, 0x71, 0x7E, 0x57, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, last)
            return [.uuid(UUID(uuid: bytes))]
        case .binary: return [.data([0xE5, 0x71, 0x7E, 0x57, UInt8(truncatingIfNeeded: n)])]
        case .decimal: return [.decimal(Decimal(-987_654_321) - Decimal(index) / 7)]
        }
    }
}

/// Keys of typed properties and model key paths, found without macros.
///
/// A wrapper's storage key path prints as `\Book._title`: the property's name, its key unless the wrapper was
/// given one. A key path an app writes (`\Book.author?.name`) is evaluated once on a recording instance of the
/// model: each wrapper on the way records its key instead of reading (a to-one returns a recording instance of its
/// destination), which gives `author.name`. Both are cached.
@usableFromInline
enum ModelKeys {
    /// By the storage key path object: the compiler hands every access of a property the same (immortal) key path.
    /// Slots live as long as the process, so they are handed out unretained: a typed access then retains nothing to
    /// find its attribute.
    private static let slots = IdentityCache<PropertySlot>(limit: .max)

    /// The slot of a typed property: its key (the one its wrapper was given, or its name) and where the key was last
    /// found in an entity's attributes; found once per property (by its storage key path) and cached, so that an
    /// access reads neither the wrapper nor the key path's text, and a read or write finds the attribute without
    /// comparing names along the entity. Found the first time, the storage key path (which Observation knows the
    /// property by, see `ModelObservation`) is also kept for ``announceExternalChange(of:_:)``.
    @inlinable
    static func slot<Owner: Model, Wrapper: ModelProperty>(
        of owner: Owner, _ storageKeyPath: ReferenceWritableKeyPath<Owner, Wrapper>
    ) -> Unmanaged<PropertySlot> {
        if let slot = cachedSlot(storageKeyPath) { return slot }
        return resolveSlot(
            owner[keyPath: storageKeyPath].explicitKey, storageKeyPath, owner: ObjectIdentifier(Owner.self),
            announcer: { model, registrar in
                guard let model = model as? Owner else { return }
                registrar.withMutation(of: model, keyPath: storageKeyPath) {}
            })
    }

    /// The key of a typed property (see ``slot(of:_:)``).
    @inlinable
    static func key<Owner: Model, Wrapper: ModelProperty>(
        of owner: Owner, _ storageKeyPath: ReferenceWritableKeyPath<Owner, Wrapper>
    ) -> String {
        slot(of: owner, storageKeyPath).takeUnretainedValue().key
    }

    @usableFromInline
    static func cachedSlot(_ keyPath: AnyKeyPath) -> Unmanaged<PropertySlot>? {
        slots.value(for: ObjectIdentifier(keyPath))
    }

    /// Names a property from the key given to its wrapper, or from its storage key path (`\Book._title` → `title`),
    /// publishes its slot, and keeps the announcer of its key path for the class that declares it (`owner`).
    @usableFromInline
    static func resolveSlot(
        _ explicit: String?, _ keyPath: AnyKeyPath, owner: ObjectIdentifier, announcer: @escaping Announcer
    ) -> Unmanaged<PropertySlot> {
        let id = ObjectIdentifier(keyPath)
        if let slot = slots.value(for: id) { return slot }
        // A property's first key path object names its slot; an equal one later (a generic model class's key paths
        // are made anew at each access) shares it, and only a few such objects are kept by identity: the others are
        // found by equality, so that their number (and memory) does not grow with the accesses.
        return slotsByPath.withLock { table -> Unmanaged<PropertySlot> in
            if let known = table[keyPath] {
                if known.identities < maximumIdentities {
                    table[keyPath]!.identities += 1
                    slots.add(known.slot, for: id, retaining: keyPath)
                }
                return .passUnretained(known.slot)
            }
            let key = explicit ?? name(ofStorage: keyPath)
            let slot = PropertySlot(key)
            table[keyPath] = (slot, 1)
            // The announcer is kept before the slot can be found: an observer registers through a getter that
            // found it.
            announcers.withLock { $0[owner, default: []].append(announcer) }
            slots.add(slot, for: id, retaining: keyPath)
            return .passUnretained(slot)
        }
    }

    /// Every property's slot by its storage key path, by equality, with the number of key path objects of it kept
    /// by identity in ``slots``.
    private static let slotsByPath = Locked<[AnyKeyPath: (slot: PropertySlot, identities: Int)]>([:])
    /// The most key path objects of one property (or one key path an app writes) found by identity: the compiler's
    /// at each call site, a few.
    static let maximumIdentities = 8

    /// Announces a change of one property (its key path) of a model to its registrar's observers. (Not `@Sendable`
    /// for the key path it holds, which is immutable; the table is only read under its lock.)
    @usableFromInline
    typealias Announcer = (Model, ObservationRegistrar) -> Void

    /// The announcers of the typed properties used so far, by the class declaring them. A property's observers can
    /// only have registered through its getter, which found its slot first: every observed property is here.
    private static let announcers = Locked<[ObjectIdentifier: [Announcer]]>([:])

    /// Tells the observers of every typed property of `model` (its class's and its superclasses') that it changed.
    static func announceExternalChange(of model: Model, _ registrar: ObservationRegistrar) {
        var level: AnyClass? = type(of: model)
        var calls: [Announcer] = []
        announcers.withLock { table in
            while let current = level, current != Model.self {
                calls += table[ObjectIdentifier(current)] ?? []
                level = _getSuperclass(current)
            }
        }
        for announce in calls { announce(model, registrar) }
    }

    /// The key of a property from its wrapper's storage key path (`\Book._title` → `title`).
    static func name(ofStorage keyPath: AnyKeyPath) -> String {
        let text = String(describing: keyPath)
        var name = text.split(separator: ".").last.map(String.init) ?? text
        if name.hasPrefix("_") { name.removeFirst() }
        return name
    }

    // MARK: - Key paths an app writes

    /// What a model key path reads, by key path: equal key paths (written at several call sites, or built at run
    /// time) share one recording.
    private static let paths = Locked<[AnyKeyPath: (keys: ModelKeyPathKeys, identities: Int)]>([:])
    /// The same by the key path object, read without a lock: the compiler hands a call site the same object every
    /// time, so a typed fetch in a loop finds its keys without hashing the key path. Bounded: key paths built at run
    /// time are new objects each time, and each entry keeps its key path alive (and at most ``maximumIdentities``
    /// objects of one key path are taken).
    private static let keysByObject = IdentityCache<ModelKeyPathKeys>(limit: 4096)

    /// What a key path reads (see ``path(_:)`` and ``text(_:)``).
    static func keys<M: Model, V>(_ keyPath: KeyPath<M, V>) -> ModelKeyPathKeys {
        let id = ObjectIdentifier(keyPath)
        if let keys = keysByObject.value(for: id) { return keys.takeUnretainedValue() }
        if let (known, identities) = paths.withLock({ $0[keyPath] }) {
            // An equal key path seen before: a few objects of it are kept by identity, the rest (built at run time,
            // or a generic model's, made anew each time) found by equality.
            if identities < maximumIdentities {
                paths.withLock { $0[keyPath]?.identities += 1 }
                keysByObject.add(known, for: id, retaining: keyPath)
            }
            return known
        }
        let keys: ModelKeyPathKeys = {
            let recorder = KeyRecorder()
            _ = M.recordingInstance(recorder)[keyPath: keyPath]
            let problem = recorder.keys.isEmpty ? nil : notAPath(keyPath)
            // A key path that cannot be mapped is a text no key has, naming the problem, which the fetch, sort,
            // section or batch change that uses it reports. (Swift prints a computed property's key path by
            // its accessor's address, not its name: the model and what it reads name it.)
            let keys = ModelKeyPathKeys(
                problem == nil ? recorder.keys : [],
                text: recorder.keys.isEmpty
                    ? "<a key path of \(M.self) that reads no @Stored, @ToOne or @ToMany property>"
                    : problem.map {
                        "<a key path of \(M.self) that is not a stored attribute or relationship, nor a path of them: \($0)>"
                    } ?? recorder.keys.joined(separator: "."))
            return paths.withLock { table in
                if let existing = table[keyPath] { return existing.keys }
                table[keyPath] = (keys, 1)
                return keys
            }
        }()
        keysByObject.add(keys, for: id, retaining: keyPath)
        return keys
    }

    /// Why a key path that reads typed properties is not a path of them (a computed property reading them), or
    /// `nil` when it is: evaluated twice more on recording instances whose properties give values naming each read
    /// (booleans true, then false), each read must be made on what the read before gave (the first on the model),
    /// and the key path must give what its last read gave. A computed property that transforms a value, reads two,
    /// or reads through another object is caught; one that returns a property unchanged gives the same answers.
    static func notAPath<M: Model, V>(_ keyPath: KeyPath<M, V>) -> String? {
        for flag in [true, false] {
            let recorder = KeyRecorder()
            recorder.sentinels = true
            recorder.flag = flag
            let root = M.recordingInstance(recorder)
            let result: Any = root[keyPath: keyPath]
            let reads = "it reads \(recorder.keys.joined(separator: ", "))"
            var expected = ObjectIdentifier(root.managedObject)
            for index in recorder.keys.indices {
                guard recorder.readOn[index] == expected else { return reads + " (not one after the other)" }
                if index < recorder.keys.count - 1 {
                    guard case .instance(let next) = recorder.gave[index] else {
                        return reads + " (\(recorder.keys[index]) is no to-one relationship to go through)"
                    }
                    expected = next
                }
            }
            switch recorder.gave.last {
            case .value(let value):
                guard let given = result as? any ValueConvertible, given.value == value else {
                    return reads + " and gives another value (a computed property)"
                }
            case .instance(let id):
                guard let model = result as? Model, ObjectIdentifier(model.managedObject) == id else {
                    return reads + " and gives another object (a computed property)"
                }
            case .unknown, nil:
                break
            }
        }
        return nil
    }

    /// The keys a model key path reads, in order (`\Book.author?.name` → `["author", "name"]`); empty when it reads
    /// no typed property.
    static func path<M: Model, V>(_ keyPath: KeyPath<M, V>) -> [String] { keys(keyPath).path }

    /// The key path as text for predicates and sorts; a path that reads no typed property (or a computed property
    /// reading several) gives a key that names the problem, so that the fetch fails saying so.
    static func text<M: Model, V>(_ keyPath: KeyPath<M, V>) -> String { keys(keyPath).text }

    /// ``text(_:)`` split into a predicate's key path components.
    static func components<M: Model, V>(_ keyPath: KeyPath<M, V>) -> [String] { keys(keyPath).components }

    // MARK: - Entity names

    /// Entity names by model class (``Model/entityName`` describes the class by default, which costs more than the
    /// rest of a typed fetch). A class's entity name is taken to be constant.
    private static let entityNames = IdentityCache<EntityNameBox>(limit: .max)

    /// The entity a model class maps to (its ``Model/entityName``, asked once per process).
    static func entityName(of type: Model.Type) -> String {
        let id = ObjectIdentifier(type)
        if let box = entityNames.value(for: id) { return box.takeUnretainedValue().name }
        let box = EntityNameBox(type.entityName)
        return (entityNames.add(box, for: id, retaining: nil) ?? .passUnretained(box)).takeUnretainedValue().name
    }
}

/// The keys a model key path reads, as a path, as text and as a predicate's components.
final class ModelKeyPathKeys: Sendable {
    let path: [String]
    let text: String
    let components: [String]

    init(_ path: [String], text: String) {
        self.path = path
        self.text = text
        components = text.keyPathComponents
    }
}

/// A model class's entity name, as a cache entry.
final class EntityNameBox: Sendable {
    let name: String
    init(_ name: String) { self.name = name }
}

/// A typed property's key and the position its attribute had in the last entity it was read or written in.
@usableFromInline
final class PropertySlot: Sendable {
    @usableFromInline let key: String
    /// The attribute's position in the entity it was last found in (-1 before): a hint, checked by name on use, so
    /// a model used with several schemas stays right (it looks the key up again where the hint is wrong).
    @usableFromInline let hint = Atomic<Int>(-1)
    init(_ key: String) { self.key = key }
}
