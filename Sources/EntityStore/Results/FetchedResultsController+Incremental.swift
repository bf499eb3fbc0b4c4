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

    func sectionKey(of row: Row) -> Value { sectionKey(of: row.keys[...]) }

    /// The section key among a row's `keys` (null without sections).
    func sectionKey(of keys: ArraySlice<Value>) -> Value {
        sectionNameKeyPath == nil ? .null : keys[keys.startIndex]
    }

    /// The section holding the row at `index` in `starts`.
    func section(ofRowAt index: Int, in starts: [(key: Value, start: Int)]) -> Int {
        section(ofRowAt: index, firsts: starts.lazy.map(\.start))
    }

    func path(ofRowAt index: Int, in starts: [(key: Value, start: Int)]) -> ItemPath {
        path(ofRowAt: index, firsts: starts.lazy.map(\.start))
    }

    /// The section holding the row at `index`, from the sections' first rows `firsts` (a batch's many lookups
    /// pass an array of plain integers, not the pairs of a key and a start, whose keys are copied as they are read).
    func section<Firsts: RandomAccessCollection<Int>>(ofRowAt index: Int, firsts: Firsts) -> Int
    where Firsts.Index == Int {
        max(0, firsts.partitionPoint { $0 <= index } - 1)
    }

    func path<Firsts: RandomAccessCollection<Int>>(ofRowAt index: Int, firsts: Firsts) -> ItemPath
    where Firsts.Index == Int {
        let section = section(ofRowAt: index, firsts: firsts)
        return ItemPath(section: section, item: index - (firsts.isEmpty ? 0 : firsts[section]))
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
        let keys = plan.sortKeys.prefix(plan.sectionKeyCount)
        return (0..<count).partitionPoint { section in
            let other = keyAt(section)
            for sortKey in keys {
                let order = sortKey.order(other, key)
                if order != .orderedSame { return order == .orderedAscending }
            }
            return false
        }
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

    /// A section's new walk: a piece of a block of unaffected rows, or a recomputed row that stays in the section.
    enum SectionElement {
        case unaffected(rank: Int, oldPosition: Int, newPosition: Int, length: Int)
        case stayer(place: Int, rank: Int)
    }

    /// Rows a batch recomputed: each ID once, in ID order, with its position before and after the batch (-1: not
    /// in the results). Arrays by the row's place here, not dictionaries by ID: a batch looks each row up several
    /// times, and each lookup hashed and compared an ID.
    struct RecomputedRows {
        var ids: [ObjectID] = []
        var old: [Int] = []
        var new: [Int] = []

        var count: Int { ids.count }
    }

    /// Recomputes the rows of `ids` (distinct: membership, section and sort values): a few rows are moved one by one
    /// (a chunk's memmove each), a batch large against the rows is merged in one pass. Returns where the rows were
    /// before and where they are now, and the positions before the batch of the rows `located` (primary keys of
    /// rows updated in place, found in the same pass as the recomputed ones).
    func updateRows(
        _ ids: [ObjectID], locating located: [UInt64] = [], _ plan: Plan
    ) throws -> (rows: RecomputedRows, located: [Int]) {
        var result = RecomputedRows()
        result.ids = ids.sortedIDs()
        // Read first: when the rows cannot be read, nothing has changed yet.
        let fresh = try newRows(for: result.ids, plan)
        noteEntities(of: fresh.ids, plan)
        let recomputedKeys = result.ids.map { plan.holds($0.entityName) ? $0.primaryKey : 0 }
        result.new = Array(repeating: -1, count: result.count)
        // The fresh rows are those of the IDs that still match, in the same order: their places among the IDs.
        var places: [Int] = []
        places.reserveCapacity(fresh.ids.count)
        var place = 0
        for id in fresh.ids {
            while result.ids[place] != id { place += 1 }
            places.append(place)
        }
        let rebuild = mergeThreshold == 0 || (ids.count >= mergeThreshold && ids.count * 512 >= rows.count)
        let locatedPositions: [Int]
        if !rebuild {
            let before = rows.positions(of: recomputedKeys + located)
            result.old = Array(before[..<result.count])
            locatedPositions = Array(before[result.count...])
            let removed = result.old.filter { $0 >= 0 }.sorted()
            for index in removed.reversed() { removeRow(at: index) }
            for (row, id) in fresh.ids.enumerated() {
                insertRow(Row(id: id, keys: Array(fresh.rows.keys(of: row))), plan)
            }
            let positions = rows.positions(of: fresh.rows.pks)
            for (place, position) in zip(places, positions) { result.new[place] = position }
        } else {
            // The sections' sizes follow from the old sizes and the batch, without a pass over the rows. The old
            // sizes are read before the merge: the last section ends at the row count, which the merge changes.
            var sizes = sectionStarts.indices.map {
                (key: sectionStarts[$0].key, count: sectionEnd($0) - sectionStarts[$0].start)
            }
            let merged = rows.merge(
                locating: recomputedKeys + located, removingFirst: result.count, inserting: fresh.rows)
            result.old = Array(merged.old[..<result.count])
            locatedPositions = Array(merged.old[result.count...])
            for (place, position) in zip(places, merged.new) { result.new[place] = position }
            let removed = result.old.filter { $0 >= 0 }
            if sectionNameKeyPath != nil {
                let firsts = sectionStarts.map(\.start)
                for index in removed { sizes[section(ofRowAt: index, firsts: firsts)].count -= 1 }
            } else if !sizes.isEmpty {
                sizes[0].count -= removed.count
            }
            for row in 0..<fresh.rows.count {
                let key = sectionKey(of: fresh.rows.keys(of: row))
                let section = sectionIndex(for: key, among: sizes.count, plan) { sizes[$0].key }
                if section < sizes.count && sizes[section].key == key {
                    sizes[section].count += 1
                } else {
                    sizes.insert((key, 1), at: section)
                }
            }
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
        #if DEBUG
        // Every section holds a row: starts ascend strictly from 0, and the last one is a row's. (Without sections
        // the one list starts at 0, with or without rows.)
        if sectionNameKeyPath != nil {
            for (index, entry) in sectionStarts.enumerated() {
                let previous = index == 0 ? -1 : sectionStarts[index - 1].start
                precondition(
                    entry.start < rows.count && entry.start > previous && (index > 0 || entry.start == 0),
                    "section \(index) (\(entry.key)) starts at \(entry.start) of \(rows.count) rows")
            }
        }
        #endif
        return (result, locatedPositions)
    }

    /// The affected rows split into the rows to recompute (with whether each one's changes named keys) and the
    /// candidates for updates in place: rows of the entities the results hold whose changes name only keys the plan
    /// does not read. Such a change cannot move the row or put it in or out of the results; a candidate outside them
    /// stays outside, unreported. Both lists keep the rows' ID order.
    func splitInPlace(
        _ affected: AffectedRows, _ plan: Plan
    ) -> (moving: [ObjectID], namedKeys: [Bool], candidates: [ObjectID]) {
        guard let readKeys = plan.readKeys else { return (affected.ids, affected.rows.map { !$0.keys.isEmpty }, []) }
        var moving: [ObjectID] = []
        var namedKeys: [Bool] = []
        var candidates: [ObjectID] = []
        // Whether changes to `keys` leave a row in place, answered once per list: the rows of a batch mostly share
        // their key lists (an update of one attribute names the entity's one list of that name), so the answers
        // are kept by the list's storage (alive in `affected` throughout). Remembering only the last list
        // recomputed the answer whenever two kinds of change alternated, as they do in ID order.
        var answers: [(storage: UnsafePointer<String>, count: Int, answer: Bool)] = []
        func staysInPlace(_ keys: [String]) -> Bool {
            let storage = keys.withUnsafeBufferPointer { $0.baseAddress }
            if let storage, let known = answers.first(where: { $0.storage == storage && $0.count == keys.count }) {
                return known.answer
            }
            let answer = keys.allSatisfy { !$0.utf8.contains(UInt8(ascii: ".")) && !readKeys.contains($0) }
            if let storage, answers.count < 8 { answers.append((storage, keys.count, answer)) }
            return answer
        }
        for (id, row) in zip(affected.ids, affected.rows) {
            guard !row.isStructural, !row.keys.isEmpty, staysInPlace(row.keys) else {
                moving.append(id)
                namedKeys.append(!row.keys.isEmpty)
                continue
            }
            if plan.holds(id.entityName) { candidates.append(id) }
        }
        return (moving, namedKeys, candidates)
    }

    /// Applies the changes of `affected` (in ID order) and computes the batch incrementally.
    func applyIncrementally(_ affected: AffectedRows, _ plan: Plan) throws -> IncrementalBatch {
        batchStartGeneration = resultsGeneration
        let oldStarts = sectionStarts
        let oldCount = rows.count
        // Rows whose changes name no key the plan reads keep their place among the unaffected rows: they are not
        // read, removed or re-inserted, only reported (an update, or a move when their run of rows moves).
        let (moving, movingNamedKeys, candidates) = splitInPlace(affected, plan)
        let candidateKeys = candidates.map(\.primaryKey)
        let (recomputed, candidatePositions) =
            moving.isEmpty
            ? (RecomputedRows(), rows.positions(of: candidateKeys))
            : try updateRows(moving, locating: candidateKeys, plan)
        // The rows updated in place, with their positions before the batch, ascending (candidates not in the results
        // stay out, unreported).
        var inPlace: [(id: ObjectID, old: Int)] = []
        inPlace.reserveCapacity(candidates.count)
        for (id, position) in zip(candidates, candidatePositions) where position >= 0 { inPlace.append((id, position)) }
        inPlace.sortByKey { UInt64($0.old) }
        let (old, new) = (recomputed.old, recomputed.new)
        // Whether each recomputed row's changes named keys (an update is reported for those that stay put): the
        // recomputed rows are the moving ones, in the same (ID) order.
        assert(recomputed.ids == moving || moving.isEmpty, "the recomputed rows are not the moving rows in order")
        let namedKeys = movingNamedKeys
        var movedInPlace = Array(repeating: false, count: inPlace.count)

        let itemCount = oldCount + rows.count + 1
        // Sections matched by key, once per section: each old section's index among the new ones and each new
        // one's among the old (-1: gone, or new).
        var oldToNew = Array(repeating: -1, count: oldStarts.count)
        var newToOld = Array(repeating: -1, count: sectionStarts.count)
        if sectionNameKeyPath == nil {
            if !oldStarts.isEmpty && !sectionStarts.isEmpty { (oldToNew[0], newToOld[0]) = (0, 0) }
        } else {
            var newSectionOf: [Value: Int] = [:]
            for (i, entry) in sectionStarts.enumerated() { newSectionOf[entry.key] = i }
            for (i, entry) in oldStarts.enumerated() {
                guard let n = newSectionOf[entry.key] else { continue }
                (oldToNew[i], newToOld[n]) = (n, i)
            }
        }
        let oldFirsts = oldStarts.map(\.start)
        let newFirsts = sectionStarts.map(\.start)
        func oldEnd(_ s: Int) -> Int { s + 1 < oldFirsts.count ? oldFirsts[s + 1] : oldCount }
        func newEnd(_ s: Int) -> Int { s + 1 < newFirsts.count ? newFirsts[s + 1] : rows.count }
        func oldSection(_ index: Int) -> Int { section(ofRowAt: index, firsts: oldFirsts) }
        func newSection(_ index: Int) -> Int { section(ofRowAt: index, firsts: newFirsts) }

        // The recomputed rows by position, old and new (positions and places): a touched section's are a slice,
        // found by binary search.
        func byPosition(_ positions: [Int]) -> [(position: Int, place: Int)] {
            var sorted: [(position: Int, place: Int)] = []
            sorted.reserveCapacity(positions.count)
            for (place, position) in positions.enumerated() where position >= 0 { sorted.append((position, place)) }
            sorted.sortByKey { UInt64($0.position) }
            return sorted
        }
        let oldByPosition = byPosition(old)
        let newByPosition = byPosition(new)
        func slice(
            _ sorted: [(position: Int, place: Int)], _ range: Range<Int>
        ) -> ArraySlice<(position: Int, place: Int)> {
            sorted[
                sorted.partitionPoint {
                    $0.position < range.lowerBound
                }..<sorted.partitionPoint {
                    $0.position < range.upperBound
                }]
        }
        var batch = IncrementalBatch()
        for (i, entry) in oldStarts.enumerated() where oldToNew[i] < 0 {
            // Every row of a deleted section is affected.
            let items = slice(oldByPosition, entry.start..<oldEnd(i)).map { recomputed.ids[$0.place] }
            let name = Self.name(of: entry.key)
            batch.sectionDeletes.append(
                (i, SectionInfo(name: name, indexTitle: indexTitle(for: name), value: entry.key, objectIDs: items)))
        }
        for (i, entry) in sectionStarts.enumerated() where newToOld[i] < 0 {
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
        var moved = Array(repeating: false, count: recomputed.count)
        var movedUnaffected: [(ObjectID, ItemPath, ItemPath)] = []
        var touched = Array(repeating: false, count: oldStarts.count)
        for place in 0..<recomputed.count where old[place] >= 0 && new[place] >= 0 {
            let s = oldSection(old[place])
            if oldToNew[s] == newSection(new[place]) { touched[s] = true }
        }
        var rank = Array(repeating: -1, count: recomputed.count)
        // The walks' lists, emptied for each section and kept for the next (grown from empty per section, they were
        // a fifth of a sectioned batch).
        var blocks: [(rank: Int, position: Int, length: Int)] = []
        var elements: [SectionElement] = []
        var runs = WeightedRuns<SectionElement>(itemCount: itemCount)
        for oldS in touched.indices where touched[oldS] {
            let newS = oldToNew[oldS]
            guard newS >= 0 else { continue }
            // Old walk: ranks of recomputed stayers, and blocks of unaffected rows (rank, old position, length).
            blocks.removeAll(keepingCapacity: true)
            var position = oldFirsts[oldS]
            var next = 0
            for (index, place) in slice(oldByPosition, oldFirsts[oldS]..<oldEnd(oldS)) {
                if index > position { blocks.append((next, position, index - position)) }
                next += index - position
                if new[place] >= 0 && newSection(new[place]) == newS {
                    rank[place] = next
                    next += 1
                }
                position = index + 1
            }
            if oldEnd(oldS) > position { blocks.append((next, position, oldEnd(oldS) - position)) }

            // New walk: unaffected rows in the same order, recomputed rows at their new positions.
            elements.removeAll(keepingCapacity: true)
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
            position = newFirsts[newS]
            for (index, place) in slice(newByPosition, newFirsts[newS]..<newEnd(newS)) {
                take(index - position, at: position)
                if rank[place] >= 0 { elements.append(.stayer(place: place, rank: rank[place])) }
                position = index + 1
            }
            take(newEnd(newS) - position, at: position)

            // Runs of consecutive ranks, weighted exactly as ChangeSet weighs them (the same builder).
            runs.removeAll()
            // The pieces of unaffected rows come in the order of their old positions (the walk takes the blocks in
            // order): the rows updated in place among them are counted by a cursor, not searched for per piece.
            var cursor = inPlace.isEmpty ? 0 : inPlace.partitionPoint { $0.old < oldFirsts[oldS] }
            for element in elements {
                switch element {
                case .unaffected(let r, let oldPosition, _, let length):
                    while cursor < inPlace.count && inPlace[cursor].old < oldPosition { cursor += 1 }
                    var end = cursor
                    while end < inPlace.count && inPlace[end].old < oldPosition + length { end += 1 }
                    runs.append(rank: r, count: length, unchanged: length - (end - cursor), member: element)
                    cursor = end
                case .stayer(let place, let r):
                    runs.append(rank: r, unchanged: namedKeys[place] ? 0 : 1, member: element)
                }
            }
            runs.forEachMovedMember { element in
                switch element {
                case .stayer(let place, _): moved[place] = true
                case .unaffected(_, let oldPosition, let newPosition, let length):
                    if !inPlace.isEmpty {
                        var row = inPlace.partitionPoint { $0.old < oldPosition }
                        while row < inPlace.count && inPlace[row].old < oldPosition + length {
                            movedInPlace[row] = true
                            row += 1
                        }
                    }
                    for offset in 0..<length {
                        movedUnaffected.append(
                            (
                                id(rows.pk(at: newPosition + offset), plan),
                                path(ofRowAt: oldPosition + offset, firsts: oldFirsts),
                                path(ofRowAt: newPosition + offset, firsts: newFirsts)
                            ))
                    }
                }
            }
        }

        // Fates of the recomputed rows, lowered to the strict batch.
        for place in 0..<recomputed.count {
            let id = recomputed.ids[place]
            switch (old[place], new[place]) {
            case (let index, -1) where index >= 0:
                if oldToNew[oldSection(index)] >= 0 {
                    batch.deletes.append((id, path(ofRowAt: index, firsts: oldFirsts)))
                }
            case (-1, let index) where index >= 0:
                if newToOld[newSection(index)] >= 0 {
                    batch.inserts.append((id, path(ofRowAt: index, firsts: newFirsts)))
                }
            case (let before, let after) where before >= 0 && after >= 0:
                let from = path(ofRowAt: before, firsts: oldFirsts)
                let to = path(ofRowAt: after, firsts: newFirsts)
                let oldSurvives = oldToNew[from.section] >= 0
                let newSurvives = newToOld[to.section] >= 0
                if oldToNew[from.section] != to.section || moved[place] {
                    switch (oldSurvives, newSurvives) {
                    case (true, true): batch.moves.append((id, from, to))
                    case (true, false): batch.deletes.append((id, from))
                    case (false, true): batch.inserts.append((id, to))
                    case (false, false): break
                    }
                } else if namedKeys[place] && oldSurvives && newSurvives {
                    batch.updates.append((id, from, to))
                }
            default:
                break  // neither before nor after
            }
        }
        // Rows updated in place keep their order among the unaffected rows: the new position of one is its rank
        // among them (its old position less the recomputed rows removed before it) plus the recomputed rows now
        // before it, found by walking both sorted lists along (no search of the order per row).
        var removedBefore = 0
        var insertedBefore = 0
        for (row, entry) in inPlace.enumerated() {
            while removedBefore < oldByPosition.count && oldByPosition[removedBefore].position < entry.old {
                removedBefore += 1
            }
            let rank = entry.old - removedBefore
            while insertedBefore < newByPosition.count
                && newByPosition[insertedBefore].position <= rank + insertedBefore
            {
                insertedBefore += 1
            }
            guard !movedInPlace[row] else { continue }
            batch.updates.append(
                (
                    entry.id, path(ofRowAt: entry.old, firsts: oldFirsts),
                    path(ofRowAt: rank + insertedBefore, firsts: newFirsts)
                ))
        }
        batch.moves += movedUnaffected
        batch.deletes.sortByKey { ~$0.1.orderKey }
        batch.sectionDeletes.sort { $0.0 > $1.0 }
        batch.sectionInserts.sort { $0.0 < $1.0 }
        batch.inserts.sortByKey { $0.1.orderKey }
        batch.moves.sortByKey { $0.2.orderKey }
        batch.updates.sortByKey { $0.2.orderKey }
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

extension ItemPath {
    /// The path as one integer in the paths' order (section, then item), for sorting a batch's changes as plain
    /// integers. A controller's sections and rows are fewer than 2³² each (its rows are in memory).
    var orderKey: UInt64 {
        UInt64(UInt32(truncatingIfNeeded: section)) << 32 | UInt64(UInt32(truncatingIfNeeded: item))
    }
}
