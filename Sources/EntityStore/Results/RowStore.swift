import Foundation
import SectionedDiff

/// The rows of a fetched-results controller, kept small: the rows in result order, in chunks, and each row's sort
/// keys packed into a hash table by primary key.
///
/// A row costs about 80 bytes with two scalar keys (24 for its place in the order: its primary key and its first
/// two keys as order-preserving words; the rest its table bucket, at most 70% full); a string or other variable key
/// adds its `Value`. Finding, inserting or removing a row costs O(log n) comparisons of words held in the chunk it
/// searches (the table is read only on ties past the second key, or for keys without a word) plus one chunk's
/// memmove, so a batch of k changes on a million rows does not move the million.
struct RowStore {
    var order = RowOrder()
    var table: RowKeyTable
    let sortKeys: [SortKey]
    /// How many leading keys have words in the order's slots (at most two).
    let inlineKeys: Int
    /// How many of a slot's words, then its primary key, decide the order: the inline keys when they are all the
    /// sort keys, else 0 (a tie of the words is broken by the keys in the table).
    var decidingWords: Int { inlineKeys == sortKeys.count ? inlineKeys : 0 }

    /// A store for rows sorted by `sortKeys`, whose key columns have the attribute types `types` (`nil` for a
    /// column that may hold any value).
    init(sortKeys: [SortKey], types: [AttributeType?]) {
        self.sortKeys = sortKeys
        table = RowKeyTable(types: types)
        inlineKeys = min(2, sortKeys.count)
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

    /// The order's slot for a row with `keys`.
    func slot(_ pk: UInt64, _ keys: [Value]) -> RowSlot { slot(pk, keys[...]) }

    /// The order's slot for a row with `keys` (a row of ``NewRows``: its first key at the slice's start).
    func slot(_ pk: UInt64, _ keys: ArraySlice<Value>) -> RowSlot {
        let first = keys.startIndex
        return RowSlot(
            pk: pk, lead: inlineKeys > 0 ? word(0, keys[first]) : RowSlot.opaque,
            second: inlineKeys > 1 ? word(1, keys[first + 1]) : RowSlot.opaque)
    }

    /// The order's slot for the stored row in `bucket`, read from the table's words.
    func slot(ofStored pk: UInt64, at bucket: Int) -> RowSlot {
        func stored(_ column: Int) -> UInt64 {
            guard column < inlineKeys, let word = table.orderWord(column, at: bucket) else { return RowSlot.opaque }
            return sortKeys[column].ascending ? word : ~word
        }
        return RowSlot(pk: pk, lead: stored(0), second: stored(1))
    }

    /// Key `column`'s order-preserving word in its sort direction, or ``RowSlot/opaque``.
    private func word(_ column: Int, _ key: Value) -> UInt64 {
        guard let word = table.orderWord(column, key) else { return RowSlot.opaque }
        return sortKeys[column].ascending ? word : ~word
    }

    /// Whether the row in `slot` comes before `target`, whose keys (when the words do not decide) are `keyAt`'s.
    @inline(__always)
    private func precedes(_ slot: RowSlot, _ target: RowSlot, _ keyAt: (Int) -> Value) -> Bool {
        var column = 0
        if inlineKeys > 0 && slot.lead != RowSlot.opaque && target.lead != RowSlot.opaque {
            if slot.lead != target.lead { return slot.lead < target.lead }
            column = 1
            if inlineKeys > 1 && slot.second != RowSlot.opaque && target.second != RowSlot.opaque {
                if slot.second != target.second { return slot.second < target.second }
                column = 2
            }
        }
        if column == sortKeys.count { return slot.pk < target.pk }
        guard let bucket = table.bucket(of: slot.pk) else { return false }
        while column < sortKeys.count {
            let order = table.compare(column, at: bucket, with: keyAt(column), sortKeys[column])
            if order != .orderedSame { return order == .orderedAscending }
            column += 1
        }
        return slot.pk < target.pk
    }

    /// The position where a row with `keys` and `pk` belongs.
    func insertionIndex(_ keys: [Value], _ pk: UInt64) -> Int {
        let target = slot(pk, keys)
        return order.partitionPoint { precedes($0, target) { keys[$0] } }
    }

    /// The position of the row `pk`, or `nil` when there is none.
    func position(of pk: UInt64) -> Int? {
        guard let bucket = table.bucket(of: pk) else { return nil }
        let target = slot(ofStored: pk, at: bucket)
        let index = order.partitionPoint { precedes($0, target) { table.value($0, at: bucket) } }
        if index < order.count && order[index] == pk { return index }
        // Unreachable while the order is consistent with the keys; a linear search keeps the answer right.
        return order.firstIndex(of: pk)
    }

    /// The positions of the rows `pks` (-1 for a key with no row, and for 0): one call for a batch, so that the
    /// controller takes the store once (each call from the controller's property copied it, a reference on every
    /// one of its arrays), and the searches run chunk by chunk (``RowOrder/partitionPoints(of:_:)``).
    func positions(of pks: [UInt64]) -> [Int] {
        let targets = targets(pks)
        let found = search(targets)
        return positions(of: targets, at: found.points[...], rows: found.rows[...], among: pks.count)
    }

    /// The points the searches find for the rows `pks` (-1 for a key with no row), without the linear search that
    /// mends a wrong one: for tests of the searches themselves.
    func searchedPositions(of pks: [UInt64]) -> [Int] {
        let targets = targets(pks)
        var result = Array(repeating: -1, count: pks.count)
        for (target, point) in zip(targets, search(targets).points) { result[target.place] = point }
        return result
    }

    /// Each target's partition point in the order, and the row there.
    private func search(_ targets: [Target]) -> (points: [Int], rows: [UInt64]) {
        order.partitionPoints(of: targets.map(\.slot), words: decidingWords) { slot, event in
            precedes(slot, targets[event])
        }
    }

    /// A row to find: its place among the keys asked for, its key, its table bucket and its slot.
    private typealias Target = (place: Int, pk: UInt64, bucket: Int, slot: RowSlot)

    /// Whether the row in `slot` comes before the stored row `target`.
    private func precedes(_ slot: RowSlot, _ target: Target) -> Bool {
        precedes(slot, target.slot) { table.value($0, at: target.bucket) }
    }

    /// The rows of `pks` that there are.
    private func targets(_ pks: [UInt64]) -> [Target] {
        var targets: [Target] = []
        targets.reserveCapacity(pks.count)
        keepAlive(table.readHomes(of: pks))
        for (place, pk) in pks.enumerated() where pk != 0 {
            guard let bucket = table.bucket(of: pk) else { continue }
            targets.append((place, pk, bucket, slot(ofStored: pk, at: bucket)))
        }
        return targets
    }

    /// The positions of `count` keys from their targets' partition points and the rows there (-1 for the keys
    /// without a target).
    private func positions(
        of targets: [Target], at points: ArraySlice<Int>, rows: ArraySlice<UInt64>, among count: Int
    ) -> [Int] {
        var result = Array(repeating: -1, count: count)
        for (target, (point, row)) in zip(targets, zip(points, rows)) {
            if row == target.pk {
                result[target.place] = point
            } else {
                // Unreachable while the order is consistent with the keys; a linear search keeps the answer right.
                result[target.place] = order.firstIndex(of: target.pk) ?? -1
            }
        }
        return result
    }

    /// Replaces every row with `rows`, which must be in order.
    mutating func replaceAll(with rows: [(pk: UInt64, keys: [Value])]) {
        table = RowKeyTable(types: table.types, minimumCapacity: rows.count)
        for row in rows { table.set(row.pk, row.keys) }
        order = RowOrder(rows.map { slot($0.pk, $0.keys) })
    }

    /// Inserts a row at its place; returns the position.
    @discardableResult
    mutating func insert(_ pk: UInt64, _ keys: [Value]) -> Int {
        let index = insertionIndex(keys, pk)
        table.set(pk, keys)
        order.insert(slot(pk, keys), at: index)
        return index
    }

    /// Removes the row at `position`.
    mutating func remove(at position: Int) {
        let slot = order.remove(at: position)
        table.remove(slot.pk)
    }

    /// Removes the rows at `removed` (ascending positions) and inserts `inserted` (in any order) in one pass that
    /// changes only the chunks the batch touches. Returns the new position of each inserted row.
    @discardableResult
    mutating func merge(removing removed: [Int], inserting rows: [(pk: UInt64, keys: [Value])]) -> [Int] {
        var inserted = NewRows(width: table.columns.count)
        for row in rows { inserted.append(row.pk, row.keys) }
        let slots = inserted.slots(in: self)
        let points = order.partitionPoints(of: slots, words: decidingWords) { slot, event in
            precedes(slot, slots[event]) { inserted.key($0, of: event) }
        }.points
        return place(inserted, slots, at: points[...], removing: removed, removedKeys: removed.map { order[$0] })
    }

    /// A batch in one call: finds the rows `located` (their positions before the batch, -1 for a key with no row
    /// and for 0), removes those of the first `removedCount` that are there, and inserts `inserted` (in any order).
    /// Every search of the batch, for the rows to find and for the new rows' places among the old ones, runs in one
    /// chunk-by-chunk pass (``RowOrder/partitionPoints(of:_:)``), where a call per kind of search read the order
    /// through once each.
    /// Returns the located rows' old positions and the new position of each inserted row.
    mutating func merge(
        locating located: [UInt64], removingFirst removedCount: Int, inserting inserted: NewRows
    ) -> (old: [Int], new: [Int]) {
        let targets = targets(located)
        let slots = inserted.slots(in: self)
        let found = order.partitionPoints(of: targets.map(\.slot) + slots, words: decidingWords) { slot, event in
            if event < targets.count { return precedes(slot, targets[event]) }
            let row = event - targets.count
            return precedes(slot, slots[row]) { inserted.key($0, of: row) }
        }
        let old = positions(
            of: targets, at: found.points[..<targets.count], rows: found.rows[..<targets.count], among: located.count)
        var removed = old[..<removedCount].enumerated().filter { $0.element >= 0 }.map {
            ($0.element, located[$0.offset])
        }
        removed.sortByKey { UInt64($0.0) }
        return (
            old,
            place(
                inserted, slots, at: found.points[targets.count...], removing: removed.map(\.0),
                removedKeys: removed.map(\.1))
        )
    }

    /// Removes the rows at `removed` (ascending; their primary keys `removedKeys`) and inserts `inserted` (with
    /// their slots) at their partition points among the old rows; returns the new position of each inserted row.
    private mutating func place(
        _ inserted: NewRows, _ slots: [RowSlot], at found: ArraySlice<Int>, removing removed: [Int],
        removedKeys: [UInt64]
    ) -> [Int] {
        let points = Array(found)
        var byPoint = Array(0..<inserted.count)
        byPoint.sortByKey { UInt64(points[$0]) }
        // Rows with one point (rare: they fall between the same two old rows) in their order among themselves.
        var start = 0
        while start < byPoint.count {
            var end = start + 1
            while end < byPoint.count && points[byPoint[end]] == points[byPoint[start]] { end += 1 }
            if end - start > 1 {
                byPoint[start..<end].sort { a, b in
                    precedes(inserted.keys(of: a), inserted.pks[a], before: inserted.keys(of: b), inserted.pks[b])
                }
            }
            start = end
        }
        keepAlive(table.readHomes(of: inserted.pks))  // the removed rows were found: their buckets are cached
        // A removed row that comes back (a move) keeps its bucket, its keys overwritten below: its removal shifted
        // the entries after it back and its insert probed for a bucket again (a twelfth of placing a batch, by perf samples).
        var returning = inserted.pks
        sortWords(&returning)
        for pk in removedKeys where !Self.contains(returning, pk) { table.remove(pk) }
        let placed = order.apply(removing: removed, inserting: byPoint.map { (points[$0], slots[$0]) })
        for row in 0..<inserted.count { table.set(inserted.pks[row], inserted.keys(of: row)) }
        var positions = Array(repeating: 0, count: inserted.count)
        for (rank, index) in byPoint.enumerated() { positions[index] = placed[rank] }
        return positions
    }

    /// Whether `sorted` (ascending) holds `word`.
    private static func contains(_ sorted: [UInt64], _ word: UInt64) -> Bool {
        let index = sorted.partitionPoint { $0 < word }
        return index < sorted.count && sorted[index] == word
    }

    /// Whether the row with `keys` and `pk` comes before the row with `otherKeys` and `other`.
    func precedes(_ keys: ArraySlice<Value>, _ pk: UInt64, before otherKeys: ArraySlice<Value>, _ other: UInt64) -> Bool
    {
        for (column, key) in sortKeys.enumerated() {
            let order = key.order(keys[keys.startIndex + column], otherKeys[otherKeys.startIndex + column])
            if order != .orderedSame { return order == .orderedAscending }
        }
        return pk < other
    }
}

/// Rows a batch inserts: their primary keys, and their keys `width` to a row in one array (an array of keys per row
/// was an allocation per row a batch made and freed).
struct NewRows {
    private(set) var pks: [UInt64] = []
    private(set) var keys: [Value] = []
    /// Keys per row.
    let width: Int

