import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// The controller's compact row storage against a plain sorted array, over random inserts and removals large
/// enough to split and merge chunks and to grow and shift the hash table.
@Suite struct RowStoreTests {
    /// A reference row: keys and primary key.
    struct Reference {
        var pk: UInt64
        var keys: [Value]
    }

    static let sortKeys = [
        SortKey("group"), SortKey("score", ascending: false), SortKey("title", comparison: .caseInsensitive),
        SortKey("when"), SortKey("flag"),
    ]
    static let types: [AttributeType?] = [.int64, .double, .string, .date, .bool]

    static func randomKeys(_ g: inout SeededGenerator) -> [Value] {
        func maybeNil(_ value: Value) -> Value { Int.random(in: 0..<10, using: &g) == 0 ? .null : value }
        return [
            maybeNil(.int(Int64.random(in: -3...3, using: &g))),
            // Both zeros and NaN: the order's words must order them as the keys do (one zero, NaN last).
            maybeNil(.double([-0.5, 0, -0.0, 1.5, .infinity, .nan][Int.random(in: 0..<6, using: &g)])),
            maybeNil(
                .string(["a", "B", "b", "Ça", "long title that does not fit inline"][Int.random(in: 0..<5, using: &g)])),
            maybeNil(.date(Date(timeIntervalSinceReferenceDate: Double(Int.random(in: 0..<3, using: &g))))),
            maybeNil(.bool(Bool.random(using: &g))),
        ]
    }

    static func precedes(_ a: Reference, _ b: Reference) -> Bool {
        for (i, key) in sortKeys.enumerated() {
            let order = key.order(a.keys[i], b.keys[i])
            if order != .orderedSame { return order == .orderedAscending }
        }
        return a.pk < b.pk
    }

    static func sorted(_ rows: [Reference]) -> [Reference] { rows.sorted(by: precedes) }

    static func check(_ store: RowStore, _ reference: [Reference]) {
        #expect(store.count == reference.count)
        #expect(store.order.keys(in: 0..<store.count) == reference.map(\.pk))
        for (position, row) in reference.enumerated() {
            #expect(store.keys(of: row.pk) == row.keys)
            #expect(store.position(of: row.pk) == position)
        }
        // The batch lookup: every row's position, -1 for a key with no row and for 0 (never a primary key).
        let absent = (reference.map(\.pk).max() ?? 0) + 1
        #expect(store.positions(of: reference.map(\.pk) + [absent, 0]) == Array(reference.indices) + [-1, -1])
    }

    @Test func randomInsertsAndRemovalsKeepTheOrderAndTheKeys() {
        var g = SeededGenerator(seed: 42)
        var store = RowStore(sortKeys: Self.sortKeys, types: Self.types)
        var reference: [Reference] = []
        var nextPK: UInt64 = 1
        for round in 0..<8000 {
            if reference.isEmpty || Int.random(in: 0..<4, using: &g) > 0 {
                let row = Reference(pk: nextPK, keys: Self.randomKeys(&g))
                nextPK += 1
                let position = store.insert(row.pk, row.keys)
                var expected = 0
                var high = reference.count
                while expected < high {
                    let mid = (expected + high) / 2
                    if Self.precedes(reference[mid], row) { expected = mid + 1 } else { high = mid }
                }
                #expect(position == expected)
                reference.insert(row, at: expected)
            } else {
                let position = Int.random(in: 0..<reference.count, using: &g)
                store.remove(at: position)
                let gone = reference.remove(at: position)
                #expect(!store.contains(gone.pk))
            }
            store.order._checkInvariants()
            if round % 1000 == 999 { Self.check(store, reference) }
        }
        Self.check(store, reference)
        #expect(store.order.chunks.count > 1, "enough rows to need several chunks")
        // Remove everything: chunks go away and the table empties.
        while store.count > 0 { store.remove(at: Int.random(in: 0..<store.count, using: &g)) }
        #expect(store.order.chunks.isEmpty && store.table.count == 0)
    }

