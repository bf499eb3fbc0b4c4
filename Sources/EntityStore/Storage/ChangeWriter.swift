import Foundation
import LMDB
import SectionedDiff

/// Writes a save's changes inside one write transaction: records, index entries and both directions of every
/// relationship.
struct ChangeWriter {
    let store: PersistentStore
    let txn: WriteTransaction
    var buffer: [UInt8] = []
    var keyBuffer: [UInt8] = []
    /// Entities whose inserts in this save go in ascending key order above every stored key so far: LMDB appends
    /// them (a save writes its objects in ID order, and a context's keys come from its own ascending blocks).
    var appendable: Set<String> = []
    /// The index entries of the objects inserted so far, by entity storage, written by ``writeInsertedIndexes()``:
    /// a save of many new objects puts each index's entries in the index's order.
    private var insertedIndexes: [(storage: EntityStorage, rows: [[Value]], keys: [UInt64])] = []
    /// The entity inserted last: its storage, a cursor on its records, whether its inserts append, and its place in
    /// ``insertedIndexes``. A save inserts runs of one entity, and comparing a name costs less than hashing it
    /// (twice, and the storage's identity once more) for every object; through one cursor, each record of a run in
    /// key order lands on the page of the one before without a search from the tree's root.
    private var lastInserted: (storage: EntityStorage, records: PutCursor, appends: Bool, slot: Int?)?
    /// The links this save adds, checked by ``danglingLinks()`` once every record is written.
    var addedLinks: [(source: ObjectID, relationship: String, target: ObjectID)] = []
    /// The links this save wrote, each as its other side would write it: the database of the target's relationship,
    /// the target's key and the source's. When both objects of a new link are in the save, the second one's
    /// relationship finds its link written (both directions) and writes nothing.
    var writtenLinks: Set<WrittenLink> = []
    /// The objects this save inserts (and does not delete), once a link needs them: nothing was stored under a new
    /// object's key before this save, and its record is written by it.
    private var insertedIDs: Set<ObjectID>?
    /// Links between two objects this save inserts, both directions, by relationship database: written by
    /// ``writeNewLinks()`` once every object is, each database's in key order through one cursor. Nothing is stored
    /// under a new object's key, nothing in the save reads it before then, and the context holds both sides of such
    /// a link (no inverse of it goes unreported and neither end can be missing).
    /// Each link is one number, the source's key above the target's: sorting them sorts by both.
    var newLinks: [(database: Database, pairs: [UInt128])] = []
    /// The place in ``newLinks`` used last (a save adds runs of links to one relationship).
    var lastNewLinks = 0
    /// The plans of the entities whose objects this save wrote relationships of, by their storage (see
    /// ``linkPlans(of:)``).
    var linkPlans: [(storage: ObjectIdentifier, plans: [LinkPlan])] = []
    /// The objects of the save (see ``insertedIDs``).
    var savedObjects: [ManagedObject] = []

    /// Whether this save inserts the object `id`.
    mutating func isInsertedHere(_ id: ObjectID) -> Bool {
        if insertedIDs == nil {
            insertedIDs = Set(savedObjects.lazy.filter { $0.isInserted && !$0.isDeleted }.map(\.objectID))
        }
        return insertedIDs!.contains(id)
    }

    /// One direction of a link: `source`'s relationship (stored in the database `database`) holds `target`.
    struct WrittenLink: Hashable {
        var database: UInt32
        var source: UInt64
        var target: UInt64

