/// A row's place in a controller's order: its primary key and its first two sort keys as order-preserving words, so
/// that a search through the order compares words in the chunk it reads instead of looking each row's keys up.
///
/// A word is ``opaque`` when its key has no such form (nil, a string, a value not of its column's type): a
/// comparison then reads the keys from the row table. A real key whose word happens to equal ``opaque`` is compared
/// the same way, so the marker never changes an answer.
struct RowSlot: Sendable, Equatable {
    static let opaque = UInt64.max

    var pk: UInt64
    var lead: UInt64
    var second: UInt64

    init(pk: UInt64, lead: UInt64 = Self.opaque, second: UInt64 = Self.opaque) {
        self.pk = pk
        self.lead = lead
        self.second = second
    }
}

/// Rows in order, in chunks of at most `maximumChunk`: an insert or removal moves one chunk's tail and updates the
/// chunks' start positions; a batch rebuilds only the chunks it touches.
///
/// A search goes down three levels: the chunks' last rows (``lasts``), the chunk's samples (the last row of each
/// group of ``sampleStride`` rows, ``samples``), then the group. The fences and samples of all chunks are a
/// sixteenth of the rows and stay in the cache, so a search reads a group of a chunk (a few cache lines) where a
/// binary search of the whole chunk missed the cache at most of its ten steps.
struct RowOrder: Sendable {
    static let fillChunk = 256
    static let maximumChunk = 512
    /// Rows per sampled group.
    static let sampleStride = 16

    private(set) var chunks: [[RowSlot]] = []
    /// The position of each chunk's first row.
    private(set) var starts: [Int] = []
    /// Each chunk's last row, so that finding a chunk does not visit the chunks.
    private(set) var lasts: [RowSlot] = []
    /// Every chunk's samples, the last row of each group of ``sampleStride`` rows (the chunk's last row ends the
    /// last group), in one array with ``samplesPerChunk`` places a chunk: chunk c's from `c * samplesPerChunk`,
    /// as many as its rows make groups. An array per chunk was a header to read before the samples' own lines could
    /// be asked for (a cache miss in turn, on each chunk a batch visits) and a reference taken and dropped.
    private(set) var samples: [RowSlot] = []
    /// Places for one chunk's samples: enough for the largest chunk.
    static let samplesPerChunk = maximumChunk / sampleStride
    private(set) var count = 0

    init() {}

    /// Chunks of `slots`, each copied in one piece.
    init(_ slots: [RowSlot]) {
        var start = 0
        while start < slots.count {
            let end = min(slots.count, start + Self.fillChunk)
            starts.append(start)
            chunks.append(Self.chunk(slots[start..<end]))
            lasts.append(slots[end - 1])
            start = end
        }
        count = slots.count
        samples = Array(repeating: RowSlot(pk: 0), count: chunks.count * Self.samplesPerChunk)
        for chunk in chunks.indices { resample(chunk, from: 0) }
    }

    /// How many samples a chunk of `rows` rows has.
    @inline(__always)
    static func sampleCount(_ rows: Int) -> Int { (rows + sampleStride - 1) / sampleStride }

    /// Sets chunk `chunk`'s fence and samples from its rows, after a change to the rows from offset `changed` on:
    /// only the groups from the one holding `changed` are rewritten, the rows before it are where they were.
    private mutating func refresh(_ chunk: Int, from changed: Int = 0) {
        lasts[chunk] = chunks[chunk][chunks[chunk].count - 1]
        resample(chunk, from: changed / Self.sampleStride)
    }

    /// Rewrites chunk `chunk`'s samples from group `first` on (those before it must be unchanged, and full).
    private mutating func resample(_ chunk: Int, from first: Int) {
        let base = chunk * Self.samplesPerChunk
        chunks[chunk].withUnsafeBufferPointer { rows in
            let needed = Self.sampleCount(rows.count)
            precondition(needed <= Self.samplesPerChunk, "a chunk of \(rows.count) rows is over the maximum")
            samples.withUnsafeMutableBufferPointer { samples in
                for group in min(first, needed)..<needed {
                    samples[base + group] = rows[min(rows.count, (group + 1) * Self.sampleStride) - 1]
                }
            }
        }
    }

