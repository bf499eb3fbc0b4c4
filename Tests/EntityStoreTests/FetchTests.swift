import EntityStore
import Foundation
import TestSupport
import Testing

@Suite struct FetchTests {
    func request(_ format: String? = nil, sort: [SortKey] = [SortKey("title")]) throws -> FetchRequest {
        FetchRequest(entity: "Book", predicate: try format.map { try FetchPredicate($0) }, sortKeys: sort)
    }

    @Test func thePlannerUsesAnIndexForEqualityRangesInAndBeginsWith() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            func plan(_ format: String, entity: String = "Book", sort: [SortKey] = []) throws -> QueryPlan {
                try context.explain(FetchRequest(entity: entity, predicate: try FetchPredicate(format), sortKeys: sort))
            }
            #expect(
                try plan("pages == 304").access
                    == .indexRanges(attribute: "pages", ranges: 1, description: "pages == 304"))
            #expect(
                try plan("pages IN {1, 2, 2}").access
                    == .indexRanges(attribute: "pages", ranges: 2, description: "pages IN 3 values"))
            let range = try plan("pages > 100 AND pages <= 300 AND score > 1.0")
            #expect(
                range.access == .indexRanges(attribute: "pages", ranges: 1, description: "pages > 100 and pages <= 300")
            )
            #expect(range.filters)
            #expect(try plan("title == 'Momo'").access == .fullScan)  // title is not indexed
            #expect(try plan("pages > 100 OR score > 1.0").access == .fullScan)
            #expect(
                try plan("name BEGINSWITH 'Ur'", entity: "Author").access
                    == .indexRanges(attribute: "name", ranges: 1, description: "name BEGINSWITH \"Ur\""))
            #expect(try plan("email ==[c] 'X@Y'", entity: "Author").access != .fullScan)  // a case-insensitive index
            #expect(try plan("name ==[c] 'x'", entity: "Author").access == .fullScan)  // a binary index cannot fold
            let ordered = try context.explain(FetchRequest(entity: "Book", sortKeys: [SortKey("pages")]))
            #expect(ordered.access == .indexOrder(attribute: "pages", descending: false))
            #expect(!ordered.sortsInMemory)
            #expect(ordered.description == "index Book.pages in ascending order; no sort needed")
        }
    }

    @Test func indexedAndScannedPlansAgree() throws {
        try withStore { store, _ in
            let library = try Library(store)
            // Each pair: an indexed predicate and the same condition the planner must scan for (score > -1 keeps
            // the OR from being served by the index).
            for format in [
                "pages > 200", "pages <= 304", "pages == 183", "pages IN {90, 123, 999}", "pages BETWEEN {100, 387}",
                "pages == nil", "pages != nil",
            ] {
                let scanned = "(\(format)) AND (score > -1.0 OR score < -5.0)"
                #expect(try library.titles(format) == library.titles("(\(format)) OR FALSEPREDICATE"), "\(format)")
                #expect(try library.titles(format) == library.titles(scanned), "\(format)")
            }
        }
    }

    /// Comparisons of scalars tested on the encoded record give the evaluator's answers: nil, NaN, -0 and
    /// infinities included, over random records and random conjunctions.
    @Test func recordFiltersAgreeWithTheEvaluator() throws {
        let schema = try Schema(version: 1) {
            Entity("Sample") {
                Attribute("label", .string, optional: true)
                Attribute("count", .int64, optional: true)
                Attribute("blob", .binary, optional: true)
                Attribute("ratio", .double, optional: true)
                Attribute("when", .date, optional: true)
                Attribute("flag", .bool, optional: true)
            }
        }
        try withStore(schema: schema) { store, _ throws in
            var g = SeededGenerator(seed: 5)
            let context = ObjectContext(store: store)
            let doubles: [Double] = [-1.5, -0.0, 0, 2, .infinity, -.infinity, .nan]
            for i in 0..<300 {
                let sample = try context.insert("Sample")
                func maybe(_ value: Value) -> Value { Int.random(in: 0..<6, using: &g) == 0 ? .null : value }
                try sample.setValue(maybe(.string("s\(i)")), forKey: "label")
                try sample.setValue(maybe(.int(Int64.random(in: -3...3, using: &g))), forKey: "count")
                try sample.setValue(maybe(.data([UInt8](repeating: 7, count: i % 5))), forKey: "blob")
                try sample.setValue(maybe(.double(doubles.randomElement(using: &g)!)), forKey: "ratio")
                try sample.setValue(
                    maybe(.date(Date(timeIntervalSinceReferenceDate: Double(Int.random(in: 0...3, using: &g))))),
                    forKey: "when")
                try sample.setValue(maybe(.bool(Bool.random(using: &g))), forKey: "flag")
            }
            try context.save()
            let ops = ["==", "!=", "<", "<=", ">", ">="]
            func comparison() -> (String, [PredicateArgument]) {
                let op = ops.randomElement(using: &g)!
                switch Int.random(in: 0..<6, using: &g) {
                case 0: return ("count \(op) %@", [.value(.int(Int64.random(in: -3...3, using: &g)))])
                case 1: return ("ratio \(op) %@", [.value(.double([-1.5, -0.0, 0, 2, 1].randomElement(using: &g)!))])
                case 2:
                    let date = Date(timeIntervalSinceReferenceDate: Double(Int.random(in: 0...3, using: &g)))
                    return ("when \(op) %@", [.value(.date(date))])
                case 3: return ("flag \(op) %@", [.value(.bool(Bool.random(using: &g)))])
                case 4:
                    return (
                        "count IN %@",
                        [
                            .values([
                                .int(Int64.random(in: -3...3, using: &g)), .int(Int64.random(in: -3...3, using: &g)),
                            ])
                        ]
                    )
                default:
                    return (
                        "count BETWEEN %@",
                        [
                            .values([
                                .int(Int64.random(in: -3...0, using: &g)), .int(Int64.random(in: 0...3, using: &g)),
                            ])
                        ]
                    )
                }
            }
            var checked = 0
            for _ in 0..<200 {
                let parts = (0..<Int.random(in: 1...3, using: &g)).map { _ in comparison() }
                let format = parts.map(\.0).joined(separator: " AND ")
                let arguments = parts.flatMap(\.1)
                let predicate = try FetchPredicate(format: format, arguments: arguments)
                let fast = try context.fetch(FetchRequest(entity: "Sample", predicate: predicate)).map(\.objectID)
                // An OR is none of the record filter's: the evaluator answers alone.
                let slow = try context.fetch(
                    FetchRequest(
                        entity: "Sample",
                        predicate: try FetchPredicate(format: "(\(format)) OR FALSEPREDICATE", arguments: arguments)))
                #expect(fast == slow.map(\.objectID), "\(predicate)")
                checked += 1
            }
            #expect(checked == 200)
        }
    }

    /// Ranges of an integer index are exactly the matching rows, so those rows skip the predicate; anything else
    /// (another conjunct, a double with NaN and -0, a string cut at 511 bytes or folded, nil) is still filtered.
    @Test func onlyExactRangesSkipThePredicate() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            func filters(_ format: String, _ entity: String = "Book") throws -> Bool {
                try context.explain(FetchRequest(entity: entity, predicate: try FetchPredicate(format))).filters
            }
            #expect(try !filters("pages == 304"))
            #expect(try !filters("pages > 100 AND pages <= 400"))
            #expect(try !filters("pages IN {90, 123}"))
            #expect(try !filters("pages BETWEEN {100, 387}"))
            #expect(try filters("pages > 100 AND title == 'Momo'"))
            #expect(try filters("pages == nil"))
            #expect(try filters("name == 'Michael Ende'", "Author"))
            #expect(try filters("pages > 100.5"))  // a double operand on an int attribute is not served exactly
        }
    }

    /// A long `IN` list of the attribute's own type is a set lookup: the same answers as the comparisons it stands
    /// for, on indexed and unindexed attributes, with nil in the list, and for canonically equivalent strings.
    @Test func longInListsMatchTheirEqualities() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            func ids(_ predicate: FetchPredicate) throws -> Set<ObjectID> {
                Set(try context.fetch(FetchRequest(entity: "Book", predicate: predicate)).map(\.objectID))
            }
            func check(_ key: String, _ values: [Value]) throws {
                #expect(values.count >= 8)
                let member = FetchPredicate.comparison(.init(keyPath: [key], op: .in, operand: .list(values)))
                let equalities = FetchPredicate.or(
                    values.map { .comparison(.init(keyPath: [key], op: .equal, operand: .value($0))) })
                #expect(try ids(member) == ids(equalities), "\(key)")
            }
            let titles = try context.fetch(FetchRequest(entity: "Book")).map { try $0.value(forKey: "title") }
            // "Die unendliche Geschichte" and others, plus strings no book has, one decomposed.
            try check("title", titles + ["Mo\u{0301}mo", "x", "y", "z", "w", "v", "u", "t"])
            try check("pages", (0..<400).map { .int(Int64($0)) } + [.null])
            try check("isbn", (0..<10).map { _ in .uuid(UUID()) } + [.null])
            let composed = try context.insert("Book")
            try composed.setValue("Caf\u{e9}", forKey: "title")
            try check("title", ["Cafe\u{301}", "a", "b", "c", "d", "e", "f", "g"])
            #expect(
                try ids(
                    .comparison(
                        .init(
                            keyPath: ["title"], op: .in,
                            operand: .list(["Cafe\u{301}", "a", "b", "c", "d", "e", "f", "g"])))) == [
                        composed.objectID
                    ])
        }
    }

    /// A range on an indexed scalar sorted by that attribute is read in index order, without a sort: the same rows
    /// in the same order (ties by ID, nil first, windows) as a scan that sorts in memory.
    @Test func rangesReadInIndexOrderMatchAScanThatSorts() throws {
        try withStore { store, _ in
            var g = SeededGenerator(seed: 11)
            let context = ObjectContext(store: store)
            for i in 0..<300 {
                let book = try context.insert("Book")
                try book.setValue(.string("b\(i)"), forKey: "title")
                let pages: Value =
                    Int.random(in: 0..<10, using: &g) == 0 ? .null : .int(Int64.random(in: -20...20, using: &g))
                try book.setValue(pages, forKey: "pages")
            }
            try context.save()
            for _ in 0..<100 {
                let low = Int.random(in: -25...25, using: &g)
                let high = low + Int.random(in: 0...15, using: &g)
                let format = ["pages >= \(low) AND pages < \(high)", "pages == \(low)", "pages <= \(high)"][
                    Int.random(in: 0..<3, using: &g)]
                var request = FetchRequest(
                    entity: "Book", predicate: try FetchPredicate(format), sortKeys: [SortKey("pages")])
                request.fetchLimit = [0, 1, 7][Int.random(in: 0..<3, using: &g)]
                request.fetchOffset = [0, 3][Int.random(in: 0..<2, using: &g)]
                let plan = try context.explain(request)
                #expect(!plan.sortsInMemory, "\(format): \(plan)")
                // The reference: every matching row by a scan (no index, no sort), sorted here.
                let all = try context.fetch(
                    FetchRequest(entity: "Book", predicate: try FetchPredicate("(\(format)) OR FALSEPREDICATE")))
                let sorted = try all.sorted { a, b in
                    let (x, y) = (try a["pages"], try b["pages"])
                    if x != y {
                        guard case .int(let p) = x else { return true }
                        guard case .int(let q) = y else { return false }
                        return p < q
                    }
                    return a.objectID < b.objectID
                }.map(\.objectID)
                let start = min(request.fetchOffset, sorted.count)
                let end = request.fetchLimit > 0 ? min(sorted.count, start + request.fetchLimit) : sorted.count
                #expect(
                    try context.fetch(request).map(\.objectID) == Array(sorted[start..<end]),
                    "\(format) limit \(request.fetchLimit) offset \(request.fetchOffset)")
            }
        }
    }

    @Test func sortsHonourDirectionComparisonAndTieBreakByID() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            let byPages = try context.fetch(try request(sort: [SortKey("pages", ascending: false)]))
            #expect(try byPages.map { try $0["pages"] } == [428, 387, 304, 183, 123, 90, nil])
            let byTitle = try context.fetch(
                try request(sort: [SortKey("title", comparison: .caseDiacriticInsensitive)]))
            #expect(try byTitle.map { try $0["title"].stringValue }.first == "A Wizard of Earthsea")
            #expect(try byTitle.map { try $0["title"].stringValue }.firstIndex(of: "ÉCOLE des femmes") == 2)
            let byAuthor = try context.fetch(try request(sort: [SortKey("author.name"), SortKey("pages")]))
            #expect(
                try byAuthor.map { try $0["title"].stringValue } == [
                    "La Peste", "ÉCOLE des femmes", "L'Étranger", "Momo", "Die unendliche Geschichte",
                    "A Wizard of Earthsea",
                    "The Dispossessed",
                ])
            let sameScore = try context.fetch(FetchRequest(entity: "Book", sortKeys: [SortKey("inPrint")]))
            #expect(sameScore.map(\.objectID) == sameScore.map(\.objectID).sorted())
        }
    }

    @Test func localizedStandardSortsNumbersByValue() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            for title in ["file10", "File2", "file1"] {
                let book = try context.insert("Book")
                try book.setValue(.string(title), forKey: "title")
            }
            try context.save()
            let sorted = try context.fetch(try request(sort: [SortKey("title", comparison: .localizedStandard)]))
            #expect(try sorted.map { try $0["title"].stringValue } == ["file1", "File2", "file10"])
        }
    }

    @Test func limitsAndOffsetsWindowTheSortedResults() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            var windowed = try request(sort: [SortKey("pages")])
            windowed.fetchOffset = 2
            windowed.fetchLimit = 3
            #expect(try context.fetch(windowed).map { try $0["pages"] } == [123, 183, 304])
            #expect(try context.count(for: windowed) == 3)
            windowed.fetchOffset = 6
            #expect(try context.fetch(windowed).count == 1)
            windowed.fetchOffset = 60
            #expect(try context.fetch(windowed).isEmpty)
            windowed.fetchLimit = -1
            #expect(entityStoreError { _ = try context.fetch(windowed) }?.code == .invalidFetchRequest)
            var early = FetchRequest(entity: "Book", sortKeys: [SortKey("pages")])
            early.fetchLimit = 2
            #expect(try context.explain(early).stopsEarly)
            #expect(try context.fetch(early).map { try $0["pages"] } == [nil, 90])
        }
    }

    @Test func pendingInsertsUpdatesAndDeletesAreReflected() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let context = ObjectContext(store: store)
            let momo = try context.existingObject(with: library.ids["Momo"]!)
            try momo.setValue(10, forKey: "pages")
            try context.delete(try context.existingObject(with: library.ids["La Peste"]!))
            let fresh = try context.insert("Book")
            try fresh.setValue("Zazie", forKey: "title")
            try fresh.setValue(500, forKey: "pages")

            let pending = try context.fetch(try request("pages < 100 OR pages > 420 OR pages == nil"))
            #expect(
                try pending.map { try $0["title"].stringValue } == [
                    "Die unendliche Geschichte", "Momo", "Zazie", "ÉCOLE des femmes",
                ])
            var storeOnly = try request("pages < 100 OR pages > 420 OR pages == nil")
            storeOnly.includesPendingChanges = false
            #expect(
                try context.fetch(storeOnly).map { try $0["title"].stringValue } == [
                    "Die unendliche Geschichte", "La Peste", "ÉCOLE des femmes",
                ])
            #expect(try context.count(for: FetchRequest(entity: "Book")) == 7)
            var sorted = try request(sort: [SortKey("pages")])
            sorted.fetchLimit = 2
            #expect(try context.fetch(sorted).map { try $0["title"].stringValue } == ["Momo", "ÉCOLE des femmes"])
        }
    }

    @Test func pendingChangesOfRelatedObjectsAreSeenThroughKeyPaths() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let context = ObjectContext(store: store)
            let ende = try #require(
                try context.fetch(
                    FetchRequest(entity: "Author", predicate: try FetchPredicate("name BEGINSWITH 'Michael'"))
                ).first)
            try ende.setValue("M. Ende", forKey: "name")
            #expect(try context.fetch(try request("author.name == 'M. Ende'")).count == 2)
            _ = library
        }
    }

    @Test func everyResultType() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let context = ObjectContext(store: store)
            var request = try request("pages > 380")
            request.resultType = .objectIDs
            guard case .objectIDs(let ids) = try context.execute(request) else { Issue.record("not IDs"); return }
            #expect(ids == [library.ids["Die unendliche Geschichte"]!, library.ids["The Dispossessed"]!])
            request.resultType = .count
            guard case .count(let count) = try context.execute(request) else { Issue.record("not a count"); return }
            #expect(count == 2)
            request.resultType = .dictionaries(["title", "author.name"])
            guard case .dictionaries(let rows) = try context.execute(request) else { Issue.record("not rows"); return }
            #expect(
                rows == [
                    ["title": "Die unendliche Geschichte", "author.name": "Michael Ende"],
                    ["title": "The Dispossessed", "author.name": "Ursula Le Guin"],
                ])
            request.resultType = .objects
            guard case .objects(let objects) = try context.execute(request) else { Issue.record("not objects"); return }
            #expect(objects.map(\.objectID) == ids)
            #expect(objects.allSatisfy { !$0.isFault })  // loaded from the records the fetch read
        }
    }

    @Test func batchedFetchesReturnFaultsThatLoadABatchAtATime() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            var request = try request()
            request.fetchBatchSize = 3
            let books = try context.fetch(request)
            #expect(books.map(\.isFault) == [false, false, false, true, true, true, true])
            _ = try books[4]["title"]
            #expect(books.map(\.isFault) == [false, false, false, false, false, false, true])
        }
    }

    @Test func prefetchingLoadsRelatedObjects() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            var request = try request()
            request.relationshipKeyPathsForPrefetching = ["author", "tags"]
            let books = try context.fetch(request)
            let authors = try books.compactMap { try $0.object(forKey: "author") }
            #expect(authors.count == 7)
            #expect(authors.allSatisfy { !$0.isFault })
            #expect(try books.flatMap { try $0.objects(forKey: "tags") }.allSatisfy { !$0.isFault })
            request.relationshipKeyPathsForPrefetching = ["publishr"]
            #expect(entityStoreError { _ = try context.fetch(request) }?.code == .invalidFetchRequest)
        }
    }

    @Test func aFetchIsOneSnapshotAndHoldsNoTransactionAfterward() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            _ = try context.fetch(try request("author.name BEGINSWITH 'U'"))
            #expect(store.environment.info().readersUsed <= 1)
            // Readers left open would block growth; a large write after many fetches proves none is.
            let writer = ObjectContext(store: store)
            for i in 0..<2000 {
                let book = try writer.insert("Book")
                try book.setValue(.string(String(repeating: "long title \(i) ", count: 20)), forKey: "title")
            }
            try writer.save()
            #expect(try context.count(for: FetchRequest(entity: "Book")) == 2007)
        }
    }

    /// An index key is cut at LMDB's 511-byte limit (strings, binary data) or is a double (decimals), so values
    /// that share a key must still come out in their own order, with or without a limit, in either direction.
    @Test func anIndexWalkOrdersValuesItsKeysCannotTellApart() throws {
        let schema = try Schema(version: 1) {
            Entity("Item") {
                Attribute("name", .string, indexed: true)
                Attribute("amount", .decimal, optional: true, indexed: true)
                Attribute("rank", .int64, default: 0, indexed: true)
            }
        }
        try withStore(schema: schema) { store, _ in
            let context = ObjectContext(store: store)
            let long = String(repeating: "z", count: 3_000)
            // Made greatest first, so that primary-key order (the order of equal keys) is the reverse of theirs.
            let names = [long + "b", long + "a", long, String(repeating: "z", count: 600), "y"]
            let amounts = ["0.10000000000000000000000000002", "0.10000000000000000000000000001", "0.1", "0.09", "-1"]
            var ranks: [ObjectID: Int64] = [:]
            for (i, name) in names.enumerated() {
                let item = try context.insert("Item")
                try item.setValue(.string(name), forKey: "name")
                try item.setValue(.decimal(Decimal(string: amounts[i])!), forKey: "amount")
                try item.setValue(.int(Int64(i % 2)), forKey: "rank")
                ranks[item.objectID] = Int64(i % 2)
            }
            try context.save()
            let reader = ObjectContext(store: store)
            for key in ["name", "amount"] {
                for ascending in [true, false] {
                    for limit in [0, 1, 2, 4] {
                        var request = FetchRequest(entity: "Item", sortKeys: [SortKey(key, ascending: ascending)])
                        request.fetchLimit = limit
                        let plan = try reader.explain(request)
                        #expect(plan.access == .indexOrder(attribute: key, descending: !ascending))
                        #expect(plan.sortsInMemory)
                        #expect(plan.stopsEarly == (limit > 0))
                        let expected =
                            ascending
                            ? names.reversed().prefix(limit == 0 ? 5 : limit) : names.prefix(limit == 0 ? 5 : limit)
                        let fetched = try reader.fetch(request).map { try $0["name"].stringValue }
                        #expect(fetched == Array(expected), "\(key) ascending \(ascending) limit \(limit)")
                    }
                }
            }
            // A descending walk of an exact key stops at the limit too, once its last key's ties are read, and
            // orders the ties by primary key as every fetch does.
            var descending = FetchRequest(entity: "Item", sortKeys: [SortKey("rank", ascending: false)])
            descending.fetchLimit = 1
            #expect(try reader.explain(descending).stopsEarly)
            let ones = ranks.filter { $0.value == 1 }.keys.sorted { $0.primaryKey < $1.primaryKey }
            #expect(try reader.fetch(descending).map(\.objectID) == [ones[0]])
            descending.fetchLimit = 3
            let zeros = ranks.filter { $0.value == 0 }.keys.sorted { $0.primaryKey < $1.primaryKey }
            #expect(try reader.fetch(descending).map(\.objectID) == ones + [zeros[0]])
        }
    }

    @Test func badSortKeysAreRefusedWithTheirNames() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let unknown = entityStoreError {
                _ = try context.fetch(FetchRequest(entity: "Book", sortKeys: [SortKey("weight")]))
            }
            #expect(unknown?.message == "Book has no key 'weight'")
            // An empty step in a key path is no step to skip.
            for path in ["author..name", ".title", "title."] {
                #expect(
                    entityStoreError { _ = try context.fetch(FetchRequest(entity: "Book", sortKeys: [SortKey(path)])) }
                        != nil, "\(path)")
                #expect(
                    entityStoreError {
                        _ = try context.fetch(FetchRequest(entity: "Book", predicate: .key(path) == "x"))
                    } != nil, "\(path)")
            }
            let toMany = entityStoreError {
                _ = try context.fetch(FetchRequest(entity: "Book", sortKeys: [SortKey("tags.name")]))
            }
            #expect(toMany?.code == .invalidFetchRequest)
            #expect(entityStoreError { _ = try context.fetch(FetchRequest(entity: "Nope")) }?.code == .unknownEntity)
        }
    }
}

