import EntityStore
import Foundation
import TestSupport
import Testing

/// Grouping and aggregates (Core Data's dictionary fetches with expressions, propertiesToGroupBy and
/// havingPredicate): checked against sums worked out by hand from the library fixture.
@Suite struct AggregateTests {
    @Test func groupsAggregateFilterAndSort() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            var request = AggregateRequest(entity: "Book")
            request.groupBy = ["author.name"]
            request.aggregates = [
                .count(), .count("pages"), .sum("pages"), .average("score", as: "mean"), .maximum("pages"),
                .minimum("title"),
            ]
            let rows = try context.aggregate(request)
            #expect(rows.map { $0["author.name"] } == ["Albert Camus", "Michael Ende", "Ursula Le Guin"])
            #expect(rows.map { $0["count"] } == [3, 2, 2])
            #expect(rows.map { $0["count(pages)"] } == [2, 2, 2])
            #expect(rows.map { $0["sum(pages)"] } == [213, 732, 570])
            #expect(rows.map { $0["maximum(pages)"] } == [123, 428, 387])
            #expect(rows[0]["minimum(title)"] == "L'Étranger")
            if case .double(let mean) = rows[0]["mean"] { #expect(abs(mean - 3.3) < 1e-9) } else { Issue.record() }
            // HAVING and ORDER BY over result columns; a window over the rows.
            request.having = try FetchPredicate(format: "%K >= %d", arguments: ["count", 3])
            #expect(try context.aggregate(request).map { $0["author.name"] } == ["Albert Camus"])
            // A column named by its function, as the row names it, written plainly in the predicate.
            request.having = try FetchPredicate("sum(pages) > 500 AND maximum(pages) < 400")
            #expect(try context.aggregate(request).map { $0["author.name"] } == ["Ursula Le Guin"])
            #expect(
                throws: EntityStoreError.self, "a function the aggregates do not name",
                performing: {
                    request.having = try FetchPredicate("sum(score) > 1")
                    _ = try context.aggregate(request)
                })
            #expect(throws: EntityStoreError.self) { try FetchPredicate("sum(pages > 3") }
            request.having = nil
            request.sortKeys = [SortKey("sum(pages)", ascending: false)]
            request.fetchLimit = 2
            #expect(try context.aggregate(request).map { $0["author.name"] } == ["Michael Ende", "Ursula Le Guin"])
        }
    }

    @Test func oneGroupWithoutKeysDistinctValuesAndPendingChanges() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let context = ObjectContext(store: store)
            var total = AggregateRequest(entity: "Book")
            total.aggregates = [.count(), .sum("pages"), .average("pages")]
            #expect(try context.aggregate(total) == [["count": 7, "sum(pages)": 1515, "average(pages)": 252.5]])
            // Nothing matches: one row, a count of 0 and nil for the rest (as SQL).
            var none = total
            none.predicate = try FetchPredicate("pages > 10000")
            #expect(try context.aggregate(none) == [["count": 0, "sum(pages)": nil, "average(pages)": nil]])
            // Group keys alone: the distinct values.
            var distinct = AggregateRequest(entity: "Book")
            distinct.groupBy = ["inPrint"]
            #expect(try context.aggregate(distinct) == [["inPrint": true]])
            // Unsaved changes count, as in a fetch.
            let extra = try context.insert("Book")
            try extra.setValue("Jim Knopf", forKey: "title")
            try extra.setValue(.int(100), forKey: "pages")
            try context.existingObject(with: library.ids["Momo"]!).setValue(.int(300), forKey: "pages")
            try context.delete(try context.existingObject(with: library.ids["La Peste"]!))
            #expect(
                try context.aggregate(total) == [
                    ["count": 7, "sum(pages)": 1611, "average(pages)": 230.14285714285714]
                ])
            var stored = total
            stored.includesPendingChanges = false
            #expect(try context.aggregate(stored).first?["sum(pages)"] == 1515)
            // The matches are read through the predicate's index.
            var indexed = total
            indexed.predicate = try FetchPredicate("pages > 300")
            #expect(try context.explain(indexed).description.contains("index Book.pages"))
            #expect(try context.aggregate(indexed).first?["count"] == 2)
        }
    }

    @Test func badRequestsSayWhatIsWrong() throws {
        try withStore { store, _ in
            _ = try Library(store)
            let context = ObjectContext(store: store)
            func problem(_ change: (inout AggregateRequest) -> Void) -> String? {
                var request = AggregateRequest(entity: "Book")
                request.groupBy = ["author.name"]
                request.aggregates = [.count()]
                change(&request)
                let error = entityStoreError { _ = try context.aggregate(request) }
                #expect(
                    error?.code == .invalidFetchRequest || error?.code == .invalidPredicate,
                    "\(String(describing: error))")
                return error?.message
            }
            #expect(problem { $0.aggregates = [.sum("title")] }?.contains("applies to numbers") == true)
            #expect(problem { $0.groupBy = ["tags.name"] }?.contains("reached through to-one") == true)
            #expect(
                problem { $0.aggregates = [.count(), .count(as: "count")] }?.contains("two result columns") == true)
            #expect(
                problem { $0.having = try? FetchPredicate("total > 1") }?.contains("'total' is not a result column")
                    == true)
            #expect(problem { $0.sortKeys = [SortKey("pages")] }?.contains("'pages' is not a result column") == true)
            #expect(problem { $0.aggregates = [Aggregate(.sum, nil)] }?.contains("needs a key path") == true)
        }
        // An integer or decimal sum that overflows is an error, not a wrapped number or a NaN.
        let schema = try Schema(version: 1) {
            Entity("Big") {
                Attribute("n", .int64)
                Attribute("d", .decimal)
            }
        }
        try withStore(schema: schema) { store, _ in
            try store.batchInsert(
                into: "Big", keys: ["n", "d"],
                rows: [
                    [.int(.max), .decimal(.greatestFiniteMagnitude)], [.int(1), .decimal(.greatestFiniteMagnitude)],
                ])
            for (aggregate, type) in [
                (Aggregate.sum("n"), "a 64-bit integer"), (.sum("d"), "a decimal"), (.average("d"), "a decimal"),
            ] {
                var request = AggregateRequest(entity: "Big")
                request.aggregates = [aggregate]
                let error = entityStoreError { _ = try ObjectContext(store: store).aggregate(request) }
                #expect(error?.message.hasSuffix("overflows \(type)") == true, "\(String(describing: error))")
            }
        }
    }

    @Test func typedModelsAggregateByKeyPaths() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        var request = AggregateRequest(Ticket.self, where: \Ticket.rank > 0)
        request.group(by: \Ticket.project?.name)
        request.aggregates = [.count(), .sum(\Ticket.rank), .maximum(\Ticket.title, as: "last")]
        let rows = try world.context.aggregate(request)
        #expect(rows.map { $0["project.name"] } == ["Alpha", "Beta"])
        #expect(rows.map { $0["count"] } == [3, 2] && rows.map { $0["sum(rank)"] } == [9, 10])
        #expect(rows.map { $0["last"] } == ["Write docs", "Dark mode"])
    }

    @Test func rowsDecodeIntoAStructByTheirColumnNames() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        struct Row: Decodable, Equatable {
            let project: String?
            let total: Int
            let tickets: Int
            let last: String
            enum CodingKeys: String, CodingKey {
                case project = "project.name", total, tickets, last
            }
        }
        var request = AggregateRequest(Ticket.self, where: \Ticket.rank > 0)
        request.group(by: \Ticket.project?.name)
        request.aggregates = [
            .sum(\Ticket.rank, as: "total"), .count(as: "tickets"), .maximum(\Ticket.title, as: "last"),
        ]
        let rows = try world.context.aggregate(request, as: Row.self)
        #expect(
            rows == [
                Row(project: "Alpha", total: 9, tickets: 3, last: "Write docs"),
                Row(project: "Beta", total: 10, tickets: 2, last: "Dark mode"),
            ])

        // A property no column holds, or of a type the column is not, is named.
        struct Unknown: Decodable { let total: Int, average: Double }
        #expect {
            _ = try world.context.aggregate(request, as: Unknown.self)
        } throws: { error in
            let error = error as? EntityStoreError
            return error?.code == .unknownKey && error?.description.contains("average") == true
        }
        struct Mistyped: Decodable { let total: String }
        #expect {
            _ = try world.context.aggregate(request, as: Mistyped.self)
        } throws: { error in
            let error = error as? EntityStoreError
            return error?.code == .typeMismatch && error?.description.contains("total") == true
        }
    }
}

