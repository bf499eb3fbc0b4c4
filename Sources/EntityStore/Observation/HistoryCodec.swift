import Foundation

/// The binary form of a history entry: one save's ``ChangeRecord``, written in the save's own write transaction.
///
/// ```
/// byte     format version (1)
/// varint   transaction number · 8 bytes date (LE double) · varint process ID · 16 bytes context ID
/// string   author ("" for none) · varint change count
/// per change: string entity · varint primary key · byte kind (0 insert, 1 update, 2 delete) · byte user-driven
///             varint n, n × string changed key
///             varint n, n × (string key, value) old values · varint n, n × (string key, value) new values
///             varint n, n × (string key, varint m, m × (string entity, varint key)) old relationships (an
///             update's: the targets it took out, since session 42; before, all of them; a delete's: all of them)
/// string = varint length + UTF-8; value = type tag (0 nil, else the record codec's tag) + the record payload
/// ```
///
/// New values are kept for updates only: an insert's values are in its record. An insert's changed keys (every
/// attribute) are written as none since session 4; entries written before list them, and both decode the same
/// through the store.
///
/// The decoder checks every length and tag and throws ``EntityStoreError/Code/corruptData``; it never traps.
enum HistoryCodec {
    static let formatVersion: UInt8 = 1

    static func encode(_ record: ChangeRecord, transaction: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 + record.changes.count * 24)
        appendHeader(of: record, transaction: transaction, changes: record.changes.count, &out)
        // The encoded entity name of the last change: a save's changes come in runs of one entity.
        var lastEntity = ""
        var lastName: [UInt8] = []
        var keyOrder = KeyOrder()
        // The changes are read in place: a copy of each (a reference taken on each of its arrays and strings) was
        // two thirds of encoding a million inserts.
        record.changes.withUnsafeBufferPointer { changes in
            for index in changes.indices {
                append(changes[index], lastEntity: &lastEntity, lastName: &lastName, &keyOrder, &out)
            }
        }
        return out
    }

    /// Appends one change; `lastName` is the encoded `lastEntity`, the entity of the change before.
    private static func append(
        _ change: borrowing ObjectChange, lastEntity: inout String, lastName: inout [UInt8], _ keyOrder: inout KeyOrder,
        _ out: inout [UInt8]
    ) {
        if change.objectID.entityName != lastEntity {
            lastEntity = change.objectID.entityName
            lastName.removeAll(keepingCapacity: true)
            appendString(lastEntity, &lastName)
        }
        if change.kind == .insert && change.oldStorage.isEmpty && change.links.isEmpty {
            // What the general path below writes for it: no keys, values or relationships.
            appendPlainInsert(name: lastName, change.objectID.primaryKey, userDriven: change.isUserDriven, &out)
            return
        }
        out.append(contentsOf: lastName)
        RecordCodec.appendVarint(change.objectID.primaryKey, &out)
        out.append(change.kind == .insert ? 0 : change.kind == .update ? 1 : 2)
        out.append(change.isUserDriven ? 1 : 0)
        // An insert changes every attribute of its entity: the names are not repeated per object (a bulk insert
        // would write them a million times); readers of the store fill them in (see `withInsertKeys`).
        if change.kind == .insert {
            RecordCodec.appendVarint(0, &out)
        } else {
            RecordCodec.appendVarint(UInt64(change.changedKeys.count), &out)
            for key in change.changedKeys { appendString(key, &out) }
        }
        // An insert's values are in its record: the history keeps its keys only, which keeps bulk inserts cheap.
        appendValues(change.oldStorage, &keyOrder, &out)
        appendValues(change.kind == .insert ? .dictionary([:]) : change.newStorage, &keyOrder, &out)
        // An update's relationships hold the targets it took out, a delete's all of them (`LinkStorage.forHistory`).
        let links = change.links.isEmpty ? [] : change.links.forHistory
        RecordCodec.appendVarint(UInt64(links.count), &out)
        for (key, ids) in links {
            appendString(key, &out)
            RecordCodec.appendVarint(UInt64(ids.count), &out)
            for id in ids {
                appendString(id.entityName, &out)
                RecordCodec.appendVarint(id.primaryKey, &out)
            }
        }
    }

    /// The entry's fields before its changes.
    static func appendHeader(of record: ChangeRecord, transaction: UInt64, changes: Int, _ out: inout [UInt8]) {
        out.append(formatVersion)
        RecordCodec.appendVarint(transaction, &out)
        RecordCodec.appendLittleEndian(record.date.timeIntervalSinceReferenceDate.bitPattern, &out)
        RecordCodec.appendVarint(UInt64(UInt32(bitPattern: record.processID)), &out)
        withUnsafeBytes(of: (record.contextID ?? UUID.zero).uuid) { out.append(contentsOf: $0) }
        appendString(record.author ?? "", &out)
        RecordCodec.appendVarint(UInt64(changes), &out)
    }

    /// The entry of a bulk insert of `keys` into `entity` (the header from `record`, whose changes are ignored):
    /// the bytes ``encode(_:transaction:)`` writes for the same inserts, without an ``ObjectChange`` per object.
    static func encodeInserts(
        _ record: ChangeRecord, entity: String, keys: [UInt64], transaction: UInt64
    ) -> [UInt8] {
        var out: [UInt8] = []
        var name: [UInt8] = []
        appendString(entity, &name)
        out.reserveCapacity(64 + keys.count * (name.count + 14))
        appendHeader(of: record, transaction: transaction, changes: keys.count, &out)
        for key in keys { appendPlainInsert(name: name, key, userDriven: false, &out) }
        return out
    }

    /// A change that inserts an object with no relationships, whose entity's encoded name is `name`: what the
    /// general encoding writes for it, in fixed bytes (insert, user-driven or not, no keys (see above), no old or new
    /// values, no relationships).
    @inline(__always)
    static func appendPlainInsert(name: [UInt8], _ key: UInt64, userDriven: Bool, _ out: inout [UInt8]) {
        out.append(contentsOf: name)
        RecordCodec.appendVarint(key, &out)
        out.append(contentsOf: [0, userDriven ? 1 : 0, 0, 0, 0, 0] as [UInt8])
    }

    /// The key order of the last list of names (an entity's shared attribute names): a delete's values are written
    /// in it without a dictionary made and sorted per object.
    struct KeyOrder {
        var names: [String] = []
        var order: [Int]? = []

        /// The positions of `names` in key order, nil when a name repeats. (Comparing the entity's shared array with
        /// itself is one identity check.)
        mutating func of(_ names: [String]) -> [Int]? {
            if names != self.names {
                self.names = names
                order = Set(names).count == names.count ? names.indices.sorted { names[$0] < names[$1] } : nil
            }
            return order
        }
    }

    /// Values by key, in key order.
    static func appendValues(_ storage: ObjectChange.ValueStorage, _ keyOrder: inout KeyOrder, _ out: inout [UInt8]) {
        if storage.isEmpty {
            RecordCodec.appendVarint(0, &out)
            return
        }
        if case .positional(let names, let values) = storage, names.count == values.count,
            let order = keyOrder.of(names)
        {
            RecordCodec.appendVarint(UInt64(names.count), &out)
            for index in order {
                appendString(names[index], &out)
                appendValue(values[index], &out)
            }
            return
        }
        if case .single(let names, let value) = storage {
            // One value (an update of one attribute, the usual one): no dictionary to sort.
            RecordCodec.appendVarint(1, &out)
            appendString(names[0], &out)
            appendValue(value, &out)
            return
        }
        let values = storage.dictionary
        RecordCodec.appendVarint(UInt64(values.count), &out)
        for (key, value) in values.sorted(by: { $0.key < $1.key }) {
            appendString(key, &out)
            appendValue(value, &out)
        }
    }

    static func decode(_ bytes: UnsafeRawBufferPointer) throws -> (ChangeRecord, UInt64) {
        var reader = ByteReader(bytes: bytes, entity: "history entry")
        let version = try reader.byte("format version")
        guard version == formatVersion else { throw reader.corrupt("history format version \(version)") }
        let transaction = try reader.varint("transaction number")
        let date = Date(timeIntervalSinceReferenceDate: Double(bitPattern: try reader.fixed64("date")))
        let process = try reader.varint("process ID")
        guard process <= UInt64(UInt32.max) else { throw reader.corrupt("process ID \(process) out of range") }
        let rawID = try reader.bytes(16, "context ID")
        var raw = UUID.zero.uuid
        withUnsafeMutableBytes(of: &raw) { $0.copyMemory(from: rawID) }
        let uuid = UUID(uuid: raw)
        let author = try reader.string("author")
        let count = try reader.count("changes", minimumBytesEach: 4)
        var changes: [ObjectChange] = []
        for _ in 0..<count {
            let entity = try reader.string("entity")
            let key = try reader.varint("primary key")
            guard key > 0, !entity.isEmpty else { throw reader.corrupt("an object ID of \(entity)/p\(key)") }
            let kindByte = try reader.byte("change kind")
            guard kindByte <= 2 else { throw reader.corrupt("change kind \(kindByte)") }
            let userDriven = try reader.byte("user-driven flag")
            guard userDriven <= 1 else { throw reader.corrupt("user-driven flag \(userDriven)") }
            var keys: [String] = []
            for _ in 0..<(try reader.count("changed keys", minimumBytesEach: 1)) {
                keys.append(try reader.string("key"))
            }
            var valueSets: [[String: Value]] = []
            for what in ["old values", "new values"] {
                var values: [String: Value] = [:]
                for _ in 0..<(try reader.count(what, minimumBytesEach: 2)) {
                    let name = try reader.string("key")
                    values[name] = try reader.taggedValue(name)
                }
                valueSets.append(values)
            }
            var relationships: [String: [ObjectID]] = [:]
            for _ in 0..<(try reader.count("relationships", minimumBytesEach: 2)) {
                let name = try reader.string("relationship")
                var ids: [ObjectID] = []
                for _ in 0..<(try reader.count("related objects", minimumBytesEach: 2)) {
                    let targetEntity = try reader.string("entity")
                    let targetKey = try reader.varint("primary key")
                    guard targetKey > 0 else { throw reader.corrupt("a related object with key 0") }
                    ids.append(ObjectID(entityName: targetEntity, primaryKey: targetKey))
                }
                relationships[name] = ids
            }
            changes.append(
                ObjectChange(
                    objectID: ObjectID(entityName: entity, primaryKey: key),
                    kind: kindByte == 0 ? .insert : kindByte == 1 ? .update : .delete, changedKeys: keys,
                    oldValues: valueSets[0], newValues: valueSets[1], oldRelationships: relationships,
                    isUserDriven: userDriven == 1))
        }
        guard reader.offset == bytes.count else {
            throw reader.corrupt("\(bytes.count - reader.offset) trailing bytes")
        }
        let record = ChangeRecord(
            kind: .didSave, changes: changes, transaction: transaction, author: author.isEmpty ? nil : author,
            date: date, processID: Int32(bitPattern: UInt32(process)), contextID: uuid == .zero ? nil : uuid)
        return (record, transaction)
    }

    static func appendString(_ text: String, _ out: inout [UInt8]) {
        // Straight from the string's storage: no array per string (a bulk insert writes several per object).
        var text = text
        text.withUTF8 { utf8 in
            RecordCodec.appendVarint(UInt64(utf8.count), &out)
            out.append(contentsOf: utf8)
        }
    }

    static func appendValue(_ value: Value, _ out: inout [UInt8]) {
        guard value.type != nil else {
            out.append(0)
            return
        }
        RecordCodec.appendField(value, to: &out)
    }
}

