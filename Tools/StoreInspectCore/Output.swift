import EntityStore
import Foundation

/// An output format.
public enum OutputFormat: String, Sendable {
    case table, json, ndjson, csv
}

/// A cell of output.
enum Cell {
    case text(String)
    case int(Int64)
    case double(Double)
    case bool(Bool)
    case null
    /// A to-many relationship's targets: an array in JSON, separated by spaces elsewhere.
    case list([Cell])
    /// Named cells: an object in JSON, `name: value` separated by `; ` elsewhere.
    case fields([(String, Cell)])
    /// A value that changed: `{"old": ..., "new": ...}` in JSON (a side it does not have left out), `old → new`
    /// elsewhere.
    indirect case change(old: Cell?, new: Cell?)

    init(_ value: Value) {
        switch value {
        case .null: self = .null
        case .bool(let v): self = .bool(v)
        case .int(let v): self = .int(v)
        case .double(let v): self = v.isFinite ? .double(v) : .text("\(v)")
        case .string(let v): self = .text(v)
        case .date(let v): self = .text(Cell.iso8601(v))
        case .data(let v): self = .text(Data(v).base64EncodedString())
        case .uuid(let v): self = .text(Cell.uuidText(v))
        // A string: as a JSON number a reader would parse it into a double and lose digits.
        case .decimal(let v): self = .text("\(v)")
        }
    }

