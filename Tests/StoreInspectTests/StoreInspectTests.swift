import EntityStore
import Foundation
import LMDB
import StoreInspectCore
import TestSupport
import Testing

@Suite struct StoreInspectTests {
    @Test func everySubcommandWorksInEveryFormat() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let before = store.dataDigest()
        let commands: [[String]] = [
            ["info", store.path], ["entities", store.path], ["schema", store.path],
            ["schema", store.path, "--history"],
            ["schema", store.path, "--version", "1"], ["stats", store.path], ["ls", store.path, "Book"],
            ["count", store.path, "Book"], ["get", store.path, "Book/p1"], ["check", store.path],
            ["history", store.path, "--since", "0"], ["export", store.path, "Author"], ["export", store.path, "--all"],
        ]
        for command in commands {
            for format in ["table", "json", "ndjson", "csv"] {
                if command.contains("--all") && format == "csv" {
                    // CSV holds one table: --all needs --dir (StoreInspectCSVTests).
                    let refused = try inspect(command + ["--format", format])
                    #expect(refused.status == 64 && refused.stderr.contains("give --dir D"), "\(refused.stderr)")
                    continue
                }
                let output = try inspect(command + ["--format", format])
                #expect(output.status == 0, "\(command) \(format): \(output.stderr)")
                // A healthy store's check has no findings: no NDJSON lines at all.
                #expect(!output.stdout.isEmpty || (command[0] == "check" && format == "ndjson"), "\(command) \(format)")
                #expect(output.stderr.isEmpty, "\(command) \(format): \(output.stderr)")
                if format == "json" {
                    #expect((try? JSONSerialization.jsonObject(with: Data(output.stdout.utf8))) != nil, "\(command)")
                }
                if format == "ndjson" {
                    for line in output.stdout.split(separator: "\n") {
                        #expect(
                            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) != nil, "\(command): \(line)")
                    }
                }
            }
        }
        #expect(store.dataDigest() == before)
    }

    @Test func theSchemaHistoryShowsTheMigrationStageThatReachedEachVersion() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("m.store")
        let v1 = try Schema(version: 1) { Entity("Note") { Attribute("text", .string) } }
        let v2 = try Schema(version: 2) { Entity("Note") { Attribute("words", .int64, default: 0) } }
        do {
            let context = ObjectContext(store: try PersistentStore.open(path: path, schema: v1))
            try context.insert("Note").setValue("two words", forKey: "text")
            try context.save()
        }
        let plan = MigrationPlan(
            schemas: [v1, v2],
            stages: [
                .custom(
                    from: 1, to: 2, removing: [.attribute("text", of: "Note")],
                    transforms: [
                        MigrationTransform("Note") { old, new in
                            guard case .string(let text) = old["text"] else { return }
                            try new.setValue(.int(text.split(separator: " ").count), forKey: "words")
                        }
                    ])
            ])
        _ = try PersistentStore.open(path: path, plan: plan)
        let output = try inspect(["schema", path, "--history", "--format", "csv"])
        #expect(output.status == 0, "\(output.stderr)")
        let lines = output.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "version,entities,fingerprint,migrated,stage,seconds,objects rewritten")
        #expect(lines.count == 3 && lines[1].hasPrefix("1,1,") && lines[1].hasSuffix(",,,,"), "\(lines)")
        #expect(lines.count == 3 && lines[2].contains(",custom from 1,") && lines[2].hasSuffix(",1"), "\(lines)")
    }

    @Test func fieldsTakeKeyPathsThroughToOnes() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let csv = try inspect([
            "ls", store.path, "Book", "--sort", "title", "--fields", "title,author.name,author.email,publisher.name",
            "--format", "csv",
        ])
        #expect(csv.status == 0, "\(csv.stderr)")
        #expect(
            csv.stdout == "id,title,author.name,author.email,publisher.name\n"
                + "Book/p5,Die unendliche Geschichte,Michael Ende,,\nBook/p3,L'Étranger,Albert Camus,albert@example.fr,\n"
                + "Book/p4,La Peste,Albert Camus,albert@example.fr,\nBook/p2,Momo,Michael Ende,,\n"
                + "Book/p1,The Dispossessed,Ursula Le Guin,ursula@example.org,\n", "\(csv.stdout)")
        let json = try inspect([
            "get", store.path, "Book/p2", "--fields", "author.name,author,publisher.name", "--format", "json",
        ])
        #expect(
            json.stdout.contains(
                "\"author.name\": \"Michael Ende\", \"author\": \"Author/p2\", \"publisher.name\": null"),
            "\(json.stdout)")
        let table = try inspect([
            "ls", store.path, "Book", "--fields", "author.name", "--limit", "1", "--format", "table",
        ])
        #expect(table.stdout.contains("author.name") && table.stdout.contains("Ursula Le Guin"), "\(table.stdout)")
        for (field, problem) in [
            ("tags.name", "'tags' is a to-many relationship of Book"), ("author.nope", "Author has no attribute"),
            ("author.", "Book has no field 'author.'"), ("author.books.title", "'books' is a to-many"),
            ("nope.name", "Book has no relationship 'nope'"),
        ] {
            let refused = try inspect(["ls", store.path, "Book", "--fields", "title,\(field)"])
            #expect(refused.status == 64 && refused.stderr.contains(problem), "\(field): \(refused.stderr)")
        }
    }

    @Test func listingFiltersSortsWindowsAndExplains() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let output = try inspect([
            "ls", store.path, "Book", "--where", "pages >= 150 AND author.name BEGINSWITH 'Albert'", "--sort", "-pages",
            "--limit", "5", "--fields", "title,pages,author", "--format", "csv",
        ])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(
            output.stdout == "id,title,pages,author\nBook/p4,La Peste,250,Author/p3\nBook/p3,L'Étranger,200,Author/p3\n"
        )
        let windowed = try inspect([
            "ls", store.path, "Book", "--sort", "pages", "--offset", "1", "--limit", "2", "--fields", "pages",
        ])
        // NDJSON when piped.
        #expect(windowed.stdout == "{\"id\":\"Book/p2\",\"pages\":150}\n{\"id\":\"Book/p3\",\"pages\":200}\n")
        let explained = try inspect(["ls", store.path, "Book", "--where", "pages == 200", "--explain"])
        #expect(
            explained.stdout
                == "index Book.pages: pages == 200 (the index holds exactly the matches); no sort needed\n")
        let count = try inspect([
            "count", store.path, "Book", "--where", "ANY tags.name == 'classic'", "--format", "csv",
        ])
        #expect(count.stdout == "entity,count\nBook,3\n")
        // --explain: the plan beside the count.
        let explainedCount = try inspect([
            "count", store.path, "Book", "--where", "pages == 200", "--explain", "--format", "csv",
        ])
        #expect(
            explainedCount.stdout
                == "entity,count,plan\nBook,1,index Book.pages: pages == 200 (the index holds exactly the matches); "
                + "no sort needed\n", "\(explainedCount.stdout)")
        let json = try inspect(["get", store.path, "Book/p2", "--format", "json", "--fields", "title,author"])
        #expect(json.stdout.contains("\"title\": \"Momo\", \"author\": \"Author/p2\""))
        #expect(json.stdout.hasPrefix("{\"transaction\": "))
    }

    @Test func checkReportsAStaleIndexEntryAndADanglingReference() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        #expect(try inspect(["check", store.path]).status == 0)
        do {
            // Corrupt the store on purpose through the raw LMDB layer.
            let env = try Environment.open(path: store.path)
            let index = try env.openDatabase("index.Book.pages", dupSort: true, create: false)
            let relationship = try env.openDatabase("rel.Book.author", dupSort: true, create: false)
            func key(_ n: UInt64) -> [UInt8] { withUnsafeBytes(of: n.bigEndian) { Array($0) } }
            try env.write { txn in
                try txn.put(
                    [1] + withUnsafeBytes(of: (UInt64(bitPattern: 7777) ^ (1 << 63)).bigEndian) { Array($0) }, key(1),
                    in: index)
                try txn.put(key(2), key(999), in: relationship)
            }
        }
        let output = try inspect(["check", store.path, "--format", "csv"])
        #expect(output.status == 1)
        #expect(
            output.stdout.contains("stale index entry,index.Book.pages,an entry for p1 that its record does not imply"))
        #expect(output.stdout.contains("dangling reference,Book.author,\"p2 -> Author/p999, which does not exist\""))
        #expect(output.stdout.contains("missing inverse,Book.author"))
        #expect(output.stdout.contains("to-one with several targets,Book.author,p2 holds 2 objects"))
    }

    @Test func backupWritesACompactedCopyThatOpens() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let destination = store.directory.path("copy.store")
        let output = try inspect(["backup", store.path, destination])
        #expect(output.status == 0, "\(output.stderr)")
        let copy = try inspect(["count", destination, "Book", "--format", "csv"])
        #expect(copy.stdout == "entity,count\nBook,5\n")
        #expect(try inspect(["check", destination]).status == 0)
    }

    @Test func watchFollowsAnotherProcessesCommits() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        // From the fixture's last transaction: the saves that follow are watched however soon they come.
        let last = try PersistentStore.openReadOnly(path: store.path).lastTransaction()
        let watcher = try RunningProcess(
            ChildProcess.executable("store-inspect"),
            ["watch", store.path, "Tag", "--max", "3", "--format", "csv", "--since", "\(last)"])
        let saver = try ChildProcess.helper(["tag-saver", store.path, "3"])
        #expect(saver.status == 0, "\(saver.stderr)")
        let output = watcher.finish()
        let lines = output.stdout.split(separator: "\n")
        #expect(output.status == 0, "\(output.stderr)")
        #expect(lines.count == 4)
        #expect(lines.first == "transaction,date,author,process,kind,object,keys,user-driven,changes")
        #expect(lines.dropFirst().allSatisfy { $0.contains(",insert,Tag/p") })
        #expect(lines.dropFirst().map { $0.split(separator: ",")[0] } == ["2", "3", "4"])
    }

    @Test func watchNamesEntriesPrunedBeforeItReadThemAndGoesOn() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        // Transactions 2 and 3 are saved and pruned (with the fixture's 1); 4 and 5 are kept.
        let pruning = try ChildProcess.helper(["tag-saver", store.path, "2", "prune"])
        #expect(pruning.status == 0, "\(pruning.stderr)")
        let saver = try ChildProcess.helper(["tag-saver", store.path, "2"])
        #expect(saver.status == 0, "\(saver.stderr)")
        let output = try inspect(["watch", store.path, "--since", "0", "--max", "2", "--format", "csv"])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.hasPrefix("store-inspect watch: warning: history entries 1-3 were pruned"))
        #expect(output.stderr.hasSuffix("not merged or observed; the watch goes on with the entries after them\n"))
        #expect(output.stderr.split(separator: "\n").count == 1)
        let lines = output.stdout.split(separator: "\n")
        #expect(lines.dropFirst().map { $0.split(separator: ",")[0] } == ["4", "5"])
        #expect(lines.dropFirst().allSatisfy { $0.contains(",insert,Tag/p") })
    }

    @Test func helpExistsForEverySubcommand() throws {
        let general = try inspect(["--help"])
        #expect(general.status == 0)
        #expect(general.stdout.contains("OVERVIEW:") && general.stdout.contains("SUBCOMMANDS:"))
        let commands = [
            "info", "schema", "stats", "entities", "readers", "sync-status", "ls", "count", "get", "check", "history",
            "watch", "export", "import", "backup",
        ]
        // Each subcommand's name whole in the list, then a space: `sync-status` was cut to `sync-statu`.
        let listed = general.stdout.components(separatedBy: "SUBCOMMANDS:\n").last!.split(separator: "\n")
            .prefix { $0.hasPrefix("  ") }.map { $0.split(separator: " ").first.map(String.init) ?? "" }
        #expect(listed == commands)
        for command in commands {
            let help = try inspect([command, "-h"])
            #expect(help.status == 0)
            #expect(help.stdout.contains("USAGE: store-inspect \(command) STORE"), "\(command)")
            #expect(help.stdout.contains("OPTIONS:"))
            // `help COMMAND` is the same help.
            #expect(try inspect(["help", command]).stdout == help.stdout)
        }
        let unknown = try inspect(["help", "nope"])
        #expect(unknown.status == 64 && unknown.stderr.contains("unknown subcommand 'nope'"))
    }

    @Test func versionNamesTheToolTheLibraryAndLMDB() throws {
        for spelling in ["--version", "version"] {
            let output = try inspect([spelling])
            #expect(output.status == 0)
            #expect(
                output.stdout.hasPrefix(
                    "store-inspect \(entityStoreVersion) (EntityStore \(entityStoreVersion), LMDB 0.9"))
        }
        #expect(entityStoreVersion == "0.1.0")
        #expect(try inspect(["--version", "extra"]).status == 64)
    }

    @Test func debiansMdbStatReadsOurStores() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let output = try ChildProcess.run("/usr/bin/mdb_stat", ["-a", store.path])
        #expect(output.status == 0)
        #expect(output.stdout.contains("Status of records.Book"))
        #expect(output.stdout.contains("Status of index.Book.pages"))
    }

    @Test func colourOnlyOnATerminalAndNeverWithNoColor() {
        let outputs = OutputBox()
        _ = StoreInspect.run(
            ["--help"], stdoutIsTerminal: true, environment: ["NO_COLOR": "1"], out: { outputs.add($0) }, err: { _ in })
        #expect(!outputs.text.contains("\u{1B}["))
    }
}