    /// Chunk `chunk`'s samples, for a chunk of `rows` rows, in `all` (the whole ``samples`` array).
    @inline(__always)
    static func samples(
        of chunk: Int, rows: Int, in all: UnsafeBufferPointer<RowSlot>
    ) -> UnsafeBufferPointer<RowSlot> {
        let base = chunk * samplesPerChunk
        return UnsafeBufferPointer(rebasing: all[base..<(base + sampleCount(rows))])
    }

    /// Places for `chunks` chunks' samples, to insert into ``samples``.
    static func samplePlaces(chunks: Int = 1) -> Repeated<RowSlot> {
        repeatElement(RowSlot(pk: 0), count: chunks * samplesPerChunk)
    }

    /// The first row of chunk `chunk` (whose rows are `slots`) that does not satisfy `isBefore`, found through the
    /// chunk's samples and then within one group.
    @inline(__always)
    func partitionPoint(
        inChunk chunk: Int, _ slots: UnsafeBufferPointer<RowSlot>, _ isBefore: (RowSlot) -> Bool
    ) -> Int {
        let group = samples.withUnsafeBufferPointer {
            Self.samples(of: chunk, rows: slots.count, in: $0).partitionPoint(isBefore)
        }
        let low = group * Self.sampleStride
        guard low < slots.count else { return slots.count }
        let high = min(low + Self.sampleStride, slots.count)
        return low + UnsafeBufferPointer(rebasing: slots[low..<high]).partitionPoint(isBefore)
    }

    /// Room each chunk is made with beyond its rows, so that a batch that adds a few rows to it grows it in place.
    static let slack = 32

    /// A chunk holding `slots`, with ``slack`` room to grow.
    static func chunk(_ slots: ArraySlice<RowSlot>) -> [RowSlot] {
        var chunk: [RowSlot] = []
        chunk.reserveCapacity(slots.count + slack)
        chunk += slots
        return chunk
    }

    /// An order of bare primary keys (no inline words): every comparison reads the keys elsewhere.
    init(_ pks: [UInt64]) {
        self.init(pks.map { RowSlot(pk: $0) })
    }

    /// The chunk holding `position` (which must be in range, or `count` for the end).
    func locate(_ position: Int) -> (chunk: Int, offset: Int) {
        let chunk = max(0, starts.partitionPoint { $0 <= position } - 1)
        return (chunk, position - (starts.isEmpty ? 0 : starts[chunk]))
    }

    /// The primary key at `position`.
    subscript(position: Int) -> UInt64 { slot(at: position).pk }

    func slot(at position: Int) -> RowSlot {
        let (chunk, offset) = locate(position)
        return chunks[chunk][offset]
    }

    /// The first position whose row does not satisfy `isBefore`, which must hold for a prefix of the order.
    func partitionPoint(_ isBefore: (RowSlot) -> Bool) -> Int {
        // The first chunk whose last row is not before, then within it.
        let low = chunkIndex(isBefore)
        guard low < chunks.count else { return count }
        return starts[low] + chunks[low].withUnsafeBufferPointer { partitionPoint(inChunk: low, $0, isBefore) }
    }

    /// The first chunk whose last row does not satisfy `isBefore` (which must hold for a prefix of the order).
    func chunkIndex(_ isBefore: (RowSlot) -> Bool) -> Int { lasts.partitionPoint(isBefore) }

