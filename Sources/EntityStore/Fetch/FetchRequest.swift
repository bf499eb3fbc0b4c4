import Foundation

/// One key of a fetch's order: a key path (through to-one relationships), a direction and a string comparison.
///
/// (Named so as not to clash with Foundation's `SortDescriptor`.)
public struct SortKey: Hashable, Sendable, CustomStringConvertible {
    /// How strings compare.
    public enum Comparison: String, Hashable, Sendable {
        /// By the UTF-8 bytes of the text's canonical form, NFC (the order of an index).
        case binary
        /// Ignoring case: by the bytes of the text folded as `[c]` folds it, in canonical form.
        case caseInsensitive
        /// Ignoring diacritics: by the bytes of the text folded as `[d]` folds it, in canonical form.
        case diacriticInsensitive
        /// Ignoring case and diacritics: by the bytes of the text folded as `[cd]` folds it, in canonical form.
        case caseDiacriticInsensitive
        /// Finder-like: ignoring case, runs of ASCII digits by their value ("file2" before "file10"), then as
        /// ``caseInsensitive``.
        case localizedStandard

        /// How the comparison folds text before comparing its bytes, as a predicate's options fold it.
        var foldOptions: FetchPredicate.StringOptions {
            switch self {
            case .binary: []
            case .caseInsensitive, .localizedStandard: .caseInsensitive
            case .diacriticInsensitive: .diacriticInsensitive
            case .caseDiacriticInsensitive: .caseDiacriticInsensitive
            }
        }
    }

    /// The key path, e.g. `"title"` or `"author.name"`.
    public var keyPath: String
    /// Ascending (nil first) or descending (nil last).
    public var ascending: Bool
    /// How strings compare.
    public var comparison: Comparison

    /// A sort key on `keyPath`.
    public init(_ keyPath: String, ascending: Bool = true, comparison: Comparison = .binary) {
        self.keyPath = keyPath
        self.ascending = ascending
        self.comparison = comparison
    }

    /// `"title"`, `"-title"` for descending; parses the CLI's `--sort key,-key`.
    public init?(parsing text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let descending = trimmed.hasPrefix("-")
        let key = descending ? String(trimmed.dropFirst()) : trimmed
        guard !key.isEmpty else { return nil }
        self.init(key, ascending: !descending)
    }

    public var description: String { (ascending ? "" : "-") + keyPath }

    /// The order of two ASCII strings under a case- or diacritic-insensitive comparison, on their bytes: folding
    /// ASCII is at most lowercasing it, and the folded texts' bytes give the order (see
    /// ``ValueComparison/order(_:_:_:)``). Nil when either holds anything else.
    static func asciiOrder(_ x: String, _ y: String, foldsCase: Bool) -> ComparisonResult? {
        var x = x
        var y = y
        return x.withUTF8 { a in
            y.withUTF8 { b -> ComparisonResult? in
                // A scalar beyond ASCII anywhere may compose with what comes before it: the general path decides.
                guard ValueComparison.isASCII(a), ValueComparison.isASCII(b) else { return nil }
                for i in 0..<min(a.count, b.count) {
                    let (p, q) =
                        foldsCase ? (ValueComparison.lowered(a[i]), ValueComparison.lowered(b[i])) : (a[i], b[i])
                    if p != q { return p < q ? .orderedAscending : .orderedDescending }
                }
                return a.count == b.count ? .orderedSame : a.count < b.count ? .orderedAscending : .orderedDescending
            }
        }
    }

    /// The order of two strings under ``Comparison/localizedStandard``: their text folded for case (ASCII on its
    /// bytes, anything else through Foundation's folding, then in canonical form), with runs of ASCII digits
    /// compared by their value (leading zeros ignored, of any length) and everything else by its UTF-8 bytes, the
    /// shorter first where one ends. Foundation's `compare(_:options:)` with `.numeric` gives the same order for
    /// ASCII text whose runs of digits fit in 64 bits (the tests check it on random text; it wraps longer runs) at
    /// ~2.5 µs a comparison, and on Linux its order of text beyond ASCII is not transitive (`"eö" < "Éÿ" < "éı10é"`
    /// but not `"eö" < "éı10é"`), which left a sort's result to the sort's algorithm.
    static func numericOrder(_ x: String, _ y: String) -> ComparisonResult {
        var x = x
        var y = y
        if let order = x.withUTF8({ a in
            y.withUTF8 { b in
                ValueComparison.isASCII(a) && ValueComparison.isASCII(b) ? numericOrder(a, b) : nil
            }
        }) {
            return order
        }
        return ValueComparison.foldedOrder(x, y, .caseInsensitive, numeric: true)
    }

