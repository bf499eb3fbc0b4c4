import Foundation

/// Text comparisons with an ASCII pattern decided on bytes: `==`, BEGINSWITH, ENDSWITH, CONTAINS and LIKE, with
/// any options. ASCII text is folded by lowercasing it (`[d]` and normalization change nothing); text beyond ASCII
/// is folded one scalar at a time through ``FoldTable`` where each of its scalars has an entry. Folding through
/// Foundation cost microseconds a record (a `CONTAINS[cd]` search over 200,000 titles took 1.4 s). The evaluator
/// and the record filter both decide text here; the general path (``ValueComparison/fold(_:_:)``) answers the rest.
extension ValueComparison {
    /// The comparison decided on bytes, or nil when the pattern holds anything but ASCII, the text a scalar without
    /// an entry in ``FoldTable``, or for another operator: the general path decides.
    static func ascii(
        _ text: String, _ op: FetchPredicate.Operator, _ pattern: String, _ options: FetchPredicate.StringOptions
    ) -> Bool? {
        guard [.equal, .beginsWith, .endsWith, .contains, .like].contains(op) else { return nil }
        var text = text
        var pattern = pattern
        return text.withUTF8 { t in
            pattern.withUTF8 { p -> Bool? in
                guard isASCII(p) else { return nil }
                if isASCII(t) { return ascii(t, op, p, foldsCase: options.contains(.caseInsensitive)) }
                return folded(t, op, p, options)
            }
        }
    }

    /// `==`, BEGINSWITH, ENDSWITH, CONTAINS or LIKE (any other operator: CONTAINS) of ASCII text `t` and pattern
    /// `p`, letters compared without their case when `foldsCase`: ``ascii(_:_:_:_:)``'s answer on the bytes, shared
    /// with the record filter's test of a stored title.
    @inline(__always)
    static func ascii(
        _ t: UnsafeBufferPointer<UInt8>, _ op: FetchPredicate.Operator, _ p: UnsafeBufferPointer<UInt8>,
        foldsCase: Bool
    ) -> Bool {
        @inline(__always) func same(_ a: UInt8, _ b: UInt8) -> Bool {
            a == b || (foldsCase && lowered(a) == lowered(b))
        }
        @inline(__always) func matches(at start: Int) -> Bool {
            for k in 0..<p.count where !same(t[start &+ k], p[k]) { return false }
            return true
        }
        switch op {
        case .equal: return t.count == p.count && matches(at: 0)
        case .beginsWith: return p.count <= t.count && matches(at: 0)
        case .endsWith: return p.count <= t.count && matches(at: t.count - p.count)
        case .like: return like(t, p, any: UInt8(ascii: "?"), run: UInt8(ascii: "*"), same)
        default: return asciiContains(t, p, foldsCase: foldsCase)
        }
    }