final class OutputBox: @unchecked Sendable {
    // @unchecked Sendable: `parts` is only touched while `lock` is held.
    private let lock = NSLock()
    private var parts: [String] = []
    func add(_ text: String) { lock.withLock { parts.append(text) } }
    var text: String { lock.withLock { parts.joined() } }
}

@Suite struct StoreInspectInheritanceTests {
    @Test func schemaShowsHierarchiesAndLsListsEverySubEntity() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-zoo")
        defer { directory.remove() }
        let path = directory.path("zoo.store")
        do {
            let schema = try Schema(version: 1) {
                Entity("Animal", abstract: true) {
                    Attribute("name", .string)
                    Attribute("tag", .string, optional: true, validation: .length(1...8))
                }
                Entity("Dog", inherits: "Animal") { Attribute("breed", .string, optional: true) }
                Entity("Cat", inherits: "Animal") {
                    Attribute("label", .string, default: "", derived: "uppercase(name)")
                    Attribute("scratch", .string, optional: true, transient: true)
                }
            }
            let store = try PersistentStore.open(path: path, schema: schema)
            let context = ObjectContext(store: store)
            try context.insert("Dog").setValue("Rex", forKey: "name")
            try context.insert("Cat").setValue("Tom", forKey: "name")
            try context.save()
        }
        let schema = try inspect(["schema", path, "--format", "csv"])
        #expect(schema.status == 0, "\(schema.stderr)")
        let lines = schema.stdout.split(separator: "\n").map(String.init)
        #expect(lines.contains("Animal,entity,Animal,,,,,,,,abstract"))
        #expect(lines.contains("Dog,entity,Dog,,,,,,,,inherits Animal"))
        #expect(lines.contains { $0.hasPrefix("Dog,attribute,name,") && $0.hasSuffix(",inherited from Animal") })
        #expect(lines.contains { $0.hasPrefix("Animal,attribute,tag,") && $0.hasSuffix(",rules: length 1...8") })
        #expect(lines.contains { $0.hasPrefix("Cat,attribute,label,") && $0.hasSuffix(",derived: uppercase(name)") })
        #expect(lines.contains { $0.hasPrefix("Cat,attribute,scratch,") && $0.hasSuffix(",transient") })
        let entities = try inspect(["entities", path, "--format", "csv"])
        #expect(
            entities.stdout
                == "entity,objects,with sub-entities,superentity,abstract\nAnimal,0,2,,true\nDog,1,1,Animal,false\n"
                + "Cat,1,1,Animal,false\n", "\(entities.stdout) \(entities.stderr)")
        let listing = try inspect(["ls", path, "Animal", "--format", "csv"])
        #expect(listing.status == 0, "\(listing.stderr)")
        #expect(listing.stdout.contains("Rex") && listing.stdout.contains("Tom"))
        #expect(try inspect(["count", path, "Animal"]).stdout.contains("2"))
        #expect(try inspect(["check", path]).status == 0)
    }
}