    /// ``numericOrder(_:_:)`` of two texts' UTF-8 bytes, ASCII letters lowercased.
    static func numericOrder(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> ComparisonResult {
        @inline(__always) func isDigit(_ byte: UInt8) -> Bool { byte &- 0x30 < 10 }
        var i = 0
        var j = 0
        while i < a.count && j < b.count {
            if isDigit(a[i]) && isDigit(b[j]) {
                // Each run without its leading zeros: the longer is the larger, else the first digit that differs
                // decides. (A digit against anything else compares as a byte: every other byte is below all digits
                // or above them, whichever digit starts the run.)
                while i < a.count && a[i] == 0x30 { i &+= 1 }
                while j < b.count && b[j] == 0x30 { j &+= 1 }
                var m = i
                var n = j
                while m < a.count && isDigit(a[m]) { m &+= 1 }
                while n < b.count && isDigit(b[n]) { n &+= 1 }
                if m &- i != n &- j { return m &- i < n &- j ? .orderedAscending : .orderedDescending }
                while i < m {
                    if a[i] != b[j] { return a[i] < b[j] ? .orderedAscending : .orderedDescending }
                    i &+= 1
                    j &+= 1
                }
                continue
            }
            let (p, q) = (ValueComparison.lowered(a[i]), ValueComparison.lowered(b[j]))
            if p != q { return p < q ? .orderedAscending : .orderedDescending }
            i &+= 1
            j &+= 1
        }
        let (restA, restB) = (a.count &- i, b.count &- j)
        return restA == restB ? .orderedSame : restA < restB ? .orderedAscending : .orderedDescending
    }

    /// Compares two values in this key's direction and comparison.
    func order(_ a: Value, _ b: Value) -> ComparisonResult {
        let base: ComparisonResult
        switch (a, b) {
        case (.int(let x), .int(let y)): base = x < y ? .orderedAscending : x > y ? .orderedDescending : .orderedSame
        case (.null, .null): base = .orderedSame
        case (.null, _): base = .orderedAscending
        case (_, .null): base = .orderedDescending
        case (.string(let x), .string(let y)) where comparison != .binary:
            base =
                comparison == .localizedStandard
                ? Self.numericOrder(x, y) : ValueComparison.order(a, b, comparison.foldOptions) ?? .orderedSame
        default:
            base = ValueComparison.order(a, b, []) ?? .orderedSame
        }
        return ascending ? base : base.reversed
    }
}

extension ComparisonResult {
    /// The order the other way round (a descending key's).
    var reversed: ComparisonResult {
        switch self {
        case .orderedAscending: .orderedDescending
        case .orderedDescending: .orderedAscending
        case .orderedSame: .orderedSame
        }
    }
}

/// What a fetch asks for: an entity, a predicate, an order, a window and the shape of the result.
///
/// <!-- snippet
/// uses: library
/// let store = try openLibrary()
/// let context = ObjectContext(store: store)
/// -->
/// ```swift
/// var request = FetchRequest(entity: "Book")
/// request.predicate = try FetchPredicate("pages > %d", 300)
/// request.sortKeys = [SortKey("title", comparison: .localizedStandard)]
/// request.fetchLimit = 20
/// let books = try context.fetch(request)
/// ```
public struct FetchRequest: Hashable, Sendable {
    /// The shape of a fetch's result.
    public enum ResultType: Hashable, Sendable {
        /// Managed objects.
        case objects
        /// Object IDs.
        case objectIDs
        /// The number of matches.
        case count
        /// Dictionaries of the named attributes (key paths through to-one relationships allowed).
        case dictionaries([String])
    }

