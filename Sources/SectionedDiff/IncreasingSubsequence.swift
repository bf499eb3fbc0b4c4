/// The heaviest strictly increasing subsequence, in O(m log m) with a Fenwick tree of prefix maxima.
///
/// - Parameters:
///   - keys: Distinct keys, in sequence order.
///   - weights: A positive weight per element.
/// - Returns: For each element, whether it belongs to the chosen subsequence.
@inlinable
package func heaviestIncreasingSubsequence(keys: [Int], weights: [Int]) -> [Bool] {
    var workspace = IncreasingSubsequenceWorkspace()
    return workspace.heaviest(keys: keys, weights: weights)
}

/// The buffers of ``heaviestIncreasingSubsequence(keys:weights:)``, kept between calls: a controller's batch asks
/// for one subsequence per touched section (a hundred of a few dozen runs each), and making the seven arrays for
/// each was most of what a small one cost.
@usableFromInline
package struct IncreasingSubsequenceWorkspace {
    @usableFromInline var rank: [Int] = []
    @usableFromInline var words: [UInt64] = []
    /// The Fenwick tree of prefix maxima: per node, the heaviest chain's weight and its last element.
    @usableFromInline var tree: [Node] = []
    @usableFromInline var best: [Int] = []
    @usableFromInline var previous: [Int] = []
    @usableFromInline var kept: [Bool] = []

    @inlinable
    package init() {}

    /// A node of the tree: the heaviest chain ending at a key in the node's range, and where it ends.
    @usableFromInline
    struct Node {
        @usableFromInline var weight: Int
        @usableFromInline var index: Int

        @inlinable
        init(weight: Int, index: Int) {
            self.weight = weight
            self.index = index
        }
    }

    /// The heaviest strictly increasing subsequence of `keys` (distinct) weighted by `weights` (positive): for each
    /// element, whether it belongs to it. The result shares the workspace's storage until the next call.
    @inlinable
    package mutating func heaviest(keys: [Int], weights: [Int]) -> [Bool] {
        let count = keys.count
        kept.removeAll(keepingCapacity: true)
        guard count > 0 else { return kept }
        // Ranks of the keys, 1-based, for the tree: by (key, index), sorted as words (the key above the index) when
        // the keys are small non-negative numbers, as ranks are; sorting the indices through the keys read the
        // array at every comparison.
        Self.reset(&rank, count, 0)
        let indexBits = UInt64.bitWidth - (count - 1).leadingZeroBitCount
        if let smallest = keys.min(), smallest >= 0, UInt64(keys.max()!).leadingZeroBitCount >= indexBits {
            Self.reset(&words, count, 0)
            words.withUnsafeMutableBufferPointer { words in
                for (index, key) in keys.enumerated() { words[index] = UInt64(key) << indexBits | UInt64(index) }
            }
            // The runs of a batch come mostly in order (most rows keep theirs): an insertion sort does little more
            // than one pass, where the radix sort paid its passes over 256 counts for every section's few dozen. A
            // flat list's runs are its stayers scattered among a thousand pieces: the sort gives up early for them.
            if !Self.insertionSort(&words, moves: 2 * count + 64) { sortWords(&words) }
            let mask = (1 << indexBits) - 1 as UInt64
            words.withUnsafeBufferPointer { words in
                rank.withUnsafeMutableBufferPointer { rank in
                    for (position, word) in words.enumerated() { rank[Int(word & mask)] = position + 1 }
                }
            }
        } else {
            let order = keys.indices.sorted { keys[$0] != keys[$1] ? keys[$0] < keys[$1] : $0 < $1 }
            for (position, index) in order.enumerated() { rank[index] = position + 1 }
        }
        Self.reset(&tree, count + 1, Node(weight: 0, index: -1))
        Self.reset(&best, count, 0)
        Self.reset(&previous, count, -1)
        // Through pointers: each subscript of the workspace's arrays checked its bounds and its buffer's uniqueness
        // (the workspace is a stored property), a dozen calls per element at the loops' twenty-odd steps. A node's
        // weight and index are one 16-byte pair: a step reads one line where two arrays read two.
        rank.withUnsafeBufferPointer { rank in
            weights.withUnsafeBufferPointer { weights in
                tree.withUnsafeMutableBufferPointer { tree in
                    best.withUnsafeMutableBufferPointer { best in
                        previous.withUnsafeMutableBufferPointer { previous in
                            for i in 0..<count {
                                // The best chain ending at a key below this one.
                                var r = rank[i] - 1
                                var bestWeight = 0
                                var bestIndex = -1
                                // Both loops select instead of branching: whether a node beats the best so far is
                                // data, mispredicted about half the time, and the loads and stores are of lines in
                                // the cache.
                                while r > 0 {
                                    let node = tree[r]
                                    let better = node.weight > bestWeight
                                    bestWeight = better ? node.weight : bestWeight
                                    bestIndex = better ? node.index : bestIndex
                                    r &= r &- 1
                                }
                                let total = bestWeight + weights[i]
                                best[i] = total
                                previous[i] = bestIndex
                                r = rank[i]
                                while r <= count {
                                    let node = tree[r]
                                    let better = total > node.weight
                                    tree[r] = better ? Node(weight: total, index: i) : node
                                    r &+= r & -r
                                }
                            }
                        }
                    }
                }
            }
        }
        Self.reset(&kept, count, false)
        var current = best.indices.max { best[$0] < best[$1] } ?? -1
        while current >= 0 {
            kept[current] = true
            current = previous[current]
        }
        return kept
    }

    /// Sorts `words` by insertion while it takes at most `moves` moves; returns false (the words partly sorted) when
    /// they are too far from their order for that.
    @inlinable
    static func insertionSort(_ words: inout [UInt64], moves: Int) -> Bool {
        var budget = moves
        return words.withUnsafeMutableBufferPointer { buffer in
            for i in buffer.indices.dropFirst() {
                let word = buffer[i]
                var j = i
                while j > 0 && buffer[j - 1] > word {
                    buffer[j] = buffer[j - 1]
                    j -= 1
                    budget -= 1
                }
                buffer[j] = word
                if budget < 0 { return false }
            }
            return true
        }
    }

    /// Makes `array` `count` copies of `value`, in its own storage when it has room.
    @inlinable
    static func reset<T>(_ array: inout [T], _ count: Int, _ value: T) {
        array.removeAll(keepingCapacity: true)
        array.append(contentsOf: repeatElement(value, count: count))
    }
}