        /// The keys mixed through a 64-bit finalizer, as ``ObjectID`` hashes (a `Hasher` per link was a tenth of
        /// writing it).
        func _rawHashValue(seed: Int) -> Int {
            mixedHash(source &* 0x9E37_79B9_7F4A_7C15 ^ target ^ UInt64(database) << 56, seed: seed)
        }
    }
    /// Objects whose relationships this save changed besides the saved objects' own changes (a to-one's target
    /// replaced after another writer changed it), with the relationships' names.
    var collateral: [ObjectID: Set<String>] = [:]
    /// The inverse sides this save's relationship writes changed in the store: each target, the name of its
    /// relationship that gained (`added`) or lost the saved object `source`. The save's record must name each one,
    /// and the saving context's view of it must agree; a context whose view of the target was stale (it did not list
    /// the saved object, or listed it when the store no longer did) has no change of its own for it (see
    /// ``ObjectContext/unreportedInverses(_:)``).
    var inverseWrites: [InverseWrite] = []
    /// The stored values of deleted objects the context never read (faults reached by a cascade or deleted as
    /// faults): a delete's record holds every old value, and these are the only copy.
    private(set) var unreadDeletedValues: [ObjectID: [Value]] = [:]
    /// The stored values a save's change of an object is told from, where the record was saved elsewhere since the
    /// context read it: what a merge policy wrote over or kept. Told from what the context had read instead, the
    /// change would leave out values the save put back (another writer's change that `contextWins` overwrote) and
    /// give wrong old values.
    private(set) var baselines: [ObjectID: [Value]] = [:]

    /// One inverse side a save changed (see ``inverseWrites``).
    struct InverseWrite {
        var target: ObjectID
        var relationship: String
        var source: ObjectID
        var added: Bool
    }

    init(store: PersistentStore, txn: WriteTransaction) {
        self.store = store
        self.txn = txn
    }

    /// Unique attributes: no two stored objects (after this save) share a value.
    mutating func checkUniqueness(_ objects: [ManagedObject]) throws -> [EntityStoreError.Failure] {
        var failures: [EntityStoreError.Failure] = []
        var claimed: [String: [Value: ObjectID]] = [:]
        let leaving = Set(objects.filter(\.isDeleted).map(\.objectID))
        // Where each entity's unique attributes must be unique, found once per save.
        var scopes: [String: (slot: String, storages: [EntityStorage])] = [:]
        func scope(_ attribute: String, _ entity: String) throws -> (slot: String, storages: [EntityStorage]) {
            if let known = scopes["\(entity).\(attribute)"] { return known }
            let found = try store.uniquenessScope(of: attribute, in: entity)
            scopes["\(entity).\(attribute)"] = found
            return found
        }
        // The unique attributes' positions come from the entity's box: most entities have none, and asking an
        // object for its entity copies the entity's description (a reference taken on each of its arrays).
        // Values that objects in this save give up: another object may take them.
        var released: [String: Set<ObjectID>] = [:]
        for object in objects where !object.isDeleted {
            let indices = object.entityBox.uniqueAttributeIndices
            guard !indices.isEmpty, let values = object.values else { continue }
            for i in indices where object.committed?[i] != values[i] {
                released[try scope(object.entity.attributes[i].name, object.entity.name).slot, default: []].insert(
                    object.objectID)
            }
        }
        for object in objects where !object.isDeleted {
            let indices = object.entityBox.uniqueAttributeIndices
            guard !indices.isEmpty, let values = object.values else { continue }
            for i in indices {
                let attribute = object.entity.attributes[i]
                let value = values[i]
                guard !value.isNull, object.isInserted || object.committed?[i] != value else { continue }
                let (slot, storages) = try scope(attribute.name, object.entity.name)
                // One value for uniqueness: canonical strings, one NaN, one zero; folded when case-insensitive.
                let claim = ValueSemantics.uniquenessKey(value, caseInsensitive: attribute.isCaseInsensitive)
                if let other = claimed[slot]?[claim] {
                    failures.append(
                        .init(
                            entity: object.entity.name, key: attribute.name, objectID: object.objectID,
                            message: "the value \(value) must be unique; \(other) in this save has it too"))
                    continue
                }
                claimed[slot, default: [:]][claim] = object.objectID
                for holder in try store.holders(of: value, at: i, in: storages, txn, keyBuffer: &keyBuffer)
                where holder != object.objectID {
                    if leaving.contains(holder) || released[slot]?.contains(holder) == true { continue }
                    failures.append(
                        .init(
                            entity: object.entity.name, key: attribute.name, objectID: object.objectID,
                            message: "the value \(value) must be unique; \(holder) already has it"))
                    break
                }
            }
        }
        return failures
    }

