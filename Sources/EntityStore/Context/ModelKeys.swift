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
    /// By the key path object: the compiler hands every access of a property the same (immortal) key path. Read
    /// without a lock: the table is immutable, replaced by a larger copy when a key is added (rare), and the old
    /// copies are kept (a reader may still hold one).
    private static let slots = Locked<[ObjectIdentifier: PropertySlot]>([:])
    /// The current table's address (0 before the first).
    private static let published = Atomic<Int>(0)
    /// Every table published (only touched inside `slots`'s lock).
    nonisolated(unsafe) private static var tables: [SlotTable] = []
    /// The key paths named so far (only touched inside `slots`'s lock): kept alive with their entries, so that an
    /// identifier is never reused for another key path.
    nonisolated(unsafe) private static var retained: [AnyKeyPath] = []

    /// The slot of a typed property: its key (the one its wrapper was given, or its name) and where the key was last
    /// found in an entity's attributes; found once per property (by its storage key path) and cached, so that an
    /// access reads neither the wrapper nor the key path's text, and a read or write finds the attribute without
    /// comparing names along the entity. Found the first time, the storage key path (which Observation knows the
    /// property by, see `ModelObservation`) is also kept for ``announceExternalChange(of:_:)``.
    ///
    /// Slots live as long as the process (the table keeps them), so they are handed out unretained: a typed access
    /// then retains nothing to find its attribute.
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
        guard let pointer = UnsafeRawPointer(bitPattern: published.load(ordering: .acquiring)) else { return nil }
        // Published tables are never freed: no retain needed to read one.
        return Unmanaged<SlotTable>.fromOpaque(pointer)._withUnsafeGuaranteedRef { $0.slot(for: keyPath) }
    }

    /// Names a property from the key given to its wrapper, or from its storage key path (`\Book._title` → `title`),
    /// publishes its slot, and keeps the announcer of its key path for the class that declares it (`owner`).
    @usableFromInline
    static func resolveSlot(
        _ explicit: String?, _ keyPath: AnyKeyPath, owner: ObjectIdentifier, announcer: @escaping Announcer
    ) -> Unmanaged<PropertySlot> {
        let id = ObjectIdentifier(keyPath)
        if let slot = slots.withLock({ $0[id] }) { return .passUnretained(slot) }
        let key = explicit ?? name(ofStorage: keyPath)
        return slots.withLock {
            if let slot = $0[id] { return .passUnretained(slot) }
            let slot = PropertySlot(key)
            $0[id] = slot
            retained.append(keyPath)
            announcers.withLock { $0[owner, default: []].append(announcer) }
            let table = SlotTable($0)
            tables.append(table)
            published.store(Int(bitPattern: Unmanaged.passUnretained(table).toOpaque()), ordering: .releasing)
            return .passUnretained(slot)
        }
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

    private static let paths = Locked<[AnyKeyPath: [String]]>([:])

    /// The keys a model key path reads, in order (`\Book.author?.name` → `["author", "name"]`); empty when it reads
    /// no typed property.
    static func path<M: Model, V>(_ keyPath: KeyPath<M, V>) -> [String] {
        if let path = paths.withLock({ $0[keyPath] }) { return path }
        let recorder = KeyRecorder()
        _ = M.recordingInstance(recorder)[keyPath: keyPath]
        let path = recorder.keys
        paths.withLock { $0[keyPath] = path }
        return path
    }

    /// The key path as text for predicates and sorts; a path that reads no typed property (or a computed property
    /// reading several) gives a key that names the problem, so that the fetch fails saying so.
    static func text<M: Model, V>(_ keyPath: KeyPath<M, V>) -> String {
        let path = path(keyPath)
        guard !path.isEmpty else { return "<\(keyPath) reads no @Stored, @ToOne or @ToMany property>" }
        return path.joined(separator: ".")
    }
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

/// An immutable table from key path objects to property slots: open addressing over the objects' addresses, so a
/// typed access finds its slot with a multiply and a compare or two (a `Dictionary` hashes with SipHash).
final class SlotTable {
    private let mask: Int
    /// `mask + 1` entries: a key path object's address (0 for none) and its slot. The slots are retained by the
    /// entries dictionary the table was made from, which `ModelKeys` keeps.
    private let entries: UnsafeMutablePointer<(address: UInt, slot: Unmanaged<PropertySlot>?)>

    init(_ slots: [ObjectIdentifier: PropertySlot]) {
        var capacity = 16
        while capacity < slots.count * 2 { capacity *= 2 }
        mask = capacity - 1
        entries = .allocate(capacity: capacity)
        entries.initialize(repeating: (0, nil), count: capacity)
        for (id, slot) in slots {
            var index = Self.start(UInt(bitPattern: id), mask)
            while entries[index].address != 0 { index = (index + 1) & mask }
            entries[index] = (UInt(bitPattern: id), Unmanaged.passUnretained(slot))
        }
    }

    deinit { entries.deallocate() }

    private static func start(_ address: UInt, _ mask: Int) -> Int {
        Int(truncatingIfNeeded: ((address >> 4) &* 0x9E37_79B9_7F4A_7C15) >> 40) & mask
    }

    func slot(for keyPath: AnyKeyPath) -> Unmanaged<PropertySlot>? {
        let address = UInt(bitPattern: ObjectIdentifier(keyPath))
        var index = Self.start(address, mask)
        while true {
            let entry = entries[index]
            if entry.address == address { return entry.slot }
            if entry.address == 0 { return nil }
            index = (index + 1) & mask
        }
    }
}