@Suite struct StoreInspectOutputFailureTests {
    /// Runs store-inspect through the shell with `redirection` applied to its stdout.
    func inspectRedirected(
        _ arguments: [String], _ redirection: String, umask: String = "077"
    ) throws -> ChildProcess.Output {
        try ChildProcess.run(
            "/bin/sh",
            ["-c", "umask \(umask); exec \"$0\" \"$@\" \(redirection)", ChildProcess.executable("store-inspect")]
                + arguments)
    }

    @Test func outputThatCannotBeWrittenIsExit74NotATrap() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        for redirection in ["> /dev/full", ">&-"] {
            let output = try inspectRedirected(["ls", store.path, "Book", "--format", "csv"], redirection)
            #expect(output.terminationReason == .exit, "\(redirection): \(output.stderr)")
            #expect(output.status == 74, "\(redirection): \(output.stderr)")
            let lines = output.stderr.split(separator: "\n")
            #expect(lines.count == 1 && lines[0].hasPrefix("store-inspect: cannot write the output: "), "\(lines)")
        }
    }

    @Test func aBackupIsPrivateWhateverTheUmask() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        for (umask, name) in [("000", "open.backup"), ("022", "usual.backup")] {
            let destination = store.directory.path(name)
            let output = try inspectRedirected(["backup", store.path, destination], "> /dev/null", umask: umask)
            #expect(output.status == 0, "\(output.stderr)")
            var info = stat()
            #expect(stat(destination + "/data.mdb", &info) == 0)
            #expect(info.st_mode & 0o777 == 0o600, "umask \(umask): \(String(info.st_mode & 0o777, radix: 8))")
        }
        // Into an existing directory too.
        let existing = store.directory.path("existing")
        #expect(mkdir(existing, 0o755) == 0)
        #expect(try inspectRedirected(["backup", store.path, existing], "> /dev/null", umask: "000").status == 0)
        var info = stat()
        #expect(stat(existing + "/data.mdb", &info) == 0 && info.st_mode & 0o777 == 0o600)
    }
}

