import SectionedDiff
import TestSupport
import Testing

/// The radix sort the controller and the diff sort their batches with, and the heaviest increasing subsequence
/// whose ranks it computes, against plain references.
@Suite struct WordSortTests {
    @Test(arguments: [0, 1, 2, 5, 32, 33, 100, 1000, 4097])
    func wordsSortAsTheStandardLibrarySortsThem(count: Int) {
        var g = SeededGenerator(seed: UInt64(count) + 7)
        for width in [1, 8, 9, 27, 56, 63, 64] {
            let mask = width == 64 ? UInt64.max : (1 << UInt64(width)) - 1
            var words = (0..<count).map { _ in UInt64.random(in: 0...UInt64.max, using: &g) & mask }
            if count > 3 { words[count / 2] = words[0] }  // a repeated word
            let expected = words.sorted()
            sortWords(&words)
            #expect(words == expected, "\(count) words of \(width) bits")
        }
    }

    /// Words that share some of their bytes (the usual batch: keys in a narrow range above places) sort, wherever
    /// the shared bytes are.
    @Test func wordsWithSharedBytesSort() {
        var g = SeededGenerator(seed: 0x5EED)
        // Each pattern: the bytes (of the low four) that vary; the others hold a constant.
        for varying in [[0], [1], [3], [0, 2], [1, 2], [0, 3], [0, 1, 3], [1, 2, 3], [0, 1, 2, 3]] {
            var mask: UInt64 = 0
            for byte in varying { mask |= 0xFF << UInt64(byte * 8) }
            let shared = 0xA5C3_5A3C & ~mask
            var words = (0..<500).map { _ in UInt64.random(in: 0...UInt64.max, using: &g) & mask | shared }
            let expected = words.sorted()
            sortWords(&words)
            #expect(words == expected, "bytes \(varying) varying")
        }
    }

    /// The weight of the heaviest strictly increasing subsequence, by the quadratic recurrence.
    static func heaviestWeight(_ keys: [Int], _ weights: [Int]) -> Int {
        var best = weights
        for i in keys.indices {
            for j in 0..<i where keys[j] < keys[i] { best[i] = max(best[i], best[j] + weights[i]) }
        }
        return best.max() ?? 0
    }

    @Test func theChosenSubsequenceIsIncreasingAndHeaviestWhateverTheKeysSign() {
        var g = SeededGenerator(seed: 11)
        for round in 0..<400 {
            let count = Int.random(in: 0...60, using: &g)
            // Non-negative keys take the word sort; negative ones the general sort. Both must choose alike.
            let offset = round % 2 == 0 ? 0 : -1_000
            // Distinct keys, as the function asks.
            let keys = Array((0..<80).shuffled(using: &g).prefix(count)).map { $0 + offset }
            let weights = (0..<count).map { _ in Int.random(in: 1...5, using: &g) }
            let kept = heaviestIncreasingSubsequence(keys: keys, weights: weights)
            let chosen = keys.indices.filter { kept[$0] }
            #expect(zip(chosen, chosen.dropFirst()).allSatisfy { keys[$0] < keys[$1] }, "round \(round)")
            #expect(chosen.map { weights[$0] }.reduce(0, +) == Self.heaviestWeight(keys, weights), "round \(round)")
            let shifted = heaviestIncreasingSubsequence(keys: keys.map { $0 - offset }, weights: weights)
            #expect(shifted == kept, "round \(round): the two sorts chose differently")
        }
    }

    /// One workspace asked again and again (as a controller asks once per section) answers as a fresh one: inputs
    /// nearly in order (sorted by insertion), shuffled ones (past the insertion sort's budget, sorted by words),
    /// larger and smaller than the last, and empty.
    @Test func aReusedWorkspaceAnswersAsAFreshOne() {
        var g = SeededGenerator(seed: 29)
        var workspace = IncreasingSubsequenceWorkspace()
        for round in 0..<300 {
            let count = [0, 1, 7, 40, 150, 700][round % 6]
            var keys = Array(0..<(count * 2)).shuffled(using: &g).prefix(count).sorted()
            if round % 4 == 1 {
                keys.shuffle(using: &g)
            } else {
                // Nearly in order: a few keys taken out and put back elsewhere.
                for _ in 0..<min(count, 5) {
                    let from = Int.random(in: 0..<count, using: &g)
                    keys.insert(keys.remove(at: from), at: Int.random(in: 0..<count, using: &g))
                }
            }
            let weights = (0..<count).map { _ in Int.random(in: 1...9, using: &g) }
            let reused = workspace.heaviest(keys: keys, weights: weights)
            let chosen = keys.indices.filter { reused[$0] }
            #expect(reused.count == count)
            #expect(zip(chosen, chosen.dropFirst()).allSatisfy { keys[$0] < keys[$1] }, "round \(round)")
            if count <= 150 {
                #expect(chosen.map { weights[$0] }.reduce(0, +) == Self.heaviestWeight(keys, weights), "round \(round)")
            }
            #expect(reused == heaviestIncreasingSubsequence(keys: keys, weights: weights), "round \(round)")
        }
    }
}
