import LMDB

extension ObjectContext {
    /// Fetches the objects a request asks for.
    ///
    /// The store is read in one read transaction (one consistent snapshot), ended before the call returns. With
    /// `includesPendingChanges` (the default) the context's unsaved inserts, updates and deletes are reflected. An
    /// object with unsaved changes that another context deleted meanwhile (in a context that has not merged that
    /// delete) is not in the results, and a key path through it reads as `nil`: nothing of it is left to match.
    ///
    /// - Throws: ``EntityStoreError/Code/invalidPredicate`` for a predicate that names unknown keys or compares
    ///   the wrong types; ``EntityStoreError/Code/invalidFetchRequest`` for a bad sort key or window.
    public func fetch(_ request: FetchRequest) throws -> [ManagedObject] {
        checkIsolation()
        return try register(try run(request, shape: .objects), request: request)
    }

    /// Fetches the IDs of the objects a request matches, in order.
    public func fetchObjectIDs(_ request: FetchRequest) throws -> [ObjectID] {
        try run(request, shape: .objectIDs).map(\.id)
    }

    /// Runs a request and returns the result in the shape its ``FetchRequest/resultType`` names.
    public func execute(_ request: FetchRequest) throws -> FetchResult {
        switch request.resultType {
        case .objects: .objects(try fetch(request))
        case .objectIDs: .objectIDs(try fetchObjectIDs(request))
        case .count: .count(try count(for: request))
        case .dictionaries(let keys) where request.returnsDistinctResults:
            .dictionaries(try distinctDictionaries(request, keys))
        case .dictionaries(let keys):
            .dictionaries(try run(request, shape: .dictionaries(keys)).map { $0.dictionary ?? [:] })
        }
    }

    /// Dictionary results, each distinct one once in the order first met, then windowed.
    private func distinctDictionaries(_ request: FetchRequest, _ keys: [String]) throws -> [[String: Value]] {
        var all = request
        all.fetchLimit = 0
        all.fetchOffset = 0
        var seen = Set<[String: Value]>()
        var rows: [[String: Value]] = []
        for candidate in try run(all, shape: .dictionaries(keys)) {
            let row = candidate.dictionary ?? [:]
            if seen.insert(row).inserted { rows.append(row) }
        }
        let start = min(request.fetchOffset, rows.count)
        let end = request.fetchLimit > 0 ? min(rows.count, start + request.fetchLimit) : rows.count
        return Array(rows[start..<end])
    }

    /// The plan a request would run with: which index serves it and what is done in memory.
    public func explain(_ request: FetchRequest) throws -> QueryPlan {
        // The same prepared form a fetch runs with: what is explained is what runs.
        let prepared = try store.preparedFetches.prepared(request, store: store)
        if request.includesSubentities && store.hierarchies.hasFamily(request.entity) {
            var part = request
            part.includesSubentities = false
            var plan = QueryPlan(
                entity: request.entity, access: .fullScan, filters: request.predicate != nil,
                sortsInMemory: !request.sortKeys.isEmpty, stopsEarly: false)
            plan.parts = try store.hierarchies.concrete(request.entity).map { name in
                part.entity = name
                return try explain(part)
            }
            plan.access = plan.parts.first?.access ?? .fullScan
            plan.sortsInMemory = !request.sortKeys.isEmpty && plan.parts.count > 1
            plan.stopsEarly = plan.parts.contains(where: \.stopsEarly)
            return plan
        }
        let merges = request.includesPendingChanges && hasPendingObjects(of: request.entity)
        return QueryPlanner.plan(
            request, entity: prepared.storage.entity, storage: prepared.storage, mergesPending: merges,
            index: prepared.index)
    }

    /// The entities a request reads: its own, or with its sub-entities those of its hierarchy that are not
    /// abstract.
    func entities(of request: FetchRequest) -> [String] {
        request.includesSubentities ? store.hierarchies.concrete(request.entity) : [request.entity]
    }

    /// Whether the context holds unsaved objects of `entity` (changed back or not): a fetch that includes pending
    /// changes takes them from the context rather than the store, so its results need sorting again.
    func hasPendingObjects(of entity: String) -> Bool {
        dirty.contains { $0.objectID.entityName == entity }
    }

    func validateWindow(_ request: FetchRequest) throws {
        if request.fetchLimit < 0 || request.fetchOffset < 0 || request.fetchBatchSize < 0 {
            throw EntityStoreError(
                .invalidFetchRequest,
                "fetchLimit, fetchOffset and fetchBatchSize must not be negative (\(request.fetchLimit),"
                    + " \(request.fetchOffset), \(request.fetchBatchSize))", entity: request.entity)
        }
    }

