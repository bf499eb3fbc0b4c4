import Foundation

/// A predicate that is a comparison, or an AND of comparisons, of the entity's own int64, double, date or bool
/// attributes with constants of the same type, evaluated on the encoded record: no `Value`, no subject, no
/// allocation per record. A scan asks it first; only the records it accepts go through the full evaluator.
///
/// Its answers are those of ``CompiledPredicate`` (the tests compare both on random records): nil matches only
/// `!=`, doubles and dates compare as `<` and `>` do (so NaN is "the same" as anything, as the evaluator has it),
/// booleans order false before true.
final class RecordFilter {
    enum Scalar: Equatable {
        case int(Int64)
        case double(Double)  // doubles and dates
        case bool(Bool)
    }

    /// One test: no references, so that reading it per record retains nothing (`oneOf` points into `lists`).
    enum Test {
        case compare(FetchPredicate.Operator, Scalar)
        case between(Scalar, Scalar)
        case oneOf(Int)
    }

    /// How the scan reads attribute `i` (up to the last tested one) and which tests it runs on it.
    struct Step {
        enum Kind: UInt8 { case bool, int, double, uuid, bytes }
        var kind: Kind
        var tag: UInt8
        var firstTest: Int
        var endTest: Int
    }

    /// The entity's attribute count (a record holds them all).
    let attributeCount: Int
    /// The last attribute a test reads: the scan stops there.
    let last: Int
    /// The scan's plan and tests, in memory of their own: trivial values only, read per record without retaining
    /// anything or checking bounds.
    private let steps: UnsafeMutableBufferPointer<Step>
    private let tests: UnsafeMutableBufferPointer<Test>
    private let lists: [[Scalar]]

    /// A filter for `predicate` on `entity`, or `nil` when the predicate has another shape.
    init?(_ predicate: FetchPredicate, entity: Entity) {
        let parts: [FetchPredicate]
        if case .and(let conjuncts) = predicate { parts = conjuncts } else { parts = [predicate] }
        var tests: [(attribute: Int, test: Test)] = []
        var lists: [[Scalar]] = []
        for part in parts {
            guard case .comparison(let c) = part, c.quantifier == nil, c.options.isEmpty, c.keyPath.count == 1,
                let index = entity.attributeIndex(c.keyPath[0])
            else { return nil }
            let type = entity.attributes[index].type
            func scalar(_ value: Value) -> Scalar? {
                switch (type, value) {
                case (.int64, .int(let v)): .int(v)
                case (.double, .double(let v)): .double(v)
                case (.date, .date(let v)): .double(v.timeIntervalSinceReferenceDate)
                case (.bool, .bool(let v)): .bool(v)
                default: nil
                }
            }
            switch (c.op, c.operand) {
            case (.equal, .value(let v)), (.notEqual, .value(let v)), (.less, .value(let v)),
                (.lessOrEqual, .value(let v)), (.greater, .value(let v)), (.greaterOrEqual, .value(let v)):
                guard let s = scalar(v) else { return nil }
                tests.append((index, .compare(c.op, s)))
            case (.in, .list(let values)):
                let scalars = values.compactMap(scalar)
                guard scalars.count == values.count else { return nil }
                tests.append((index, .oneOf(lists.count)))
                lists.append(scalars)
            case (.between, .list(let values)) where values.count == 2:
                guard let low = scalar(values[0]), let high = scalar(values[1]) else { return nil }
                tests.append((index, .between(low, high)))
            default:
                return nil
            }
        }
        guard !tests.isEmpty else { return nil }
        tests.sort { $0.attribute < $1.attribute }
        attributeCount = entity.attributes.count
        last = tests.last!.attribute
        self.lists = lists
        self.tests = .allocate(capacity: tests.count)
        for (position, test) in tests.enumerated() { self.tests[position] = test.test }
        steps = .allocate(capacity: last + 1)
        var next = 0
        for i in 0...last {
            let first = next
            while next < tests.count && tests[next].attribute == i { next += 1 }
            let type = entity.attributes[i].type
            let kind: Step.Kind =
                switch type {
                case .bool: .bool
                case .int64: .int
                case .double, .date: .double
                case .uuid: .uuid
                case .string, .binary, .decimal: .bytes
                }
            steps[i] = Step(kind: kind, tag: RecordCodec.tag(of: type), firstTest: first, endTest: next)
        }
    }

    deinit {
        steps.deallocate()
        tests.deallocate()
    }