    /// Writes a new object; `appending` when its key is above every stored key (a batch insert's fresh keys), which
    /// lets LMDB append the record instead of searching for its place.
    mutating func insert(_ object: ManagedObject, appending: Bool = false) throws {
        let name = object.objectID.entityName
        if lastInserted == nil || lastInserted!.storage.entity.name != name { try beginRun(of: name) }
        let (storage, records, appends, slot) = lastInserted!
        let values = object.values ?? storage.entityBox.defaultValues
        RecordCodec.encode(values, rowVersion: 1, into: &buffer)
        let pk = object.objectID.primaryKey
        let append = appending || appends
        do {
            try buffer.withUnsafeBytes { try records.put(pk, $0, flags: append ? .append : .noOverwrite) }
        } catch let error as LMDBError where error.code == .keyExists && append && !appending {
            // A key below the last stored one (another context's block was saved first): LMDB refused the append
            // without writing anything; put it in its place, and stop appending for this entity in this save.
            appendable.remove(name)
            lastInserted!.appends = false
            try buffer.withUnsafeBytes { try records.put(pk, $0, flags: .noOverwrite) }
        }
        if let slot {
            insertedIndexes[slot].rows.append(values)
            insertedIndexes[slot].keys.append(pk)
        }
        try writeRelationships(of: object, storage)
    }

    /// Finds what inserting objects of `name` needs, for a run of them: its storage, whether they append, and where
    /// their index entries are collected.
    private mutating func beginRun(of name: String) throws {
        let storage = try store.storage(for: name)
        var slot: Int?
        if !storage.indexList.isEmpty {
            slot = insertedIndexes.firstIndex { $0.storage === storage }
            if slot == nil {
                insertedIndexes.append((storage, [], []))
                slot = insertedIndexes.count - 1
            }
        }
        lastInserted = (storage, try txn.putCursor(on: storage.records), appendable.contains(name), slot)
    }

    /// Writes the index entries of the objects ``insert(_:appending:)`` wrote (it must be called before the
    /// transaction commits): each index's in key order when there are many.
    mutating func writeInsertedIndexes() throws {
        for inserted in insertedIndexes { try putIndexes(inserted.rows, keys: inserted.keys, inserted.storage) }
        insertedIndexes = []
        lastInserted = nil
    }

    /// Writes new records and their index entries, for objects with no relationships set and fresh keys above
    /// every stored one (a batch insert): the records appended, then each index's entries in key order.
    mutating func insertAppending(_ rows: [[Value]], keys: [UInt64], _ storage: EntityStorage) throws {
        // One cursor for the run: each append lands on the page the last one did, found without a search.
        let records = try txn.putCursor(on: storage.records)
        for (pk, values) in zip(keys, rows) {
            RecordCodec.encode(values, rowVersion: 1, into: &buffer)
            try buffer.withUnsafeBytes { try records.put(pk, $0, flags: .append) }
        }
        try putIndexes(rows, keys: keys, storage)
    }

    /// Puts the index entries of `rows` (primary keys `keys`): each index's sorted when there are many.
    private mutating func putIndexes(_ rows: [[Value]], keys: [UInt64], _ storage: EntityStorage) throws {
        guard rows.count >= Self.sortedIndexBatch else {
            for (pk, values) in zip(keys, rows) { try putIndexes(values, pk, storage) }
            return
        }
        for index in storage.indexList { try putSorted(index, rows, keys) }
    }

    /// From this many rows a batch insert writes each index's entries sorted: in the order of the index, each put
    /// lands next to the one before (a page already in cache and dirty) instead of anywhere in the tree.
    static let sortedIndexBatch = 64