    enum Shape {
        case objects
        case objectIDs
        case dictionaries([String])
        /// The values of the sink's key paths for each match, handed to the sink as read (nothing is kept).
        case aggregate(AggregateSink)
        /// Only how many match: counted as read, nothing is kept.
        case count(MatchCounter)
    }

    /// The number of matches of a fetch of shape ``Shape/count(_:)``.
    final class MatchCounter {
        @exclusivity(unchecked) var value = 0
    }

    /// The mutable state of one scan (see `run`).
    final class ScanState {
        /// The records' decoded values, one array reused for every record of the scan.
        @exclusivity(unchecked) var scratch: [Value] = []
        @exclusivity(unchecked) var candidates: [Candidate] = []
        /// Matches before the window, counted and dropped as read (results read in their final order).
        @exclusivity(unchecked) var skipped = 0
        /// The records the scan considered (for a tracer).
        @exclusivity(unchecked) var read = 0
        /// With a limit and a sort in memory: the last of the best candidates kept at the last pruning; a match that
        /// sorts after it cannot be in the window and is dropped before its record is copied.
        @exclusivity(unchecked) var bound: (sortValues: [Value], id: ObjectID)?
    }

    struct Candidate {
        var id: ObjectID
        var sortValues: [Value]
        /// The object's record as read (checked), and its row version.
        var record: (bytes: [UInt8], rowVersion: UInt64)?
        var dictionary: [String: Value]?
    }

    /// The fetch pipeline: plan, read the snapshot, filter, merge pending changes, sort, window.
    func run(_ request: FetchRequest, shape: Shape) throws -> [Candidate] {
        if let parent { return try runInChild(request, shape: shape, parent: parent) }
        try mergeInboxReportingFailures()
        guard store.tracers.wants(.fetches) else {
            return try mappingStorageErrors("fetching \(request.entity)") {
                try store.read { txn in try run(request, shape: shape, in: txn) }
            }
        }
        let start = Tracers.now()
        recordsReadByLastScan = 0
        let result = try mappingStorageErrors("fetching \(request.entity)") {
            try store.read { txn in try run(request, shape: shape, in: txn) }
        }
        let seconds = Tracers.now() - start
        let returned: Int = if case .count(let counter) = shape { counter.value } else { result.count }
        let plan = try explain(request).description
        store.tracers.emit(
            .fetches,
            .fetch(
                FetchTrace(
                    context: name, entity: request.entity, predicate: request.predicate.map { "\($0)" },
                    sortKeys: request.sortKeys.map(\.description), plan: plan, recordsRead: recordsReadByLastScan,
                    returned: returned, seconds: seconds)))
        return result
    }