    init(width: Int) { self.width = width }

    var count: Int { pks.count }

    /// Makes room for `rows` rows.
    mutating func reserveCapacity(_ rows: Int) {
        pks.reserveCapacity(rows)
        keys.reserveCapacity(rows * width)
    }

    /// Appends a row: `pk` and its `width` keys.
    mutating func append(_ pk: UInt64, _ rowKeys: some Sequence<Value>) {
        pks.append(pk)
        keys.append(contentsOf: rowKeys)
        precondition(keys.count == pks.count * width, "a new row's keys are not \(width)")
    }

    /// Appends a row whose keys `appendKeys` appends, one by one, to the array it is given (when it throws, the
    /// rows are as they were).
    mutating func append(_ pk: UInt64, keys appendKeys: (inout [Value]) throws -> Void) rethrows {
        let start = keys.count
        var appended = false
        defer { if !appended { keys.removeSubrange(start...) } }
        try appendKeys(&keys)
        appended = true
        pks.append(pk)
        precondition(keys.count == pks.count * width, "a new row's keys are not \(width)")
    }

    /// The keys of row `row`.
    func keys(of row: Int) -> ArraySlice<Value> { keys[(row * width)..<((row + 1) * width)] }

    /// Key `column` of row `row`.
    func key(_ column: Int, of row: Int) -> Value { keys[row * width + column] }

