import EntityStore
import Foundation
import TestSupport
import Testing

/// Text predicates and sorts over hostile text, end to end (record filter, fold table, byte paths, sort prefixes,
/// index ranges and index order, pending changes merged, windows), against answers worked out here from Foundation
/// alone: the text folded by `folding(options:locale:)` and put in normalization form C, then compared as the
/// documentation says.
@Suite struct TextQueryOracleTests {
    /// Pieces of text where fast paths go wrong: both cases, bytes one bit from a letter, LIKE's and SQL's wildcards,
    /// precomposed and decomposed accents, letters that fold to two or to ASCII (ß, ﬁ, the Kelvin and Ångström
    /// signs), dotted and dotless i, digits, NUL and DEL, Cyrillic, CJK and an emoji with a modifier.
    static let pieces: [String] = [
        "a", "A", "b", "B", "z", "Z", "e", "E", "s", "S", "i", "I", "k", "K", "0", "1", "9", "10", "007", " ", "_",
        "%", "*", "?", "\\", "@", "[", "`", "{", "é", "É", "e\u{301}", "E\u{301}", "ß", "ẞ", "ss", "İ", "ı", "\u{212A}",
        "\u{212B}", "å", "Å", "ﬁ", "fi", "Ж", "ж", "中", "👍🏽", "\u{0}", "\u{7F}", "ǅ", "ÿ", "Ÿ", "œ", "Œ", "\u{2010}",
        "€", "ω", "\u{2126}", "ö", "o\u{308}", "\u{301}",
    ]

    static func text(_ g: inout SeededGenerator) -> String {
        (0..<Int.random(in: 0...6, using: &g)).map { _ in pieces.randomElement(using: &g)! }.joined()
    }

    /// Text folded as the documentation says: Foundation's folding for `[c]`, `[d]`, `[cd]`, then form C.
    static func folded(_ text: String, _ options: String) -> String {
        var fold: String.CompareOptions = []
        if options.contains("c") { fold.insert(.caseInsensitive) }
        if options.contains("d") { fold.insert(.diacriticInsensitive) }
        let folded = fold.isEmpty ? text : text.folding(options: fold, locale: nil)
        return folded.precomposedStringWithCanonicalMapping
    }

    /// LIKE on scalars: `*` any run, `?` any one.
    static func like(_ text: ArraySlice<Unicode.Scalar>, _ pattern: ArraySlice<Unicode.Scalar>) -> Bool {
        guard let first = pattern.first else { return text.isEmpty }
        if first == "*" {
            return (text.startIndex...text.endIndex).contains { like(text[$0...], pattern.dropFirst()) }
        }
        guard let t = text.first, first == "?" || first == t else { return false }
        return like(text.dropFirst(), pattern.dropFirst())
    }

    /// The order of two texts' UTF-8 bytes: for text in canonical form, its scalars' order. (Not `<`: the standard
    /// library's comparison is wrong for some text not in canonical form, on Linux.)
    static func byteOrder(_ a: String, _ b: String) -> ComparisonResult {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        return x.lexicographicallyPrecedes(y) ? .orderedAscending : x == y ? .orderedSame : .orderedDescending
    }

    static func holds(_ value: String?, _ op: String, _ options: String, _ constant: String) -> Bool {
        guard let value else { return op == "!=" }
        let (t, p) = (folded(value, options), folded(constant, options))
        let order = byteOrder(t, p)
        switch op {
        case "==": return order == .orderedSame
        case "!=": return order != .orderedSame
        case "<": return order == .orderedAscending
        case "<=": return order != .orderedDescending
        case ">": return order == .orderedDescending
        case ">=": return order != .orderedAscending
        case "BEGINSWITH": return t.unicodeScalars.starts(with: p.unicodeScalars)
        case "ENDSWITH": return t.unicodeScalars.reversed().starts(with: p.unicodeScalars.reversed())
        case "CONTAINS": return p.isEmpty || t.contains(p)
        default: return like(ArraySlice(t.unicodeScalars), ArraySlice(p.unicodeScalars))
        }
    }

    /// Text as `localizedStandard` compares it: a run of ASCII digits is one number (its digits without leading
    /// zeros), any other byte itself.
    enum Unit: Equatable {
        case number([UInt8])
        case byte(UInt8)

        static func units(_ text: String) -> [Unit] {
            var units: [Unit] = []
            var run: [UInt8]?
            for byte in text.utf8 {
                if (0x30...0x39).contains(byte) {
                    if run == nil || run == [] && byte == 0x30 {
                        run = byte == 0x30 ? [] : [byte]
                    } else {
                        run!.append(byte)
                    }
                    continue
                }
                if let digits = run { units.append(.number(digits)) }
                run = nil
                units.append(.byte(byte))
            }
            if let digits = run { units.append(.number(digits)) }
            return units
        }

