import Foundation

/// The comparisons of a predicate (the predicate itself, or the conjuncts of an AND) that are of the entity's own
/// int64, double, date or bool attributes with constants of the same type, or of its own strings by `==`, `!=`, `IN`
/// or `BEGINSWITH` (without options), or by `==`, BEGINSWITH, ENDSWITH, CONTAINS or LIKE (with any options) with an
/// ASCII constant, evaluated on the encoded record: no `Value`, no subject, no allocation per record. A scan asks it
/// first; only the records it accepts go through the full evaluator, which decides the conjuncts left out (an AND
/// holds only where each of its conjuncts does, so refusing a record on some of them is refusing it on all).
///
/// Its answers for scalars are those of ``CompiledPredicate`` (the tests compare both on random records): nil
/// matches only `!=`, doubles and dates are ordered as ``ValueSemantics`` orders them (one zero, NaN equal to NaN
/// and after every number), booleans order false before true. A string is compared byte for byte with the
/// constant's canonical form (NFC) when it is surely in that form itself (``isSurelyCanonical(_:from:)``: text of
/// letters, digits, punctuation and symbols of most scripts without combining marks, or whose other scalars are
/// all within the bytes it shares with the constant), so the answer is the evaluator's; any other string passes,
/// and the evaluator decides (canonically equivalent text can be spelled in other bytes, and even ASCII has
/// equivalents outside it: the Kelvin sign is `K`). A comparison with an ASCII constant is decided on the bytes of
/// ASCII text as ``ValueComparison/ascii(_:_:_:foldsCase:)`` decides it (folding ASCII is at most lowercasing it),
/// and on other text folded scalar by scalar where each of its scalars folds alone (``FoldTable``); other text
/// passes, and the evaluator decides.
final class RecordFilter {
    /// One test on one attribute's value, held as bits so that a record's value is compared without building a
    /// `Value`: int64 and bool constants (false 0, true 1) as `Int64`, doubles and dates as `Double`.
    struct Test {
        enum Op: UInt8 {
            case equal, notEqual, less, lessOrEqual, greater, greaterOrEqual, between, oneOf, prefix
            /// A text comparison with an ASCII constant, decided on bytes: `high` holds its operator's place in
            /// ``RecordFilter/asciiOperators`` (shifted left by two) and its options' raw value (the lowest bits).
            case ascii
        }
        var op: Op
        /// The constant, or `between`'s lower bound; for a string, its first range in `textRanges`.
        var low: UInt64
        /// `between`'s upper bound; `oneOf`'s list in `lists`; for a string, how many ranges (`oneOf`'s list).
        var high: UInt64
    }

    /// How the scan reads one attribute's field (skipping it, or reading it and running its tests).
    struct Step {
        enum Kind: UInt8 {
            case bool, int, double, uuid, bytes, text
            /// Text with a test decided on ASCII bytes.
            case asciiText

            var isVariableSize: Bool { self == .bytes || self == .text || self == .asciiText }
        }
        var kind: Kind
        var tag: UInt8
        var attribute: Int32
        var firstTest: Int32
        var endTest: Int32
    }

    /// The entity's attribute count (a record holds them all).
    let attributeCount: Int
    /// Whether the tests are the whole predicate and each decides its comparison on every well-formed record (the
    /// comparisons of int64, double, date and bool attributes; not text, which may pass undecided): a record
    /// ``matches(_:)`` accepts then matches the predicate, and the evaluator need not see it.
    let decidesAll: Bool
    /// The scan's walks through a record, in memory of their own: trivial values only, read per record without
    /// retaining anything or checking bounds. `scalarWalk` is format 2's: the fixed-size attributes up to the last
    /// tested one (the tested types are all fixed-size, and come first); `schemaWalk` is format 1's: every attribute
    /// up to the last tested one. With a string tested, format 2's walk is every fixed-size field, then the
    /// variable-size ones up to the last tested.
    private let scalarWalk: UnsafeMutableBufferPointer<Step>
    private let schemaWalk: UnsafeMutableBufferPointer<Step>
    private let tests: UnsafeMutableBufferPointer<Test>
    /// `oneOf`'s values, as bits like `Test.low`.
    private let lists: [[UInt64]]
    /// The strings compared with, each the UTF-8 of its canonical form, one after another in `textBytes`, and
    /// where each is (`oneOf`'s lists as runs of ranges): compared with `memcmp`, without an array's reference
    /// counting or bounds checks per record.
    private let textBytes: UnsafeMutableRawBufferPointer
    private let textRanges: UnsafeMutableBufferPointer<Range<Int>>

    /// The operators of ``Test/Op/ascii`` tests, by place.
    static let asciiOperators: [FetchPredicate.Operator] = [.equal, .beginsWith, .endsWith, .contains, .like]

