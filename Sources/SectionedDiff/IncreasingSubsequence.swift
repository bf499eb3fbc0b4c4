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
    let order = keys.indices.sorted { keys[$0] < keys[$1] }
    var rank = [Int](repeating: 0, count: count)
    for (position, index) in order.enumerated() { rank[index] = position + 1 }
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