        func order(_ other: Unit) -> ComparisonResult {
            switch (self, other) {
            case (.number(let x), .number(let y)):
                if x.count != y.count { return x.count < y.count ? .orderedAscending : .orderedDescending }
                return x.lexicographicallyPrecedes(y) ? .orderedAscending : x == y ? .orderedSame : .orderedDescending
            // Every byte but a digit is below all digits or above them.
            case (.number, .byte(let y)): return 0x30 < y ? .orderedAscending : .orderedDescending
            case (.byte(let x), .number): return x < 0x30 ? .orderedAscending : .orderedDescending
            case (.byte(let x), .byte(let y)):
                return x < y ? .orderedAscending : x == y ? .orderedSame : .orderedDescending
            }
        }
    }

    /// What a sort key compares of a text, as the documentation says: binary, the bytes of its canonical form; the
    /// others, those of the text folded as predicates fold it; `localizedStandard` folds case and compares numbers
    /// by their value.
    static func sortUnits(_ text: String, _ comparison: SortKey.Comparison) -> [Unit] {
        let options: String
        switch comparison {
        case .binary: options = ""
        case .caseInsensitive: options = "c"
        case .diacriticInsensitive: options = "d"
        case .caseDiacriticInsensitive: options = "cd"
        case .localizedStandard: return Unit.units(folded(text, "c"))
        }
        return folded(text, options).utf8.map(Unit.byte)
    }

    /// The order of two texts' units, nil first.
    static func order(_ x: [Unit]?, _ y: [Unit]?) -> ComparisonResult {
        guard let x, let y else { return x == nil ? (y == nil ? .orderedSame : .orderedAscending) : .orderedDescending }
        for (p, q) in zip(x, y) where p.order(q) != .orderedSame { return p.order(q) }
        return x.count == y.count ? .orderedSame : x.count < y.count ? .orderedAscending : .orderedDescending
    }

    /// Decomposed text sorts where its canonical form does, in memory as in an index's order, and range predicates
    /// agree: Swift's `<` answered neither way for `"e\u{301}"` against `"éi"`.
    @Test func decomposedTextOrdersAsItsCanonicalForm() throws {
        let schema = try Schema(version: 1) {
            Entity("Line") {
                Attribute("title", .string, indexed: true)
                Attribute("body", .string)
            }
        }
        try withStore(schema: schema) { store, _ in
            let context = ObjectContext(store: store)
            for text in ["éZ", "éi", "e\u{301}", "ea", "f"] {
                let line = try context.insert("Line")
                try line.setValue(.string(text), forKey: "title")
                try line.setValue(.string(text), forKey: "body")
            }
            try context.save()
            let sorted = ["ea", "f", "é", "éZ", "éi"]
            for key in ["title", "body"] {
                for ascending in [true, false] {
                    var request = FetchRequest(entity: "Line")
                    request.sortKeys = [SortKey(key, ascending: ascending)]
                    let fetched = try ObjectContext(store: store).fetch(request).map { try $0[key].stringValue }
                    #expect(fetched == (ascending ? sorted : sorted.reversed()), "\(key) \(ascending)")
                }
                let below = try ObjectContext(store: store).fetch(
                    FetchRequest(entity: "Line", predicate: try FetchPredicate("\(key) < 'éi'")))
                #expect(below.count == 4, "\(key) < 'éi'")
            }
        }
    }

