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
    case raw(String)  // JSON text written as is (decimals)
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

    var plain: String {
        switch self {
        case .text(let s): s
        case .int(let v): "\(v)"
        case .double(let v): "\(v)"
        case .bool(let v): v ? "true" : "false"
        case .raw(let s): s
        case .null: ""
        }
    }

    var json: String {
        switch self {
        case .text(let s): Cell.quote(s)
        case .int(let v): "\(v)"
        case .double(let v): "\(v)"
        case .bool(let v): v ? "true" : "false"
        case .raw(let s): s
        case .null: "null"
        }
    }

    static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
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
            func shown(_ cell: Cell) -> String {
                if case .null = cell { return "nil" }
                return cell.plain.replacingOccurrences(of: "\n", with: "\\n")
            }
            let texts = rows.map { $0.map(shown) }
            var widths = columns.map(\.count)
            for row in texts { for (i, text) in row.enumerated() { widths[i] = max(widths[i], min(text.count, 60)) } }
            func line(_ cells: [String]) -> String {
                zip(cells, widths).map { text, width in
                    let cut = text.count > 60 ? String(text.prefix(59)) + "…" : text
                    return cut.padding(toLength: width, withPad: " ", startingAt: 0)
                }.joined(separator: "  ").trimmingCharacters(in: .whitespaces)
            }
            let header = line(columns)
            var out = (color ? "\u{1B}[1m\(header)\u{1B}[0m" : header) + "\n"
            for row in texts { out += line(row) + "\n" }
            if let transaction {
                out += "(\(rows.count) row\(rows.count == 1 ? "" : "s"), snapshot at transaction \(transaction))\n"
            }
            return out
        }
    }
}
