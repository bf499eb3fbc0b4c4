import Foundation
import LMDB
import TestSupport
import Testing

@testable import EntityStore

/// One meaning of equality and order everywhere (``ValueSemantics``): index keys, scans, in-memory sorts,
/// uniqueness and the integrity check agree on canonically equivalent strings, case and diacritic variants, NaN,
/// signed zeros and infinities.
@Suite struct ValueSemanticsTests {
    /// Each attribute twice: indexed (`d`, `s`, `c`) and not (`dd`, `ss`, `cc`), holding the same value.
    static func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Item") {
                Attribute("d", .double, optional: true, indexed: true)
                Attribute("dd", .double, optional: true)
                Attribute("s", .string, optional: true, indexed: true)
                Attribute("ss", .string, optional: true)
                Attribute("c", .string, optional: true, indexed: true, caseInsensitive: true)
                Attribute("cc", .string, optional: true)
            }
        }
    }

    static let doubles: [Value] = [
        .double(.nan), .double(-Double.nan), .double(0.0), .double(-0.0), .double(.infinity), .double(-.infinity),
        .double(1.5), .double(-2.5), .double(3), .null,
    ]
    static let strings: [Value] = [
        "caf\u{E9}", "cafe\u{301}", "cafe", "CAF\u{C9}", "Caf\u{E9}", "zeta", "ZETA", "Z\u{E9}ta", "\u{FF5A}eta", "a",
        "b", "", "\u{C5}ngstr\u{F6}m", "A\u{30A}ngstro\u{308}m", .null,
    ]

    @Test func indexAndScanReturnTheSameObjectsForEveryOperator() throws {
        try withStore(schema: try Self.schema()) { store, _ in
            var g = SeededGenerator(seed: 2026)
            let context = ObjectContext(store: store)
            for _ in 0..<150 {
                let item = try context.insert("Item")
                let d = Self.doubles.randomElement(using: &g)!
                let s = Self.strings.randomElement(using: &g)!
                let c = Self.strings.randomElement(using: &g)!
                for (key, value) in [("d", d), ("dd", d), ("s", s), ("ss", s), ("c", c), ("cc", c)] {
                    try item.setValue(value, forKey: key)
                }
            }
            try context.save()
            #expect(try store.checkIntegrity().findings.isEmpty)

            func predicate(_ format: String, _ key: String, _ values: [Value]) throws -> FetchPredicate {
                try FetchPredicate(format: format, arguments: [.keyPath(key)] + values.map { .value($0) })
            }
            func ids(_ format: String, _ key: String, _ values: [Value]) throws -> [ObjectID] {
                let request = FetchRequest(entity: "Item", predicate: try predicate(format, key, values))
                return try context.fetchObjectIDs(request).sorted()
            }
            var checked = 0
            for round in 0..<600 {
                let numeric = round % 2 == 0
                let pool = numeric ? Self.doubles : Self.strings
                let (indexed, scanned) = numeric ? ("d", "dd") : round % 4 == 1 ? ("s", "ss") : ("c", "cc")
                let a = pool.randomElement(using: &g)!
                let b = pool.randomElement(using: &g)!
                let c = pool.randomElement(using: &g)!
                let options = numeric ? [""] : ["", "[c]", "[d]", "[cd]"]
                let option = options.randomElement(using: &g)!
                var forms = [
                    ("%K ==\(option) %@", [a]), ("%K !=\(option) %@", [a]), ("%K < %@", [a]), ("%K <= %@", [a]),
                    ("%K > %@", [a]), ("%K >= %@", [a]), ("%K BETWEEN {%@, %@}", [a, b]),
                    ("%K IN {%@, %@, %@}", [a, b, c]),
                ]
                if !numeric, case .string = a { forms.append(("%K BEGINSWITH\(option) %@", [a])) }
                let (format, values) = forms.randomElement(using: &g)!
                let plan = try context.explain(
                    FetchRequest(entity: "Item", predicate: try predicate(format, indexed, values)))
                let viaIndex = try ids(format, indexed, values)
                let viaScan = try ids(format, scanned, values)
                #expect(viaIndex == viaScan, "\(format) \(values) on \(indexed) (\(plan.description))")
                if plan.access != .fullScan { checked += 1 }
            }
            #expect(checked > 200, "most predicates went through an index (\(checked))")
        }
    }

    @Test func theOrderIsOneOrderForIndexesAndSorts() throws {
        try withStore(schema: try Self.schema()) { store, _ in
            var g = SeededGenerator(seed: 7)
            let context = ObjectContext(store: store)
            for _ in 0..<120 {
                let item = try context.insert("Item")
                let d = Self.doubles.randomElement(using: &g)!
                let s = Self.strings.randomElement(using: &g)!
                for (key, value) in [("d", d), ("dd", d), ("s", s), ("ss", s)] { try item.setValue(value, forKey: key) }
            }
            try context.save()
            for (indexed, scanned) in [("d", "dd"), ("s", "ss")] {
                for ascending in [true, false] {
                    let byIndex = try context.fetchObjectIDs(
                        FetchRequest(entity: "Item", sortKeys: [SortKey(indexed, ascending: ascending)]))
                    let inMemory = try context.fetchObjectIDs(
                        FetchRequest(entity: "Item", sortKeys: [SortKey(scanned, ascending: ascending)]))
                    #expect(byIndex == inMemory, "\(indexed) ascending \(ascending)")
                }
            }
            // The documented places: nil first, -inf, ..., -0 == 0, ..., +inf, NaN last.
            let values = try context.fetch(FetchRequest(entity: "Item", sortKeys: [SortKey("d")])).map { try $0["d"] }
            let order: [Value] = [
                .null, .double(-.infinity), .double(-2.5), .double(0), .double(1.5), .double(3),
                .double(.infinity), .double(.nan),
            ]
            var collapsed: [Value] = []
            for value in values where collapsed.last != value { collapsed.append(value) }
            #expect(collapsed == order.filter { collapsed.contains($0) })
            let nanCount = try context.count(
                for: FetchRequest(entity: "Item", predicate: try FetchPredicate("d == %@", Double.nan)))
            let greater = try context.fetchObjectIDs(
                FetchRequest(entity: "Item", predicate: try FetchPredicate("d > 1000.0")))
            #expect(greater.count == nanCount + values.filter { $0 == .double(.infinity) }.count)
        }
    }

    @Test func canonicallyEquivalentStringsAreOneUniqueValueInOneSaveOrTwo() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let first = try context.insert("Tag")
            try first.setValue("caf\u{E9}", forKey: "name")
            try context.save()
            let second = try context.insert("Tag")
            try second.setValue("cafe\u{301}", forKey: "name")
            let error = entityStoreError { try context.save() }
            #expect(error?.code == .validationFailed)
            #expect(error?.failures.first?.message.contains("already has it") == true)
            #expect(try store.checkIntegrity().findings.isEmpty)
            // The index finds the stored value through either form.
            let found = try ObjectContext(store: store).fetchObjectIDs(
                FetchRequest(entity: "Tag", predicate: try FetchPredicate("name == %@", "cafe\u{301}")))
            #expect(found == [first.objectID])
        }
    }

    @Test(arguments: [("zeta@example.org", "ZETA@example.org"), ("cafe@example.org", "caf\u{E9}@example.org")])
    func aCaseInsensitiveUniqueAttributeRefusesCaseAndDiacriticVariants(first: String, second: String) throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let store = temporary.store
        let context = ObjectContext(store: store)
        for email in [first, second] {
            let author = try context.insert("Author")
            try author.setValue("someone", forKey: "name")
            try author.setValue(.string(email), forKey: "email")
        }
        let inOneSave = entityStoreError { try context.save() }
        #expect(inOneSave?.code == .validationFailed)
        context.rollback()
        let objects: [[String: Value]] = [
            ["name": "a", "email": .string(first)], ["name": "b", "email": .string(second)],
        ]
        let inOneBatch = entityStoreError { _ = try store.batchInsert(into: "Author", objects: objects) }
        #expect(inOneBatch?.code == .validationFailed)
        // And across saves.
        let one = try context.insert("Author")
        try one.setValue("one", forKey: "name")
        try one.setValue(.string(first), forKey: "email")
        try context.save()
        let two = try context.insert("Author")
        try two.setValue("two", forKey: "name")
        try two.setValue(.string(second), forKey: "email")
        let acrossSaves = entityStoreError { try context.save() }
        #expect(acrossSaves?.code == .validationFailed)
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    @Test func anOlderStoresIndexKeysAreRebuiltWhenItOpens() throws {
        let temporary = try TemporaryStore(schema: try Self.schema())
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let item = try context.insert("Item")
        try item.setValue("cafe\u{301}", forKey: "s")
        try item.setValue(.double(-Double.nan), forKey: "d")
        try context.save()
        // Make it look like a store of the previous format: raw NFD bytes and a negative NaN's own pattern.
        let env = temporary.store.environment
        try env.write { txn in
            let s = try txn.openDatabase("index.Item.s", dupSort: true)
            try txn.empty(s)
            try txn.put(
                [IndexKey.valueTag] + Array("cafe\u{301}".utf8), IndexKey.primaryKey(item.objectID.primaryKey), in: s)
            try txn.delete(Array("indexFormat".utf8), in: try txn.openDatabase("meta"))
        }
        let found = try context.fetchObjectIDs(
            FetchRequest(entity: "Item", predicate: try FetchPredicate("s == %@", "caf\u{E9}")))
        #expect(found.isEmpty, "the old key does not match the canonical form")
        let reopened = try PersistentStore.open(path: temporary.path, schema: try Self.schema())
        let fresh = ObjectContext(store: reopened)
        #expect(
            try fresh.fetchObjectIDs(
                FetchRequest(entity: "Item", predicate: try FetchPredicate("s == %@", "caf\u{E9}"))) == [item.objectID])
        #expect(try reopened.checkIntegrity().findings.isEmpty)
    }
}