    /// Puts the entries of one index for `rows` (keys `keys`) in the index's order: key bytes, then primary key.
    private mutating func putSorted(
        _ index: (position: Int, database: Database, caseInsensitive: Bool), _ rows: [[Value]], _ keys: [UInt64]
    ) throws {
        var bytes: [UInt8] = []
        var entries: [IndexEntry] = []
        entries.reserveCapacity(rows.count)
        for (pk, values) in zip(keys, rows) {
            IndexKey.encode(values[index.position], caseInsensitive: index.caseInsensitive, into: &keyBuffer)
            entries.append(Self.indexEntry(keyBuffer, at: bytes.count, pk))
            bytes += keyBuffer
        }
        // The order as places in the entries (read from there, not copied into a second array), else the entries
        // sorted.
        let order = Self.orderAsWords(entries)
        if order == nil { Self.sortByComparison(&entries, bytes) }
        // In order through one cursor: LMDB finds each entry's place on the page of the one before.
        let cursor = try txn.putCursor(on: index.database)
        try bytes.withUnsafeBytes { all in
            func put(_ entry: IndexEntry) throws {
                let key = UnsafeRawBufferPointer(rebasing: all[entry.start..<(entry.start + entry.count)])
                try withUnsafeBytes(of: entry.pk.bigEndian) { try cursor.put(key, $0) }
            }
            if let order {
                for place in order { try put(entries[place]) }
            } else {
                for entry in entries { try put(entry) }
            }
        }
    }

    /// Writes `entries` (keys in `bytes`) into `index`, an empty index database, in the index's order: each key
    /// appended after the one before and each primary key after its key's others, so that every page fills (puts in
    /// order without `MDB_APPEND` split each full page in half) and no put searches the tree. A migration rebuilds an
    /// index so.
    static func appendSorted(
        _ entries: inout [IndexEntry], _ bytes: [UInt8], into index: Database, _ txn: WriteTransaction
    ) throws {
        let order = orderAsWords(entries)
        if order == nil { sortByComparison(&entries, bytes) }
        let cursor = try txn.putCursor(on: index)
        try bytes.withUnsafeBytes { all in
            var previous: IndexEntry?
            func put(_ entry: IndexEntry) throws {
                let key = UnsafeRawBufferPointer(rebasing: all[entry.start..<(entry.start + entry.count)])
                let sameKey =
                    previous.map { last in
                        last.count == entry.count
                            && (entry.count == 0
                                || memcmp(all.baseAddress! + last.start, all.baseAddress! + entry.start, entry.count)
                                    == 0)
                    } ?? false
                try withUnsafeBytes(of: entry.pk.bigEndian) {
                    try cursor.put(key, $0, flags: sameKey ? .appendDuplicate : .append)
                }
                previous = entry
            }
            if let order {
                for place in order { try put(entries[place]) }
            } else {
                for entry in entries { try put(entry) }
            }
        }
    }

    /// An index entry of a batch: the key's first sixteen bytes as two big-endian integers (numbers, dates and
    /// short strings are decided there), where the key's bytes are in the batch's bytes, and the primary key.
    typealias IndexEntry = (head: UInt64, next: UInt64, start: Int, count: Int, pk: UInt64)

    /// The entry of `key`, at `start` in the batch's bytes, for the primary key `pk`.
    static func indexEntry(_ key: [UInt8], at start: Int, _ pk: UInt64) -> IndexEntry {
        var head: UInt64 = 0
        var next: UInt64 = 0
        for i in 0..<8 { head = head << 8 | UInt64(i < key.count ? key[i] : 0) }
        for i in 8..<16 { next = next << 8 | UInt64(i < key.count ? key[i] : 0) }
        return (head, next, start, key.count, pk)
    }

    /// Sorts index entries (keys in `bytes`) in the index's order, key bytes then primary key, by comparing them.
    static func sortByComparison(_ entries: inout [IndexEntry], _ bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { all in
            entries.sort { a, b in
                if a.head != b.head { return a.head < b.head }
                if a.next != b.next { return a.next < b.next }
                let common = min(a.count, b.count)
                if common > 16 {
                    let order = memcmp(all.baseAddress! + a.start + 16, all.baseAddress! + b.start + 16, common - 16)
                    if order != 0 { return order < 0 }
                }
                if a.count != b.count { return a.count < b.count }
                return a.pk < b.pk
            }
        }
    }

