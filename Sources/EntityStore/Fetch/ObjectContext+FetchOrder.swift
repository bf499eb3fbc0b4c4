import Foundation

extension ObjectContext {
    /// Whether a candidate with `values` and `id` comes before one with `otherValues` and `otherID` in the order
    /// `keys` ask for, ties by primary key (unique across an entity and its sub-entities: a book and a comic that
    /// tie are in the order they were made, not every book before every comic).
    static func precedes(
        _ values: [Value], _ id: ObjectID, _ otherValues: [Value], _ otherID: ObjectID, _ keys: [SortKey],
        from first: Int = 0
    ) -> Bool {
        for i in first..<keys.count {
            let order = keys[i].order(values[i], otherValues[i])
            if order != .orderedSame { return order == .orderedAscending }
        }
        return id.primaryKey < otherID.primaryKey
    }

    /// Orders candidates as a request asks: by its sort keys (their values kept with each candidate), ties by
    /// primary key.
    static func sort(_ candidates: inout [Candidate], by keys: [SortKey]) {
        candidates.sort { a, b in precedes(a.sortValues, a.id, b.sortValues, b.id, keys) }
    }

    /// The places of `candidates` in the order of `keys` (ties by primary key).
    ///
    /// When every candidate's first sort value has a ``SortPrefix``, the prefixes are sorted, each a few words
    /// copied without reference counting, and only candidates whose prefixes are equal are compared by their values;
    /// otherwise every comparison goes through ``precedes(_:_:_:_:_:)``, which copies the two candidates' values and
    /// IDs out of the list (~2,100 instructions a comparison in a sort by title, most of it reference counting).
    static func sortedPlaces(_ candidates: UnsafeBufferPointer<Candidate>, by keys: [SortKey]) -> [Int] {
        func precedesAt(_ a: Int, _ b: Int) -> Bool {
            precedes(candidates[a].sortValues, candidates[a].id, candidates[b].sortValues, candidates[b].id, keys)
        }
        guard let first = keys.first else { return candidates.indices.sorted(by: precedesAt) }
        if var prefixes = SortPrefix.prefixes(of: candidates, by: first) {
            prefixes.sort { a, b in
                if a.rank != b.rank { return a.rank < b.rank }
                if a.high != b.high { return a.high < b.high }
                if a.low != b.low { return a.low < b.low }
                return precedesAt(Int(a.place), Int(b.place))
            }
            return prefixes.map { Int($0.place) }
        }
        // Text the prefixes do not cover (beyond ASCII folded, not in canonical form, `localizedStandard`): each
        // value folded once, where comparing values folded both at every comparison (a sort of 50,000 accented
        // titles by case took seconds).
        guard let collation = SortPrefix.Collation(candidates, by: first) else {
            return candidates.indices.sorted(by: precedesAt)
        }
        var prefixes = collation.prefixes
        prefixes.sort { a, b in
            if a.rank != b.rank { return a.rank < b.rank }
            if a.high != b.high { return a.high < b.high }
            if a.low != b.low { return a.low < b.low }
            let (p, q) = (Int(a.place), Int(b.place))
            let order = collation.order(p, q)
            if order != .orderedSame { return order == .orderedAscending }
            return precedes(
                candidates[p].sortValues, candidates[p].id, candidates[q].sortValues, candidates[q].id, keys, from: 1)
        }
        return prefixes.map { Int($0.place) }
    }

    /// Keeps the best `count` of the scan's candidates (in order), and the last of them as the bound the next ones
    /// must beat.
    static func keepBest(_ count: Int, of scan: ScanState, by keys: [SortKey]) {
        let order = scan.candidates.withUnsafeBufferPointer { sortedPlaces($0, by: keys) }
        scan.candidates = order.prefix(count).map { scan.candidates[$0] }
        if let last = scan.candidates.last, scan.candidates.count == count {
            scan.bound = (last.sortValues, last.id)
        }
    }

