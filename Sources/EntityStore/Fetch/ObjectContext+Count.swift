import LMDB

extension ObjectContext {
    /// Counts the objects a request matches (within its offset and limit).
    public func count(for request: FetchRequest) throws -> Int {
        _ = try store.storage(for: request.entity)
        try validateWindow(request)
        let entities = entities(of: request)
        let total: Int
        if parent == nil && request.predicate == nil
            && !(request.includesPendingChanges && entities.contains(where: hasPendingObjects(of:)))
        {
            // The store's own count, when nothing in memory changes it (a child context's parents may have changes).
            total = try mappingStorageErrors("counting \(request.entity)") {
                try store.read { txn in
                    try entities.reduce(0) { $0 + (try txn.statistics(try store.storage(for: $1).records).entries) }
                }
            }
        } else {
            // The matches counted in any order (a count of a request sorted by title sorted every match), then
            // windowed; the request is checked whole first (a bad sort key is an error, as it is for a fetch).
            _ = try store.preparedFetches.prepared(request, store: store)
            var unordered = request
            unordered.sortKeys = []
            unordered.fetchOffset = 0
            unordered.fetchLimit = 0
            if let counted = try countFromIndex(unordered) {
                total = counted
            } else {
                // Counted as read: no match is kept (a list of a million matches' IDs cost ~270 ns a match).
                let counter = MatchCounter()
                _ = try run(unordered, shape: .count(counter))
                total = counter.value
            }
        }
        let afterOffset = max(0, total - request.fetchOffset)
        return request.fetchLimit > 0 ? min(afterOffset, request.fetchLimit) : afterOffset
    }

    /// The number of matches of a predicate an index answers exactly (its ranges hold exactly the matches), when no
    /// unsaved object of the entity changes it: the index's entries in the ranges, no record read (an entry and its
    /// record are written in one transaction). Nil for any other request.
    private func countFromIndex(_ request: FetchRequest) throws -> Int? {
        guard parent == nil, request.predicate != nil,
            !(request.includesSubentities && store.hierarchies.hasFamily(request.entity))
        else { return nil }
        try mergeInboxReportingFailures()
        if request.includesPendingChanges && hasPendingObjects(of: request.entity) { return nil }
        let prepared = try store.preparedFetches.prepared(request, store: store)
        let plan = QueryPlanner.plan(
            request, entity: prepared.storage.entity, storage: prepared.storage, mergesPending: false,
            index: prepared.index)
        guard case .indexRanges = plan.access, !plan.filters, let position = plan.indexPosition,
            let index = prepared.storage.indexes[position]
        else { return nil }
        return try mappingStorageErrors("counting \(request.entity)") {
            try store.read { txn in
                guard plan.ranges.count == 1 else {
                    // Ranges of several values (`IN`): an object is counted once.
                    return try Self.primaryKeys(in: index, plan.ranges, txn).count
                }
                var count = 0
                try txn.forEach(in: index, range: plan.ranges[0]) { _, _ in
                    count &+= 1
                    return .continue
                }
                return count
            }
        }
    }

    /// The primary keys an index holds in `ranges`, each once.
    static func primaryKeys(in index: Database, _ ranges: [KeyRange], _ txn: ReadTransaction) throws -> Set<UInt64> {
        var keys = Set<UInt64>()
        for range in ranges {
            try txn.forEach(in: index, range: range) { _, pk in
                keys.insert(try IndexKey.primaryKey(from: pk))
                return .continue
            }
        }
        return keys
    }
}
