import Foundation
import LMDB

/// One problem found by ``PersistentStore/checkIntegrity(progress:)``.
public struct IntegrityFinding: Sendable, Hashable, CustomStringConvertible {
    /// The kind of problem.
    public enum Kind: String, Sendable, Hashable {
        /// A record does not decode against its entity.
        case undecodableRecord = "undecodable record"
        /// An index entry that no record implies.
        case staleIndexEntry = "stale index entry"
        /// A record whose index entry is missing.
        case missingIndexEntry = "missing index entry"
        /// Two objects share the value of a unique attribute.
        case duplicateUniqueValue = "duplicate unique value"
        /// A relationship entry names an object that does not exist.
        case danglingReference = "dangling reference"
        /// A relationship entry has no entry back in the inverse.
        case missingInverse = "missing inverse"
        /// A to-one relationship holds several objects.
        case toOneWithSeveralTargets = "to-one with several targets"
        /// History entries are missing between two others, or after the last.
        case historyGap = "history gap"
        /// A history entry does not decode.
        case undecodableHistory = "undecodable history entry"
        /// A reader slot belongs to a process that is gone.
        case staleReader = "stale reader"
        /// A derived attribute read through relationships holds another value than its derivation gives.
        case staleDerivedValue = "stale derived value"
    }

    /// The kind of problem.
    public var kind: Kind
    /// Where: a database, an object, a transaction.
    public var location: String
    /// What exactly is wrong.
    public var detail: String

    public var description: String { "\(kind.rawValue): \(location): \(detail)" }
}