    /// ``partitionPoint(_:)`` for each of `targets` at once: the first position whose row does not come before the
    /// target. The searches are grouped by the chunk the fences put them in, so that each chunk's samples are read
    /// while they are in the cache.
    ///
    /// - Parameters:
    ///   - targets: The slots to find the places of.
    ///   - words: How many leading words of a slot, then its primary key, decide the order (0, 1 or 2): a target
    ///     whose words are all real (not ``RowSlot/opaque``) is compared word by word inline, and `isBefore` is
    ///     asked only against a row whose deciding word is opaque. 0: every comparison asks `isBefore`.
    ///   - isBefore: Whether a row comes before target `event` (must hold for a prefix of the order).
    /// - Returns: Each search's point, and the primary key of the row there, read while the chunk is in the cache (0
    ///   after the last row: the fences put every other point inside the chunk searched).
    func partitionPoints(
        of targets: [RowSlot], words: Int, _ isBefore: (RowSlot, Int) -> Bool
    ) -> (points: [Int], rows: [UInt64]) {
        let events = targets.count
        var points = Array(repeating: count, count: events)
        var rows = Array(repeating: 0 as UInt64, count: events)
        guard events > 0, !chunks.isEmpty else { return (points, rows) }
        /// The first of `slots` (sorted) that does not come before target `event`.
        func search(_ slots: UnsafeBufferPointer<RowSlot>, _ event: Int) -> Int {
            let target = targets[event]
            let opaque = RowSlot.opaque
            switch words {
            case 2 where target.lead != opaque && target.second != opaque:
                if let point = Self.wordSearch(slots, target, secondDecides: true) { return point }
                return slots.partitionPoint { slot in
                    if slot.lead != target.lead {
                        return slot.lead != opaque ? slot.lead < target.lead : isBefore(slot, event)
                    }
                    if slot.second != target.second {
                        return slot.second != opaque ? slot.second < target.second : isBefore(slot, event)
                    }
                    return slot.pk < target.pk
                }
            case 1 where target.lead != opaque:
                if let point = Self.wordSearch(slots, target, secondDecides: false) { return point }
                return slots.partitionPoint { slot in
                    if slot.lead != target.lead {
                        return slot.lead != opaque ? slot.lead < target.lead : isBefore(slot, event)
                    }
                    return slot.pk < target.pk
                }
            default:
                return slots.partitionPoint { isBefore($0, event) }
            }
        }
        // Each search's chunk (chunks.count: after every row), then the searches grouped by chunk.
        var chunkOf = Array(repeating: 0, count: events)
        var firsts = Array(repeating: 0, count: chunks.count + 3)
        lasts.withUnsafeBufferPointer { lasts in
            for event in 0..<events {
                let chunk = search(lasts, event)
                chunkOf[event] = chunk
                firsts[chunk + 2] += 1
            }
        }
        for chunk in 0...chunks.count { firsts[chunk + 2] += firsts[chunk + 1] }
        var grouped = Array(repeating: 0, count: events)
        for event in 0..<events {
            grouped[firsts[chunkOf[event] + 1]] = event
            firsts[chunkOf[event] + 1] += 1
        }
        // firsts[c] is now where chunk c's searches begin in `grouped`. Chunk by chunk: the chunk's samples read
        // through (a few cache lines, streamed), each search's group found among them, every group's cache lines
        // loaded in one pass of loads that do not wait for each other (the order is cold after other work: one
        // search's dependent misses, a group after a sample after a fence, cost ~600 ns), then the searches.
        var groupOf = Array(repeating: 0, count: events)
        var sum: UInt64 = 0
        let allSamples = samples
        for chunk in chunks.indices where firsts[chunk] < firsts[chunk + 1] {
            let searches = grouped[firsts[chunk]..<firsts[chunk + 1]]
            // The chunk's size from the starts (in the cache), so that its samples are asked for before its rows.
            let size = (chunk + 1 < starts.count ? starts[chunk + 1] : count) - starts[chunk]
            allSamples.withUnsafeBufferPointer { all in
                let samples = Self.samples(of: chunk, rows: size, in: all)
                sum &+= Self.readThrough(samples)
                for event in searches { groupOf[event] = search(samples, event) }
            }
            chunks[chunk].withUnsafeBufferPointer { slots in
                for event in searches {
                    let low = groupOf[event] * Self.sampleStride
                    sum &+= Self.readThrough(
                        UnsafeBufferPointer(rebasing: slots[low..<min(low + Self.sampleStride, slots.count)]))
                }
                for event in searches {
                    let low = groupOf[event] * Self.sampleStride
                    let point =
                        low >= slots.count
                        ? slots.count
                        : low
                            + search(
                                UnsafeBufferPointer(rebasing: slots[low..<min(low + Self.sampleStride, slots.count)]),
                                event)
                    points[event] = starts[chunk] + point
                    if point < slots.count { rows[event] = slots[point].pk }
                }
            }
        }
        keepAlive(sum)
        return (points, rows)
    }

