import EntityStore
import Foundation
import TestSupport
import Testing

/// Random well-typed predicates over a library with awkward values (canonically equivalent titles, the empty
/// string, `*` in names, signed zeros, missing numbers, authors and publishers left unset), answered two ways: by
/// a fetch of the saved library (index ranges, the encoded-record filter and the evaluator, as the plan chooses)
/// and by the same library unsaved in a context (the evaluator on objects, as a controller of pending changes
/// answers). Both answers must be the same rows, and each count the number of its rows.
@Suite struct PredicatePathAgreementTests {
    static let strings = ["title", "author.name", "author.email", "publisher.name"]
    static let numbers = [
        "pages", "score", "price", "author.rating", "chapters.@count", "tags.@count",
        "author.books.@count", "chapters.@sum.number", "chapters.@max.number", "chapters.@avg.number",
    ]

    static func operand(for keyPath: String, _ g: inout SeededGenerator) -> String {
        if strings.contains(keyPath) {
            return ["'a'", "'B'", "''", "'\u{E9}'", "'e\u{301}'", "'x*'", "'100'", "nil", "'b'", "'A'", "%@"]
                .randomElement(using: &g)!
        }
        if keyPath == "inPrint" { return ["TRUE", "FALSE", "nil", "0", "1"].randomElement(using: &g)! }
        return ["0", "-1", "1", "100", "250", "1.5", "-0.0", "1e300", "9223372036854775807", "nil", "2", "0.25"]
            .randomElement(using: &g)!
    }

    /// Objects named in a generated predicate, written `%O{Entity:1,2}` (a list) or `%S{Entity:1}` (one object) and
    /// bound by ``arguments(of:)``: both libraries give their objects the same primary keys (some named here exist
    /// in neither).
    static func objects(_ entity: String, upTo count: Int, _ g: inout SeededGenerator, single: Bool = false) -> String {
        let keys = (0..<(single ? 1 : Int.random(in: 0...3, using: &g))).map { _ in
            String(UInt64.random(in: 1...UInt64(count + 2), using: &g))
        }
        return "%\(single ? "S" : "O"){\(entity):\(keys.joined(separator: ","))}"
    }

    /// The text with its `%O{...}` and `%S{...}` written `%@`, and the arguments of every placeholder in order:
    /// objects for those, the string "a" for `%@`.
    static func arguments(of text: String) -> (format: String, arguments: [PredicateArgument]) {
        var format = ""
        var arguments: [PredicateArgument] = []
        var rest = Substring(text)
        while let start = rest.firstIndex(of: "%") {
            format += rest[..<start]
            format += "%@"
            let after = rest[start...]
            guard after.hasPrefix("%O{") || after.hasPrefix("%S{"), let close = after.firstIndex(of: "}") else {
                arguments.append(.value(.string("a")))
                rest = after.dropFirst(2)
                continue
            }
            let body = after[after.index(start, offsetBy: 3)..<close].split(separator: ":", maxSplits: 1)
            let ids = (body.count < 2 ? [] : body[1].split(separator: ",")).map {
                ObjectID(entityName: String(body[0]), primaryKey: UInt64($0)!)
            }
            arguments.append(after.hasPrefix("%S{") ? .object(ids[0]) : .objects(ids))
            rest = after[after.index(after: close)...]
        }
        format += rest
        return (format, arguments)
    }