@Suite struct StoreInspectCSVTests {
    /// A store whose one entity holds the texts CSV gets wrong: separators, quotes, CR LF inside a value, an empty
    /// string and nil.
    func hostileStore(_ directory: TemporaryDirectory) throws -> String {
        let path = directory.path("csv.store")
        let store = try PersistentStore.open(
            path: path,
            schema: try Schema(version: 1) {
                Entity("Line") {
                    Attribute("n", .int64)
                    Attribute("label", .string, optional: true)
                }
            })
        let context = ObjectContext(store: store)
        for (n, label) in [(1, "a,b"), (2, "say \"hi\""), (3, "line1\r\nline2"), (4, ""), (5, nil), (6, "plain")] {
            let object = try context.insert("Line")
            try object.setValue(.int(Int64(n)), forKey: "n")
            try object.setValue(label.map(Value.string) ?? .null, forKey: "label")
        }
        try context.save()
        return path
    }

    @Test func csvLoadsExactlyInPythonAndSQLite() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-csv")
        defer { directory.remove() }
        let path = try hostileStore(directory)
        let export = try inspect(["export", path, "Line", "--format", "csv"])
        #expect(export.status == 0, "\(export.stderr)")
        // Nil is an empty field, the empty string a quoted one.
        #expect(export.stdout.contains("Line/p4,4,\"\"\n") && export.stdout.contains("Line/p5,5,\n"))
        let file = directory.path("lines.csv")
        try Data(export.stdout.utf8).write(to: URL(fileURLWithPath: file))

