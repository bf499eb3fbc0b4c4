import Foundation
import LMDB
import TestSupport
import Testing

@testable import EntityStore

/// Format 2 records (fixed-size attributes first) and the format 1 records of older stores (schema order).
@Suite struct RecordFormatTests {
    /// The Book entity and a record of every type, as the format-1 era's tests have them.
    let book: Entity
    let sample: [Value]

    init() throws {
        let fixture = try StorageFormatTests()
        book = fixture.book
        sample = fixture.sample
    }

    func encoded(_ values: [Value], rowVersion: UInt64 = 1) -> [UInt8] {
        var buffer: [UInt8] = []
        RecordCodec.encode(values, rowVersion: rowVersion, into: &buffer)
        return buffer
    }

    /// The format-1 form of `values`: every field in schema order.
    func inSchemaOrder(_ values: [Value], rowVersion: UInt64 = 1) -> [UInt8] {
        var bytes: [UInt8] = [RecordCodec.formatInSchemaOrder]
        RecordCodec.appendVarint(rowVersion, &bytes)
        RecordCodec.appendVarint(UInt64(values.count), &bytes)
        var bitmap = [UInt8](repeating: 0, count: (values.count + 7) / 8)
        for (i, value) in values.enumerated() where value == .null { bitmap[i / 8] |= 1 << UInt8(i % 8) }
        bytes += bitmap
        for value in values where value != .null { RecordCodec.appendField(value, to: &bytes) }
        return bytes
    }

    /// Turns an open store into one of the old format: `entity`'s records in schema order, the meta saying format 1.
    func makeFormatOne(_ store: PersistentStore, _ entity: Entity) throws {
        let records = try store.environment.openDatabase("records.\(entity.name)", create: false)
        let meta = try store.environment.openDatabase("meta", create: false)
        try store.environment.write { txn in
            var rewritten: [([UInt8], [UInt8])] = []
            try txn.forEach(in: records) { key, value in
                let values = try Array(value).withUnsafeBytes { try RecordCodec.decode($0, entity: entity) }
                rewritten.append((Array(key), inSchemaOrder(values.values, rowVersion: values.rowVersion)))
                return .continue
            }
            for (key, value) in rewritten { try txn.put(key, value, in: records) }
            try txn.put(Array("format".utf8), withUnsafeBytes(of: UInt32(1).littleEndian, Array.init), in: meta)
        }
    }