/// Stayers of a section in new order, grouped into runs of consecutive old ranks, each weighted by its items:
/// `itemCount` per item (so that more stayers always win) plus one per item whose keys did not change (so that,
/// among minimal move sets, the one moving changed items wins). A run is kept or moved as a whole.
///
/// ``ChangeSet`` and EntityStore's incremental controller both build their runs here, so they weigh alike.
@usableFromInline
package struct WeightedRuns<Member> {
    /// The first old rank of each run.
    @usableFromInline package var keys: [Int] = []
    /// Each run's weight.
    @usableFromInline package var weights: [Int] = []
    /// Every run's members, run after run (one array: an array per run was an allocation per run).
    @usableFromInline package var members: [Member] = []
    /// Where each run's members start in `members`.
    @usableFromInline package var starts: [Int] = []
    @usableFromInline var previous = -2
    @usableFromInline let itemCount: Int
    @usableFromInline var workspace = IncreasingSubsequenceWorkspace()

    /// Runs weighted for lists holding `itemCount` items in all (old plus new, plus one).
    @inlinable
    package init(itemCount: Int) { self.itemCount = itemCount }

    /// Empties the runs, keeping their storage for the next section's.
    @inlinable
    package mutating func removeAll() {
        keys.removeAll(keepingCapacity: true)
        weights.removeAll(keepingCapacity: true)
        members.removeAll(keepingCapacity: true)
        starts.removeAll(keepingCapacity: true)
        previous = -2
    }

    /// Appends `count` stayers with consecutive old ranks from `rank`, of which `unchanged` kept their keys.
    @inlinable
    package mutating func append(rank: Int, count: Int = 1, unchanged: Int, member: Member) {
        let weight = count * itemCount + unchanged
        if rank == previous + 1, !members.isEmpty {
            weights[weights.count - 1] += weight
        } else {
            keys.append(rank)
            weights.append(weight)
            starts.append(members.count)
        }
        members.append(member)
        previous = rank + count - 1
    }

    /// The members of the runs a heaviest increasing subsequence does not keep: the ones to move.
    @inlinable
    package mutating func movedMembers() -> [Member] {
        var moved: [Member] = []
        forEachMovedMember { moved.append($0) }
        return moved
    }

    /// Calls `body` with each member of the runs a heaviest increasing subsequence does not keep, in order.
    @inlinable
    package mutating func forEachMovedMember(_ body: (Member) -> Void) {
        let kept = workspace.heaviest(keys: keys, weights: weights)
        for run in starts.indices where !kept[run] {
            for member in members[starts[run]..<(run + 1 < starts.count ? starts[run + 1] : members.count)] {
                body(member)
            }
        }
    }
}
