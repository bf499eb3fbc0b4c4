import Foundation

/// The rows of a fetched-results controller, kept small: the primary keys in result order, in chunks, and each
/// row's sort keys packed into a hash table by primary key.
///
/// A row costs about 60 bytes with two scalar keys (8 for its place in the order, the rest its table bucket, at most
/// 70% full); a string or other variable key adds its `Value`. Finding, inserting or removing a row costs O(log n) key
/// comparisons plus one chunk's memmove, so a batch of k changes on a million rows does not move the million.
struct RowStore {
    var order = RowOrder()
    var table: RowKeyTable
    let sortKeys: [SortKey]

    /// A store for rows sorted by `sortKeys`, whose key columns have the attribute types `types` (`nil` for a
    /// column that may hold any value).
    init(sortKeys: [SortKey], types: [AttributeType?]) {
        self.sortKeys = sortKeys
        table = RowKeyTable(types: types)
    }

    var count: Int { order.count }

    /// The primary key of the row at `position`.
    func pk(at position: Int) -> UInt64 { order[position] }

    /// The keys of the row `pk`, or `nil` when there is no such row.
    func keys(of pk: UInt64) -> [Value]? { table.bucket(of: pk).map(table.keys(at:)) }

    /// Key `column` of the row `pk` (which must exist).
    func key(_ column: Int, of pk: UInt64) -> Value {
        guard let bucket = table.bucket(of: pk) else { return .null }
        return table.value(column, at: bucket)
    }

    func contains(_ pk: UInt64) -> Bool { table.bucket(of: pk) != nil }

    /// Whether the stored row `pk` comes before the row with `keys` and `other`.
    func precedes(stored pk: UInt64, _ keys: [Value], _ other: UInt64) -> Bool {
        guard let bucket = table.bucket(of: pk) else { return false }
        for column in sortKeys.indices {
            let order = table.compare(column, at: bucket, with: keys[column], sortKeys[column])
            if order != .orderedSame { return order == .orderedAscending }
        }
        return pk < other
    }

    /// The position where a row with `keys` and `pk` belongs.
    func insertionIndex(_ keys: [Value], _ pk: UInt64) -> Int {
        order.partitionPoint { precedes(stored: $0, keys, pk) }
    }

    /// The position of the row `pk`, or `nil` when there is none.
    func position(of pk: UInt64) -> Int? {
        guard let target = table.bucket(of: pk) else { return nil }
        // The chunk by its last keys, then a scan for the key itself: cheaper than comparing keys in the chunk.
        let chunk = order.chunkIndex { other in
            guard let bucket = table.bucket(of: other) else { return false }
            for (column, key) in sortKeys.enumerated() {
                let order = key.order(table.value(column, at: bucket), table.value(column, at: target))
                if order != .orderedSame { return order == .orderedAscending }
            }
            return other < pk
        }
        if let index = order.firstIndex(of: pk, inChunk: chunk) { return index }
        // Unreachable while the order is consistent with the keys; a linear search keeps the answer right.
        return order.firstIndex(of: pk)
    }

    /// Replaces every row with `rows`, which must be in order.
    mutating func replaceAll(with rows: [(pk: UInt64, keys: [Value])]) {
        table = RowKeyTable(types: table.types, minimumCapacity: rows.count)
        for row in rows { table.set(row.pk, row.keys) }
        order = RowOrder(rows.lazy.map(\.pk))
    }

    /// Inserts a row at its place; returns the position.
    @discardableResult
    mutating func insert(_ pk: UInt64, _ keys: [Value]) -> Int {
        let index = insertionIndex(keys, pk)
        table.set(pk, keys)
        order.insert(pk, at: index)
        return index
    }

    /// Removes the row at `position`.
    mutating func remove(at position: Int) {
        let pk = order.remove(at: position)
        table.remove(pk)
    }

    /// Removes the rows at `removed` (ascending positions) and inserts `inserted` (in any order) in one pass over
    /// the order: for batches large against the number of rows. Returns the new position of each inserted row.
    @discardableResult
    mutating func merge(removing removed: [Int], inserting inserted: [(pk: UInt64, keys: [Value])]) -> [Int] {
        // Insertion points in the old order, found while the removed rows still have their keys; rows with the
        // same point are put in order among themselves.
        let points = inserted.map { insertionIndex($0.keys, $0.pk) }
        let byPoint = inserted.indices.sorted { a, b in
            if points[a] != points[b] { return points[a] < points[b] }
            return precedes(inserted[a].keys, inserted[a].pk, before: inserted[b].keys, inserted[b].pk)
        }
        for position in removed { table.remove(order[position]) }
        let old = order.keys(in: 0..<order.count)
        var merged: [UInt64] = []
        merged.reserveCapacity(old.count - removed.count + inserted.count)
        var positions = Array(repeating: 0, count: inserted.count)
        // Copy the slices between removals and insertion points.
        var copied = 0
        var nextRemoved = 0
        func copy(upTo end: Int) {
            while copied < end {
                if nextRemoved < removed.count && removed[nextRemoved] < end {
                    merged += old[copied..<removed[nextRemoved]]
                    copied = removed[nextRemoved] + 1
                    nextRemoved += 1
                } else {
                    merged += old[copied..<end]
                    copied = end
                }
            }
        }
        for index in byPoint {
            copy(upTo: points[index])
            positions[index] = merged.count
            merged.append(inserted[index].pk)
        }
        copy(upTo: old.count)
        for row in inserted { table.set(row.pk, row.keys) }
        order = RowOrder(merged)
        return positions
    }

