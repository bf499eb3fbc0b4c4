import LMDB
import Synchronization

/// What a fetch request needs before it reads anything, worked out once per store and kept: the predicate
/// compiled against the schema, the sort keys resolved, the record filter, the attributes a scan decodes and the
/// index the predicate can use.
///
/// A fetch's fixed cost used to be most of a small fetch's time (compiling, resolving, choosing an index: ~10k
/// instructions against ~1k for the read itself). The store keeps prepared fetches by entity, sort keys and the
/// predicate's *shape* (its constants reduced to their types, see `FetchPredicate.hasSameShape(as:)`), as a database
/// keeps a prepared statement for its parameters: a fetch with new constants (a lookup by another key) binds the
/// kept form to them (`bound(to:)`) instead of compiling again.
final class PreparedFetch: @unchecked Sendable {
    // @unchecked Sendable: immutable after init (CompiledPredicate's only mutable state is its regular expression cache, and predicates
    // that use regular expressions are never shared: see `PreparedFetch.Key.init?`).
    let storage: EntityStorage
    let predicate: CompiledPredicate?
    let sortPaths: [ResolvedKeyPath]
    let recordFilter: RecordFilter?
    /// Attribute positions the predicate reads on the record itself.
    let filterAttributes: [Int]
    /// The best index for the predicate, if any.
    let index: QueryPlanner.Choice?

    init(_ request: FetchRequest, store: PersistentStore) throws {
        let storage = try store.storage(for: request.entity)
        let entity = storage.entity
        self.storage = storage
        predicate = try request.predicate.map { try CompiledPredicate($0, entity: entity, schema: store.schema) }
        sortPaths = try request.sortKeys.map { key -> ResolvedKeyPath in
            let path = try ResolvedKeyPath.resolve(
                key.keyPath.keyPathComponents, from: entity, in: store.schema)
            guard case .attribute = path.terminal, !path.isToMany else {
                throw EntityStoreError(
                    .invalidFetchRequest,
                    "cannot sort by '\(key.keyPath)': sort keys are attributes reached through"
                        + " to-one relationships", entity: entity.name, key: key.keyPath)
            }
            return path
        }
        recordFilter = request.predicate.flatMap { RecordFilter($0, entity: entity) }
        filterAttributes = predicate.map { $0.ownAttributes.sorted() } ?? []
        index = request.predicate.flatMap { QueryPlanner.bestIndex($0, entity, storage, store.schema) }
    }

    private init(
        storage: EntityStorage, predicate: CompiledPredicate?, sortPaths: [ResolvedKeyPath],
        recordFilter: RecordFilter?, filterAttributes: [Int], index: QueryPlanner.Choice?
    ) {
        self.storage = storage
        self.predicate = predicate
        self.sortPaths = sortPaths
        self.recordFilter = recordFilter
        self.filterAttributes = filterAttributes
        self.index = index
    }

    /// This prepared form for `request`, whose predicate has the same shape as the one it was prepared for: the
    /// compiled predicate takes the request's constants, and what reads constants (the index ranges, the record
    /// filter) is worked out for them. What reads only the shape (key paths, sort keys, types, attributes read, which
    /// index serves) is shared.
    func bound(to request: FetchRequest, store: PersistentStore) throws -> PreparedFetch {
        guard let new = request.predicate, let compiled = predicate, new != compiled.source else { return self }
        guard let rebound = compiled.rebound(to: new) else { return try PreparedFetch(request, store: store) }
        let entity = storage.entity
        // Whether an index serves is the shape's; its ranges, and whether they are exact (an IN list with a value
        // twice has fewer ranges), are the constants'.
        let index = index == nil ? nil : QueryPlanner.bestIndex(new, entity, storage, store.schema)
        return PreparedFetch(
            storage: storage, predicate: rebound, sortPaths: sortPaths,
            // Only a fetch whose index does not answer the predicate exactly filters records; which comparisons
            // the filter tests can depend on the constants (a text's ASCII constant).
            recordFilter: index?.exact == true ? nil : RecordFilter(new, entity: entity),
            filterAttributes: filterAttributes, index: index)
    }

    /// What identifies a prepared fetch: the parts of a request that compiling and planning read. Predicates are
    /// compared and hashed by shape: requests that differ only in their constants share a key.
    struct Key: Hashable {
        var entity: String
        var predicate: FetchPredicate?
        var sortKeys: [SortKey]

        static func == (lhs: Key, rhs: Key) -> Bool {
            guard lhs.entity == rhs.entity, lhs.sortKeys == rhs.sortKeys else { return false }
            switch (lhs.predicate, rhs.predicate) {
            case (nil, nil): return true
            case (let a?, let b?): return a.hasSameShape(as: b)
            default: return false
            }
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(entity)
            hasher.combine(sortKeys)
            hasher.combine(predicate != nil)
            predicate?.hashShape(into: &hasher)
        }

