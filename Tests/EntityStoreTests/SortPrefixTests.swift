import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// A sort in memory orders candidates by their first sort value's prefix, and by their values only where prefixes
/// are equal: the order must be the one every comparison through the values gives, for every kind of value, both
/// directions, every string comparison, nil, ties on the first key, and text with and without a prefix.
@Suite struct SortPrefixTests {
    /// The order `precedes` gives, comparison by comparison.
    func reference(_ candidates: [ObjectContext.Candidate], _ keys: [SortKey]) -> [Int] {
        candidates.indices.sorted { a, b in
            ObjectContext.precedes(
                candidates[a].sortValues, candidates[a].id, candidates[b].sortValues, candidates[b].id, keys)
        }
    }

    @Test func prefixSortsOrderAsTheValuesDo() {
        var g = SeededGenerator(seed: 49)
        let doubles: [Double] = [-1.5, -0.0, 0, 2, .infinity, -.infinity, .nan, 1e300, -1e-300]
        let letters = Array("aAbBzZ09 _`{\u{0}")
        // Text surely in its canonical form beyond ASCII: prefixed in binary order only.
        let beyond = Array("\u{E9}\u{C9}\u{416}\u{65E5}")
        func text() -> String {
            // Often sharing their first 8 or 16 bytes: ties on the prefix's first word, or on both, are common.
            let head = ["", "Chapter ", "Chapter of part "].randomElement(using: &g)!
            return head + String((0..<Int.random(in: 0...4, using: &g)).map { _ in letters.randomElement(using: &g)! })
        }
        let makers: [(String, () -> Value)] = [
            (
                "int",
                {
                    .int(
                        Int64.random(in: -3...3, using: &g)
                            * [1, 1 << 40, Int64.max / 4][Int.random(in: 0..<3, using: &g)])
                }
            ),
            ("bool", { .bool(Bool.random(using: &g)) }),
            ("double", { .double(doubles.randomElement(using: &g)!) }),
            ("date", { .date(Date(timeIntervalSinceReferenceDate: doubles.randomElement(using: &g)!)) }),
            ("text", { .string(text()) }),
            ("canonical text", { .string(text() + String(beyond.randomElement(using: &g)!) + text()) }),
            // A combining mark after an ASCII letter: no prefixes, every comparison by value.
            ("other text", { .string(Bool.random(using: &g) ? text() : text() + "e\u{301}") }),
        ]
        var prefixed = 0
        for round in 0..<600 {
            let (kind, make) = makers[round % makers.count]
            let comparison = [
                SortKey.Comparison.binary, .caseInsensitive, .diacriticInsensitive,
                .caseDiacriticInsensitive, .localizedStandard,
            ][round / makers.count % 5]
            let keys = [
                SortKey("first", ascending: Bool.random(using: &g), comparison: comparison),
                SortKey("second", ascending: Bool.random(using: &g)),
            ]
            let candidates = (0..<Int.random(in: 0...60, using: &g)).map { i in
                ObjectContext.Candidate(
                    id: ObjectID(entityName: "Item", primaryKey: UInt64.random(in: 1...1_000, using: &g)),
                    sortValues: [Int.random(in: 0..<8, using: &g) == 0 ? .null : make(), .int(Int64(i % 3))])
            }
            let places = candidates.withUnsafeBufferPointer { ObjectContext.sortedPlaces($0, by: keys) }
            #expect(
                places.map { candidates[$0].id } == reference(candidates, keys).map { candidates[$0].id },
                "\(kind) \(comparison) \(keys.map(\.ascending))")
            if candidates.withUnsafeBufferPointer({ SortPrefix.prefixes(of: $0, by: keys[0]) }) != nil {
                prefixed += 1
            }
        }
        // Most rounds take the prefixes (all but other text and localizedStandard).
        #expect(prefixed > 300)
    }

    /// A double's words order as ``ValueSemantics`` orders doubles.
    @Test func doublesMapInTheirOrder() {
        let doubles: [Double] = [-.infinity, -1e300, -2, -1e-300, -0.0, 0, 1e-300, 3, .infinity, .nan]
        for x in doubles {
            for y in doubles {
                let order = ValueSemantics.order(x, y)
                let bits = (SortPrefix.orderedBits(x), SortPrefix.orderedBits(y))
                #expect((bits.0 < bits.1) == (order == .orderedAscending), "\(x) \(y)")
                #expect((bits.0 == bits.1) == (order == .orderedSame), "\(x) \(y)")
            }
        }
    }
}
