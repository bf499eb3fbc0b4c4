extension ObjectContext {
    /// Whether a candidate with `values` and `id` comes before one with `otherValues` and `otherID` in the order
    /// `keys` ask for, ties by primary key (unique across an entity and its sub-entities: a book and a comic that
    /// tie are in the order they were made, not every book before every comic).
    static func precedes(
        _ values: [Value], _ id: ObjectID, _ otherValues: [Value], _ otherID: ObjectID, _ keys: [SortKey]
    ) -> Bool {
        for (i, key) in keys.enumerated() {
            let order = key.order(values[i], otherValues[i])
            if order != .orderedSame { return order == .orderedAscending }
        }
        return id.primaryKey < otherID.primaryKey
    }

    /// Orders candidates as a request asks: by its sort keys (their values kept with each candidate), ties by
    /// primary key.
    static func sort(_ candidates: inout [Candidate], by keys: [SortKey]) {
        candidates.sort { a, b in precedes(a.sortValues, a.id, b.sortValues, b.id, keys) }
    }

    /// Keeps the best `count` of the scan's candidates (in order), and the last of them as the bound the next ones
    /// must beat.
    static func keepBest(_ count: Int, of scan: ScanState, by keys: [SortKey]) {
        let order = scan.candidates.withUnsafeBufferPointer { buffer in
            buffer.indices.sorted { a, b in
                precedes(buffer[a].sortValues, buffer[a].id, buffer[b].sortValues, buffer[b].id, keys)
            }
        }
        scan.candidates = order.prefix(count).map { scan.candidates[$0] }
        if let last = scan.candidates.last, scan.candidates.count == count {
            scan.bound = (last.sortValues, last.id)
        }
    }

    /// The request's window (offset and limit) of ordered candidates, of which the first `skipped` matches were
    /// dropped already.
    static func window(_ candidates: [Candidate], _ request: FetchRequest, skipped: Int = 0) -> [Candidate] {
        let start = min(request.fetchOffset - skipped, candidates.count)
        let end = min(candidates.count, request.windowEnd - skipped)
        // The whole list as it is (a copy retained every candidate's record and values).
        if start == 0 && end == candidates.count { return candidates }
        return Array(candidates[start..<end])
    }
}