        /// The key of `request`, or `nil` when its preparation must not be shared: predicates with regular
        /// expressions (their compiled form caches them, unsynchronised) and large predicates (hashing and
        /// comparing them would cost what preparing them does, and their recursive hashing must stay shallow).
        init?(_ request: FetchRequest) {
            if let predicate = request.predicate {
                var nodes = 0
                var pending: [(FetchPredicate, depth: Int)] = [(predicate, 1)]
                while let (node, depth) = pending.popLast() {
                    nodes += 1
                    guard nodes <= 64, depth <= 16 else { return nil }
                    switch node {
                    case .constant: break
                    case .comparison(let c):
                        if c.op == .matches { return nil }
                        if let subquery = c.subquery { pending.append((subquery.predicate, depth + 1)) }
                    case .and(let parts), .or(let parts): pending.append(contentsOf: parts.map { ($0, depth + 1) })
                    case .not(let inner): pending.append((inner, depth + 1))
                    }
                }
            }
            entity = request.entity
            predicate = request.predicate
            sortKeys = request.sortKeys
        }
    }
}

/// A request's prepared form, kept with the request (see `FetchRequest.memo`): set once, by the first store that
/// prepares the request, and only for requests whose preparation may be shared (see `PreparedFetch.Key`).
final class PreparedMemo: Sendable {
    final class Entry: Sendable {
        let serial: UInt64
        let prepared: PreparedFetch
        init(serial: UInt64, prepared: PreparedFetch) {
            self.serial = serial
            self.prepared = prepared
        }
    }
    /// The kept entry's address (a reference the memo owns), 0 while there is none. An integer atomic rather than
    /// `AtomicLazyReference`: its `load` is not inlined here and, generic, looked up type metadata on every call
    /// (~600 instructions, a twentieth of a small fetch).
    private let address = Atomic<UInt>(0)

    /// The kept entry, if one was stored.
    func load() -> Entry? {
        let bits = address.load(ordering: .acquiring)
        guard let pointer = UnsafeRawPointer(bitPattern: bits) else { return nil }
        return Unmanaged<Entry>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// Keeps `entry` unless an entry is kept already; returns the one kept.
    @discardableResult
    func storeIfNil(_ entry: Entry) -> Entry {
        let retained = Unmanaged.passRetained(entry)
        let bits = UInt(bitPattern: retained.toOpaque())
        let (stored, original) = address.compareExchange(expected: 0, desired: bits, ordering: .acquiringAndReleasing)
        if stored { return entry }
        retained.release()
        return Unmanaged<Entry>.fromOpaque(UnsafeRawPointer(bitPattern: original)!).takeUnretainedValue()
    }

    deinit {
        if let pointer = UnsafeRawPointer(bitPattern: address.load(ordering: .acquiring)) {
            Unmanaged<Entry>.fromOpaque(pointer).release()
        }
    }
}

/// The store's prepared fetches, one per shape of request, bounded: when full, it starts over (an app has a handful
/// of shapes of request, whatever constants it fetches with; one that builds endless distinct shapes only pays for
/// preparing them, as it would without the cache).
final class PreparedFetches: Sendable {
    private let entries = Locked<[PreparedFetch.Key: PreparedFetch]>([:])
    static let capacity = 128
    /// Which store's prepared fetches these are, unique in the process (a request's memo names it).
    let serial = PreparedFetches.serials.add(1, ordering: .relaxed).newValue
    private static let serials = Atomic<UInt64>(0)

    /// The prepared form of `request`, made and kept on first use. Errors (an unknown entity, a bad predicate or
    /// sort key) are thrown every time and nothing is kept.
    ///
    /// A request fetched again with the same store finds its prepared form in its memo (one atomic load); the
    /// first store a request meets keeps its memo, others look the request up by its key.
    func prepared(_ request: FetchRequest, store: PersistentStore) throws -> PreparedFetch {
        if let kept = request.memo.load(), kept.serial == serial { return kept.prepared }
        guard let key = PreparedFetch.Key(request) else { return try PreparedFetch(request, store: store) }
        let prepared: PreparedFetch
        if let found = entries.withLock({ $0[key] }) {
            prepared = try found.bound(to: request, store: store)
        } else {
            prepared = try PreparedFetch(request, store: store)
            entries.withLock { entries in
                if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
                entries[key] = prepared
            }
        }
        request.memo.storeIfNil(PreparedMemo.Entry(serial: serial, prepared: prepared))
        return prepared
    }

    /// How many shapes of request are kept.
    var count: Int { entries.withLock { $0.count } }

    /// Drops every kept form (requests' memos keep theirs): the next fetch of each shape prepares it again.
    func forgetAll() {
        entries.withLock { $0.removeAll() }
    }
}