/// `@sum`, `@avg`, `@min` and `@max` over to-many key paths in predicates.
@Suite struct CollectionOperatorTests {
    func names(_ store: PersistentStore, _ format: String) throws -> [String] {
        var request = FetchRequest(entity: "Author", predicate: try FetchPredicate(format))
        request.sortKeys = [SortKey("name")]
        return try ObjectContext(store: store).fetch(request).map { try $0["name"].stringValue }
    }

    @Test func collectionOperatorsFilterByWhatRelatedObjectsAddUpTo() throws {
        try withStore { store, _ in
            _ = try Library(store)
            #expect(try names(store, "books.@sum.pages > 600") == ["Michael Ende"])
            #expect(try names(store, "books.@avg.score >= 4.4") == ["Michael Ende"])
            #expect(try names(store, "books.@max.pages < 200") == ["Albert Camus"])
            #expect(try names(store, "books.@min.title BEGINSWITH 'A'") == ["Ursula Le Guin"])
            #expect(
                try names(store, "books.@sum.pages > 100 AND books.@count == 2") == ["Michael Ende", "Ursula Le Guin"])
            // Built in Swift, the same predicates.
            let sum: FetchPredicate = FetchPredicate.key("books").sum("pages") > 600
            let average: FetchPredicate = FetchPredicate.key("books").average("score") >= 4.4
            let minimum: FetchPredicate = FetchPredicate.key("books").minimum("title") == "A"
            let maximum: FetchPredicate = FetchPredicate.key("books").maximum("pages") < 200
            #expect(sum == (try FetchPredicate("books.@sum.pages > 600")))
            #expect(average == (try FetchPredicate("books.@avg.score >= 4.4")))
            #expect(minimum == (try FetchPredicate("books.@min.title == 'A'")))
            #expect(maximum == (try FetchPredicate("books.@max.pages < 200")))
            let built = FetchPredicate.key("books").maximum("pages") < 200
            #expect(try ObjectContext(store: store).fetch(FetchRequest(entity: "Author", predicate: built)).count == 1)
            // Through a to-one step first: books whose author's books add up to more than 600 pages.
            var request = FetchRequest(entity: "Book", predicate: try FetchPredicate("author.books.@sum.pages > 600"))
            request.sortKeys = [SortKey("title")]
            #expect(
                try ObjectContext(store: store).fetch(request).map { try $0["title"].stringValue } == [
                    "Die unendliche Geschichte", "Momo",
                ])
            for (format, fragment) in [
                ("books.@sum.title > 1", "needs numbers"), ("name.@sum.pages > 1", "must follow a to-many"),
                ("books.@sum > 1", "name one of its attributes"),
                ("books.@avg.nothing > 1", "name one of its attributes"),
                ("books.@median.pages > 1", "unknown key '@median'"),
            ] {
                let error = entityStoreError { _ = try names(store, format) }
                #expect(error?.code == .invalidPredicate, "\(format)")
                #expect(error?.message.contains(fragment) == true, "\(format): \(error?.message ?? "")")
            }
        }
    }

    @Test func aControllerFollowsWhatItsCollectionOperatorsRead() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let context = ObjectContext(store: store)
            var request = FetchRequest(entity: "Author", predicate: try FetchPredicate("books.@sum.pages > 600"))
            request.sortKeys = [SortKey("name")]
            let controller = FetchedResultsController(fetchRequest: request, context: context)
            try controller.performFetch()
            #expect(controller.fetchedObjectIDs.count == 1)
            // Momo shrinks: Ende's books no longer add up to more than 600 pages.
            try context.existingObject(with: library.ids["Momo"]!).setValue(.int(10), forKey: "pages")
            context.processPendingChanges()
            #expect(controller.fetchedObjectIDs.isEmpty)
        }
    }
}

