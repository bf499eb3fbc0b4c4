import SectionedDiff

/// The incremental change computation of an unwindowed controller: a batch of k changes costs O(k log n) plus one
/// pass over the affected positions of the touched sections, with no per-row hashing.
///
/// It computes exactly the batch that ``ChangeSet`` computes from the whole lists (the tests run both on the same
/// random batches and compare the callbacks): rows that did not change keep their relative order, so the stayers
/// of a section are known from the affected positions alone, and runs of unaffected rows enter the heaviest
/// increasing subsequence as single weighted elements.
extension FetchedResultsController {
    /// One batch in the contract's causal order, ready for the delegate.
    struct IncrementalBatch {
        var deletes: [(ObjectID, ItemPath)] = []
        var sectionDeletes: [(Int, SectionInfo)] = []
        var sectionInserts: [(Int, SectionInfo)] = []
        var inserts: [(ObjectID, ItemPath)] = []
        var moves: [(ObjectID, ItemPath, ItemPath)] = []
        var updates: [(ObjectID, ItemPath, ItemPath)] = []

        var isEmpty: Bool {
            deletes.isEmpty && sectionDeletes.isEmpty && sectionInserts.isEmpty && inserts.isEmpty && moves.isEmpty
                && updates.isEmpty
        }
    }

    func sectionKey(of row: Row) -> Value { sectionNameKeyPath == nil ? .null : row.keys[0] }

    /// The section holding the row at `index` in `starts`.
    func section(ofRowAt index: Int, in starts: [(key: Value, start: Int)]) -> Int {
        max(0, starts.partitionPoint { $0.start <= index } - 1)
    }

    func path(ofRowAt index: Int, in starts: [(key: Value, start: Int)]) -> ItemPath {
        let section = section(ofRowAt: index, in: starts)
        return ItemPath(section: section, item: index - starts[section].start)
    }

    /// The index of `id`'s row in `rows`, found by binary search on its keys.
    func rowIndex(of id: ObjectID, _ plan: Plan) -> Int? {
        guard plan.holds(id.entityName) else { return nil }
        return rows.position(of: id.primaryKey)
    }

    /// Rebuilds `sectionStarts` from `rows` (after a full fetch or a merge).
    func rebuildSectionStarts() {
        if sectionNameKeyPath == nil {
            sectionStarts = [(.null, 0)]
            return
        }
        sectionStarts = []
        var position = 0
        rows.order.forEachChunk { chunk in
            for slot in chunk {
                let key = rows.key(0, of: slot.pk)
                if sectionStarts.last?.key != key { sectionStarts.append((key, position)) }
                position += 1
            }
        }
    }

    func removeRow(at index: Int) {
        let section = section(ofRowAt: index, in: sectionStarts)
        rows.remove(at: index)
        for later in (section + 1)..<sectionStarts.count { sectionStarts[later].start -= 1 }
        if sectionNameKeyPath != nil && sectionEnd(section) == sectionStarts[section].start {
            sectionStarts.remove(at: section)
        }
    }

    /// The first of `count` sections (their keys given by `keyAt`) whose key is not before `key`: where a row
    /// with that section key belongs (always 0 without sections).
    func sectionIndex(for key: Value, among count: Int, _ plan: Plan, keyAt: (Int) -> Value) -> Int {
        guard sectionNameKeyPath != nil else { return 0 }
        return (0..<count).partitionPoint { plan.sortKeys[0].order(keyAt($0), key) == .orderedAscending }
    }

    func insertRow(_ row: Row, _ plan: Plan) {
        let index = rows.insert(row.id.primaryKey, row.keys)
        let key = sectionKey(of: row)
        let section = sectionIndex(for: key, among: sectionStarts.count, plan) { sectionStarts[$0].key }
        if sectionNameKeyPath != nil && (section == sectionStarts.count || sectionStarts[section].key != key) {
            sectionStarts.insert((key, index), at: section)
        }
        for later in (section + 1)..<sectionStarts.count { sectionStarts[later].start += 1 }
    }

