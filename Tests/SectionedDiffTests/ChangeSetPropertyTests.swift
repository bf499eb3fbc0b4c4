import SectionedDiff
import TestSupport
import Testing

@Suite struct ChangeSetPropertyTests {
    /// A random batch over a random sectioned layout: items with a section key and a sort rank; some are deleted,
    /// inserted, or change section or rank; the lists are the items grouped by section and sorted by rank.
    func randomCase(_ g: inout SeededGenerator) -> (Lists, Lists, [String: Set<String>]) {
        let sectionCount = Int.random(in: 1...6, using: &g)
        var items: [String: (section: Int, rank: Int)] = [:]
        for i in 0..<Int.random(in: 0...30, using: &g) {
            items["i\(i)"] = (Int.random(in: 0..<sectionCount, using: &g), Int.random(in: 0..<50, using: &g))
        }
        func layout(_ items: [String: (section: Int, rank: Int)]) -> Lists {
            let grouped = Dictionary(grouping: items.keys) { items[$0]!.section }
            return SectionedList(
                grouped.keys.sorted().map { section in
                    .init(
                        key: "S\(section)",
                        items: grouped[section]!.sorted { (items[$0]!.rank, $0) < (items[$1]!.rank, $1) })
                })
        }
        let old = layout(items)
        var changed: [String: Set<String>] = [:]
        var next = items
        for (item, value) in items {
            switch Int.random(in: 0..<10, using: &g) {
            case 0: next[item] = nil
            case 1:
                next[item] = (Int.random(in: 0..<(sectionCount + 1), using: &g), value.rank)
                changed[item] = ["section"]
            case 2:
                next[item] = (value.section, Int.random(in: 0..<50, using: &g))
                changed[item] = ["rank"]
            case 3: changed[item] = ["title"]
            case 4: changed[item] = []  // an equal-value write
            default: break
            }
        }
        for i in 0..<Int.random(in: 0...5, using: &g) {
            next["n\(i)"] = (Int.random(in: 0..<(sectionCount + 1), using: &g), Int.random(in: 0..<50, using: &g))
        }
        return (old, layout(next), changed)
    }

    /// The heaviest increasing subsequence by the O(n²) textbook recurrence: the reference for minimality.
    func referenceKept(_ keys: [Int], _ weights: [Int]) -> Int {
        var best = [Int](repeating: 0, count: keys.count)
        for i in keys.indices {
            best[i] = weights[i]
            for j in 0..<i where keys[j] < keys[i] { best[i] = max(best[i], best[j] + weights[i]) }
        }
        return best.max() ?? 0
    }

    @Test func thousandsOfRandomBatchesApplyValidateAndMoveMinimally() throws {
        var g = SeededGenerator(seed: 0xC0FFEE)
        for round in 0..<3000 {
            let (old, new, changed) = randomCase(&g)
            let changes = try ChangeSet(from: old, to: new, changedKeys: changed)
            #expect(try changes.apply(to: old) == new, "round \(round)")
            let problems = BatchValidator.problems(changes)
            #expect(problems.isEmpty, "round \(round): \(problems)")

            // Minimality, section by section, against the reference, weighting unchanged items as the contract
            // prefers: same number of stayers kept, and as many unchanged ones as possible.
            let n = old.itemCount + new.itemCount + 1
            let movedSet = Set(changes.movedItems.map(\.item))
            for section in new.sections {
                guard let oldSection = old.sections.first(where: { $0.key == section.key }) else { continue }
                let stayers = section.items.filter { oldSection.items.contains($0) }
                let oldOrder = oldSection.items.filter { stayers.contains($0) }
                let keys = stayers.map { oldOrder.firstIndex(of: $0)! }
                let weights = stayers.map { n + ((changed[$0]?.isEmpty ?? true) ? 1 : 0) }
                let keptWeight = zip(stayers, weights).filter { !movedSet.contains($0.0) }.map(\.1).reduce(0, +)
                #expect(keptWeight == referenceKept(keys, weights), "round \(round) section \(section.key)")
            }
            // Fates: every item accounted for exactly once.
            let all = Set(old.sections.flatMap(\.items)).union(new.sections.flatMap(\.items))
            let fates =
                changes.deletedItems.map(\.item) + changes.insertedItems.map(\.item) + changes.movedItems.map(\.item)
                + changes.updatedItems.map(\.item)
            #expect(Set(fates).count == fates.count)
            #expect(Set(fates).isSubset(of: all))
            // Splices rebuild the flat list.
            var flat = old.sections.flatMap(\.items)
            for splice in changes.splices {
                flat.replaceSubrange(splice.offset..<(splice.offset + splice.removed), with: splice.inserted)
            }
            #expect(flat == new.sections.flatMap(\.items), "round \(round)")
            if let difference = changes.flatDifference {
                #expect(old.sections.flatMap(\.items).applying(difference) == new.sections.flatMap(\.items))
            } else {
                Issue.record("round \(round): no CollectionDifference")
            }
        }
    }
}
