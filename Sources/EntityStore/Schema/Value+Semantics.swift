import Foundation

/// One meaning of equality and order for stored values, shared by index keys, scans, predicates, in-memory sorts,
/// uniqueness, the integrity check and the CLI.
///
/// - **Strings** compare as Swift's `==` and `<` do: canonically equivalent strings (NFC "café" and NFD
///   "cafe\u{301}") are equal, and the order is that of their Unicode scalars in normalization form C. Index keys
///   hold the NFC form's UTF-8 bytes, whose byte order is that order. An attribute declared case-insensitive
///   compares (for its index and its uniqueness) case-, diacritic- and width-folded strings: "zeta", "ZETA" and
///   "Zéta" are one value there.
/// - **Doubles and dates** are totally ordered: `-0.0` and `0.0` are one value, every NaN is one value, equal to
///   itself and greater than `+infinity`. So `score > 5` matches NaN, `score < .infinity` does not, `score == NaN`
///   finds the NaNs, and a sort puts NaN after `+infinity` (before it, descending).
/// - **nil** equals only nil and takes part in no ordering comparison (`<`, `>`, `BETWEEN` are false for it); sorts
///   put it first.
/// - `Decimal.nan` cannot be stored (``Value/storageProblem``).
package enum ValueSemantics {
    /// The total order of doubles described above.
    @inline(__always)
    static func order(_ x: Double, _ y: Double) -> ComparisonResult {
        if x < y { return .orderedAscending }
        if x > y { return .orderedDescending }
        if x == y { return .orderedSame }  // -0.0 == 0.0
        // At least one NaN: NaN equals NaN and follows every number.
        if x.isNaN { return y.isNaN ? .orderedSame : .orderedDescending }
        return .orderedAscending
    }

    /// Whether two doubles are one value (`-0.0 == 0.0`, NaN == NaN).
    @inline(__always)
    static func same(_ x: Double, _ y: Double) -> Bool { x == y || (x.isNaN && y.isNaN) }

    /// The double every NaN and both zeros are stored, hashed and indexed as.
    @inline(__always)
    static func canonical(_ x: Double) -> Double { x.isNaN ? .nan : (x == 0 ? 0 : x) }

    /// One representative of the values equal to `value`: a double or date with one zero and one NaN.
    static func canonical(_ value: Value) -> Value {
        switch value {
        case .double(let x): .double(canonical(x))
        case .date(let d): .date(Date(timeIntervalSinceReferenceDate: canonical(d.timeIntervalSinceReferenceDate)))
        default: value
        }
    }

    /// The case-, diacritic- and width-folded canonical form of a case-insensitive attribute's string.
    static func folded(_ string: String) -> String {
        string.folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil)
            .canonicalForm
    }

    /// The value uniqueness and the integrity check compare for `attribute`: folded for a case-insensitive
    /// attribute, the value itself otherwise (its equality and hash follow the rules above).
    package static func uniquenessKey(_ value: Value, caseInsensitive: Bool) -> Value {
        guard caseInsensitive, case .string(let text) = value else { return value }
        return .string(folded(text))
    }

    /// Whether two values are the same as written, not only equal: `-0.0` and `0.0`, NFC and NFD "café", or the
    /// decimals 1.0 and 1.00 are equal values but not identical ones. What an undo restores must be identical.
    static func identical(_ x: Value, _ y: Value) -> Bool {
        switch (x, y) {
        case (.double(let a), .double(let b)): a.bitPattern == b.bitPattern
        case (.date(let a), .date(let b)):
            a.timeIntervalSinceReferenceDate.bitPattern == b.timeIntervalSinceReferenceDate.bitPattern
        case (.string(let a), .string(let b)): a.utf8.elementsEqual(b.utf8)
        case (.decimal(let a), .decimal(let b)): a == b && a.exponent == b.exponent
        default: x == y
        }
    }
}

extension Value {
    /// The value as an attribute of `type` holds it: the value itself when it is of that type (or nil), or a number
    /// of the other numeric type that converts exactly (`4` for a double attribute, `4.0` for an int64 one, as
    /// Core Data's `NSNumber` would); `nil` when the attribute cannot hold it (`4.5` for an int64 attribute, an integer
    /// beyond 2^53 that a double would round, a string for a number).
    func converted(to type: AttributeType) -> Value? {
        guard let own = self.type, own != type else { return self }
        switch (self, type) {
        case (.int(let integer), .double):
            let double = Double(integer)
            return Int64(exactly: double) == integer ? .double(double) : nil
        case (.double(let double), .int64):
            return Int64(exactly: double).map(Value.int)
        default:
            return nil
        }
    }

    /// ``converted(to:)``, or the value as it is when it does not convert (for the caller's check to name).
    @inline(__always)
    func converting(to type: AttributeType) -> Value {
        guard let own = self.type, own != type else { return self }
        return converted(to: type) ?? self
    }
}

extension Double {
    /// The double that `"\(value)"` wrote, exactly: every form `Double(_:)` reads, and NaNs with a payload as Swift
    /// prints them (`nan(0x1)`, `-snan(0x2)`), which it does not. For tools and sync that carry doubles as text.
    package init?(exactDescription text: some StringProtocol) {
        if let value = Double(text) {
            self = value
            return
        }
        var body = Substring(text)
        let negative = body.hasPrefix("-")
        if negative { body = body.dropFirst() }
        let signaling = body.hasPrefix("s")
        if signaling { body = body.dropFirst() }
        guard body.hasPrefix("nan(0x"), body.hasSuffix(")"),
            let payload = UInt64(body.dropFirst(6).dropLast(), radix: 16), payload < 1 << 51,
            !signaling || payload != 0
        else { return nil }
        let quiet: UInt64 = signaling ? 0 : 1 << 51
        self = Double(bitPattern: (negative ? 1 << 63 : 0) | 0x7FF0_0000_0000_0000 | quiet | payload)
    }
}

extension String {
    /// The string in Unicode normalization form C (ASCII text is returned as it is, without work).
    var canonicalForm: String {
        if utf8.allSatisfy({ $0 < 0x80 }) { return self }
        return precomposedStringWithCanonicalMapping
    }
}