    /// The first of `slots` (sorted) that does not come before `target`, compared by their words (the lead, the
    /// second when `secondDecides`, then the primary key), or nil at the first slot whose deciding word is opaque.
    ///
    /// Without a branch on the comparisons: the range halves whatever they answer, and the answer (0 or 1, from
    /// the flags) only picks the half's base. These searches run over rows loaded into the cache beforehand, where
    /// a branch on each comparison was mispredicted about half the time (a third of a batch's mispredictions,
    /// by callgrind's branch simulation).
    @inline(__always)
    private static func wordSearch(
        _ slots: UnsafeBufferPointer<RowSlot>, _ target: RowSlot, secondDecides: Bool
    ) -> Int? {
        let opaque = RowSlot.opaque
        /// 1 when `slot` comes before the target, else 0.
        @inline(__always) func before(_ slot: RowSlot) -> Int {
            let lower = slot.pk < target.pk ? 1 : 0
            let tail: Int
            if secondDecides {
                tail = (slot.second < target.second ? 1 : 0) | ((slot.second == target.second ? 1 : 0) & lower)
            } else {
                tail = lower
            }
            return (slot.lead < target.lead ? 1 : 0) | ((slot.lead == target.lead ? 1 : 0) & tail)
        }
        @inline(__always) func isOpaque(_ slot: RowSlot) -> Bool {
            slot.lead == opaque || (secondDecides && slot.second == opaque)
        }
        var base = 0
        var length = slots.count
        guard length > 0 else { return 0 }
        // The answer is in base...base + length.
        while length > 1 {
            let half = length >> 1
            let slot = slots[base + half - 1]
            if isOpaque(slot) { return nil }
            base &+= half & (0 &- before(slot))
            length &-= half
        }
        let slot = slots[base]
        if isOpaque(slot) { return nil }
        return base &+ before(slot)
    }

    /// Reads every cache line of `rows` in order, returning a sum of what it read.
    @inline(__always)
    private static func readThrough(_ rows: UnsafeBufferPointer<RowSlot>) -> UInt64 {
        var sum: UInt64 = 0
        var index = 0
        // Two 24-byte slots are 48 bytes: every 64-byte line holds a slot's first word.
        while index < rows.count {
            sum &+= rows[index].pk
            index += 2
        }
        if let last = rows.last { sum &+= last.pk }
        return sum
    }

    /// The position of `pk`, by a scan of every chunk: the fallback when the order and the keys disagree.
    func firstIndex(of pk: UInt64) -> Int? {
        for (i, chunk) in chunks.enumerated() {
            if let offset = chunk.firstIndex(where: { $0.pk == pk }) { return starts[i] + offset }
        }
        return nil
    }

    mutating func insert(_ slot: RowSlot, at position: Int) {
        guard !chunks.isEmpty else {
            chunks = [[slot]]
            starts = [0]
            lasts = [slot]
            samples = Array(Self.samplePlaces())
            count = 1
            resample(0, from: 0)
            return
        }
        var (chunk, offset) = locate(position)
        if offset > chunks[chunk].count {
            // The end of the last chunk.
            chunk = chunks.count - 1
            offset = chunks[chunk].count
        }
        chunks[chunk].insert(slot, at: offset)
        count += 1
        for later in (chunk + 1)..<starts.count { starts[later] += 1 }
        if chunks[chunk].count > Self.maximumChunk {
            let tail = Self.chunk(chunks[chunk][Self.fillChunk...])
            chunks[chunk].removeSubrange(Self.fillChunk...)
            chunks.insert(tail, at: chunk + 1)
            starts.insert(starts[chunk] + Self.fillChunk, at: chunk + 1)
            lasts.insert(tail[tail.count - 1], at: chunk + 1)
            samples.insert(contentsOf: Self.samplePlaces(), at: (chunk + 1) * Self.samplesPerChunk)
            resample(chunk + 1, from: 0)
        }
        refresh(chunk)
    }