    /// The fetch pipeline inside the caller's read transaction; `keepsSortValues` keeps each candidate's sort
    /// values even when the results are read in order (results merged with others are sorted again).
    func run(
        _ request: FetchRequest, shape: Shape, in txn: ReadTransaction, keepsSortValues: Bool = false
    ) throws -> [Candidate] {
        if request.includesSubentities && store.hierarchies.hasFamily(request.entity) {
            return try runFamily(request, shape: shape, in: txn)
        }
        try validateWindow(request)
        let prepared = try store.preparedFetches.prepared(request, store: store)
        let storage = prepared.storage
        let entity = storage.entity
        let predicate = prepared.predicate
        let sortPaths = prepared.sortPaths
        let dictionaryPaths: [(String, ResolvedKeyPath)]
        let sink: AggregateSink?
        let dictionaryKeys: [String]?
        switch shape {
        case .dictionaries(let keys):
            sink = nil
            dictionaryKeys = keys
        case .aggregate(let aggregateSink):
            sink = aggregateSink
            dictionaryKeys = aggregateSink.keys
        case .objects, .objectIDs, .count:
            sink = nil
            dictionaryKeys = nil
        }
        let counter: MatchCounter? = if case .count(let counter) = shape { counter } else { nil }
        if let keys = dictionaryKeys {
            dictionaryPaths = try keys.map { key in
                let path = try ResolvedKeyPath.resolve(
                    key.keyPathComponents, from: entity, in: store.schema)
                guard case .attribute = path.terminal, !path.isToMany else {
                    throw EntityStoreError(
                        .invalidFetchRequest, "'\(key)' is not an attribute reached through to-one relationships",
                        entity: entity.name, key: key)
                }
                return (key, path)
            }
        } else {
            dictionaryPaths = []
        }
        let merges = request.includesPendingChanges && hasPendingObjects(of: entity.name)
        let plan = QueryPlanner.plan(
            request, entity: entity, storage: storage, mergesPending: merges, index: prepared.index)

        // Objects read in the requested order need no sort values (callers of other shapes use them).
        let sortsAfter =
            plan.sortsInMemory || merges
            || !(plan.access == .fullScan || isIndexOrder(plan.access) || plan.rangeInSortOrder)
        let objectsOnly: Bool = if case .objects = shape { true } else { false }
        let valuePaths = objectsOnly && !sortsAfter && !keepsSortValues ? [] : sortPaths
        // The record's own attribute each value path reads, where it reads one (most sort keys): taken from the
        // decoded record as it is, where reaching it through the path copied the path's terminal and made an
        // array of the one value, for every row.
        let ownPositions: [Int?] = valuePaths.map { path in
            if path.steps.isEmpty, case .attribute(let index, _) = path.terminal { index } else { nil }
        }
        // The predicate runs on each stored row unless the index ranges are exactly its rows.
        let filter = plan.filters ? predicate : nil
        // Simple comparisons of scalars are first tested on the encoded record.
        let recordFilter = filter == nil ? nil : prepared.recordFilter
        // Where those are the whole predicate, what the record filter accepts matches: no record is decoded for the
        // evaluator (a count of half a million matches of `n < %@` decoded and evaluated each).
        let filterDecides = recordFilter?.decidesAll == true
        var needed = [Bool](repeating: false, count: entity.attributes.count)
        if filter != nil { for i in prepared.filterAttributes { needed[i] = true } }
        for path in valuePaths + dictionaryPaths.map(\.1) where path.steps.isEmpty {
            if case .attribute(let i, _) = path.terminal { needed[i] = true }
        }
        // Whether a record is decoded into a subject at all (an exact index range with no sort in memory and no
        // dictionaries needs none).
        let needsSubject =
            (filter != nil && !filterDecides) || !valuePaths.isEmpty || !dictionaryPaths.isEmpty || sink != nil
        // An aggregate whose key paths are all the object's own attributes reads them from the decoded record.
        let sinkPositions: [Int]? =
            sink == nil
            ? nil
            : dictionaryPaths.allSatisfy { $0.1.steps.isEmpty }
                ? dictionaryPaths.compactMap { if case .attribute(let i, _) = $0.1.terminal { i } else { nil } } : nil
        let wantsRecords: Bool = if case .objects = shape { true } else { false }
        // The keys of the entity's unsaved objects, whose stored records the context's state replaces.
        let pendingKeys =
            request.includesPendingChanges && !dirty.isEmpty
            ? Set(dirty.lazy.filter { $0.objectID.entityName == entity.name }.map(\.objectID.primaryKey)) : []
        let window = request.windowEnd
        let sortKeys = request.sortKeys
        // Read in their final order, the matches before the offset are only counted.
        let skipping = !sortsAfter && sink == nil ? request.fetchOffset : 0
        // Sorted afterwards with a limit: only the best `window` are kept (pruned when twice as many are held), so
        // that "the latest 20" of a million rows copies 20 records, not a million, and sorts a few thousand.
        let keepsBest = sortsAfter && sink == nil && window <= 1 << 20
        let pruneAt = keepsBest ? max(2 * window, 1_024) : .max
        // The first sort key's attribute, when it is the record's own and of a fixed size: read in place, before the
        // record is decoded, to drop what sorts after the bound.
        let boundPosition: Int? =
            keepsBest
            ? ownPositions.first.flatMap { $0 }.flatMap { position in
                RecordCodec.isVariableSize(entity.attributes[position].type) ? nil : position
            } : nil

        return try mappingStorageErrors("fetching \(entity.name)") {
            do {
                let reader = FetchReader(
                    txn: txn, store: store, context: self, includesPending: request.includesPendingChanges)
                let toOnes = valuePaths.map { ToOneValues($0, from: storage, reader: reader) }
                // The scan's state in a box: the nested function below captures it, and captured local variables
                // cost a run-time exclusivity check on every access (per record).
                let scan = ScanState()
                // Room for a few hits: an index's equality matches are often a handful, and growing from empty
                // reallocated the list four times for ten.
                if case .fullScan = plan.access {} else { scan.candidates.reserveCapacity(16) }
                let entityBox = storage.entityBox

                let hasPending = !pendingKeys.isEmpty

                // Counts a match before the window instead of building it, while there are some to skip.
                func skipsBeforeWindow() -> Bool {
                    guard scan.skipped < skipping else { return false }
                    scan.skipped &+= 1
                    return true
                }

                func consider(_ key: UnsafeRawBufferPointer, _ bytes: UnsafeRawBufferPointer) throws {
                    scan.read &+= 1
                    // nil: no filter, or a record that is not what the entity's look like (the full path reports it).
                    let filtered = recordFilter?.matches(bytes)
                    if filtered == false { return }
                    let id = ObjectID(entityName: entity.name, primaryKey: try IndexKey.primaryKey(from: key))
                    if hasPending && pendingKeys.contains(id.primaryKey) { return }
                    if let position = boundPosition, let bound = scan.bound,
                        let value = try RecordCodec.fixedSizeValue(
                            at: position, bytes, entity.name, entity.attributes, key: id.primaryKey),
                        sortKeys[0].order(value, bound.sortValues[0]) == .orderedDescending
                    {
                        return
                    }
                    var sortValues: [Value] = []
                    var dictionary: [String: Value]?
                    if needsSubject || (filter != nil && filtered == nil) {
                        try RecordCodec.decode(
                            bytes, entity: entity, needed: needed, into: &scan.scratch, key: id.primaryKey)
                        let subject = RecordSubject(id: id, entity: entity, values: scan.scratch, reader: reader)
                        if let filter, !(filterDecides && filtered == true), try !filter.evaluate(subject) { return }
                        if skipsBeforeWindow() { return }
                        sortValues = try valuePaths.indices.map { k in
                            if let position = ownPositions[k] { return scan.scratch[position] }
                            if let toOne = toOnes[k] { return try toOne.value(from: id) }
                            return try CompiledPredicate.values(of: valuePaths[k], subject).first ?? .null
                        }
                        if let bound = scan.bound, !Self.precedes(sortValues, id, bound.sortValues, bound.id, sortKeys)
                        {
                            return
                        }
                        if let sink {
                            // Aggregated as read: no candidate is kept.
                            if let positions = sinkPositions {
                                try sink.add(record: scan.scratch, at: positions)
                            } else {
                                try sink.add(
                                    try dictionaryPaths.map {
                                        try CompiledPredicate.values(of: $0.1, subject).first ?? .null
                                    })
                            }
                            return
                        }
                        if !dictionaryPaths.isEmpty {
                            dictionary = try self.dictionary(dictionaryPaths, subject)
                        }
                    } else if skipsBeforeWindow() {
                        return
                    }
                    if let counter {
                        counter.value &+= 1
                        return
                    }
                    let record = wantsRecords ? try RecordCodec.checkedCopy(bytes, entityBox, key: id.primaryKey) : nil
                    // Made in the call: a candidate built in a variable was copied into the list (a reference taken on
                    // each of its arrays, and dropped with the variable).
                    scan.candidates.append(
                        Candidate(id: id, sortValues: sortValues, record: record, dictionary: dictionary))
                    if scan.candidates.count >= pruneAt { Self.keepBest(window, of: scan, by: sortKeys) }
                }
                // In an index's order with nothing to test, the rows before the offset are counted from the index
                // alone: an index entry and its record are written in one transaction.
                let skipsUnread = filter == nil
                // Whether the window is full, for a walk that reads the results in their order.
                let stopsEarly = plan.stopsEarly
                func full() -> Bool { stopsEarly && scan.skipped &+ scan.candidates.count >= window }

                switch plan.access {
                case .fullScan:
                    // Keeping the best by a descending first key, the scan starts from the newest records: what an
                    // app sorts newest first (dates, counters) mostly grows with them, so the first rows read set a
                    // bound most of the others fail before they are decoded. (The order read changes no result.)
                    let newestFirst = keepsBest && sortKeys.first?.ascending == false
                    if plan.stopsEarly {
                        try txn.forEachEntry(in: storage.records, reverse: newestFirst) { key, value in
                            try consider(key, value)
                            return full() ? .stop : .continue
                        }
                    } else {
                        // The scan of every record (most scans): nothing more per record than `consider`.
                        try txn.forEachEntry(in: storage.records, reverse: newestFirst) { key, value in
                            try consider(key, value)
                            return .continue
                        }
                    }
                case .indexRanges where plan.rangeInSortOrder:
                    let index = storage.indexes[plan.indexPosition!]!
                    try txn.forEach(in: index, range: plan.ranges[0]) { _, pk in
                        if skipsUnread && skipsBeforeWindow() { return .continue }
                        guard let bytes = try txn.get(pk, in: storage.records) else { return .continue }
                        try consider(pk, bytes)
                        return full() ? .stop : .continue
                    }
                case .indexRanges:
                    let index = storage.indexes[plan.indexPosition!]!
                    for pk in try Self.primaryKeys(in: index, plan.ranges, txn).sorted() {
                        guard let bytes = try txn.get(pk, in: storage.records) else { continue }
                        try withUnsafeBytes(of: pk.bigEndian) { try consider($0, bytes) }
                    }
                case .objectIDs:
                    for pk in plan.primaryKeys {
                        guard let bytes = try txn.get(pk, in: storage.records) else { continue }
                        try withUnsafeBytes(of: pk.bigEndian) { try consider($0, bytes) }
                    }
                case .inverse, .join:
                    // The objects named, or for a join the destination's matching objects as this fetch sees them
                    // (its snapshot, and its unsaved changes if it includes them); then what their inverse holds. A
                    // key held that is not this entity's record (a sibling sub-entity's, or an object deleted under
                    // a `noAction` rule) reads nothing.
                    var access = plan.inverse
                    if let join = plan.join {
                        var matching = FetchRequest(entity: join.destination, predicate: join.predicate)
                        matching.includesPendingChanges = request.includesPendingChanges
                        access = QueryPlanner.InverseAccess(
                            relationship: join.relationship, destination: join.destination, name: join.inverse,
                            objects: try run(matching, shape: .objectIDs, in: txn).map(\.id))
                    }
                    for pk in try inverseKeys(access!, txn) {
                        guard let bytes = try txn.get(pk, in: storage.records) else { continue }
                        try withUnsafeBytes(of: pk.bigEndian) { try consider($0, bytes) }
                    }
                case .indexOrder(_, let descending):
                    let index = storage.indexes[plan.indexPosition!]!
                    // Rows sorted afterwards: once the window is full, the rest of its last key's rows (ties, or
                    // values a cut key cannot tell apart) are read too; a later key's rows sort after all of them.
                    var lastKey: [UInt8]?
                    try txn.forEach(in: index, reverse: descending) { key, pk in
                        if let lastKey, !key.elementsEqual(lastKey) { return .stop }
                        if skipsUnread && skipsBeforeWindow() { return .continue }
                        guard let bytes = try txn.get(pk, in: storage.records) else { return .continue }
                        try consider(pk, bytes)
                        if lastKey == nil && full() {
                            guard plan.sortsInMemory else { return .stop }
                            lastKey = Array(key)
                        }
                        return .continue
                    }
                }

                if request.includesPendingChanges {
                    for object in dirty where object.objectID.entityName == entity.name && !object.isDeleted {
                        guard try hasRecord(object) else { continue }
                        let id = object.objectID
                        let subject = ContextSubject(object: object, reader: reader)
                        if let predicate, try !predicate.evaluate(subject) { continue }
                        if let sink {
                            try sink.add(
                                try dictionaryPaths.map {
                                    try CompiledPredicate.values(of: $0.1, subject).first ?? .null
                                })
                            continue
                        }
                        if let counter {
                            counter.value &+= 1
                            continue
                        }
                        var candidate = Candidate(
                            id: id,
                            sortValues: try sortPaths.map {
                                try CompiledPredicate.values(of: $0, subject).first ?? .null
                            })
                        if !dictionaryPaths.isEmpty { candidate.dictionary = try dictionary(dictionaryPaths, subject) }
                        scan.candidates.append(candidate)
                    }
                }

                if sortsAfter {
                    // Sorted by index, so that the sort moves integers rather than candidates.
                    let order = scan.candidates.withUnsafeBufferPointer { Self.sortedPlaces($0, by: sortKeys) }
                    scan.candidates = order.map { scan.candidates[$0] }
                }
                recordsReadByLastScan &+= scan.read
                return Self.window(scan.candidates, request, skipped: scan.skipped)
            }
        }
    }

