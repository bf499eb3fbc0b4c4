import Foundation

/// The binary record format: a compact, versioned encoding of an object's attributes.
///
/// ```
/// byte      format version (2)
/// varint    row version (raised on every save of the object: optimistic locking)
/// varint    attribute count n (must equal the entity's)
/// n/8 bytes null bitmap (bit set: the attribute is nil)
/// the non-nil attributes of fixed-size types (bool, int64, double, date, uuid), in schema order, then those of
/// variable-size types (string, binary, decimal), in schema order; each a type tag byte, then the payload
///   bool 1 byte · int64 zigzag varint · double and date 8 bytes little-endian · uuid 16 bytes
///   string, binary and decimal (as text): varint length, then the bytes
/// ```
///
/// Scalars first: a scan's ``RecordFilter`` tests numbers, dates and booleans, and finds them in the record's first
/// bytes (usually one cache line) instead of past every string and blob declared before them. At a million records
/// a scan is bound by the memory it touches, not by instructions: an offset table, tried first, cost more in bytes
/// than it saved in parsing. Format 1, written before, holds every field in schema order; it is still read, and a
/// record is rewritten in format 2 when it is next saved.
///
/// The decoder checks every length, tag and count against the entity and throws ``EntityStoreError`` with code
/// ``EntityStoreError/Code/corruptData`` on bad bytes; it never traps.
enum RecordCodec {
    static let formatVersion: UInt8 = 2
    /// The format of records written before scalars came first: every field in schema order.
    static let formatInSchemaOrder: UInt8 = 1

    /// Whether values of `type` are written after the fixed-size ones.
    @inline(__always)
    static func isVariableSize(_ type: AttributeType) -> Bool {
        switch type {
        case .string, .binary, .decimal: true
        case .bool, .int64, .double, .date, .uuid: false
        }
    }

    /// Encodes the values of an object of `entity` into `buffer` (emptied first).
    ///
    /// The size is worked out first and the bytes written through one pointer: no capacity check per byte, and the
    /// buffer (reused from record to record by a save) is not reallocated.
    static func encode(_ values: [Value], rowVersion: UInt64, into buffer: inout [UInt8]) {
        let bitmapBytes = (values.count + 7) / 8
        var size = 1 + varintSize(rowVersion) + varintSize(UInt64(values.count)) + bitmapBytes
        var decimals: [String] = []
        // The variable-size values' positions below 64, so that the second pass visits only them.
        var variable: UInt64 = 0
        var variableBeyond64 = false
        for (i, value) in values.enumerated() {
            size += fieldSize(value, decimals: &decimals)
            if let type = value.type, isVariableSize(type) {
                if i < 64 { variable |= 1 &<< UInt64(i) } else { variableBeyond64 = true }
            }
        }
        if buffer.count > size {
            buffer.removeLast(buffer.count - size)
        } else if buffer.count < size {
            buffer.append(contentsOf: repeatElement(0, count: size - buffer.count))
        }
        buffer.withUnsafeMutableBytes { out in
            // A writer value rather than nested functions over a captured offset: passed as closures, those made
            // the offset a boxed variable checked for exclusive access at run time on every byte.
            var w = RecordWriter(out: out)
            w.put(formatVersion)
            w.varint(rowVersion)
            w.varint(UInt64(values.count))
            let bitmapStart = w.o
            for _ in 0..<bitmapBytes { w.put(0) }
            for i in values.indices {
                guard let type = values[i].type else {
                    out[bitmapStart + i / 8] |= 1 << UInt8(i % 8)
                    continue
                }
                if i < 64 ? variable & (1 &<< UInt64(i)) == 0 : !isVariableSize(type) {
                    w.field(values[i], decimal: nil)
                }
            }
            // Then the strings, data and decimals, in schema order (the decimals' texts were made in that order).
            var decimal = 0
            while variable != 0 {
                let i = variable.trailingZeroBitCount
                variable &= variable &- 1
                w.field(values[i], decimal: decimalText(values[i], decimals, &decimal))
            }
            if variableBeyond64 {
                for i in 64..<values.count {
                    guard let type = values[i].type, isVariableSize(type) else { continue }
                    w.field(values[i], decimal: decimalText(values[i], decimals, &decimal))
                }
            }
            let o = w.o
            assert(o == size, "the record's size was worked out as \(size), \(o) bytes were written")
        }
    }

