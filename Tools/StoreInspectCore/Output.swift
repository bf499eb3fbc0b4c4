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
        guard let exact = Decimal(string: "\(stored)").map({ $0 + referenceOffset }) else {
            // Beyond Decimal's range (no calendar date either): the seconds as they are.
            return "\(date.timeIntervalSince1970)"
        }
        var whole = Decimal()
        var value = exact
        NSDecimalRound(&whole, &value, 0, .down)
        let base = Date(timeIntervalSince1970: NSDecimalNumber(decimal: whole).doubleValue).formatted(.iso8601)
        let fraction = "\(exact - whole)"
        guard fraction.hasPrefix("0."), base.hasSuffix("Z") else { return base }
        return String(base.dropLast()) + fraction.dropFirst() + "Z"
    }

    /// The date ``iso8601(_:)`` wrote (`YYYY-MM-DDTHH:MM:SS[.fraction]Z`), exactly; nil for any other text.
    static func parseExactDate(_ text: String) -> Date? {
        guard text.hasSuffix("Z"), text.count >= 20 else { return nil }
        let body = text.dropLast()
        let dot = body.firstIndex(of: ".")
        let wholeText = String(body[..<(dot ?? body.endIndex)]) + "Z"
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
        }
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