/// `SUBQUERY(collection, $x, predicate).@count`.
@Suite struct SubqueryTests {
    func names(_ store: PersistentStore, _ format: String, _ arguments: PredicateArgument...) throws -> [String] {
        var request = FetchRequest(
            entity: "Author", predicate: try FetchPredicate(format: format, arguments: arguments))
        request.sortKeys = [SortKey("name")]
        return try ObjectContext(store: store).fetch(request).map { try $0["name"].stringValue }
    }

    @Test func subqueriesCountTheMembersThatMatch() throws {
        try withStore { store, _ in
            let library = try Library(store)
            #expect(
                try names(store, "SUBQUERY(books, $b, $b.pages > 300).@count > 0") == [
                    "Michael Ende", "Ursula Le Guin",
                ])
            #expect(
                try names(store, "SUBQUERY(books, $b, $b.pages > 300 AND $b.score > 4.6).@count == 1") == [
                    "Michael Ende"
                ])
            #expect(
                try names(store, "SUBQUERY(books, $b, ANY $b.tags.name == 'classic').@count >= %d", 2) == [
                    "Albert Camus"
                ])
            #expect(
                try names(store, "NOT SUBQUERY(books, $b, $b.pages == nil).@count > 0 AND books.@count > 0") == [
                    "Michael Ende", "Ursula Le Guin",
                ])
            // Printed back in the same language.
            let predicate = try FetchPredicate("SUBQUERY(books, $b, $b.pages > 300).@count > 0")
            #expect(try FetchPredicate(predicate.description) == predicate)
            // Unsaved changes count, as everywhere.
            let context = ObjectContext(store: store)
            try context.existingObject(with: library.ids["L'Étranger"]!).setValue(.int(999), forKey: "pages")
            var request = FetchRequest(entity: "Author", predicate: predicate)
            request.sortKeys = [SortKey("name")]
            #expect(try context.fetch(request).count == 3)
            for (format, fragment) in [
                ("SUBQUERY(books, $b, pages > 1).@count > 0", "start with $b"),
                ("SUBQUERY(books, b, $b.pages > 1).@count > 0", "a variable such as $x"),
                ("SUBQUERY(books, $b, $b.pages > 1) > 0", "'.@count' after the SUBQUERY"),
                ("SUBQUERY(name, $b, $b.pages > 1).@count > 0", "to-many"),
                ("SUBQUERY(books, $b, $b.nothing > 1).@count > 0", "nothing"),
            ] {
                let error = entityStoreError { _ = try names(store, format) }
                #expect(error?.code == .invalidPredicate, "\(format)")
                #expect(error?.message.contains(fragment) == true, "\(format): \(error?.message ?? "")")
            }
        }
    }
}

