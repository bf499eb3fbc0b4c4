import Foundation
import LMDB

/// Rules an attribute's values must follow, checked by every save and batch insert: Core Data's minimum, maximum
/// and regular expression constraints.
///
/// <!-- snippet
/// let launch = Date(timeIntervalSince1970: 0)
/// -->
/// ```swift
/// Attribute("rating", .int64, validation: .range(1, 5))
/// Attribute("title", .string, validation: .length(1...200))
/// Attribute("isbn", .string, optional: true, validation: .pattern("[0-9]{13}"))
/// Attribute("due", .date, validation: AttributeValidation(minimum: .date(launch)))
/// ```
///
/// - `minimum` and `maximum` (inclusive) apply to numbers (`int64`, `double`, `decimal`) and dates, and are of the
///   attribute's type;
/// - `minimumLength` and `maximumLength` (inclusive) count a string's characters (as Swift's `String.count`: "é" is
///   one) and binary data's bytes;
/// - `pattern` is a regular expression (`NSRegularExpression`) a string must match as a whole.
///
/// A nil value is not checked against the rules (whether it is allowed is the attribute's `optional`). Rules are not
/// part of the schema's fingerprint: changing them needs no migration, and stored values are not re-checked until
/// they are saved again. A schema whose rules do not fit their attribute (a minimum of another type, a length on a
/// number, a pattern that does not compile, a minimum above the maximum) is refused when the store opens.
public struct AttributeValidation: Codable, Sendable, Hashable {
    /// The smallest value allowed (numbers and dates).
    public var minimum: Value?
    /// The largest value allowed (numbers and dates).
    public var maximum: Value?
    /// The fewest characters (strings) or bytes (binary) allowed.
    public var minimumLength: Int?
    /// The most characters (strings) or bytes (binary) allowed.
    public var maximumLength: Int?
    /// A regular expression strings must match as a whole.
    public var pattern: String?

    /// Rules from their parts; any left nil is not checked.
    public init(
        minimum: Value? = nil, maximum: Value? = nil, minimumLength: Int? = nil, maximumLength: Int? = nil,
        pattern: String? = nil
    ) {
        self.minimum = minimum
        self.maximum = maximum
        self.minimumLength = minimumLength
        self.maximumLength = maximumLength
        self.pattern = pattern
    }

    /// Values from `minimum` to `maximum`, inclusive (either may be nil).
    public static func range(_ minimum: Value?, _ maximum: Value?) -> AttributeValidation {
        AttributeValidation(minimum: minimum, maximum: maximum)
    }

    /// Strings of `lengths` characters, or data of `lengths` bytes.
    public static func length(_ lengths: ClosedRange<Int>) -> AttributeValidation {
        AttributeValidation(minimumLength: lengths.lowerBound, maximumLength: lengths.upperBound)
    }

    /// Strings of at least `minimum` characters, or data of at least `minimum` bytes.
    public static func length(_ lengths: PartialRangeFrom<Int>) -> AttributeValidation {
        AttributeValidation(minimumLength: lengths.lowerBound)
    }

    /// Strings of at most `maximum` characters, or data of at most `maximum` bytes.
    public static func length(_ lengths: PartialRangeThrough<Int>) -> AttributeValidation {
        AttributeValidation(maximumLength: lengths.upperBound)
    }

    /// Strings the regular expression matches as a whole.
    public static func pattern(_ pattern: String) -> AttributeValidation { AttributeValidation(pattern: pattern) }

    /// These rules with the minimum and maximum narrowed to `range` (a bound of another type is kept, and refused
    /// when the schema is made valid).
    static func narrowed(_ rules: AttributeValidation?, to range: ClosedRange<Int64>) -> AttributeValidation {
        var narrowed = rules ?? AttributeValidation()
        switch narrowed.minimum {
        case nil, .null?: narrowed.minimum = .int(range.lowerBound)
        case .int(let low)?: narrowed.minimum = .int(max(low, range.lowerBound))
        default: break
        }
        switch narrowed.maximum {
        case nil, .null?: narrowed.maximum = .int(range.upperBound)
        case .int(let high)?: narrowed.maximum = .int(min(high, range.upperBound))
        default: break
        }
        return narrowed
    }