@Suite struct FetchPropertyTests {
    /// Random data, random predicates on the indexed `pages` (and unindexed `score`): the planner's indexed plan
    /// and a forced full scan return the same objects in the same order.
    @Test func indexedAndScannedPlansReturnTheSameResultsOnRandomData() throws {
        var generator = SeededGenerator(seed: 0x5EED)
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            for _ in 0..<400 {
                let book = try context.insert("Book")
                try book.setValue("b", forKey: "title")
                let pages: Value =
                    Int.random(in: 0..<10, using: &generator) == 0
                    ? .null : .int(Int64.random(in: -50...50, using: &generator))
                try book.setValue(pages, forKey: "pages")
                try book.setValue(.double(Double(Int.random(in: 0...20, using: &generator)) / 2), forKey: "score")
            }
            try context.save()
            let ops = ["==", "!=", "<", "<=", ">", ">="]
            for _ in 0..<300 {
                let a = Int.random(in: -60...60, using: &generator)
                let b = Int.random(in: -60...60, using: &generator)
                var clauses = [
                    "pages \(ops.randomElement(using: &generator)!) \(a)",
                    "pages BETWEEN {\(min(a, b)), \(max(a, b))}",
                    "pages IN {\(a), \(b), \(a + 1)}",
                    "pages == nil",
                ].shuffled(using: &generator).prefix(Int.random(in: 1...2, using: &generator)).map { $0 }
                if Bool.random(using: &generator) { clauses.append("score >= \(Double(b % 10) / 2)") }
                let format = clauses.joined(separator: " AND ")
                var indexed = FetchRequest(
                    entity: "Book", predicate: try FetchPredicate(format),
                    sortKeys: [SortKey("score"), SortKey("pages", ascending: false)])
                indexed.fetchLimit = Int.random(in: 0...30, using: &generator)
                var scanned = indexed
                scanned.predicate = try FetchPredicate("(\(format)) OR FALSEPREDICATE")
                #expect(try context.explain(scanned).access == .fullScan)
                #expect(try context.fetchObjectIDs(indexed) == context.fetchObjectIDs(scanned), "\(format)")
            }
        }
    }
}