    /// The comparison of UTF-8 text `t`, which holds bytes beyond ASCII, with ASCII pattern `p`, on the text folded
    /// for `options` scalar by scalar (``FoldTable``). An ASCII pattern matches ASCII bytes only, and the folded
    /// text's other scalars are each their own canonical form and join nothing next to them, so its bytes answer as
    /// its scalars do; LIKE, whose `?` is one scalar, matches the folded text's scalars when it holds any beyond
    /// ASCII. Nil when a scalar has no entry.
    static func folded(
        _ t: UnsafeBufferPointer<UInt8>, _ op: FetchPredicate.Operator, _ p: UnsafeBufferPointer<UInt8>,
        _ options: FetchPredicate.StringOptions
    ) -> Bool? {
        // An entry is at most seven bytes, for a scalar of two or three.
        let capacity = t.count &* 4
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity &+ p.count) { buffer -> Bool? in
            let out = buffer.baseAddress!
            guard let (count, isASCII) = FoldTable.fold(t, options, into: out, capacity: capacity) else { return nil }
            let pattern = out + count
            if let source = p.baseAddress {
                if options.contains(.caseInsensitive) {
                    lower(source, p.count, into: pattern)
                } else {
                    pattern.update(from: source, count: p.count)
                }
            }
            if op == .like && !isASCII {
                return likeOfScalars(
                    UnsafeBufferPointer(start: out, count: count), UnsafeBufferPointer(start: pattern, count: p.count))
            }
            // Folded already: compared as they are (a byte beyond ASCII is no letter to lowercase).
            return ascii(
                UnsafeBufferPointer(start: out, count: count), op, UnsafeBufferPointer(start: pattern, count: p.count),
                foldsCase: false)
        }
    }

    /// LIKE of well-formed UTF-8 text and an ASCII pattern, element by element of their scalars.
    private static func likeOfScalars(_ t: UnsafeBufferPointer<UInt8>, _ p: UnsafeBufferPointer<UInt8>) -> Bool? {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: t.count &+ p.count) { scalars -> Bool? in
            let text = scalars.baseAddress!
            var count = 0
            var i = 0
            while i < t.count {
                guard let (scalar, length) = RecordFilter.scalar(at: i, UnsafeRawPointer(t.baseAddress!), t.count)
                else { return nil }
                text[count] = scalar
                count &+= 1
                i &+= length
            }
            let pattern = text + count
            for k in 0..<p.count { pattern[k] = UInt32(p[k]) }
            return like(
                UnsafeBufferPointer(start: text, count: count), UnsafeBufferPointer(start: pattern, count: p.count),
                any: UInt32(UInt8(ascii: "?")), run: UInt32(UInt8(ascii: "*")), ==)
        }
    }

    /// Whether `t` contains ASCII `p`, letters without their case when `foldsCase` (then `t` is ASCII too): both
    /// lowercased (eight bytes a step) into memory on the stack, then searched for with `memchr` and `memcmp`, not
    /// compared byte by byte at every place (a search field's query over a million titles).
    static func asciiContains(_ t: UnsafeBufferPointer<UInt8>, _ p: UnsafeBufferPointer<UInt8>, foldsCase: Bool) -> Bool
    {
        guard let first = p.first else { return true }
        guard p.count <= t.count, let text = t.baseAddress, let pattern = p.baseAddress else { return false }
        guard foldsCase else { return find(pattern, p.count, first, in: text, t.count) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: t.count &+ p.count) { buffer in
            let lowerText = buffer.baseAddress!
            let lowerPattern = lowerText + t.count
            lower(text, t.count, into: lowerText)
            lower(pattern, p.count, into: lowerPattern)
            return find(lowerPattern, p.count, lowerPattern[0], in: lowerText, t.count)
        }
    }

    /// Whether the `count` bytes at `text` hold the `length` bytes at `pattern` (`first` is its first byte).
    @inline(__always)
    private static func find(
        _ pattern: UnsafePointer<UInt8>, _ length: Int, _ first: UInt8, in text: UnsafePointer<UInt8>, _ count: Int
    ) -> Bool {
        // The last place the pattern can start.
        let last = count &- length
        var start = 0
        while start <= last {
            guard let hit = memchr(text + start, Int32(first), last &- start &+ 1) else { return false }
            start = text.distance(to: hit.assumingMemoryBound(to: UInt8.self))
            if length == 1 || memcmp(text + (start &+ 1), pattern + 1, length &- 1) == 0 { return true }
            start &+= 1
        }
        return false
    }

    /// ASCII bytes with their letters in lower case, eight at a time: a byte's high bit after adding 0x3F is set
    /// when it is at least `A`, after adding 0x25 when it is beyond `Z` (no carry leaves a byte below 0x80).
    @inline(__always)
    private static func lower(_ bytes: UnsafePointer<UInt8>, _ count: Int, into out: UnsafeMutablePointer<UInt8>) {
        let source = UnsafeRawPointer(bytes)
        let target = UnsafeMutableRawPointer(out)
        var i = 0
        while i &+ 8 <= count {
            let word = source.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            let upper = (word &+ 0x3F3F_3F3F_3F3F_3F3F) & ~(word &+ 0x2525_2525_2525_2525) & 0x8080_8080_8080_8080
            target.storeBytes(of: word | upper &>> 2, toByteOffset: i, as: UInt64.self)
            i &+= 8
        }
        while i < count {
            out[i] = lowered(bytes[i])
            i &+= 1
        }
    }

    /// The order of two strings surely in their canonical form (ASCII, and the scalars of
    /// ``RecordFilter/isSurelyCanonical(_:from:)``), on their bytes in one pass (`memcmp`): Swift's order, the
    /// scalars' of their canonical form, is their UTF-8 bytes' for such text, where `<` and then `==` compared them
    /// twice through the standard library's general path (a sort by title spent ~1,000 instructions a comparison
    /// there). Nil when either holds anything else (a combining mark after a letter makes another scalar of it), or
    /// is not contiguous.
    @inline(__always)
    static func canonicalBinaryOrder(_ x: String, _ y: String) -> ComparisonResult? {
        let order = x.utf8.withContiguousStorageIfAvailable { a in
            y.utf8.withContiguousStorageIfAvailable { b -> ComparisonResult? in
                guard RecordFilter.isSurelyCanonical(UnsafeRawBufferPointer(a)),
                    RecordFilter.isSurelyCanonical(UnsafeRawBufferPointer(b))
                else { return nil }
                return bytesOrder(a, b)
            }
        }
        // Nil at any level: not contiguous, or not surely canonical.
        guard case .some(.some(.some(let decided))) = order else { return nil }
        return decided
    }

    /// An ASCII byte with its letter, if any, in lower case: ASCII text folded for case.
    @inline(__always)
    static func lowered(_ byte: UInt8) -> UInt8 {
        (0x41...0x5A).contains(byte) ? byte | 0x20 : byte
    }

    /// Whether `bytes` are all ASCII (eight at a time: ``RecordFilter/isASCII(_:from:)``).
    @inline(__always)
    static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        RecordFilter.isASCII(UnsafeRawBufferPointer(bytes))
    }
}

