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

    init(_ value: Value) {
        switch value {
        case .null: self = .null
        case .bool(let v): self = .bool(v)
        case .int(let v): self = .int(v)
        case .double(let v): self = v.isFinite ? .double(v) : .text("\(v)")
        case .string(let v): self = .text(v)
        case .date(let v): self = .text(Cell.iso8601(v))
        case .data(let v): self = .text(Data(v).base64EncodedString())
        case .uuid(let v): self = .text(v.uuidString)
        // A string: as a JSON number a reader would parse it into a double and lose digits.
        case .decimal(let v): self = .text("\(v)")
        }
    }

    /// ISO 8601 in UTC with every fractional digit the date holds: the shortest decimal that reads back as the
    /// same `Double` of seconds since 1970 (`2026-11-30T16:16:01.123456Z`; no fraction for whole seconds).
    static func iso8601(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970
        guard seconds.isFinite else { return "\(seconds)" }
        let whole = seconds.rounded(.down)
        let base = Date(timeIntervalSince1970: whole).formatted(.iso8601)
        // The fraction, exactly, from the shortest form of the seconds (`Double.description` round-trips).
        guard whole != seconds, let exact = Decimal(string: "\(seconds)"), let floor = Decimal(string: "\(whole)")
        else { return base }
        let fraction = "\(exact - floor)"
        guard fraction.hasPrefix("0."), base.hasSuffix("Z") else { return base }
        return String(base.dropLast()) + fraction.dropFirst() + "Z"
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
        }
    }

    var json: String {
        switch self {
        case .text(let s): Cell.quote(s)
        case .int(let v): "\(v)"
        case .double(let v): "\(v)"
        case .bool(let v): v ? "true" : "false"
        case .null: "null"
        }
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

    /// The cells `text` takes in a terminal.
    static func displayWidth(_ text: String) -> Int { text.reduce(0) { $0 + displayWidth($1) } }

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

    static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}

/// Rows with named columns, rendered in any format.
struct Table {
    var columns: [String]
    var rows: [[Cell]] = []
    /// The transaction the snapshot read, shown with the table and in JSON.
    var transaction: Int?

    func render(_ format: OutputFormat, color: Bool) -> String {
        switch format {
        case .ndjson:
            return rows.map { row in
                "{" + zip(columns, row).map { Cell.quote($0) + ":" + $1.json }.joined(separator: ",") + "}\n"
            }.joined()
        case .json:
            let objects = rows.map { row in
                "  {" + zip(columns, row).map { Cell.quote($0) + ": " + $1.json }.joined(separator: ", ") + "}"
            }
            let array = objects.isEmpty ? "[]" : "[\n" + objects.joined(separator: ",\n") + "\n]"
            if let transaction { return "{\"transaction\": \(transaction), \"rows\": \(array)}\n" }
            return array + "\n"
        case .csv:
            // RFC 4180 with LF line ends (which Python's csv and sqlite3 read alike). Quoted when the text holds a comma, a quote, a CR or an LF (tested on bytes: "\r\n" is
            // one Character, equal to neither). Nil is an empty field, an empty string a quoted one (`""`), as in
            // PostgreSQL's CSV: Python reads them apart with `quoting=csv.QUOTE_NOTNULL` (3.12).
            func field(_ text: String) -> String {
                text.utf8.contains(where: { $0 == 0x2C || $0 == 0x22 || $0 == 0x0A || $0 == 0x0D })
                    ? "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : text
            }
            func cell(_ cell: Cell) -> String {
                switch cell {
                case .null: ""
                case .text(let text) where text.isEmpty: "\"\""
                default: field(cell.plain)
                }
            }
            return
                ([columns.map(field).joined(separator: ",")]
                + rows.map { $0.map(cell).joined(separator: ",") })
                .joined(separator: "\n") + "\n"
        case .table:
            let texts = rows.map { $0.map(\.visibleText) }
            let names = columns.map(Cell.visible)
            // Columns are measured in terminal cells (a CJK character or an emoji takes two, a combining mark none).
            var widths = names.map(Cell.displayWidth)
            for row in texts {
                for (i, text) in row.enumerated() { widths[i] = max(widths[i], min(Cell.displayWidth(text), 60)) }
            }
            func line(_ cells: [String]) -> String {
                zip(cells, widths).map { text, width in
                    let cut = Cell.displayWidth(text) > 60 ? Cell.prefix(text, width: 59) + "…" : text
                    return cut + String(repeating: " ", count: max(0, width - Cell.displayWidth(cut)))
                }.joined(separator: "  ").trimmingCharacters(in: .whitespaces)
            }
            let header = line(names)
            var out = (color ? "\u{1B}[1m\(header)\u{1B}[0m" : header) + "\n"
            for row in texts { out += line(row) + "\n" }
            if let transaction {
                out += "(\(rows.count) row\(rows.count == 1 ? "" : "s"), snapshot at transaction \(transaction))\n"
            }
            return out
        }
    }
}