    /// A fetch of an entity with sub-entities: each entity of the hierarchy fetched alone (a sub-entity's record
    /// has the superentity's attributes where the superentity has them, so the request means the same for each),
    /// the results merged in the request's order (ties by primary key, which the hierarchy's entities share, as a
    /// controller orders its rows), then windowed.
    private func runFamily(_ request: FetchRequest, shape: Shape, in txn: ReadTransaction) throws -> [Candidate] {
        try validateWindow(request)
        // Prepared against the requested entity first: a key only a sub-entity has is an error, as it is for the
        // requested entity alone.
        _ = try store.preparedFetches.prepared(request, store: store)
        var part = request
        part.includesSubentities = false
        part.fetchOffset = 0
        part.fetchLimit = request.fetchLimit > 0 ? request.windowEnd : 0
        let entities = store.hierarchies.concrete(request.entity)
        var candidates: [Candidate] = []
        for name in entities {
            part.entity = name
            candidates += try run(part, shape: shape, in: txn, keepsSortValues: true)
        }
        switch shape {
        case .aggregate, .count: return []
        default: break
        }
        if entities.count > 1 { Self.sort(&candidates, by: request.sortKeys) }
        return Self.window(candidates, request)
    }

    /// One object of a snapshot fetch: its values and its relationships' targets, all from one read.
    package struct SnapshotRow {
        package var id: ObjectID
        /// The values in schema order; a decimal as the text it is stored as (`.string`, its `description`).
        package var values: [Value]
        /// Each relationship's targets, in the order of the entity's relationships.
        package var relationships: [[ObjectID]]
        /// The values of the key paths asked for (``ToOnePathReader``), in their order.
        package var pathValues: [Value] = []
    }