extension PersistentStore {
    /// Checks the store in one read snapshot: every record decodes against the schema; every index holds exactly
    /// the entries its records imply; relationships point at existing objects and their inverses agree; the
    /// history has no gaps; no reader slot belongs to a dead process; derived attributes read through relationships
    /// hold what their derivations give.
    ///
    /// - Parameter progress: Called with the records checked so far and the records of the store, after each
    ///   record (the records are most of the work; a tool shows a progress line with it).
    /// - Returns: The findings (empty for a healthy store) and the store's transaction the snapshot read: the number
    ///   of its last save, as ``history(since:limit:)`` and ``lastTransaction()`` number them.
    public func checkIntegrity(
        progress: ((_ checked: Int, _ total: Int) -> Void)? = nil
    ) throws -> (findings: [IntegrityFinding], transaction: Int) {
        try mappingStorageErrors("checking the store") {
            try read { txn in
                var findings: [IntegrityFinding] = []
                var existing: [String: Set<UInt64>] = [:]
                let total =
                    progress == nil
                    ? 0
                    : try schema.entities.compactMap { storages[$0.name] }.reduce(0) {
                        $0 + (try txn.statistics($1.records).entries)
                    }
                var checked = 0
                for entity in schema.entities {
                    guard let storage = storages[entity.name] else { continue }
                    var keys = Set<UInt64>()
                    var expected: [Int: Set<[UInt8]>] = [:]
                    var uniques: [Int: [Value: UInt64]] = [:]
                    try txn.forEach(in: storage.records) { key, value in
                        if let progress {
                            checked += 1
                            progress(checked, total)
                        }
                        let pk: UInt64
                        do { pk = try IndexKey.primaryKey(from: key) } catch {
                            findings.append(
                                .init(
                                    kind: .undecodableRecord, location: "records.\(entity.name)",
                                    detail: "a key of \(key.count) bytes"))
                            return .continue
                        }
                        keys.insert(pk)
                        let values: [Value]
                        do {
                            values = try RecordCodec.decode(value, entity: entity).values
                        } catch {
                            findings.append(
                                .init(kind: .undecodableRecord, location: "\(entity.name)/p\(pk)", detail: "\(error)"))
                            return .continue
                        }
                        for (i, attribute) in entity.attributes.enumerated() where attribute.isIndexed {
                            var entry = IndexKey.encode(values[i], caseInsensitive: attribute.isCaseInsensitive)
                            entry += IndexKey.primaryKey(pk)
                            expected[i, default: []].insert(entry)
                            if attribute.isUnique, !values[i].isNull {
                                let claim = ValueSemantics.uniquenessKey(
                                    values[i], caseInsensitive: attribute.isCaseInsensitive)
                                if let other = uniques[i]?[claim] {
                                    findings.append(
                                        .init(
                                            kind: .duplicateUniqueValue, location: "\(entity.name).\(attribute.name)",
                                            detail: "p\(other) and p\(pk) both hold \(values[i])"))
                                }
                                uniques[i, default: [:]][claim] = pk
                            }
                        }
                        return .continue
                    }
                    existing[entity.name] = keys
                    for (i, index) in storage.indexes {
                        let name = "index.\(entity.name).\(entity.attributes[i].name)"
                        var actual = Set<[UInt8]>()
                        try txn.forEach(in: index) { key, value in
                            let entry = Array(key) + Array(value)
                            actual.insert(entry)
                            if !(expected[i]?.contains(entry) ?? false) {
                                let pk = IndexKey.describe(primaryKey: value)
                                findings.append(
                                    .init(
                                        kind: .staleIndexEntry, location: name,
                                        detail: "an entry for \(pk) that its record does not imply"))
                            }
                            return .continue
                        }
                        for entry in expected[i] ?? [] where !actual.contains(entry) {
                            let pk = entry.suffix(8).withUnsafeBytes { IndexKey.describe(primaryKey: $0) }
                            findings.append(
                                .init(kind: .missingIndexEntry, location: name, detail: "no entry for \(pk)"))
                        }
                    }
                }
                for entity in schema.entities {
                    guard let storage = storages[entity.name] else { continue }
                    for relationship in entity.relationships {
                        guard let database = storage.relationships[relationship.name] else { continue }
                        // A relationship to a superentity holds objects of its sub-entities too.
                        let destinations = hierarchies.concrete(relationship.destination)
                        let name = "\(entity.name).\(relationship.name)"
                        var targetsPerSource: [UInt64: Int] = [:]
                        try txn.forEach(in: database) { key, value in
                            guard key.count == 8, value.count == 8 else {
                                findings.append(
                                    .init(
                                        kind: .danglingReference, location: name,
                                        detail:
                                            "an entry of bad length (\(key.count)-byte key, \(value.count)-byte value)")
                                )
                                return .continue
                            }
                            let source = try IndexKey.primaryKey(from: key)
                            let target = try IndexKey.primaryKey(from: value)
                            targetsPerSource[source, default: 0] += 1
                            if !(existing[entity.name]?.contains(source) ?? false) {
                                findings.append(
                                    .init(
                                        kind: .danglingReference, location: name,
                                        detail: "from p\(source), which does not exist"))
                            }
                            let found = destinations.first { existing[$0]?.contains(target) == true }
                            if found == nil {
                                findings.append(
                                    .init(
                                        kind: .danglingReference, location: name,
                                        detail:
                                            "p\(source) -> \(relationship.destination)/p\(target), which does not exist"
                                    ))
                            }
                            // The inverse is on the target's own entity (the destination's when there is no target).
                            let holder = found ?? relationship.destination
                            guard let inverse = storages[holder]?.relationships[relationship.inverse] else {
                                return .continue
                            }
                            let back = try txn.withCursor(on: inverse) { cursor in
                                try IndexKey.primaryKey(target).withUnsafeBytes { k in
                                    try IndexKey.primaryKey(source).withUnsafeBytes { v in
                                        try cursor.seek(key: k, valueAtLeast: v)
                                    }
                                }
                            }
                            if back.map({
                                Array($0.key) != IndexKey.primaryKey(target)
                                    || Array($0.value) != IndexKey.primaryKey(source)
                            }) ?? true {
                                findings.append(
                                    .init(
                                        kind: .missingInverse, location: name,
                                        detail:
                                            "p\(source) -> p\(target) has no \(holder).\(relationship.inverse) entry back"
                                    ))
                            }
                            return .continue
                        }
                        if !relationship.isToMany {
                            for (source, count) in targetsPerSource where count > 1 {
                                findings.append(
                                    .init(
                                        kind: .toOneWithSeveralTargets, location: name,
                                        detail: "p\(source) holds \(count) objects"))
                            }
                        }
                    }
                }
                findings += try staleDerivedValues(txn)
                var previous: UInt64?
                try txn.forEach(in: historyDatabase) { key, value in
                    guard key.count == 8 else {
                        findings.append(
                            .init(kind: .undecodableHistory, location: "history", detail: "a key of \(key.count) bytes")
                        )
                        return .continue
                    }
                    let number = try IndexKey.primaryKey(from: key)
                    if let previous, number != previous + 1 {
                        findings.append(
                            .init(
                                kind: .historyGap, location: "history",
                                detail: "transactions \(previous + 1)...\(number - 1) are missing"))
                    }
                    previous = number
                    do {
                        _ = try HistoryCodec.decode(value)
                    } catch {
                        findings.append(
                            .init(
                                kind: .undecodableHistory, location: "history",
                                detail: "transaction \(number): \(error)"))
                    }
                    return .continue
                }
                let last = try historySequence(txn)
                if let previous, previous != last {
                    findings.append(
                        .init(
                            kind: .historyGap, location: "history",
                            detail: "the last entry is \(previous), the store's last transaction \(last)"))
                }
                for line in environment.readerTable().dropFirst() {
                    let fields = line.split(separator: " ")
                    guard let pid = fields.first.flatMap({ Int32($0) }) else { continue }
                    if kill(pid, 0) != 0 && errno == ESRCH {
                        findings.append(
                            .init(
                                kind: .staleReader, location: "lock.mdb",
                                detail: "a reader slot of process \(pid), which is gone"))
                    }
                }
                return (findings, Int(try historySequence(txn)))
            }
        }
    }

