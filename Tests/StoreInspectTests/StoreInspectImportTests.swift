import EntityStore
import Foundation
import TestSupport
import Testing

/// `store-inspect import` loads what `export` wrote, exactly, or nothing.
@Suite struct StoreInspectImportTests {
    /// A library store holding every attribute type with values that are hard to carry through text.
    static func hostileStore(_ path: String) throws {
        let store = try PersistentStore.open(path: path, schema: try Fixtures.librarySchema())
        let context = ObjectContext(store: store)
        var authors: [ManagedObject] = []
        let dates: [Value] = [
            .date(Date(timeIntervalSince1970: 1_764_519_361.123456)), .date(Date(timeIntervalSince1970: -12.25)),
            .date(Date(timeIntervalSinceReferenceDate: 0.1)), .date(Date(timeIntervalSinceReferenceDate: 1e10 + 0.5)),
            .null,
        ]
        for (i, born) in dates.enumerated() {
            let author = try context.insert("Author")
            try author.setValue(
                .string(["Ursula", "", "名前 😀", "a\\b \"q\", x", "line\nbreak\r\n\t\u{1}"][i]), forKey: "name")
            try author.setValue(i == 1 ? .string("") : i == 2 ? .string("x@example.org") : .null, forKey: "email")
            try author.setValue(born, forKey: "born")
            try author.setValue(.int([Int64.max, Int64.min, 0, -1, 42][i]), forKey: "rating")
            authors.append(author)
        }
        // Dates with no calendar date (written as seconds): not a number, the infinities, beyond Decimal's range.
        for seconds in [Double.nan, .infinity, -.infinity, 1e300, -1e300] {
            let author = try context.insert("Author")
            try author.setValue(.string("timeless"), forKey: "name")
            try author.setValue(.date(Date(timeIntervalSinceReferenceDate: seconds)), forKey: "born")
        }
        // NaNs with a payload, quiet and signaling, of either sign (written as Swift prints them).
        for bits: UInt64 in [0x7FF8_0000_0000_0001, 0x7FF0_0000_0000_0002, 0xFFF8_0000_0000_0003] {
            let book = try context.insert("Book")
            try book.setValue(.string("nan \(bits)"), forKey: "title")
            try book.setValue(.double(Double(bitPattern: bits)), forKey: "score")
        }
        let tags = try ["sf", "classic"].map { name in
            let tag = try context.insert("Tag")
            try tag.setValue(.string(name), forKey: "name")
            return tag
        }
        let scores: [Double] = [.infinity, -.infinity, -0.0, .leastNonzeroMagnitude, 0.1, .greatestFiniteMagnitude]
        let prices = ["12345678901234567890.123456789012345678", "-0.000001", "0", "1e20", "3.5", "-7"]
        for i in 0..<6 {
            let book = try context.insert("Book")
            try book.setValue(.string("Book \(i), \"quoted\""), forKey: "title")
            try book.setValue(i == 5 ? .null : .int(Int64(i * 100)), forKey: "pages")
            try book.setValue(.decimal(Decimal(string: prices[i])!), forKey: "price")
            try book.setValue(i % 2 == 0 ? .uuid(UUID()) : .null, forKey: "isbn")
            try book.setValue(
                i == 0 ? .data([]) : i == 1 ? .null : .data((0..<UInt8(i * 20)).map { $0 &* 37 }), forKey: "cover")
            try book.setValue(.double(scores[i]), forKey: "score")
            try book.setValue(.bool(i % 3 == 0), forKey: "inPrint")
            try book.setObject(i == 4 ? nil : authors[i % authors.count], forKey: "author")
            for tag in tags.prefix(i % 3) { try book.add(tag, toKey: "tags") }
            let chapter = try context.insert("Chapter")
            try chapter.setValue(.string("Chapter of \(i)"), forKey: "title")
            try chapter.setObject(book, forKey: "book")
        }
        try context.save()
    }

    /// Makes an empty store with the library schema.
    static func emptyStore(_ path: String) throws {
        _ = try PersistentStore.open(path: path, schema: try Fixtures.librarySchema())
    }