extension UUID {
    static let zero = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
}

extension ByteReader {
    mutating func fixed64(_ what: @autoclosure () -> String) throws -> UInt64 {
        UInt64(littleEndian: try bytes(8, what()).loadUnaligned(as: UInt64.self))
    }

    mutating func string(_ what: String) throws -> String {
        let raw = try bytes(try length(what), what)
        guard let text = ByteReader.text(raw) else { throw corrupt("the \(what) is not valid UTF-8") }
        return text
    }

    /// A count of items that each need at least `minimumBytesEach` bytes: a count the remaining bytes cannot hold
    /// is corrupt (and would otherwise make the decoder loop or allocate for nothing).
    mutating func count(_ what: String, minimumBytesEach: Int) throws -> Int {
        let count = try varint("count of \(what)")
        guard count <= UInt64((bytes.count - offset) / max(1, minimumBytesEach)) else {
            throw corrupt("\(count) \(what) cannot fit in \(bytes.count - offset) bytes")
        }
        return Int(count)
    }

    mutating func taggedValue(_ name: String) throws -> Value {
        let tag = try byte("type tag of '\(name)'")
        if tag == 0 { return .null }
        guard let type = AttributeType.allCases.first(where: { RecordCodec.tag(of: $0) == tag }) else {
            throw corrupt("unknown type tag \(tag) for '\(name)'")
        }
        return try value(of: type, name)
    }
}