    /// A decimal's text, the next of `decimals` (made in schema order by ``fieldSize(_:decimals:)``); nil for other
    /// values.
    @inline(__always)
    private static func decimalText(_ value: Value, _ decimals: [String], _ next: inout Int) -> String? {
        guard case .decimal = value else { return nil }
        defer { next += 1 }
        return decimals[next]
    }

    /// The bytes of `value`'s field (tag and payload; none when nil). A decimal's text is made here and appended
    /// to `decimals` for the writer.
    @inline(__always)
    private static func fieldSize(_ value: Value, decimals: inout [String]) -> Int {
        switch value {
        case .null: return 0
        case .bool: return 2
        case .int(let v): return 1 + varintSize(zigzag(v))
        case .double, .date: return 9
        case .string(let v): return 1 + varintSize(UInt64(v.utf8.count)) + v.utf8.count
        case .data(let v): return 1 + varintSize(UInt64(v.count)) + v.count
        case .uuid: return 17
        case .decimal(let v):
            let text = v.description
            decimals.append(text)
            return 1 + varintSize(UInt64(text.utf8.count)) + text.utf8.count
        }
    }

    /// Appends a non-nil value's field as a record holds it: its type tag, then its payload (the history's values).
    static func appendField(_ value: Value, to out: inout [UInt8]) {
        var decimals: [String] = []
        let size = fieldSize(value, decimals: &decimals)
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: size))
        out.withUnsafeMutableBytes { all in
            var w = RecordWriter(out: UnsafeMutableRawBufferPointer(rebasing: all[start...]))
            w.field(value, decimal: decimals.first)
        }
    }

    /// ZigZag: small negative integers take few varint bytes too.
    static func zigzag(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }

    /// The bytes ``appendVarint(_:_:)`` writes for `value`.
    static func varintSize(_ value: UInt64) -> Int {
        var size = 1
        var rest = value >> 7
        while rest != 0 {
            size += 1
            rest >>= 7
        }
        return size
    }

    /// Decodes a record of `entity`.
    /// - Returns: The values in schema order and the row version.
    /// With `decimalsAsText`, a decimal comes back as the text it is stored as (`.string`, the decimal's
    /// `description`, checked as decode checks it), for tools that print it: parsing it only to print it
    /// again cost more than the rest of a row.
    static func decode(
        _ bytes: UnsafeRawBufferPointer, entity: Entity, key: UInt64? = nil, decimalsAsText: Bool = false
    ) throws -> (values: [Value], rowVersion: UInt64) {
        try decode(bytes, entity.name, entity.attributes, key: key, decimalsAsText: decimalsAsText)
    }

    /// ``decode(_:entity:key:decimalsAsText:)`` for a managed object's shared entity (see below).
    @inline(__always)
    static func decode(
        _ bytes: UnsafeRawBufferPointer, _ entity: EntityBox, key: UInt64?
    ) throws -> (values: [Value], rowVersion: UInt64) {
        try decode(bytes, entity.entity.name, entity.entity.attributes, key: key)
    }

    /// ``decode(_:entity:key:decimalsAsText:)`` given the entity's name and attributes: a managed object passes
    /// them from its shared entity, where passing the `Entity` itself copied it (retaining and releasing each of
    /// its strings and arrays) on every record an object decoded.
    @inline(__always)
    static func decode(
        _ bytes: UnsafeRawBufferPointer, _ entityName: String, _ attributes: [Attribute], key: UInt64?,
        decimalsAsText: Bool = false
    ) throws -> (values: [Value], rowVersion: UInt64) {
        var values: [Value] = []
        values.reserveCapacity(attributes.count)
        let rowVersion = try forEachField(bytes, entityName, attributes, key: key) { i, type, reader, attributes in
            guard let type else { return values.append(.null) }
            if decimalsAsText && type == .decimal {
                let raw = try reader.bytes(try reader.length("'\(attributes[i].name)'"), "'\(attributes[i].name)'")
                guard ByteReader.isPlainDecimal(raw) else {
                    throw reader.corrupt("decimal '\(attributes[i].name)' does not parse")
                }
                return values.append(.string(String(decoding: raw, as: UTF8.self)))
            }
            values.append(try reader.value(of: type, attributes[i].name))
        }
        return (values, rowVersion)
    }

    /// Decodes only the attributes in `needed` (the others are `.null`), skipping the rest without copying; the
    /// same checks as ``decode(_:entity:)`` apply to every byte.
    static func decode(
        _ bytes: UnsafeRawBufferPointer, entity: Entity, needed: [Bool], key: UInt64? = nil
    ) throws -> [Value] {
        var values: [Value] = []
        try decode(bytes, entity: entity, needed: needed, into: &values, key: key)
        return values
    }

    /// Decodes only the attributes in `needed` into `values` (reused from record to record by a scan, so that no
    /// array is allocated per record).
    static func decode(
        _ bytes: UnsafeRawBufferPointer, entity: Entity, needed: [Bool], into values: inout [Value], key: UInt64? = nil
    ) throws {
        if values.count == entity.attributes.count {
            for i in values.indices where needed[i] { values[i] = .null }
        } else {
            values = [Value](repeating: .null, count: entity.attributes.count)
        }
        _ = try forEachField(bytes, entity.name, entity.attributes, key: key, inSchemaOrder: false) {
            i, type, reader, attributes in
            guard let type else { return }
            if needed[i] {
                values[i] = try reader.value(of: type, attributes[i].name)
            } else {
                try reader.skip(type, attributes[i].name)
            }
        }
    }

    /// A record read from the store, checked as decoding would check it (the quick check of a format 2 record, else
    /// the full one) and copied out of the map: what an object keeps, to decode when its values are first used.
    /// - Returns: The bytes and the row version.
    static func checkedCopy(
        _ bytes: UnsafeRawBufferPointer, _ entity: EntityBox, key: UInt64
    ) throws -> (bytes: [UInt8], rowVersion: UInt64) {
        let rowVersion =
            try quickValidate(bytes, entity.recordLayout) ?? validate(bytes, entity: entity.entity, key: key)
        return (Array(bytes), rowVersion)
    }

    /// One fixed-size attribute's value (bool, int64, double, date, uuid) read from a record without decoding the
    /// others: a format 2 record holds its fixed-size fields first, so only those before it are stepped over (their
    /// tags checked). Nil for a variable-size attribute or a record in schema order (format 1): decode the record.
    /// For a record already checked (``validate(_:entity:key:)``), as an object keeps one: this reads no further.
    /// Takes the entity's name and attributes rather than the `Entity` (see ``decode(_:_:_:key:decimalsAsText:)``).
    static func fixedSizeValue(
        at index: Int, _ bytes: UnsafeRawBufferPointer, _ entityName: String, _ attributes: [Attribute], key: UInt64?
    ) throws -> Value? {
        try attributes.withUnsafeBufferPointer { attributes in
            guard !isVariableSize(attributes[index].type) else { return nil }
            var reader = ByteReader(bytes: bytes, entity: entityName, key: key)
            let (_, bitmap, inSchemaOrder) = try readHeader(&reader, attributeCount: attributes.count)
            guard !inSchemaOrder else { return nil }
            for i in attributes.indices where !isVariableSize(attributes[i].type) {
                if bitmap[i / 8] & (1 << UInt8(i % 8)) != 0 {
                    if i == index { return .null }
                    continue
                }
                try readTag(i, &reader, attributes)
                if i == index { return try reader.value(of: attributes[i].type, attributes[i].name) }
                try reader.skip(attributes[i].type, attributes[i].name)
            }
            return nil
        }
    }

    /// Checks a record of `entity` as ``decode(_:entity:key:)`` would, without making its values: every check
    /// decode makes (format, count, tags, lengths, bools, UTF-8, decimals, trailing bytes) is made here, so a record
    /// that passes decodes without error.
    /// - Returns: The row version.
    static func validate(_ bytes: UnsafeRawBufferPointer, entity: Entity, key: UInt64? = nil) throws -> UInt64 {
        try forEachField(bytes, entity.name, entity.attributes, key: key, inSchemaOrder: false) {
            i, type, reader, attributes in
            switch type {
            case nil: return
            case .string?:
                let raw = try reader.bytes(try reader.length("'\(attributes[i].name)'"), "'\(attributes[i].name)'")
                guard ByteReader.isValidText(raw) else {
                    throw reader.corrupt("string '\(attributes[i].name)' is not valid UTF-8")
                }
            case .decimal?: _ = try reader.value(of: .decimal, attributes[i].name)
            case let type?: try reader.skip(type, attributes[i].name)
            }
        }
    }

    /// ``validate(_:entity:key:)`` for the common case, in one pass over the bytes with no error built: the row
    /// version of a well-formed format 2 record of the layout's entity, or `nil` for anything else (a format 1
    /// record, a decimal, any bad byte), which the caller then validates through the general path for its answer
    /// or its error. A fetch checks every record it returns, and the general path spent more per record than
    /// reading it from LMDB.
    static func quickValidate(_ bytes: UnsafeRawBufferPointer, _ layout: RecordLayout) -> UInt64? {
        guard layout.isQuick, let base = bytes.baseAddress else { return nil }
        let end = bytes.count
        var offset = 0
        /// A varint of at most nine bytes (63 bits, as the general path reads); longer ones take the general path.
        @inline(__always) func varint(_ offset: inout Int) -> UInt64? {
            let start = offset
            guard let value = RecordFilter.varint(base, end, &offset), offset &- start <= 9 else { return nil }
            return value
        }
        guard end > 0, base.load(as: UInt8.self) == formatVersion else { return nil }
        offset = 1
        guard let rowVersion = varint(&offset), varint(&offset) == UInt64(layout.count) else { return nil }
        let bitmap = offset
        offset += (layout.count + 7) / 8
        guard offset <= end else { return nil }
        for field in layout.fields {
            if base.load(fromByteOffset: bitmap &+ Int(field.nullByte), as: UInt8.self) & field.nullBit != 0 {
                continue
            }
            guard offset < end, base.load(fromByteOffset: offset, as: UInt8.self) == field.tag else { return nil }
            offset += 1
            switch field.kind {
            case .bool:
                guard offset < end, base.load(fromByteOffset: offset, as: UInt8.self) <= 1 else { return nil }
                offset += 1
            case .varint:
                guard varint(&offset) != nil else { return nil }
            case .fixed(let size):
                offset += size
                guard offset <= end else { return nil }
            case .text, .bytes:
                guard let length = varint(&offset), length <= UInt64(end - offset) else { return nil }
                let count = Int(length)
                if field.kind == .text,
                    !ByteReader.isValidText(UnsafeRawBufferPointer(start: base + offset, count: count))
                {
                    return nil
                }
                offset += count
            }
        }
        return offset == end ? rowVersion : nil
    }

    /// Walks a record's fields: the header and every type tag checked, `visit` called for each attribute with its
    /// type (nil when the value is null) to read or skip its bytes, and no byte left after the last. In schema order
    /// when `inSchemaOrder` (for a visitor that appends), else in the record's order (cheaper for format 2).
    /// `visit` names an attribute through the borrowed `attributes` buffer it is given: reaching the entity from the
    /// closure (even in an error message's autoclosure) copied the whole `Entity` per field.
    /// The one place that knows a record's layout for decoding, partial decoding and validation.
    /// - Returns: The row version.
    @inline(__always)
    private static func forEachField(
        _ bytes: UnsafeRawBufferPointer, _ entityName: String, _ attributes: [Attribute], key: UInt64?,
        inSchemaOrder: Bool = true,
        _ visit:
            (
                _ index: Int, _ type: AttributeType?, _ reader: inout ByteReader,
                _ attributes: UnsafeBufferPointer<Attribute>
            ) throws -> Void
    ) throws -> UInt64 {
        var reader = ByteReader(bytes: bytes, entity: entityName, key: key)
        let (rowVersion, bitmap, storedInSchemaOrder) = try readHeader(&reader, attributeCount: attributes.count)
        // Through a borrowed buffer: iterating the array would copy every Attribute (and retain its name).
        try attributes.withUnsafeBufferPointer { attributes in
            if !storedInSchemaOrder && !inSchemaOrder {
                // Format 2 in the record's order: the fixed-size attributes, then the variable-size ones.
                for pass in 0..<2 {
                    for i in attributes.indices where isVariableSize(attributes[i].type) == (pass == 1) {
                        if bitmap[i / 8] & (1 << UInt8(i % 8)) != 0 {
                            try visit(i, nil, &reader, attributes)
                            continue
                        }
                        try readTag(i, &reader, attributes)
                        try visit(i, attributes[i].type, &reader, attributes)
                    }
                }
                return
            }
            // Format 2 in schema order is read through two cursors: one in the fixed-size fields, one in the
            // variable-size fields after them (found by skipping the fixed-size ones first). The reader holds the
            // cursor in use; `other` the other one, swapped in for each variable-size attribute.
            let twoCursors = !storedInSchemaOrder
            var other = 0
            if twoCursors {
                let fieldsStart = reader.offset
                for i in attributes.indices where !isVariableSize(attributes[i].type) {
                    if bitmap[i / 8] & (1 << UInt8(i % 8)) != 0 { continue }
                    try readTag(i, &reader, attributes)
                    try reader.skip(attributes[i].type, attributes[i].name)
                }
                other = reader.offset
                reader.offset = fieldsStart
            }
            for i in attributes.indices {
                if bitmap[i / 8] & (1 << UInt8(i % 8)) != 0 {
                    try visit(i, nil, &reader, attributes)
                    continue
                }
                let type = attributes[i].type
                let swaps = twoCursors && isVariableSize(type)
                if swaps { swap(&reader.offset, &other) }
                try readTag(i, &reader, attributes)
                try visit(i, type, &reader, attributes)
                if swaps { swap(&reader.offset, &other) }
            }
            // The fixed-size cursor ends where the variable-size fields begin; the reader ends on the last field.
            if twoCursors { swap(&reader.offset, &other) }
        }
        guard reader.offset == bytes.count else {
            throw reader.corrupt("\(bytes.count - reader.offset) bytes after the last attribute")
        }
        return rowVersion
    }

    /// Reads attribute `i`'s type tag and checks it against the attribute's type.
    @inline(__always)
    private static func readTag(
        _ i: Int, _ reader: inout ByteReader, _ attributes: UnsafeBufferPointer<Attribute>
    ) throws {
        let found = try reader.byte("type tag of '\(attributes[i].name)'")
        guard found == tag(of: attributes[i].type) else {
            throw reader.corrupt(
                "type tag \(found) for '\(attributes[i].name)', \(attributes[i].type.withArticle)")
        }
    }

    /// Reads a record's format version: 2, or 1 (fields in schema order); anything else is corrupt.
    private static func readVersion(_ reader: inout ByteReader) throws -> UInt8 {
        let version = try reader.byte("format version")
        guard version == formatVersion || version == formatInSchemaOrder else {
            throw reader.corrupt("record format version \(version) is not \(formatVersion)")
        }
        return version
    }

    /// Reads a record's header: the format version (checked), the row version, the attribute count (checked against
    /// the entity) and the null bitmap.
    private static func readHeader(
        _ reader: inout ByteReader, attributeCount: Int
    ) throws -> (rowVersion: UInt64, bitmap: UnsafeRawBufferPointer, inSchemaOrder: Bool) {
        let version = try readVersion(&reader)
        let rowVersion = try reader.varint("row version")
        let count = try reader.varint("attribute count")
        guard count == UInt64(attributeCount) else {
            throw reader.corrupt("the record holds \(count) attributes, the entity has \(attributeCount)")
        }
        let bitmap = try reader.bytes((attributeCount + 7) / 8, "null bitmap")
        return (rowVersion, bitmap, version == formatInSchemaOrder)
    }

    /// Reads only the row version of a record.
    static func rowVersion(_ bytes: UnsafeRawBufferPointer, entity: String) throws -> UInt64 {
        var reader = ByteReader(bytes: bytes, entity: entity)
        _ = try readVersion(&reader)
        return try reader.varint("row version")
    }

    static func tag(of type: AttributeType) -> UInt8 {
        switch type {
        case .bool: 1
        case .int64: 2
        case .double: 3
        case .string: 4
        case .date: 5
        case .binary: 6
        case .uuid: 7
        case .decimal: 8
        }
    }

    static func appendVarint(_ value: UInt64, _ buffer: inout [UInt8]) {
        var rest = value
        while rest >= 0x80 {
            buffer.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        buffer.append(UInt8(rest))
    }

    static func appendLittleEndian(_ value: UInt64, _ buffer: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { buffer.append(contentsOf: $0) }
    }
}

