import Foundation
import SectionedDiff
import TestSupport
import Testing

@testable import EntityStore

/// The sort by integer key that orders a context's pending changes and a controller's batches: keys and places in
/// one word when they fit, pairs when not; either way ties keep their order.
@Suite struct BatchSortingTests {
    struct Element: Equatable {
        var key: UInt64
        var label: String
    }

    @Test(arguments: [UInt64(3), 1 << 20, 1 << 50, UInt64.max])
    func elementsSortByKeyWithTiesInTheirOrder(largestKey: UInt64) {
        var g = SeededGenerator(seed: largestKey % 1_000 + 1)
        for count in [0, 1, 2, 40, 1_500] {
            var elements = (0..<count).map { i in
                Element(key: UInt64.random(in: 0...largestKey, using: &g), label: "e\(i)")
            }
            let expected = elements.enumerated().sorted { a, b in
                a.element.key != b.element.key ? a.element.key < b.element.key : a.offset < b.offset
            }.map(\.element)
            elements.sortByKey(\.key)
            #expect(elements == expected, "\(count) elements, keys up to \(largestKey)")
        }
    }

    /// A batch's index entries sorted as words (keys of one length up to 16 bytes, primary keys ascending) come
    /// out as the comparison sort of their bytes and primary keys orders them; other batches take the comparison.
    @Test(arguments: ["small ints", "all ints", "doubles", "strings of one length", "strings", "shuffled keys"])
    func indexEntriesSortInTheIndexsOrder(kind: String) {
        var g = SeededGenerator(seed: UInt64(kind.utf8.count) + 3)
        for count in [1, 2, 31, 33, 700, 3_000] {
            let values: [Value] = (0..<count).map { _ in
                switch kind {
                case "small ints", "shuffled keys": .int(Int64.random(in: 0..<9_000, using: &g))
                case "all ints": .int(Int64.random(in: .min ... .max, using: &g))
                case "doubles": .double(Double.random(in: -1e9...1e9, using: &g).rounded() / 8)
                case "strings of one length": .string(String((0..<9).map { _ in "abc".randomElement(using: &g)! }))
                default: .string(String(repeating: "x", count: Int.random(in: 0..<20, using: &g)))
                }
            }
            var pks = (1...UInt64(count)).map { $0 * 3 }
            if kind == "shuffled keys" { pks.shuffle(using: &g) }
            var bytes: [UInt8] = []
            var keyed: [([UInt8], UInt64)] = []
            var entries: [ChangeWriter.IndexEntry] = []
            for (value, pk) in zip(values, pks) {
                let key = IndexKey.encode(value, caseInsensitive: false)
                entries.append(ChangeWriter.indexEntry(key, at: bytes.count, pk))
                bytes += key
                keyed.append((key, pk))
            }
            // Small integers differ in two bytes, so they always sort as words; keys of many lengths or primary
            // keys out of order never do; the rest do while the bytes that differ fit beside the places.
            let order = ChangeWriter.orderAsWords(entries)
            if kind == "small ints" || count == 1 { #expect(order != nil, "\(kind), \(count)") }
            if kind == "strings" || kind == "shuffled keys", count > 2 { #expect(order == nil, "\(kind), \(count)") }
            let expected = keyed.sorted { a, b in
                a.0 != b.0 ? a.0.lexicographicallyPrecedes(b.0) : a.1 < b.1
            }
            var compared = entries
            ChangeWriter.sortByComparison(&compared, bytes)
            for sorted in [compared] + (order.map { [$0.map { entries[$0] }] } ?? []) {
                #expect(sorted.map { Array(bytes[$0.start..<($0.start + $0.count)]) } == expected.map(\.0), "\(kind)")
                #expect(sorted.map(\.pk) == expected.map(\.1), "\(kind), \(count)")
            }
        }
    }

    @Test func elementsInOrderAlreadyStayAsTheyAre() {
        var elements = (0..<100).map { Element(key: UInt64($0 / 3), label: "e\($0)") }
        let before = elements
        elements.sortByKey(\.key)
        #expect(elements == before)
    }

    @Test func pathsOrderAsTheirKeysDo() {
        var g = SeededGenerator(seed: 5)
        let paths = (0..<500).map { _ in
            ItemPath(section: Int.random(in: 0..<1_000, using: &g), item: Int.random(in: 0..<3_000_000, using: &g))
        }
        for (a, b) in zip(paths, paths.dropFirst()) {
            #expect((a < b) == (a.orderKey < b.orderKey), "\(a) against \(b)")
            #expect((a == b) == (a.orderKey == b.orderKey), "\(a) against \(b)")
        }
    }
}