/// The orders of text: the UTF-8 bytes of its canonical form, or of its folded canonical form (see
/// ``ValueComparison/order(_:_:_:)`` and ``SortKey/order(_:_:)``).
extension ValueComparison {
    /// The order of two byte strings.
    @inline(__always)
    static func bytesOrder(_ p: UnsafeBufferPointer<UInt8>, _ q: UnsafeBufferPointer<UInt8>) -> ComparisonResult {
        let shared = min(p.count, q.count)
        let difference = shared == 0 ? 0 : memcmp(p.baseAddress!, q.baseAddress!, shared)
        if difference != 0 { return difference < 0 ? .orderedAscending : .orderedDescending }
        return p.count == q.count ? .orderedSame : p.count < q.count ? .orderedAscending : .orderedDescending
    }

    /// The order of two strings' UTF-8 bytes (for text in canonical form, its scalars' order).
    static func bytesOrder(_ x: String, _ y: String) -> ComparisonResult {
        var x = x
        var y = y
        return x.withUTF8 { a in y.withUTF8 { b in bytesOrder(a, b) } }
    }

    /// The order of two strings folded for `options` (not empty): their folded canonical forms' bytes, or with
    /// `numeric` ``SortKey/numericOrder(_:_:)`` of them. Text the fold table covers is folded on the stack; other
    /// text through Foundation (microseconds a string, where a sort compares each value many times).
    static func foldedOrder(
        _ x: String, _ y: String, _ options: FetchPredicate.StringOptions, numeric: Bool
    ) -> ComparisonResult {
        func compare(_ p: UnsafeBufferPointer<UInt8>, _ q: UnsafeBufferPointer<UInt8>) -> ComparisonResult {
            numeric ? SortKey.numericOrder(p, q) : bytesOrder(p, q)
        }
        if case .some(.some(let order)) = withTableFolded(
            x, options,
            { p in
                withTableFolded(y, options) { q in compare(p, q) }
            })
        {
            return order
        }
        var a = fold(x, options)
        var b = fold(y, options)
        return a.withUTF8 { p in b.withUTF8 { q in compare(p, q) } }
    }

    /// `body` of `text` folded for `options` by the fold table, in a temporary buffer; nil when the table does not
    /// cover the text.
    static func withTableFolded<R>(
        _ text: String, _ options: FetchPredicate.StringOptions, _ body: (UnsafeBufferPointer<UInt8>) -> R
    ) -> R? {
        var text = text
        return text.withUTF8 { source in
            // A folded scalar takes at most 7 bytes, 3.5 times its own.
            let capacity = max(source.count &* 4, 1)
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { out -> R? in
                guard let (count, _) = FoldTable.fold(source, options, into: out.baseAddress!, capacity: capacity)
                else { return nil }
                return body(UnsafeBufferPointer(rebasing: out[..<count]))
            }
        }
    }
}

/// How the scalars of Latin text beyond ASCII fold for `[]`, `[c]`, `[d]` and `[cd]`, one scalar at a time: each
/// entry is Foundation's own folding of the scalar alone (``ValueComparison/fold(_:_:)``), so that text of such
/// scalars folds here as the general path folds it (`É` is `é` for `[c]`, `E` for `[d]`, `e` for `[cd]`; `ß` is
/// `ss` for `[c]`). The scalars with entries are Latin-1's, Latin Extended-A's and -B's, general punctuation's and
/// the currency signs, and only those that are their own canonical form, have no combining class and compose with
/// nothing before them (``RecordFilter/isSurelyCanonical(_:from:)``), and whose folding is such scalars or ASCII:
/// folded text is then in canonical form, and no scalar of it joins another. Any other scalar (a combining mark, the
/// Kelvin sign, `İ`, whose `[c]` folding is `i` and a combining dot) has none, and its text takes the general path.
/// The tests fold random text of every scalar with an entry both ways.
enum FoldTable {
    /// The entries' scalars, each range at the place after the one before.
    static let ranges: [ClosedRange<UInt32>] = [0x0080...0x024F, 0x2010...0x2027, 0x2030...0x205E, 0x20A0...0x20C0]
    /// How many scalars have a place.
    static let places = ranges.reduce(0) { $0 + $1.count }

