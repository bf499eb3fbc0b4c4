import EntityStore
import Foundation

/// The text a property's value is kept as on the server: exact (every value reads back equal), and readable by a
/// DBA. NULL is SQL NULL; otherwise a one-letter type, a colon and the value:
///
/// | Value | Text |
/// |---|---|
/// | bool | `b:true`, `b:false` |
/// | int64 | `i:-42` |
/// | double | `f:0.1`, `f:-0.0`, `f:nan`, `f:inf`, `f:5e-324` (Swift's shortest exact form) |
/// | string | `s:` and the string; `z:` and the base64 of its UTF-8 when it holds NUL, which PostgreSQL's text cannot |
/// | date | `t:` and seconds since 2001-01-01 00:00 UTC, as a double |
/// | binary | `x:` and base64 |
/// | uuid | `u:` and the UUID |
/// | decimal | `m:` and the decimal's digits |
/// | relationship | `r:` and the targets' global IDs, sorted, joined by commas (`r:` for none) |
enum SyncValue {
    static func text(_ value: Value) -> String? {
        switch value {
        case .null: nil
        case .bool(let v): "b:\(v)"
        case .int(let v): "i:\(v)"
        case .double(let v): "f:\(v)"
        case .string(let v): v.utf8.contains(0) ? "z:" + Data(v.utf8).base64EncodedString() : "s:" + v
        case .date(let v): "t:\(v.timeIntervalSinceReferenceDate)"
        case .data(let v): "x:" + Data(v).base64EncodedString()
        case .uuid(let v): "u:" + v.uuidString
        case .decimal(let v): "m:\(v)"
        }
    }

    static func text(targets: [UUID]) -> String {
        "r:" + targets.map(\.uuidString).sorted().joined(separator: ",")
    }

    /// The value `text` holds, for an attribute of `type`.
    ///
    /// - Throws: A message naming what does not fit (another store wrote another type under this key).
    static func value(_ text: String?, as type: AttributeType) throws -> Value {
        guard let text else { return .null }
        let tag = text.prefix(2)
        let body = text.dropFirst(2)
        let value: Value? =
            switch (tag, type) {
            case ("b:", .bool): body == "true" ? .bool(true) : body == "false" ? .bool(false) : nil
            case ("i:", .int64): Int64(body).map(Value.int)
            case ("f:", .double): Double(exactDescription: body).map(Value.double)
            case ("s:", .string): .string(String(body))
            case ("z:", .string):
                Data(base64Encoded: String(body)).flatMap { String(bytes: $0, encoding: .utf8) }.map(Value.string)
            case ("t:", .date): Double(exactDescription: body).map { .date(Date(timeIntervalSinceReferenceDate: $0)) }
            case ("x:", .binary): Data(base64Encoded: String(body)).map { .data([UInt8]($0)) }
            case ("u:", .uuid): UUID(uuidString: String(body)).map(Value.uuid)
            case ("m:", .decimal): decimal(String(body)).map(Value.decimal)
            default: nil
            }
        guard let value else {
            throw SyncError(.store, "the server's value '\(text.prefix(40))' is not \(type.withArticle)")
        }
        return value
    }

    /// The decimal `text` writes exactly (`Decimal(string:)` alone reads "12x95" as 12).
    private static func decimal(_ text: String) -> Decimal? {
        guard let decimal = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")), "\(decimal)" == text
        else { return nil }
        return decimal
    }

    /// The global IDs of a relationship's text.
    static func targets(_ text: String?) throws -> [UUID] {
        guard let text, text.hasPrefix("r:") else {
            throw SyncError(.store, "the server's value '\((text ?? "NULL").prefix(40))' is not a relationship")
        }
        let body = text.dropFirst(2)
        guard !body.isEmpty else { return [] }
        return try body.split(separator: ",").map {
            guard let id = UUID(uuidString: String($0)) else {
                throw SyncError(.store, "the server's relationship holds '\($0)', which is not a global ID")
            }
            return id
        }
    }
}

/// A hybrid logical clock (Kulkarni et al., 2014) in 64 bits: milliseconds since 1970 in the high 48 bits, a
/// counter in the low 16. A store stamps each of its saves with `max(physical time, last stamp + 1)`, where the last
/// stamp includes every stamp it has pulled: a save that follows another store's change (by causality, not by a
/// clock) always gets a larger stamp, and clocks that drift apart still order saves by wall time to the millisecond
/// otherwise. Ties between stores are broken by the store's ID.
public enum HybridLogicalClock {
    /// The stamp of an event at `date` that follows the stamp `last`.
    public static func stamp(after last: UInt64, at date: Date) -> UInt64 {
        let milliseconds = UInt64(max(0, (date.timeIntervalSince1970 * 1000).rounded(.down)))
        return max(milliseconds << 16, last &+ 1)
    }

    /// The stamp's wall time.
    public static func date(of stamp: UInt64) -> Date {
        Date(timeIntervalSince1970: Double(stamp >> 16) / 1000)
    }
}
