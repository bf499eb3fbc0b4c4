import Foundation

/// A predicate that is a comparison, or an AND of comparisons, of the entity's own int64, double, date or bool
/// attributes with constants of the same type, or of its own strings by `==`, `!=`, `IN` or `BEGINSWITH` (without
/// options), evaluated on the encoded record: no `Value`, no subject, no allocation per record. A scan asks it
/// first; only the records it accepts go through the full evaluator.
///
/// Its answers for scalars are those of ``CompiledPredicate`` (the tests compare both on random records): nil
/// matches only `!=`, doubles and dates are ordered as ``ValueSemantics`` orders them (one zero, NaN equal to NaN
/// and after every number), booleans order false before true. A string is compared byte for byte with the
/// constant's canonical form (NFC) when it is surely in that form itself (``isSurelyCanonical(_:)``: ASCII, Latin
/// text of scalars below U+0300, typographic punctuation), so the answer is the evaluator's; any other string
/// passes, and the evaluator decides (canonically equivalent text can be spelled in other bytes, and even ASCII
/// has equivalents outside it: the Kelvin sign is `K`).
final class RecordFilter {
    /// One test on one attribute's value, held as bits so that a record's value is compared without building a
    /// `Value`: int64 and bool constants (false 0, true 1) as `Int64`, doubles and dates as `Double`.
    struct Test {
        enum Op: UInt8 { case equal, notEqual, less, lessOrEqual, greater, greaterOrEqual, between, oneOf, prefix }
        var op: Op
        /// The constant, or `between`'s lower bound; for a string, its first range in `textRanges`.
        var low: UInt64
        /// `between`'s upper bound; `oneOf`'s list in `lists`; for a string, how many ranges (`oneOf`'s list).
        var high: UInt64
    }

    /// How the scan reads one attribute's field (skipping it, or reading it and running its tests).
    struct Step {
        enum Kind: UInt8 { case bool, int, double, uuid, bytes, text }
        var kind: Kind
        var tag: UInt8
        var attribute: Int32
        var firstTest: Int32
        var endTest: Int32
    }

    /// The entity's attribute count (a record holds them all).
    let attributeCount: Int
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