    /// Removals that merge two chunks, then inserts found by the chunks' fences near the merged bound: the fence
    /// of the merged chunk must be its new last key, or the insert lands in the wrong place.
    @Test func insertsAfterChunksMergeFindTheirPlaceByTheFences() {
        var g = SeededGenerator(seed: 11)
        // Keys 0, 10, 20, ...: room for new keys between any two.
        var reference = (0..<3072).map { UInt64($0) * 10 }
        var order = RowOrder(reference)
        order._checkInvariants()
        for round in 0..<6000 {
            let removing = round % 3 != 0 && !reference.isEmpty
            if removing {
                // Mostly from the first two chunks, so that they thin out and merge.
                let span = min(reference.count, 2048)
                let position = Int.random(in: 0..<span, using: &g)
                #expect(order.remove(at: position).pk == reference.remove(at: position))
            } else {
                let bound = reference.isEmpty ? 0 : reference[min(reference.count - 1, 1023)]
                let key = UInt64.random(in: bound.saturatingSubtract(30)...(bound + 30), using: &g)
                guard !reference.contains(key) else { continue }
                let position = order.partitionPoint { $0.pk < key }
                let expected = reference.firstIndex { $0 > key } ?? reference.count
                #expect(position == expected, "round \(round): key \(key) belongs at \(expected), found \(position)")
                order.insert(RowSlot(pk: key), at: position)
                reference.insert(key, at: expected)
            }
            order._checkInvariants()
        }
        #expect(order.keys(in: 0..<order.count) == reference)
    }

    /// The searches of a batch, run chunk by chunk, answer as one search each: past the last row, in chunks searched
    /// once and in a chunk searched often enough to be read through first. A batch applied in place leaves a copy
    /// of the order as it was.
    @Test func batchedSearchesAnswerAsSingleOnesAndCopiesKeepTheirRows() {
        var g = SeededGenerator(seed: 5)
        // Even keys with repeats and gaps: searches for odd keys fall between rows.
        let keys = (0..<5000).map { _ in UInt64.random(in: 1..<2000, using: &g) * 2 }.sorted()
        var order = RowOrder(keys)
        let targets = (0..<300).map { i in
            i < 100 ? UInt64.random(in: 0..<300, using: &g) : UInt64.random(in: 0...4100, using: &g)
        }
        let batched = order.partitionPoints(of: targets.map { RowSlot(pk: $0) }, words: 0) { slot, event in
            slot.pk < targets[event]
        }
        let single = targets.map { target in order.partitionPoint { $0.pk < target } }
        #expect(batched.points == single)
        // The row at each point, 0 past the last row.
        #expect(batched.rows == single.map { $0 < keys.count ? keys[$0] : 0 })
        #expect(single.contains(keys.count), "a point past the last row")
        #expect(single.contains { order.starts.dropFirst().contains($0) }, "a point at a chunk's first row")
        #expect(
            order.partitionPoints(of: [RowSlot(pk: 1)], words: 0) { _, _ in true }.points == [keys.count],
            "after every row")