    /// Recomputes the rows of `ids` (distinct: membership, section and sort values): a few rows are moved one by one
    /// (a chunk's memmove each), a batch large against the rows rebuilds the order in one pass. Returns where the
    /// rows were before, and where they are now.
    func updateRows(
        _ ids: [ObjectID], _ plan: Plan
    ) throws -> (oldIndex: [ObjectID: Int], newIndex: [ObjectID: Int]) {
        // Read first: when the rows cannot be read, nothing has changed yet.
        let fresh = try newRows(for: ids, plan)
        noteEntities(of: fresh.lazy.map(\.id), plan)
        var oldIndex: [ObjectID: Int] = [:]
        for id in ids { if let index = rowIndex(of: id, plan) { oldIndex[id] = index } }
        var newIndex: [ObjectID: Int] = [:]
        let rebuild = mergeThreshold == 0 || (ids.count >= mergeThreshold && ids.count * 512 >= rows.count)
        if !rebuild {
            for index in oldIndex.values.sorted(by: >) { removeRow(at: index) }
            for row in fresh { insertRow(row, plan) }
            for row in fresh { if let index = rowIndex(of: row.id, plan) { newIndex[row.id] = index } }
        } else {
            // The sections' sizes follow from the old sizes and the batch, without a pass over the rows.
            var sizes = sectionStarts.indices.map {
                (key: sectionStarts[$0].key, count: sectionEnd($0) - sectionStarts[$0].start)
            }
            for index in oldIndex.values { sizes[section(ofRowAt: index, in: sectionStarts)].count -= 1 }
            for row in fresh {
                let key = sectionKey(of: row)
                let section = sectionIndex(for: key, among: sizes.count, plan) { sizes[$0].key }
                if section < sizes.count && sizes[section].key == key {
                    sizes[section].count += 1
                } else {
                    sizes.insert((key, 1), at: section)
                }
            }
            let positions = rows.merge(
                removing: oldIndex.values.sorted(), inserting: fresh.map { ($0.id.primaryKey, $0.keys) })
            for (row, position) in zip(fresh, positions) { newIndex[row.id] = position }
            if sectionNameKeyPath == nil {
                sectionStarts = [(.null, 0)]
            } else {
                sectionStarts = []
                var start = 0
                for size in sizes where size.count > 0 {
                    sectionStarts.append((size.key, start))
                    start += size.count
                }
            }
        }
        displayedCache = nil
        displayedPathsCache = nil
        return (oldIndex, newIndex)
    }

    /// `ids` split into the rows to recompute and the rows updated in place (with their positions, ascending): rows
    /// in the results whose changes name only keys the plan does not read. Such a change cannot move the row or put
    /// it in or out of the results; a row outside them stays outside, unreported.
    func splitInPlace(
        _ ids: [ObjectID], _ affected: [ObjectID: AffectedRow], _ plan: Plan
    ) -> (moving: [ObjectID], inPlace: [(id: ObjectID, old: Int)]) {
        guard let readKeys = plan.readKeys else { return (ids, []) }
        var moving: [ObjectID] = []
        var inPlace: [(id: ObjectID, old: Int)] = []
        for id in ids {
            guard let row = affected[id], !row.isStructural, !row.keys.isEmpty,
                row.keys.allSatisfy({ !$0.utf8.contains(UInt8(ascii: ".")) && !readKeys.contains($0) })
            else {
                moving.append(id)
                continue
            }
            if let index = rowIndex(of: id, plan) { inPlace.append((id, index)) }
        }
        inPlace.sort { $0.old < $1.old }
        return (moving, inPlace)
    }

