import Foundation

/// The order-preserving encoding of attribute values as LMDB index keys.
///
/// Comparing two encoded keys bytewise orders them as their values: a tag byte first (null sorts first), then
/// integers sign-flipped big-endian, doubles by the IEEE total-order transform (`-0.0` folded into `0.0`, every NaN
/// into one NaN, after `+infinity`), dates as doubles, strings as the UTF-8 bytes of their NFC form (a
/// case-insensitive index stores the folded form), binary data as its bytes, UUIDs as their 16 bytes: the order and
/// equality of ``ValueSemantics``. A key longer than LMDB's 511-byte limit is cut: lookups through it re-check the
/// record.
///
/// Stores written before keys were canonical (``currentFormat``) have their indexes rebuilt when opened.
enum IndexKey {
    static let nullTag: UInt8 = 0x00
    static let valueTag: UInt8 = 0x01
    /// The index key format: 2 since strings are keyed by their NFC form and NaN by one pattern.
    static let currentFormat: UInt32 = 2

    /// Encodes `value` into `buffer` (emptied first).
    /// - Returns: Whether the key was cut to `maxLength` and so no longer identifies the value exactly.
    @discardableResult
    static func encode(
        _ value: Value, caseInsensitive: Bool, maxLength: Int = 511, into buffer: inout [UInt8]
    )
        -> Bool
    {
        buffer.removeAll(keepingCapacity: true)
        switch value {
        case .null:
            buffer.append(nullTag)
            return false
        case .bool(let v): buffer.append(valueTag); buffer.append(v ? 1 : 0)
        case .int(let v): buffer.append(valueTag); appendBigEndian(UInt64(bitPattern: v) ^ (1 << 63), &buffer)
        case .double(let v): buffer.append(valueTag); appendBigEndian(orderedBits(v), &buffer)
        case .date(let v):
            buffer.append(valueTag); appendBigEndian(orderedBits(v.timeIntervalSinceReferenceDate), &buffer)
        case .decimal(let v):
            buffer.append(valueTag); appendBigEndian(orderedBits(NSDecimalNumber(decimal: v).doubleValue), &buffer)
            return true  // a double approximates the decimal: equal keys must be re-checked
        case .string(let v):
            buffer.append(valueTag)
            buffer.append(contentsOf: caseInsensitive ? Array(fold(v).utf8) : Array(v.canonicalForm.utf8))
        case .data(let v): buffer.append(valueTag); buffer.append(contentsOf: v)
        case .uuid(let v):
            buffer.append(valueTag)
            withUnsafeBytes(of: v.uuid) { buffer.append(contentsOf: $0) }
        }
        if buffer.count > maxLength {
            buffer.removeLast(buffer.count - maxLength)
            return true
        }
        return false
    }

    /// Encodes `value` as a new array.
    static func encode(_ value: Value, caseInsensitive: Bool) -> [UInt8] {
        var buffer: [UInt8] = []
        encode(value, caseInsensitive: caseInsensitive, into: &buffer)
        return buffer
    }

    /// The case-, diacritic- and width-insensitive canonical form of a string (not `String.Comparator`, which traps
    /// on Linux).
    static func fold(_ string: String) -> String { ValueSemantics.folded(string) }

    /// The IEEE total-order transform: bit patterns that compare as unsigned integers like the doubles do.
    static func orderedBits(_ value: Double) -> UInt64 {
        let bits = ValueSemantics.canonical(value).bitPattern
        return bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63)
    }

    static func appendBigEndian(_ value: UInt64, _ buffer: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { buffer.append(contentsOf: $0) }
    }

    /// The 8-byte big-endian key of a primary key.
    static func primaryKey(_ key: UInt64) -> [UInt8] {
        withUnsafeBytes(of: key.bigEndian) { Array($0) }
    }

    /// `p42` for 8 bytes holding a primary key, else what the bytes are (for findings about damaged entries).
    static func describe(primaryKey bytes: UnsafeRawBufferPointer) -> String {
        guard bytes.count == 8 else { return "a key of \(bytes.count) bytes" }
        return "p\(UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self)))"
    }

    /// Reads a primary key from 8 big-endian bytes.
    static func primaryKey(from bytes: UnsafeRawBufferPointer) throws -> UInt64 {
        guard bytes.count == 8 else {
            throw EntityStoreError(.corruptData, "a primary key of \(bytes.count) bytes, expected 8")
        }
        return UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self))
    }
}