    /// The request's window (offset and limit) of ordered candidates, of which the first `skipped` matches were
    /// dropped already.
    static func window(_ candidates: [Candidate], _ request: FetchRequest, skipped: Int = 0) -> [Candidate] {
        let start = min(request.fetchOffset - skipped, candidates.count)
        let end = min(candidates.count, request.windowEnd - skipped)
        // The whole list as it is (a copy retained every candidate's record and values).
        if start == 0 && end == candidates.count { return candidates }
        return Array(candidates[start..<end])
    }
}

/// A candidate's first sort value as words whose order is the sort key's (ascending or descending), and the
/// candidate's place: nil first (last when descending), then the value. Integers, booleans, doubles and dates map
/// exactly (doubles as ``ValueSemantics`` orders them: one zero, NaN after every number); text compared binary
/// and surely in its canonical form, and ASCII text compared case- or diacritic-insensitively, map their first 16
/// bytes (lowercased when case folds), padded with zeros, so that text whose prefixes differ is in the prefixes'
/// order and text whose prefixes are equal is compared whole. Other values (other text, `localizedStandard`,
/// decimals, UUIDs, data) have none.
struct SortPrefix {
    var rank: UInt8
    var high: UInt64
    var low: UInt64
    var place: Int32

    /// Every candidate's prefix by `key`, or nil when one has none (or there are more than `Int32.max`).
    static func prefixes(of candidates: UnsafeBufferPointer<ObjectContext.Candidate>, by key: SortKey) -> [SortPrefix]?
    {
        guard candidates.count < Int(Int32.max), key.comparison != .localizedStandard else { return nil }
        let foldsCase = key.comparison == .caseInsensitive || key.comparison == .caseDiacriticInsensitive
        var prefixes: [SortPrefix] = []
        prefixes.reserveCapacity(candidates.count)
        // The kind of the first value that is not nil: every other must be of it.
        var kind: UInt8 = 0
        for place in candidates.indices {
            guard let value = candidates[place].sortValues.first else { return nil }
            var prefix = SortPrefix(rank: 1, high: 0, low: 0, place: Int32(place))
            let valueKind: UInt8
            switch value {
            case .null:
                prefix.rank = 0
                valueKind = 0
            case .int(let v):
                prefix.high = UInt64(bitPattern: v) ^ (1 << 63)
                valueKind = 1
            case .bool(let v):
                prefix.high = v ? 1 : 0
                valueKind = 2
            case .double(let v):
                prefix.high = orderedBits(v)
                valueKind = 3
            case .date(let v):
                prefix.high = orderedBits(v.timeIntervalSinceReferenceDate)
                valueKind = 4
            case .string(let v):
                guard
                    let (high, low) = textPrefix(v, foldsCase: foldsCase, anyCanonical: key.comparison == .binary)
                else { return nil }
                (prefix.high, prefix.low) = (high, low)
                valueKind = 5
            default:
                return nil
            }
            if valueKind != 0 {
                if kind == 0 { kind = valueKind } else if kind != valueKind { return nil }
            }
            if !key.ascending { (prefix.rank, prefix.high, prefix.low) = (1 - prefix.rank, ~prefix.high, ~prefix.low) }
            prefixes.append(prefix)
        }
        return prefixes
    }

