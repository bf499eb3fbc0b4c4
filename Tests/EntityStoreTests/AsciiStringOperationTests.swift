import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// `==`, BEGINSWITH, ENDSWITH, CONTAINS and LIKE of ASCII strings are decided on their bytes; the answers must be the
/// general path's (Foundation's folding, then the operation on the folded text), for every option.
@Suite struct AsciiStringOperationTests {
    /// What the general path answers.
    func folded(
        _ text: String, _ op: FetchPredicate.Operator, _ pattern: String, _ options: FetchPredicate.StringOptions
    )
        -> Bool
    {
        let (t, p) = (ValueComparison.fold(text, options), ValueComparison.fold(pattern, options))
        switch op {
        case .equal: return t == p
        case .beginsWith: return t.unicodeScalars.starts(with: p.unicodeScalars)
        case .endsWith: return t.unicodeScalars.reversed().starts(with: p.unicodeScalars.reversed())
        case .like: return ValueComparison.like(Array(t.unicodeScalars), Array(p.unicodeScalars))
        default: return p.isEmpty || t.contains(p)
        }
    }

    @Test func asciiAnswersAreTheFoldedAnswers() {
        var g = SeededGenerator(seed: 43)
        // Letters of both cases, and the characters one bit away from them (@ [ ` { ^ ~): case folding must not
        // take them for letters.
        let alphabet = Array("aAbBzZ@[`{^~_ 09.")
        func word(_ length: ClosedRange<Int>) -> String {
            String((0..<Int.random(in: length, using: &g)).map { _ in alphabet.randomElement(using: &g)! })
        }
        let options: [FetchPredicate.StringOptions] = [
            [], .caseInsensitive, .diacriticInsensitive, .caseDiacriticInsensitive,
        ]
        var decided = 0
        var held = 0
        for _ in 0..<10_000 {
            // Up to three words of eight bytes and some (a search lowercases eight bytes at a time).
            let text = word(0...27)
            // Often a part of the text, with its case changed: matches are common.
            var pattern = word(0...3)
            if Bool.random(using: &g), !text.isEmpty {
                let start = Int.random(in: 0..<text.count, using: &g)
                let end = Int.random(in: start...text.count, using: &g)
                let part = String(Array(text)[start..<end])
                pattern = Bool.random(using: &g) ? part.uppercased() : part
            }
            // LIKE's wildcards, in place of some characters and between others.
            var wild = ""
            for character in pattern {
                switch Int.random(in: 0..<6, using: &g) {
                case 0: wild.append("?")
                case 1: wild += "*" + String(character)
                default: wild.append(character)
                }
            }
            if Bool.random(using: &g) { wild.append("*") }
            for op in [FetchPredicate.Operator.equal, .beginsWith, .endsWith, .contains, .like] {
                let pattern = op == .like ? wild : pattern
                for option in options {
                    let answer = ValueComparison.ascii(text, op, pattern, option)
                    #expect(answer == folded(text, op, pattern, option), "'\(text)' \(op) '\(pattern)' \(option)")
                    decided += 1
                    if answer == true { held += 1 }
                }
            }
        }
        #expect(held > decided / 10)
    }