    /// Each row's slot in `store`'s order.
    func slots(in store: RowStore) -> [RowSlot] { (0..<count).map { store.slot(pks[$0], keys(of: $0)) } }
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

    /// Reads the home bucket of each of `pks`, returning a sum of what it read: loads that do not wait for each
    /// other, so that the memory serves many at once and the lookups after them find their buckets in the cache
    /// (a batch's lookups one after another each waited for a miss, a twelfth of an S6 batch).
    func readHomes(of pks: [UInt64]) -> UInt64 {
        guard pks.count >= 16 else { return 0 }
        var sum: UInt64 = 0
        slots.withUnsafeBufferPointer { slots in
            for pk in pks { sum &+= slots[home(pk) * stride] }
        }
        return sum
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
        return key.ascending ? base : base.reversed
    }

    /// `key`'s word for ordering in column `column` (ascending): the word's unsigned order is the keys' order.
    /// `nil` for a key with none (nil, a pooled value, a value not of the column's type).
    func orderWord(_ column: Int, _ key: Value) -> UInt64? {
        switch (columns[column], key) {
        case (.bool, .bool(let v)): v ? 1 : 0
        case (.int, .int(let v)): UInt64(bitPattern: v) ^ (1 << 63)
        case (.double, .double(let v)): IndexKey.orderedBits(v)
        case (.date, .date(let v)): IndexKey.orderedBits(v.timeIntervalSinceReferenceDate)
        default: nil
        }
    }

    /// ``orderWord(_:_:)`` of key `column` of `bucket`, from the stored word.
    func orderWord(_ column: Int, at bucket: Int) -> UInt64? {
        guard column < 8, flags(bucket) >> column & 0x101 == 0 else { return nil }
        let word = slots[bucket * stride + 2 + column]
        switch columns[column] {
        case .bool: return word
        case .int: return word ^ (1 << 63)
        case .double, .date: return IndexKey.orderedBits(Double(bitPattern: word))
        case .pooled: return nil
        }
    }

    /// Stores `keys` for `pk`, replacing what it had.
    mutating func set(_ pk: UInt64, _ keys: [Value]) { set(pk, keys[...]) }

    /// Stores `keys` (a slice, as ``NewRows`` holds them) for `pk`, replacing what it had.
    mutating func set(_ pk: UInt64, _ keys: ArraySlice<Value>) {
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

    private mutating func write(_ keys: ArraySlice<Value>, at bucket: Int) {
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