        let copy = order
        let positions = order.apply(
            removing: [0, 10, 1500, 4999],
            inserting: [(5, RowSlot(pk: keys[4])), (5, RowSlot(pk: keys[4])), (2100, RowSlot(pk: keys[2099]))])
        order._checkInvariants()
        let expected =
            Array(keys[1..<5]) + [keys[4], keys[4]] + Array(keys[5..<10]) + Array(keys[11..<1500])
            + Array(keys[1501..<2100]) + [keys[2099]] + Array(keys[2100..<4999])
        #expect(order.keys(in: 0..<order.count) == expected)
        // Before the third: 2,097 old rows kept of the first 2,100 (three removed) and the two inserted.
        #expect(positions == [4, 5, 2099])
        #expect(copy.keys(in: 0..<copy.count) == keys, "the copy shares no changed chunk")
    }

    /// A row whose stored keys no longer say where it is (the order and the table disagree, which no batch does)
    /// is still found, by a scan: the chunk-by-chunk searches confirm each row they land on.
    @Test func aRowNotWhereItsKeysSayIsFoundByAScan() {
        var store = RowStore(sortKeys: [SortKey("score")], types: [.int64])
        store.replaceAll(with: (1...3000).map { (UInt64($0), [Value.int(Int64($0))]) })
        store.table.set(10, [.int(2_500)])  // row 10 stays at position 9
        #expect(store.positions(of: [10, 11, 2_500]) == [9, 10, 2_499])
        #expect(store.positions(of: Array(1...64)) == Array(0..<64))
    }

    /// A batch's new rows share one array of keys: each row reads back its own, and a row whose keys fail midway
    /// leaves no partial row behind.
    @Test func newRowsKeepEachRowsKeysAndDropAFailedOne() {
        struct Unreadable: Error {}
        var rows = NewRows(width: 2)
        rows.append(7, [.int(1), .string("a")])
        #expect(throws: Unreadable.self) {
            try rows.append(8) { keys in
                keys.append(.int(2))
                throw Unreadable()
            }
        }
        rows.append(9) { keys in keys += [.int(3), .null] }
        #expect(rows.pks == [7, 9])
        #expect(Array(rows.keys(of: 0)) == [.int(1), .string("a")])
        #expect(Array(rows.keys(of: 1)) == [.int(3), .null])
        #expect(rows.key(1, of: 1) == .null)
    }

    @Test func mergeEqualsRemovingAndInsertingOneByOne() {
        var g = SeededGenerator(seed: 7)
        let initial = Self.sorted((1...5000).map { Reference(pk: UInt64($0), keys: Self.randomKeys(&g)) })
        var merged = RowStore(sortKeys: Self.sortKeys, types: Self.types)
        merged.replaceAll(with: initial.map { ($0.pk, $0.keys) })
        var oneByOne = merged
        // Remove 700 rows, re-insert 300 of them with new keys and add 200 new ones.
        let removedPositions = Array(Set((0..<700).map { _ in Int.random(in: 0..<5000, using: &g) })).sorted()
        let removedPKs = removedPositions.map { initial[$0].pk }
        let reinserted = removedPKs.prefix(300).map { Reference(pk: $0, keys: Self.randomKeys(&g)) }
        let added = (0..<200).map { Reference(pk: UInt64(6000 + $0), keys: Self.randomKeys(&g)) }
        let inserted = Self.sorted(reinserted + added)
        // The merge takes the new rows in any order.
        let shuffled = inserted.shuffled(using: &g)
        let positions = merged.merge(removing: removedPositions, inserting: shuffled.map { ($0.pk, $0.keys) })
        for position in removedPositions.reversed() { oneByOne.remove(at: position) }
        for row in inserted { oneByOne.insert(row.pk, row.keys) }
        let removedSet = Set(removedPKs)
        let expected = Self.sorted(initial.filter { !removedSet.contains($0.pk) } + inserted)
        Self.check(merged, expected)
        // A row that comes back keeps its bucket with its new keys (checked above); one removed for good is gone.
        for pk in removedPKs.dropFirst(300) { #expect(!merged.contains(pk), "\(pk) was removed") }
        for (row, position) in zip(shuffled, positions) { #expect(expected[position].pk == row.pk) }
        Self.check(oneByOne, expected)
    }

    /// With one or two sort keys the slots' words and the primary key decide the order, and a batch's searches
    /// compare them inline: nil keys, a word equal to the opaque marker (`Int64.max` ascending), NaN and both zeros
    /// send a comparison to the keys, and every answer is the one the keys give.
    @Test(arguments: [1, 2])
    func searchesDecidedByTheWordsAnswerAsTheKeysDo(keyCount: Int) {
        var g = SeededGenerator(seed: UInt64(30 + keyCount))
        let sortKeys = [SortKey("group"), SortKey("score", ascending: false)].prefix(keyCount)
        let types: [AttributeType?] = Array([.int64, .double].prefix(keyCount))
        func keys() -> [Value] {
            let group: Value =
                switch Int.random(in: 0..<12, using: &g) {
                case 0: .null
                case 1: .int(.max)
                case 2: .int(.min)
                default: .int(Int64.random(in: -3...3, using: &g))
                }
            let score: Value =
                Int.random(in: 0..<10, using: &g) == 0
                ? .null : .double([-0.5, 0, -0.0, 1.5, .infinity, .nan][Int.random(in: 0..<6, using: &g)])
            return Array([group, score].prefix(keyCount))
        }
        func precedes(_ a: Reference, _ b: Reference) -> Bool {
            for (i, key) in sortKeys.enumerated() {
                let order = key.order(a.keys[i], b.keys[i])
                if order != .orderedSame { return order == .orderedAscending }
            }
            return a.pk < b.pk
        }
        let initial = (1...6000).map { Reference(pk: UInt64($0), keys: keys()) }.sorted(by: precedes)
        var merged = RowStore(sortKeys: Array(sortKeys), types: types)
        #expect(merged.decidingWords == keyCount)
        merged.replaceAll(with: initial.map { ($0.pk, $0.keys) })
        var oneByOne = merged
        let removedPositions = Array(Set((0..<800).map { _ in Int.random(in: 0..<6000, using: &g) })).sorted()
        let removedPKs = removedPositions.map { initial[$0].pk }
        let inserted = (removedPKs.prefix(400) + (7000..<7300)).map { Reference(pk: $0, keys: keys()) }
        let located = merged.positions(of: initial.map(\.pk))
        #expect(located == Array(initial.indices))
        let positions = merged.merge(removing: removedPositions, inserting: inserted.map { ($0.pk, $0.keys) })
        for position in removedPositions.reversed() { oneByOne.remove(at: position) }
        for row in inserted { oneByOne.insert(row.pk, row.keys) }
        let removedSet = Set(removedPKs)
        let expected = (initial.filter { !removedSet.contains($0.pk) } + inserted).sorted(by: precedes)
        #expect(merged.order.keys(in: 0..<merged.count) == expected.map(\.pk))
        #expect(oneByOne.order.keys(in: 0..<oneByOne.count) == expected.map(\.pk))
        for (row, position) in zip(inserted, positions) { #expect(expected[position].pk == row.pk) }
        #expect(merged.positions(of: expected.map(\.pk)) == Array(expected.indices))
        // The searches themselves, not mended by the linear fallback.
        #expect(merged.searchedPositions(of: initial.map(\.pk)) == merged.positions(of: initial.map(\.pk)))
        #expect(merged.searchedPositions(of: expected.map(\.pk)) == Array(expected.indices))
    }

    /// The order's batch step alone against a plain array, over small batches whose removals and insertions fall
    /// together in chunks: an insertion at the point of a removed row, several at one point, at a chunk's first
    /// row and after the last, runs of removals, and batches that leave a chunk's size as it was (its rows after
    /// both events stay where they are).
    @Test func batchesMoveEachStretchOfRowsToItsPlace() throws {
        var g = SeededGenerator(seed: 41)
        var reference = (0..<3000).map { RowSlot(pk: UInt64($0 + 1)) }
        var order = RowOrder(reference)
        var next: UInt64 = 10_000
        for round in 0..<300 {
            var removed = Set<Int>()
            var points: [Int] = []
            for _ in 0..<Int.random(in: 0...12, using: &g) {
                let position = Int.random(in: 0..<reference.count, using: &g)
                switch Int.random(in: 0..<5, using: &g) {
                case 0: removed.formUnion(position..<min(reference.count, position + 5))
                case 1: points.append(contentsOf: repeatElement(position, count: 3))
                case 2:
                    removed.insert(position)
                    points.append(position)
                case 3: points.append(Int.random(in: 0..<10, using: &g) == 0 ? reference.count : position)
                default: removed.insert(position)
                }
            }
            // Rows with one point in their order among themselves: here, the order they are made in.
            let inserted = points.sorted().map { point -> (point: Int, slot: RowSlot) in
                next += 1
                return (point, RowSlot(pk: next))
            }
            var expected: [RowSlot] = []
            var k = 0
            for position in 0...reference.count {
                while k < inserted.count && inserted[k].point == position {
                    expected.append(inserted[k].slot)
                    k += 1
                }
                if position < reference.count && !removed.contains(position) { expected.append(reference[position]) }
            }
            let positions = order.apply(removing: removed.sorted(), inserting: inserted)
            order._checkInvariants()
            // One failing round is enough: the rounds after it start from a wrong order.
            let keys = order.keys(in: 0..<order.count)
            try #require(
                keys == expected.map(\.pk),
                "round \(round): first wrong at \(keys.indices.first { keys[$0] != expected[$0].pk } ?? keys.count)")
            for (row, position) in zip(inserted, positions) { #expect(expected[position] == row.slot) }
            reference = expected
        }
    }

    /// Batches that empty whole chunks, thin others out, and pour thousands of rows into one chunk's range: the
    /// merge rebuilds only the chunks it touches, so it must join thin ones, split full ones and keep the fences.
    @Test func mergesThatThinAndOverfillChunksKeepTheOrder() {
        var g = SeededGenerator(seed: 23)
        var reference = Self.sorted((1...12_000).map { Reference(pk: UInt64($0), keys: Self.randomKeys(&g)) })
        var store = RowStore(sortKeys: Self.sortKeys, types: Self.types)
        store.replaceAll(with: reference.map { ($0.pk, $0.keys) })
        var nextPK: UInt64 = 20_000
        for round in 0..<12 {
            var removed = Set<Int>()
            switch round % 3 {
            case 0:  // most rows of a stretch of chunks
                let start = Int.random(in: 0..<max(1, reference.count - 4000), using: &g)
                for position in start..<min(reference.count, start + 4000) where Int.random(in: 0..<10, using: &g) > 0 {
                    removed.insert(position)
                }
            case 1:  // a few rows anywhere
                for _ in 0..<min(50, reference.count) { removed.insert(Int.random(in: 0..<reference.count, using: &g)) }
            default:  // nothing removed
                break
            }
            // New rows sharing one key prefix land in one stretch of the order; others anywhere.
            let group = Value.int(Int64.random(in: -3...3, using: &g))
            let added = (0..<(round % 3 == 2 ? 5000 : 300)).map { i -> Reference in
                var keys = Self.randomKeys(&g)
                if i % 4 != 0 { keys[0] = group }
                nextPK += 1
                return Reference(pk: nextPK, keys: keys)
            }
            let positions = store.merge(removing: removed.sorted(), inserting: added.map { ($0.pk, $0.keys) })
            reference = Self.sorted(
                reference.enumerated().filter { !removed.contains($0.offset) }.map(\.element) + added)
            store.order._checkInvariants()
            #expect(store.order.keys(in: 0..<store.count) == reference.map(\.pk), "round \(round)")
            for (row, position) in zip(added, positions) { #expect(reference[position].pk == row.pk) }
        }
        Self.check(store, reference)
        // Everything removed in one batch, then rows into the empty order.
        store.merge(removing: Array(0..<store.count), inserting: [])
        #expect(store.count == 0 && store.order.chunks.isEmpty)
        let fresh = (1...3000).map { Reference(pk: UInt64($0), keys: Self.randomKeys(&g)) }
        let positions = store.merge(removing: [], inserting: fresh.map { ($0.pk, $0.keys) })
        store.order._checkInvariants()
        let expected = Self.sorted(fresh)
        Self.check(store, expected)
        for (row, position) in zip(fresh, positions) { #expect(expected[position].pk == row.pk) }
    }

    @Test func valuesOfAnotherTypeAndColumnsBeyondTheEighthAreKept() {
        // Ten columns: the ninth and tenth are always pooled; a string in an int column is kept as it is.
        let keys: [Value] = [
            .string("not an int"), .int(1), .null, .int(3), .int(4), .int(5), .int(6), .int(7), .null,
            .string("ten"),
        ]
        var table = RowKeyTable(types: Array(repeating: .int64, count: 10))
        table.set(9, keys)
        #expect(table.bucket(of: 9).map(table.keys(at:)) == keys)
        table.set(9, Array(repeating: .int(2), count: 10))
        #expect(table.bucket(of: 9).map(table.keys(at:)) == Array(repeating: .int(2), count: 10))
        #expect(table.remove(9) && !table.remove(9) && table.bucket(of: 9) == nil)
    }

    @Test func sectionsShareTheRowsAndReadTheirIDsWhenAsked() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        for i in 0..<30 { try world.add("t\(i)", group: "g\(i % 3)", rank: Int64(i)) }
        try world.context.save()
        let controller = try world.controller(delegate: RecordingDelegate())
        let sections = controller.sections
        #expect(sections.map(\.numberOfObjects) == [10, 10, 10])
        #expect(controller.numberOfSections == 3 && controller.numberOfObjects(inSection: 1) == 10)
        #expect(controller.numberOfObjects(inSection: 3) == 0)
        let first = sections[0].objectIDs
        // A later change does not alter a section taken before it.
        try world.context.object(with: first[0]).setValue(.string("g1"), forKey: "group")
        world.context.processPendingChanges()
        #expect(sections[0].objectIDs == first)
        #expect(controller.sections[0].objectIDs == Array(first.dropFirst()))
        #expect(controller.numberOfObjects(inSection: 1) == 11)
    }
}

extension UInt64 {
    fileprivate func saturatingSubtract(_ other: UInt64) -> UInt64 { self > other ? self - other : 0 }
}