        let python = try ChildProcess.run(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import csv, json, sys; print(json.dumps(list(csv.reader(open(sys.argv[1], newline='')))))", file,
            ])
        #expect(python.status == 0, "\(python.stderr)")
        let rows = try JSONDecoder().decode([[String]].self, from: Data(python.stdout.utf8))
        #expect(rows.count == 7)
        #expect(rows.dropFirst().map { $0[2] } == ["a,b", "say \"hi\"", "line1\r\nline2", "", "", "plain"])

        let sqlite = try ChildProcess.run(
            "/usr/bin/env",
            [
                "sqlite3", ":memory:", ".import --csv \(file) t",
                "SELECT count(*), sum(label = 'line1' || char(13, 10) || 'line2'), sum(label = 'say \"hi\"') FROM t",
            ])
        #expect(sqlite.status == 0, "\(sqlite.stderr)")
        #expect(sqlite.stdout == "6|1|1\n")
    }

    @Test func exportAllAsCSVWritesOneFilePerEntity() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let target = store.directory.path("csv")
        let output = try inspect(["export", store.path, "--all", "--format", "csv", "--dir", target])
        #expect(output.status == 0, "\(output.stderr)")
        let files = try FileManager.default.contentsOfDirectory(atPath: target).sorted()
        #expect(files == ["Author.csv", "Book.csv", "Chapter.csv", "Note.csv", "Publisher.csv", "Tag.csv"])
        let books = try String(contentsOfFile: target + "/Book.csv", encoding: .utf8)
        #expect(books.hasPrefix("id,title,"))
        #expect(books.components(separatedBy: "\n").filter { !$0.isEmpty }.count == 6)
        // Again into the same directory: refused, nothing overwritten.
        let again = try inspect(["export", store.path, "--all", "--format", "csv", "--dir", target])
        #expect(again.status == 64 && again.stderr.contains("exists; choose an empty directory"))
        #expect(try String(contentsOfFile: target + "/Book.csv", encoding: .utf8) == books)
        // --dir is for CSV of every entity only.
        #expect(try inspect(["export", store.path, "Book", "--format", "csv", "--dir", target]).status == 64)
    }
}