    /// The derived attributes read through relationships whose stored value differs from what their derivation gives
    /// now (each object's own attributes, and `now()`, are computed at every write and are not checked).
    private func staleDerivedValues(_ txn: ReadTransaction) throws -> [IntegrityFinding] {
        let derivations = try derivations()
        guard !relationshipDerivationSteps(derivations).isEmpty else { return [] }
        var findings: [IntegrityFinding] = []
        let reader = FetchReader(txn: txn, store: self, context: ObjectContext(store: self), includesPending: false)
        for (entityName, list) in derivations.sorted(by: { $0.key < $1.key }) {
            let checked = list.filter { $0.firstStep != nil }
            guard !checked.isEmpty, let storage = storages[entityName] else { continue }
            let entity = storage.entity
            try txn.forEachEntry(in: storage.records) { key, bytes in
                let pk: UInt64
                let values: [Value]
                do {
                    pk = try IndexKey.primaryKey(from: key)
                    values = try RecordCodec.decode(bytes, entity: entity).values
                } catch {
                    return .continue  // an undecodable record, reported by the first pass
                }
                let subject = RecordSubject(
                    id: ObjectID(entityName: entityName, primaryKey: pk), entity: entity, values: values,
                    reader: reader)
                for derivation in checked {
                    let value: Value
                    do {
                        value = try derivation.value(subject, now: Date())
                    } catch {
                        findings.append(
                            .init(
                                kind: .staleDerivedValue, location: "\(entityName)/p\(pk)",
                                detail: "\(derivation.attribute.name) cannot be computed: \(error)"))
                        continue
                    }
                    guard value != values[derivation.index] else { continue }
                    findings.append(
                        .init(
                            kind: .staleDerivedValue, location: "\(entityName)/p\(pk)",
                            detail:
                                "\(derivation.attribute.name) is \(values[derivation.index]), its derivation gives \(value)"
                        ))
                }
                return .continue
            }
        }
        return findings
    }
}