/// A bounds-checked reader over stored bytes; every failure names what it was reading.
struct ByteReader {
    /// The string `raw` holds, or `nil` when it is not valid UTF-8. ASCII (most stored text) is checked eight bytes
    /// at a time; other text is validated here, sequence by sequence (the standard library's
    /// `String(validating:as:)` is generic and cost more than the rest of a record's decoding). Valid bytes are then
    /// taken as they are.
    static func text(_ raw: UnsafeRawBufferPointer) -> String? {
        guard isValidText(raw) else { return nil }
        return String(decoding: raw, as: UTF8.self)
    }

    /// Whether `raw` is a plain decimal number as `Decimal.description` writes one: an optional `-`, digits
    /// without a leading zero (but for a lone `0`), and an optional fraction of at least one digit.
    static func isPlainDecimal(_ raw: UnsafeRawBufferPointer) -> Bool {
        var i = raw.first == UInt8(ascii: "-") ? 1 : 0
        let digitsStart = i
        while i < raw.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(raw[i]) { i += 1 }
        let whole = i - digitsStart
        guard whole > 0, whole == 1 || raw[digitsStart] != UInt8(ascii: "0") else { return false }
        if i == raw.count { return true }
        guard raw[i] == UInt8(ascii: "."), i + 1 < raw.count else { return false }
        i += 1
        while i < raw.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(raw[i]) { i += 1 }
        return i == raw.count
    }