@Suite struct StoreInspectNumbersTests {
    @Test func limitZeroMeansNoLimitForEveryCommandAndGetTakesTheAPIsURI() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let all = try inspect(["ls", store.path, "Book", "--format", "csv"])
        #expect(try inspect(["ls", store.path, "Book", "--format", "csv", "--limit", "0"]).stdout == all.stdout)
        let history = try inspect(["history", store.path, "--format", "csv"])
        #expect(try inspect(["history", store.path, "--format", "csv", "--limit", "0"]).stdout == history.stdout)
        #expect(history.stdout.split(separator: "\n").count > 3)
        let read = try PersistentStore.openReadOnly(path: store.path)
        let uri = read.uri(for: ObjectID(entityName: "Book", primaryKey: 1))
        let byURI = try inspect(["get", store.path, uri, "--format", "csv"])
        #expect(byURI.status == 0, "\(byURI.stderr)")
        #expect(byURI.stdout == (try inspect(["get", store.path, "Book/p1", "--format", "csv"])).stdout)
        // Footers number snapshots as the history and watch --since do: by the store's last save.
        // (One save: LMDB's own transaction number is higher, after the creation and the schema's write.)
        let last = try read.lastTransaction()
        for command in [["ls", store.path, "Book"], ["get", store.path, "Book/p1"], ["check", store.path]] {
            let table = try inspect(command + ["--format", "table"])
            #expect(table.stdout.hasSuffix("snapshot at transaction \(last))\n"), "\(command): \(table.stdout)")
        }
    }
}

@Suite struct StoreInspectValueFormatTests {
    @Test func datesKeepEveryFractionalDigitAndDecimalsAreStrings() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-values")
        defer { directory.remove() }
        let path = directory.path("values.store")
        let digits = "3.14159265358979323846264338327950288"
        do {
            let store = try PersistentStore.open(
                path: path,
                schema: try Schema(version: 1) {
                    Entity("Event") {
                        Attribute("at", .date)
                        Attribute("amount", .decimal)
                    }
                })
            let context = ObjectContext(store: store)
            for (seconds, amount) in [(1_764_519_361.123456, digits), (-12.25, "1"), (0, "0.5")] {
                let event = try context.insert("Event")
                try event.setValue(.date(Date(timeIntervalSince1970: seconds)), forKey: "at")
                try event.setValue(.decimal(Decimal(string: amount)!), forKey: "amount")
            }
            try context.save()
        }
        let output = try inspect(["ls", path, "Event", "--format", "json"])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("\"at\": \"2025-11-30T16:16:01.123456Z\""), "\(output.stdout)")
        #expect(output.stdout.contains("\"at\": \"1969-12-31T23:59:47.75Z\""), "\(output.stdout)")
        #expect(output.stdout.contains("\"at\": \"1970-01-01T00:00:00Z\""), "\(output.stdout)")
        #expect(output.stdout.contains("\"amount\": \"\(digits)\""), "\(output.stdout)")
    }
}