    /// Applies the changes of `ids` and computes the batch incrementally.
    func applyIncrementally(
        _ ids: [ObjectID], _ affected: [ObjectID: AffectedRow], _ plan: Plan
    ) throws
        -> IncrementalBatch
    {
        let oldStarts = sectionStarts
        let oldCount = rows.count
        // Rows whose changes name no key the plan reads keep their place among the unaffected rows: they are not
        // read, removed or re-inserted, only reported (an update, or a move when their run of rows moves).
        let (moving, inPlace) = splitInPlace(ids, affected, plan)
        let (oldIndex, newIndex) = moving.isEmpty ? ([:], [:]) : try updateRows(moving, plan)
        /// How many rows updated in place the old positions `range` hold.
        func inPlaceCount(_ range: Range<Int>) -> Int {
            inPlace.partitionPoint { $0.old < range.upperBound } - inPlace.partitionPoint { $0.old < range.lowerBound }
        }
        var movedInPlace = Set<Int>()

        let itemCount = oldCount + rows.count + 1
        var oldSectionOf: [Value: Int] = [:]
        for (i, entry) in oldStarts.enumerated() { oldSectionOf[entry.key] = i }
        var newSectionOf: [Value: Int] = [:]
        for (i, entry) in sectionStarts.enumerated() { newSectionOf[entry.key] = i }
        func oldEnd(_ s: Int) -> Int { s + 1 < oldStarts.count ? oldStarts[s + 1].start : oldCount }
        func newEnd(_ s: Int) -> Int { s + 1 < sectionStarts.count ? sectionStarts[s + 1].start : rows.count }
        func oldKey(_ index: Int) -> Value { oldStarts[section(ofRowAt: index, in: oldStarts)].key }
        func newKey(_ index: Int) -> Value { sectionStarts[section(ofRowAt: index, in: sectionStarts)].key }

        // The affected rows by position, old and new: a touched section's are a slice, found by binary search.
        let oldByPosition = oldIndex.map { (key: $0.key, value: $0.value) }.sorted { $0.value < $1.value }
        let newByPosition = newIndex.map { (key: $0.key, value: $0.value) }.sorted { $0.value < $1.value }
        func slice(
            _ sorted: [(key: ObjectID, value: Int)], _ range: Range<Int>
        ) -> ArraySlice<(key: ObjectID, value: Int)> {
            sorted[
                sorted.partitionPoint {
                    $0.value < range.lowerBound
                }..<sorted.partitionPoint {
                    $0.value < range.upperBound
                }]
        }
        var batch = IncrementalBatch()
        for (i, entry) in oldStarts.enumerated() where newSectionOf[entry.key] == nil {
            // Every row of a deleted section is affected.
            let items = slice(oldByPosition, entry.start..<oldEnd(i)).map(\.key)
            let name = Self.name(of: entry.key)
            batch.sectionDeletes.append(
                (i, SectionInfo(name: name, indexTitle: indexTitle(for: name), value: entry.key, objectIDs: items)))
        }
        for (i, entry) in sectionStarts.enumerated() where oldSectionOf[entry.key] == nil {
            let name = Self.name(of: entry.key)
            batch.sectionInserts.append(
                (
                    i,
                    SectionInfo(
                        name: name, indexTitle: indexTitle(for: name), value: entry.key,
                        objectIDs: rows.order.keys(in: entry.start..<newEnd(i)).map { id($0, plan) })
                ))
        }

        // Stayers per surviving section, and the moves among them.
        var moved = Set<ObjectID>()
        var movedUnaffected: [(ObjectID, ItemPath, ItemPath)] = []
        var touched = Set<Value>()
        for (id, index) in oldIndex where newIndex[id] != nil {
            let key = oldKey(index)
            if key == newKey(newIndex[id]!) { touched.insert(key) }
        }
        for key in touched {
            guard let oldS = oldSectionOf[key], let newS = newSectionOf[key] else { continue }
            // Old walk: ranks of affected stayers, and blocks of unaffected rows (rank, old position, length).
            let affectedOld = slice(oldByPosition, oldStarts[oldS].start..<oldEnd(oldS))
            var rank: [ObjectID: Int] = [:]
            var blocks: [(rank: Int, position: Int, length: Int)] = []
            var position = oldStarts[oldS].start
            var next = 0
            for (id, index) in affectedOld {
                if index > position { blocks.append((next, position, index - position)) }
                next += index - position
                if let n = newIndex[id], newKey(n) == key {
                    rank[id] = next
                    next += 1
                }
                position = index + 1
            }
            if oldEnd(oldS) > position { blocks.append((next, position, oldEnd(oldS) - position)) }

            // New walk: unaffected rows in the same order, affected rows at their new positions.
            enum Element {
                case unaffected(rank: Int, oldPosition: Int, newPosition: Int, length: Int)
                case stayer(ObjectID, rank: Int)
            }
            var elements: [Element] = []
            let affectedNew = slice(newByPosition, sectionStarts[newS].start..<newEnd(newS))
            var block = 0
            var usedInBlock = 0
            func take(_ length: Int, at newPosition: Int) {
                var remaining = length
                var at = newPosition
                while remaining > 0 && block < blocks.count {
                    let available = blocks[block].length - usedInBlock
                    let piece = min(available, remaining)
                    elements.append(
                        .unaffected(
                            rank: blocks[block].rank + usedInBlock, oldPosition: blocks[block].position + usedInBlock,
                            newPosition: at, length: piece))
                    remaining -= piece
                    at += piece
                    usedInBlock += piece
                    if usedInBlock == blocks[block].length {
                        block += 1
                        usedInBlock = 0
                    }
                }
            }
            position = sectionStarts[newS].start
            for (id, index) in affectedNew {
                take(index - position, at: position)
                if let r = rank[id] { elements.append(.stayer(id, rank: r)) }
                position = index + 1
            }
            take(newEnd(newS) - position, at: position)

            // Runs of consecutive ranks, weighted exactly as ChangeSet weighs them (the same builder).
            var runs = WeightedRuns<Element>(itemCount: itemCount)
            for element in elements {
                switch element {
                case .unaffected(let r, let oldPosition, _, let length):
                    let unchanged = length - (inPlace.isEmpty ? 0 : inPlaceCount(oldPosition..<(oldPosition + length)))
                    runs.append(rank: r, count: length, unchanged: unchanged, member: element)
                case .stayer(let id, let r):
                    runs.append(rank: r, unchanged: affected[id]?.keys.isEmpty ?? true ? 1 : 0, member: element)
                }
            }
            for element in runs.movedMembers() {
                switch element {
                case .stayer(let id, _): moved.insert(id)
                case .unaffected(_, let oldPosition, let newPosition, let length):
                    if !inPlace.isEmpty {
                        let range = oldPosition..<(oldPosition + length)
                        let first = inPlace.partitionPoint { $0.old < range.lowerBound }
                        for row in inPlace[first...].prefix(while: { range.contains($0.old) }) {
                            movedInPlace.insert(row.old)
                        }
                    }
                    for offset in 0..<length {
                        movedUnaffected.append(
                            (
                                id(rows.pk(at: newPosition + offset), plan),
                                path(ofRowAt: oldPosition + offset, in: oldStarts),
                                path(ofRowAt: newPosition + offset, in: sectionStarts)
                            ))
                    }
                }
            }
        }

        // Fates of the affected rows, lowered to the strict batch.
        for (id, index) in oldIndex where newIndex[id] == nil {
            if newSectionOf[oldKey(index)] != nil { batch.deletes.append((id, path(ofRowAt: index, in: oldStarts))) }
        }
        for (id, index) in newIndex {
            let to = path(ofRowAt: index, in: sectionStarts)
            guard let old = oldIndex[id] else {
                if oldSectionOf[newKey(index)] != nil { batch.inserts.append((id, to)) }
                continue
            }
            let from = path(ofRowAt: old, in: oldStarts)
            let (fromKey, toKey) = (oldKey(old), newKey(index))
            let oldSurvives = newSectionOf[fromKey] != nil
            let newSurvives = oldSectionOf[toKey] != nil
            if fromKey != toKey || moved.contains(id) {
                switch (oldSurvives, newSurvives) {
                case (true, true): batch.moves.append((id, from, to))
                case (true, false): batch.deletes.append((id, from))
                case (false, true): batch.inserts.append((id, to))
                case (false, false): break
                }
            } else if !(affected[id]?.keys.isEmpty ?? true) && oldSurvives && newSurvives {
                batch.updates.append((id, from, to))
            }
        }
        for row in inPlace where !movedInPlace.contains(row.old) {
            guard let index = rows.position(of: row.id.primaryKey) else { continue }
            batch.updates.append(
                (row.id, path(ofRowAt: row.old, in: oldStarts), path(ofRowAt: index, in: sectionStarts)))
        }
        batch.moves += movedUnaffected
        batch.deletes.sort { $0.1 > $1.1 }
        batch.sectionDeletes.sort { $0.0 > $1.0 }
        batch.sectionInserts.sort { $0.0 < $1.0 }
        batch.inserts.sort { $0.1 < $1.1 }
        batch.moves.sort { $0.2 < $1.2 }
        batch.updates.sort { $0.2 < $1.2 }
        return batch
    }

