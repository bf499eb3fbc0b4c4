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
struct RowOrder: Sendable {
    static let fillChunk = 1024
    static let maximumChunk = 2048

    private(set) var chunks: [[RowSlot]] = []
    /// The position of each chunk's first row.
    private(set) var starts: [Int] = []
    /// Each chunk's last row, so that finding a chunk does not visit the chunks.
    private(set) var lasts: [RowSlot] = []
    private(set) var count = 0

    init() {}

    /// Chunks of `slots`, each copied in one piece.
    init(_ slots: [RowSlot]) {
        var start = 0
        while start < slots.count {
            let end = min(slots.count, start + Self.fillChunk)
            starts.append(start)
            chunks.append(Array(slots[start..<end]))
            lasts.append(slots[end - 1])
            start = end
        }
        count = slots.count
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
        return starts[low] + chunks[low].withUnsafeBufferPointer { $0.partitionPoint(isBefore) }
    }

    /// The first chunk whose last row does not satisfy `isBefore` (which must hold for a prefix of the order).
    func chunkIndex(_ isBefore: (RowSlot) -> Bool) -> Int { lasts.partitionPoint(isBefore) }

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
            count = 1
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
        lasts[chunk] = chunks[chunk][chunks[chunk].count - 1]
        if chunks[chunk].count > Self.maximumChunk {
            let tail = Array(chunks[chunk][Self.fillChunk...])
            chunks[chunk].removeSubrange(Self.fillChunk...)
            chunks.insert(tail, at: chunk + 1)
            starts.insert(starts[chunk] + Self.fillChunk, at: chunk + 1)
            lasts.insert(lasts[chunk], at: chunk + 1)
            lasts[chunk] = chunks[chunk][chunks[chunk].count - 1]
        }
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
        } else if chunk + 1 < chunks.count, chunks[chunk].count + chunks[chunk + 1].count <= Self.fillChunk {
            // Keep chunks from thinning out after many removals. The merged chunk ends where the next one did.
            chunks[chunk] += chunks[chunk + 1]
            chunks.remove(at: chunk + 1)
            starts.remove(at: chunk + 1)
            lasts.remove(at: chunk + 1)
            lasts[chunk] = chunks[chunk][chunks[chunk].count - 1]
        } else {
            lasts[chunk] = chunks[chunk][chunks[chunk].count - 1]
        }
        return slot
    }

    /// Removes the rows at `removed` (ascending positions) and inserts `inserted` before the old rows at their
    /// points (ascending; rows with one point in their order), in one pass that copies only the chunks the batch
    /// touches. Returns each inserted row's new position, in the order given.
    mutating func apply(removing removed: [Int], inserting inserted: [(point: Int, slot: RowSlot)]) -> [Int] {
        var positions = Array(repeating: 0, count: inserted.count)
        var rebuilt: [[RowSlot]] = []
        rebuilt.reserveCapacity(chunks.count + inserted.count / Self.fillChunk + 1)
        var total = 0
        var nextRemoved = 0
        var nextInserted = 0
        /// Appends a chunk, joining it to the one before when both are small (removals thin chunks out).
        func append(_ chunk: [RowSlot], touched: Bool) {
            guard !chunk.isEmpty else { return }
            if touched, let last = rebuilt.last, last.count + chunk.count <= Self.fillChunk {
                rebuilt[rebuilt.count - 1] += chunk
            } else if chunk.count > Self.maximumChunk {
                var start = 0
                while start < chunk.count {
                    let end = chunk.count - start <= Self.maximumChunk ? chunk.count : start + Self.fillChunk
                    rebuilt.append(Array(chunk[start..<end]))
                    start = end
                }
            } else {
                rebuilt.append(chunk)
            }
            total += chunk.count
        }
        for c in chunks.indices {
            let start = starts[c]
            let end = start + chunks[c].count
            let isLast = c == chunks.count - 1
            var removedEnd = nextRemoved
            while removedEnd < removed.count && removed[removedEnd] < end { removedEnd += 1 }
            var insertedEnd = nextInserted
            while insertedEnd < inserted.count && (isLast || inserted[insertedEnd].point < end) { insertedEnd += 1 }
            if removedEnd == nextRemoved && insertedEnd == nextInserted {
                append(chunks[c], touched: false)  // shared, not copied
                continue
            }
            let old = chunks[c]
            var chunk: [RowSlot] = []
            chunk.reserveCapacity(old.count - (removedEnd - nextRemoved) + (insertedEnd - nextInserted))
            var copied = start
            func copy(upTo stop: Int) {
                while copied < stop {
                    if nextRemoved < removedEnd && removed[nextRemoved] < stop {
                        chunk += old[(copied - start)..<(removed[nextRemoved] - start)]
                        copied = removed[nextRemoved] + 1
                        nextRemoved += 1
                    } else {
                        chunk += old[(copied - start)..<(stop - start)]
                        copied = stop
                    }
                }
            }
            // Rows joined to the chunk before keep their positions: the chunk is appended after the total so far.
            let base = total
            while nextInserted < insertedEnd {
                copy(upTo: min(inserted[nextInserted].point, end))
                positions[nextInserted] = base + chunk.count
                chunk.append(inserted[nextInserted].slot)
                nextInserted += 1
            }
            copy(upTo: end)
            nextRemoved = removedEnd
            append(chunk, touched: true)
        }
        if chunks.isEmpty {
            // An empty order: the inserted rows are the order.
            for i in inserted.indices { positions[i] = i }
            append(inserted.map(\.slot), touched: true)
        }
        chunks = rebuilt
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
        return positions
    }

    #if DEBUG
    /// Checks the bookkeeping: chunk starts are the running counts, each fence is its chunk's last row, no chunk
    /// is empty or over the maximum, and the count adds up.
    func _checkInvariants() {
        precondition(chunks.count == starts.count && chunks.count == lasts.count, "chunk tables disagree")
        var position = 0
        for (i, chunk) in chunks.enumerated() {
            precondition(!chunk.isEmpty, "chunk \(i) is empty")
            precondition(chunk.count <= Self.maximumChunk, "chunk \(i) holds \(chunk.count) rows")
            precondition(starts[i] == position, "chunk \(i) starts at \(starts[i]), expected \(position)")
            precondition(lasts[i] == chunk[chunk.count - 1], "chunk \(i)'s fence is not its last row")
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