    /// A double's bits, ordered as ``ValueSemantics`` orders doubles: one zero, NaN equal to NaN and after every
    /// number.
    @inline(__always)
    static func orderedBits(_ value: Double) -> UInt64 {
        if value.isNaN { return .max }
        let bits = (value == 0 ? 0.0 : value).bitPattern
        return bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63)
    }

    /// The first 16 bytes of text as two big-endian words padded with zeros: of ASCII text (lowercased when
    /// `foldsCase`), or with `anyCanonical` of text surely in its canonical form (whose binary order is its UTF-8
    /// bytes'). Nil for other text (its order is its canonical form's, or Foundation's) or text that is not
    /// contiguous.
    static func textPrefix(_ text: String, foldsCase: Bool, anyCanonical: Bool) -> (UInt64, UInt64)? {
        let words = text.utf8.withContiguousStorageIfAvailable { bytes -> (UInt64, UInt64)? in
            let raw = UnsafeRawBufferPointer(bytes)
            guard anyCanonical ? RecordFilter.isSurelyCanonical(raw) : RecordFilter.isASCII(raw) else { return nil }
            return SortPrefix.words(bytes, foldsCase: foldsCase)
        }
        guard case .some(.some(let prefix)) = words else { return nil }
        return prefix
    }

    /// The first 16 of `bytes` as two big-endian words padded with zeros (ASCII letters lowercased when
    /// `foldsCase`): words whose order is the bytes' where they differ there.
    static func words(_ bytes: UnsafeBufferPointer<UInt8>, foldsCase: Bool) -> (UInt64, UInt64) {
        var high: UInt64 = 0
        var low: UInt64 = 0
        for i in 0..<16 {
            var byte = i < bytes.count ? bytes[i] : 0
            if foldsCase { byte = ValueComparison.lowered(byte) }
            if i < 8 {
                high |= UInt64(byte) << (56 - 8 * UInt64(i))
            } else {
                low |= UInt64(byte) << (120 - 8 * UInt64(i))
            }
        }
        return (high, low)
    }

    /// The text of a sort key's values as it compares them, made once per candidate: the UTF-8 of its canonical form
    /// for a binary key, of its folded canonical form for the others (see ``SortKey/order(_:_:)``), in one buffer;
    /// with their prefixes (the first 16 bytes; none for `localizedStandard`, whose numbers compare by value).
    struct Collation {
        let key: SortKey
        var prefixes: [SortPrefix] = []
        /// Each candidate's text in `bytes`: its start and length (empty for a nil value).
        var spans: [(start: Int, count: Int)] = []
        var bytes: [UInt8] = []

        /// Nil when a value is neither text nor nil.
        init?(_ candidates: UnsafeBufferPointer<ObjectContext.Candidate>, by key: SortKey) {
            guard candidates.count < Int(Int32.max) else { return nil }
            self.key = key
            let options = key.comparison.foldOptions
            prefixes.reserveCapacity(candidates.count)
            spans.reserveCapacity(candidates.count)
            for place in candidates.indices {
                var prefix = SortPrefix(rank: 1, high: 0, low: 0, place: Int32(place))
                switch candidates[place].sortValues.first {
                case .null?:
                    prefix.rank = 0
                    spans.append((0, 0))
                case .string(let text)?:
                    let start = bytes.count
                    Self.append(text, options, to: &bytes)
                    spans.append((start, bytes.count - start))
                    if key.comparison != .localizedStandard {
                        (prefix.high, prefix.low) = bytes.withUnsafeBufferPointer {
                            SortPrefix.words(UnsafeBufferPointer(rebasing: $0[start...]), foldsCase: false)
                        }
                    }
                default:
                    return nil
                }
                if !key.ascending {
                    (prefix.rank, prefix.high, prefix.low) = (1 - prefix.rank, ~prefix.high, ~prefix.low)
                }
                prefixes.append(prefix)
            }
        }

        /// Appends `text` folded for `options` (its canonical form for none): through the fold table where it covers
        /// the text, else Foundation's folding.
        static func append(_ text: String, _ options: FetchPredicate.StringOptions, to bytes: inout [UInt8]) {
            var text = text
            let done =
                options.isEmpty
                ? text.withUTF8 { source -> Bool in
                    guard RecordFilter.isSurelyCanonical(UnsafeRawBufferPointer(source)) else { return false }
                    bytes.append(contentsOf: source)
                    return true
                }
                : ValueComparison.withTableFolded(text, options) { bytes.append(contentsOf: $0) } != nil
            if !done { bytes.append(contentsOf: ValueComparison.fold(text, options).utf8) }
        }

        /// The order of two candidates' texts in the key's direction (a nil value has the lower rank, and is equal
        /// to another here).
        func order(_ a: Int, _ b: Int) -> ComparisonResult {
            let (x, y) = (spans[a], spans[b])
            let base = bytes.withUnsafeBufferPointer { all -> ComparisonResult in
                let p = UnsafeBufferPointer(rebasing: all[x.start..<x.start + x.count])
                let q = UnsafeBufferPointer(rebasing: all[y.start..<y.start + y.count])
                return key.comparison == .localizedStandard
                    ? SortKey.numericOrder(p, q) : ValueComparison.bytesOrder(p, q)
            }
            return key.ascending ? base : base.reversed
        }
    }
}