    /// Fetches objects with their values and relationship targets from one read snapshot, without registering
    /// them (for tools); returns the store's transaction read (its last save's number, as the history numbers them).
    package func fetchSnapshot(_ request: FetchRequest) throws -> (rows: [SnapshotRow], transaction: Int) {
        var rows: [SnapshotRow] = []
        var transaction = 0
        try streamSnapshot([request], begin: { transaction = $0 }, row: { rows.append($1) })
        return (rows, transaction)
    }

    /// Streams objects with their values and relationship targets from one read snapshot, without registering
    /// them (for tools that print as they read): `begin` gets the snapshot's number (its last save's, as the history
    /// numbers them) before any row, then `row` each object of each request in turn (with the request's position),
    /// in the request's order. Only one request's matching IDs (and sort values) are held at once; each record is
    /// read and decoded when its turn comes.
    package func streamSnapshot(
        _ requests: [FetchRequest], keyPaths: [[String]] = [], begin: (Int) throws -> Void,
        row emit: (Int, SnapshotRow) throws -> Void
    ) throws {
        try mappingStorageErrors("fetching \(requests.map(\.entity).joined(separator: ", "))") {
            try store.read { txn in
                try begin(Int(try store.historySequence(txn)))
                let reader = FetchReader(txn: txn, store: store, context: self, includesPending: false)
                var paths = ToOnePathReader(store: store, txn: txn, paths: keyPaths)
                func row(_ position: Int, _ row: SnapshotRow) throws {
                    var row = row
                    if !keyPaths.isEmpty {
                        row.pathValues = try paths.values(from: row.id, relationships: row.relationships)
                    }
                    try emit(position, row)
                }
                for (position, request) in requests.enumerated() {
                    var storage = try store.storage(for: request.entity)
                    // Every object of one entity in key order: read straight off the records' cursor, holding
                    // nothing (no list of matches first, no second lookup per record).
                    if request.predicate == nil && request.sortKeys.isEmpty && request.fetchLimit == 0
                        && request.fetchOffset == 0
                        && !(request.includesSubentities && store.hierarchies.hasFamily(request.entity))
                    {
                        let entity = storage.entity
                        try txn.forEach(in: storage.records) { key, bytes in
                            let id = ObjectID(entityName: entity.name, primaryKey: try IndexKey.primaryKey(from: key))
                            let values = try RecordCodec.decode(
                                bytes, entity: entity, key: id.primaryKey, decimalsAsText: true
                            ).values
                            let relationships = try entity.relationships.map { try reader.storedTargets(of: id, $0) }
                            try row(position, SnapshotRow(id: id, values: values, relationships: relationships))
                            return .continue
                        }
                        continue
                    }
                    for candidate in try run(request, shape: .objectIDs, in: txn) {
                        // A sub-entity's object (a fetch of a superentity includes them) has its own record layout.
                        if candidate.id.entityName != storage.entity.name {
                            storage = try store.storage(for: candidate.id.entityName)
                        }
                        guard let bytes = try txn.get(candidate.id.primaryKey, in: storage.records) else { continue }
                        let values = try RecordCodec.decode(
                            bytes, entity: storage.entity, key: candidate.id.primaryKey, decimalsAsText: true
                        ).values
                        let relationships = try storage.entity.relationships.map {
                            try reader.storedTargets(of: candidate.id, $0)
                        }
                        try row(position, SnapshotRow(id: candidate.id, values: values, relationships: relationships))
                    }
                }
            }
        }
    }