    /// A filter for `predicate` on `entity`, or `nil` when the predicate has another shape.
    init?(_ predicate: FetchPredicate, entity: Entity) {
        let parts: [FetchPredicate]
        if case .and(let conjuncts) = predicate { parts = conjuncts } else { parts = [predicate] }
        var tests: [(attribute: Int, test: Test)] = []
        var lists: [[UInt64]] = []
        var texts: [[UInt8]] = []
        for part in parts {
            guard case .comparison(let c) = part, c.quantifier == nil, c.options.isEmpty, c.keyPath.count == 1,
                let index = entity.attributeIndex(c.keyPath[0])
            else { return nil }
            let type = entity.attributes[index].type
            if type == .string {
                func text(_ value: Value) -> [UInt8]? {
                    if case .string(let v) = value { Array(v.canonicalForm.utf8) } else { nil }
                }
                switch (c.op, c.operand) {
                case (.equal, .value(let v)), (.notEqual, .value(let v)), (.beginsWith, .value(let v)):
                    guard let constant = text(v) else { return nil }
                    let op: Test.Op = c.op == .equal ? .equal : c.op == .notEqual ? .notEqual : .prefix
                    tests.append((index, Test(op: op, low: UInt64(texts.count), high: 1)))
                    texts.append(constant)
                case (.in, .list(let values)):
                    let list = values.compactMap(text)
                    guard list.count == values.count else { return nil }
                    tests.append((index, Test(op: .oneOf, low: UInt64(texts.count), high: UInt64(list.count))))
                    texts += list
                default:
                    return nil
                }
                continue
            }
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
            default: return nil
            }
            switch (op, c.operand) {
            case (.oneOf, .list(let values)):
                let list = values.compactMap(bits)
                guard list.count == values.count else { return nil }
                tests.append((index, Test(op: .oneOf, low: 0, high: UInt64(lists.count))))
                lists.append(list)
            case (.between, .list(let values)) where values.count == 2:
                guard let low = bits(values[0]), let high = bits(values[1]) else { return nil }
                tests.append((index, Test(op: .between, low: low, high: high)))
            case (.oneOf, _), (.between, _):
                return nil
            case (_, .value(let v)):
                guard let constant = bits(v) else { return nil }
                tests.append((index, Test(op: op, low: constant, high: 0)))
            default:
                return nil
            }
        }
        guard !tests.isEmpty else { return nil }
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
                case .string: .text
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
        let fixed = steps.filter { $0.kind != .bytes && $0.kind != .text }
        let variable = testsText ? inSchemaOrder.filter { $0.kind == .bytes || $0.kind == .text } : []
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
                    // A varint: up to its last byte (below 0x80), ten at most.
                    let limit = min(count, offset &+ 10)
                    while offset < limit, base.load(fromByteOffset: offset, as: UInt8.self) >= 0x80 { offset &+= 1 }
                    guard offset < limit else { return nil }
                    offset &+= 1
                case .double: offset &+= 8
                case .bool: offset &+= 1
                case .uuid: offset &+= 16
                case .bytes, .text:
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
            case .text:
                guard let length = Self.varint(base, count, &offset), length <= UInt64(count &- offset) else {
                    return nil
                }
                let text = UnsafeRawBufferPointer(start: base + offset, count: Int(length))
                offset &+= Int(length)
                // Text that may not be in its canonical form passes: the evaluator decides.
                guard Self.isSurelyCanonical(text) else { continue }
                for t in first..<end where !passes(text, tests[t]) { return false }
            }
        }
        return true
    }

    /// Whether text in its canonical form passes `test`: its bytes are compared with the constant's canonical
    /// form (UTF-8 keeps the scalars' order, so a prefix of scalars is a prefix of bytes).
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

    /// Whether text is surely in its canonical form (NFC), in which case its bytes are compared: well-formed UTF-8
    /// of scalars none of which has a canonical decomposition into others or composes with what comes before or
    /// after it. Those below U+0300 (ASCII, Latin-1, Latin Extended-A and B, IPA, the spacing modifiers: the
    /// combining marks start at U+0300), and the general punctuation and currency signs U+2002...U+20CF (dashes,
    /// typographic quotes, the ellipsis, the bullet, the euro: U+2000 and U+2001 are the block's two canonical
    /// singletons, and the combining marks for symbols start at U+20D0). ASCII is checked eight bytes at a time;
    /// any other text is left to the evaluator, as is UTF-8 that is not well-formed (whose damage the evaluator's
    /// decode reports). The tests check every scalar of these ranges against Foundation's normalization.
    @inline(__always)
    static func isSurelyCanonical(_ text: UnsafeRawBufferPointer) -> Bool {
        guard let base = text.baseAddress else { return true }
        var i = 0
        let count = text.count
        while i < count {
            if i &+ 8 <= count,
                base.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 == 0
            {
                i &+= 8
                continue
            }
            let byte = base.load(fromByteOffset: i, as: UInt8.self)
            if byte < 0x80 {
                i &+= 1
                continue
            }
            // U+0080...U+02FF: a lead byte 0xC2...0xCB and one continuation byte.
            if byte >= 0xC2, byte <= 0xCB, i &+ 1 < count,
                base.load(fromByteOffset: i &+ 1, as: UInt8.self) & 0xC0 == 0x80
            {
                i &+= 2
                continue
            }
            // U+2002...U+20CF: 0xE2, then 0x80 0x82...0x83 0x8F.
            guard byte == 0xE2, i &+ 2 < count else { return false }
            let second = base.load(fromByteOffset: i &+ 1, as: UInt8.self)
            let third = base.load(fromByteOffset: i &+ 2, as: UInt8.self)
            guard third & 0xC0 == 0x80, second >= 0x80, second <= 0x83, second != 0x80 || third >= 0x82,
                second != 0x83 || third <= 0x8F
            else { return false }
            i &+= 3
        }
        return true
    }

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
        case .prefix: return true  // (a string's only)
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
}