    /// What is wrong with the rules for an attribute of `type` (checked when a schema is made valid).
    func problems(for type: AttributeType) -> [String] {
        var problems: [String] = []
        let ordered: Set<AttributeType> = [.int64, .double, .decimal, .date]
        for (name, bound) in [("minimum", minimum), ("maximum", maximum)] {
            guard let bound, !bound.isNull else { continue }
            if !ordered.contains(type) {
                problems.append("a \(name) applies to numbers and dates, not to \(type.withArticle)")
            } else if bound.type != type {
                problems.append("the \(name) \(bound) is not \(type.withArticle)")
            } else if let problem = bound.storageProblem {
                problems.append("the \(name): \(problem)")
            }
        }
        if let minimum, let maximum, minimum.type == type, maximum.type == type,
            let order = ValueComparison.order(minimum, maximum, []), order == .orderedDescending
        {
            problems.append("the minimum \(minimum) is above the maximum \(maximum)")
        }
        if minimumLength != nil || maximumLength != nil {
            if type != .string && type != .binary {
                problems.append("a length applies to strings and binary data, not to \(type.withArticle)")
            }
            if let low = minimumLength, low < 0 { problems.append("the minimum length \(low) is negative") }
            if let low = minimumLength, let high = maximumLength, low > high {
                problems.append("the minimum length \(low) is above the maximum length \(high)")
            }
        }
        if let pattern {
            if type != .string {
                problems.append("a pattern applies to strings, not to \(type.withArticle)")
            } else if let failure = Self.compileProblem(pattern) {
                problems.append("the pattern '\(pattern)' does not compile: \(failure)")
            }
        }
        return problems
    }

    /// What is wrong with `value` under these rules, or nil.
    func problem(with value: Value) -> String? {
        if value.isNull { return nil }
        if let minimum, !minimum.isNull, let order = ValueComparison.order(value, minimum, []),
            order == .orderedAscending
        {
            return "\(value) is below the minimum \(minimum)"
        }
        if let maximum, !maximum.isNull, let order = ValueComparison.order(value, maximum, []),
            order == .orderedDescending
        {
            return "\(value) is above the maximum \(maximum)"
        }
        if minimumLength != nil || maximumLength != nil {
            let (length, unit): (Int?, String) =
                switch value {
                case .string(let text): (text.count, "characters")
                case .data(let bytes): (bytes.count, "bytes")
                default: (nil, "")
                }
            if let length {
                if let low = minimumLength, length < low { return "\(length) \(unit), fewer than the minimum \(low)" }
                if let high = maximumLength, length > high { return "\(length) \(unit), more than the maximum \(high)" }
            }
        }
        if let pattern, case .string(let text) = value {
            do {
                let regex = try Self.regex(pattern)
                let range = NSRange(text.startIndex..<text.endIndex, in: text)
                if regex.firstMatch(in: text, options: [], range: range) == nil {
                    return "\(value) does not match the pattern '\(pattern)'"
                }
            } catch {
                // Refused when the schema was checked; said as what it is should a rule bypass that check.
                return "the pattern '\(pattern)' does not compile: \(error.localizedDescription)"
            }
        }
        return nil
    }

    /// Compiled patterns, shared: `NSRegularExpression` is immutable and may be used from any thread.
    private static let compiled = Locked<[String: NSRegularExpression]>([:])

    private static func regex(_ pattern: String) throws -> NSRegularExpression {
        if let found = compiled.withLock({ $0[pattern] }) { return found }
        let made = try NSRegularExpression(pattern: "\\A(?:\(pattern))\\z")
        compiled.withLock { $0[pattern] = made }
        return made
    }

    private static func compileProblem(_ pattern: String) -> String? {
        do {
            _ = try regex(pattern)
            return nil
        } catch {
            return "\(error.localizedDescription)"
        }
    }
}

extension AttributeValidation: CustomStringConvertible {
    /// The rules in a line: `minimum 1, maximum 5, length 1...80, pattern ^[a-z]+$`.
    public var description: String {
        var parts: [String] = []
        if let minimum { parts.append("minimum \(minimum)") }
        if let maximum { parts.append("maximum \(maximum)") }
        switch (minimumLength, maximumLength) {
        case (let low?, let high?): parts.append("length \(low)...\(high)")
        case (let low?, nil): parts.append("length at least \(low)")
        case (nil, let high?): parts.append("length at most \(high)")
        case (nil, nil): break
        }
        if let pattern { parts.append("pattern \(pattern)") }
        return parts.isEmpty ? "none" : parts.joined(separator: ", ")
    }
}