    /// The primary keys the inverse relationship of `access` holds for its objects, ascending, each once: the
    /// candidates of `relationship == %@` (see ``QueryPlanner/inverseChoice(_:_:_:)``). An object of another kind
    /// than the relationship's destination (which compiling the predicate refuses) would hold none: no fetched
    /// object can point at it, whatever relationship of the same name its entity has.
    private func inverseKeys(_ access: QueryPlanner.InverseAccess, _ txn: ReadTransaction) throws -> [UInt64] {
        var keys: [UInt64] = []
        // An object is its primary key in its hierarchy (as predicates compare them): its entries are read in each
        // kind of the destination that keeps the inverse, so that an ID naming a superentity (a dangling link read
        // back, or one made by hand) finds the object's entries wherever its own kind keeps them. One kind holds the
        // key at most.
        let holders = try store.hierarchies.concrete(access.destination).compactMap { name in
            try store.storage(for: name).relationships[access.name]
        }
        for id in access.objects where store.schema.isKind(id.entityName, of: access.destination) {
            for database in holders {
                try txn.withCursor(on: database) { cursor in
                    try withUnsafeBytes(of: id.primaryKey.bigEndian) { key in
                        var entry = try cursor.seek(exactly: key)
                        while let (_, value) = entry {
                            keys.append(try IndexKey.primaryKey(from: value))
                            entry = try cursor.nextDuplicate()
                        }
                    }
                }
            }
        }
        // One object's targets come sorted (the database keeps them in key order); several objects' are merged.
        if access.objects.count > 1 {
            keys.sort()
            var last: UInt64?
            keys.removeAll { key in
                defer { last = key }
                return key == last
            }
        }
        return keys
    }

