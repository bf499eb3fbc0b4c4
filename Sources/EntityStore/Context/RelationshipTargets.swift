/// An object's relationship targets by relationship name (``ManagedObject/related``, ``ObjectState``): the
/// relationships loaded so far, each with its targets (a ``TargetSet``).
///
/// An entity has a few relationships, so the entries are a short array searched by name rather than a dictionary:
/// a `[String: Set<ObjectID>]` hashed the name (SipHash over its bytes) on every link, read, undo record and
/// save of a relationship, a tenth of a linked insert's instructions, and copied its table on an object's first
/// link. Comparing a name with the entries' is a comparison of two words when the name is the schema's own string
/// or a short one (most names are), and names are compared as strings, canonical equivalence included, as a
/// dictionary's keys are.
struct RelationshipTargets: Sequence, ExpressibleByDictionaryLiteral {
    typealias Element = (key: String, value: TargetSet)

    /// The entries, each name once; `nil` only while a `_modify` access that removes the entry is in progress.
    private var entries: ContiguousArray<(key: String, value: TargetSet?)> = []

    init() {}

    init(dictionaryLiteral elements: (String, TargetSet)...) {
        for (name, targets) in elements { self[name] = targets }
    }

    /// A table holding `targets` under each of `names` (the first of names that are equal).
    init(_ names: some Sequence<String>, each targets: TargetSet) {
        for name in names where position(of: name) == nil { entries.append((name, targets)) }
    }

    var isEmpty: Bool { entries.isEmpty }
    var keys: [String] { entries.map(\.key) }
    var values: [TargetSet] { entries.map { $0.value! } }

    /// The position of the entry named `name`.
    private func position(of name: String) -> Int? {
        entries.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return nil }
            // Names of the same length first, through each entry's address (no copy of the entry per step): a
            // length is a few instructions, a comparison that fails a call into the runtime. Then the others, for
            // a canonically equivalent spelling of another length ("e\u{301}" for "é").
            let length = name.utf8.count
            for i in buffer.indices where (base + i).pointee.key.utf8.count == length && (base + i).pointee.key == name
            {
                return i
            }
            for i in buffer.indices where (base + i).pointee.key.utf8.count != length && (base + i).pointee.key == name
            {
                return i
            }
            return nil
        }
    }

    subscript(name: String) -> TargetSet? {
        get {
            guard let i = position(of: name) else { return nil }
            return entries[i].value
        }
        set {
            if let i = position(of: name) {
                if let newValue { entries[i].value = newValue } else { entries.remove(at: i) }
            } else if let newValue {
                entries.append((name, newValue))
            }
        }
        // In place (`related[name]?.insert(id)`): the targets are changed where they are, not copied.
        _modify {
            let i: Int
            if let found = position(of: name) {
                i = found
            } else {
                entries.append((name, nil))
                i = entries.count - 1
            }
            defer { if case .none = entries[i].value { entries.remove(at: i) } }
            yield &entries[i].value
        }
    }

    subscript(name: String, default defaultValue: @autoclosure () -> TargetSet) -> TargetSet {
        get { self[name] ?? defaultValue() }
        _modify {
            let i: Int
            if let found = position(of: name) {
                i = found
            } else {
                entries.append((name, defaultValue()))
                i = entries.count - 1
            }
            yield &entries[i].value!
        }
    }

    func mapValues<T>(_ transform: (TargetSet) throws -> T) rethrows -> [String: T] {
        var result: [String: T] = [:]
        for (name, targets) in self { result[name] = try transform(targets) }
        return result
    }

    struct Iterator: IteratorProtocol {
        fileprivate var base: IndexingIterator<ContiguousArray<(key: String, value: TargetSet?)>>
        mutating func next() -> Element? {
            guard let entry = base.next() else { return nil }
            return (entry.key, entry.value!)
        }
    }

    func makeIterator() -> Iterator { Iterator(base: entries.makeIterator()) }

    var underestimatedCount: Int { entries.count }
}