    /// The index entries' order (places in `entries`) by a radix sort of words, when the keys allow it: every key
    /// of one length, at most sixteen bytes (numbers, dates, short strings), the primary keys ascending in the
    /// entries' order (a save's and a batch's new objects are), and the bytes in which the keys differ few enough
    /// to sit with the entry's place in one word. Sorting the entries with a comparison closure was an eighth of a
    /// million inserts' index writes; a score index of ten thousand values differs in two bytes of its keys.
    static func orderAsWords(_ entries: [IndexEntry]) -> [Int]? {
        guard let first = entries.first, first.count <= 16 else { return nil }
        var differing: (head: UInt64, next: UInt64) = (0, 0)
        for index in entries.indices {
            let entry = entries[index]
            guard entry.count == first.count, index == 0 || entries[index - 1].pk < entry.pk else { return nil }
            differing.head |= entry.head ^ first.head
            differing.next |= entry.next ^ first.next
        }
        // The key's bytes that differ, by their shift in the head or the next word, most significant first.
        var shifts: [(inNext: Bool, shift: UInt64)] = []
        for byte in 0..<16 {
            let shift = UInt64(56 - 8 * (byte % 8))
            if ((byte < 8 ? differing.head : differing.next) >> shift) & 0xFF != 0 { shifts.append((byte >= 8, shift)) }
        }
        let placeBits = UInt64.bitWidth - (entries.count - 1).leadingZeroBitCount
        guard shifts.count * 8 + placeBits <= UInt64.bitWidth else { return nil }
        var words: [UInt64] = []
        words.reserveCapacity(entries.count)
        for (place, entry) in entries.enumerated() {
            var word: UInt64 = 0
            for (inNext, shift) in shifts { word = word << 8 | ((inNext ? entry.next : entry.head) >> shift) & 0xFF }
            words.append(word << placeBits | UInt64(place))
        }
        sortWords(&words)
        let mask = (1 << placeBits) - 1 as UInt64
        return words.map { Int($0 & mask) }
    }

    private mutating func putIndexes(_ values: [Value], _ pk: UInt64, _ storage: EntityStorage) throws {
        for index in storage.indexList {
            IndexKey.encode(values[index.position], caseInsensitive: index.caseInsensitive, into: &keyBuffer)
            try keyBuffer.withUnsafeBytes { key in
                try withUnsafeBytes(of: pk.bigEndian) { try txn.put(key, $0, in: index.database) }
            }
        }
    }

    /// How an update ended when the stored row had changed since the object was read.
    enum Resolution {
        /// The stored version stays (store wins): the object takes its values.
        case keepStored([Value], UInt64)
        /// The object's values (context wins) or a per-attribute merge were written.
        case wrote([Value], UInt64)
        /// The object was deleted elsewhere and stays deleted.
        case deletedElsewhere
    }