    @discardableResult
    mutating func remove(at position: Int) -> RowSlot {
        let (chunk, offset) = locate(position)
        let slot = chunks[chunk].remove(at: offset)
        count -= 1
        for later in (chunk + 1)..<starts.count { starts[later] -= 1 }
        if chunks[chunk].isEmpty {
            chunks.remove(at: chunk)
            starts.remove(at: chunk)
            lasts.remove(at: chunk)
            samples.removeSubrange((chunk * Self.samplesPerChunk)..<((chunk + 1) * Self.samplesPerChunk))
        } else if chunk + 1 < chunks.count, chunks[chunk].count + chunks[chunk + 1].count <= Self.fillChunk {
            // Keep chunks from thinning out after many removals. The merged chunk ends where the next one did.
            chunks[chunk] += chunks[chunk + 1]
            chunks.remove(at: chunk + 1)
            starts.remove(at: chunk + 1)
            lasts.remove(at: chunk + 1)
            samples.removeSubrange(((chunk + 1) * Self.samplesPerChunk)..<((chunk + 2) * Self.samplesPerChunk))
            refresh(chunk)
        } else {
            refresh(chunk)
        }
        return slot
    }

    /// Removes the rows at `removed` (ascending positions) and inserts `inserted` before the old rows at their
    /// points (ascending; rows with one point in their order), in place in the chunks the batch touches (each
    /// compacted, then filled from its end), without copying the others. Returns each inserted row's new position,
    /// in the order given.
    mutating func apply(removing removed: [Int], inserting inserted: [(point: Int, slot: RowSlot)]) -> [Int] {
        var positions = Array(repeating: 0, count: inserted.count)
        guard !chunks.isEmpty else {
            // An empty order: the inserted rows are the order.
            for i in inserted.indices { positions[i] = i }
            self = RowOrder(inserted.map(\.slot))
            return positions
        }
        // Where each chunk's rows first changed (an offset among its old rows), Int.max for a chunk not touched.
        var changedFrom = Array(repeating: Int.max, count: chunks.count)
        var total = 0
        var nextRemoved = 0
        var nextInserted = 0
        // The chunks' sizes come from their starts, and each start is rewritten as the pass leaves it: a chunk the
        // batch does not touch is not visited (its header is a cache miss, and each visit of a chunk in an array of
        // chunks a retain and a release).
        for c in chunks.indices {
            let start = starts[c]
            let end = c + 1 < starts.count ? starts[c + 1] : count
            let oldCount = end - start
            starts[c] = total
            var removedEnd = nextRemoved
            while removedEnd < removed.count && removed[removedEnd] < end { removedEnd += 1 }
            var insertedEnd = nextInserted
            let isLast = c == chunks.count - 1
            while insertedEnd < inserted.count && (isLast || inserted[insertedEnd].point < end) { insertedEnd += 1 }
            let removals = removed[nextRemoved..<removedEnd]
            let insertions = inserted[nextInserted..<insertedEnd]
            nextRemoved = removedEnd
            nextInserted = insertedEnd
            guard !removals.isEmpty || !insertions.isEmpty else {
                total += oldCount
                continue
            }
            changedFrom[c] = min(removals.first ?? end, insertions.first?.point ?? end) - start
            let newCount = oldCount - removals.count + insertions.count
            if chunks[c].capacity < newCount { chunks[c].reserveCapacity(newCount + Self.slack) }
            Self.rearrange(&chunks[c], removing: removals, inserting: insertions, from: start) { i, position in
                positions[i] = total + position
            }
            total += newCount
        }
        rebalance(changedFrom)
        return positions
    }