    /// The place of `scalar`'s entries, if it has one.
    @inline(__always)
    static func place(_ scalar: UInt32) -> Int? {
        if scalar < 0x250 { return scalar >= 0x80 ? Int(scalar &- 0x80) : nil }
        if scalar >= 0x2010, scalar <= 0x2027 { return 0x1D0 &+ Int(scalar &- 0x2010) }
        if scalar >= 0x2030, scalar <= 0x205E { return 0x1E8 &+ Int(scalar &- 0x2030) }
        if scalar >= 0x20A0, scalar <= 0x20C0 { return 0x217 &+ Int(scalar &- 0x20A0) }
        return nil
    }

    /// For each options' raw value (0 to 3), an entry per place: the folded scalars' UTF-8 in the low seven bytes
    /// and its length in the top one; 0 for a scalar that does not fold alone. Made from Foundation's folding at the
    /// first use (a few thousand folds, once a process).
    nonisolated(unsafe) static let entries: UnsafePointer<UInt64> = {
        let table = UnsafeMutablePointer<UInt64>.allocate(capacity: 4 * places)
        table.initialize(repeating: 0, count: 4 * places)
        func takes(_ scalar: Unicode.Scalar) -> Bool {
            let value = scalar.value
            return value < 0x10000 && place(value) != nil
                && RecordFilter.canonicalBits[Int(value &>> 6)] & (1 &<< UInt64(value & 63)) != 0
        }
        for options in 0..<4 {
            for range in ranges {
                for value in range {
                    guard let scalar = Unicode.Scalar(value), takes(scalar) else { continue }
                    let text = String(Character(scalar))
                    let folded =
                        options == 0
                        ? text.canonicalForm
                        : ValueComparison.fold(text, FetchPredicate.StringOptions(rawValue: UInt8(options)))
                    let bytes = Array(folded.utf8)
                    guard (1...7).contains(bytes.count), folded.unicodeScalars.allSatisfy({ $0.isASCII || takes($0) })
                    else { continue }
                    var entry = UInt64(bytes.count) << 56
                    for (k, byte) in bytes.enumerated() { entry |= UInt64(byte) << (8 * UInt64(k)) }
                    table[options * places + place(value)!] = entry
                }
            }
        }
        return UnsafePointer(table)
    }()

    /// `text` folded for `options` into `out` (ASCII letters lowercased for `[c]`, other scalars by their entries):
    /// its length, and whether it is all ASCII; nil when a scalar has no entry, the UTF-8 is not well-formed, or
    /// the folded text would pass `capacity`.
    static func fold(
        _ text: UnsafeBufferPointer<UInt8>, _ options: FetchPredicate.StringOptions,
        into out: UnsafeMutablePointer<UInt8>, capacity: Int
    ) -> (count: Int, isASCII: Bool)? {
        guard let base = text.baseAddress else { return (0, true) }
        let table = entries + Int(options.rawValue & 3) &* places
        let foldsCase = options.contains(.caseInsensitive)
        var i = 0
        var n = 0
        var isASCII = true
        while i < text.count {
            let byte = base[i]
            if byte < 0x80 {
                guard n < capacity else { return nil }
                out[n] = foldsCase ? ValueComparison.lowered(byte) : byte
                n &+= 1
                i &+= 1
                continue
            }
            guard let (scalar, length) = RecordFilter.scalar(at: i, UnsafeRawPointer(base), text.count),
                let place = place(scalar)
            else { return nil }
            let entry = table[place]
            let size = Int(entry &>> 56)
            guard size > 0, n &+ size <= capacity else { return nil }
            for k in 0..<size {
                let folded = UInt8(truncatingIfNeeded: entry &>> UInt64(8 &* k))
                if folded >= 0x80 { isASCII = false }
                out[n &+ k] = folded
            }
            n &+= size
            i &+= length
        }
        return (n, isASCII)
    }
}