    /// Writes an update under `policy`; returns a conflict (for the error policy) or how a conflict was resolved.
    ///
    /// An object deleted elsewhere since the context read it stays deleted, and the save records no update of it:
    /// a change of its attributes is a conflict under ``MergePolicy/error`` and dropped under the others. An object
    /// whose only changes are relationships (the inverse side of links its context changed) loses nothing it was
    /// asked for by staying deleted, under every policy: unlinking it would write nothing, and a link to it is
    /// refused by ``danglingLinks()``, which names the link.
    mutating func update(
        _ object: ManagedObject, policy: MergePolicy
    ) throws -> (EntityStoreError.Failure?, Resolution?) {
        let storage = try store.storage(for: object.entity.name)
        let pk = object.objectID.primaryKey
        var resolution: Resolution?
        guard let values = object.values, values != object.committed else {
            guard try txn.get(pk, in: storage.records) != nil else { return (nil, .deletedElsewhere) }
            try writeRelationships(of: object, storage)
            return (nil, nil)
        }
        guard let bytes = try txn.get(pk, in: storage.records) else {
            switch policy {
            case .error:
                return (
                    .init(
                        entity: object.entity.name, objectID: object.objectID,
                        message: "the object was deleted elsewhere since it was read"), nil
                )
            case .storeWins, .propertyLevel, .contextWins:
                // A delete is not undone by a policy: the object's cascade targets, its links and perhaps its
                // unique values are gone or taken since, and no version of it could be written whole.
                return (nil, .deletedElsewhere)
            }
        }
        let (stored, rowVersion) = try RecordCodec.decode(bytes, object.entityBox, key: pk)
        var final = values
        if rowVersion != object.rowVersion {
            if policy != .error { baselines[object.objectID] = stored }
            switch policy {
            case .error:
                return (
                    .init(
                        entity: object.entity.name, objectID: object.objectID,
                        message: "the object was saved elsewhere (row version \(rowVersion), read at"
                            + " \(object.rowVersion))"), nil
                )
            case .storeWins:
                try writeRelationships(of: object, storage)
                return (nil, .keepStored(stored, rowVersion))
            case .contextWins:
                resolution = .wrote(values, rowVersion + 1)
            case .propertyLevel:
                final = stored
                for i in values.indices where values[i] != object.committed?[i] { final[i] = values[i] }
                resolution = .wrote(final, rowVersion + 1)
            }
        }
        RecordCodec.encode(final, rowVersion: rowVersion + 1, into: &buffer)
        try buffer.withUnsafeBytes { try txn.put(pk, $0, in: storage.records) }
        for (i, index) in storage.indexes where stored[i] != final[i] {
            try deleteIndex(stored[i], object.entity.attributes[i], pk, index)
            try putIndex(final[i], object.entity.attributes[i], pk, index)
        }
        try writeRelationships(of: object, storage)
        return (nil, resolution)
    }

    /// How a delete ended when the stored row had changed since the object was read.
    enum DeleteOutcome {
        /// The record and its index entries and relationships were removed.
        case deleted
        /// The object was already gone: nothing was written, and the save records no delete of it.
        case alreadyGone
        /// The store's version wins (``MergePolicy/storeWins``): the delete must be dropped.
        case keptByStore
    }

    /// Deletes an object under `policy`; returns a conflict (for the error policy) and what happened.
    ///
    /// An object the context read (its values are loaded) is checked like an update: a record saved elsewhere
    /// since, or deleted elsewhere, is a conflict under ``MergePolicy/error``. A delete of an object that is
    /// already gone writes nothing under every other policy. An object never read (a fault reached by a cascade)
    /// is deleted as it is now, and skipped when it is already gone.
    mutating func delete(
        _ object: ManagedObject, policy: MergePolicy
    ) throws -> (EntityStoreError.Failure?, DeleteOutcome) {
        let storage = try store.storage(for: object.entity.name)
        let pk = object.objectID.primaryKey
        let wasRead = object.committed != nil
        guard let bytes = try txn.get(pk, in: storage.records) else {
            if wasRead && policy == .error {
                return (
                    .init(
                        entity: object.entity.name, objectID: object.objectID,
                        message: "the object was deleted elsewhere since it was read"), .alreadyGone
                )
            }
            return (nil, .alreadyGone)
        }
        let (stored, rowVersion) = try RecordCodec.decode(bytes, object.entityBox, key: pk)
        if wasRead && rowVersion != object.rowVersion {
            switch policy {
            case .error:
                return (
                    .init(
                        entity: object.entity.name, objectID: object.objectID,
                        message: "cannot delete: the object was saved elsewhere (row version \(rowVersion), read at"
                            + " \(object.rowVersion))"), .deleted
                )
            case .storeWins:
                return (nil, .keptByStore)
            case .contextWins, .propertyLevel:
                break
            }
        }
        for (i, index) in storage.indexes {
            try deleteIndex(stored[i], object.entity.attributes[i], pk, index)
        }
        try txn.delete(pk, in: storage.records)
        if !wasRead { unreadDeletedValues[object.objectID] = stored }
        var unseen: [String] = []
        for relationship in object.entity.relationships {
            guard let database = storage.relationships[relationship.name] else { continue }
            if relationship.deleteRule != .noAction {
                unseen += try unlinkInverses(of: object, relationship, storage)
            }
            try txn.delete(pk, in: database)
        }
        guard unseen.isEmpty else {
            return (
                .init(
                    entity: object.entity.name, objectID: object.objectID,
                    message: "cannot delete: \(unseen.joined(separator: "; ")) since it was read; merge or refresh"
                        + " and save again, so that its delete rules see them"), .deleted
            )
        }
        return (nil, .deleted)
    }

