import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// Values at the edges of every type (extreme integers, signed zeros, NaNs and infinities, strings and binary data
/// past LMDB's key limit or sharing a long prefix, canonically equivalent and case variants, decimals one double
/// apart, the extreme UUIDs, dates at the ends of time), each kept twice on one object: in an indexed attribute and
/// in an unindexed twin. Whatever path a fetch takes (index ranges, an index walk with or without a limit, a scan),
/// its rows are the twin's rows in the twin's order; a sectioned controller kept through the edits equals a fresh
/// one; and every value reads back bit for bit after the store is opened again.
@Suite struct HostileValueOrderTests {
    static let types: [AttributeType] = [.int64, .double, .string, .date, .binary, .uuid, .decimal, .bool]
    static var rounds: Int { TestScale.size(10, stress: 60) }

    static func schema() throws -> Schema {
        var entity = Entity("Edge")
        for type in types {
            entity.attributes.append(Attribute("x\(type)", type, optional: true, indexed: true))
            entity.attributes.append(Attribute("y\(type)", type, optional: true))
        }
        return try Schema(version: 1, entities: [entity])
    }

    static func value(_ type: AttributeType, _ g: inout SeededGenerator) -> Value {
        if Int.random(in: 0..<10, using: &g) == 0 { return .null }
        let long = String(repeating: "z", count: 3_000)
        let longBytes = [UInt8](repeating: 0xAB, count: 3_000)
        let choices: [Value] =
            switch type {
            case .int64:
                [Int64.min, .min + 1, -1, 0, 1, 1 << 53, (1 << 53) + 1, .max - 1, .max].map(Value.int)
            case .double:
                [
                    -.infinity, -.greatestFiniteMagnitude, -1.5, -.leastNonzeroMagnitude, -0.0, 0.0,
                    .leastNonzeroMagnitude, 1.5, 9_007_199_254_740_993.0, .greatestFiniteMagnitude, .infinity, .nan,
                    -.nan, Double(bitPattern: 0x7FF0_0000_0000_0001),
                ].map(Value.double)
            case .string:
                [
                    "", "\u{0}", "a\u{0}", "a", "A", "\u{E9}", "e\u{301}", "E\u{301}", "\u{DF}", "ss", "SS", "'", "\"",
                    "\\", "%@", "*", "\u{FFFF}", "\u{10FFFF}", "\u{1F468}\u{200D}\u{1F469}", long, long + "a",
                    long + "b", String(repeating: "z", count: 511),
                ].map(Value.string)
            case .date:
                [
                    -1e15, -0.000001, -0.0, 0, 0.000001, 1e15, Date.distantPast.timeIntervalSinceReferenceDate,
                    Date.distantFuture.timeIntervalSinceReferenceDate, .nan, .infinity,
                ].map { .date(Date(timeIntervalSinceReferenceDate: $0)) }
            case .binary:
                [[], [0], [0, 0], [0xFF], [0xFF, 0], longBytes, longBytes + [1], longBytes + [2]].map(Value.data)
            case .uuid:
                [
                    "00000000-0000-0000-0000-000000000000", "7FFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
                    "80000000-0000-0000-0000-000000000000", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
                ].map { .uuid(UUID(uuidString: $0)!) }
            case .decimal:
                [
                    "-1e100", "-1", "0", "0.09", "0.1", "0.10", "0.10000000000000000000000000001",
                    "0.10000000000000000000000000002", "123456789012345678901234567890.123", "1e-100",
                ].map { .decimal(Decimal(string: $0)!) }
                    + [Decimal.greatestFiniteMagnitude, -.greatestFiniteMagnitude, Decimal(1) / 3].map(Value.decimal)
            case .bool: [.bool(false), .bool(true)]
            }
        return choices.randomElement(using: &g)!
    }

    /// Whether two values are the same bits (NaN payloads and the sign of zero included).
    static func identical(_ a: Value, _ b: Value) -> Bool {
        switch (a, b) {
        case (.double(let x), .double(let y)): x.bitPattern == y.bitPattern
        case (.date(let x), .date(let y)):
            x.timeIntervalSinceReferenceDate.bitPattern == y.timeIntervalSinceReferenceDate.bitPattern
        default: a == b
        }
    }

