import Foundation

/// A Swift type that maps to one attribute type: the types of typed model properties and of predicate
/// arguments.
///
/// `String`, every integer type up to 64 bits signed (`Int`, `Int64`, ..., `UInt32`; stored as `int64`), `Double`
/// and `Float` (`double`), `Bool`, `Date`, `Data` (`binary`), `UUID`, `Decimal`, and optionals of those.
public protocol ValueConvertible {
    /// The attribute type values of this Swift type are stored as.
    static var attributeType: AttributeType { get }
    /// Whether the Swift type admits nil.
    static var isOptional: Bool { get }
    /// The value to show when the object's record cannot be read (it was deleted elsewhere).
    static var fallback: Self { get }
    /// Converts from a stored value; `nil` when the value is of another type.
    init?(value: Value)
    /// The stored value.
    var value: Value { get }
}

extension ValueConvertible {
    /// Non-optional by default.
    public static var isOptional: Bool { false }
}

extension String: ValueConvertible {
    public static var attributeType: AttributeType { .string }
    public static var fallback: String { "" }
    public init?(value: Value) { guard case .string(let v) = value else { return nil }; self = v }
    public var value: Value { .string(self) }
}

extension Int64: ValueConvertible {
    public static var attributeType: AttributeType { .int64 }
    public static var fallback: Int64 { 0 }
    public init?(value: Value) { guard case .int(let v) = value else { return nil }; self = v }
    public var value: Value { .int(self) }
}

extension Int: ValueConvertible {
    public static var attributeType: AttributeType { .int64 }
    public static var fallback: Int { 0 }
    public init?(value: Value) { guard case .int(let v) = value, let n = Int(exactly: v) else { return nil }; self = n }
    public var value: Value { .int(Int64(self)) }
}

extension Double: ValueConvertible {
    public static var attributeType: AttributeType { .double }
    public static var fallback: Double { 0 }
    public init?(value: Value) { guard case .double(let v) = value else { return nil }; self = v }
    public var value: Value { .double(self) }
}

extension Bool: ValueConvertible {
    public static var attributeType: AttributeType { .bool }
    public static var fallback: Bool { false }
    public init?(value: Value) { guard case .bool(let v) = value else { return nil }; self = v }
    public var value: Value { .bool(self) }
}

extension Date: ValueConvertible {
    public static var attributeType: AttributeType { .date }
    public static var fallback: Date { Date(timeIntervalSinceReferenceDate: 0) }
    public init?(value: Value) { guard case .date(let v) = value else { return nil }; self = v }
    public var value: Value { .date(self) }
}

extension Data: ValueConvertible {
    public static var attributeType: AttributeType { .binary }
    public static var fallback: Data { Data() }
    public init?(value: Value) { guard case .data(let v) = value else { return nil }; self = Data(v) }
    /// The bytes, copied in one move (`Array(self)` walks the data's iterator byte by byte).
    public var value: Value { .data(withUnsafeBytes { [UInt8]($0) }) }
}

extension UUID: ValueConvertible {
    public static var attributeType: AttributeType { .uuid }
    public static var fallback: UUID { UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)) }
    public init?(value: Value) { guard case .uuid(let v) = value else { return nil }; self = v }
    public var value: Value { .uuid(self) }
}

extension Int32: ValueConvertible {
    public static var attributeType: AttributeType { .int64 }
    public static var fallback: Int32 { 0 }
    public init?(value: Value) {
        guard case .int(let v) = value, let n = Int32(exactly: v) else { return nil }; self = n
    }
    public var value: Value { .int(Int64(self)) }
}

extension Int16: ValueConvertible {
    public static var attributeType: AttributeType { .int64 }
    public static var fallback: Int16 { 0 }
    public init?(value: Value) {
        guard case .int(let v) = value, let n = Int16(exactly: v) else { return nil }; self = n
    }
    public var value: Value { .int(Int64(self)) }
}

extension Int8: ValueConvertible {
    public static var attributeType: AttributeType { .int64 }
    public static var fallback: Int8 { 0 }
    public init?(value: Value) {
        guard case .int(let v) = value, let n = Int8(exactly: v) else { return nil }; self = n
    }
    public var value: Value { .int(Int64(self)) }
}

extension UInt32: ValueConvertible {
    public static var attributeType: AttributeType { .int64 }
    public static var fallback: UInt32 { 0 }
    public init?(value: Value) {
        guard case .int(let v) = value, let n = UInt32(exactly: v) else { return nil }; self = n
    }
    public var value: Value { .int(Int64(self)) }
}

extension UInt16: ValueConvertible {
    public static var attributeType: AttributeType { .int64 }
    public static var fallback: UInt16 { 0 }
    public init?(value: Value) {
        guard case .int(let v) = value, let n = UInt16(exactly: v) else { return nil }; self = n
    }
    public var value: Value { .int(Int64(self)) }
}

extension UInt8: ValueConvertible {
    public static var attributeType: AttributeType { .int64 }
    public static var fallback: UInt8 { 0 }
    public init?(value: Value) {
        guard case .int(let v) = value, let n = UInt8(exactly: v) else { return nil }; self = n
    }
    public var value: Value { .int(Int64(self)) }
}

extension Float: ValueConvertible {
    public static var attributeType: AttributeType { .double }
    public static var fallback: Float { 0 }
    /// Rounded to the nearest `Float`; nil for a finite double beyond `Float`'s range (it would read as infinity).
    public init?(value: Value) {
        guard case .double(let v) = value, Float(v).isFinite || !v.isFinite else { return nil }
        self = Float(v)
    }
    public var value: Value { .double(Double(self)) }
}

extension Decimal: ValueConvertible {
    public static var attributeType: AttributeType { .decimal }
    public static var fallback: Decimal { 0 }
    public init?(value: Value) { guard case .decimal(let v) = value else { return nil }; self = v }
    public var value: Value { .decimal(self) }
}

extension Optional: ValueConvertible where Wrapped: ValueConvertible {
    public static var attributeType: AttributeType { Wrapped.attributeType }
    public static var isOptional: Bool { true }
    public static var fallback: Wrapped? { nil }
    public init?(value: Value) {
        if value.isNull {
            self = .none
        } else if let wrapped = Wrapped(value: value) {
            self = .some(wrapped)
        } else {
            return nil
        }
    }
    public var value: Value { self?.value ?? .null }
}

/// An integer type narrower than the `int64` it is stored as (`Int32`, `Int16`, `Int8`, `UInt32`, `UInt16`, `UInt8`,
/// and optionals of those): a model property of such a type bounds its attribute's values to the type's range (see
/// `Stored.declaration(key:)`), so that no writer (a batch update, an import, a sync) can store a value the model
/// could not read.
protocol NarrowInteger {
    static var storedRange: ClosedRange<Int64> { get }
}

extension NarrowInteger where Self: FixedWidthInteger {
    static var storedRange: ClosedRange<Int64> { Int64(Self.min)...Int64(Self.max) }
}

extension Int32: NarrowInteger {}
extension Int16: NarrowInteger {}
extension Int8: NarrowInteger {}
extension UInt32: NarrowInteger {}
extension UInt16: NarrowInteger {}
extension UInt8: NarrowInteger {}

extension Optional: NarrowInteger where Wrapped: NarrowInteger {
    static var storedRange: ClosedRange<Int64> { Wrapped.storedRange }
}