    /// A format 1 store opened with a new schema version migrates: its records are read in schema order with the
    /// old entity, written in format 2 with the new one, and an index added by the migration is built from them.
    @Test func aFormatOneStoreMigratesToANewSchema() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("old.store")
        let v1 = try Schema(version: 1) {
            Entity("Item") {
                Attribute("name", .string)
                Attribute("count", .int64, default: 0)
            }
        }
        let v2 = try Schema(version: 2) {
            Entity("Item") {
                Attribute("label", .string, renamedFrom: "name")
                Attribute("note", .string, optional: true)
                Attribute("count", .int64, default: 0, indexed: true)
                Attribute("weight", .double, default: 1.5)
            }
        }
        do {
            let store = try PersistentStore.open(path: path, schema: v1, options: .init(sync: .noSync))
            let context = ObjectContext(store: store)
            for i in 0..<20 {
                let item = try context.insert("Item")
                try item.setValue(.string("item \(i)"), forKey: "name")
                try item.setValue(.int(Int64(i * 100)), forKey: "count")
            }
            try context.save()
            try makeFormatOne(store, try #require(v1.entity("Item")))
        }
        let store = try PersistentStore.open(path: path, schema: v2, options: .init(sync: .noSync))
        let context = ObjectContext(store: store)
        let items = try context.fetch(
            FetchRequest(
                entity: "Item", predicate: try FetchPredicate("weight > 1.0 AND count >= 1000"),
                sortKeys: [SortKey("count")]))
        #expect(try items.map { try $0.value(forKey: "label") } == (10..<20).map { .string("item \($0)") })
        #expect(try items.allSatisfy { try $0.value(forKey: "note") == .null })
        let indexed = try context.fetch(FetchRequest(entity: "Item", predicate: try FetchPredicate("count == 700")))
        #expect(try indexed.map { try $0.value(forKey: "label") } == ["item 7"])
        let records = try store.environment.openDatabase("records.Item", create: false)
        try store.environment.read { txn in
            try txn.forEach(in: records) { _, value in
                #expect(value[0] == RecordCodec.formatVersion)
                return .continue
            }
        }
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    @Test func theFormatIsPinned() throws {
        // version 2, row version 7, 5 values, bitmap (index 1 is nil), then tag + payload per value: the int, bool
        // and double first, then the string.
        let record = encoded([.string("ab"), .null, .int(-1), .bool(true), .double(1)], rowVersion: 7)
        #expect(record == [2, 7, 5, 0b10, 2, 1, 1, 1, 3, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F, 4, 2, 97, 98])
        #expect(record.count == inSchemaOrder([.string("ab"), .null, .int(-1), .bool(true), .double(1)]).count)
    }

    @Test func formatOneRecordsStillDecodeAndValidate() throws {
        // A record as EntityStore wrote it before scalars came first (the pinned bytes of that format).
        let old: [UInt8] = [1, 7, 5, 0b10, 4, 2, 97, 98, 2, 1, 1, 1, 3, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F]
        var entity = Entity("R")
        entity.attributes = [
            Attribute("s", .string), Attribute("n", .int64, optional: true), Attribute("i", .int64),
            Attribute("b", .bool), Attribute("d", .double),
        ]
        let (values, rowVersion) = try old.withUnsafeBytes { try RecordCodec.decode($0, entity: entity) }
        #expect(values == [.string("ab"), .null, .int(-1), .bool(true), .double(1)])
        #expect(rowVersion == 7)
        #expect(try old.withUnsafeBytes { try RecordCodec.validate($0, entity: entity) } == 7)
        #expect(try old.withUnsafeBytes { try RecordCodec.rowVersion($0, entity: "R") } == 7)
        #expect(inSchemaOrder(values, rowVersion: 7) == old)
        // Both formats of every sample decode alike, with and without decimals as text, and partially.
        for values in [sample, sample.map { $0.type == .string ? .null : $0 }, sample.map { _ in Value.null }] {
            for bytes in [encoded(values), inSchemaOrder(values)] {
                #expect(try bytes.withUnsafeBytes { try RecordCodec.decode($0, entity: book).values } == values)
                let needed = book.attributes.indices.map { $0 % 2 == 0 }
                let partial = try bytes.withUnsafeBytes { try RecordCodec.decode($0, entity: book, needed: needed) }
                #expect(partial == values.indices.map { needed[$0] ? values[$0] : .null })
            }
        }
    }

    /// A fixed-size value read alone from a format 2 record is the value the full decode gives, nil among them; a
    /// variable-size attribute, and any attribute of a format 1 record, is left to the full decode.
    @Test func aFixedSizeValueReadAloneIsTheDecodedOne() throws {
        let wide = try manyTypes()
        let books = [sample, sample.map { $0.type == .string ? .null : $0 }, sample.map { _ in .null }]
        for (entity, samples) in [(book, books), wide] {
            for values in samples {
                let record = encoded(values)
                let old = inSchemaOrder(values)
                for index in entity.attributes.indices {
                    let alone = try record.withUnsafeBytes {
                        try RecordCodec.fixedSizeValue(at: index, $0, entity.name, entity.attributes, key: 1)
                    }
                    let variable = RecordCodec.isVariableSize(entity.attributes[index].type)
                    #expect(
                        alone == (variable ? Value?.none : values[index]),
                        "\(entity.name).\(entity.attributes[index].name)")
                    let fromOld = try old.withUnsafeBytes {
                        try RecordCodec.fixedSizeValue(at: index, $0, entity.name, entity.attributes, key: 1)
                    }
                    #expect(fromOld == Value?.none)
                }
            }
        }
        // A tag that does not match its attribute is corrupt, as in the full decode: the first fixed-size field's
        // tag (after the version, row version, count and two bytes of bitmap) is stepped over to read the last one.
        let (mixed, mixedValues) = wide
        var relabeled = encoded(mixedValues[0])
        relabeled[5] = 0x7F
        let last = try #require(
            mixed.attributes.indices.last { !RecordCodec.isVariableSize(mixed.attributes[$0].type) })
        let error = entityStoreError {
            _ = try relabeled.withUnsafeBytes {
                try RecordCodec.fixedSizeValue(at: last, $0, mixed.name, mixed.attributes, key: 1)
            }
        }
        #expect(error?.code == .corruptData)
        #expect(error?.message.contains("type tag 127 for 'a1'") == true)
    }

    /// An entity of every type, twice over, and records of it with values and with nil in turn.
    func manyTypes() throws -> (Entity, [[Value]]) {
        let types: [AttributeType] = [.string, .int64, .decimal, .double, .binary, .bool, .date, .uuid]
        var entity = Entity("Mixed")
        entity.attributes = (0..<16).map { Attribute("a\($0)", types[$0 % types.count], optional: true) }
        let values: [Value] = entity.attributes.indices.map { i in
            switch types[i % types.count] {
            case .string: .string("s\(i)")
            case .int64: .int(Int64(i) * -1_000_003)
            case .decimal: .decimal(Decimal(i) / 4)
            case .double: .double(Double(i) + 0.5)
            case .binary: .data([UInt8(i), 0, 255])
            case .bool: .bool(i % 3 == 0)
            case .date: .date(Date(timeIntervalSinceReferenceDate: Double(i) * 1_000))
            case .uuid: .uuid(UUID())
            }
        }
        let alternating = values.indices.map { $0 % 3 == 1 ? Value.null : values[$0] }
        return (entity, [values, alternating])
    }

    @Test func fieldsOutOfTheirPassAreCorrupt() throws {
        func error(_ bytes: [UInt8]) -> EntityStoreError? {
            entityStoreError { _ = try bytes.withUnsafeBytes { try RecordCodec.decode($0, entity: book) } }
        }
        // Format 2's tag for a schema-order record: the string where the int should be.
        var relabeled = inSchemaOrder(sample)
        relabeled[0] = RecordCodec.formatVersion
        #expect(error(relabeled)?.code == .corruptData)
        #expect(error(relabeled)?.message.contains("type tag 4 for 'pages'") == true)
        var unlabeled = encoded(sample)
        unlabeled[0] = RecordCodec.formatInSchemaOrder
        #expect(error(unlabeled)?.code == .corruptData)
        #expect(error([3] + encoded(sample).dropFirst())?.message.contains("record format version 3") == true)
        for length in 0..<encoded(sample).count {
            #expect(error(Array(encoded(sample).prefix(length)))?.code == .corruptData, "length \(length)")
        }
    }

    /// Entities of more than 64 attributes: strings, data and decimals on both sides of the 64th, nil among them,
    /// round trip in both formats, and the filter reads a scalar declared after all of them.
    @Test func manyAttributesRoundTripInEitherFormat() throws {
        let types: [AttributeType] = [.string, .int64, .decimal, .double, .binary, .bool, .date, .uuid]
        var entity = Entity("Wide")
        entity.attributes = (0..<75).map { Attribute("a\($0)", types[$0 % types.count], optional: true) }
        var g = SeededGenerator(seed: 64)
        let filter = try #require(RecordFilter(try FetchPredicate("a73 > 0"), entity: entity))
        for round in 0..<40 {
            let values: [Value] = entity.attributes.indices.map { i in
                if Int.random(in: 0..<4, using: &g) == 0 { return .null }
                switch types[i % types.count] {
                case .string: return .string("s\(i)-\(round)")
                case .int64: return .int(Int64.random(in: -5...5, using: &g))
                case .decimal: return .decimal(Decimal(i) / 4)
                case .double: return .double(Double(i) - 40)
                case .binary: return .data([UInt8](repeating: UInt8(i), count: i % 9))
                case .bool: return .bool(i % 3 == 0)
                case .date: return .date(Date(timeIntervalSinceReferenceDate: Double(i)))
                case .uuid: return .uuid(UUID())
                }
            }
            for bytes in [encoded(values), inSchemaOrder(values)] {
                #expect(try bytes.withUnsafeBytes { try RecordCodec.decode($0, entity: entity).values } == values)
                #expect(try bytes.withUnsafeBytes { try RecordCodec.validate($0, entity: entity) } == 1)
                let expected: Bool = if case .int(let n) = values[73] { n > 0 } else { false }
                #expect(bytes.withUnsafeBytes { filter.matches($0) } == expected)
            }
        }
    }

    /// A scan finds the scalars a filter tests after a 70,000-byte string in schema order, in both formats.
    @Test func theFilterReadsScalarsDeclaredAfterLargeValues() throws {
        var values = sample
        values[4] = .data([UInt8](repeating: 3, count: 70_000))
        values[0] = .string(String(repeating: "é", count: 35_000))
        let record = encoded(values)
        // The scalars are in the first bytes: the cover and the title after them.
        #expect(record.count > 140_000)
        #expect(record[4] == RecordCodec.tag(of: .int64))
        for (format, expected) in [
            ("score < 0.0 AND inPrint == NO", true), ("score > 0.0", false), ("pages == -412", true),
        ] {
            let filter = try #require(RecordFilter(try FetchPredicate(format), entity: book), "\(format)")
            for bytes in [record, inSchemaOrder(values)] {
                #expect(bytes.withUnsafeBytes { filter.matches($0) } == expected, "\(format)")
            }
        }
    }

    /// The record filter gives one answer for a record whatever its format: random values, nil included, and
    /// random conjunctions. (FetchTests compares its answers with the evaluator's.)
    @Test func theRecordFilterReadsEveryFormatAlike() throws {
        var entity = Entity("Sample")
        entity.attributes = [
            Attribute("label", .string, optional: true), Attribute("count", .int64, optional: true),
            Attribute("blob", .binary, optional: true), Attribute("ratio", .double, optional: true),
            Attribute("id", .uuid, optional: true), Attribute("flag", .bool, optional: true),
        ]
        var g = SeededGenerator(seed: 11)
        let formats = [
            "count == 1", "count != 1", "ratio >= 0.0", "flag == YES", "count BETWEEN {-1, 2}", "count IN {0, 3}",
            "ratio < 2.0 AND flag == NO", "count > 0 AND ratio <= 0.0", "count != 3", "ratio != 0.0",
        ]
        let filters = try formats.map { try #require(RecordFilter(try FetchPredicate($0), entity: entity)) }
        let truthFormats = ["count > 1000", "count <= -64", "count == 2048", "count != -24576"]
        func truth(_ k: Int, _ n: Int64?) -> Bool {
            switch k {
            case 0: if let n { n > 1000 } else { false }
            case 1: if let n { n <= -64 } else { false }
            case 2: n == 2048
            default: n != -24576
            }
        }
        let truthFilters = try truthFormats.map {
            try #require(RecordFilter(try FetchPredicate($0), entity: entity))
        }
        var answers: Set<Bool?> = []
        for i in 0..<400 {
            func maybe(_ value: Value) -> Value { Int.random(in: 0..<5, using: &g) == 0 ? .null : value }
            let values: [Value] = [
                maybe(.string(String(repeating: "x", count: i % 7))),
                maybe(.int(Int64.random(in: -3...3, using: &g) << [0, 6, 10, 13, 17, 40][i % 6])),
                maybe(.data([UInt8](repeating: 1, count: i % 150))),
                maybe(.double([-1.5, -0.0, 0, 2, .nan, .infinity].randomElement(using: &g)!)),
                maybe(.uuid(UUID())), maybe(.bool(Bool.random(using: &g))),
            ]
            let forms = [
                encoded(values, rowVersion: UInt64(i) << 20), inSchemaOrder(values, rowVersion: UInt64(i) << 20),
            ]
            for (filter, format) in zip(filters, formats) {
                let results = forms.map { bytes in bytes.withUnsafeBytes { filter.matches($0) } }
                #expect(Set(results).count == 1, "\(format) on \(values)")
                #expect(results[0] != nil)
                answers.insert(results[0])
            }
            // Integers of one to seven varint bytes, against the answer worked out here.
            let count: Int64? = if case .int(let n) = values[1] { n } else { nil }
            for (k, filter) in truthFilters.enumerated() {
                for bytes in forms {
                    #expect(
                        bytes.withUnsafeBytes { filter.matches($0) } == truth(k, count), "\(truthFormats[k]) \(count)")
                }
            }
        }
        #expect(answers == [true, false])
    }

    /// Whether the record filter compares text of `scalar` byte for byte.
    func takenByTheFilter(_ scalar: Unicode.Scalar) -> Bool {
        scalar.isASCII || RecordFilter.canonicalRanges.contains { $0.contains(scalar.value) }
    }

    /// Strings compared on the encoded record: text of the scalars the filter takes (in its canonical form whatever
    /// it holds) gets the evaluator's answer in both formats; other text (canonically equivalent spellings, combining
    /// marks, and the Kelvin sign, which is `K`) is never refused, so that the evaluator decides. Strings between
    /// fixed-size and variable-size fields, nil included.
    @Test func theRecordFilterComparesCanonicalTextAsTheEvaluatorDoes() throws {
        var entity = Entity("Text")
        entity.attributes = [
            Attribute("label", .string, optional: true), Attribute("count", .int64, optional: true),
            Attribute("blob", .binary, optional: true), Attribute("title", .string, optional: true),
            Attribute("ratio", .double, optional: true),
        ]
        let words = [
            "", "a", "ab", "abc", "Ab", "K", "\u{212A}", "\u{E9}", "e\u{301}", "a\u{301}b", ";", "\u{37E}",
            "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnop\u{E9}", "\u{F1}and\u{FA}", "\u{C6}r\u{F8}",
            "\u{1C5}", "\u{2FF}", "\u{300}", "a\u{300}", "\u{E0}", "caf\u{E9} au lait", "\u{201C}a\u{201D}",
            "a\u{2026}", "\u{2000}", "\u{2002}", "\u{20AC}5",
        ]
        func text(_ value: Value) -> String? { if case .string(let v) = value { v } else { nil } }
        func equal(_ value: Value, _ word: String) -> Bool { ValueComparison.equal(value, .string(word), []) }
        func starts(_ value: Value, _ prefix: String) -> Bool {
            guard let v = text(value) else { return false }
            return v.canonicalForm.unicodeScalars.starts(with: prefix.canonicalForm.unicodeScalars)
        }
        func count(_ value: Value) -> Int64? { if case .int(let n) = value { n } else { nil } }
        // Each predicate, its arguments, the attributes whose text it tests, and its answer.
        let cases: [(String, [PredicateArgument], [Int], ([Value]) -> Bool)] = [
            ("label == %@", ["K"], [0], { equal($0[0], "K") }),
            ("label == %@", ["\u{212A}"], [0], { equal($0[0], "K") }),
            ("label == %@", ["e\u{301}"], [0], { equal($0[0], "\u{E9}") }),
            ("label != %@", ["a"], [0], { !equal($0[0], "a") }),
            ("label BEGINSWITH %@", ["a"], [0], { starts($0[0], "a") }),
            ("label BEGINSWITH %@", ["e\u{301}"], [0], { starts($0[0], "\u{E9}") }),
            ("label BEGINSWITH %@", ["caf\u{E9}"], [0], { starts($0[0], "caf\u{E9}") }),
            ("label == %@", ["a\u{300}"], [0], { equal($0[0], "\u{E0}") }),
            (
                "title IN %@", [["\u{F1}and\u{FA}", "\u{E0}"]], [3],
                { v in ["\u{F1}and\u{FA}", "\u{E0}"].contains { equal(v[3], $0) } }
            ),
            ("title BEGINSWITH %@", [""], [3], { starts($0[3], "") }),
            ("label == %@", ["\u{2000}"], [0], { equal($0[0], "\u{2002}") }),
            ("label BEGINSWITH %@", ["\u{201C}"], [0], { starts($0[0], "\u{201C}") }),
            ("title IN %@", [["a", "K", "abc"]], [3], { v in ["a", "K", "abc"].contains { equal(v[3], $0) } }),
            ("title == %@ AND count > 0", ["ab"], [3], { equal($0[3], "ab") && (count($0[1]) ?? 0) > 0 }),
            ("label == %@ AND title != %@", ["abc", "a"], [0, 3], { equal($0[0], "abc") && !equal($0[3], "a") }),
        ]
        let filters = try cases.map { format, arguments, _, _ in
            try #require(RecordFilter(try FetchPredicate(format: format, arguments: arguments), entity: entity))
        }
        var g = SeededGenerator(seed: 12)
        var refused = 0
        var leftToTheEvaluator = 0
        for _ in 0..<400 {
            func maybe(_ value: Value) -> Value { Int.random(in: 0..<6, using: &g) == 0 ? .null : value }
            let values: [Value] = [
                maybe(.string(words.randomElement(using: &g)!)), maybe(.int(Int64.random(in: -2...2, using: &g))),
                maybe(.data([1, 2, 3])), maybe(.string(words.randomElement(using: &g)!)), maybe(.double(0.5)),
            ]
            let forms = [encoded(values), inSchemaOrder(values)]
            for ((format, arguments, tested, truth), filter) in zip(cases, filters) {
                let expected = truth(values)
                // Text with a scalar outside the ranges surely canonical is the evaluator's to decide.
                let decided = tested.allSatisfy {
                    text(values[$0])?.unicodeScalars.allSatisfy(takenByTheFilter) ?? true
                }
                for bytes in forms {
                    let answer = bytes.withUnsafeBytes { filter.matches($0) }
                    #expect(answer != nil)
                    if decided {
                        #expect(answer == expected, "\(format) \(arguments) on \(values)")
                    } else {
                        #expect(answer == true || !expected, "\(format) \(arguments) refused \(values)")
                        if answer == true && !expected { leftToTheEvaluator += 1 }
                    }
                    if answer == false { refused += 1 }
                }
            }
        }
        #expect(refused > 1000)
        #expect(leftToTheEvaluator > 50)
    }

    /// Text that shares its first bytes with the constant is decided by its bytes when the rest of it is surely
    /// canonical, whatever those first bytes hold (they are the constant's, in canonical form), and by `==`, `!=`,
    /// `BEGINSWITH` and `IN` whatever follows when the scalars where it first differs from a constant start their
    /// canonical decompositions with different starters (or one ends there). Random texts made of ASCII, Latin
    /// letters, Cyrillic (decomposed too), combining marks, Hangul jamo and syllables, kana and their voicing mark,
    /// ideographs (one a compatibility ideograph), Devanagari and its nukta, the Kelvin sign and typographic
    /// punctuation, each against constants made from another text's prefix or changed copy: the filter never
    /// refuses text the evaluator accepts, agrees with it on every text whose scalars are all surely canonical,
    /// and decides many texts that hold other scalars before their first difference.
    @Test func theRecordFilterDecidesTextByTheBytesAfterTheConstantsOwn() throws {
        var entity = Entity("Text")
        entity.attributes = [Attribute("count", .int64), Attribute("title", .string, optional: true)]
        let pieces = [
            "a", "b", "K", "e", "ab", " ", "\u{E9}", "\u{301}", "\u{327}", "\u{212A}", "\u{1100}", "\u{1161}",
            "\u{AC00}", "\u{11A8}", "\u{2026}", "\u{201C}", "\u{2000}", "\u{F1}", "n\u{303}", "\u{1E61}", "\u{323}",
            "\u{3B1}", "\u{3B1}\u{301}", "\u{E0}", "\u{304B}", "\u{3099}", "\u{304C}", "\u{65E5}", "\u{672C}",
            "\u{F900}", "\u{93C}", "\u{915}", "\u{41C}", "\u{43E}", "\u{443}", "\u{439}", "\u{438}\u{306}",
            "\u{C0C1}", "\u{1109}\u{1161}\u{11BC}", "\u{6771}",
        ]
        var g = SeededGenerator(seed: 77)
        func randomText() -> String {
            (0..<Int.random(in: 0..<7, using: &g)).map { _ in pieces.randomElement(using: &g)! }.joined()
        }
        func surelyCanonical(_ text: String) -> Bool { text.unicodeScalars.allSatisfy(takenByTheFilter) }
        var decidedByBytes = 0
        for _ in 0..<3000 {
            let stored = randomText()
            // A constant that often shares a prefix with the stored text: a prefix of it, it with another end, or
            // its canonical form with one more piece.
            let scalars = Array(stored.canonicalForm.unicodeScalars)
            let cut = Int.random(in: 0...scalars.count, using: &g)
            var prefix = String.UnicodeScalarView()
            prefix.append(contentsOf: scalars.prefix(cut))
            let constant = [
                String(prefix), String(prefix) + randomText(), stored + pieces.randomElement(using: &g)!, randomText(),
            ].randomElement(using: &g)!
            let values: [Value] = [.int(1), .string(stored)]
            // A list of it and others, some near the stored text too.
            let list = [constant, randomText(), String(prefix) + randomText()].prefix(Int.random(in: 0...3, using: &g))
            let truths: [(String, PredicateArgument, Bool)] = [
                ("title == %@", .value(.string(constant)), ValueComparison.equal(values[1], .string(constant), [])),
                ("title != %@", .value(.string(constant)), !ValueComparison.equal(values[1], .string(constant), [])),
                (
                    "title BEGINSWITH %@", .value(.string(constant)),
                    stored.canonicalForm.unicodeScalars.starts(with: constant.canonicalForm.unicodeScalars)
                ),
                (
                    "title IN %@", .values(list.map { .string($0) }),
                    list.contains { ValueComparison.equal(values[1], .string($0), []) }
                ),
            ]
            for (format, argument, truth) in truths {
                let predicate = try FetchPredicate(format: format, arguments: [argument])
                let filter = try #require(RecordFilter(predicate, entity: entity))
                for bytes in [encoded(values), inSchemaOrder(values)] {
                    let answer = try #require(bytes.withUnsafeBytes { filter.matches($0) })
                    #expect(answer || !truth, "\(format) refused \(Array(stored.unicodeScalars)) for \(constant)")
                    if surelyCanonical(stored) { #expect(answer == truth, "\(format) \(stored) \(constant)") }
                    if !surelyCanonical(stored) && answer == truth && !truth { decidedByBytes += 1 }
                }
            }
        }
        #expect(decidedByBytes > 300)
        // A long list: text surely canonical is compared with each constant's bytes; other text is the evaluator's.
        let long = (0..<20).map { "word \($0)" } + ["\u{E9}t\u{E9}"]
        let filter = try #require(
            RecordFilter(
                try FetchPredicate(format: "title IN %@", arguments: [.values(long.map { .string($0) })]),
                entity: entity))
        for (text, expected) in [
            ("word 7", true), ("word 70", false), ("\u{E9}t\u{E9}", true), ("e\u{301}t\u{E9}", true),
            ("\u{65E5}", false),
        ] {
            let answer = encoded([.int(1), .string(text)]).withUnsafeBytes { filter.matches($0) }
            #expect(answer == expected, "\(text.unicodeScalars.map(\.value))")
        }
    }

    /// The text the record filter compares byte for byte is in its canonical form, and stays in it whatever
    /// canonical text comes before it, by this platform's Unicode data: every scalar it takes is assigned, has no
    /// combining class, is its own canonical form (Foundation's normalization) and is no later part of any
    /// scalar's canonical decomposition (so it composes with nothing before it: the Hangul vowels and final
    /// consonants, the kana voicing marks and the Indic vowel signs that compose are left out); random strings of
    /// what it takes are their own canonical form; and it takes exactly its ranges, nothing next to them.
    @Test func textTheRecordFilterComparesIsInItsCanonicalForm() {
        func accepted(_ text: String) -> Bool {
            var text = text
            return text.withUTF8 { RecordFilter.isSurelyCanonical(UnsafeRawBufferPointer($0)) }
        }
        func stable(_ text: String) -> Bool {
            Array(text.precomposedStringWithCanonicalMapping.unicodeScalars) == Array(text.unicodeScalars)
        }
        let ranges = RecordFilter.canonicalRanges
        #expect(zip(ranges, ranges.dropFirst()).allSatisfy { $0.upperBound + 1 < $1.lowerBound })
        #expect(ranges.first?.lowerBound == 0x80 && ranges.last.map { $0.upperBound <= 0xFFFF } == true)
        var taken = Set<UInt32>()
        var wrong: [String] = []
        for value in 0x80...0xFFFF as ClosedRange<UInt32> {
            guard let scalar = Unicode.Scalar(value) else { continue }
            let inRanges = ranges.contains { $0.contains(value) }
            if accepted(String(Character(scalar))) != inRanges { wrong.append("U+\(String(value, radix: 16)) taken") }
            guard inRanges else { continue }
            taken.insert(value)
            let category = scalar.properties.generalCategory
            if category == .unassigned || category == .privateUse || category == .surrogate
                || scalar.properties.canonicalCombiningClass != .notReordered || !stable(String(Character(scalar)))
            {
                wrong.append("U+\(String(value, radix: 16))")
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(8))")
        #expect(taken.count > 50_000)
        // What composes with something before it is a later part of some scalar's canonical decomposition (the
        // unified ideographs, skipped, have none; nothing beyond U+2FFFF has one).
        var composing: [String] = []
        for value in 0xC0...0x2FFFF as ClosedRange<UInt32> {
            guard let scalar = Unicode.Scalar(value), scalar.properties.generalCategory != .unassigned,
                !(0x3400...0x9FFF).contains(value),
                !(0x20000...0x2FFFF).contains(value) || (0x2F800...0x2FA1F).contains(value)
            else { continue }
            let parts = Array(String(Character(scalar)).decomposedStringWithCanonicalMapping.unicodeScalars)
            for part in parts.dropFirst() where taken.contains(part.value) {
                composing.append("U+\(String(part.value, radix: 16)) in U+\(String(value, radix: 16))")
            }
        }
        #expect(composing.isEmpty, "\(composing.prefix(8))")
        // Strings of what it takes, ASCII among them, are their own canonical form.
        var g = SeededGenerator(seed: 3)
        let pool = Array(taken) + Array(0x20...0x7E as ClosedRange<UInt32>)
        var unstable: [String] = []
        for _ in 0..<40_000 {
            var text = String.UnicodeScalarView()
            for _ in 0..<Int.random(in: 2...4, using: &g) {
                text.append(Unicode.Scalar(pool.randomElement(using: &g)!)!)
            }
            if !stable(String(text)) {
                unstable.append(String(text).unicodeScalars.map { "\($0.value)" }.joined(separator: " "))
            }
        }
        #expect(unstable.isEmpty, "\(unstable.prefix(5))")
        for value in [0x300, 0x2000, 0x2001, 0x20D0, 0x212A, 0x37E, 0x1161, 0x11A8, 0x3099, 0x9BE, 0xF900] as [UInt32] {
            #expect(!accepted(String(Character(Unicode.Scalar(value)!))), "U+\(String(value, radix: 16))")
        }
        for text in ["\u{AC00}\u{11A8}", "\u{304B}\u{3099}", "\u{1100}\u{1161}", "e\u{301}", "\u{1F600}"] {
            #expect(!accepted(text), "\(text.unicodeScalars.map(\.value))")
        }
        for text in ["日本語のテキスト", "한국어 텍스트", "Русский текст", "Ελληνικά", "עברית", "العربية", "हिन्दी"] {
            #expect(accepted(text) == text.unicodeScalars.allSatisfy { $0.isASCII || taken.contains($0.value) })
        }
        #expect(accepted("日本語のテキスト") && accepted("한국어 텍스트") && accepted("Русский текст"))
        // Bytes that are not well-formed UTF-8 are left to the evaluator (which reports the damage).
        for bytes in [
            [0xC2], [0xC3, 0x41], [0xE2, 0x80], [0xE2, 0x41, 0x82], [0x80], [0xFF], [0xE0, 0x80, 0x80], [0xC1, 0xBF],
            [0xED, 0xA0, 0x80], [0xF0, 0x9F, 0x98, 0x80],
        ] as [[UInt8]] {
            #expect(!bytes.withUnsafeBytes { RecordFilter.isSurelyCanonical($0) }, "\(bytes)")
        }
    }

    /// The scalars whose first difference decides a comparison whatever follows start their own canonical
    /// decomposition and have no combining class, by this platform's Unicode data; a Hangul syllable's starts with
    /// its leading consonant.
    @Test func theRecordFilterKnowsWhichScalarsStartTheirDecomposition() {
        func leading(_ text: String) -> UInt32? {
            var text = text
            return text.withUTF8 { RecordFilter.leadingStarter(UnsafeRawPointer($0.baseAddress!), $0.count, 0) }
        }
        let ranges = RecordFilter.plainRanges
        #expect(zip(ranges, ranges.dropFirst()).allSatisfy { $0.upperBound + 1 < $1.lowerBound })
        #expect(ranges.allSatisfy { $0.lowerBound >= 0x80 && $0.upperBound <= 0xFFFF })
        var wrong: [String] = []
        var plain = 0
        for range in ranges {
            for value in range {
                let scalar = Unicode.Scalar(value)!
                let text = String(Character(scalar))
                let category = scalar.properties.generalCategory
                if category == .unassigned || category == .privateUse || category == .surrogate
                    || scalar.properties.canonicalCombiningClass != .notReordered
                    || Array(text.decomposedStringWithCanonicalMapping.unicodeScalars) != [scalar]
                    || leading(text) != value
                {
                    wrong.append("U+\(String(value, radix: 16))")
                }
                plain += 1
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(8))")
        #expect(plain > 40_000)
        for value in 0xAC00...0xD7A3 as ClosedRange<UInt32> {
            let text = String(Character(Unicode.Scalar(value)!))
            let first = text.decomposedStringWithCanonicalMapping.unicodeScalars.first!
            if leading(text) != first.value || first.properties.canonicalCombiningClass != .notReordered {
                wrong.append("U+\(String(value, radix: 16))")
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(8))")
        #expect(leading("a") == 0x61 && leading("\u{6771}") == 0x6771 && leading("\u{C0C1}") == 0x1109)
        for text in ["\u{E9}", "\u{301}", "\u{F900}", "\u{439}", "\u{304C}", "\u{1F600}"] {
            #expect(leading(text) == nil, "\(text.unicodeScalars.map(\.value))")
        }
    }

    /// A store written before scalars came first (format 1 in its meta database, format 1 records) opens, reads and filters
    /// as before; opened for writing it is marked format 2, and each record is rewritten in format 2 when saved.
    @Test func aFormatOneStoreIsReadAndUpgradedAsItIsSaved() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("old.store")
        let schema = try Fixtures.librarySchema()
        func storedFormat(_ store: PersistentStore) throws -> UInt32 {
            let meta = try store.environment.openDatabase("meta", create: false)
            return try store.environment.read { txn in
                try #require(try txn.get(Array("format".utf8), in: meta)).loadUnaligned(as: UInt32.self)
            }
        }
        func firstBytes(_ store: PersistentStore) throws -> [UInt64: UInt8] {
            let records = try store.environment.openDatabase("records.Book", create: false)
            var firsts: [UInt64: UInt8] = [:]
            try store.environment.read { txn in
                try txn.forEach(in: records) { key, value in
                    firsts[UInt64(bigEndian: key.loadUnaligned(as: UInt64.self))] = value[0]
                    return .continue
                }
            }
            return firsts
        }
        var expected: [ObjectID: [Value]] = [:]
        do {
            let store = try PersistentStore.open(path: path, schema: schema, options: .init(sync: .noSync))
            let context = ObjectContext(store: store)
            for i in 0..<60 {
                let book = try context.insert("Book")
                try book.setValue(.string("book \(i)"), forKey: "title")
                try book.setValue(i % 4 == 0 ? .null : .int(Int64(i * 10)), forKey: "pages")
                try book.setValue(.double(Double(i % 9) - 4), forKey: "score")
                try book.setValue(.bool(i % 3 == 0), forKey: "inPrint")
                if i % 5 == 0 { try book.setValue(.data([UInt8](repeating: 9, count: i)), forKey: "cover") }
            }
            try context.save()
            for book in try context.fetch(FetchRequest(entity: "Book")) {
                expected[book.objectID] = try book.entity.attributes.map { try book.value(forKey: $0.name) }
            }
            try makeFormatOne(store, book)
            #expect(Set(try firstBytes(store).values) == [1])
        }
        do {
            let store = try PersistentStore.openReadOnly(path: path)
            #expect(try storedFormat(store) == 1)
            #expect(try ObjectContext(store: store).fetch(FetchRequest(entity: "Book")).count == 60)
        }
        let store = try PersistentStore.open(path: path, schema: schema, options: .init(sync: .noSync))
        #expect(try storedFormat(store) == 2)
        let context = ObjectContext(store: store)
        for book in try context.fetch(FetchRequest(entity: "Book")) {
            #expect(try book.entity.attributes.map { try book.value(forKey: $0.name) } == expected[book.objectID])
        }
        for format in ["score >= 0.0", "pages < 300 AND inPrint == YES", "pages == nil", "pages != 40"] {
            let filtered = try context.fetch(FetchRequest(entity: "Book", predicate: try FetchPredicate(format)))
            let evaluated = try context.fetch(
                FetchRequest(entity: "Book", predicate: try FetchPredicate("(\(format)) AND TRUEPREDICATE")))
            #expect(filtered.map(\.objectID) == evaluated.map(\.objectID), "\(format)")
            #expect(!filtered.isEmpty)
        }
        let changed = try #require(try context.fetch(FetchRequest(entity: "Book")).first)
        try changed.setValue(.double(100), forKey: "score")
        try context.save()
        let firsts = try firstBytes(store)
        #expect(firsts[changed.objectID.primaryKey] == 2)
        #expect(firsts.values.filter { $0 == 1 }.count == 59)
        #expect(try store.checkIntegrity().findings.isEmpty)
        let filtered = try ObjectContext(store: store).fetch(
            FetchRequest(entity: "Book", predicate: try FetchPredicate("score > 50.0")))
        #expect(filtered.map(\.objectID) == [changed.objectID])
    }

    /// A fetch checks each record with a quick pass and falls back to the full check for anything it does not
    /// take: the quick pass must take every well-formed record of an entity without decimals (or it is dead code)
    /// and never a record the full check refuses, whatever the bytes (here: every well-formed sample changed a
    /// byte at a time, cut short and lengthened).
    @Test func theQuickCheckOfFetchedRecordsTakesOnlyWhatTheFullCheckTakes() throws {
        let schema = try Schema(version: 1) {
            Entity("Row") {
                Attribute("flag", .bool, optional: true)
                Attribute("name", .string, optional: true)
                Attribute("n", .int64, optional: true)
                Attribute("blob", .binary, optional: true)
                Attribute("x", .double, optional: true)
                Attribute("when", .date, optional: true)
                Attribute("id", .uuid, optional: true)
            }
        }
        let entity = try #require(schema.entity("Row"))
        let layout = RecordLayout(entity)
        var generator = SeededGenerator(seed: 19)
        let names: [Value] = [
            .null, .string(""), .string("plain"), .string("Ärger 🐛 «»"), .string(String(repeating: "x", count: 300)),
        ]
        let numbers: [Value] = [.null, .int(0), .int(-1), .int(1 << 40), .int(Int64.max >> 2)]
        var accepted = 0
        var mutations = 0
        for round in 0..<60 {
            let values: [Value] = [
                [.null, .bool(true), .bool(false)][round % 3], names[round % names.count],
                numbers[(round / 3) % numbers.count], round % 4 == 0 ? .null : .data([0, 255, UInt8(round)]),
                round % 5 == 0 ? .null : .double(Double(round) / 7), .date(Date(timeIntervalSince1970: Double(round))),
                round % 2 == 0 ? .null : .uuid(UUID()),
            ]
            let rowVersion = UInt64.random(in: 1...(1 << 50), using: &generator)
            let bytes = encoded(values, rowVersion: rowVersion)
            let full = try bytes.withUnsafeBytes { try RecordCodec.validate($0, entity: entity) }
            #expect(bytes.withUnsafeBytes { RecordCodec.quickValidate($0, layout) } == full)
            var variants: [[UInt8]] = [Array(bytes.dropLast()), bytes + [0], Array(bytes.prefix(bytes.count / 2))]
            for _ in 0..<40 {
                var changed = bytes
                changed[Int.random(in: 0..<changed.count, using: &generator)] = UInt8.random(
                    in: 0...255, using: &generator)
                variants.append(changed)
            }
            for variant in variants {
                mutations += 1
                guard let quick = variant.withUnsafeBytes({ RecordCodec.quickValidate($0, layout) }) else { continue }
                accepted += 1
                let check = Result { try variant.withUnsafeBytes { try RecordCodec.validate($0, entity: entity) } }
                #expect((try? check.get()) == quick, "quick check took \(variant), the full check: \(check)")
            }
        }
        // Some changes keep a record well-formed (a byte of a string or a double): both take those.
        #expect(accepted > 0 && accepted < mutations)
    }
}
