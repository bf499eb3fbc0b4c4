/// The targets of one relationship of one object: a set of object IDs kept in ID order (``ObjectID``'s `<`), in
/// chunks of at most ``chunkLimit`` that copies of the set share.
///
/// A context keeps several versions of each loaded relationship: what the store held when it was read
/// (`committedRelated`), what the object holds now, the states recorded for processing and undo, the old targets
/// of a change record. With `Set<ObjectID>` each version was a whole table: the first change after a save copied
/// all of a relationship's targets, and telling two versions apart (what a save writes, what changed) compared
/// every target. Adding one book to a tag of 20,000 cost ~2 ms of such passes per save. Here a copy shares every
/// chunk, a change copies the one chunk it changes, and two versions of one set are compared chunk by chunk, a
/// shared chunk passed over in one step (its storage is the same): a save of a few links to a large relationship
/// costs what those links cost plus a step per chunk. Iteration is in ID order, so lists in order need no sort.
struct TargetSet: Sequence, Equatable, Sendable, ExpressibleByArrayLiteral, CustomStringConvertible {
    typealias Element = ObjectID
    typealias Chunk = ContiguousArray<ObjectID>

    /// The most IDs a chunk holds; a fuller chunk is split in two halves.
    static let chunkLimit = 128
    /// A chunk this small is joined with a neighbour when both fit in one.
    static let chunkMinimum = 32

    /// The first chunk: the whole set when it holds at most ``chunkLimit`` IDs, as most relationships do (one
    /// allocation, as a `Set` was); empty only for an empty set.
    private var head: Chunk
    /// The chunks after the first, none empty.
    private var tail: ContiguousArray<Chunk>
    /// How many IDs the set holds.
    private(set) var count: Int

    init() {
        head = []
        tail = []
        count = 0
    }

    init(arrayLiteral elements: ObjectID...) { self.init(elements) }

    /// The set of `ids` (in any order, repeated or not).
    init(_ ids: some Sequence<ObjectID>) {
        if let set = ids as? TargetSet {
            self = set
            return
        }
        var sorted = ids.sortedIDs()
        if sorted.count > 1 {
            // Drop repeats (they are next to each other).
            var last = 0
            for i in 1..<sorted.count where sorted[i] != sorted[last] {
                last += 1
                if last != i { sorted[last] = sorted[i] }
            }
            sorted.removeSubrange((last + 1)...)
        }
        self.init(sortedUnique: sorted)
    }

    /// The set of `ids`, given in order and each once.
    init(sortedUnique ids: some Collection<ObjectID>) {
        self.init()
        count = ids.count
        guard count > 0 else { return }
        if count <= Self.chunkLimit {
            head = Chunk(ids)
            return
        }
        let size = Self.chunkLimit / 2
        var chunk = Chunk()
        chunk.reserveCapacity(size)
        for id in ids {
            if chunk.count == size {
                append(chunk)
                chunk = Chunk()
                chunk.reserveCapacity(size)
            }
            chunk.append(id)
        }
        append(chunk)
    }

    var isEmpty: Bool { count == 0 }
    var first: ObjectID? { head.first }

    var description: String { "[" + map(\.description).joined(separator: ", ") + "]" }

    // MARK: - Chunks

    /// How many chunks hold the IDs.
    private var chunkCount: Int { head.isEmpty ? 0 : 1 + tail.count }

    /// The chunks in order (for tests and tools: a copy of the list).
    var chunks: [Chunk] { head.isEmpty ? [] : [head] + Array(tail) }

    private func chunk(_ i: Int) -> Chunk { i == 0 ? head : tail[i - 1] }

    /// The last ID of chunk `i`.
    private func last(ofChunk i: Int) -> ObjectID {
        i == 0 ? head[head.count - 1] : tail[i - 1][tail[i - 1].count - 1]
    }

    /// Changes chunk `i` in place.
    private mutating func changeChunk<R>(_ i: Int, _ body: (inout Chunk) -> R) -> R {
        i == 0 ? body(&head) : body(&tail[i - 1])
    }

    private mutating func append(_ chunk: Chunk) {
        if head.isEmpty { head = chunk } else { tail.append(chunk) }
    }

    private mutating func insertChunk(_ chunk: Chunk, at i: Int) {
        if i == 0 {
            if !head.isEmpty { tail.insert(head, at: 0) }
            head = chunk
        } else {
            tail.insert(chunk, at: i - 1)
        }
    }

    @discardableResult
    private mutating func removeChunk(at i: Int) -> Chunk {
        guard i == 0 else { return tail.remove(at: i - 1) }
        let removed = head
        head = tail.isEmpty ? [] : tail.removeFirst()
        return removed
    }

    // MARK: - Finding