    @Test(arguments: [1 as UInt64, 2])
    func everyPathOrdersAndFindsEdgeValuesAsTheirUnindexedTwins(seed: UInt64) throws {
        var g = SeededGenerator(seed: seed)
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("edges.store")
        var written: [ObjectID: [String: Value]] = [:]
        do {
            let store = try PersistentStore.open(path: path, schema: try Self.schema(), options: .init(sync: .noSync))
            let context = ObjectContext(store: store)
            // Sectioned by each type's unindexed twin, in both directions and, for strings, comparisons that tie
            // distinct values; some windowed; half on the incremental path and half rebuilding.
            var controllers: [(FetchedResultsController, ReplicaDelegate)] = []
            for type in Self.types {
                let comparisons: [SortKey.Comparison] =
                    type == .string ? [.binary, .caseInsensitive, .localizedStandard] : [.binary]
                for comparison in comparisons {
                    for ascending in [true, false] {
                        var request = FetchRequest(
                            entity: "Edge",
                            sortKeys: [
                                SortKey("y\(type)", ascending: ascending, comparison: comparison),
                                SortKey("xint64", ascending: false),
                            ])
                        if Bool.random(using: &g) {
                            request.fetchOffset = 2
                            request.fetchLimit = 7
                        }
                        let controller = FetchedResultsController(
                            fetchRequest: request, context: context, sectionNameKeyPath: "y\(type)")
                        controller.mergeThreshold = Bool.random(using: &g) ? 0 : .max
                        try controller.performFetch()
                        let delegate = ReplicaDelegate(controller, wholeBatches: Bool.random(using: &g))
                        controller.delegate = delegate
                        controllers.append((controller, delegate))
                    }
                }
            }
            var objects: [ManagedObject] = []
            for round in 0..<Self.rounds {
                for _ in 0..<10 {
                    let object: ManagedObject
                    if objects.isEmpty || Bool.random(using: &g) {
                        object = try context.insert("Edge")
                        objects.append(object)
                    } else {
                        object = objects.randomElement(using: &g)!
                    }
                    for type in Self.types where Bool.random(using: &g) {
                        let value = Self.value(type, &g)
                        try object.setValue(value, forKey: "x\(type)")
                        try object.setValue(value, forKey: "y\(type)")
                    }
                }
                if round % 3 == 2, let victim = objects.randomElement(using: &g) {
                    try context.delete(victim)
                    objects.removeAll { $0 === victim }
                }
                try context.save()
                let reader = ObjectContext(store: store)
                func ids(_ request: FetchRequest) throws -> [ObjectID] { try reader.fetch(request).map(\.objectID) }
                for type in Self.types {
                    // Every comparison, through the index and through a scan of the twin.
                    for op in ["==", "!=", "<", "<=", ">", ">="] {
                        let value = Self.value(type, &g)
                        if value == .null && op != "==" && op != "!=" { continue }
                        let indexed = FetchRequest(
                            entity: "Edge", predicate: try FetchPredicate("x\(type) \(op) %@", value),
                            sortKeys: [SortKey("x\(type)")])
                        let scanned = FetchRequest(
                            entity: "Edge", predicate: try FetchPredicate("y\(type) \(op) %@", value),
                            sortKeys: [SortKey("y\(type)")])
                        #expect(try ids(indexed) == ids(scanned), "seed \(seed) round \(round): \(type) \(op) \(value)")
                    }
                    let low = Self.value(type, &g)
                    let high = Self.value(type, &g)
                    if low != .null && high != .null {
                        for (format, sort) in [("%K BETWEEN {%@, %@}", false), ("%K IN {%@, %@}", true)] {
                            let indexed = FetchRequest(
                                entity: "Edge",
                                predicate: try FetchPredicate(format, PredicateArgument.keyPath("x\(type)"), low, high),
                                sortKeys: [SortKey("x\(type)", ascending: sort)])
                            let scanned = FetchRequest(
                                entity: "Edge",
                                predicate: try FetchPredicate(format, PredicateArgument.keyPath("y\(type)"), low, high),
                                sortKeys: [SortKey("y\(type)", ascending: sort)])
                            #expect(try ids(indexed) == ids(scanned), "seed \(seed): \(type) \(format) \(low) \(high)")
                        }
                    }
                    // Windows of an index walk, in either direction, with a second key or not.
                    for _ in 0..<3 {
                        let ascending = Bool.random(using: &g)
                        let second = Bool.random(using: &g) ? [SortKey("ybool", ascending: false)] : []
                        var walked = FetchRequest(
                            entity: "Edge", sortKeys: [SortKey("x\(type)", ascending: ascending)] + second)
                        walked.fetchLimit = Int.random(in: 1..<6, using: &g)
                        walked.fetchOffset = Int.random(in: 0..<4, using: &g)
                        var scanned = walked
                        scanned.sortKeys = [SortKey("y\(type)", ascending: ascending)] + second
                        let plan = try reader.explain(walked)
                        #expect(try ids(walked) == ids(scanned), "seed \(seed) round \(round): \(type) window \(plan)")
                    }
                }
                for (controller, delegate) in controllers {
                    let fresh = FetchedResultsController(
                        fetchRequest: controller.fetchRequest, context: context,
                        sectionNameKeyPath: controller.sectionNameKeyPath)
                    try fresh.performFetch()
                    let what = "seed \(seed) round \(round): \(controller.fetchRequest.sortKeys[0])"
                    #expect(controller.sections.map(\.name) == fresh.sections.map(\.name), "\(what)")
                    #expect(controller.sections.map(\.objectIDs) == fresh.sections.map(\.objectIDs), "\(what)")
                    #expect(delegate.replica.sections == controller.sections.map(\.objectIDs), "\(what)")
                    #expect(delegate.problems.isEmpty, "\(what): \(delegate.problems.prefix(2))")
                    delegate.problems = []
                }
            }
            for object in objects {
                written[object.objectID] = Dictionary(
                    uniqueKeysWithValues: try Self.types.map { ("x\($0)", try object.value(forKey: "x\($0)")) })
            }
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
        // Opened again: every value reads back bit for bit.
        let store = try PersistentStore.open(path: path, schema: try Self.schema(), options: .init(sync: .noSync))
        let context = ObjectContext(store: store)
        for (id, values) in written {
            let object = try context.existingObject(with: id)
            for (key, value) in values {
                let stored = try object.value(forKey: key)
                #expect(Self.identical(stored, value), "seed \(seed) \(id) \(key): \(value) read back as \(stored)")
            }
        }
    }
}