    private func isIndexOrder(_ access: QueryPlan.Access) -> Bool {
        if case .indexOrder = access { true } else { false }
    }

    private func dictionary(
        _ paths: [(String, ResolvedKeyPath)], _ subject: any PredicateSubject
    ) throws
        -> [String: Value]
    {
        var result: [String: Value] = [:]
        for (key, path) in paths { result[key] = try CompiledPredicate.values(of: path, subject).first ?? .null }
        return result
    }

    /// Whether an unsaved object has values a fetch can test: an inserted or loaded one does; a fault with unsaved
    /// relationship changes is loaded now, and left out of the results when its record was deleted elsewhere (in a
    /// context that has not merged that delete, or a parent that deleted it): nothing of it is left to match, and its
    /// save will be refused as a conflict naming it.
    func hasRecord(_ object: ManagedObject) throws -> Bool {
        if object.isInserted || object.values != nil || object.hasStoredState { return true }
        do {
            try fault(in: object)
        } catch let error as EntityStoreError where error.code == .objectNotFound && error.objectID == object.objectID {
            return false
        }
        return true
    }

    /// Registers fetched objects, filling faults from the records read, and arranges batches and prefetching.
    func register(_ candidates: consuming [Candidate], request: FetchRequest) throws -> [ManagedObject] {
        var candidates = candidates
        let batchSize = request.fetchBatchSize
        // A fresh context's objects are the registry's, in the same order: the result shares its array instead of
        // building a second one (its allocation and appends were a fiftieth of a small fetch).
        let fresh = registered.isEmpty
        var objects: [ManagedObject] = []
        if !fresh { objects.reserveCapacity(candidates.count) }
        var batch: FaultBatch?
        // Candidates are of the request's entity, or of its sub-entities: resolved once per run of one entity.
        var entity = try store.storage(for: request.entity).entityBox
        var entityName = entity.entity.name
        // Room for the hits, made without growing the table hit by hit. An empty registry (a fresh context's) makes
        // a table of the right size (specialized); `reserveCapacity` runs unspecialized in the standard library and
        // looks up the table's type metadata every call (~1,000 instructions), worth it only for many hits.
        if registered.isEmpty && candidates.count > 1 {
            registered.makeRoom(whileEmptyFor: candidates.count)
        } else if candidates.count > 64 {
            registered.reserveCapacity(registered.count + candidates.count)
        }
        // The candidates are this call's: each one's record moves into its object, and is read in place (a copy of
        // each candidate took a reference on each of its arrays and dropped it again: S4's small fetch took 5% less
        // without them).
        try candidates.withUnsafeMutableBufferPointer { candidates in
            for position in candidates.indices {
                let id = candidates[position].id
                if id.entityName != entityName {
                    entity = try store.storage(for: id.entityName).entityBox
                    entityName = entity.entity.name
                }
                let object = registered(id, entity: entity)
                let loadNow = batchSize == 0 || position < batchSize
                if !object.hasStoredState && !object.isInserted {
                    if loadNow, let record = candidates[position].record.take() {
                        object.keep(record: record.bytes, rowVersion: record.rowVersion)
                    } else if !loadNow {
                        if batch == nil || batch!.ids.count >= batchSize {
                            batch = FaultBatch()
                        }
                        batch!.ids.append(id)
                        faultBatches[id] = batch
                    }
                }
                if !fresh { objects.append(object) }
            }
        }
        if fresh {
            // Each candidate is another object, so the registry holds them all in their order; were one repeated, the
            // objects are looked up one by one.
            objects =
                registered.count == candidates.count
                ? registered.objects : candidates.compactMap { registered[$0.id] }
        }
        for keyPath in request.relationshipKeyPathsForPrefetching {
            try prefetch(keyPath.keyPathComponents, of: objects)
        }
        return objects
    }