    /// Whether the record matches; `nil` when the bytes are not what the entity's records look like (the caller
    /// then takes the full path, which reports the damage).
    func matches(_ bytes: UnsafeRawBufferPointer) -> Bool? {
        guard let base = bytes.baseAddress else { return nil }
        let count = bytes.count
        var offset = 0
        guard count > 0, base.load(as: UInt8.self) == RecordCodec.formatVersion else { return nil }
        offset = 1
        guard Self.varint(base, count, &offset) != nil, let attributes = Self.varint(base, count, &offset),
            attributes == UInt64(attributeCount)
        else { return nil }
        let bitmapStart = offset
        offset += (attributeCount + 7) / 8
        guard offset <= count else { return nil }
        // One loop in this function's own frame (a closure over `offset` would make the compiler check its
        // exclusivity at run time on every byte).
        let steps = UnsafeBufferPointer(self.steps)
        for i in 0...last {
            let step = steps[i]
            let isNull = base.load(fromByteOffset: bitmapStart &+ i / 8, as: UInt8.self) & (1 << UInt8(i % 8)) != 0
            var value: Scalar?
            if !isNull {
                guard offset < count, base.load(fromByteOffset: offset, as: UInt8.self) == step.tag else {
                    return nil
                }
                offset += 1
                switch step.kind {
                case .bool:
                    guard offset < count else { return nil }
                    let raw = base.load(fromByteOffset: offset, as: UInt8.self)
                    offset += 1
                    guard raw <= 1 else { return nil }
                    value = .bool(raw == 1)
                case .int:
                    guard let raw = Self.varint(base, count, &offset) else { return nil }
                    value = .int(Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1))
                case .double:
                    guard offset + 8 <= count else { return nil }
                    let raw = base.loadUnaligned(fromByteOffset: offset, as: UInt64.self).littleEndian
                    offset += 8
                    value = .double(Double(bitPattern: raw))
                case .uuid:
                    offset += 16
                case .bytes:
                    guard let length = Self.varint(base, count, &offset), length <= UInt64(count - offset)
                    else { return nil }
                    offset += Int(length)
                }
                guard offset <= count else { return nil }
            }
            var test = step.firstTest
            while test < step.endTest {
                if !passes(value, tests[test]) { return false }
                test += 1
            }
        }
        return true
    }

    @inline(__always)
    private func passes(_ value: Scalar?, _ test: Test) -> Bool {
        switch test {
        case .compare(let op, let constant): Self.passes(Self.order(value, constant), op)
        case .between(let low, let high): Self.between(value, low, high)
        case .oneOf(let list): lists[list].contains { Self.order(value, $0) == .orderedSame }
        }
    }

    /// The varint at `offset` (moved past it), or `nil` when the bytes end first or it is longer than 64 bits. A
    /// static function with an `inout` offset, not a closure over it: the compiler checks its exclusivity
    /// statically instead of at run time on every byte.
    @inline(__always)
    static func varint(_ base: UnsafeRawPointer, _ count: Int, _ offset: inout Int) -> UInt64? {
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

    /// The order of two scalars of one type, as the evaluator orders them (`nil` for nil).
    static func order(_ a: Scalar?, _ b: Scalar) -> ComparisonResult? {
        switch (a, b) {
        case (.int(let x)?, .int(let y)): x < y ? .orderedAscending : x > y ? .orderedDescending : .orderedSame
        case (.double(let x)?, .double(let y)): ValueSemantics.order(x, y)
        case (.bool(let x)?, .bool(let y)): x == y ? .orderedSame : (!x ? .orderedAscending : .orderedDescending)
        default: nil
        }
    }

    /// Whether a comparison whose order is `order` passes `op`.
    @inline(__always)
    static func passes(_ order: ComparisonResult?, _ op: FetchPredicate.Operator) -> Bool {
        switch op {
        case .equal: order == .orderedSame
        case .notEqual: order != .orderedSame
        case .less: order == .orderedAscending
        case .lessOrEqual: order != nil && order != .orderedDescending
        case .greater: order == .orderedDescending
        case .greaterOrEqual: order != nil && order != .orderedAscending
        default: false
        }
    }

    @inline(__always)
    static func between(_ value: Scalar?, _ low: Scalar, _ high: Scalar) -> Bool {
        guard let lower = order(value, low), let upper = order(value, high) else { return false }
        return lower != .orderedAscending && upper != .orderedDescending
    }
}