    /// Whether `raw` is valid UTF-8: ASCII checked eight bytes at a time, anything else by ``isValidUTF8(_:)``.
    static func isValidText(_ raw: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        var high: UInt64 = 0
        while i + 8 <= raw.count {
            high |= raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < raw.count {
            high |= UInt64(raw[i])
            i += 1
        }
        return high & 0x8080_8080_8080_8080 == 0 || isValidUTF8(raw)
    }

    /// Whether `raw` is well-formed UTF-8 (Unicode 15, table 3-7): no overlong forms, no surrogates, nothing above
    /// U+10FFFF, no truncated sequence.
    static func isValidUTF8(_ raw: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        let count = raw.count
        while i < count {
            let lead = raw[i]
            if lead < 0x80 {
                i += 1
                continue
            }
            let length: Int
            var low: UInt8 = 0x80
            var high: UInt8 = 0xBF
            switch lead {
            case 0xC2...0xDF: length = 2
            case 0xE0:
                length = 3
                low = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED:
                length = 3
                high = 0x9F
            case 0xF0:
                length = 4
                low = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4:
                length = 4
                high = 0x8F
            default: return false
            }
            guard count - i >= length else { return false }
            let second = raw[i + 1]
            guard second >= low, second <= high else { return false }
            var k = 2
            while k < length {
                guard raw[i + k] & 0xC0 == 0x80 else { return false }
                k += 1
            }
            i += length
        }
        return true
    }

    let bytes: UnsafeRawBufferPointer
    let entity: String
    /// The record's primary key, when known: the error names the object.
    let key: UInt64?
    var offset = 0

    init(bytes: UnsafeRawBufferPointer, entity: String, key: UInt64? = nil) {
        self.bytes = bytes
        self.entity = entity
        self.key = key
    }

    func corrupt(_ message: String) -> EntityStoreError {
        guard let key else {
            return EntityStoreError(
                .corruptData, "corrupt record of \(entity) at byte \(offset): \(message)", entity: entity)
        }
        let id = ObjectID(entityName: entity, primaryKey: key)
        return EntityStoreError(
            .corruptData, "the record of \(id) is corrupt at byte \(offset): \(message)", entity: entity, objectID: id)
    }

    mutating func byte(_ what: @autoclosure () -> String) throws -> UInt8 {
        guard offset < bytes.count else { throw corrupt("the record ends before the \(what())") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func bytes(_ count: Int, _ what: @autoclosure () -> String) throws -> UnsafeRawBufferPointer {
        guard count >= 0, count <= bytes.count - offset else {
            throw corrupt("the \(what()) needs \(count) bytes, \(bytes.count - offset) remain")
        }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)])
    }