    /// Removes the rows at global positions `removals` (ascending) from `chunk` (starting at `start`) and puts
    /// `insertions` (global points among the old rows, ascending) before the old rows at their points, moving each
    /// old row at most once and only when its place changes; `placed` gets each one's index in `inserted` and its
    /// position in the chunk.
    ///
    /// The old rows between two events (a removal or an insertion) form a stretch that shifts by the insertions
    /// minus the removals before it. Stretches shifting left move first, from the front (each lands on rows before
    /// it that are gone or moved already), then those shifting right, from the back; the new rows are written
    /// last, into the gaps. A removal and an insertion in one chunk leave the rows after both where they were, where
    /// compacting and then filling moved every row after the first event twice (a batch's chunks were most of its
    /// copying).
    private static func rearrange(
        _ chunk: inout [RowSlot], removing removals: ArraySlice<Int>,
        inserting insertions: ArraySlice<(point: Int, slot: RowSlot)>, from start: Int,
        placed: (Int, Int) -> Void
    ) {
        let oldCount = chunk.count
        let growth = insertions.count - removals.count
        if growth > 0 { chunk.append(contentsOf: repeatElement(RowSlot(pk: 0), count: growth)) }
        chunk.withUnsafeMutableBufferPointer { rows in
            let base = rows.baseAddress!
            /// Moves `count` rows at `from` by `shift`.
            func move(_ from: Int, _ count: Int, by shift: Int) {
                guard count > 0 && shift != 0 else { return }
                UnsafeMutableRawPointer(base + from + shift).copyMemory(
                    from: base + from, byteCount: count * MemoryLayout<RowSlot>.stride)
            }
            // Front to back: each stretch's start, end and shift; those shifting left move now.
            var from = 0
            var shift = 0
            var r = removals.startIndex
            var i = insertions.startIndex
            while true {
                let removal = r < removals.endIndex ? removals[r] - start : oldCount
                let insertion = i < insertions.endIndex ? insertions[i].point - start : oldCount
                let end = min(removal, insertion)
                if shift < 0 { move(from, end - from, by: shift) }
                if r == removals.endIndex && i == insertions.endIndex { break }
                // An insertion goes before the old row at its point, so before a removal of that row.
                if insertion <= removal {
                    shift += 1
                    i += 1
                    from = end
                } else {
                    shift -= 1
                    r += 1
                    from = end + 1
                }
            }
            // Back to front: the stretches shifting right (the last one's shift is the chunk's growth).
            var end = oldCount
            r = removals.endIndex
            i = insertions.endIndex
            shift = growth
            while true {
                let removal = r > removals.startIndex ? removals[r - 1] - start : -1
                let insertion = i > insertions.startIndex ? insertions[i - 1].point - start : -1
                // The stretch begins after the last removal before it, or at the last insertion point.
                let begin = removal >= insertion ? removal + 1 : insertion
                if shift > 0 { move(begin, end - begin, by: shift) }
                if r == removals.startIndex && i == insertions.startIndex { break }
                if removal >= insertion {
                    shift += 1
                    r -= 1
                    end = removal
                } else {
                    shift -= 1
                    i -= 1
                    end = insertion
                }
            }
            // The new rows, each after the old rows before its point that stay and the new rows before it.
            var removedBefore = removals.startIndex
            for k in insertions.indices {
                let (point, slot) = insertions[k]
                while removedBefore < removals.endIndex && removals[removedBefore] < point { removedBefore += 1 }
                let at = point - start - (removedBefore - removals.startIndex) + (k - insertions.startIndex)
                base[at] = slot
                placed(k, at)
            }
        }
        if growth < 0 { chunk.removeLast(-growth) }
    }