@Suite struct StoreInspectTerminalTests {
    @Test func tablesEscapeControlCharactersAndAlignWideText() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-terminal")
        defer { directory.remove() }
        let path = directory.path("terminal.store")
        let labels = [
            "日本語テキスト", "party 🎉🎉", "\u{1B}[31mred\u{1B}[0m", "\u{1B}]0;title\u{07}", "cr\rhere", "nul\u{0}x",
            "plain",
        ]
        do {
            let store = try PersistentStore.open(
                path: path,
                schema: try Schema(version: 1) {
                    Entity("Line") {
                        Attribute("label", .string)
                        Attribute("n", .int64)
                    }
                })
            let context = ObjectContext(store: store)
            for (n, label) in labels.enumerated() {
                let line = try context.insert("Line")
                try line.setValue(.string(label), forKey: "label")
                try line.setValue(.int(Int64(n)), forKey: "n")
            }
            try context.save()
        }
        let output = try inspect(["ls", path, "Line", "--format", "table", "--sort", "n"])
        #expect(output.status == 0, "\(output.stderr)")
        // No control character reaches the terminal but the line ends.
        #expect(
            !output.stdout.unicodeScalars.contains {
                ($0.value < 0x20 && $0 != "\n") || (0x7F...0x9F).contains($0.value)
            })
        #expect(output.stdout.contains("\\e[31mred\\e[0m") && output.stdout.contains("cr\\rhere"))
        #expect(output.stdout.contains("nul\\x00x") && output.stdout.contains("\\e]0;title\\x07"))
        // Every line of the table ends in the same terminal column: wide characters count twice.
        func width(_ line: Substring) -> Int {
            line.reduce(0) { total, character in
                let value = character.unicodeScalars.first!.value
                return total + ((0x3000...0x9FFF).contains(value) || (0x1F300...0x1F64F).contains(value) ? 2 : 1)
            }
        }
        let lines = output.stdout.split(separator: "\n").filter { !$0.hasPrefix("(") }
        #expect(lines.count == labels.count + 1)
        #expect(Set(lines.map(width)).count == 1, "\(lines)")
        // An error naming a hostile entity shows it escaped too.
        let error = try inspect(["ls", path, "Li\u{1B}]0;x\u{07}ne"])
        #expect(error.status == 64 && error.stderr.contains("'Li\\e]0;x\\x07ne'"), "\(error.stderr)")
    }
}

@Suite struct StoreInspectWhereLiteralTests {
    @Test func textLiteralsAreDatesAndUUIDsWhereTheAttributeIs() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-literals")
        defer { directory.remove() }
        let path = directory.path("events.store")
        let ids = [UUID(), UUID(), UUID()]
        do {
            let store = try PersistentStore.open(
                path: path,
                schema: try Schema(version: 1) {
                    Entity("Event") {
                        Attribute("name", .string)
                        Attribute("at", .date, indexed: true)
                        Attribute("ref", .uuid)
                    }
                })
            let context = ObjectContext(store: store)
            // 2025-01-01, 2025-06-01 10:30 UTC, 2025-12-31 23:00 UTC.
            for (i, seconds) in [1_735_689_600.0, 1_748_773_800.0, 1_767_222_000.0].enumerated() {
                let event = try context.insert("Event")
                try event.setValue(.string("e\(i)"), forKey: "name")
                try event.setValue(.date(Date(timeIntervalSince1970: seconds)), forKey: "at")
                try event.setValue(.uuid(ids[i]), forKey: "ref")
            }
            try context.save()
        }
        func names(_ condition: String) throws -> [String] {
            let output = try inspect([
                "ls", path, "Event", "--where", condition, "--sort", "name", "--fields", "name", "--format", "csv",
            ])
            #expect(output.status == 0, "\(condition): \(output.stderr)")
            return output.stdout.split(separator: "\n").dropFirst().map { String($0.split(separator: ",")[1]) }
        }
        #expect(try names("at >= '2025-06-01'") == ["e1", "e2"])
        #expect(try names("at < '2025-06-01T12:00:00+02:00'") == ["e0"])
        #expect(try names("at > '2025-06-01T10:29:59.5Z' AND at < '2025-06-01T10:30:00.5'") == ["e1"])
        #expect(try names("ref == '\(ids[2].uuidString)'") == ["e2"])
        #expect(try names("ref IN {'\(ids[0].uuidString)', '\(ids[2].uuidString.lowercased())'}") == ["e0", "e2"])
        // A text that is neither is a usage error naming the key.
        let bad = try inspect(["ls", path, "Event", "--where", "at > 'soon'"])
        #expect(bad.status == 64 && bad.stderr.contains("'soon' is not a date for at"))
        #expect(
            try inspect(["count", path, "Event", "--where", "ref == 'x'"]).stderr.contains("'x' is not a UUID for ref"))
    }
}