    mutating func varint(_ what: @autoclosure () -> String) throws -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let next = try byte(what())
            if shift == 63 && next > 1 { throw corrupt("the \(what()) overflows 64 bits") }
            result |= UInt64(next & 0x7F) << shift
            if next & 0x80 == 0 { return result }
            shift += 7
            if shift > 63 { throw corrupt("the \(what()) overflows 64 bits") }
        }
    }

    mutating func length(_ what: @autoclosure () -> String) throws -> Int {
        let length = try varint("length of \(what())")
        guard length <= UInt64(bytes.count - offset) else {
            throw corrupt("the length of \(what()) is \(length), \(bytes.count - offset) bytes remain")
        }
        return Int(length)
    }

    mutating func skip(_ type: AttributeType, _ name: @autoclosure () -> String) throws {
        switch type {
        case .bool:
            guard try byte("'\(name())'") <= 1 else { throw corrupt("bool '\(name())' is not 0 or 1") }
        case .int64: _ = try varint("'\(name())'")
        case .double, .date: _ = try bytes(8, "'\(name())'")
        case .uuid: _ = try bytes(16, "'\(name())'")
        case .string, .binary, .decimal: _ = try bytes(try length("'\(name())'"), "'\(name())'")
        }
    }

    mutating func value(of type: AttributeType, _ name: @autoclosure () -> String) throws -> Value {
        switch type {
        case .bool:
            let raw = try byte("'\(name())'")
            guard raw <= 1 else { throw corrupt("bool '\(name())' holds \(raw)") }
            return .bool(raw == 1)
        case .int64:
            let raw = try varint("'\(name())'")
            return .int(Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1))
        case .double:
            return .double(Double(bitPattern: try bytes(8, "'\(name())'").loadUnaligned(as: UInt64.self).littleEndian))
        case .date:
            let bits = try bytes(8, "'\(name())'").loadUnaligned(as: UInt64.self).littleEndian
            return .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: bits)))
        case .string:
            let raw = try bytes(try length("'\(name())'"), "'\(name())'")
            guard let text = ByteReader.text(raw) else {
                throw corrupt("string '\(name())' is not valid UTF-8")
            }
            return .string(text)
        case .binary:
            return .data(Array(try bytes(try length("'\(name())'"), "'\(name())'")))
        case .uuid:
            let raw = try bytes(16, "'\(name())'")
            var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: raw) }
            return .uuid(UUID(uuid: uuid))
        case .decimal:
            let raw = try bytes(try length("'\(name())'"), "'\(name())'")
            // Stored decimals are their `description`: plain digits. `Decimal(string:)` alone would take "12x95"
            // for 12.
            guard ByteReader.isPlainDecimal(raw), let text = ByteReader.text(raw), let decimal = Decimal(string: text)
            else { throw corrupt("decimal '\(name())' does not parse") }
            return .decimal(decimal)
        }
    }
}