    /// Text beyond ASCII is decided on its bytes folded scalar by scalar wherever each of its scalars has an entry
    /// in the fold table, with the general path's answers: random text of ASCII and of every scalar the table
    /// covers (with an entry or not), every operator and option.
    @Test func textFoldedScalarByScalarAnswersAsFoundationFoldsIt() {
        var g = SeededGenerator(seed: 46)
        let ascii = Array("aAeEsSiIkKzZ@[`{^~_ 09.").map { $0.unicodeScalars.first! }
        let covered = FoldTable.ranges.flatMap { $0 }.compactMap(Unicode.Scalar.init)
        let options: [FetchPredicate.StringOptions] = [
            [], .caseInsensitive, .diacriticInsensitive, .caseDiacriticInsensitive,
        ]
        var decided = 0
        var held = 0
        var beyond = 0
        for _ in 0..<6_000 {
            var scalars = String.UnicodeScalarView()
            for _ in 0..<Int.random(in: 1...10, using: &g) {
                scalars.append(
                    Int.random(in: 0..<3, using: &g) == 0
                        ? covered.randomElement(using: &g)! : ascii.randomElement(using: &g)!)
            }
            let text = String(scalars)
            guard !text.unicodeScalars.allSatisfy(\.isASCII) else { continue }
            // Often a piece of the text as [cd] folds it, in either case: matches are common.
            let plain = Array(ValueComparison.fold(text, .caseDiacriticInsensitive).unicodeScalars.filter(\.isASCII))
            var pattern = ""
            if !plain.isEmpty, Bool.random(using: &g) {
                let start = Int.random(in: 0..<plain.count, using: &g)
                let end = Int.random(in: start...min(plain.count, start + 4), using: &g)
                pattern = String(String.UnicodeScalarView(plain[start..<end]))
                if Bool.random(using: &g) { pattern = pattern.uppercased() }
            } else {
                pattern = String(
                    String.UnicodeScalarView(
                        (0..<Int.random(in: 0...3, using: &g)).map { _ in ascii.randomElement(using: &g)! }))
            }
            let wild = pattern.map { Int.random(in: 0..<5, using: &g) == 0 ? "?" : "*\($0)" }.joined() + "*"
            for op in [FetchPredicate.Operator.equal, .beginsWith, .endsWith, .contains, .like] {
                let pattern = op == .like ? wild : pattern
                for option in options {
                    beyond += 1
                    guard let answer = ValueComparison.ascii(text, op, pattern, option) else { continue }
                    #expect(
                        answer == folded(text, op, pattern, option),
                        "'\(text)' \(Array(text.unicodeScalars)) \(op) '\(pattern)' \(option)")
                    decided += 1
                    if answer { held += 1 }
                }
            }
        }
        // Most such text is decided on its bytes, and many comparisons hold.
        #expect(decided > beyond / 3 && held > decided / 20, "\(decided) of \(beyond), \(held) held")
        // Every covered Latin letter with an accent folds alone; the Kelvin sign, `İ` and marks do not.
        #expect(ValueComparison.ascii("Caf\u{E9} cr\u{E8}me", .contains, "CAFE", .caseDiacriticInsensitive) == true)
        #expect(ValueComparison.ascii("Stra\u{DF}e", .contains, "SS", .caseInsensitive) == true)
        #expect(ValueComparison.ascii("\u{C9}t\u{E9}", .equal, "ete", .diacriticInsensitive) == false)
        #expect(ValueComparison.ascii("\u{C9}t\u{E9}", .like, "e?e", .caseDiacriticInsensitive) == true)
        #expect(ValueComparison.ascii("na\u{EF}ve \u{2026}", .endsWith, "e \u{2026}", []) == nil)
        #expect(ValueComparison.ascii("\u{130}stanbul", .contains, "i", .caseInsensitive) == nil)
        #expect(ValueComparison.ascii("e\u{301}", .contains, "e", []) == nil)
        let entries = (0..<FoldTable.places).filter { FoldTable.entries[3 * FoldTable.places + $0] != 0 }
        #expect(entries.count > 400)
    }

    /// A case- or diacritic-insensitive sort orders ASCII titles on their bytes, as Foundation's `compare` does.
    @Test func asciiSortOrdersAreFoundationsOrders() {
        var g = SeededGenerator(seed: 44)
        let alphabet = Array("aAbBzZ@[`{^~_ 09.")
        func word() -> String {
            String((0..<Int.random(in: 0...6, using: &g)).map { _ in alphabet.randomElement(using: &g)! })
        }
        let comparisons: [(SortKey.Comparison, String.CompareOptions)] = [
            (.caseInsensitive, [.caseInsensitive]), (.diacriticInsensitive, [.diacriticInsensitive]),
            (.caseDiacriticInsensitive, [.caseInsensitive, .diacriticInsensitive]),
        ]
        for _ in 0..<10_000 {
            let (x, y) = (word(), word())
            for (comparison, options) in comparisons {
                let order = SortKey.asciiOrder(x, y, foldsCase: comparison != .diacriticInsensitive)
                #expect(order == x.compare(y, options: options), "'\(x)' '\(y)' \(comparison)")
                #expect(SortKey("t", comparison: comparison).order(.string(x), .string(y)) == order)
            }
        }
        #expect(SortKey.asciiOrder("ae\u{301}", "af", foldsCase: true) == nil)
        #expect(SortKey.asciiOrder("Zoë", "zoe", foldsCase: false) == nil)
    }

    /// A Finder-like sort orders ASCII titles on their bytes as Foundation's numeric, case-insensitive `compare`
    /// does: runs of digits by value (leading zeros; a run of 20 digits and more, which Foundation wraps in 64 bits,
    /// by its value here), letters of both cases, and the characters around them in byte order.
    @Test func numericOrdersAreFoundationsOrders() {
        var g = SeededGenerator(seed: 47)
        let others = Array("aAbBzZ_[`{ -.")
        func title() -> String {
            var title = ""
            for _ in 0..<Int.random(in: 0...5, using: &g) {
                if Bool.random(using: &g) {
                    title.append(others.randomElement(using: &g)!)
                } else {
                    let zeros = Int.random(in: 0..<4, using: &g) == 0 ? Int.random(in: 1...3, using: &g) : 0
                    let length = [1, 1, 2, 3, 18, 19, 24][Int.random(in: 0..<7, using: &g)]
                    title += String(repeating: "0", count: zeros)
                    title += String((0..<length).map { _ in "0123456789".randomElement(using: &g)! })
                }
            }
            return title
        }
        var titles = (0..<400).map { _ in title() }
        // Near neighbours: one digit or letter changed.
        titles += titles.map { title in
            guard !title.isEmpty else { return title }
            var characters = Array(title)
            characters[Int.random(in: 0..<characters.count, using: &g)] = "0123456789aA".randomElement(using: &g)!
            return String(characters)
        }
        // Foundation reads a run of digits into 64 bits: a run of more than 18 may wrap there, and is ordered here by
        // its value.
        func hasLongRun(_ text: String) -> Bool {
            text.split(whereSeparator: { !$0.isNumber }).contains { $0.drop(while: { $0 == "0" }).count > 18 }
        }
        var orders: [ComparisonResult: Int] = [:]
        var long = 0
        for _ in 0..<20_000 {
            let (x, y) = (titles.randomElement(using: &g)!, titles.randomElement(using: &g)!)
            let order = SortKey.numericOrder(x, y)
            let reversed = SortKey.numericOrder(y, x)
            #expect(
                reversed
                    == (order == .orderedSame
                        ? .orderedSame : order == .orderedAscending ? .orderedDescending : .orderedAscending))
            if hasLongRun(x) || hasLongRun(y) {
                long += 1
                continue
            }
            let foundations = x.compare(y, options: [.caseInsensitive, .numeric])
            #expect(order == foundations, "'\(x)' '\(y)'")
            #expect(SortKey("t", comparison: .localizedStandard).order(.string(x), .string(y)) == foundations)
            orders[order, default: 0] += 1
        }
        // Some of each order, and some runs too long for Foundation.
        #expect(orders.count == 3 && orders.values.allSatisfy { $0 > 100 } && long > 100, "\(orders) \(long)")
        #expect(SortKey.numericOrder("file2", "file10") == .orderedAscending)
        #expect(SortKey.numericOrder("file 0099999999999999999999", "file 100000000000000000000") == .orderedAscending)
        // 2^64, which Foundation reads as 0.
        #expect(SortKey.numericOrder("x5", "x18446744073709551616") == .orderedAscending)
        // Beyond ASCII: folded for case, then the same.
        #expect(SortKey.numericOrder("Zo\u{EB} 2", "zo\u{CB} 10") == .orderedAscending)
        #expect(SortKey.numericOrder("Zoe\u{308} 02", "zo\u{CB} 2") == .orderedSame)
    }

    /// A binary sort orders text surely in its canonical form on its bytes as Swift orders it: ASCII, Latin,
    /// Cyrillic and CJK text, small strings and large, prefixes; text with a combining mark after a letter (which
    /// makes another scalar of it) is left to Swift.
    @Test func canonicalBinaryOrdersAreSwiftsOrders() {
        var g = SeededGenerator(seed: 48)
        let alphabet = Array("aAbB09 ~\u{7F}\u{0}\u{E9}\u{C9}\u{416}\u{65E5}\u{2026}")
        var orders: [ComparisonResult: Int] = [:]
        for _ in 0..<20_000 {
            // Up to 40 characters: stored in the string itself below 16 bytes, in a buffer beyond.
            let x = String((0..<Int.random(in: 0...40, using: &g)).map { _ in alphabet.randomElement(using: &g)! })
            var y = Bool.random(using: &g) ? x : String(x.prefix(Int.random(in: 0...x.count, using: &g)))
            y += String((0..<Int.random(in: 0...3, using: &g)).map { _ in alphabet.randomElement(using: &g)! })
            let swift: ComparisonResult = x < y ? .orderedAscending : x == y ? .orderedSame : .orderedDescending
            let order = ValueComparison.canonicalBinaryOrder(x, y)
            #expect(order == swift, "'\(x)' '\(y)'")
            #expect(ValueComparison.order(.string(x), .string(y), []) == swift)
            orders[swift, default: 0] += 1
        }
        #expect(orders.count == 3 && orders.values.allSatisfy { $0 > 1_000 }, "\(orders)")
        // "a" and a combining acute accent is "á", which sorts after "b".
        #expect(ValueComparison.canonicalBinaryOrder("a\u{301}", "b") == nil)
        #expect(ValueComparison.canonicalBinaryOrder("\u{E1}", "b") == .orderedDescending)
        #expect(ValueComparison.order(.string("a\u{301}"), .string("b"), []) == .orderedDescending)
    }

    /// A pattern beyond ASCII, text that does not fold scalar by scalar and MATCHES take the general path.
    @Test func textBeyondASCIIGoesTheGeneralWay() {
        #expect(ValueComparison.ascii("Cafe", .contains, "café", .diacriticInsensitive) == nil)
        #expect(ValueComparison.ascii("Cafe\u{301}", .contains, "cafe", .diacriticInsensitive) == nil)
        #expect(ValueComparison.ascii("Kelvin", .equal, "\u{212A}elvin", .caseInsensitive) == nil)
        #expect(ValueComparison.ascii("a", .matches, "a", []) == nil)
    }

    /// Through a fetch: ASCII titles decided on their bytes and the others through folding, in one result.
    @Test func aSearchFindsASCIIAndOtherTitlesAlike() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            for title in ["CAFE au lait", "Café crème", "café", "Cafeteria", "The cafe", "caffè", "KAFE"] {
                try context.insert("Book").setValue(.string(title), forKey: "title")
            }
            try context.save()
            func titles(_ format: String) throws -> Set<String> {
                Set(
                    try ObjectContext(store: store).fetch(
                        FetchRequest(entity: "Book", predicate: try FetchPredicate(format))
                    )
                    .map { try $0["title"].stringValue ?? "" })
            }
            #expect(
                try titles("title CONTAINS[cd] 'cafe'") == [
                    "CAFE au lait", "Café crème", "café", "Cafeteria", "The cafe",
                ])
            #expect(try titles("title CONTAINS[c] 'cafe'") == ["CAFE au lait", "Cafeteria", "The cafe"])
            #expect(try titles("title CONTAINS 'afe'") == ["Cafeteria", "The cafe"])
            #expect(
                try titles("title BEGINSWITH[c] 'caf'") == ["CAFE au lait", "Café crème", "café", "Cafeteria", "caffè"])
            #expect(try titles("title ENDSWITH[cd] 'E'") == ["Café crème", "café", "The cafe", "caffè", "KAFE"])
            #expect(try titles("title ==[c] 'kafe'") == ["KAFE"])
            #expect(try titles("title LIKE[cd] '*caf?'") == ["café", "The cafe"])
            #expect(try titles("title LIKE 'Caf*'") == ["Café crème", "Cafeteria"])
        }
    }

    /// The record filter decides a comparison of text with an ASCII constant on the bytes of ASCII text, as the
    /// evaluator does, and lets any other text through for the evaluator: every operator and option, nil, text
    /// beyond ASCII (the Kelvin sign folds to `k`), and conjunctions with comparisons it does not test.
    @Test func theRecordFilterDecidesASCIITextAsTheEvaluatorDoes() throws {
        let schema = try Schema(version: 1) {
            Entity("Note") {
                Attribute("title", .string, optional: true)
                Attribute("count", .int64, optional: true)
                Attribute("body", .string, optional: true)
            }
        }
        let entity = try #require(schema.entity("Note"))
        try withStore(schema: schema) { store, _ throws in
            var g = SeededGenerator(seed: 45)
            let alphabet = Array("aAbBzZ@[`{^~_ 09.")
            let beyond = ["\u{E9}", "\u{212A}", "\u{DF}", "e\u{301}", "\u{130}", "\u{C9}"]
            func word(_ length: ClosedRange<Int>) -> String {
                var word = String(
                    (0..<Int.random(in: length, using: &g)).map { _ in alphabet.randomElement(using: &g)! })
                if Int.random(in: 0..<4, using: &g) == 0 {
                    let at = word.index(word.startIndex, offsetBy: Int.random(in: 0...word.count, using: &g))
                    word.insert(contentsOf: beyond.randomElement(using: &g)!, at: at)
                }
                return word
            }
            let context = ObjectContext(store: store)
            var titles: [String] = []
            for _ in 0..<300 {
                let note = try context.insert("Note")
                let title = word(0...9)
                titles.append(title)
                try note.setValue(Int.random(in: 0..<6, using: &g) == 0 ? .null : .string(title), forKey: "title")
                try note.setValue(.int(Int64.random(in: -2...2, using: &g)), forKey: "count")
                try note.setValue(.string(word(0...3)), forKey: "body")
            }
            try context.save()
            let ops = ["==", "BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE"]
            let others = [
                "", " AND count > 0", " AND body MATCHES '.*a.*'", " AND title CONTAINS[c] '\u{E9}'",
                // A test of the filter's own on the same text: decided on text in its canonical form.
                " AND title != 'a\u{E9}'",
            ]
            var found = 0
            for round in 0..<400 {
                // Often a piece of a stored title, with its case changed: matches are common.
                var constant = String(word(0...3).unicodeScalars.filter(\.isASCII))
                let title = titles.randomElement(using: &g)!.unicodeScalars.filter(\.isASCII)
                if Bool.random(using: &g), !title.isEmpty {
                    let start = Int.random(in: 0..<title.count, using: &g)
                    let end = Int.random(in: start...title.count, using: &g)
                    constant = String(String.UnicodeScalarView(Array(title)[start..<end]))
                    if Bool.random(using: &g) { constant = constant.uppercased() }
                }
                let op = ops[round % ops.count]
                if op == "LIKE" {
                    constant = constant.map { Int.random(in: 0..<5, using: &g) == 0 ? "?" : "*\($0)" }.joined() + "*"
                }
                let options = ["", "[c]", "[d]", "[cd]"][round / ops.count % 4]
                let format = "title \(op)\(options) %@" + others[round / 20 % others.count]
                let predicate = try FetchPredicate(format: format, arguments: [.value(.string(constant))])
                #expect(RecordFilter(predicate, entity: entity) != nil, "\(format)")
                // An OR is none of the filter's: the evaluator answers alone.
                let alone = try FetchPredicate(
                    format: "(\(format)) OR FALSEPREDICATE", arguments: [.value(.string(constant))])
                #expect(RecordFilter(alone, entity: entity) == nil)
                let filtered = try context.fetch(FetchRequest(entity: "Note", predicate: predicate)).map(\.objectID)
                let evaluated = try context.fetch(FetchRequest(entity: "Note", predicate: alone)).map(\.objectID)
                #expect(filtered == evaluated, "\(format) '\(constant)'")
                found += evaluated.count
            }
            // Many matches, and far fewer than every record each time.
            #expect(found > 2_000 && found < 400 * 150)
        }
    }
}