    /// Removes the deleted `object` from the inverse of `relationship` on every object stored as its target, those
    /// linked elsewhere since the context read it included (recorded in ``collateral``): no object keeps a link to
    /// a deleted one. Returns what the relationship's cascade or deny rule did not see (it saw what the context
    /// read), each a conflict.
    private mutating func unlinkInverses(
        of object: ManagedObject, _ relationship: Relationship, _ storage: EntityStorage
    ) throws -> [String] {
        let targets = try store.storedTargets(of: object.objectID, relationship, storage, txn)
        guard !targets.isEmpty else { return [] }
        let read = object.committedRelated[relationship.name]
        let source = IndexKey.primaryKey(object.objectID.primaryKey)
        var unseen: [String] = []
        for target in targets {
            guard
                let backward = try store.storage(for: target.entityName).relationships[relationship.inverse]
            else { continue }
            let unlinked = try txn.delete(IndexKey.primaryKey(target.primaryKey), value: source, in: backward)
            if unlinked {
                inverseWrites.append(
                    .init(target: target, relationship: relationship.inverse, source: object.objectID, added: false))
            }
            // A target the context read was seen by its delete rules; one with no link back names nothing (a
            // reference a `noAction` delete left).
            guard read?.contains(target) != true, unlinked else { continue }
            collateral[target, default: []].insert(relationship.inverse)
            if read != nil && (relationship.deleteRule == .cascade || relationship.deleteRule == .deny) {
                unseen.append(
                    "\(target) was linked to its \(relationship.name) (delete rule \(relationship.deleteRule))")
            }
        }
        return unseen
    }

    /// The to-one relationships `objects` change that were changed elsewhere since the context read them, as
    /// conflicts: checked before the save writes anything (its own writes change to-ones through their inverses).
    func toOneConflicts(_ objects: [ManagedObject]) throws -> [EntityStoreError.Failure] {
        var failures: [EntityStoreError.Failure] = []
        for object in objects where !object.isInserted && !object.isDeleted && !object.related.isEmpty {
            for relationship in object.entity.relationships where !relationship.isToMany {
                guard let current = object.related[relationship.name],
                    let read = object.committedRelated[relationship.name], current != read
                else { continue }
                let storage = try store.storage(for: object.entity.name)
                let now = TargetSet(try store.storedTargets(of: object.objectID, relationship, storage, txn))
                guard now != read else { continue }
                let names = now.isEmpty ? "none" : now.sorted().map(\.description).joined(separator: ", ")
                failures.append(
                    .init(
                        entity: object.entity.name, key: relationship.name, objectID: object.objectID,
                        message: "it was changed elsewhere since it was read (now \(names))"))
            }
        }
        return failures
    }

    /// The links this save added with an end that is not in the store after its writes: an object deleted elsewhere
    /// since the context read it (and not merged there), whether the link names it or it holds the link (an object
    /// whose only unsaved changes are relationships is not otherwise checked). Written, each would be a reference to
    /// nothing. A link and its inverse are one finding.
    mutating func danglingLinks() throws -> [EntityStoreError.Failure] {
        var failures: [EntityStoreError.Failure] = []
        var checked: [ObjectID: Bool] = [:]
        func exists(_ id: ObjectID) throws -> Bool {
            if isInsertedHere(id) { return true }
            if let known = checked[id] { return known }
            let records = try store.storage(for: id.entityName).records
            let found = try txn.get(id.primaryKey, in: records) != nil
            checked[id] = found
            return found
        }
        var reported = Set<[ObjectID]>()
        for link in addedLinks {
            let message: String
            if try !exists(link.target) {
                message = "\(link.source).\(link.relationship) links to \(link.target), which was deleted elsewhere"
            } else if try !exists(link.source) {
                message = "\(link.source) was deleted elsewhere; its \(link.relationship) cannot link to \(link.target)"
            } else {
                continue
            }
            guard reported.insert([link.source, link.target].sorted()).inserted else { continue }
            failures.append(
                .init(entity: link.source.entityName, key: link.relationship, objectID: link.source, message: message))
        }
        return failures
    }