    /// An export without its snapshot number (the copy has its own history).
    static func withoutTransaction(_ text: String) -> String {
        text.replacingOccurrences(of: #"^\{"transaction": \d+, "#, with: "{", options: .regularExpression)
    }

    @Test func exportThenImportGivesTheSameExportInEveryFormat() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-import")
        defer { directory.remove() }
        let original = directory.path("original.store")
        try Self.hostileStore(original)
        let json = try inspect(["export", original, "--all", "--format", "json"])
        #expect(json.status == 0, "\(json.stderr)")
        let ndjson = try inspect(["export", original, "--all", "--format", "ndjson"])
        let csvDirectory = directory.path("csv")
        #expect(try inspect(["export", original, "--all", "--format", "csv", "--dir", csvDirectory]).status == 0)
        // Each relationship once: a to-many whose inverse is a to-one is in the other file, a many-to-many on one side.
        func header(_ entity: String) throws -> String {
            String(try String(contentsOfFile: "\(csvDirectory)/\(entity).csv", encoding: .utf8).prefix { $0 != "\n" })
        }
        #expect(try header("Author") == "id,name,email,born,rating")
        #expect(try header("Book") == "id,title,pages,price,isbn,cover,score,inPrint,author,tags,publisher")
        #expect(try header("Tag") == "id,name" && header("Chapter") == "id,title,number,book")
        try "\(json.stdout)".write(toFile: directory.path("all.json"), atomically: true, encoding: .utf8)
        try "\(ndjson.stdout)".write(toFile: directory.path("all.ndjson"), atomically: true, encoding: .utf8)

        for (name, file) in [("json", "all.json"), ("ndjson", "all.ndjson"), ("csv", "csv")] {
            let copy = directory.path("copy-\(name).store")
            try Self.emptyStore(copy)
            let imported = try inspect(["import", copy, file.hasSuffix("csv") ? csvDirectory : directory.path(file)])
            #expect(imported.status == 0, "\(name): \(imported.stderr)")
            #expect(
                imported.stdout.contains("{\"entity\":\"Book\",\"objects\":9,\"new keys\":0}"), "\(imported.stdout)")
            let again = try inspect(["export", copy, "--all", "--format", "json"])
            #expect(Self.withoutTransaction(again.stdout) == Self.withoutTransaction(json.stdout), "\(name)")
            #expect(try inspect(["check", copy]).status == 0)
        }
    }

    /// A store of one entity exports to a directory of CSV files too (`--dir` was refused for one entity).
    @Test func aStoreOfOneEntityExportsToACSVDirectoryAndBack() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-import")
        defer { directory.remove() }
        let schema = try Schema(version: 1) { Entity("Note") { Attribute("text", .string) } }
        let original = directory.path("one.store")
        do {
            let context = ObjectContext(store: try PersistentStore.open(path: original, schema: schema))
            for text in ["a", "b, \"c\""] { try context.insert("Note").setValue(.string(text), forKey: "text") }
            try context.save()
        }
        let csv = directory.path("csv")
        let exported = try inspect(["export", original, "--all", "--format", "csv", "--dir", csv])
        #expect(exported.status == 0, "\(exported.stderr)")
        let copy = directory.path("copy.store")
        _ = try PersistentStore.open(path: copy, schema: schema)
        let imported = try inspect(["import", copy, csv])
        #expect(imported.status == 0, "\(imported.stderr)")
        let before = try inspect(["export", original, "--all", "--format", "json"]).stdout
        #expect(
            Self.withoutTransaction(try inspect(["export", copy, "--all", "--format", "json"]).stdout)
                == Self.withoutTransaction(before))
    }

    @Test func importingOneEntityFollowsReferencesIntoTheStoreAndRenumbers() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let books = try inspect(["export", store.path, "Book", "--format", "ndjson"])
        let file = store.directory.path("books.ndjson")
        try books.stdout.write(toFile: file, atomically: true, encoding: .utf8)
        let imported = try inspect(["import", store.path, file, "--format", "csv"])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.stdout == "entity,objects,new keys\nBook,5,5\n")
        // The copies point at the same authors and tags as the originals.
        let count = try inspect([
            "count", store.path, "Book", "--where", "author.name == 'Michael Ende'", "--format", "csv",
        ])
        #expect(count.stdout == "entity,count\nBook,4\n")
        let tagged = try inspect([
            "count", store.path, "Book", "--where", "ANY tags.name == 'classic'", "--format", "csv",
        ])
        #expect(tagged.stdout == "entity,count\nBook,6\n")
    }

    @Test func csvFromASpreadsheetWithAByteOrderMarkAndCRLFLoads() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let file = store.directory.path("tags.csv")
        try Data([0xEF, 0xBB, 0xBF] + Array("id,name\r\nTag/p7,\"new, \"\"quoted\"\"\"\r\nTag/p8,\"\"\r\n".utf8)).write(
            to: URL(fileURLWithPath: file))
        let imported = try inspect(["import", store.path, file, "--format", "csv"])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.stdout == "entity,objects,new keys\nTag,2,2\n")
        let names = try inspect(["ls", store.path, "Tag", "--where", "name != 'classic'", "--format", "csv"])
        #expect(names.stdout.contains(",\"new, \"\"quoted\"\"\",\n"), "\(names.stdout)")
        #expect(names.stdout.contains(",\"\",\n"), "\(names.stdout)")  // the empty name stays an empty string
    }

    @Test func badInputImportsNothingAndSaysWhere() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let before = store.dataDigest()
        let cases: [(String, String)] = [
            ("{\"id\":\"Book/p9\",\"title\":5}\n", "line 1: Book/p9.title: 5 is not a string"),
            (
                "{\"id\":\"Book/p9\",\"title\":\"ok\"}\n{\"id\":\"Book/p10\",\"title\":\"x\",\"colour\":\"red\"}\n",
                "line 2: Book/p10.colour: Book has no field 'colour'"
            ),
            (
                "{\"id\":\"Book/p9\",\"title\":\"ok\",\"author\":\"Author/p77\"}\n",
                "Author/p77 is neither in the file nor in the store"
            ),
            ("{\"id\":\"Dragon/p1\"}\n", "the store has no entity Dragon"),
            ("{\"id\":\"Book/p9\",\"title\":\"a\",\"pages\":1.5}\n", "1.5 is not an int64"),
            // Past Int64.min by one: the parser's nearest integer is Int64.min, which is not what the file says.
            (
                "{\"id\":\"Book/p9\",\"title\":\"a\",\"pages\":-9223372036854775809}\n",
                "-9223372036854775809 is not an int64"
            ),
            ("{\"id\":\"Book/p9\",\"title\":\"a\",\"price\":\"12abc\"}\n", "'12abc' is not a decimal"),
            ("{\"id\":\"Book/p9\",\"title\":\"a\"\n", "line 1 is not a JSON object"),
            ("id,title\nBook/p9,\"unclosed\n", "a quote is not closed"),
            ("id,title,pages\nBook/p9,a\n", "has 2 fields; the header has 3"),
        ]
        for (input, expected) in cases {
            let file = store.directory.path("bad.input")
            try input.write(toFile: file, atomically: true, encoding: .utf8)
            let output = try inspect(["import", store.path, file])
            #expect(output.status == 65, "\(input): \(output.stderr)")
            #expect(
                output.stderr.contains("nothing was imported") || output.stderr.contains("is not"), "\(output.stderr)")
            #expect(output.stderr.contains(expected), "\(input): \(output.stderr)")
            #expect(output.stdout.isEmpty)
        }
        #expect(store.dataDigest() == before)
        #expect(try inspect(["import", store.path, store.directory.path("missing.json")]).status == 66)
        // A unique value already stored is found by the save: no object is written (the keys the inserts reserved
        // are the only trace).
        let file = store.directory.path("unique.ndjson")
        try "{\"id\":\"Tag/p5\",\"name\":\"fresh\"}\n{\"id\":\"Tag/p6\",\"name\":\"classic\"}\n".write(
            toFile: file, atomically: true, encoding: .utf8)
        let unique = try inspect(["import", store.path, file])
        #expect(unique.status == 65 && unique.stderr.contains("\"classic\" must be unique"), "\(unique.stderr)")
        #expect(try inspect(["count", store.path, "Tag", "--format", "csv"]).stdout == "entity,count\nTag,1\n")
    }
}