    /// Loads the objects of a relationship key path for `objects`, each level in one read.
    func prefetch(_ path: [String], of objects: [ManagedObject]) throws {
        var level = objects
        for component in path {
            var next: [ObjectID] = []
            for object in level {
                guard let relationship = object.entity.relationship(component) else {
                    throw EntityStoreError(
                        .invalidFetchRequest,
                        "cannot prefetch '\(path.joined(separator: "."))': \(object.entity.name)"
                            + " has no relationship '\(component)'", entity: object.entity.name, key: component)
                }
                next.append(contentsOf: try targets(of: object, relationship))
            }
            level = try next.map { try object(with: $0) }
            try loadFaults(level)
        }
    }

    /// Loads the faults among a relationship's `targets` together (a child context's come from its parent, one by
    /// one, when used). Only records that pass the quick check are kept: a target missing from the store, or whose
    /// record needs the full check (an older format, a decimal, a bad byte), stays a fault, and its own first use
    /// reads it as before, with its answer or its error for that object alone.
    func loadTargets(_ targets: [ManagedObject]) throws {
        guard parent == nil, targets.count > 1 else { return }
        try loadFaults(targets, quickOnly: true)
    }

    /// Loads several faults in one read transaction, through one cursor per run of one entity's objects (for objects
    /// in key order, LMDB looks for each key on the page the one before was found on before it searches the tree
    /// from its root). Objects missing from the store stay faults; a record that needs the full check gets it (and
    /// throws what it finds), or with `quickOnly` stays a fault.
    func loadFaults(_ objects: [ManagedObject], quickOnly: Bool = false) throws {
        let faults = objects.filter { !$0.hasStoredState && !$0.isInserted }
        guard !faults.isEmpty else { return }
        try mappingStorageErrors("loading \(faults.count) objects") {
            try store.read { txn in
                var next = 0
                while next < faults.count {
                    let entityName = faults[next].objectID.entityName
                    let storage = try lastStorage(for: entityName)
                    try txn.withCursor(on: storage.records) { cursor in
                        while next < faults.count, faults[next].objectID.entityName == entityName {
                            let object = faults[next]
                            next += 1
                            let key = object.objectID.primaryKey
                            try withUnsafeBytes(of: key.bigEndian) { keyBytes in
                                guard let (_, bytes) = try cursor.seek(exactly: keyBytes) else { return }
                                if let rowVersion = RecordCodec.quickValidate(bytes, storage.entityBox.recordLayout) {
                                    object.keep(record: Array(bytes), rowVersion: rowVersion)
                                } else if quickOnly {
                                    return
                                } else {
                                    let record = try RecordCodec.checkedCopy(bytes, storage.entityBox, key: key)
                                    object.keep(record: record.bytes, rowVersion: record.rowVersion)
                                }
                                if !faultBatches.isEmpty { faultBatches[object.objectID] = nil }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Objects of one fetch batch: faulting one loads them all.
final class FaultBatch {
    var ids: [ObjectID] = []
}
