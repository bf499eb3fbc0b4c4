import LMDB
import Synchronization

/// A map from objects, by identity, to values that live as long as the process, read without a lock.
///
/// For a few long-lived keys read on every typed access: model classes, and the key path objects the compiler
/// hands a call site (the same object every time). A `Dictionary` keyed by the class would hash with SipHash, and
/// one keyed by a key path hashes and compares its components (about 650 instructions a lookup, twice per typed
/// fetch). Here a lookup is a load, a multiply and a compare or two.
///
/// Readers load the current table through one atomic pointer. A writer adds under the lock; an entry not yet in
/// the published table is found under the lock until the entries not published reach the published table's own
/// count, when a table of every entry is published. Tables are never freed (a reader may still hold an old one),
/// but as each has at least twice the entries of the one before, all of them together hold fewer than twice the
/// entries of the last (it took a copy of the whole table at each entry: a cache of 4,096 entries kept 4,096
/// tables, 8 million slots). At most `limit` entries are taken, and past that ``add(_:for:retaining:onAdd:)``
/// declines (the caller keeps its own slower path). A key object given as `retaining` is kept alive with its
/// entry, so that its address is never reused by another object; classes (their metadata) live as long as the
/// process anyway.
final class IdentityCache<Value: AnyObject>: @unchecked Sendable {
    // @unchecked Sendable: `state` is only touched under its lock; a published table is immutable.
    private struct State {
        var entries: [ObjectIdentifier: Value] = [:]
        var retained: [AnyObject] = []
        var tables: [IdentityTable<Value>] = []
        /// The entries of the published table.
        var published = 0
    }
    private let state = Locked(State())
    /// The current table's address (0 before the first).
    private let published = Atomic<UInt>(0)
    /// Whether entries wait under the lock, not yet in the published table.
    private let unpublished = Atomic<Bool>(false)
    /// The most entries taken.
    let limit: Int

    init(limit: Int) { self.limit = limit }

    /// The value for an object, if one was added, unretained: values live as long as the cache.
    @inline(__always)
    func value(for id: ObjectIdentifier) -> Unmanaged<Value>? {
        if let pointer = UnsafeRawPointer(bitPattern: published.load(ordering: .acquiring)),
            // Published tables are never freed, nor are the values they hold: no retain needed to read one.
            let found = Unmanaged<IdentityTable<Value>>.fromOpaque(pointer)._withUnsafeGuaranteedRef({
                $0.value(for: id)
            })
        {
            return found
        }
        guard unpublished.load(ordering: .acquiring) else { return nil }
        return state.withLock { $0.entries[id].map { .passUnretained($0) } }
    }

    /// Adds `value` for `id` and returns it, or returns the value already there; `nil` when the cache is full.
    ///
    /// - Parameters:
    ///   - key: The key object, kept alive with its entry (`nil` for a class).
    ///   - onAdd: Run under the lock when the value is added, before any reader can find it.
    @discardableResult
    func add(
        _ value: Value, for id: ObjectIdentifier, retaining key: AnyObject?, onAdd: () -> Void = {}
    ) -> Unmanaged<Value>? {
        state.withLock { state in
            if let existing = state.entries[id] { return .passUnretained(existing) }
            guard state.entries.count < limit else { return nil }
            state.entries[id] = value
            if let key { state.retained.append(key) }
            onAdd()
            if state.entries.count - state.published >= max(8, state.published) {
                let table = IdentityTable(state.entries)
                state.tables.append(table)
                state.published = state.entries.count
                published.store(UInt(bitPattern: Unmanaged.passUnretained(table).toOpaque()), ordering: .releasing)
                unpublished.store(false, ordering: .releasing)
            } else {
                unpublished.store(true, ordering: .releasing)
            }
            return .passUnretained(value)
        }
    }

    /// The number of entries (for tests).
    var count: Int { state.withLock { $0.entries.count } }

    /// The slots of every table published so far (for tests: the memory the cache holds).
    var publishedSlots: Int { state.withLock { $0.tables.reduce(0) { $0 + $1.capacity } } }
}

/// An immutable table from object addresses to values: open addressing, at most half full.
final class IdentityTable<Value: AnyObject> {
    private let mask: Int
    var capacity: Int { mask + 1 }
    /// `mask + 1` entries: an object's address (0 for none) and its value, unretained (the cache's entries retain
    /// the values).
    private let entries: UnsafeMutablePointer<(address: UInt, value: Unmanaged<Value>?)>

    init(_ values: [ObjectIdentifier: Value]) {
        var capacity = 16
        while capacity < values.count * 2 { capacity *= 2 }
        mask = capacity - 1
        entries = .allocate(capacity: capacity)
        entries.initialize(repeating: (0, nil), count: capacity)
        for (id, value) in values {
            var index = Self.start(UInt(bitPattern: id), mask)
            while entries[index].address != 0 { index = (index + 1) & mask }
            entries[index] = (UInt(bitPattern: id), Unmanaged.passUnretained(value))
        }
    }

    deinit { entries.deallocate() }

    @inline(__always)
    private static func start(_ address: UInt, _ mask: Int) -> Int {
        Int(truncatingIfNeeded: ((address >> 4) &* 0x9E37_79B9_7F4A_7C15) >> 40) & mask
    }

    @inline(__always)
    func value(for id: ObjectIdentifier) -> Unmanaged<Value>? {
        let address = UInt(bitPattern: id)
        var index = Self.start(address, mask)
        while true {
            let entry = entries[index]
            if entry.address == address { return entry.value }
            if entry.address == 0 { return nil }
            index = (index + 1) & mask
        }
    }
}