    /// A filter for the comparisons of `predicate` on `entity` it can test, or `nil` when it has none.
    init?(_ predicate: FetchPredicate, entity: Entity) {
        let parts: [FetchPredicate]
        if case .and(let conjuncts) = predicate { parts = conjuncts } else { parts = [predicate] }
        var tests: [(attribute: Int, test: Test)] = []
        var lists: [[UInt64]] = []
        var texts: [[UInt8]] = []
        var decidesAll = true
        for part in parts {
            // A part that adds no test is left to the evaluator.
            let testsBefore = tests.count
            defer { if tests.count == testsBefore { decidesAll = false } }
            guard case .comparison(let c) = part, c.quantifier == nil, c.subquery == nil, c.keyPath.count == 1,
                let index = entity.attributeIndex(c.keyPath[0])
            else { continue }
            let type = entity.attributes[index].type
            if type == .string {
                decidesAll = false
                func text(_ value: Value) -> [UInt8]? {
                    if case .string(let v) = value { Array(v.canonicalForm.utf8) } else { nil }
                }
                switch (c.op, c.operand) {
                case (.equal, .value(let v)) where c.options.isEmpty,
                    (.notEqual, .value(let v)) where c.options.isEmpty,
                    (.beginsWith, .value(let v)) where c.options.isEmpty:
                    guard let constant = text(v) else { continue }
                    let op: Test.Op = c.op == .equal ? .equal : c.op == .notEqual ? .notEqual : .prefix
                    tests.append((index, Test(op: op, low: UInt64(texts.count), high: 1)))
                    texts.append(constant)
                case (.in, .list(let values)) where c.options.isEmpty:
                    let list = values.compactMap(text)
                    guard list.count == values.count else { continue }
                    tests.append((index, Test(op: .oneOf, low: UInt64(texts.count), high: UInt64(list.count))))
                    texts += list
                case (_, .value(.string(let v))):
                    let constant = Array(v.utf8)
                    guard let place = Self.asciiOperators.firstIndex(of: c.op),
                        !constant.contains(where: { $0 >= 0x80 })
                    else { continue }
                    let options = UInt64(c.options.rawValue & 3)
                    tests.append(
                        (index, Test(op: .ascii, low: UInt64(texts.count), high: UInt64(place) << 2 | options)))
                    texts.append(constant)
                default:
                    continue
                }
                continue
            }
            guard c.options.isEmpty else { continue }
            func bits(_ value: Value) -> UInt64? {
                switch (type, value) {
                case (.int64, .int(let v)): UInt64(bitPattern: v)
                case (.double, .double(let v)): v.bitPattern
                case (.date, .date(let v)): v.timeIntervalSinceReferenceDate.bitPattern
                case (.bool, .bool(let v)): v ? 1 : 0
                default: nil
                }
            }
            let op: Test.Op
            switch c.op {
            case .equal: op = .equal
            case .notEqual: op = .notEqual
            case .less: op = .less
            case .lessOrEqual: op = .lessOrEqual
            case .greater: op = .greater
            case .greaterOrEqual: op = .greaterOrEqual
            case .in: op = .oneOf
            case .between: op = .between
            default: continue
            }
            switch (op, c.operand) {
            case (.oneOf, .list(let values)):
                let list = values.compactMap(bits)
                guard list.count == values.count else { continue }
                tests.append((index, Test(op: .oneOf, low: 0, high: UInt64(lists.count))))
                lists.append(list)
            case (.between, .list(let values)) where values.count == 2:
                guard let low = bits(values[0]), let high = bits(values[1]) else { continue }
                tests.append((index, Test(op: .between, low: low, high: high)))
            case (.oneOf, _), (.between, _):
                continue
            case (_, .value(let v)):
                guard let constant = bits(v) else { continue }
                tests.append((index, Test(op: op, low: constant, high: 0)))
            default:
                continue
            }
        }
        guard !tests.isEmpty else { return nil }
        self.decidesAll = decidesAll
        tests.sort { $0.attribute < $1.attribute }
        attributeCount = entity.attributes.count
        let last = tests.last!.attribute
        self.lists = lists
        textBytes = .allocate(byteCount: max(1, texts.reduce(0) { $0 + $1.count }), alignment: 1)
        textRanges = .allocate(capacity: texts.count)
        var end = 0
        for (k, text) in texts.enumerated() {
            textRanges[k] = end..<end + text.count
            for byte in text {
                textBytes[end] = byte
                end += 1
            }
        }
        self.tests = .allocate(capacity: tests.count)
        for (position, test) in tests.enumerated() { self.tests[position] = test.test }
        var steps: [Step] = []
        var next = 0
        // Format 2 holds every fixed-size field before the first variable-size one: with a string tested, the walk
        // steps over all of them.
        let testsText = tests.contains { entity.attributes[$0.attribute].type == .string }
        for i in 0..<(testsText ? attributeCount : last + 1) {
            let first = next
            while next < tests.count && tests[next].attribute == i { next += 1 }
            let type = entity.attributes[i].type
            let kind: Step.Kind =
                switch type {
                case .bool: .bool
                case .int64: .int
                case .double, .date: .double
                case .uuid: .uuid
                case .string: tests[first..<next].contains { $0.test.op == .ascii } ? .asciiText : .text
                case .binary, .decimal: .bytes
                }
            steps.append(
                Step(
                    kind: kind, tag: RecordCodec.tag(of: type), attribute: Int32(i), firstTest: Int32(first),
                    endTest: Int32(next)))
        }
        let inSchemaOrder = steps.prefix(last + 1)
        schemaWalk = .allocate(capacity: inSchemaOrder.count)
        _ = schemaWalk.initialize(from: inSchemaOrder)
        let fixed = steps.filter { !$0.kind.isVariableSize }
        let variable = testsText ? inSchemaOrder.filter(\.kind.isVariableSize) : []
        scalarWalk = .allocate(capacity: fixed.count + variable.count)
        _ = scalarWalk.initialize(from: fixed + variable)
    }

    deinit {
        scalarWalk.deallocate()
        schemaWalk.deallocate()
        tests.deallocate()
        textBytes.deallocate()
        textRanges.deallocate()
    }

