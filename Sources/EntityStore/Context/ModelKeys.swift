import LMDB
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
    private static let names = Locked<[ObjectIdentifier: String]>([:])
    /// The current table's address (0 before the first).
    private static let published = Atomic<Int>(0)
    /// Every table published (only touched inside `names`'s lock).
    nonisolated(unsafe) private static var tables: [KeyTable] = []

    final class KeyTable {
        let keys: [ObjectIdentifier: String]
        init(_ keys: [ObjectIdentifier: String]) { self.keys = keys }
    }

    /// Adds a key and publishes the new table (call inside `names`'s lock).
    private static func publish(_ keys: [ObjectIdentifier: String]) {
        let table = KeyTable(keys)
        tables.append(table)
        published.store(Int(bitPattern: Unmanaged.passUnretained(table).toOpaque()), ordering: .releasing)
    }
    private static let paths = Locked<[AnyKeyPath: [String]]>([:])

    /// The key of a typed property: the one its wrapper was given, or its name; found once per property (by its
    /// storage key path) and cached, so that an access reads neither the wrapper nor the key path's text.
    @inlinable
    static func key<Owner: Model, Wrapper: ModelProperty>(
        of owner: Owner, _ storageKeyPath: ReferenceWritableKeyPath<Owner, Wrapper>
    ) -> String {
        if let key = cachedKey(storageKeyPath) { return key }
        return resolveKey(owner[keyPath: storageKeyPath].explicitKey, storageKeyPath)
    }

    @usableFromInline
    static func cachedKey(_ keyPath: AnyKeyPath) -> String? {
        guard let pointer = UnsafeRawPointer(bitPattern: published.load(ordering: .acquiring)) else { return nil }
        return Unmanaged<KeyTable>.fromOpaque(pointer).takeUnretainedValue().keys[ObjectIdentifier(keyPath)]
    }

    @usableFromInline
    static func resolveKey(_ explicit: String?, _ keyPath: AnyKeyPath) -> String {
        guard let explicit else { return name(ofStorage: keyPath) }
        names.withLock {
            $0[ObjectIdentifier(keyPath)] = explicit
            retained.append(keyPath)
            publish($0)
        }
        return explicit
    }

    /// The key of a property from its wrapper's storage key path (`\Book._title` → `title`).
    @usableFromInline
    static func name(ofStorage keyPath: AnyKeyPath) -> String {
        let id = ObjectIdentifier(keyPath)
        if let name = names.withLock({ $0[id] }) { return name }
        let text = String(describing: keyPath)
        var name = text.split(separator: ".").last.map(String.init) ?? text
        if name.hasPrefix("_") { name.removeFirst() }
        // Keep the key path alive with its entry, so that its identifier is never reused for another.
        names.withLock {
            $0[id] = name
            retained.append(keyPath)
            publish($0)
        }
        return name
    }
    /// The key paths named so far (only touched inside `names`'s lock).
    nonisolated(unsafe) private static var retained: [AnyKeyPath] = []

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