/// Writes a record's bytes into space sized for them.
private struct RecordWriter {
    let out: UnsafeMutableRawBufferPointer
    var o = 0

    init(out: UnsafeMutableRawBufferPointer) { self.out = out }

    mutating func put(_ byte: UInt8) {
        out[o] = byte
        o += 1
    }

    /// Writes `value`'s field: its type tag, then its payload (`decimal` is a decimal's text).
    @inline(__always)
    mutating func field(_ value: Value, decimal: String?) {
        guard let type = value.type else { return }
        put(RecordCodec.tag(of: type))
        switch value {
        case .null: break
        case .bool(let v): put(v ? 1 : 0)
        case .int(let v): varint(RecordCodec.zigzag(v))
        case .double(let v): fixed64(v.bitPattern)
        case .date(let v): fixed64(v.timeIntervalSinceReferenceDate.bitPattern)
        case .string(let v): text(v)
        case .data(let v):
            varint(UInt64(v.count))
            v.withUnsafeBytes { bytes($0) }
        case .uuid(let v): withUnsafeBytes(of: v.uuid) { bytes($0) }
        case .decimal: text(decimal ?? "")
        }
    }

    mutating func varint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            put(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        put(UInt8(rest))
    }

    mutating func fixed64(_ value: UInt64) {
        out.storeBytes(of: value.littleEndian, toByteOffset: o, as: UInt64.self)
        o += 8
    }