/// Groups follow the store's one meaning of equality: every NaN is one group, -0 and 0 are one, canonically
/// equivalent strings are one; nil is a group of its own.
@Suite struct AggregateSemanticsTests {
    @Test func hostileValuesGroupAsTheyCompareEverywhere() throws {
        let schema = try Schema(version: 1) {
            Entity("Reading") {
                Attribute("x", .double, optional: true)
                Attribute("label", .string, optional: true)
            }
        }
        try withStore(schema: schema) { store, _ in
            let nan1 = Double(bitPattern: 0x7FF8_0000_0000_0001)
            try store.batchInsert(
                into: "Reading", keys: ["x", "label"],
                rows: [
                    [.double(.nan), "caf\u{E9}"], [.double(nan1), "cafe\u{301}"], [.double(-0.0), nil],
                    [.double(0.0), nil], [.null, "caf\u{E9}"],
                ])
            let context = ObjectContext(store: store)
            var byX = AggregateRequest(entity: "Reading")
            byX.groupBy = ["x"]
            byX.aggregates = [.count()]
            let rows = try context.aggregate(byX)
            #expect(rows.map { $0["count"] } == [1, 2, 2], "\(rows)")  // nil first, then 0 (both zeros), then NaN
            var byLabel = AggregateRequest(entity: "Reading")
            byLabel.groupBy = ["label"]
            byLabel.aggregates = [.count(), .maximum("x")]
            let labels = try context.aggregate(byLabel)
            #expect(labels.map { $0["count"] } == [2, 3], "\(labels)")
            // The maximum of a group with NaN is NaN (it orders after +infinity).
            if case .double(let top) = labels[1]["maximum(x)"] { #expect(top.isNaN) } else { Issue.record() }
        }
    }
}
