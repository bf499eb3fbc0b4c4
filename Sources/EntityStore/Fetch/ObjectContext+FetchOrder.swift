extension ObjectContext {
    /// Whether a candidate with `values` and `id` comes before one with `otherValues` and `otherID` in the order
    /// `keys` ask for, ties by primary key (unique across an entity and its sub-entities: a book and a comic that
    /// tie are in the order they were made, not every book before every comic).
    static func precedes(
        _ values: [Value], _ id: ObjectID, _ otherValues: [Value], _ otherID: ObjectID, _ keys: [SortKey]
    ) -> Bool {
        for (i, key) in keys.enumerated() {
            let order = key.order(values[i], otherValues[i])
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
        guard let first = keys.first, var prefixes = SortPrefix.prefixes(of: candidates, by: first) else {
            return candidates.indices.sorted(by: precedesAt)
        }
        prefixes.sort { a, b in
            if a.rank != b.rank { return a.rank < b.rank }
            if a.high != b.high { return a.high < b.high }
            if a.low != b.low { return a.low < b.low }
            return precedesAt(Int(a.place), Int(b.place))
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
        guard case .some(.some(let prefix)) = words else { return nil }
        return prefix
    }
}
