/// The heaviest strictly increasing subsequence, in O(m log m) with a Fenwick tree of prefix maxima.
///
/// - Parameters:
///   - keys: Distinct keys, in sequence order.
///   - weights: A positive weight per element.
/// - Returns: For each element, whether it belongs to the chosen subsequence.
@inlinable
package func heaviestIncreasingSubsequence(keys: [Int], weights: [Int]) -> [Bool] {
    let count = keys.count
    guard count > 0 else { return [] }
    // Ranks of the keys, 1-based, for the tree.
    // Ranks by (key, index): sorted as words (the key above the index) when the keys are small non-negative
    // numbers, as ranks are; sorting the indices through the keys read the array at every comparison.
    var rank = [Int](repeating: 0, count: count)
    let indexBits = UInt64.bitWidth - (count - 1).leadingZeroBitCount
    if let smallest = keys.min(), smallest >= 0, UInt64(keys.max()!).leadingZeroBitCount >= indexBits {
        var words = keys.enumerated().map { UInt64($0.element) << indexBits | UInt64($0.offset) }
        sortWords(&words)
        let mask = (1 << indexBits) - 1 as UInt64
        for (position, word) in words.enumerated() { rank[Int(word & mask)] = position + 1 }
    } else {
        let order = keys.indices.sorted { keys[$0] != keys[$1] ? keys[$0] < keys[$1] : $0 < $1 }
        for (position, index) in order.enumerated() { rank[index] = position + 1 }
    }
    var treeWeight = [Int](repeating: 0, count: count + 1)
    var treeIndex = [Int](repeating: -1, count: count + 1)
    var best = [Int](repeating: 0, count: count)
    var previous = [Int](repeating: -1, count: count)
    for i in 0..<count {
        // The best chain ending at a key below this one.
        var r = rank[i] - 1
        var bestWeight = 0
        var bestIndex = -1
        while r > 0 {
            if treeWeight[r] > bestWeight {
                bestWeight = treeWeight[r]
                bestIndex = treeIndex[r]
            }
            r -= r & -r
        }
        best[i] = bestWeight + weights[i]
        previous[i] = bestIndex
        r = rank[i]
        while r <= count {
            if best[i] > treeWeight[r] {
                treeWeight[r] = best[i]
                treeIndex[r] = i
            }
            r += r & -r
        }
    }
    var kept = [Bool](repeating: false, count: count)
    var current = best.indices.max { best[$0] < best[$1] } ?? -1
    while current >= 0 {
        kept[current] = true
        current = previous[current]
    }
    return kept
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
    package func movedMembers() -> [Member] {
        let kept = heaviestIncreasingSubsequence(keys: keys, weights: weights)
        var moved: [Member] = []
        for run in starts.indices where !kept[run] {
            moved += members[starts[run]..<(run + 1 < starts.count ? starts[run + 1] : members.count)]
        }
        return moved
    }
}
