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