    /// `uuid.uuidString` (upper-case hex with dashes), written without `sprintf`, which cost more than the rest of
    /// a row's UUID.
    static func uuidText(_ uuid: UUID) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        return withUnsafeBytes(of: uuid.uuid) { raw in
            String(unsafeUninitializedCapacity: 36) { out in
                var o = 0
                for (i, byte) in raw.enumerated() {
                    if i == 4 || i == 6 || i == 8 || i == 10 {
                        out[o] = UInt8(ascii: "-")
                        o += 1
                    }
                    out[o] = hex[Int(byte >> 4)]
                    out[o + 1] = hex[Int(byte & 0xF)]
                    o += 2
                }
                return o
            }
        }
    }

    /// Seconds from 2001 (how a date is stored) to 1970 (how ISO 8601 text counts).
    static let referenceOffset = Decimal(978_307_200)

    /// ISO 8601 in UTC with every fractional digit the date holds (`2026-11-30T16:16:01.123456Z`; no fraction for
    /// whole seconds): the shortest decimal of the stored seconds (since 2001, which round-trips), moved to 1970 in
    /// decimal arithmetic, so that ``parseExactDate(_:)`` gives back the very same `Date`.
    static func iso8601(_ date: Date) -> String {
        let stored = date.timeIntervalSinceReferenceDate
        guard stored.isFinite else { return "\(stored)" }
        if let exact = ExactSeconds(description: "\(stored)")?.since1970,
            let base = CivilTime.text(ofSecondsSince1970: Double(exact.whole))
        {
            // The common case, in integers: the same text as the decimal arithmetic below, ~20x faster.
            guard !exact.fraction.isEmpty else { return base }
            return String(base.dropLast()) + "." + String(decoding: exact.fraction, as: UTF8.self) + "Z"
        }
        return iso8601ByDecimal(date)
    }

    /// ``iso8601(_:)`` in `Decimal` arithmetic: for dates beyond ``CivilTime/years`` or 15 whole digits.
    static func iso8601ByDecimal(_ date: Date) -> String {
        let stored = date.timeIntervalSinceReferenceDate
        guard stored.isFinite else { return "\(stored)" }
        guard let exact = Decimal(string: "\(stored)").map({ $0 + referenceOffset }) else {
            // Beyond Decimal's range (no calendar date either): the seconds as they are.
            return "\(date.timeIntervalSince1970)"
        }
        var whole = Decimal()
        var value = exact
        NSDecimalRound(&whole, &value, 0, .down)
        let seconds = NSDecimalNumber(decimal: whole).doubleValue
        let base =
            CivilTime.text(ofSecondsSince1970: seconds) ?? Date(timeIntervalSince1970: seconds).formatted(.iso8601)
        let fraction = "\(exact - whole)"
        guard fraction.hasPrefix("0."), base.hasSuffix("Z") else { return base }
        return String(base.dropLast()) + fraction.dropFirst() + "Z"
    }

    /// The date ``iso8601(_:)`` wrote (`YYYY-MM-DDTHH:MM:SS[.fraction]Z`), exactly; nil for any other text.
    static func parseExactDate(_ text: String) -> Date? {
        // The common case, on the text's bytes and in integers: a date of 1600-9999, whole seconds from 1970 and the
        // fraction's digits (the same date as the decimal arithmetic below).
        var bytes = text
        let fast: Date?? = bytes.withUTF8 { bytes in
            let count = bytes.count
            guard count >= 20, bytes[count - 1] == UInt8(ascii: "Z"),
                bytes[19] == UInt8(ascii: "Z") || bytes[19] == UInt8(ascii: "."),
                let whole = CivilTime.secondsSince1970(dateAndTime: UnsafeBufferPointer(rebasing: bytes[0..<19]))
            else { return nil }
            if count == 20 { return .some(Date(timeIntervalSinceReferenceDate: Double(whole - ExactSeconds.offset))) }
            let digits = bytes[20..<(count - 1)]
            guard bytes[19] == UInt8(ascii: "."), !digits.isEmpty, digits.allSatisfy({ (48...57).contains($0) }) else {
                return .some(nil)
            }
            return .some(
                ExactSeconds.stored(wholeSince1970: whole, fraction: Array(digits)).map(
                    Date.init(timeIntervalSinceReferenceDate:)))
        }
        if let fast { return fast }
        guard text.hasSuffix("Z"), text.count >= 20 else { return nil }
        let body = text.dropLast()
        let dot = body.firstIndex(of: ".")
        let wholeText = String(body[..<(dot ?? body.endIndex)]) + "Z"
        // Years before 1600 or after 9999 (where the calendar's rules are Foundation's to apply).
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        guard let whole = formatter.date(from: wholeText) else { return nil }
        var seconds = Decimal(Int64(whole.timeIntervalSince1970))
        if let dot {
            let digits = body[body.index(after: dot)...]
            guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber),
                let fraction = Decimal(string: "0." + digits)
            else { return nil }
            seconds += fraction
        }
        guard let stored = Double("\(seconds - referenceOffset)") else { return nil }
        return Date(timeIntervalSinceReferenceDate: stored)
    }

    /// A date ``iso8601(_:)`` wrote as seconds, having no calendar date: `nan`, `inf` and `-inf` (seconds since 2001,
    /// as stored), or seconds since 1970 beyond Decimal's range (where the 31 years between the epochs are below the
    /// double's precision).
    static func parseDateBeyondTheCalendar(_ text: String) -> Date? {
        guard let seconds = Double(exactDescription: text) else { return nil }
        if !seconds.isFinite { return Date(timeIntervalSinceReferenceDate: seconds) }
        guard Decimal(string: "\(seconds)") == nil else { return nil }  // within Decimal's range: written as a date
        return Date(timeIntervalSince1970: seconds)
    }

    /// The cell as a table shows it: nil as `nil`, control characters escaped.
    var visibleText: String {
        if case .null = self { return "nil" }
        return Cell.visible(plain)
    }

    var plain: String {
        switch self {
        case .text(let s): s
        case .int(let v): "\(v)"
        case .double(let v): "\(v)"
        case .bool(let v): v ? "true" : "false"
        case .null: ""
        case .list(let cells): cells.map(\.plain).joined(separator: " ")
        case .fields(let fields): fields.map { "\($0): \($1.plain)" }.joined(separator: "; ")
        case .change(let old, let new):
            switch (old, new) {
            case (let old?, let new?): "\(old.plainOrNil) → \(new.plainOrNil)"
            case (let old?, nil): "\(old.plainOrNil) →"
            case (nil, let new?): "→ \(new.plainOrNil)"
            case (nil, nil): ""
            }
        }
    }

    /// ``plain``, with nil as `nil` (a change to or from nil shows it).
    var plainOrNil: String {
        if case .null = self { return "nil" }
        return plain
    }

    /// Appends the cell as JSON: text quoted, nil as `null`, a list as an array.
    func appendJSON(to out: inout [UInt8]) {
        switch self {
        case .text(let s): Cell.appendQuoted(s, to: &out)
        case .int(let v): Cell.appendDecimal(v, to: &out)
        case .double(let v): out.append(contentsOf: "\(v)".utf8)
        case .bool(let v): out.append(contentsOf: v ? "true".utf8 : "false".utf8)
        case .null: out.append(contentsOf: "null".utf8)
        case .list(let cells):
            out.append(UInt8(ascii: "["))
            for (i, cell) in cells.enumerated() {
                if i > 0 { out.append(contentsOf: ", ".utf8) }
                cell.appendJSON(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .fields(let fields):
            out.append(UInt8(ascii: "{"))
            for (i, (name, cell)) in fields.enumerated() {
                if i > 0 { out.append(contentsOf: ", ".utf8) }
                Cell.appendQuoted(name, to: &out)
                out.append(contentsOf: ": ".utf8)
                cell.appendJSON(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        case .change(let old, let new):
            Cell.fields([old.map { ("old", $0) }, new.map { ("new", $0) }].compactMap { $0 }).appendJSON(to: &out)
        }
    }

    /// Appends `value` in decimal digits.
    static func appendDecimal(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for a UInt64's 20 digits
        withUnsafeMutableBytes(of: &digits) { buffer in
            var start = buffer.count
            repeat {
                start -= 1
                buffer[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            out.append(contentsOf: buffer[start...])
        }
    }

    /// Appends `text` as a JSON string: `"` and `\\` escaped, control characters as `\n`, `\r`, `\t` or `\u00XX`;
    /// everything else as its UTF-8 bytes.
    static func appendQuoted(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { bytes in
            var start = 0
            for (i, byte) in bytes.enumerated() where byte < 0x20 || byte == 0x22 || byte == 0x5C {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<i]))
                start = i + 1
                switch byte {
                case 0x22: out.append(contentsOf: "\\\"".utf8)
                case 0x5C: out.append(contentsOf: "\\\\".utf8)
                case 0x0A: out.append(contentsOf: "\\n".utf8)
                case 0x0D: out.append(contentsOf: "\\r".utf8)
                case 0x09: out.append(contentsOf: "\\t".utf8)
                default: out.append(contentsOf: String(format: "\\u%04x", byte).utf8)
                }
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...]))
        }
        out.append(UInt8(ascii: "\""))
    }

    /// `text` with every control character shown as an escape (`\n`, `\r`, `\t`, `\e`, `\x00`, `\u{9B}`): a value or
    /// a name can never move the terminal's cursor, change its colours or set its title.
    static func visible(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) })
        else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{1B}": out += "\\e"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    out += "\\x" + String(format: "%02X", scalar.value)
                } else if (0x80...0x9F).contains(scalar.value) {
                    out += "\\u{" + String(format: "%02X", scalar.value) + "}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }

    /// The cells a character takes in a terminal: 2 for East Asian wide and fullwidth characters and emoji, 0 for a
    /// lone combining mark, 1 otherwise.
    static func displayWidth(_ character: Character) -> Int {
        let scalars = character.unicodeScalars
        guard let first = scalars.first else { return 0 }
        if scalars.contains(where: \.properties.isEmojiPresentation)
            || (scalars.count > 1 && scalars.contains { $0.value == 0xFE0F })
        {
            return 2
        }
        switch first.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return 0
        default: break
        }
        let wide: [ClosedRange<UInt32>] = [
            0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
            0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x1F300...0x1F64F,
            0x1F900...0x1F9FF, 0x20000...0x3FFFD,
        ]
        return wide.contains { $0.contains(first.value) } ? 2 : 1
    }

    /// The cells `text` takes in a terminal (printable ASCII: one per byte, without looking at characters).
    static func displayWidth(_ text: String) -> Int {
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return text.utf8.count }
        return text.reduce(0) { $0 + displayWidth($1) }
    }

    /// The longest start of `text` that fits in `width` cells.
    static func prefix(_ text: String, width: Int) -> String {
        var used = 0
        var result = ""
        for character in text {
            let cells = displayWidth(character)
            if used + cells > width { break }
            used += cells
            result.append(character)
        }
        return result
    }

    /// `text` as a JSON string (see ``appendQuoted(_:to:)``).
    static func quote(_ text: String) -> String {
        var bytes: [UInt8] = []
        appendQuoted(text, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Rows with named columns, rendered in any format.
struct Table {
    var columns: [String]
    var rows: [[Cell]] = []
    /// The transaction the snapshot read, shown with the table and in JSON.
    var transaction: Int?
    /// Whether the table is one record (`info`): JSON is that object itself, not an object holding rows.
    var isRecord = false

    func render(_ format: OutputFormat, color: Bool) -> String {
        var text = ""
        let stream = RowStream(
            columns: columns, format: format, color: color, transaction: transaction, isRecord: isRecord,
            widthSample: Int.max
        ) { text += $0 }
        for row in rows { stream.add(row) }
        stream.finish()
        return text
    }
}

/// Renders rows as they come and hands the text to `out` in chunks: `ls` and `export` print their first rows at
/// once and hold one chunk, not the whole output.
///
/// Every format is the same whether the rows are streamed or rendered at once (``Table/render(_:color:)``), except
/// a streamed table's column widths: measured on the first `widthSample` rows (a longer later value shifts its line).
/// JSON is one object: `{"transaction": N, "rows": [...]}` (`transaction` when a snapshot was read), or for a
/// record (`info`) the record's own object.
final class RowStream {
    let columns: ColumnKeys
    let format: OutputFormat
    let color: Bool
    let transaction: Int?
    let isRecord: Bool
    let widthSample: Int
    let out: (String) -> Void
    private var buffer: [UInt8] = []
    private(set) var count = 0
    /// Table rows held until the widths are known.
    private var held: [[String]] = []
    private var widths: [Int]?

    init(
        columns: [String], format: OutputFormat, color: Bool, transaction: Int?, isRecord: Bool = false,
        widthSample: Int = 1000, out: @escaping (String) -> Void
    ) {
        self.columns = ColumnKeys(columns)
        self.format = format
        self.color = color
        self.transaction = transaction
        self.isRecord = isRecord
        self.widthSample = widthSample
        self.out = out
        buffer.reserveCapacity(Self.chunk + 4096)
        switch format {
        case .csv:
            for (i, column) in columns.enumerated() {
                if i > 0 { buffer.append(UInt8(ascii: ",")) }
                Self.appendCSVField(column, to: &buffer)
            }
            buffer.append(UInt8(ascii: "\n"))
        case .json where !isRecord:
            append((transaction.map { "{\"transaction\": \($0), " } ?? "{") + "\"rows\": [")
        default: break
        }
    }

    /// Output is handed on in chunks of about this many bytes.
    static let chunk = 1 << 16

    private func append(_ text: String) { buffer.append(contentsOf: text.utf8) }

    /// Adds a row; `keys` names its cells when they are not the stream's columns (JSON objects of several
    /// entities).
    func add(_ row: [Cell], keys: ColumnKeys? = nil) {
        let keys = keys ?? columns
        count += 1
        switch format {
        case .ndjson:
            buffer.append(UInt8(ascii: "{"))
            for (i, cell) in row.enumerated() {
                buffer.append(contentsOf: i == 0 ? keys.compact[i] : keys.compactAfterFirst[i])
                cell.appendJSON(to: &buffer)
            }
            buffer.append(contentsOf: "}\n".utf8)
        case .json:
            if !isRecord { buffer.append(contentsOf: (count == 1 ? "\n  {" : ",\n  {").utf8) } else { append("{") }
            for (i, cell) in row.enumerated() {
                buffer.append(contentsOf: i == 0 ? keys.spaced[i] : keys.spacedAfterFirst[i])
                cell.appendJSON(to: &buffer)
            }
            buffer.append(UInt8(ascii: "}"))
        case .csv:
            for (i, cell) in row.enumerated() {
                if i > 0 { buffer.append(UInt8(ascii: ",")) }
                Self.appendCSVCell(cell, to: &buffer)
            }
            buffer.append(UInt8(ascii: "\n"))
        case .table:
            let texts = row.map(\.visibleText)
            if widths == nil {
                held.append(texts)
                if held.count >= widthSample { releaseHeld() }
            } else {
                append(line(texts) + "\n")
            }
        }
        if buffer.count >= Self.chunk { flush() }
    }

    /// Ends the output: the table's footer, JSON's closing brackets.
    func finish() {
        switch format {
        case .table:
            if widths == nil { releaseHeld() }
            if let transaction {
                append("(\(count) row\(count == 1 ? "" : "s"), snapshot at transaction \(transaction))\n")
            }
        case .json:
            append(isRecord ? "\n" : (count == 0 ? "]}\n" : "\n]}\n"))
        case .ndjson, .csv: break
        }
        flush()
    }

    private func flush() {
        guard !buffer.isEmpty else { return }
        out(String(decoding: buffer, as: UTF8.self))
        buffer.removeAll(keepingCapacity: true)
    }

    /// Measures the held rows (in terminal cells: a CJK character or an emoji takes two, a combining mark none),
    /// writes the header and them.
    private func releaseHeld() {
        let names = columns.names.map(Cell.visible)
        var measured = names.map(Cell.displayWidth)
        for row in held {
            for (i, text) in row.enumerated() { measured[i] = max(measured[i], min(Cell.displayWidth(text), 60)) }
        }
        widths = measured
        let header = line(names)
        append((color ? "\u{1B}[1m\(header)\u{1B}[0m" : header) + "\n")
        for row in held { append(line(row) + "\n") }
        held = []
    }

    private func line(_ cells: [String]) -> String {
        var line = ""
        for (i, (text, width)) in zip(cells, widths ?? []).enumerated() {
            if i > 0 { line += "  " }
            let cells = Cell.displayWidth(text)
            let cut = cells > 60 ? Cell.prefix(text, width: 59) + "…" : text
            line += cut
            line += String(repeating: " ", count: max(0, width - (cells > 60 ? 60 : cells)))
        }
        // No trailing blanks (the last column's padding, or empty last cells).
        while line.utf8.last == UInt8(ascii: " ") { line.removeLast() }
        return line
    }

    // RFC 4180 with LF line ends (which Python's csv and sqlite3 read alike). Quoted when the text holds a comma, a
    // quote, a CR or an LF (tested on bytes: "\r\n" is one Character, equal to neither). Nil is an empty field, an
    // empty string a quoted one (`""`), as in PostgreSQL's CSV: Python reads them apart with
    // `quoting=csv.QUOTE_NOTNULL` (3.12).
    static func appendCSVField(_ text: String, to out: inout [UInt8]) {
        guard text.utf8.contains(where: { $0 == 0x2C || $0 == 0x22 || $0 == 0x0A || $0 == 0x0D }) else {
            return out.append(contentsOf: text.utf8)
        }
        out.append(0x22)
        for byte in text.utf8 {
            out.append(byte)
            if byte == 0x22 { out.append(0x22) }
        }
        out.append(0x22)
    }

    /// Appends a cell: nil as an empty field, the empty string as `""`, a number's digits, other text quoted when
    /// it must be.
    static func appendCSVCell(_ cell: Cell, to out: inout [UInt8]) {
        switch cell {
        case .null: break
        case .int(let value): Cell.appendDecimal(value, to: &out)
        case .text(let text) where text.isEmpty: out.append(contentsOf: "\"\"".utf8)
        case .text(let text): appendCSVField(text, to: &out)
        default: appendCSVField(cell.plain, to: &out)
        }
    }
}

/// A row's column names, quoted once as JSON keys (`"name":` and `"name": `, with the separator before each key
/// after the first), so that a streamed row does not quote its keys again.
final class ColumnKeys {
    let names: [String]
    let compact: [[UInt8]]
    let compactAfterFirst: [[UInt8]]
    let spaced: [[UInt8]]
    let spacedAfterFirst: [[UInt8]]

    init(_ names: [String]) {
        self.names = names
        let quoted = names.map(Cell.quote)
        compact = quoted.map { Array(($0 + ":").utf8) }
        compactAfterFirst = quoted.map { Array(("," + $0 + ":").utf8) }
        spaced = quoted.map { Array(($0 + ": ").utf8) }
        spacedAfterFirst = quoted.map { Array((", " + $0 + ": ").utf8) }
    }
}

/// Dates of the Gregorian calendar as UTC text (`YYYY-MM-DDTHH:MM:SSZ`) and back, for years 1600 to 9999, without
/// a formatter: a date formatter made per cell took two thirds of an import's time. Other years are left to
/// Foundation's formatter (nil here), whose calendar decides what they mean.
enum CivilTime {
    static let years = 1_600...9_999

    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's `days_from_civil`).
    static func days(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date `days` from 1970-01-01 (`civil_from_days`).
    static func date(days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// `seconds` (whole) as `YYYY-MM-DDTHH:MM:SSZ`; nil outside ``years``.
    static func text(ofSecondsSince1970 seconds: Double) -> String? {
        guard seconds.isFinite, seconds.rounded(.down) == seconds, abs(seconds) < 1e12 else { return nil }
        let whole = Int(seconds)
        let days = whole >= 0 ? whole / 86_400 : -((-whole + 86_399) / 86_400)
        let inDay = whole - days * 86_400
        let (year, month, day) = date(days: days)
        guard years.contains(year) else { return nil }
        var out = [UInt8](repeating: 0, count: 20)
        func put(_ value: Int, _ digits: Int, at offset: Int) {
            var value = value
            for index in stride(from: offset + digits - 1, through: offset, by: -1) {
                out[index] = UInt8(ascii: "0") + UInt8(value % 10)
                value /= 10
            }
        }
        put(year, 4, at: 0)
        put(month, 2, at: 5)
        put(day, 2, at: 8)
        put(inDay / 3_600, 2, at: 11)
        put(inDay / 60 % 60, 2, at: 14)
        put(inDay % 60, 2, at: 17)
        for (offset, byte) in [(4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":"), (19, "Z")]
            as [(Int, Unicode.Scalar)]
        {
            out[offset] = UInt8(ascii: byte)
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The whole seconds since 1970 of `YYYY-MM-DDTHH:MM:SSZ` (a valid date and time); nil for any other text and
    /// outside ``years``.
    static func secondsSince1970(of text: String) -> Int64? {
        var text = text
        return text.withUTF8 { bytes -> Int64? in
            guard bytes.count == 20, bytes[19] == UInt8(ascii: "Z") else { return nil }
            return secondsSince1970(dateAndTime: UnsafeBufferPointer(rebasing: bytes[0..<19]))
        }
    }

    /// The whole seconds since 1970 of `YYYY-MM-DDTHH:MM:SS` (19 bytes, UTC), as ``secondsSince1970(of:)``.
    static func secondsSince1970(dateAndTime bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard bytes.count == 19, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
            bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":")
        else { return nil }
        func number(_ offset: Int, _ digits: Int) -> Int? {
            var value = 0
            for index in offset..<(offset + digits) {
                let digit = Int(bytes[index]) - 48
                guard (0...9).contains(digit) else { return nil }
                value = value * 10 + digit
            }
            return value
        }
        guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
            let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
            years.contains(year), (1...12).contains(month), hour < 24, minute < 60, second < 60
        else { return nil }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let lengths = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...lengths[month - 1]).contains(day) else { return nil }
        return Int64(days(year: year, month: month, day: day)) * 86_400 + Int64(hour * 3_600 + minute * 60 + second)
    }
}

/// A number as exactly as its decimal text gives it: a whole part and the digits of its fraction, moved between the
/// epochs (1970 and 2001, how dates are stored) in integers rather than `Decimal` arithmetic.
struct ExactSeconds {
    /// Seconds from 1970 to 2001.
    static let offset: Int64 = 978_307_200

    /// The whole part, rounded down (negative numbers have a whole part below them and a fraction above).
    var whole: Int64
    /// The fraction's digits (ASCII), no trailing zeros; empty for a whole number.
    var fraction: [UInt8]

    /// A double's description (`-12.25`, `785212161.123456`, `1e-05`); nil for text beyond 15 whole digits.
    init?(description: String) {
        var bytes = Array(description.utf8)[...]
        let negative = bytes.first == UInt8(ascii: "-")
        if negative { bytes = bytes.dropFirst() }
        var exponent = 0
        if let e = bytes.firstIndex(where: { $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E") }) {
            guard let value = Int(String(decoding: bytes[(e + 1)...], as: UTF8.self)) else { return nil }
            exponent = value
            bytes = bytes[..<e]
        }
        let point = bytes.firstIndex(of: UInt8(ascii: ".")) ?? bytes.endIndex
        let digits = Array(bytes[..<point]) + Array(bytes[point...].dropFirst())
        guard !digits.isEmpty, digits.allSatisfy({ (48...57).contains($0) }) else { return nil }
        let wholeCount = (point - bytes.startIndex) + exponent
        let zeros = [UInt8](repeating: 48, count: max(0, max(wholeCount - digits.count, -wholeCount)))
        let wholeDigits = wholeCount <= 0 ? [] : Array((digits + zeros).prefix(wholeCount))
        var fraction = wholeCount <= 0 ? zeros + digits : Array(digits.dropFirst(wholeCount))
        while fraction.last == 48 { fraction.removeLast() }
        let significant = wholeDigits.drop { $0 == 48 }
        guard significant.count <= 15 else { return nil }
        let magnitude = significant.reduce(Int64(0)) { $0 * 10 + Int64($1 - 48) }
        if !negative || fraction.isEmpty {
            whole = negative ? -magnitude : magnitude
            self.fraction = fraction
        } else {
            whole = -magnitude - 1
            self.fraction = Self.complement(fraction)
        }
    }

    init(whole: Int64, fraction: [UInt8]) {
        self.whole = whole
        self.fraction = fraction
    }

    /// The same number counted from 1970 (a stored date's seconds are from 2001).
    var since1970: ExactSeconds { ExactSeconds(whole: whole + Self.offset, fraction: fraction) }

    /// The seconds since 2001 of `wholeSince1970` and a fraction's `digits` (ASCII), as the double nearest to them.
    static func stored(wholeSince1970: Int64, fraction digits: [UInt8]) -> Double? {
        let whole = wholeSince1970 - offset
        var digits = digits
        while digits.last == 48 { digits.removeLast() }
        if digits.isEmpty { return Double(whole) }
        if whole >= 0 { return Double("\(whole)." + String(decoding: digits, as: UTF8.self)) }
        // whole + 0.d = -((-whole - 1) + (1 - 0.d))
        return Double("-\(-whole - 1)." + String(decoding: complement(digits), as: UTF8.self))
    }

    /// The digits of 1 - 0.d (d without trailing zeros, not all zeros), without trailing zeros: 10^n - d digit by
    /// digit, 9 - each digit and 10 - the last (which is not 0, so nothing carries).
    static func complement(_ digits: [UInt8]) -> [UInt8] {
        var result = digits.map { 48 + 9 - ($0 - 48) }
        result[result.count - 1] += 1
        while result.last == 48 { result.removeLast() }
        return result
    }
}