    /// The entity to fetch.
    public var entity: String { didSet { memo = PreparedMemo() } }
    /// The condition objects must meet; `nil` for all.
    public var predicate: FetchPredicate? { didSet { memo = PreparedMemo() } }
    /// The order; ties are broken by primary key (unique across an entity and its sub-entities), so the order is
    /// total, and the same in a fetch and a controller.
    public var sortKeys: [SortKey] { didSet { memo = PreparedMemo() } }
    /// The request's prepared form, kept with the request: a request fetched again finds it without hashing its
    /// predicate. Copies share it; changing what preparing reads (entity, predicate, sort keys) starts a new one.
    var memo = PreparedMemo()
    /// At most this many results; 0 for no limit.
    public var fetchLimit: Int = 0
    /// Skip this many results first.
    public var fetchOffset: Int = 0

    /// The position after the window's last result: offset + limit, saturating (`Int.max` without a limit).
    var windowEnd: Int {
        guard fetchLimit > 0 else { return .max }
        let (end, overflow) = fetchOffset.addingReportingOverflow(fetchLimit)
        return overflow ? .max : end
    }
    /// When above 0, objects beyond the first batch are returned as faults and load this many at a time.
    public var fetchBatchSize: Int = 0
    /// The result's shape (``ObjectContext/fetch(_:)->[ManagedObject]`` returns objects whatever this says; ``ObjectContext/execute(_:)`` honours
    /// it).
    public var resultType: ResultType = .objects
    /// Reflect the context's unsaved inserts, updates and deletes (as Core Data does by default).
    public var includesPendingChanges = true
    /// Relationship key paths whose objects are loaded with the results (`"author"`, `"chapters.notes"`).
    public var relationshipKeyPathsForPrefetching: [String] = []
    /// For dictionary results: each distinct dictionary once, in the order first met (Core Data's
    /// `returnsDistinctResults`); the window applies to the distinct rows.
    public var returnsDistinctResults = false
    /// Whether a fetch of an entity with sub-entities includes their objects (Core Data's `includesSubentities`;
    /// true by default). A fetch of an abstract entity without them finds nothing.
    public var includesSubentities = true

    /// A request for objects of `entity`.
    public init(entity: String, predicate: FetchPredicate? = nil, sortKeys: [SortKey] = []) {
        self.entity = entity
        self.predicate = predicate
        self.sortKeys = sortKeys
    }

    public static func == (lhs: FetchRequest, rhs: FetchRequest) -> Bool {
        lhs.entity == rhs.entity && lhs.predicate == rhs.predicate && lhs.sortKeys == rhs.sortKeys
            && lhs.fetchLimit == rhs.fetchLimit && lhs.fetchOffset == rhs.fetchOffset
            && lhs.fetchBatchSize == rhs.fetchBatchSize && lhs.resultType == rhs.resultType
            && lhs.includesPendingChanges == rhs.includesPendingChanges
            && lhs.relationshipKeyPathsForPrefetching == rhs.relationshipKeyPathsForPrefetching
            && lhs.returnsDistinctResults == rhs.returnsDistinctResults
            && lhs.includesSubentities == rhs.includesSubentities
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(entity)
        hasher.combine(predicate)
        hasher.combine(sortKeys)
        hasher.combine(fetchLimit)
        hasher.combine(fetchOffset)
        hasher.combine(fetchBatchSize)
        hasher.combine(resultType)
        hasher.combine(includesPendingChanges)
        hasher.combine(relationshipKeyPathsForPrefetching)
        hasher.combine(returnsDistinctResults)
        hasher.combine(includesSubentities)
    }
}

/// The result of ``ObjectContext/execute(_:)``, shaped by the request's result type.
public enum FetchResult {
    /// Managed objects.
    case objects([ManagedObject])
    /// Object IDs.
    case objectIDs([ObjectID])
    /// The number of matches.
    case count(Int)
    /// Dictionaries of the requested attributes.
    case dictionaries([[String: Value]])
}