    /// The chunk that holds `id` if the set does, or where it goes: the first whose last ID is not below it (the
    /// last chunk for an ID above all of them); `nil` for an empty set.
    private func chunkIndex(for id: ObjectID) -> Int? {
        let count = chunkCount
        guard count > 0 else { return nil }
        var low = 0
        var high = count - 1
        while low < high {
            let middle = (low + high) / 2
            if last(ofChunk: middle) < id { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The position of `id` in `chunk`, or where it goes.
    private static func position(of id: ObjectID, in chunk: Chunk) -> (index: Int, found: Bool) {
        var low = 0
        var high = chunk.count
        while low < high {
            let middle = (low + high) / 2
            if chunk[middle] < id { low = middle + 1 } else { high = middle }
        }
        return (low, low < chunk.count && chunk[low] == id)
    }

    func contains(_ id: ObjectID) -> Bool {
        guard let c = chunkIndex(for: id) else { return false }
        return Self.position(of: id, in: chunk(c)).found
    }

    // MARK: - Changing

    @discardableResult
    mutating func insert(_ id: ObjectID) -> (inserted: Bool, memberAfterInsert: ObjectID) {
        if count == 0 {
            head = [id]
            count = 1
            return (true, id)
        }
        // Above every ID (a new object's, whose key is the entity's next): appended, with no search.
        if tail.isEmpty, head[head.count - 1] < id, head.count < Self.chunkLimit {
            head.append(id)
            count += 1
            return (true, id)
        }
        guard let c = chunkIndex(for: id) else { preconditionFailure("a set of \(count) IDs without chunks") }
        let (index, found) = Self.position(of: id, in: chunk(c))
        if found { return (false, chunk(c)[index]) }
        let upper: Chunk? = changeChunk(c) { chunk in
            chunk.insert(id, at: index)
            guard chunk.count > Self.chunkLimit else { return nil }
            let half = chunk.count / 2
            let upper = Chunk(chunk[half...])
            chunk.removeSubrange(half...)
            return upper
        }
        count += 1
        if let upper { insertChunk(upper, at: c + 1) }
        return (true, id)
    }

    @discardableResult
    mutating func remove(_ id: ObjectID) -> ObjectID? {
        guard let c = chunkIndex(for: id) else { return nil }
        let (index, found) = Self.position(of: id, in: chunk(c))
        guard found else { return nil }
        let removed = changeChunk(c) { $0.remove(at: index) }
        count -= 1
        let size = chunk(c).count
        if size == 0 {
            removeChunk(at: c)
        } else if size < Self.chunkMinimum {
            // Join a small chunk with a neighbour it fits with, so that removals do not leave a long run of tiny
            // chunks.
            if c + 1 < chunkCount, size + chunk(c + 1).count <= Self.chunkLimit {
                let next = removeChunk(at: c + 1)
                changeChunk(c) { $0.append(contentsOf: next) }
            } else if c > 0, chunk(c - 1).count + size <= Self.chunkLimit {
                let this = removeChunk(at: c)
                changeChunk(c - 1) { $0.append(contentsOf: this) }
            }
        }
        return removed
    }

    mutating func formUnion(_ ids: some Sequence<ObjectID>) {
        for id in ids { insert(id) }
    }

    func union(_ ids: some Sequence<ObjectID>) -> TargetSet {
        var result = self
        result.formUnion(ids)
        return result
    }

    mutating func subtract(_ ids: some Sequence<ObjectID>) {
        for id in ids { remove(id) }
    }

    /// The IDs of this set that `other` does not hold, by a walk over both in step (a chunk they share is passed
    /// over at once).
    func subtracting(_ other: TargetSet) -> TargetSet {
        TargetSet(sortedUnique: Self.differences(self, other, stopAtFirst: false).onlyInFirst)
    }

    func subtracting(_ ids: some Sequence<ObjectID>) -> TargetSet {
        var result = self
        result.subtract(ids)
        return result
    }

    /// The IDs of this set that `other` does not hold.
    func subtracting(_ other: Set<ObjectID>) -> TargetSet {
        // Take out each of a smaller set; keep those of this set not in a larger one.
        guard other.count < count else { return TargetSet(sortedUnique: filter { !other.contains($0) }) }
        var result = self
        result.subtract(other)
        return result
    }

    func intersection(_ other: Set<ObjectID>) -> TargetSet {
        // Look up each of the smaller side in the other.
        other.count < count
            ? TargetSet(other.filter { contains($0) }) : TargetSet(sortedUnique: filter { other.contains($0) })
    }

    func isDisjoint(with other: Set<ObjectID>) -> Bool {
        other.count < count ? !other.contains { contains($0) } : !contains { other.contains($0) }
    }

    func intersection(_ other: TargetSet) -> TargetSet {
        let (small, large) = count <= other.count ? (self, other) : (other, self)
        return TargetSet(sortedUnique: small.filter { large.contains($0) })
    }

    func isSubset(of other: TargetSet) -> Bool {
        count <= other.count && Self.differences(self, other, stopAtFirst: false).onlyInFirst.isEmpty
    }

    func isDisjoint(with other: TargetSet) -> Bool {
        let (small, large) = count <= other.count ? (self, other) : (other, self)
        return !small.contains { large.contains($0) }
    }

    // MARK: - Comparing versions

    /// What `self` holds that `old` did not (`added`) and what `old` held that `self` does not (`removed`), each in
    /// ID order. Chunks both share are passed over in one step, so two versions of one set differing in a few IDs
    /// compare in a step per chunk.
    func changes(since old: TargetSet) -> (added: [ObjectID], removed: [ObjectID]) {
        let result = Self.differences(self, old, stopAtFirst: false)
        return (result.onlyInFirst, result.onlyInSecond)
    }

    static func == (lhs: TargetSet, rhs: TargetSet) -> Bool {
        guard lhs.count == rhs.count else { return false }
        let result = differences(lhs, rhs, stopAtFirst: true)
        return result.onlyInFirst.isEmpty && result.onlyInSecond.isEmpty
    }

    /// Whether two chunks are one storage (and so hold the same IDs).
    private static func same(_ a: Chunk, _ b: Chunk) -> Bool {
        a.count == b.count
            && a.withUnsafeBufferPointer { a in b.withUnsafeBufferPointer { b in a.baseAddress == b.baseAddress } }
    }

    /// The IDs only `first` holds and those only `second` holds, in order, by a walk over both; with
    /// `stopAtFirst`, only up to the first difference.
    private static func differences(
        _ first: TargetSet, _ second: TargetSet, stopAtFirst: Bool
    ) -> (onlyInFirst: [ObjectID], onlyInSecond: [ObjectID]) {
        var onlyInFirst: [ObjectID] = []
        var onlyInSecond: [ObjectID] = []
        let (aCount, bCount) = (first.chunkCount, second.chunkCount)
        var (ac, ai, bc, bi) = (0, 0, 0, 0)
        var (a, b) = (aCount > 0 ? first.chunk(0) : [], bCount > 0 ? second.chunk(0) : [])
        while ac < aCount && bc < bCount {
            if ai == 0 && bi == 0 && same(a, b) {
                ac += 1
                bc += 1
                if ac < aCount { a = first.chunk(ac) }
                if bc < bCount { b = second.chunk(bc) }
                continue
            }
            let x = a[ai]
            let y = b[bi]
            if x == y {
                ai += 1
                bi += 1
            } else if x < y {
                onlyInFirst.append(x)
                ai += 1
            } else {
                onlyInSecond.append(y)
                bi += 1
            }
            if ai == a.count {
                (ac, ai) = (ac + 1, 0)
                if ac < aCount { a = first.chunk(ac) }
            }
            if bi == b.count {
                (bc, bi) = (bc + 1, 0)
                if bc < bCount { b = second.chunk(bc) }
            }
            if stopAtFirst && !(onlyInFirst.isEmpty && onlyInSecond.isEmpty) { return (onlyInFirst, onlyInSecond) }
        }
        if stopAtFirst && (ac < aCount || bc < bCount) {
            return (ac < aCount ? [a[ai]] : [], bc < bCount ? [b[bi]] : [])
        }
        while ac < aCount {
            onlyInFirst.append(contentsOf: first.chunk(ac)[ai...])
            (ac, ai) = (ac + 1, 0)
        }
        while bc < bCount {
            onlyInSecond.append(contentsOf: second.chunk(bc)[bi...])
            (bc, bi) = (bc + 1, 0)
        }
        return (onlyInFirst, onlyInSecond)
    }

    // MARK: - Iterating

    struct Iterator: IteratorProtocol {
        fileprivate let set: TargetSet
        fileprivate var current: Chunk
        fileprivate var chunk = 0
        fileprivate var index = 0

        mutating func next() -> ObjectID? {
            guard index < current.count else { return nil }
            let id = current[index]
            index += 1
            if index == current.count, chunk < set.tail.count {
                current = set.tail[chunk]
                chunk += 1
                index = 0
            }
            return id
        }
    }

    func makeIterator() -> Iterator { Iterator(set: self, current: head) }

    var underestimatedCount: Int { count }

    /// The IDs in order.
    var ordered: [ObjectID] {
        if tail.isEmpty { return Array(head) }
        var result: [ObjectID] = []
        result.reserveCapacity(count)
        result.append(contentsOf: head)
        for chunk in tail { result.append(contentsOf: chunk) }
        return result
    }
}
