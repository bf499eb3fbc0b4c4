import Foundation
import LMDB
import TestSupport
import Testing

@testable import EntityStore

/// The store keeps fetch requests compiled and planned; what it keeps must never change what a fetch returns.
extension FetchRequest {
    func with(sortKeys: [SortKey]) -> FetchRequest {
        var copy = self
        copy.sortKeys = sortKeys
        return copy
    }
}

@Suite struct PreparedFetchTests {
    func titles(_ context: ObjectContext, _ request: FetchRequest) throws -> [String] {
        try context.fetch(request).map { try $0["title"].stringValue }
    }

    @Test func aRequestIsPreparedOnceAndKeyedByItsShapeAndSortKeys() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            let before = store.preparedFetches.count
            let short = FetchRequest(
                entity: "Book", predicate: try FetchPredicate("pages < 200"), sortKeys: [SortKey("title")])
            #expect(try titles(context, short) == ["A Wizard of Earthsea", "L'Étranger", "ÉCOLE des femmes"])
            #expect(try titles(ObjectContext(store: store), short) == titles(context, short))
            #expect(store.preparedFetches.count == before + 1)
            // Another constant of the same type: the same entry, bound to its own constant, with its own answers and
            // its own plan.
            let long = FetchRequest(
                entity: "Book", predicate: try FetchPredicate("pages < 350"), sortKeys: [SortKey("title")])
            #expect(try titles(context, long).count == 4)
            #expect(try context.explain(long).description.contains("pages < 350"))
            #expect(try titles(context, short).count == 3)
            #expect(store.preparedFetches.count == before + 1)
            // Another type, nil, another sort direction: other shapes, other entries.
            let fractional = FetchRequest(
                entity: "Book", predicate: try FetchPredicate("pages < 199.5"), sortKeys: [SortKey("title")])
            #expect(try titles(context, fractional) == titles(context, short))
            let none = FetchRequest(
                entity: "Book", predicate: try FetchPredicate("pages == nil"), sortKeys: [SortKey("title")])
            #expect(try titles(context, none) == ["La Peste"])
            var descending = short
            descending.sortKeys = [SortKey("title", ascending: false)]
            #expect(try titles(context, descending) == titles(context, short).reversed())
            #expect(store.preparedFetches.count == before + 4)
            // Window and result type are not part of the key: they are applied per fetch.
            var limited = short
            limited.fetchLimit = 1
            #expect(try titles(context, limited) == ["A Wizard of Earthsea"])
            #expect(try context.fetchObjectIDs(short).count == 3)
            #expect(store.preparedFetches.count == before + 4)
        }
    }

    /// A fetch whose shape is kept binds the kept form to its own constants: every answer is the answer of the same
    /// request prepared from nothing, over random predicates of every operator, type, list length (short lists, the
    /// hashed form of long ones and the lengths around the threshold), option and combination, with booleans given
    /// as numbers (Core Data's idiom), nil, NaN and canonically equivalent strings among the constants.
    @Test func aFormBoundToNewConstantsAnswersAsAFreshlyPreparedOne() throws {
        let schema = try Schema(version: 1) {
            Entity("Item") {
                Attribute("n", .int64, optional: true, indexed: true)
                Attribute("nn", .int64, optional: true)
                Attribute("s", .string, optional: true, indexed: true)
                Attribute("c", .string, optional: true, indexed: true, caseInsensitive: true)
                Attribute("d", .double, optional: true)
                Attribute("b", .bool, optional: true, indexed: true)
                Attribute("t", .date, optional: true)
            }
        }
        try withStore(schema: schema) { store, _ in
            var g = SeededGenerator(seed: 19)
            let ints: [Value] = (0..<12).map { .int(Int64($0)) } + [.int(-3), .int(1 << 40)]
            let strings: [Value] = [
                "a", "ab", "B", "b", "caf\u{E9}", "cafe\u{301}", "CAFE", "zeta", "", "Z\u{E9}ta", "Ze\u{301}ta",
            ]
            let doubles: [Value] = [.double(0), .double(-0.0), .double(1.5), .double(.nan), .double(-2), .double(7)]
            let dates: [Value] = (0..<5).map { .date(Date(timeIntervalSinceReferenceDate: Double($0) * 1e6)) }
            let bools: [Value] = [.bool(true), .bool(false), .int(0), .int(1)]
            let pools: [(key: String, values: [Value])] = [
                ("n", ints), ("nn", ints), ("s", strings), ("c", strings), ("d", doubles), ("b", bools), ("t", dates),
            ]
            let context = ObjectContext(store: store)
            for _ in 0..<200 {
                let item = try context.insert("Item")
                for (key, values) in pools where Int.random(in: 0..<8, using: &g) != 0 {
                    var value = values.randomElement(using: &g)!
                    if key == "b", case .int(let n) = value { value = .bool(n == 1) }
                    try item.setValue(value, forKey: key)
                }
            }
            try context.save()

            /// A random comparison, and a function drawing other constants of the same shape.
            func comparison() -> (String, [Value], () -> [Value]) {
                let (key, pool) = pools.randomElement(using: &g)!
                let isString = key == "s" || key == "c"
                // Nil stays nil and a value stays a value of its type (a bool's number a number): that is the shape.
                func another(_ value: Value) -> Value {
                    value.isNull ? .null : pool.filter { $0.type == value.type }.randomElement(using: &g)!
                }
                func draw() -> Value { Int.random(in: 0..<6, using: &g) == 0 ? .null : pool.randomElement(using: &g)! }
                let option = isString ? ["", "[c]", "[cd]"].randomElement(using: &g)! : ""
                var forms: [(String, Int)] = [
                    ("\(key) ==\(option) %@", 1), ("\(key) !=\(option) %@", 1), ("\(key) < %@", 1),
                    ("\(key) >= %@", 1), ("\(key) BETWEEN {%@, %@}", 2),
                ]
                let length = [1, 2, 3, 7, 8, 9, 11].randomElement(using: &g)!
                forms.append(
                    ("\(key) IN {" + Array(repeating: "%@", count: length).joined(separator: ", ") + "}", length))
                if isString {
                    forms += [("\(key) BEGINSWITH\(option) %@", 1), ("\(key) CONTAINS\(option) %@", 1)]
                }
                let (format, count) = forms.randomElement(using: &g)!
                let usesStrings = format.contains("BEGINSWITH") || format.contains("CONTAINS")
                let values = (0..<count).map { _ in usesStrings ? pool.randomElement(using: &g)! : draw() }
                return (format, values, { values.map(another) })
            }
            var shapes = Set<String>()
            var requests = 0
            let rounds = TestScale.size(400, stress: 17_000)
            for round in 0..<rounds {
                let parts = (0..<Int.random(in: 1...3, using: &g)).map { _ in comparison() }
                let joiner = [" AND ", " OR "].randomElement(using: &g)!
                var format = parts.map { "(\($0.0))" }.joined(separator: joiner)
                if Int.random(in: 0..<4, using: &g) == 0 { format = "NOT (\(format))" }
                let first = parts.flatMap { $0.1 }
                let predicate = { (values: [Value]) in
                    try FetchPredicate(format: format, arguments: values.map { .value($0) })
                }
                let sort = [SortKey("n"), SortKey("s", ascending: false)].randomElement(using: &g)!
                // Prepared for the first constants, then bound to others (several times, as an app looks up keys).
                let kept = FetchRequest(entity: "Item", predicate: try predicate(first), sortKeys: [sort])
                let keptIDs = try context.fetchObjectIDs(kept)
                for _ in 0..<3 {
                    let others = parts.flatMap { $0.2() }
                    let request = FetchRequest(entity: "Item", predicate: try predicate(others), sortKeys: [sort])
                    let bound = try context.fetchObjectIDs(request)
                    let boundPlan = try context.explain(request).description
                    store.preparedFetches.forgetAll()
                    let fresh = FetchRequest(entity: "Item", predicate: try predicate(others), sortKeys: [sort])
                    #expect(bound == (try context.fetchObjectIDs(fresh)), "round \(round): \(format) \(others)")
                    requests += 1
                    #expect(boundPlan == (try context.explain(fresh).description), "\(format) \(others)")
                    // The kept request still answers with its own constants.
                    #expect(try context.fetchObjectIDs(kept) == keptIDs, "\(format) \(first)")
                }
                shapes.insert(format + sort.keyPath)
            }
            // Most rounds are shapes of their own (about two in three at the stress size, more at the quick one).
            #expect(shapes.count > rounds / 2)
            #expect(requests == rounds * 3)
            print("prepared fetches: \(requests) requests bound to new constants, \(shapes.count) shapes")
        }
    }

    /// `inPrint IN {0, 0, ...}` (eight numbers: a set lookup) then the same with ones: the kept form takes the new
    /// numbers as booleans, as a fresh one does (it took them as numbers, and found nothing).
    @Test func aBoolMembershipBoundToOtherNumbersTakesThemAsBooleans() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            func count(_ value: Int) throws -> Int {
                let list = Array(repeating: "%d", count: 8).joined(separator: ", ")
                let predicate = try FetchPredicate(
                    format: "inPrint IN {\(list)}", arguments: Array(repeating: .value(.int(Int64(value))), count: 8))
                return try context.fetchObjectIDs(FetchRequest(entity: "Book", predicate: predicate)).count
            }
            let inPrint = try count(1)
            let outOfPrint = try count(0)
            #expect(try count(1) == inPrint)
            #expect(inPrint + outOfPrint == (try context.count(for: FetchRequest(entity: "Book"))))
            #expect(inPrint > 0)
        }
    }

    @Test func oneShapeIsOneEntryWhateverTheConstants() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            let before = store.preparedFetches.count
            for pages in 0..<500 {
                let request = FetchRequest(
                    entity: "Book", predicate: try FetchPredicate("pages == %d OR title IN {%@, 'x'}", pages, "Momo"))
                #expect(
                    try context.fetchObjectIDs(request).count == ([90, 123, 183, 387, 428].contains(pages) ? 2 : 1))
            }
            #expect(store.preparedFetches.count == before + 1)
        }
    }

    /// Threads fetching one new request at once from two stores race to keep its prepared form: each fetch gets
    /// its own store's answer, whichever store's form the request keeps.
    @Test func threadsRacingToKeepARequestsPreparedFormEachGetTheirStoresAnswer() throws {
        try withStore { store, _ in
            _ = try Library(store)
            // The other store's books keep their attributes in another order, without an index: a form prepared
            // for one store reads the wrong fields and the wrong index in the other.
            let otherSchema = try Schema(version: 1) {
                Entity("Book") {
                    Attribute("pages", .int64, optional: true)
                    Attribute("title", .string)
                }
            }
            try withStore(schema: otherSchema) { other, _ in
                // The other store has one short book and one long one.
                let context = ObjectContext(store: other)
                for (title, pages) in [("Short", 10), ("Long", 900)] {
                    let book = try context.insert("Book")
                    try book.setValue(.string(title), forKey: "title")
                    try book.setValue(.int(Int64(pages)), forKey: "pages")
                }
                try context.save()
                let stores = [store, other]
                let wrong = Locked(0)
                for round in 0..<20 {
                    let request = FetchRequest(
                        entity: "Book", predicate: try FetchPredicate("pages < \(200 + round)"),
                        sortKeys: [SortKey("title")])
                    DispatchQueue.concurrentPerform(iterations: 8) { i in
                        let fetched = Result { try ObjectContext(store: stores[i % 2]).fetch(request).count }
                        if case .success(i % 2 == 0 ? 3 : 1) = fetched { return }
                        wrong.withLock { $0 += 1 }
                    }
                }
                #expect(wrong.withLock { $0 } == 0)
            }
        }
    }

    @Test func aRequestKeepsItsPreparedFormUntilWhatItAsksChanges() throws {
        // A request remembers its prepared form; changing its entity, predicate or sort keys (on the request or a
        // copy) must fetch by the new ones, and the same request used with another store must use that store's.
        try withStore { store, _ in
            _ = try Library(store)
            try withStore { other, _ in
                let context = ObjectContext(store: store)
                var request = FetchRequest(
                    entity: "Book", predicate: try FetchPredicate("pages < 200"), sortKeys: [SortKey("title")])
                #expect(try titles(context, request).count == 3)
                #expect(try titles(context, request).count == 3)
                let copy = request
                request.predicate = try FetchPredicate("pages < 350")
                #expect(try titles(context, request).count == 4)
                #expect(try titles(context, copy).count == 3)
                request.sortKeys = [SortKey("title", ascending: false)]
                #expect(
                    try titles(context, request)
                        == titles(context, request.with(sortKeys: [SortKey("title")])).reversed())
                request.entity = "Author"
                request.sortKeys = []
                request.predicate = nil
                #expect(try context.fetch(request).allSatisfy { $0.entity.name == "Author" })
                // The other store is empty: the request prepared with the first store still answers for the second.
                #expect(try ObjectContext(store: other).fetch(copy).isEmpty)
                #expect(try titles(context, copy).count == 3)
                // Equal requests stay equal whatever they have prepared.
                #expect(
                    copy
                        == FetchRequest(
                            entity: "Book", predicate: try FetchPredicate("pages < 200"), sortKeys: [SortKey("title")]))
            }
        }
    }

    @Test func fetchedObjectsAnswerFromTheFetchsSnapshotWhenFirstRead() throws {
        // Fetched objects decode their record when first used; what they answer is still the fetch's snapshot,
        // and changing them works as on any loaded object.
        try withStore { store, _ in
            let library = try Library(store)
            let reader = ObjectContext(store: store)
            let request = FetchRequest(entity: "Book", predicate: try FetchPredicate("pages > 400"))
            let fetched = try reader.fetch(request)
            #expect(fetched.count == 1 && fetched.allSatisfy { !$0.isFault && !$0.hasChanges })
            let writer = ObjectContext(store: store)
            try writer.existingObject(with: library.ids["Die unendliche Geschichte"]!).setValue(
                "Die unendliche Geschichte (neu)", forKey: "title")
            try writer.save()
            let book = fetched[0]
            #expect(try book["title"] == "Die unendliche Geschichte")
            #expect(book.changedValues().isEmpty)
            try book.setValue(.int(429), forKey: "pages")
            #expect(book.changedValues() == ["pages": .int(429)] && book.hasChanges)
            #expect(try book.committedValues(forKeys: ["pages"]) == ["pages": .int(428)])
            // A second fetch in the same context keeps the object's unsaved change.
            #expect(try reader.fetch(request).first?["pages"] == .int(429))
            // The save is checked against the row version the fetch read: the writer's save is a conflict.
            #expect(entityStoreError { try reader.save() }?.code == .conflict)
        }
    }

    @Test func aPreparedIndexPlanStillSeesUnsavedChanges() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            let request = FetchRequest(
                entity: "Book", predicate: try FetchPredicate("pages == 304"), sortKeys: [SortKey("pages")])
            #expect(try titles(context, request) == ["Momo"])
            let book = try context.insert("Book")
            try book.setValue("Unsaved", forKey: "title")
            try book.setValue(.int(304), forKey: "pages")
            #expect(try titles(context, request) == ["Momo", "Unsaved"])
            let momo = try #require(try context.fetch(request).first)
            try momo.setValue(.int(305), forKey: "pages")
            #expect(try titles(context, request) == ["Unsaved"])
            #expect(try titles(ObjectContext(store: store), request) == ["Momo"])
        }
    }

    @Test func aBadRequestFailsEveryTimeAndLeavesNothingBehind() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            let before = store.preparedFetches.count
            let unknownKey = FetchRequest(entity: "Book", predicate: try FetchPredicate("colour == 'red'"))
            let badSort = FetchRequest(entity: "Book", sortKeys: [SortKey("tags")])
            let unknownEntity = FetchRequest(entity: "Magazine")
            for _ in 0..<2 {
                #expect(entityStoreError { _ = try context.fetch(unknownKey) }?.code == .invalidPredicate)
                #expect(entityStoreError { _ = try context.fetch(badSort) }?.code == .invalidFetchRequest)
                #expect(entityStoreError { _ = try context.fetch(unknownEntity) }?.code == .unknownEntity)
            }
            #expect(store.preparedFetches.count == before)
        }
    }

    @Test func regularExpressionsAreNotSharedAndTheCacheStaysBounded() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            let before = store.preparedFetches.count
            let matches = FetchRequest(
                entity: "Book", predicate: try FetchPredicate("title MATCHES 'M.m.'"), sortKeys: [SortKey("title")])
            #expect(try titles(context, matches) == ["Momo"])
            #expect(store.preparedFetches.count == before)
            for pages in 0..<(PreparedFetches.capacity * 2 + 10) {
                let request = FetchRequest(entity: "Book", predicate: try FetchPredicate("pages == %d", pages))
                #expect(try context.fetchObjectIDs(request).count == ([90, 123, 183].contains(pages) ? 1 : 0))
                #expect(store.preparedFetches.count <= PreparedFetches.capacity)
            }
        }
    }

    @Test func canonicallyEquivalentTextSharesARequestAsTheStoreSharesTheValue() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            for title in ["caf\u{E9}", "cafe\u{301}"] {
                let book = try context.insert("Book")
                try book.setValue(.string(title), forKey: "title")
            }
            try context.save()
            // Canonically equivalent strings are one value to the store (ValueSemantics) and one key to the cache:
            // either spelling finds both books, whichever ran first; a NaN constant (never equal to itself as a
            // key) is prepared again each time and still finds what it should.
            for title in ["caf\u{E9}", "cafe\u{301}", "caf\u{E9}"] {
                let request = FetchRequest(
                    entity: "Book", predicate: try FetchPredicate("title == %@", title), sortKeys: [SortKey("title")])
                #expect(try context.fetch(request).count == 2)
            }
            let before = store.preparedFetches.count
            for _ in 0..<3 {
                let nan = FetchRequest(
                    entity: "Book",
                    predicate: try FetchPredicate(format: "score == %f", arguments: [.value(.double(.nan))]))
                #expect(try context.fetch(nan).isEmpty)
            }
            #expect(store.preparedFetches.count <= before + 3)
        }
    }

    @Test func textIsDecodedExactlyAroundTheEightByteSteps() throws {
        let samples =
            (0...17).map { String(repeating: "a", count: $0) } + [
                "1234567é", "é1234567", "12345678é", "abcdefgh\u{7F}", "日本語のテキスト", "\u{0}\u{1}", "emoji 🙂 end",
            ]
        for sample in samples {
            let bytes = Array(sample.utf8)
            #expect(bytes.withUnsafeBytes { ByteReader.text($0) } == sample)
        }
        // Invalid UTF-8 after a long ASCII run is still refused.
        for bad: [UInt8] in [[0xC3, 0x28], Array("12345678".utf8) + [0xFF], Array("1234567".utf8) + [0x80]] {
            #expect(bad.withUnsafeBytes { ByteReader.text($0) } == nil)
        }
        // Overlong forms, surrogates, code points above U+10FFFF, bytes that never occur, truncated sequences.
        for bad: [UInt8] in [
            [0xC0, 0x80], [0xC1, 0xBF], [0xE0, 0x80, 0x80], [0xE0, 0x9F, 0xBF], [0xED, 0xA0, 0x80], [0xED, 0xBF, 0xBF],
            [0xF0, 0x80, 0x80, 0x80], [0xF0, 0x8F, 0xBF, 0xBF], [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80],
            [0xFE], [0xE2, 0x82], [0xF0, 0x9F, 0x99], [0x61, 0xC3], [0xE2, 0x28, 0xA1],
        ] {
            #expect(bad.withUnsafeBytes { ByteReader.text($0) } == nil, "\(bad)")
        }
        // The validator agrees with the standard library's on random bytes drawn mostly from UTF-8's lead and
        // continuation ranges (so that many sequences are almost valid).
        var generator = SystemRandomNumberGenerator()
        let pool: [ClosedRange<UInt8>] = [0x00...0x7F, 0x80...0xBF, 0x80...0xBF, 0xC0...0xDF, 0xE0...0xEF, 0xF0...0xFF]
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 1...12, using: &generator)).map { _ in
                UInt8.random(in: pool.randomElement(using: &generator)!, using: &generator)
            }
            let expected = String(validating: bytes, as: UTF8.self)
            #expect(bytes.withUnsafeBytes { ByteReader.text($0) } == expected, "\(bytes)")
        }
    }
}