    mutating func bytes(_ source: UnsafeRawBufferPointer) {
        if let base = source.baseAddress, !source.isEmpty {
            (out.baseAddress! + o).copyMemory(from: base, byteCount: source.count)
        }
        o += source.count
    }

    mutating func text(_ string: String) {
        var string = string
        string.withUTF8 { utf8 in
            varint(UInt64(utf8.count))
            bytes(UnsafeRawBufferPointer(utf8))
        }
    }
}

/// Where a format 2 record of an entity keeps its fields, for ``RecordCodec/quickValidate(_:_:)``: the attributes in
/// the record's order (fixed-size first), each with its type tag and how its payload is checked.
struct RecordLayout: Sendable {
    enum Kind: Equatable, Sendable {
        case bool, varint, text, bytes
        case fixed(Int)
    }

    let count: Int
    /// Each field's null bit (its byte in the bitmap and the bit's mask), type tag and payload.
    let fields: [(nullByte: Int32, nullBit: UInt8, tag: UInt8, kind: Kind)]
    /// Whether the quick check applies: an entity with decimals (checked as numbers) takes the general path.
    let isQuick: Bool

    init(_ entity: Entity) {
        let attributes = entity.attributes
        count = attributes.count
        var fields: [(nullByte: Int32, nullBit: UInt8, tag: UInt8, kind: Kind)] = []
        var quick = true
        for variable in [false, true] {
            for (i, attribute) in attributes.enumerated()
            where RecordCodec.isVariableSize(attribute.type) == variable {
                let kind: Kind
                switch attribute.type {
                case .bool: kind = .bool
                case .int64: kind = .varint
                case .double, .date: kind = .fixed(8)
                case .uuid: kind = .fixed(16)
                case .string: kind = .text
                case .binary: kind = .bytes
                case .decimal:
                    kind = .bytes
                    quick = false
                }
                fields.append((Int32(i / 8), 1 << UInt8(i % 8), RecordCodec.tag(of: attribute.type), kind))
            }
        }
        self.fields = fields
        isQuick = quick
    }
}