    /// After a batch: drops emptied chunks, joins each touched chunk to the one before when both are small
    /// (removals thin chunks out), splits those over the maximum, and recomputes the starts and fences.
    private mutating func rebalance(_ changedFrom: [Int]) {
        let touched = changedFrom.map { $0 != Int.max }
        // The usual batch leaves every chunk within its bounds: only the touched chunks' fences and samples change.
        var structural = false
        for c in touched.indices where touched[c] {
            let size = chunks[c].count
            if size == 0 || size > Self.maximumChunk || (c > 0 && chunks[c - 1].count + size <= Self.fillChunk) {
                structural = true
                break
            }
        }
        if !structural {
            for c in touched.indices where touched[c] { refresh(c, from: changedFrom[c]) }
            count = starts[starts.count - 1] + chunks[chunks.count - 1].count
            return
        }
        var rebuilt: [[RowSlot]] = []
        rebuilt.reserveCapacity(chunks.count + 1)
        // The old chunk whose samples each rebuilt chunk keeps, nil where the chunk changed (made once it is final).
        var rebuiltSamples: [Int?] = []
        rebuiltSamples.reserveCapacity(chunks.count + 1)
        for (c, chunk) in chunks.enumerated() {
            if chunk.isEmpty { continue }
            if touched[c], let last = rebuilt.last, last.count + chunk.count <= Self.fillChunk {
                rebuilt[rebuilt.count - 1] += chunk
                rebuiltSamples[rebuiltSamples.count - 1] = nil
            } else if chunk.count > Self.maximumChunk {
                var start = 0
                while start < chunk.count {
                    let end = chunk.count - start <= Self.maximumChunk ? chunk.count : start + Self.fillChunk
                    rebuilt.append(Self.chunk(chunk[start..<end]))
                    rebuiltSamples.append(nil)
                    start = end
                }
            } else {
                rebuilt.append(chunk)
                rebuiltSamples.append(touched[c] ? nil : c)
            }
        }
        chunks = rebuilt
        let oldSamples = samples
        samples = Array(Self.samplePlaces(chunks: chunks.count))
        for (c, kept) in rebuiltSamples.enumerated() {
            if let kept {
                let (from, to) = (kept * Self.samplesPerChunk, c * Self.samplesPerChunk)
                samples[to..<(to + Self.samplesPerChunk)] = oldSamples[from..<(from + Self.samplesPerChunk)]
            } else {
                resample(c, from: 0)
            }
        }
        starts = []
        starts.reserveCapacity(chunks.count)
        lasts = []
        lasts.reserveCapacity(chunks.count)
        count = 0
        for chunk in chunks {
            starts.append(count)
            lasts.append(chunk[chunk.count - 1])
            count += chunk.count
        }
    }

    #if DEBUG
    /// Checks the bookkeeping: chunk starts are the running counts, each fence is its chunk's last row, no chunk
    /// is empty or over the maximum, and the count adds up.
    func _checkInvariants() {
        precondition(
            chunks.count == starts.count && chunks.count == lasts.count
                && chunks.count * Self.samplesPerChunk == samples.count,
            "chunk tables disagree")
        var position = 0
        for (i, chunk) in chunks.enumerated() {
            precondition(!chunk.isEmpty, "chunk \(i) is empty")
            precondition(chunk.count <= Self.maximumChunk, "chunk \(i) holds \(chunk.count) rows")
            precondition(starts[i] == position, "chunk \(i) starts at \(starts[i]), expected \(position)")
            precondition(lasts[i] == chunk[chunk.count - 1], "chunk \(i)'s fence is not its last row")
            // Derived apart from resample(_:of:from:): every row that ends a group, and the chunk's last one.
            let expected = chunk.indices.filter { ($0 + 1) % Self.sampleStride == 0 || $0 == chunk.count - 1 }
            let base = i * Self.samplesPerChunk
            precondition(
                Array(samples[base..<(base + expected.count)]) == expected.map { chunk[$0] },
                "chunk \(i)'s samples are not its rows'")
            position += chunk.count
        }
        precondition(position == count, "the chunks hold \(position) rows, count says \(count)")
    }
    #endif

    /// Calls `body` with each chunk in order.
    func forEachChunk(_ body: ([RowSlot]) -> Void) {
        for chunk in chunks { body(chunk) }
    }

    /// The primary keys at `range`, in order.
    func keys(in range: Range<Int>) -> [UInt64] {
        var result: [UInt64] = []
        result.reserveCapacity(range.count)
        guard !range.isEmpty else { return result }
        var (chunk, offset) = locate(range.lowerBound)
        while result.count < range.count {
            let take = min(chunks[chunk].count - offset, range.count - result.count)
            result += chunks[chunk][offset..<(offset + take)].lazy.map(\.pk)
            chunk += 1
            offset = 0
        }
        return result
    }
}

extension RandomAccessCollection where Index == Int {
    /// The first index whose element does not satisfy `isBefore`, which must hold for a prefix of the collection.
    func partitionPoint(_ isBefore: (Element) -> Bool) -> Int {
        var low = startIndex
        var high = endIndex
        while low < high {
            let mid = low + (high - low) / 2
            if isBefore(self[mid]) { low = mid + 1 } else { high = mid }
        }
        return low
    }
}

/// Keeps a value the optimizer would otherwise drop (a read made only to bring memory into the cache).
@inline(never)
@_optimize(none)
func keepAlive(_ value: UInt64) {}
