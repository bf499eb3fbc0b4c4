import EntityStore
import Foundation
import TestSupport
import Testing

/// `store-inspect import` into a store it makes from a schema file, from rows without IDs whose relationships name
/// their targets by a unique attribute (`--ref`); what cannot be resolved writes nothing.
@Suite struct StoreInspectCreatingImportTests {
    func write(_ text: String, _ path: String) throws {
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    @Test func importCreatesAStoreAndLoadsRowsWithoutIDs() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-import")
        defer { directory.remove() }
        let model = directory.path("model.store")
        try StoreInspectImportTests.emptyStore(model)
        let definition = try inspect(["schema", model, "--definition"])
        #expect(definition.status == 0, "\(definition.stderr)")
        try write(definition.stdout, directory.path("library.json"))
        let path = directory.path("new.store")
        let missing = try inspect(["import", path, "/dev/null"])
        #expect(missing.status == 66 && missing.stderr.contains("give --schema FILE"), "\(missing.stderr)")
        // Tag.csv: its entity is the file's name.
        try write("name\nsf\nclassic\n", directory.path("Tag.csv"))
        let tags = try inspect(["import", path, directory.path("Tag.csv"), "--schema", directory.path("library.json")])
        #expect(tags.status == 0 && tags.stdout.contains("\"objects\":2"), "\(tags.stderr)")
        try write(
            "name,email\nUrsula Le Guin,ursula@example.org\nFrank Herbert,frank@example.org\n", directory.path("a.csv"))
        #expect(try inspect(["import", path, directory.path("a.csv"), "--entity", "Author"]).status == 0)
        // Books naming their author by e-mail (unique, case-insensitive: as uniqueness compares), in the store.
        try write(
            "title,pages,author\nDune,412,FRANK@example.org\nNo author,10,\nLathe,184,ursula@example.org\n",
            directory.path("b.csv"))
        let books = try inspect([
            "import", path, directory.path("b.csv"), "--entity", "Book", "--ref", "author=Author.email",
        ])
        #expect(books.status == 0, "\(books.stderr)")
        // NDJSON: rows naming their entity, a to-many named by a list of unique names, an author of the file.
        try write(
            "{\"entity\": \"Author\", \"name\": \"Tove Jansson\", \"email\": \"tove@example.fi\"}\n"
                + "{\"entity\": \"Book\", \"title\": \"Moomin\", \"author\": \"tove@example.fi\", \"tags\": [\"classic\", \"sf\"]}\n",
            directory.path("more.ndjson"))
        let more = try inspect([
            "import", path, directory.path("more.ndjson"), "--ref", "author=Author.email,tags=Tag.name",
        ])
        #expect(more.status == 0, "\(more.stderr)")
        let listed = try inspect([
            "ls", path, "Book", "--sort", "title", "--fields", "title,author.name,tags", "--format", "csv",
        ])
        let rows = listed.stdout.split(separator: "\n").map {
            $0.split(separator: ",", omittingEmptySubsequences: false).dropFirst().joined(separator: ",")
        }
        #expect(
            rows == [
                "title,author.name,tags", "Dune,Frank Herbert,", "Lathe,Ursula Le Guin,",
                "Moomin,Tove Jansson,Tag/p1 Tag/p2", "No author,,",
            ],
            "\(listed.stdout)")
        #expect(try inspect(["check", path]).status == 0)

        // What cannot be resolved, or is not unique, writes nothing.
        let before = try inspect(["export", path, "--all", "--format", "json"]).stdout
        try write("title,author\nX,nobody@example.org\n", directory.path("bad.csv"))
        let cases: [([String], Int32, String)] = [
            (["--entity", "Book", "--ref", "author=Author.email"], 65, "the new Book.author: no Author with email"),
            (["--entity", "Book", "--ref", "author=Author.name"], 64, "Author.name is not unique"),
            (["--entity", "Book", "--ref", "author=Author"], 64, "is not KEY=ENTITY.ATTRIBUTE"),
            (["--ref", "author=Author.email"], 65, "the store has no entity bad"),
            (["--schema", directory.path("library.json")], 64, "exists: --schema creates a store that does not"),
        ]
        for (arguments, status, message) in cases {
            let refused = try inspect(["import", path, directory.path("bad.csv")] + arguments)
            #expect(refused.status == status && refused.stderr.contains(message), "\(arguments): \(refused.stderr)")
        }
        #expect(
            StoreInspectImportTests.withoutTransaction(
                try inspect(["export", path, "--all", "--format", "json"]).stdout)
                == StoreInspectImportTests.withoutTransaction(before))
        // A schema file that is not one creates nothing.
        let other = directory.path("other.store")
        let badSchema = try inspect(["import", other, directory.path("Tag.csv"), "--schema", directory.path("Tag.csv")])
        #expect(badSchema.status == 65 && !FileManager.default.fileExists(atPath: other), "\(badSchema.stderr)")
    }
}
