import Foundation

/// A stored attribute value, for dynamic access (`object["name"]`) and tools.
///
/// Two values are equal when they hold the same type and the same value, by the store's one semantics (see
/// "Equality and order of values" in the EntityStore documentation): canonically equivalent strings are equal,
/// `-0.0` equals `0.0` and NaN equals itself (so writing NaN over NaN is no change).
public enum Value: Hashable, Sendable, CustomStringConvertible {
    /// No value (an optional attribute that is nil).
    case null
    /// A boolean.
    case bool(Bool)
    /// A 64-bit integer.
    case int(Int64)
    /// A double.
    case double(Double)
    /// A string.
    case string(String)
    /// A date.
    case date(Date)
    /// Binary data.
    case data([UInt8])
    /// A UUID.
    case uuid(UUID)
    /// A decimal number.
    case decimal(Decimal)

    /// An `Int` as a value: `.int(book.pages)` where `pages` is an `Int`, as the case itself takes an `Int64`.
    /// (Disfavored, so that `.int(.max)` and a literal still mean the case.)
    @_disfavoredOverload
    public static func int(_ value: Int) -> Value { .int(Int64(value)) }

    /// Why the store cannot hold this value, or `nil` when it can. Only `Decimal.nan` is refused: it has no
    /// number to store, and no order among other decimals.
    public var storageProblem: String? {
        if case .decimal(let decimal) = self, decimal.isNaN {
            return "Decimal.nan is not a number and cannot be stored"
        }
        return nil
    }

    /// The attribute type this value belongs to; `nil` for `.null`.
    public var type: AttributeType? {
        switch self {
        case .null: nil
        case .bool: .bool
        case .int: .int64
        case .double: .double
        case .string: .string
        case .date: .date
        case .data: .binary
        case .uuid: .uuid
        case .decimal: .decimal
        }
    }

    /// Whether this is `.null`.
    public var isNull: Bool { if case .null = self { true } else { false } }

    public static func == (lhs: Value, rhs: Value) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.int(let a), .int(let b)): a == b
        case (.double(let a), .double(let b)): ValueSemantics.same(a, b)
        case (.string(let a), .string(let b)): a == b
        case (.date(let a), .date(let b)):
            ValueSemantics.same(a.timeIntervalSinceReferenceDate, b.timeIntervalSinceReferenceDate)
        case (.data(let a), .data(let b)): a == b
        case (.uuid(let a), .uuid(let b)): a == b
        case (.decimal(let a), .decimal(let b)): a == b
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let v): hasher.combine(v)
        case .int(let v): hasher.combine(v)
        case .double(let v): hasher.combine(ValueSemantics.canonical(v).bitPattern)
        case .string(let v): hasher.combine(v)
        case .date(let v): hasher.combine(ValueSemantics.canonical(v.timeIntervalSinceReferenceDate).bitPattern)
        case .data(let v): hasher.combine(v)
        case .uuid(let v): hasher.combine(v)
        case .decimal(let v): hasher.combine(v)
        }
    }

    public var description: String {
        switch self {
        case .null: "nil"
        case .bool(let v): "\(v)"
        case .int(let v): "\(v)"
        case .double(let v): "\(v)"
        case .string(let v): "\"\(v)\""
        case .date(let v): v.formatted(.iso8601)
        case .data(let v): "<\(v.count) bytes>"
        case .uuid(let v): v.uuidString
        case .decimal(let v): "\(v)"
        }
    }
}

extension Value: ExpressibleByStringInterpolation, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByNilLiteral
{
    /// A string value.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An integer value.
    public init(integerLiteral value: Int64) { self = .int(value) }
    /// A double value.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// A boolean value.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// No value.
    public init(nilLiteral: ()) { self = .null }
}

extension Value: Codable {
    private enum CodingKeys: String, CodingKey { case type, value }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard let type = try container.decodeIfPresent(AttributeType.self, forKey: .type) else {
            self = .null
            return
        }
        switch type {
        case .bool: self = .bool(try container.decode(Bool.self, forKey: .value))
        case .int64: self = .int(try container.decode(Int64.self, forKey: .value))
        case .double: self = .double(try container.decode(Double.self, forKey: .value))
        case .string: self = .string(try container.decode(String.self, forKey: .value))
        case .date:
            self = .date(Date(timeIntervalSinceReferenceDate: try container.decode(Double.self, forKey: .value)))
        case .binary: self = .data(try container.decode([UInt8].self, forKey: .value))
        case .uuid: self = .uuid(try container.decode(UUID.self, forKey: .value))
        case .decimal: self = .decimal(try container.decode(Decimal.self, forKey: .value))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(type, forKey: .type)
        switch self {
        case .null: break
        case .bool(let v): try container.encode(v, forKey: .value)
        case .int(let v): try container.encode(v, forKey: .value)
        case .double(let v): try container.encode(v, forKey: .value)
        case .string(let v): try container.encode(v, forKey: .value)
        case .date(let v): try container.encode(v.timeIntervalSinceReferenceDate, forKey: .value)
        case .data(let v): try container.encode(v, forKey: .value)
        case .uuid(let v): try container.encode(v, forKey: .value)
        case .decimal(let v): try container.encode(v, forKey: .value)
        }
    }
}

extension Array where Element == Value {
    /// A copy with storage of its own, made in one pass: a write to an array that shares its storage copies it
    /// through the standard library's generic slow path (~700 instructions for six values, against ~250 here),
    /// and every new object's values start as its entity's shared defaults.
    func ownCopy() -> [Value] {
        withUnsafeBufferPointer { source in
            [Value](unsafeUninitializedCapacity: source.count) { buffer, initialized in
                if let from = source.baseAddress { buffer.baseAddress!.initialize(from: from, count: source.count) }
                initialized = source.count
            }
        }
    }
}
