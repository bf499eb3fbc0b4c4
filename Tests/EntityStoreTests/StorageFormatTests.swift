import Foundation
import TestSupport
import Testing

@testable import EntityStore

@Suite struct StorageFormatTests {
    let book: Entity

    init() throws {
        book = try #require(try Fixtures.librarySchema().entity("Book"))
    }

    var sample: [Value] {
        [
            .string("Dune — «Ärger» 🐛"), .int(-412), .decimal(Decimal(string: "12.95")!),
            .uuid(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!), .data([0, 255, 7]), .double(-0.5),
            .bool(false),
        ]
    }

    @Test func decimalsAsTextAreTheirDescriptionAndStillChecked() throws {
        for text in ["12.95", "-0.000001", "0", "100000000000000000000", "12345678901234567890.123456789012345678"] {
            var values = sample
            values[2] = .decimal(Decimal(string: text)!)
            var buffer: [UInt8] = []
            RecordCodec.encode(values, rowVersion: 1, into: &buffer)
            let decoded = try buffer.withUnsafeBytes {
                try RecordCodec.decode($0, entity: book, decimalsAsText: true).values
            }
            #expect(decoded[2] == .string(Decimal(string: text)!.description), "\(text)")
            #expect(Array(decoded[0..<2] + decoded[3...]) == Array(values[0..<2] + values[3...]))
        }
        // Plain decimal text, as Decimal.description writes it; anything else is parsed (and checked) first.
        for (text, plain) in [
            ("1", true), ("-12.5", true), ("0.5", true), ("01", false), ("1.", false), (".5", false), ("1e3", false),
            ("-", false), ("", false), ("1.2.3", false),
        ] {
            let bytes = Array(text.utf8)
            #expect(bytes.withUnsafeBytes { ByteReader.isPlainDecimal($0) } == plain, "\(text)")
        }
        // A stored decimal that does not parse is corrupt data, as without the option.
        var buffer: [UInt8] = []
        RecordCodec.encode(sample, rowVersion: 1, into: &buffer)
        let stored = Array("12.95".utf8)
        let at = try #require(buffer.indices.first { Array(buffer[$0..<min($0 + 5, buffer.count)]) == stored })
        buffer[at + 2] = UInt8(ascii: "x")
        // ("12x95" is not a decimal, though `Decimal(string:)` would read 12 from it.)
        for decimalsAsText in [true, false] {
            #expect(throws: EntityStoreError.self) {
                try buffer.withUnsafeBytes { try RecordCodec.decode($0, entity: book, decimalsAsText: decimalsAsText) }
            }
        }
        #expect(throws: EntityStoreError.self) {
            try buffer.withUnsafeBytes { try RecordCodec.validate($0, entity: book) }
        }
    }

    @Test func recordsRoundTripEveryTypeAndNil() throws {
        for values in [sample, [.string(""), .null, .null, .null, .null, .double(.infinity), .bool(true)]] {
            var buffer: [UInt8] = []
            RecordCodec.encode(values, rowVersion: 7, into: &buffer)
            let (decoded, version) = try buffer.withUnsafeBytes { try RecordCodec.decode($0, entity: book) }
            #expect(decoded == values)
            #expect(version == 7)
        }
    }

    /// (The format's bytes are pinned in RecordFormatTests.)
    @Test func aReusedBufferWritesWhatAFreshOneDoes() throws {
        var generator = SeededGenerator(seed: 0xC0DEC)
        var reused: [UInt8] = []
        for _ in 0..<300 {
            let values = (0..<Int.random(in: 0...12, using: &generator)).map { _ -> Value in
                switch Int.random(in: 0..<9, using: &generator) {
                case 0: .null
                case 1: .bool(Bool.random(using: &generator))
                case 2:
                    .int(
                        Int64.random(in: .min ... .max, using: &generator)
                            >> Int64.random(in: 0...63, using: &generator))
                case 3: .double(Double.random(in: -1e9...1e9, using: &generator))
                case 4: .date(Date(timeIntervalSinceReferenceDate: Double.random(in: 0...1e9, using: &generator)))
                case 5: .string(String(repeating: "é", count: Int.random(in: 0...200, using: &generator)))
                case 6: .data((0..<Int.random(in: 0...300, using: &generator)).map { UInt8(truncatingIfNeeded: $0) })
                case 7: .uuid(UUID())
                default: .decimal(Decimal(Int.random(in: -99999...99999, using: &generator)) / 100)
                }
            }
            var fresh: [UInt8] = []
            RecordCodec.encode(values, rowVersion: 3, into: &fresh)
            RecordCodec.encode(values, rowVersion: 3, into: &reused)
            #expect(reused == fresh)
            var entity = Entity("R")
            entity.attributes = values.indices.map { Attribute("a\($0)", values[$0].type ?? .bool, optional: true) }
            let (decoded, version) = try fresh.withUnsafeBytes { try RecordCodec.decode($0, entity: entity) }
            #expect(decoded == values && version == 3)
        }
    }

    @Test func integersAtTheEdgesRoundTrip() throws {
        let chapter = try #require(try Fixtures.librarySchema().entity("Chapter"))
        for n in [Int64.min, -1, 0, 1, 63, 64, -65, Int64.max] {
            var buffer: [UInt8] = []
            RecordCodec.encode([.string("c"), .int(n)], rowVersion: UInt64.max, into: &buffer)
            let (decoded, version) = try buffer.withUnsafeBytes { try RecordCodec.decode($0, entity: chapter) }
            #expect(decoded[1] == .int(n))
            #expect(version == UInt64.max)
        }
    }

    @Test func everyTruncationOfARecordIsACorruptDataErrorNotACrash() throws {
        var buffer: [UInt8] = []
        RecordCodec.encode(sample, rowVersion: 1, into: &buffer)
        for length in 0..<buffer.count {
            let error = entityStoreError {
                _ = try Array(buffer.prefix(length)).withUnsafeBytes { try RecordCodec.decode($0, entity: book) }
            }
            #expect(error?.code == .corruptData, "length \(length)")
        }
    }

    @Test func randomByteFlipsNeverTrap() throws {
        var buffer: [UInt8] = []
        RecordCodec.encode(sample, rowVersion: 1, into: &buffer)
        var generator = SystemRandomNumberGenerator()
        var failures = 0
        for _ in 0..<5000 {
            var damaged = buffer
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                damaged[Int.random(in: 0..<damaged.count, using: &generator)] = UInt8.random(
                    in: 0...255, using: &generator)
            }
            do {
                _ = try damaged.withUnsafeBytes { try RecordCodec.decode($0, entity: book) }
            } catch let error as EntityStoreError {
                #expect(error.code == .corruptData)
                failures += 1
            }
        }
        #expect(failures > 0)
    }

    @Test func corruptionMessagesNameTheProblem() throws {
        var buffer: [UInt8] = []
        RecordCodec.encode(sample, rowVersion: 1, into: &buffer)
        let extra = entityStoreError {
            _ = try (buffer + [0]).withUnsafeBytes { try RecordCodec.decode($0, entity: book) }
        }
        #expect(extra?.message.contains("1 bytes after the last attribute") == true)
        var badVersion = buffer
        badVersion[0] = 9
        let version = entityStoreError {
            _ = try badVersion.withUnsafeBytes { try RecordCodec.decode($0, entity: book) }
        }
        #expect(version?.message.contains("record format version 9") == true)
        let chapter = try #require(try Fixtures.librarySchema().entity("Chapter"))
        let count = entityStoreError { _ = try buffer.withUnsafeBytes { try RecordCodec.decode($0, entity: chapter) } }
        #expect(count?.message.contains("holds 7 attributes, the entity has 2") == true)
    }

    @Test func insertsInTheHistoryNameTheirKeysOnceInTheSchemaNotPerObject() throws {
        try withStore { store, _ in
            try store.batchInsert(into: "Tag", keys: ["name"], rows: (0..<50).map { [.string("t\($0)")] })
            let context = ObjectContext(store: store)
            let author = try context.insert("Author")
            try author.setValue("A", forKey: "name")
            try context.save()
            let history = try store.history(since: 0)
            #expect(history.count == 2)
            let tagKeys = try #require(store.schema.entity("Tag")).attributes.map(\.name)
            let authorKeys = try #require(store.schema.entity("Author")).attributes.map(\.name)
            #expect(history[0].changes.allSatisfy { $0.kind == .insert && $0.changedKeys == tagKeys })
            #expect(history[1].changes.map(\.changedKeys) == [authorKeys])
            // The stored entry holds no key names for its inserts.
            let bytes = HistoryCodec.encode(history[0], transaction: 1)
            #expect(bytes.count < 50 * 12, "\(bytes.count) bytes for 50 inserts")
        }
        // An entry written before (an insert listing its keys) keeps its list.
        var old: [UInt8] = [1, 7]
        old += [UInt8](repeating: 0, count: 8)  // date
        old += [0]  // process
        old += [UInt8](repeating: 0, count: 16)  // context
        old += [0, 1]  // author "", one change
        old += [3] + Array("Tag".utf8) + [5, 0, 0]  // Tag/p5, insert, not user-driven
        old += [2, 1] + Array("a".utf8) + [1] + Array("b".utf8)  // two keys
        old += [0, 0, 0]  // no old or new values, no relationships
        let (record, number) = try old.withUnsafeBytes { try HistoryCodec.decode($0) }
        #expect(number == 7)
        #expect(record.changes.map(\.changedKeys) == [["a", "b"]])
    }

    @Test func aBulkInsertEntryIsByteForByteTheEntryOfItsInserts() throws {
        let keys: [UInt64] = [1, 2, 127, 128, 300, 1 << 40]
        let record = ChangeRecord(
            kind: .didSave,
            changes: keys.map {
                ObjectChange(objectID: ObjectID(entityName: "Tåg", primaryKey: $0), kind: .insert, changedKeys: ["x"])
            },
            author: "import", date: Date(timeIntervalSinceReferenceDate: 12.5), processID: 4242,
            contextID: UUID())
        let bulk = HistoryCodec.encodeInserts(record, entity: "Tåg", keys: keys, transaction: 99)
        #expect(bulk == HistoryCodec.encode(record, transaction: 99))
        let (decoded, number) = try bulk.withUnsafeBytes { try HistoryCodec.decode($0) }
        #expect(number == 99 && decoded.insertedIDs.map(\.primaryKey) == keys && decoded.author == "import")
    }

    /// A save's entry mixes runs of inserts of several entities (each insert written short, the entity's name
    /// encoded once per run) with updates, deletes and inserts that carry relationships: it reads back as written.
    @Test func anEntryOfMixedChangesReadsBackAsWritten() throws {
        let tag = { ObjectID(entityName: "Tag", primaryKey: $0) }
        let book = { ObjectID(entityName: "Böök", primaryKey: $0) }
        let changes = [
            ObjectChange(objectID: tag(1), kind: .insert, changedKeys: []),
            ObjectChange(objectID: tag(2), kind: .insert, changedKeys: [], isUserDriven: true),
            ObjectChange(objectID: book(300), kind: .insert, changedKeys: []),
            ObjectChange(
                objectID: book(301), kind: .update, changedKeys: ["title"], oldValues: ["title": "a"],
                newValues: ["title": "b"], oldRelationships: ["tags": [tag(1)]]),
            ObjectChange(objectID: tag(3), kind: .insert, changedKeys: [], oldRelationships: ["books": [book(300)]]),
            ObjectChange(objectID: tag(1 << 40), kind: .insert, changedKeys: []),
            ObjectChange(objectID: book(7), kind: .delete, changedKeys: ["title"], oldValues: ["title": "gone"]),
        ]
        let record = ChangeRecord(kind: .didSave, changes: changes, author: "mixed", contextID: UUID())
        let (decoded, number) = try HistoryCodec.encode(record, transaction: 5).withUnsafeBytes {
            try HistoryCodec.decode($0)
        }
        #expect(number == 5)
        #expect(decoded.changes.map(\.objectID) == changes.map(\.objectID))
        #expect(decoded.changes.map(\.kind) == changes.map(\.kind))
        #expect(decoded.changes.map(\.isUserDriven) == changes.map(\.isUserDriven))
        #expect(decoded.changes.map(\.oldRelationships) == changes.map(\.oldRelationships))
        #expect(decoded.changes[3].oldValues == ["title": "a"] && decoded.changes[3].newValues == ["title": "b"])
        #expect(decoded.changes[6].oldValues == ["title": "gone"])
    }

    @Test func invalidUTF8InAStringIsRefused() throws {
        let note = try #require(try Fixtures.librarySchema().entity("Note"))
        // version 1, row version 1, 1 attribute, empty bitmap, string tag, length 2, bytes C3 28 (invalid)
        let bytes: [UInt8] = [1, 1, 1, 0, 4, 2, 0xC3, 0x28]
        let error = entityStoreError { _ = try bytes.withUnsafeBytes { try RecordCodec.decode($0, entity: note) } }
        #expect(error?.message.contains("not valid UTF-8") == true)
    }

    @Test func indexKeysSortLikeTheirValues() {
        func sorted(_ values: [Value]) -> [Value] {
            values.sorted {
                IndexKey.encode($0, caseInsensitive: false).lexicographicallyPrecedes(
                    IndexKey.encode($1, caseInsensitive: false))
            }
        }
        let ints: [Value] = [.int(5), .int(-3), .int(Int64.min), .int(0), .int(Int64.max), .int(-1), .null]
        #expect(sorted(ints) == [.null, .int(Int64.min), .int(-3), .int(-1), .int(0), .int(5), .int(Int64.max)])
        let doubles: [Value] = [
            .double(1), .double(-.infinity), .double(-2.5), .double(0), .double(.infinity), .double(1e-300),
            .double(-1e-300),
        ]
        #expect(
            sorted(doubles) == [
                .double(-.infinity), .double(-2.5), .double(-1e-300), .double(0), .double(1e-300), .double(1),
                .double(.infinity),
            ])
        #expect(
            IndexKey.encode(.double(-0.0), caseInsensitive: false)
                == IndexKey.encode(.double(0.0), caseInsensitive: false))
        let strings: [Value] = [.string("b"), .string("ab"), .string("a"), .string("")]
        #expect(sorted(strings) == [.string(""), .string("a"), .string("ab"), .string("b")])
    }

    @Test func caseInsensitiveKeysFoldCaseAndDiacriticsOfNonASCIIText() {
        let folded = IndexKey.encode(.string("ÄPFEL Crème"), caseInsensitive: true)
        #expect(folded == IndexKey.encode(.string("apfel creme"), caseInsensitive: true))
        #expect(folded != IndexKey.encode(.string("ÄPFEL Crème"), caseInsensitive: false))
        #expect(
            IndexKey.encode(.string("Straße"), caseInsensitive: true)
                == IndexKey.encode(.string("STRASSE"), caseInsensitive: true))
    }

    @Test func keysLongerThanLMDBsLimitAreCutAndFlagged() {
        var buffer: [UInt8] = []
        let cut = IndexKey.encode(.string(String(repeating: "x", count: 2000)), caseInsensitive: false, into: &buffer)
        #expect(cut)
        #expect(buffer.count == 511)
        let whole = IndexKey.encode(.string(String(repeating: "x", count: 510)), caseInsensitive: false, into: &buffer)
        #expect(!whole)
        #expect(buffer.count == 511)
    }
}
