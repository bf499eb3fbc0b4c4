import EntityStore
import Foundation
import TestSupport
import Testing

/// A window (offset and limit) is read without materializing what it leaves out: matches before the offset are only
/// counted when the results are read in their order, a scan without sort keys stops at the limit, and a sort in
/// memory keeps only the best candidates as it reads. Each is checked against the same request without a window,
/// windowed afterwards, over every access path, with and without the context's unsaved changes.
@Suite struct FetchWindowTests {
    static func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Row") {
                Attribute("n", .int64, default: 0, indexed: true)
                Attribute("v", .double, default: 0)
                Attribute("s", .string, default: "")
                Attribute("o", .int64, optional: true)
                Attribute("flag", .bool, default: false)
            }
        }
    }

    static func values(_ g: inout SeededGenerator) -> [String: Value] {
        [
            // Few distinct values: ties everywhere, broken by ID.
            "n": .int(Int64.random(in: 0..<300, using: &g)),
            "v": .double(Double(Int.random(in: 0..<50, using: &g)) / 4),
            "s": .string(["alpha", "Beta", "beta", "gamma", "Älpha", ""].randomElement(using: &g)!),
            "o": Bool.random(using: &g) ? .null : .int(Int64.random(in: -5..<5, using: &g)),
            "flag": .bool(Int.random(in: 0..<4, using: &g) == 0),
        ]
    }

    @Test(arguments: [1 as UInt64, 2])
    func everyWindowEqualsTheWholeResultWindowed(seed: UInt64) throws {
        try withStore(schema: try Self.schema()) { store, _ in
            var g = SeededGenerator(seed: seed)
            try store.batchInsert(into: "Row", objects: (0..<2_000).map { _ in Self.values(&g) })
            let predicates: [String?] = [
                nil, "n == 7", "n BETWEEN {20, 180}", "n > 100 AND flag == true", "v >= 3.5", "flag == false",
                "s ==[c] 'beta' OR o == nil", "n IN {1, 2, 3, 250}", "o < 0",
            ]
            let sorts: [[SortKey]] = [
                [], [SortKey("n")], [SortKey("n", ascending: false)], [SortKey("v")],
                [SortKey("v", ascending: false), SortKey("n")], [SortKey("s", comparison: .caseInsensitive)],
                [SortKey("o"), SortKey("v", ascending: false)], [SortKey("n"), SortKey("s")],
            ]
            for round in 0..<TestScale.size(4, stress: 40) {
                let context = ObjectContext(store: store)
                if round % 3 != 0 {
                    // Unsaved changes: the window must hold them where they sort.
                    let some = try context.fetch(FetchRequest(entity: "Row", predicate: try FetchPredicate("n < 40")))
                    for object in some.shuffled(using: &g).prefix(15) {
                        if Bool.random(using: &g) {
                            try context.delete(object)
                        } else {
                            for (key, value) in Self.values(&g) { try object.setValue(value, forKey: key) }
                        }
                    }
                    for _ in 0..<Int.random(in: 0..<10, using: &g) {
                        let object = try context.insert("Row")
                        for (key, value) in Self.values(&g) { try object.setValue(value, forKey: key) }
                    }
                }
                for _ in 0..<8 {
                    var request = FetchRequest(
                        entity: "Row",
                        predicate: try predicates.randomElement(using: &g)!.map { try FetchPredicate($0) },
                        sortKeys: sorts.randomElement(using: &g)!)
                    request.includesPendingChanges = Bool.random(using: &g) || round % 3 == 0
                    var whole = request
                    let all = try context.fetchObjectIDs(whole)
                    request.fetchOffset = [0, 0, 1, 7, 500, 1_200, 1_990, 3_000].randomElement(using: &g)!
                    request.fetchLimit = [0, 1, 5, 20, 300, 700, 2_000].randomElement(using: &g)!
                    let start = min(request.fetchOffset, all.count)
                    let end = request.fetchLimit == 0 ? all.count : min(all.count, start + request.fetchLimit)
                    let expected = Array(all[start..<end])
                    let described =
                        "seed \(seed) round \(round): \(request.predicate?.description ?? "all") by "
                        + "\(request.sortKeys.map(\.keyPath)), offset \(request.fetchOffset) limit "
                        + "\(request.fetchLimit), pending \(request.includesPendingChanges)"
                    #expect(try context.fetchObjectIDs(request) == expected, "\(described)")
                    #expect(try context.fetch(request).map(\.objectID) == expected, "\(described)")
                    #expect(try context.count(for: request) == expected.count, "\(described)")
                    request.resultType = .dictionaries(["n", "v"])
                    whole.resultType = .dictionaries(["n", "v"])
                    guard case .dictionaries(let rows) = try context.execute(whole),
                        case .dictionaries(let windowed) = try context.execute(request)
                    else {
                        Issue.record("no dictionaries for \(described)")
                        continue
                    }
                    #expect(windowed == Array(rows[start..<end]), "\(described)")
                }
            }
        }
    }

    /// A count reads its matches in any order, but checks the request as a fetch does: a bad sort key or window is
    /// an error naming it.
    @Test func aCountChecksTheWholeRequest() throws {
        try withStore(schema: try Self.schema()) { store, _ in
            var g = SeededGenerator(seed: 10)
            try store.batchInsert(into: "Row", objects: (0..<50).map { _ in Self.values(&g) })
            let context = ObjectContext(store: store)
            var request = FetchRequest(
                entity: "Row", predicate: try FetchPredicate("flag == false"), sortKeys: [SortKey("s")])
            #expect(try context.count(for: request) == context.fetch(request).count)
            request.sortKeys = [SortKey("nothing")]
            let badKey = entityStoreError { _ = try context.count(for: request) }
            #expect(badKey?.code == .invalidFetchRequest || badKey?.code == .invalidPredicate)
            #expect(badKey?.message.contains("nothing") == true)
            request.sortKeys = []
            request.fetchLimit = -1
            #expect(entityStoreError { _ = try context.count(for: request) }?.code == .invalidFetchRequest)
        }
    }

    /// The plan says where it stops: a scan without sort keys at the limit; with a sort in memory it reads every
    /// match.
    @Test func aScanWithoutSortKeysStopsAtTheLimit() throws {
        try withStore(schema: try Self.schema()) { store, _ in
            var g = SeededGenerator(seed: 9)
            try store.batchInsert(into: "Row", objects: (0..<100).map { _ in Self.values(&g) })
            let context = ObjectContext(store: store)
            var request = FetchRequest(entity: "Row", predicate: try FetchPredicate("flag == false"))
            #expect(try !context.explain(request).stopsEarly)
            request.fetchLimit = 3
            #expect(try context.explain(request).stopsEarly)
            #expect(try context.explain(request).access == .fullScan)
            request.sortKeys = [SortKey("v")]
            #expect(try !context.explain(request).stopsEarly)
            // Unsaved changes of the entity are merged into the results: nothing stops early.
            request.sortKeys = []
            try context.insert("Row").setValue(.int(1), forKey: "n")
            #expect(try !context.explain(request).stopsEarly)
        }
    }
}