    static func comparison(_ g: inout SeededGenerator) -> String {
        switch Int.random(in: 0..<12, using: &g) {
        case 10:
            switch Int.random(in: 0..<4, using: &g) {
            case 0: return "SELF IN \(objects("Book", upTo: 30, &g))"
            case 1: return "NOT (self IN \(objects("Book", upTo: 30, &g)))"
            case 2:
                return "SELF \(["==", "!="].randomElement(using: &g)!) \(objects("Book", upTo: 30, &g, single: true))"
            default: return "SELF.pages IN {0, 1, 250}"
            }
        case 11:
            switch Int.random(in: 0..<7, using: &g) {
            case 0: return "author IN \(objects("Author", upTo: 6, &g))"
            case 1: return "ANY tags IN \(objects("Tag", upTo: 4, &g))"
            case 2: return "NONE tags IN \(objects("Tag", upTo: 4, &g))"
            case 3: return "publisher IN \(objects("Publisher", upTo: 1, &g))"
            case 4: return "tags CONTAINS \(objects("Tag", upTo: 4, &g, single: true))"
            case 5: return "\(objects("Tag", upTo: 4, &g, single: true)) IN tags"
            default: return "SUBQUERY(tags, $t, $t IN \(objects("Tag", upTo: 4, &g))).@count >= 1"
            }
        case 0:
            let op = ["==", "BEGINSWITH", "CONTAINS[cd]", "LIKE", "==[c]"].randomElement(using: &g)!
            return "ANY tags.name \(op) \(operand(for: "title", &g))"
        case 1:
            let op = ["<", ">", "==", "!="].randomElement(using: &g)!
            return "ALL chapters.number \(op) \(["1", "3", "5", "nil"].randomElement(using: &g)!)"
        case 2:
            let op = ["BEGINSWITH", "==", "CONTAINS[c]"].randomElement(using: &g)!
            return "NONE chapters.title \(op) \(["'c'", "'C1'", "''"].randomElement(using: &g)!)"
        case 3:
            let op = [">", "==", "<"].randomElement(using: &g)!
            return "SUBQUERY(chapters, $c, $c.number > \(Int.random(in: 0..<5, using: &g))).@count \(op) "
                + "\(Int.random(in: 0..<3, using: &g))"
        case 4:
            return "\(["author", "publisher"].randomElement(using: &g)!) \(["==", "!="].randomElement(using: &g)!) nil"
        case 5:
            return "inPrint \(["==", "!=", "<", ">="].randomElement(using: &g)!) \(operand(for: "inPrint", &g))"
        default:
            let isString = Bool.random(using: &g)
            let keyPath = (isString ? strings : numbers).randomElement(using: &g)!
            let ops =
                isString
                ? [
                    "==", "!=", "<", ">=", "BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE", "==[c]", "CONTAINS[cd]",
                    "BEGINSWITH[d]", "IN", "BETWEEN",
                ]
                : ["==", "!=", "<", "<=", ">", ">=", "IN", "BETWEEN"]
            let op = ops.randomElement(using: &g)!
            if op == "IN" || op == "BETWEEN" {
                return "\(keyPath) \(op) {\(operand(for: keyPath, &g)), \(operand(for: keyPath, &g))}"
            }
            if Int.random(in: 0..<6, using: &g) == 0 {
                // Another key path of the same kind on the right.
                let others =
                    isString ? ["title", "author.name", "publisher.name"] : ["pages", "score", "author.rating"]
                return "\(keyPath) \(op) \(others.randomElement(using: &g)!)"
            }
            return "\(keyPath) \(op) \(operand(for: keyPath, &g))"
        }
    }

    static func predicate(_ g: inout SeededGenerator, depth: Int = 0) -> String {
        if depth > 2 || Int.random(in: 0..<3, using: &g) == 0 { return comparison(&g) }
        switch Int.random(in: 0..<3, using: &g) {
        case 0: return "(\(predicate(&g, depth: depth + 1)) AND \(predicate(&g, depth: depth + 1)))"
        case 1: return "(\(predicate(&g, depth: depth + 1)) OR \(predicate(&g, depth: depth + 1)))"
        default: return "NOT \(predicate(&g, depth: depth + 1))"
        }
    }

