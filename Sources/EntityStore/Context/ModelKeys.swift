import LMDB

/// Collects the keys read through a recording model instance.
final class KeyRecorder {
    var keys: [String] = []
}

/// Keys of typed properties and model key paths, found without macros.
///
/// A wrapper's storage key path prints as `\Book._title`: the property's name, its key unless the wrapper was
/// given one. A key path an app writes (`\Book.author?.name`) is evaluated once on a recording instance of the
/// model: each wrapper on the way records its key instead of reading (a to-one returns a recording instance of its
/// destination), which gives `author.name`. Both are cached.
enum ModelKeys {
    private static let names = Locked<[AnyKeyPath: String]>([:])
    private static let paths = Locked<[AnyKeyPath: [String]]>([:])

    /// The key of a property from its wrapper's storage key path (`\Book._title` → `title`).
    static func name(ofStorage keyPath: AnyKeyPath) -> String {
        if let name = names.withLock({ $0[keyPath] }) { return name }
        let text = String(describing: keyPath)
        var name = text.split(separator: ".").last.map(String.init) ?? text
        if name.hasPrefix("_") { name.removeFirst() }
        names.withLock { $0[keyPath] = name }
        return name
    }

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