    @Test func textPredicatesAndSortsGiveFoundationsAnswers() throws {
        let schema = try Schema(version: 1) {
            Entity("Line") {
                Attribute("title", .string, optional: true, indexed: true)
                Attribute("body", .string, optional: true)
                Attribute("n", .int64, default: 0)
            }
        }
        try withStore(schema: schema) { store, _ in
            var g = SeededGenerator(seed: 2026_12_06)
            func maybeText() -> String? { Int.random(in: 0..<8, using: &g) == 0 ? nil : Self.text(&g) }
            let context = ObjectContext(store: store)
            var objects: [ManagedObject] = []
            for i in 0..<400 {
                let line = try context.insert("Line")
                try line.setValue(maybeText().map(Value.string) ?? .null, forKey: "title")
                try line.setValue(maybeText().map(Value.string) ?? .null, forKey: "body")
                try line.setValue(.int(Int64(i % 7)), forKey: "n")
                objects.append(line)
            }
            try context.save()
            // Unsaved changes the fetches must merge: some values changed, some objects new, some deleted.
            for object in objects.shuffled(using: &g).prefix(30) {
                try object.setValue(maybeText().map(Value.string) ?? .null, forKey: "title")
                try object.setValue(maybeText().map(Value.string) ?? .null, forKey: "body")
            }
            for object in objects.shuffled(using: &g).prefix(10) where !object.isDeleted { try context.delete(object) }
            for _ in 0..<10 {
                let line = try context.insert("Line")
                try line.setValue(maybeText().map(Value.string) ?? .null, forKey: "title")
                try line.setValue(maybeText().map(Value.string) ?? .null, forKey: "body")
                objects.append(line)
            }
            // A second context sees the saved store only.
            let saved = ObjectContext(store: store)
            func text(_ object: ManagedObject, _ key: String) throws -> String? {
                if case .string(let s) = try object[key] { return s }
                return nil
            }
            let ops = ["==", "!=", "<", "<=", ">", ">=", "BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE"]
            let options = ["", "c", "d", "cd"]
            let comparisons: [SortKey.Comparison] = [
                .binary, .caseInsensitive, .diacriticInsensitive, .caseDiacriticInsensitive, .localizedStandard,
            ]
            let bodies = try objects.filter { !$0.isDeleted }.compactMap { try text($0, "body") }.filter { !$0.isEmpty }
            var matched = 0
            for _ in 0..<200 {
                // A constant: often a piece of a stored value with its case changed or decomposed, so that matches
                // (and text in two forms) are common.
                var constant = Self.text(&g)
                if Bool.random(using: &g) {
                    let characters = Array(bodies.randomElement(using: &g)!)
                    let start = Int.random(in: 0..<characters.count, using: &g)
                    constant = String(characters[start..<Int.random(in: start...characters.count, using: &g)])
                    switch Int.random(in: 0..<4, using: &g) {
                    case 0: constant = constant.uppercased()
                    case 1: constant = constant.lowercased()
                    case 2: constant = constant.decomposedStringWithCanonicalMapping
                    default: break
                    }
                }
                let key = Bool.random(using: &g) ? "title" : "body"
                let op = ops.randomElement(using: &g)!
                let option = options.randomElement(using: &g)!
                if op == "LIKE" && Bool.random(using: &g) { constant = "*" + constant.prefix(2) + "?*" }
                var format = "\(key) \(op)\(option.isEmpty ? "" : "[\(option)]") %@"
                var arguments: [PredicateArgument] = [.value(.string(constant))]
                // Sometimes a conjunct the record filter cannot test alone, or a NOT.
                let shape = Int.random(in: 0..<4, using: &g)
                let excluded = Int64.random(in: 0..<7, using: &g)
                switch shape {
                case 0:
                    format = "\(format) AND (n != %@ OR FALSEPREDICATE)"
                    arguments.append(.value(.int(excluded)))
                case 1: format = "NOT (\(format))"
                default: break
                }
                let sortKey = SortKey(
                    Bool.random(using: &g) ? "title" : "body", ascending: Bool.random(using: &g),
                    comparison: comparisons.randomElement(using: &g)!)
                var request = FetchRequest(
                    entity: "Line", predicate: try FetchPredicate(format: format, arguments: arguments))
                request.sortKeys = [sortKey]
                if Bool.random(using: &g) {
                    request.fetchLimit = Int.random(in: 1...40, using: &g)
                    request.fetchOffset = Int.random(in: 0...20, using: &g)
                }
                for fetcher in [context, saved] {
                    // The objects the fetcher sees, with their values as it sees them.
                    let population =
                        fetcher === context
                        ? objects.filter { !$0.isDeleted } : try saved.fetch(FetchRequest(entity: "Line"))
                    var rows: [(id: ObjectID, sort: [Unit]?)] = []
                    for object in population {
                        let value = try text(object, key)
                        var holds = Self.holds(value, op, option, constant)
                        let n = try object["n"]
                        if shape == 0 { holds = holds && n != .int(excluded) }
                        if shape == 1 { holds.toggle() }
                        if holds {
                            let sort = try text(object, sortKey.keyPath).map { Self.sortUnits($0, sortKey.comparison) }
                            rows.append((object.objectID, sort))
                        }
                    }
                    rows.sort { a, b in
                        let order = sortKey.ascending ? Self.order(a.sort, b.sort) : Self.order(b.sort, a.sort)
                        if order != .orderedSame { return order == .orderedAscending }
                        return a.id.primaryKey < b.id.primaryKey
                    }
                    var expected = rows.map(\.id)
                    if request.fetchLimit > 0 {
                        expected = Array(expected.dropFirst(request.fetchOffset).prefix(request.fetchLimit))
                    }
                    matched += expected.count
                    let fetched = try fetcher.fetch(request).map(\.objectID)
                    #expect(
                        fetched == expected,
                        "\(request.predicate!) sorted by \(sortKey) \(sortKey.comparison), limit \(request.fetchLimit) offset \(request.fetchOffset), \(fetcher === context ? "with" : "without") unsaved changes"
                    )
                    #expect(try fetcher.count(for: request) == expected.count, "count of \(request.predicate!)")
                }
            }
            // The constants were chosen so that a good share of requests match something.
            #expect(matched > 3_000)
        }
    }
}