@Suite struct PredicateShapeTests {
    @Test func onlyTheConstantsTypesAndNilMakeTheShape() throws {
        let shapes: [(String, String, Bool)] = [
            ("pages == 3", "pages == 400", true),
            ("pages == 3", "pages == 3.5", false),
            ("pages == 3", "pages == nil", false),
            ("pages IN {1, 2}", "pages IN {7, 7}", true),
            ("pages IN {1, 2}", "pages IN {1, 2, 3}", false),
            ("pages IN {1, 2}", "pages IN {1, nil}", false),
            ("title LIKE 'a*'", "title LIKE 'b*'", false),
            ("title BEGINSWITH[c] 'a'", "title BEGINSWITH[c] 'zz'", true),
            ("title BEGINSWITH[c] 'a'", "title BEGINSWITH 'a'", false),
            ("pages > 1 AND score < 2.0", "pages > 9 AND score < -1.0", true),
            ("pages > 1 AND score < 2.0", "pages > 1 OR score < 2.0", false),
            ("NOT pages > 1", "NOT pages > 2", true),
            ("title == 'a'", "author.name == 'a'", false),
        ]
        for (a, b, same) in shapes {
            let (p, q) = (try FetchPredicate(a), try FetchPredicate(b))
            #expect(p.hasSameShape(as: q) == same, "\(a) ~ \(b)")
            #expect(q.hasSameShape(as: p) == same, "\(b) ~ \(a)")
            if same {
                var (h, k) = (Hasher(), Hasher())
                p.hashShape(into: &h)
                q.hashShape(into: &k)
                #expect(h.finalize() == k.finalize(), "\(a) ~ \(b)")
            }
        }
    }

    @Test func aCompiledPredicateReboundToAnotherShapeIsRefused() throws {
        try withStore { store, _ in
            let entity = try #require(store.schema.entity("Book"))
            let compiled = try CompiledPredicate(
                try FetchPredicate("pages > 1 AND title == 'a'"), entity: entity, schema: store.schema)
            #expect(compiled.rebound(to: try FetchPredicate("pages > 1 OR title == 'a'")) == nil)
            #expect(compiled.rebound(to: try FetchPredicate("pages > 1")) == nil)
            #expect(compiled.rebound(to: try FetchPredicate("pages > 1 AND title BEGINSWITH 'a'")) == nil)
            let rebound = try #require(compiled.rebound(to: try FetchPredicate("pages > 7 AND title == 'b'")))
            #expect(rebound.source == (try FetchPredicate("pages > 7 AND title == 'b'")))
        }
    }
}