    /// Whether the row with `keys` and `pk` comes before the row with `otherKeys` and `other`.
    func precedes(_ keys: [Value], _ pk: UInt64, before otherKeys: [Value], _ other: UInt64) -> Bool {
        for (column, key) in sortKeys.enumerated() {
            let order = key.order(keys[column], otherKeys[column])
            if order != .orderedSame { return order == .orderedAscending }
        }
        return pk < other
    }
}

/// Primary keys in order, in chunks of at most `maximumChunk`: an insert or removal moves one chunk's tail and
/// updates the chunks' start positions.
struct RowOrder: Sendable {
    static let fillChunk = 1024
    static let maximumChunk = 2048

    private(set) var chunks: [[UInt64]] = []
    /// The position of each chunk's first key.
    private(set) var starts: [Int] = []
    /// Each chunk's last key, so that finding a chunk does not visit the chunks.
    private(set) var lasts: [UInt64] = []
    private(set) var count = 0

    init() {}

    /// Chunks of `keys`, each copied in one piece.
    init(_ keys: [UInt64]) {
        var start = 0
        while start < keys.count {
            let end = min(keys.count, start + Self.fillChunk)
            starts.append(start)
            chunks.append(Array(keys[start..<end]))
            lasts.append(keys[end - 1])
            start = end
        }
        count = keys.count
    }

    init<S: Sequence>(_ keys: S) where S.Element == UInt64 {
        var chunk: [UInt64] = []
        chunk.reserveCapacity(Self.fillChunk)
        for key in keys {
            chunk.append(key)
            if chunk.count == Self.fillChunk {
                starts.append(count)
                lasts.append(key)
                chunks.append(chunk)
                count += chunk.count
                chunk = []
                chunk.reserveCapacity(Self.fillChunk)
            }
        }
        if let last = chunk.last {
            starts.append(count)
            lasts.append(last)
            chunks.append(chunk)
            count += chunk.count
        }
    }

    /// The chunk holding `position` (which must be in range, or `count` for the end).
    func locate(_ position: Int) -> (chunk: Int, offset: Int) {
        var low = 0
        var high = starts.count - 1
        while low < high {
            let mid = (low + high + 1) / 2
            if starts[mid] <= position { low = mid } else { high = mid - 1 }
        }
        return (low, position - (starts.isEmpty ? 0 : starts[low]))
    }

    subscript(position: Int) -> UInt64 {
        let (chunk, offset) = locate(position)
        return chunks[chunk][offset]
    }

    /// The first position whose key does not satisfy `isBefore`, which must hold for a prefix of the order.
    func partitionPoint(_ isBefore: (UInt64) -> Bool) -> Int {
        // The first chunk whose last key is not before, then within it.
        let low = chunkIndex(isBefore)
        guard low < chunks.count else { return count }
        let chunk = chunks[low]
        var first = 0
        var last = chunk.count
        while first < last {
            let mid = (first + last) / 2
            if isBefore(chunk[mid]) { first = mid + 1 } else { last = mid }
        }
        return starts[low] + first
    }

