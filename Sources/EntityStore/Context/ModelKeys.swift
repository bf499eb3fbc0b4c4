import LMDB
import Observation
import Synchronization

/// Collects the keys read through a recording model instance.
@usableFromInline
final class KeyRecorder {
    @usableFromInline var keys: [String] = []
    @usableFromInline init() {}
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
        let key = explicit ?? name(ofStorage: keyPath)
        // The announcer is kept before the slot can be found: an observer registers through a getter that found it.
        let slot = slots.add(PropertySlot(key), for: id, retaining: keyPath) {
            announcers.withLock { $0[owner, default: []].append(announcer) }
        }
        // The cache takes every slot (no limit).
        return slot!
    }

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
    private static let paths = Locked<[AnyKeyPath: ModelKeyPathKeys]>([:])
    /// The same by the key path object, read without a lock: the compiler hands a call site the same object every
    /// time, so a typed fetch in a loop finds its keys without hashing the key path. Bounded: key paths built at run
    /// time are new objects each time, and each entry keeps its key path alive.
    private static let keysByObject = IdentityCache<ModelKeyPathKeys>(limit: 4096)

    /// What a key path reads (see ``path(_:)`` and ``text(_:)``).
    static func keys<M: Model, V>(_ keyPath: KeyPath<M, V>) -> ModelKeyPathKeys {
        let id = ObjectIdentifier(keyPath)
        if let keys = keysByObject.value(for: id) { return keys.takeUnretainedValue() }
        let keys =
            paths.withLock({ $0[keyPath] })
            ?? {
                let recorder = KeyRecorder()
                _ = M.recordingInstance(recorder)[keyPath: keyPath]
                let keys = ModelKeyPathKeys(
                    recorder.keys,
                    text: recorder.keys.isEmpty
                        ? "<\(keyPath) reads no @Stored, @ToOne or @ToMany property>"
                        : recorder.keys.joined(separator: "."))
                return paths.withLock { table in
                    if let existing = table[keyPath] { return existing }
                    table[keyPath] = keys
                    return keys
                }
            }()
        keysByObject.add(keys, for: id, retaining: keyPath)
        return keys
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