@Suite struct StoreInspectWatchTests {
    /// A store with five transactions: three tags inserted one by one, one renamed, two deleted.
    func taggedStore(_ directory: TemporaryDirectory) throws -> String {
        let path = directory.path("tags.store")
        let store = try PersistentStore.open(
            path: path, schema: try Schema(version: 1) { Entity("Tag") { Attribute("name", .string) } })
        let context = ObjectContext(store: store)
        var tags: [ManagedObject] = []
        for name in ["a", "b", "c"] {
            let tag = try context.insert("Tag")
            try tag.setValue(.string(name), forKey: "name")
            try context.save()
            tags.append(tag)
        }
        try tags[2].setValue("c2", forKey: "name")
        try context.save()
        try context.delete(tags[0])
        try context.delete(tags[1])
        try context.save()
        return path
    }

    @Test func maxCountsStoredTransactionsAndRowsStreamWithoutBlankLines() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-watch")
        defer { directory.remove() }
        let path = try taggedStore(directory)
        let csv = try inspect(["watch", path, "Tag", "--since", "0", "--max", "2", "--format", "csv"])
        #expect(csv.status == 0, "\(csv.stderr)")
        let lines = csv.stdout.components(separatedBy: "\n")
        #expect(lines.count == 4 && lines.last == "", "\(csv.stdout)")  // header, two rows, the final newline
        #expect(lines[0] == "transaction,date,author,process,kind,object,keys,user-driven,changes")
        #expect(lines[1].hasPrefix("1,") && lines[2].hasPrefix("2,"))
        let table = try inspect(["watch", path, "--since", "3", "--max", "2", "--format", "table"])
        let rows = table.stdout.components(separatedBy: "\n").dropLast()
        #expect(rows.count == 4 && !rows.contains(""), "\(table.stdout)")  // header, an update, two deletes
        // Each column starts where the header's does.
        let keysColumn = rows[0].range(of: "keys")!.lowerBound.utf16Offset(in: rows[0])
        for row in rows.dropFirst() { #expect(row.contains("Tag/p"), "\(row)") }
        #expect(rows.dropFirst().allSatisfy { $0.count > keysColumn })
        // The values: old → new in a table; keys an array and changes an object in NDJSON.
        #expect(rows[1].hasSuffix("name: c → c2"), "\(rows[1])")
        let ndjson = try inspect(["watch", path, "--since", "3", "--max", "1", "--format", "ndjson"])
        let update = ndjson.stdout.split(separator: "\n").first.map(String.init) ?? ""
        #expect(update.contains("\"keys\":[\"name\"]"), "\(update)")
        #expect(update.contains("\"changes\":{\"name\": {\"old\": \"c\", \"new\": \"c2\"}}"), "\(update)")
    }

    @Test func whereTestsTheObjectAsTheTransactionLeftIt() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-watch")
        defer { directory.remove() }
        let path = try taggedStore(directory)
        // 'b' was inserted (transaction 2) and deleted (5): both match its values then; 'a' never does.
        let b = try inspect([
            "watch", path, "Tag", "--where", "name == 'b'", "--since", "0", "--max", "2", "--format", "csv",
        ])
        #expect(b.status == 0, "\(b.stderr)")
        let rows = b.stdout.split(separator: "\n").dropFirst()
        #expect(
            rows.map { String($0.split(separator: ",", omittingEmptySubsequences: false)[4]) } == ["insert", "delete"],
            "\(b.stdout)")
        #expect(rows.allSatisfy { $0.contains("Tag/p2") })
        // 'c' was renamed to 'c2' in transaction 4. The update matches 'c2'; its insert too, because the history
        // keeps no values for inserts and the object's values are read as they are now.
        let c2 = try inspect([
            "watch", path, "Tag", "--where", "name == 'c2'", "--since", "0", "--max", "2", "--format", "csv",
        ])
        #expect(
            c2.stdout.split(separator: "\n").dropFirst().map {
                String($0.split(separator: ",", omittingEmptySubsequences: false)[4])
            } == ["insert", "update"])
        // Nothing to wait for past the last transaction.
        let past = try inspect(["watch", path, "--since", "9"])
        #expect(past.status == 64 && past.stderr.contains("past the store's last transaction (5)"), "\(past.stderr)")
    }
}