    /// The same library each time for the same seed.
    static func populate(_ context: ObjectContext, seed: UInt64) throws {
        var g = SeededGenerator(seed: seed)
        let names = ["a", "B", "\u{E9}", "e\u{301}", "", "x*"]
        let authors = try names.enumerated().map { index, name in
            let author = try context.insert("Author")
            try author.setValue(.string(name), forKey: "name")
            try author.setValue(.int(Int64(index - 2)), forKey: "rating")
            if index % 2 == 0 { try author.setValue(.string("m\(index)@x.org"), forKey: "email") }
            return author
        }
        let tags = try ["a", "B", "x*", "100"].map { name in
            let tag = try context.insert("Tag")
            try tag.setValue(.string(name), forKey: "name")
            return tag
        }
        let publisher = try context.insert("Publisher")
        try publisher.setValue(.string("P"), forKey: "name")
        let titles = ["a", "B", "\u{E9}", "e\u{301}", "", "x*", "100", "ab", "Ab", "b\u{E9}"]
        for index in 0..<30 {
            let book = try context.insert("Book")
            try book.setValue(.string(titles[index % 10]), forKey: "title")
            if index % 7 != 0 { try book.setValue(.int([0, 1, 100, 250, -1, 300][index % 6]), forKey: "pages") }
            try book.setValue(.double([0, -0.0, 1.5, 1e300, -2][index % 5]), forKey: "score")
            try book.setValue(.bool(index % 3 == 0), forKey: "inPrint")
            if index % 4 == 0 { try book.setValue(.decimal(Decimal(index) / 4), forKey: "price") }
            if index % 5 != 0 { try book.setObject(authors[index % 6], forKey: "author") }
            if index % 6 == 0 { try book.setObject(publisher, forKey: "publisher") }
            for tag in tags where Int.random(in: 0..<3, using: &g) == 0 { try tag.add(book, toKey: "books") }
            for number in 0..<Int.random(in: 0..<4, using: &g) {
                let chapter = try context.insert("Chapter")
                try chapter.setValue(.string(["c", "C1", "", "c2"][number]), forKey: "title")
                try chapter.setValue(.int(Int64.random(in: 1..<6, using: &g)), forKey: "number")
                try chapter.setObject(book, forKey: "book")
            }
        }
    }

    @Test func savedAndUnsavedLibrariesAnswerEveryPredicateAlike() throws {
        let count = TestScale.size(1_500, stress: 30_000)
        let saved = try TemporaryStore()
        defer { saved.remove() }
        let writer = ObjectContext(store: saved.store)
        try Self.populate(writer, seed: 5)
        try writer.save()
        let empty = try TemporaryStore()
        defer { empty.remove() }
        let unsaved = ObjectContext(store: empty.store)
        try Self.populate(unsaved, seed: 5)

        var g = SeededGenerator(seed: 11)
        var answered = 0
        var matched = 0
        for _ in 0..<count {
            let (text, arguments) = Self.arguments(of: Self.predicate(&g))
            let predicate = try FetchPredicate(format: text, arguments: arguments)
            let request = FetchRequest(
                entity: "Book", predicate: predicate, sortKeys: [SortKey("title"), SortKey("pages"), SortKey("score")])
            func rows(_ context: ObjectContext) throws -> [String] {
                try context.fetch(request).map { book in
                    try ["title", "pages", "score", "inPrint", "price"].map { "\(try book[$0])" }.joined(separator: "|")
                }.sorted()
            }
            let stored: [String]
            do {
                stored = try rows(ObjectContext(store: saved.store))
            } catch let error as EntityStoreError where error.code == .invalidPredicate {
                // Refused alike for unsaved objects: checked against the schema, not the rows.
                #expect(throws: EntityStoreError.self, "\(text)") { try rows(unsaved) }
                continue
            }
            let pending = try rows(unsaved)
            #expect(stored == pending, "\(text): saved \(stored.count) rows, unsaved \(pending.count)")
            // A count takes its own paths (it counts matches as it reads them, and skips the evaluator where the
            // record filter decides the whole predicate): it gives the fetch's number on both.
            #expect(
                try ObjectContext(store: saved.store).count(for: request) == stored.count, "count of \(text), saved")
            #expect(try unsaved.count(for: request) == pending.count, "count of \(text), unsaved")
            answered += 1
            if !stored.isEmpty { matched += 1 }
        }
        // Most predicates are well typed, and many match something.
        #expect(answered > count * 3 / 4)
        #expect(matched > count / 4)
    }
}