    /// Delivers an incremental batch in the contract's causal order.
    func deliver(_ batch: IncrementalBatch, userDriven: Bool) {
        let receivers = receivers(userDriven: userDriven)
        guard !batch.isEmpty, !receivers.isEmpty else { return }
        isUserDrivenBatch = userDriven
        defer { isUserDrivenBatch = false }
        for receiver in receivers {
            receiver.controllerWillChangeContent(self)
            for (id, at) in batch.deletes {
                receiver.controller(self, didChange: id, at: at, for: .delete, newIndexPath: nil)
            }
            for (index, info) in batch.sectionDeletes {
                receiver.controller(self, didChange: info, atSectionIndex: index, for: .delete)
            }
            for (index, info) in batch.sectionInserts {
                receiver.controller(self, didChange: info, atSectionIndex: index, for: .insert)
            }
            for (id, at) in batch.inserts {
                receiver.controller(self, didChange: id, at: nil, for: .insert, newIndexPath: at)
            }
            for (id, from, to) in batch.moves {
                receiver.controller(self, didChange: id, at: from, for: .move, newIndexPath: to)
            }
            for (id, from, to) in batch.updates {
                receiver.controller(self, didChange: id, at: from, for: .update, newIndexPath: to)
            }
            receiver.controllerDidChangeContent(self)
        }
    }
}