    /// Recomputes, from what the store holds inside this transaction (the save's own writes included), the derived
    /// attributes that read through relationships of `candidates` (with `includingOwnValues`, every one but
    /// `now()`), and rewrites each record whose values differ:
    /// the context computed them from its own view, stale when other writers changed the relationships it read or
    /// when a merge policy kept stored values. `version` gives the row version to write, from the stored one (an
    /// object this save already rewrote keeps its new version). Returns each rewritten object's values and version.
    ///
    /// A rewritten object for which `tellsFromStored` holds gets the values stored before as its baseline (see
    /// ``baselines``), unless it has one: a saved object whose attributes the save did not write itself (only its
    /// relationships), which another writer may have changed since the context read them.
    mutating func rederive(
        _ candidates: Set<ObjectID>, _ derivations: [String: [Derivation]], context: ObjectContext, now: Date,
        includingOwnValues: Bool = false, tellsFromStored: (ObjectID) -> Bool = { _ in false },
        version: (ObjectID, UInt64) -> UInt64
    ) throws -> [ObjectID: (values: [Value], version: UInt64)] {
        var rewritten: [ObjectID: (values: [Value], version: UInt64)] = [:]
        let reader = FetchReader(txn: txn, store: store, context: context, includesPending: false)
        for id in candidates.sorted() {
            guard let list = derivations[id.entityName] else { continue }
            let storage = try store.storage(for: id.entityName)
            let entity = storage.entity
            let pk = id.primaryKey
            guard let bytes = try txn.get(pk, in: storage.records) else { continue }
            var (values, rowVersion) = try RecordCodec.decode(bytes, entity: entity, key: pk)
            // (Shared with `values` until they change: no copy for an object that keeps none.)
            let before = baselines[id] == nil && tellsFromStored(id) ? values : nil
            let subject = RecordSubject(id: id, entity: entity, values: values, reader: reader)
            var changed = false
            for derivation in list where derivation.firstStep != nil || includingOwnValues && !derivation.isNow {
                let value = try derivation.value(subject, now: now, of: id)
                guard value != values[derivation.index] else { continue }
                if let index = storage.indexes[derivation.index] {
                    try deleteIndex(values[derivation.index], derivation.attribute, pk, index)
                    try putIndex(value, derivation.attribute, pk, index)
                }
                values[derivation.index] = value
                changed = true
            }
            guard changed else { continue }
            rowVersion = version(id, rowVersion)
            RecordCodec.encode(values, rowVersion: rowVersion, into: &buffer)
            try buffer.withUnsafeBytes { try txn.put(pk, $0, in: storage.records) }
            rewritten[id] = (values, rowVersion)
            if let before { baselines[id] = before }
        }
        return rewritten
    }

    private mutating func putIndex(_ value: Value, _ attribute: Attribute, _ pk: UInt64, _ index: Database) throws {
        IndexKey.encode(value, caseInsensitive: attribute.isCaseInsensitive, into: &keyBuffer)
        try keyBuffer.withUnsafeBytes { key in
            try withUnsafeBytes(of: pk.bigEndian) { try txn.put(key, $0, in: index) }
        }
    }

    private mutating func deleteIndex(_ value: Value, _ attribute: Attribute, _ pk: UInt64, _ index: Database) throws {
        IndexKey.encode(value, caseInsensitive: attribute.isCaseInsensitive, into: &keyBuffer)
        try txn.delete(keyBuffer, value: IndexKey.primaryKey(pk), in: index)
    }
}