    /// The first chunk whose last key does not satisfy `isBefore` (which must hold for a prefix of the order).
    func chunkIndex(_ isBefore: (UInt64) -> Bool) -> Int {
        var low = 0
        var high = chunks.count
        while low < high {
            let mid = (low + high) / 2
            if isBefore(lasts[mid]) { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// The position of `key` if chunk `chunk` holds it.
    func firstIndex(of key: UInt64, inChunk chunk: Int) -> Int? {
        guard chunks.indices.contains(chunk) else { return nil }
        return chunks[chunk].withUnsafeBufferPointer { buffer in
            for offset in buffer.indices where buffer[offset] == key { return starts[chunk] + offset }
            return nil
        }
    }

    func firstIndex(of key: UInt64) -> Int? {
        for (i, chunk) in chunks.enumerated() {
            if let offset = chunk.firstIndex(of: key) { return starts[i] + offset }
        }
        return nil
    }

    mutating func insert(_ key: UInt64, at position: Int) {
        guard !chunks.isEmpty else {
            chunks = [[key]]
            starts = [0]
            lasts = [key]
            count = 1
            return
        }
        var (chunk, offset) = locate(position)
        if offset > chunks[chunk].count {
            // The end of the last chunk.
            chunk = chunks.count - 1
            offset = chunks[chunk].count
        }
        chunks[chunk].insert(key, at: offset)
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
    mutating func remove(at position: Int) -> UInt64 {
        let (chunk, offset) = locate(position)
        let key = chunks[chunk].remove(at: offset)
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
        return key
    }

    #if DEBUG
    /// Checks the bookkeeping: chunk starts are the running counts, each fence is its chunk's last key, no chunk
    /// is empty or over the maximum, and the count adds up.
    func _checkInvariants() {
        precondition(chunks.count == starts.count && chunks.count == lasts.count, "chunk tables disagree")
        var position = 0
        for (i, chunk) in chunks.enumerated() {
            precondition(!chunk.isEmpty, "chunk \(i) is empty")
            precondition(chunk.count <= Self.maximumChunk, "chunk \(i) holds \(chunk.count) keys")
            precondition(starts[i] == position, "chunk \(i) starts at \(starts[i]), expected \(position)")
            precondition(lasts[i] == chunk[chunk.count - 1], "chunk \(i)'s fence is not its last key")
            position += chunk.count
        }
        precondition(position == count, "the chunks hold \(position) keys, count says \(count)")
    }
    #endif

    /// Calls `body` with each chunk in order.
    func forEachChunk(_ body: ([UInt64]) -> Void) {
        for chunk in chunks { body(chunk) }
    }

    /// The keys at `range`, in order.
    func keys(in range: Range<Int>) -> [UInt64] {
        var result: [UInt64] = []
        result.reserveCapacity(range.count)
        guard !range.isEmpty else { return result }
        var (chunk, offset) = locate(range.lowerBound)
        while result.count < range.count {
            let take = min(chunks[chunk].count - offset, range.count - result.count)
            result += chunks[chunk][offset..<(offset + take)]
            chunk += 1
            offset = 0
        }
        return result
    }
}

/// Each row's sort keys by primary key, in an open-addressing hash table (linear probing, backward-shift removal).
///
/// A key of a bool, int64, double or date column is stored in one 64-bit word; any other value (strings, binary,
/// UUIDs, decimals, and any value of a column beyond the eighth) goes to a pool, the word holding its index.
struct RowKeyTable {
    enum Column { case bool, int, double, date, pooled }

    let types: [AttributeType?]
    let columns: [Column]
    private(set) var count = 0
    private var capacity: Int
    /// The words of a bucket: its primary key (0, never a primary key, marks an empty bucket); its flags (bit c is
    /// "column c is nil", bit 8 + c is "column c's word is a pool index"); one word per column. A bucket's words
    /// are adjacent, so that a lookup touches one cache line.
    private var slots: [UInt64]
    private let stride: Int
    private var pool: [Value] = []
    private var freePool: [Int] = []

    init(types: [AttributeType?], minimumCapacity: Int = 0) {
        self.types = types
        columns = types.enumerated().map { column, type in
            guard column < 8 else { return .pooled }
            switch type {
            case .bool: return .bool
            case .int64: return .int
            case .double: return .double
            case .date: return .date
            default: return .pooled
            }
        }
        capacity = max(8, minimumCapacity * 10 / 6 + 1)
        stride = 2 + types.count
        slots = Array(repeating: 0, count: capacity * stride)
    }

    private func home(_ pk: UInt64) -> Int {
        Int((pk &* 0x9E37_79B9_7F4A_7C15).multipliedFullWidth(by: UInt64(capacity)).high)
    }

    /// The bucket holding `pk`, or `nil`.
    func bucket(of pk: UInt64) -> Int? {
        var index = home(pk)
        while true {
            let stored = slots[index * stride]
            if stored == pk { return index }
            if stored == 0 { return nil }
            index += 1
            if index == capacity { index = 0 }
        }
    }

    private func flags(_ bucket: Int) -> UInt16 { UInt16(truncatingIfNeeded: slots[bucket * stride + 1]) }

    func value(_ column: Int, at bucket: Int) -> Value {
        let flag = flags(bucket)
        if column < 8 && flag & (1 << column) != 0 { return .null }
        let word = slots[bucket * stride + 2 + column]
        if columns[column] == .pooled || flag & (1 << (8 + column)) != 0 { return pool[Int(word)] }
        switch columns[column] {
        case .bool: return .bool(word != 0)
        case .int: return .int(Int64(bitPattern: word))
        case .double: return .double(Double(bitPattern: word))
        case .date: return .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: word)))
        case .pooled: return pool[Int(word)]
        }
    }

    func keys(at bucket: Int) -> [Value] { columns.indices.map { value($0, at: bucket) } }

    /// The order of key `column` of `bucket` against `other` by `key`: scalars of the column's type compare their
    /// words directly, anything else through ``SortKey/order(_:_:)`` (with the same result).
    func compare(_ column: Int, at bucket: Int, with other: Value, _ key: SortKey) -> ComparisonResult {
        let flag = column < 8 ? flags(bucket) >> column & 0x101 : 1
        guard flag == 0 else { return key.order(value(column, at: bucket), other) }
        let word = slots[bucket * stride + 2 + column]
        let base: ComparisonResult
        switch (columns[column], other) {
        case (.int, .int(let y)):
            let x = Int64(bitPattern: word)
            base = x < y ? .orderedAscending : x > y ? .orderedDescending : .orderedSame
        case (.double, .double(let y)):
            base = ValueSemantics.order(Double(bitPattern: word), y)
        case (.date, .date(let date)):
            base = ValueSemantics.order(Double(bitPattern: word), date.timeIntervalSinceReferenceDate)
        default:
            return key.order(value(column, at: bucket), other)
        }
        guard !key.ascending else { return base }
        return base == .orderedAscending ? .orderedDescending : base == .orderedDescending ? .orderedAscending : base
    }

    /// Stores `keys` for `pk`, replacing what it had.
    mutating func set(_ pk: UInt64, _ keys: [Value]) {
        precondition(pk != 0 && keys.count == columns.count)
        if let existing = bucket(of: pk) {
            release(existing)
            write(keys, at: existing)
            return
        }
        if (count + 1) * 10 > capacity * 7 { grow() }
        var index = home(pk)
        while slots[index * stride] != 0 {
            index += 1
            if index == capacity { index = 0 }
        }
        slots[index * stride] = pk
        write(keys, at: index)
        count += 1
    }

    private mutating func write(_ keys: [Value], at bucket: Int) {
        var flag: UInt16 = 0
        let base = bucket * stride + 2
        for (column, key) in keys.enumerated() {
            var word: UInt64
            switch (columns[column], key) {
            case (_, .null) where column < 8:
                flag |= 1 << column
                word = 0
            case (.bool, .bool(let v)): word = v ? 1 : 0
            case (.int, .int(let v)): word = UInt64(bitPattern: v)
            case (.double, .double(let v)): word = v.bitPattern
            case (.date, .date(let v)): word = v.timeIntervalSinceReferenceDate.bitPattern
            default:
                // A variable value, or a value not of the column's type: kept as it is.
                if columns[column] != .pooled { flag |= 1 << (8 + column) }
                if let free = freePool.popLast() {
                    pool[free] = key
                    word = UInt64(free)
                } else {
                    pool.append(key)
                    word = UInt64(pool.count - 1)
                }
            }
            slots[base + column] = word
        }
        slots[bucket * stride + 1] = UInt64(flag)
    }

    /// Returns the pool entries of `bucket` to the free list.
    private mutating func release(_ bucket: Int) {
        let flag = flags(bucket)
        for column in columns.indices {
            if column < 8 && flag & (1 << column) != 0 { continue }  // nil: no pool entry
            guard columns[column] == .pooled || flag & (1 << (8 + column)) != 0 else { continue }
            let index = Int(slots[bucket * stride + 2 + column])
            pool[index] = .null
            freePool.append(index)
        }
    }

    /// Removes `pk`'s keys; returns whether it had any.
    @discardableResult
    mutating func remove(_ pk: UInt64) -> Bool {
        guard var hole = bucket(of: pk) else { return false }
        release(hole)
        count -= 1
        // Backward shift: pull later entries of the probe run into the hole when their home allows it.
        var index = hole
        while true {
            index += 1
            if index == capacity { index = 0 }
            let stored = slots[index * stride]
            if stored == 0 { break }
            let home = home(stored)
            let stays = hole <= index ? (home > hole && home <= index) : (home > hole || home <= index)
            if stays { continue }
            move(from: index, to: hole)
            hole = index
        }
        slots[hole * stride] = 0
        slots[hole * stride + 1] = 0
        if count == 0 {
            pool.removeAll()
            freePool.removeAll()
        }
        return true
    }

    private mutating func move(from source: Int, to destination: Int) {
        for offset in 0..<stride { slots[destination * stride + offset] = slots[source * stride + offset] }
    }

    private mutating func grow() {
        var bigger = RowKeyTable(types: types, minimumCapacity: max(16, count * 2))
        for bucket in 0..<capacity where slots[bucket * stride] != 0 {
            bigger.set(slots[bucket * stride], keys(at: bucket))
        }
        self = bigger
    }
}