    /// Whether the record matches; `nil` when the bytes are not what the entity's records look like (the caller
    /// then takes the full path, which reports the damage).
    ///
    /// A record of format 2 is walked through its fixed-size fields only, which come first; one of format 1
    /// through every field up to the last tested one. One function's own frame, values compared as the integers
    /// or doubles they are: a closure over the offset would make the compiler check its exclusivity at run time on
    /// every byte, and a value wrapped in an enum per attribute cost more than reading the record.
    func matches(_ bytes: UnsafeRawBufferPointer) -> Bool? {
        guard let base = bytes.baseAddress else { return nil }
        let count = bytes.count
        guard count > 0 else { return nil }
        let version = base.load(as: UInt8.self)
        guard version == RecordCodec.formatVersion || version == RecordCodec.formatInSchemaOrder else { return nil }
        var offset = 1
        guard Self.varint(base, count, &offset) != nil, let attributes = Self.varint(base, count, &offset),
            attributes == UInt64(attributeCount)
        else { return nil }
        let bitmap = offset
        offset &+= (attributeCount &+ 7) &>> 3
        guard offset <= count else { return nil }
        let walk = UnsafeBufferPointer(version == RecordCodec.formatVersion ? scalarWalk : schemaWalk)
        let tests = UnsafeBufferPointer(self.tests)
        for step in walk {
            let i = Int(step.attribute)
            let first = Int(step.firstTest)
            let end = Int(step.endTest)
            if base.load(fromByteOffset: bitmap &+ i &>> 3, as: UInt8.self) & UInt8(truncatingIfNeeded: 1 &<< (i & 7))
                != 0
            {
                // nil passes only `!=`.
                for t in first..<end where tests[t].op != .notEqual { return false }
                continue
            }
            guard offset < count, base.load(fromByteOffset: offset, as: UInt8.self) == step.tag else { return nil }
            offset &+= 1
            if first == end {
                // A field stepped over on the way to a tested one: its bytes skipped, nothing decoded.
                switch step.kind {
                case .int:
                    // A varint: up to its last byte (below 0x80), ten at most; found among the next eight bytes
                    // without a branch per byte when the record holds eight more.
                    if count &- offset >= 8 {
                        let last =
                            ~base.loadUnaligned(fromByteOffset: offset, as: UInt64.self).littleEndian
                            & 0x8080_8080_8080_8080
                        if last != 0 {
                            offset &+= last.trailingZeroBitCount &>> 3 &+ 1
                            continue
                        }
                    }
                    let limit = min(count, offset &+ 10)
                    while offset < limit, base.load(fromByteOffset: offset, as: UInt8.self) >= 0x80 { offset &+= 1 }
                    guard offset < limit else { return nil }
                    offset &+= 1
                case .double: offset &+= 8
                case .bool: offset &+= 1
                case .uuid: offset &+= 16
                case .bytes, .text, .asciiText:
                    guard let length = Self.varint(base, count, &offset), length <= UInt64(count &- offset) else {
                        return nil
                    }
                    offset &+= Int(length)
                }
                guard offset <= count else { return nil }
                continue
            }
            switch step.kind {
            case .int:
                guard let raw = Self.varint(base, count, &offset) else { return nil }
                let value = Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
                for t in first..<end where !passes(value, tests[t]) { return false }
            case .double:
                guard count &- offset >= 8 else { return nil }
                let value = Double(bitPattern: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self).littleEndian)
                offset &+= 8
                for t in first..<end where !passes(value, tests[t]) { return false }
            case .bool:
                guard offset < count else { return nil }
                let raw = base.load(fromByteOffset: offset, as: UInt8.self)
                offset &+= 1
                guard raw <= 1 else { return nil }
                for t in first..<end where !passes(Int64(raw), tests[t]) { return false }
            case .uuid, .bytes:
                // Never tested (no constant of these types makes a filter): stepped over above.
                return nil
            case .asciiText:
                guard let length = Self.varint(base, count, &offset), length <= UInt64(count &- offset) else {
                    return nil
                }
                let text = UnsafeRawBufferPointer(start: base + offset, count: Int(length))
                offset &+= Int(length)
                if Self.isASCII(text) {
                    // Every test decided on the bytes (ASCII text is in its canonical form).
                    for t in first..<end where !passesASCII(text, tests[t]) { return false }
                    continue
                }
                // Other text: a test of an ASCII constant decided on the text folded scalar by scalar where each
                // scalar folds alone; the others on text in its canonical form (checked once, if any asks). What is
                // not decided passes.
                var canonical: Bool?
                for t in first..<end {
                    let test = tests[t]
                    if test.op == .ascii {
                        if passesFolded(text, test) == false { return false }
                        continue
                    }
                    if canonical == nil { canonical = Self.isSurelyCanonical(text) }
                    if canonical == true && !passes(text, test) { return false }
                }
            case .text:
                guard let length = Self.varint(base, count, &offset), length <= UInt64(count &- offset) else {
                    return nil
                }
                let text = UnsafeRawBufferPointer(start: base + offset, count: Int(length))
                offset &+= Int(length)
                // The bytes the text shares with its first constant are that constant's, in canonical form; the
                // text is surely canonical when what follows them is (from the scalar they end in).
                let test = tests[first]
                let constant = test.op == .oneOf && test.high == 0 ? 0..<0 : textRanges[Int(test.low)]
                let shared = sharedPrefix(text, constant)
                if end == first &+ 1, test.op == .equal || test.op == .notEqual || test.op == .prefix {
                    // One comparison: decided by the bytes where the first difference settles it whatever the
                    // text's canonical form (``decidedByBytes(_:_:shared:prefix:)``), or where the text is surely
                    // in its canonical form; other text passes, and the evaluator decides.
                    if !isASCIIOrEnd(text, shared) || !isASCIIOrEnd(constant, shared),
                        !decidedByBytes(text, constant, shared: shared, prefix: test.op == .prefix),
                        !Self.isSurelyCanonical(text, from: scalarStart(shared, text, constant))
                    {
                        continue
                    }
                    let same = shared == text.count && shared == constant.count
                    let passes =
                        switch test.op {
                        case .prefix: shared == constant.count
                        case .equal: same
                        default: !same
                        }
                    if !passes { return false }
                    continue
                }
                if end == first &+ 1, test.op == .oneOf {
                    // A list: text surely in its canonical form is one of the constants when it has one's bytes
                    // (one check of the text, then a length comparison per constant). Other text is none of them
                    // when it has none's bytes and every first difference is decided as for `==` (a pass per
                    // constant, so for short lists only); otherwise it passes, and the evaluator decides.
                    let list = Int(test.low)..<Int(test.low) &+ Int(test.high)
                    if Self.isSurelyCanonical(text, from: scalarStart(shared, text, constant)) {
                        if !list.contains(where: { same(text, textRanges[$0]) }) { return false }
                        continue
                    }
                    guard list.count <= 16 else { continue }
                    var decided = true
                    for k in list {
                        let range = textRanges[k]
                        let common = k == list.lowerBound ? shared : sharedPrefix(text, range)
                        let equal = common == text.count && common == range.count
                        if equal || !decidedByBytes(text, range, shared: common, prefix: false) {
                            decided = false
                            break
                        }
                    }
                    if decided { return false }
                    continue
                }
                // Text that may not be in its canonical form passes: the evaluator decides.
                guard Self.isSurelyCanonical(text, from: scalarStart(shared, text, constant)) else { continue }
                for t in first..<end where !passes(text, tests[t]) { return false }
            }
        }
        return true
    }

    /// Whether ASCII text passes `test`, on its bytes.
    @inline(__always)
    private func passesASCII(_ text: UnsafeRawBufferPointer, _ test: Test) -> Bool {
        guard test.op == .ascii else { return passes(text, test) }
        return ValueComparison.ascii(
            text.assumingMemoryBound(to: UInt8.self), Self.asciiOperators[Int(test.high &>> 2)], constant(test),
            foldsCase: test.high & 1 != 0)
    }

    /// Whether text beyond ASCII passes an ``Test/Op/ascii`` test, decided on the text folded scalar by scalar
    /// (``ValueComparison/folded(_:_:_:_:)``); nil when it is not.
    private func passesFolded(_ text: UnsafeRawBufferPointer, _ test: Test) -> Bool? {
        ValueComparison.folded(
            text.assumingMemoryBound(to: UInt8.self), Self.asciiOperators[Int(test.high &>> 2)], constant(test),
            FetchPredicate.StringOptions(rawValue: UInt8(test.high & 3)))
    }

    /// The bytes of the constant of a text test.
    @inline(__always)
    private func constant(_ test: Test) -> UnsafeBufferPointer<UInt8> {
        let range = textRanges[Int(test.low)]
        return UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(textBytes)[range]).assumingMemoryBound(
            to: UInt8.self)
    }

    /// Whether text in its canonical form passes `test`: its bytes are compared with the constant's canonical
    /// form (UTF-8 keeps the scalars' order, so a prefix of scalars is a prefix of bytes). A test of an ASCII
    /// constant passes.
    @inline(__always)
    private func passes(_ text: UnsafeRawBufferPointer, _ test: Test) -> Bool {
        let first = Int(test.low)
        switch test.op {
        case .equal: return same(text, textRanges[first])
        case .notEqual: return !same(text, textRanges[first])
        case .prefix:
            let range = textRanges[first]
            return text.count >= range.count && startsWith(text, range)
        case .oneOf:
            for k in first..<first &+ Int(test.high) where same(text, textRanges[k]) { return true }
            return false
        default: return true
        }
    }

    @inline(__always)
    private func same(_ text: UnsafeRawBufferPointer, _ range: Range<Int>) -> Bool {
        text.count == range.count && startsWith(text, range)
    }

    /// Whether `text` (at least as long as the constant) starts with the constant's bytes.
    @inline(__always)
    private func startsWith(_ text: UnsafeRawBufferPointer, _ range: Range<Int>) -> Bool {
        guard let base = text.baseAddress, !range.isEmpty else { return true }
        return memcmp(base, textBytes.baseAddress! + range.lowerBound, range.count) == 0
    }

    /// How many bytes `text` starts with that are the constant's at `range`: compared eight at a time, without a
    /// call per record.
    @inline(__always)
    private func sharedPrefix(_ text: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int {
        let length = min(text.count, range.count)
        guard length > 0, let a = text.baseAddress, let bytes = textBytes.baseAddress else { return 0 }
        let b = bytes + range.lowerBound
        var i = 0
        while i &+ 8 <= length {
            let difference =
                UInt64(littleEndian: a.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                ^ UInt64(littleEndian: b.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            if difference != 0 { return i &+ difference.trailingZeroBitCount &>> 3 }
            i &+= 8
        }
        while i < length, a.load(fromByteOffset: i, as: UInt8.self) == b.load(fromByteOffset: i, as: UInt8.self) {
            i &+= 1
        }
        return i
    }

    /// Whether the text has an ASCII character at byte `offset`, or ends there (where both the text and the
    /// constant do, ``decidedByBytes(_:_:shared:prefix:)`` is true: asked first, inline).
    @inline(__always)
    private func isASCIIOrEnd(_ text: UnsafeRawBufferPointer, _ offset: Int) -> Bool {
        offset >= text.count || text.load(fromByteOffset: offset, as: UInt8.self) < 0x80
    }

    /// Whether the constant at `range` has an ASCII character at byte `offset` of it, or ends there.
    @inline(__always)
    private func isASCIIOrEnd(_ range: Range<Int>, _ offset: Int) -> Bool {
        offset >= range.count || textBytes.load(fromByteOffset: range.lowerBound &+ offset, as: UInt8.self) < 0x80
    }

    /// Whether one comparison of `text` with the constant at `range` (`==` and `!=`, or `BEGINSWITH` when
    /// `prefix`), whose first `shared` bytes are the same, is answered by the bytes whatever the text's canonical
    /// form. Equality is when one ends where they differ (the other's canonical decomposition is longer), or when
    /// the scalars where they differ start their canonical decompositions with different starters: a starter has
    /// no combining class, so nothing after it moves before it, and the decompositions differ there
    /// (``leadingStarter(_:_:_:)``). The constant is a prefix when the text ends where it differs, or when they
    /// differ as for equality before the constant's end; and when the text holds the constant and then an ASCII
    /// character, which composes with nothing before it and blocks what follows it.
    private func decidedByBytes(
        _ text: UnsafeRawBufferPointer, _ range: Range<Int>, shared: Int, prefix: Bool
    ) -> Bool {
        if shared == text.count { return true }
        if shared == range.count { return !prefix || isASCIIOrEnd(text, shared) }
        if isASCIIOrEnd(text, shared) && isASCIIOrEnd(range, shared) { return true }
        let start = scalarStart(shared, text, range)
        guard let textBase = text.baseAddress, let constants = textBytes.baseAddress,
            let mine = Self.leadingStarter(textBase, text.count, start),
            let theirs = Self.leadingStarter(constants + range.lowerBound, range.count, start)
        else { return false }
        return mine != theirs
    }

    /// The first scalar of the canonical decomposition of the scalar at byte `offset` when that is a starter (no
    /// combining class): the scalar itself for ASCII and ``plainRanges``, the leading consonant for a Hangul
    /// syllable; `nil` for any other scalar, or bytes that are not a scalar of the Basic Multilingual Plane.
    @inline(__always)
    static func leadingStarter(_ base: UnsafeRawPointer, _ count: Int, _ offset: Int) -> UInt32? {
        guard let (scalar, _) = scalar(at: offset, base, count) else { return nil }
        if scalar < 0x80 { return scalar }
        if scalar >= 0xAC00, scalar <= 0xD7A3 { return 0x1100 &+ (scalar &- 0xAC00) / 588 }
        return plainBits[Int(scalar &>> 6)] & (1 &<< UInt64(scalar & 63)) != 0 ? scalar : nil
    }

    /// The scalar of the Basic Multilingual Plane whose well-formed UTF-8 starts at byte `i`, and its length;
    /// `nil` for anything else (a scalar beyond the plane included).
    @inline(__always)
    static func scalar(at i: Int, _ base: UnsafeRawPointer, _ count: Int) -> (value: UInt32, length: Int)? {
        let byte = UInt32(base.load(fromByteOffset: i, as: UInt8.self))
        if byte < 0x80 { return (byte, 1) }
        if byte >= 0xE0 {
            // Three bytes: U+0800...U+FFFF; four: beyond the plane.
            guard byte <= 0xEF, i &+ 2 < count else { return nil }
            let second = UInt32(base.load(fromByteOffset: i &+ 1, as: UInt8.self))
            let third = UInt32(base.load(fromByteOffset: i &+ 2, as: UInt8.self))
            guard second & 0xC0 == 0x80, third & 0xC0 == 0x80 else { return nil }
            let scalar = (byte & 0x0F) << 12 | (second & 0x3F) << 6 | third & 0x3F
            guard scalar >= 0x800, scalar & 0xF800 != 0xD800 else { return nil }
            return (scalar, 3)
        }
        // Two bytes: U+0080...U+07FF.
        guard byte >= 0xC2, i &+ 1 < count else { return nil }
        let second = UInt32(base.load(fromByteOffset: i &+ 1, as: UInt8.self))
        guard second & 0xC0 == 0x80 else { return nil }
        return ((byte & 0x1F) << 6 | second & 0x3F, 2)
    }

    /// Where the scalar that holds byte `shared` starts: the text's first `shared` bytes are the constant's at
    /// `range`, so a continuation byte at `shared` in either steps back into their common bytes.
    @inline(__always)
    private func scalarStart(_ shared: Int, _ text: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int {
        var i = shared
        while i > 0 {
            let inText = i < text.count && text.load(fromByteOffset: i, as: UInt8.self) & 0xC0 == 0x80
            let inConstant =
                i < range.count && textBytes.load(fromByteOffset: range.lowerBound &+ i, as: UInt8.self) & 0xC0 == 0x80
            guard inText || inConstant else { break }
            i &-= 1
        }
        return i
    }

    /// Whether text is surely in its canonical form (NFC), in which case its bytes are compared: well-formed UTF-8
    /// of scalars each of which is its own canonical form, has no combining class and composes with nothing before
    /// it (Unicode's NFC quick check answers yes for it, and it never moves or joins what comes before it). Those
    /// are ``canonicalRanges``: ASCII, Latin, Greek, Cyrillic, Armenian, Hebrew and Arabic letters, the scripts of
    /// India and South-East Asia but their vowel signs that compose, CJK ideographs, kana and Hangul syllables,
    /// punctuation, symbols and the full-width forms, without the combining marks, the Hangul vowels and final
    /// consonants (which compose with what comes before them), the scalars whose canonical form is another, and
    /// unassigned ones (which a later Unicode may make marks). ASCII is checked eight bytes at a time; text with
    /// any other scalar is left to the evaluator, as is UTF-8 that is not well-formed (whose damage the
    /// evaluator's decode reports). The tests check every scalar taken against the standard library's and
    /// Foundation's Unicode data.
    ///
    /// With `start`, the text's first `start` bytes (ending at a scalar boundary) are known to be the start of a
    /// string in canonical form, and only the rest is checked: a prefix of text in canonical form is in that form
    /// (a scalar composes only with what follows it, and what blocks it lies between them), and the scalars taken
    /// here neither compose with what comes before them nor have a combining class, so appending them keeps it.
    @inline(__always)
    static func isSurelyCanonical(_ text: UnsafeRawBufferPointer, from start: Int = 0) -> Bool {
        // ASCII, the usual text, first.
        if isASCII(text, from: start) { return true }
        return hasOnlyCanonicalScalars(text, from: start)
    }

    /// Whether the text's bytes from `start` on are all ASCII: every byte's high bit gathered without a branch per
    /// word (the last eight bytes read overlap the words before them).
    @inline(__always)
    static func isASCII(_ text: UnsafeRawBufferPointer, from start: Int = 0) -> Bool {
        guard let base = text.baseAddress else { return true }
        let count = text.count
        var high: UInt64 = 0
        if count &- start >= 8 {
            high = base.loadUnaligned(fromByteOffset: count &- 8, as: UInt64.self)
            var i = start
            while i &+ 8 <= count {
                high |= base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
                i &+= 8
            }
        } else {
            for i in start..<count { high |= UInt64(base.load(fromByteOffset: i, as: UInt8.self)) }
        }
        return high & 0x8080_8080_8080_8080 == 0
    }

    /// The scalar walk of ``isSurelyCanonical(_:from:)`` for text that is not all ASCII.
    static func hasOnlyCanonicalScalars(_ text: UnsafeRawBufferPointer, from start: Int) -> Bool {
        guard let base = text.baseAddress else { return true }
        let count = text.count
        let bits = canonicalBits
        var i = start
        while i < count {
            let byte = UInt32(base.load(fromByteOffset: i, as: UInt8.self))
            if byte < 0x80 {
                // ASCII: eight bytes a step where they all are.
                if i &+ 8 <= count,
                    base.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 == 0
                {
                    i &+= 8
                } else {
                    i &+= 1
                }
                continue
            }
            guard let (scalar, length) = scalar(at: i, base, count) else { return false }
            i &+= length
            guard bits[Int(scalar &>> 6)] & (1 &<< UInt64(scalar & 63)) != 0 else { return false }
        }
        return true
    }

    /// ``canonicalRanges`` as one bit per scalar of the Basic Multilingual Plane (8 KB, made once): a scalar is
    /// looked up with one load instead of a search.
    nonisolated(unsafe) static let canonicalBits = bitmap(canonicalRanges)
    /// ``plainRanges`` likewise.
    nonisolated(unsafe) static let plainBits = bitmap(plainRanges)

    /// One bit per scalar of the Basic Multilingual Plane, set for those in `ranges` (allocated for the process).
    private static func bitmap(_ ranges: [ClosedRange<UInt32>]) -> UnsafePointer<UInt64> {
        let bits = UnsafeMutablePointer<UInt64>.allocate(capacity: 0x10000 / 64)
        bits.initialize(repeating: 0, count: 0x10000 / 64)
        for range in ranges {
            for scalar in range { bits[Int(scalar >> 6)] |= 1 << UInt64(scalar & 63) }
        }
        return UnsafePointer(bits)
    }

    /// The scalars beyond ASCII whose text ``isSurelyCanonical(_:from:)`` takes, in order: the runs of at least 16
    /// assigned scalars of the Basic Multilingual Plane with no combining class whose NFC quick check is yes, from
    /// Unicode 14's data (the tests check each against this platform's).
    static let canonicalRanges: [ClosedRange<UInt32>] = [
        0x0080...0x02FF, 0x038E...0x03A1, 0x03A3...0x0482, 0x0488...0x052F, 0x0531...0x0556, 0x0559...0x058A,
        0x05D0...0x05EA, 0x0600...0x060F, 0x061B...0x064A, 0x0660...0x066F, 0x0671...0x06D5, 0x06EE...0x070D,
        0x0712...0x072F, 0x074D...0x07B1, 0x07C0...0x07EA, 0x07FE...0x0815, 0x0840...0x0858, 0x0870...0x088E,
        0x08A0...0x08C9, 0x0900...0x093B, 0x093D...0x094C, 0x0960...0x0983, 0x0993...0x09A8, 0x09E6...0x09FD,
        0x0A13...0x0A28, 0x0A66...0x0A76, 0x0A93...0x0AA8, 0x0B13...0x0B28, 0x0B66...0x0B77, 0x0BE6...0x0BFA,
        0x0C12...0x0C28, 0x0C2A...0x0C39, 0x0C77...0x0C8C, 0x0C92...0x0CA8, 0x0D12...0x0D3A, 0x0D66...0x0D7F,
        0x0D85...0x0D96, 0x0D9A...0x0DB1, 0x0E01...0x0E37, 0x0E4C...0x0E5B, 0x0E8C...0x0EA3, 0x0EA7...0x0EB7,
        0x0F00...0x0F17, 0x0F1A...0x0F34, 0x1000...0x102D, 0x103B...0x108C, 0x108E...0x10C5, 0x10D0...0x1160,
        0x1176...0x11A7, 0x11C3...0x1248, 0x1260...0x1288, 0x1290...0x12B0, 0x12D8...0x1310, 0x1318...0x135A,
        0x1360...0x137C, 0x1380...0x1399, 0x13A0...0x13F5, 0x1400...0x169C, 0x16A0...0x16F8, 0x1700...0x1713,
        0x171F...0x1733, 0x1740...0x1753, 0x1780...0x17D1, 0x1800...0x1819, 0x1820...0x1878, 0x1880...0x18A8,
        0x18B0...0x18F5, 0x1900...0x191E, 0x1944...0x196D, 0x1980...0x19AB, 0x19B0...0x19C9, 0x19DE...0x1A16,
        0x1A1E...0x1A5E, 0x1A61...0x1A74, 0x1B00...0x1B33, 0x1B50...0x1B6A, 0x1B80...0x1BA9, 0x1BAC...0x1BE5,
        0x1BFC...0x1C36, 0x1C4D...0x1C88, 0x1C90...0x1CBA, 0x1D00...0x1DBF, 0x1E00...0x1F15, 0x1F20...0x1F45,
        0x1F5F...0x1F70, 0x1F80...0x1FB4, 0x2002...0x2064, 0x2074...0x208E, 0x20A0...0x20C0, 0x2100...0x2125,
        0x212C...0x218B, 0x2190...0x2328, 0x232B...0x2426, 0x2460...0x2ADB, 0x2ADD...0x2B73, 0x2B76...0x2B95,
        0x2B97...0x2CEE, 0x2CF9...0x2D25, 0x2D30...0x2D67, 0x2D80...0x2D96, 0x2E00...0x2E5D, 0x2E80...0x2E99,
        0x2E9B...0x2EF3, 0x2F00...0x2FD5, 0x3000...0x3029, 0x3030...0x303F, 0x3041...0x3096, 0x309B...0x30FF,
        0x3105...0x312F, 0x3131...0x318E, 0x3190...0x31E3, 0x31F0...0x321E, 0x3220...0xA48C, 0xA490...0xA4C6,
        0xA4D0...0xA62B, 0xA640...0xA66E, 0xA67E...0xA69D, 0xA6A0...0xA6EF, 0xA700...0xA7CA, 0xA7F2...0xA805,
        0xA807...0xA82B, 0xA840...0xA877, 0xA880...0xA8C3, 0xA8F2...0xA92A, 0xA92E...0xA952, 0xA95F...0xA97C,
        0xA980...0xA9B2, 0xA9DE...0xA9FE, 0xAA00...0xAA36, 0xAA5C...0xAAAF, 0xAADB...0xAAF5, 0xAB30...0xAB6B,
        0xAB70...0xABEC, 0xAC00...0xD7A3, 0xD7B0...0xD7C6, 0xD7CB...0xD7FB, 0xFB4F...0xFBC2, 0xFBD3...0xFD8F,
        0xFD92...0xFDC7, 0xFDF0...0xFE19, 0xFE30...0xFE52, 0xFE54...0xFE66, 0xFE76...0xFEFC, 0xFF01...0xFFBE,
    ]

    /// Whether an integer (or a boolean as 0 and 1) passes `test`.
    @inline(__always)
    private func passes(_ value: Int64, _ test: Test) -> Bool {
        let constant = Int64(bitPattern: test.low)
        switch test.op {
        case .equal: return value == constant
        case .notEqual: return value != constant
        case .less: return value < constant
        case .lessOrEqual: return value <= constant
        case .greater: return value > constant
        case .greaterOrEqual: return value >= constant
        case .between: return value >= constant && value <= Int64(bitPattern: test.high)
        case .oneOf: return lists[Int(test.high)].contains { Int64(bitPattern: $0) == value }
        case .prefix, .ascii: return true  // (a string's only)
        }
    }

    /// Whether a double passes `test`, ordered as ``ValueSemantics`` orders doubles (one zero; NaN equal to NaN
    /// and after every number).
    @inline(__always)
    private func passes(_ value: Double, _ test: Test) -> Bool {
        let constant = Double(bitPattern: test.low)
        switch test.op {
        case .between:
            return ValueSemantics.order(value, constant) != .orderedAscending
                && ValueSemantics.order(value, Double(bitPattern: test.high)) != .orderedDescending
        case .oneOf:
            return lists[Int(test.high)].contains { ValueSemantics.same(Double(bitPattern: $0), value) }
        default:
            let order = ValueSemantics.order(value, constant)
            switch test.op {
            case .equal: return order == .orderedSame
            case .notEqual: return order != .orderedSame
            case .less: return order == .orderedAscending
            case .lessOrEqual: return order != .orderedDescending
            case .greater: return order == .orderedDescending
            default: return order != .orderedAscending
            }
        }
    }

    /// The varint at `offset` (moved past it), or `nil` when the bytes end first or it is longer than 64 bits. A
    /// static function with an `inout` offset, not a closure over it: the compiler checks its exclusivity
    /// statically instead of at run time on every byte.
    @inline(__always)
    static func varint(_ base: UnsafeRawPointer, _ count: Int, _ offset: inout Int) -> UInt64? {
        // Most varints of a record (numbers below 2^20, lengths, the attribute count) are one to three bytes: those
        // without the loop.
        if count &- offset >= 3 {
            let b0 = UInt64(base.load(fromByteOffset: offset, as: UInt8.self))
            if b0 < 0x80 {
                offset &+= 1
                return b0
            }
            let b1 = UInt64(base.load(fromByteOffset: offset &+ 1, as: UInt8.self))
            if b1 < 0x80 {
                offset &+= 2
                return b0 & 0x7F | b1 << 7
            }
            let b2 = UInt64(base.load(fromByteOffset: offset &+ 2, as: UInt8.self))
            if b2 < 0x80 {
                offset &+= 3
                return b0 & 0x7F | (b1 & 0x7F) << 7 | b2 << 14
            }
        }
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while shift < 64, offset < count {
            let next = base.load(fromByteOffset: offset, as: UInt8.self)
            offset += 1
            result |= UInt64(next & 0x7F) << shift
            if next & 0x80 == 0 { return result }
            shift += 7
        }
        return nil
    }

    /// The scalars beyond ASCII that are their own canonical decomposition and have no combining class, in order:
    /// the runs of at least 16 assigned scalars of the Basic Multilingual Plane without a canonical decomposition
    /// mapping (Hangul syllables, decomposed by rule, are left to ``leadingStarter(_:_:_:)``), from Unicode 14's
    /// data (the tests check each against this platform's).
    static let plainRanges: [ClosedRange<UInt32>] = [
        0x0080...0x00BF, 0x017F...0x019F, 0x01B1...0x01CC, 0x0234...0x02FF, 0x0391...0x03A1, 0x03B1...0x03C9,
        0x03D5...0x03FF, 0x041A...0x0438, 0x043A...0x044F, 0x045F...0x0475, 0x0488...0x04C0, 0x04FA...0x052F,
        0x0531...0x0556, 0x0559...0x058A, 0x05D0...0x05EA, 0x0600...0x060F, 0x0627...0x064A, 0x0660...0x066F,
        0x0671...0x06BF, 0x06C3...0x06D2, 0x06EE...0x070D, 0x0712...0x072F, 0x074D...0x07B1, 0x07C0...0x07EA,
        0x07FE...0x0815, 0x0840...0x0858, 0x0870...0x088E, 0x08A0...0x08C9, 0x0900...0x0928, 0x093D...0x094C,
        0x0960...0x0983, 0x0993...0x09A8, 0x09E6...0x09FD, 0x0A13...0x0A28, 0x0A66...0x0A76, 0x0A93...0x0AA8,
        0x0B13...0x0B28, 0x0B66...0x0B77, 0x0BE6...0x0BFA, 0x0C12...0x0C28, 0x0C2A...0x0C39, 0x0C77...0x0C8C,
        0x0C92...0x0CA8, 0x0D12...0x0D3A, 0x0D54...0x0D63, 0x0D66...0x0D7F, 0x0D85...0x0D96, 0x0D9A...0x0DB1,
        0x0E01...0x0E37, 0x0E4C...0x0E5B, 0x0E8C...0x0EA3, 0x0EA7...0x0EB7, 0x0F00...0x0F17, 0x0F1A...0x0F34,
        0x1000...0x1025, 0x1027...0x1036, 0x103B...0x108C, 0x108E...0x10C5, 0x10D0...0x1248, 0x1260...0x1288,
        0x1290...0x12B0, 0x12D8...0x1310, 0x1318...0x135A, 0x1360...0x137C, 0x1380...0x1399, 0x13A0...0x13F5,
        0x1400...0x169C, 0x16A0...0x16F8, 0x1700...0x1713, 0x171F...0x1733, 0x1740...0x1753, 0x1780...0x17D1,
        0x1800...0x1819, 0x1820...0x1878, 0x1880...0x18A8, 0x18B0...0x18F5, 0x1900...0x191E, 0x1944...0x196D,
        0x1980...0x19AB, 0x19B0...0x19C9, 0x19DE...0x1A16, 0x1A1E...0x1A5E, 0x1A61...0x1A74, 0x1B13...0x1B33,
        0x1B50...0x1B6A, 0x1B80...0x1BA9, 0x1BAC...0x1BE5, 0x1BFC...0x1C36, 0x1C4D...0x1C88, 0x1C90...0x1CBA,
        0x1D00...0x1DBF, 0x2002...0x2064, 0x2074...0x208E, 0x20A0...0x20C0, 0x2100...0x2125, 0x212C...0x218B,
        0x219C...0x21AD, 0x21AF...0x21CC, 0x21D0...0x2203, 0x220D...0x2223, 0x2227...0x2240, 0x224A...0x225F,
        0x228A...0x22AB, 0x22B0...0x22DF, 0x22EE...0x2328, 0x232B...0x2426, 0x2460...0x2ADB, 0x2ADD...0x2B73,
        0x2B76...0x2B95, 0x2B97...0x2CEE, 0x2CF9...0x2D25, 0x2D30...0x2D67, 0x2D80...0x2D96, 0x2E00...0x2E5D,
        0x2E80...0x2E99, 0x2E9B...0x2EF3, 0x2F00...0x2FD5, 0x3000...0x3029, 0x3030...0x303F, 0x307E...0x3093,
        0x30DE...0x30F3, 0x3105...0x312F, 0x3131...0x318E, 0x3190...0x31E3, 0x31F0...0x321E, 0x3220...0xA48C,
        0xA490...0xA4C6, 0xA4D0...0xA62B, 0xA640...0xA66E, 0xA67E...0xA69D, 0xA6A0...0xA6EF, 0xA700...0xA7CA,
        0xA7F2...0xA805, 0xA807...0xA82B, 0xA840...0xA877, 0xA880...0xA8C3, 0xA8F2...0xA92A, 0xA92E...0xA952,
        0xA95F...0xA97C, 0xA980...0xA9B2, 0xA9DE...0xA9FE, 0xAA00...0xAA36, 0xAA5C...0xAAAF, 0xAADB...0xAAF5,
        0xAB30...0xAB6B, 0xAB70...0xABEC, 0xD7B0...0xD7C6, 0xD7CB...0xD7FB, 0xFB4F...0xFBC2, 0xFBD3...0xFD8F,
        0xFD92...0xFDC7, 0xFDF0...0xFE19, 0xFE30...0xFE52, 0xFE54...0xFE66, 0xFE76...0xFEFC, 0xFF01...0xFFBE,
    ]
}
