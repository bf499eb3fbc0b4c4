import EntityStore
import Foundation
import StoreInspectCore
import Synchronization
import TestSupport
import Testing

/// `ls` and `export` stream; every command's JSON is one object.
@Suite struct StoreInspectStreamingTests {
    /// Runs the CLI in this process, keeping each piece of output as it was handed on.
    static func run(_ arguments: [String]) -> (code: Int32, chunks: [String], stderr: String) {
        let chunks = Mutex<[String]>([])
        let stderr = Mutex("")
        let code = StoreInspect.run(
            arguments, stdoutIsTerminal: false, environment: [:],
            out: { text in chunks.withLock { $0.append(text) } },
            err: { text in stderr.withLock { $0 += text } })
        return (code, chunks.withLock { $0 }, stderr.withLock { $0 })
    }

    @Test func exportAndLsHandTheirRowsOnAsTheyAreRead() throws {
        let store = try InspectedStore(books: 3000)
        defer { store.remove() }
        for command in ["export", "ls"] {
            for format in ["ndjson", "json", "csv", "table"] {
                let (code, chunks, stderr) = Self.run([command, store.path, "Book", "--format", format])
                #expect(code == 0, "\(stderr)")
                // Rows are handed on in chunks of about 64 KiB while the snapshot is read, not once at the end.
                #expect(chunks.count >= 3, "\(command) \(format): \(chunks.count) chunks")
                let text = chunks.joined()
                let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
                switch format {
                case "ndjson": #expect(lines.count == 3005 + 1)
                case "csv": #expect(lines.count == 1 + 3005 + 1)
                case "json":
                    let object = try #require(
                        try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
                    #expect((object["rows"] as? [Any])?.count == 3005)
                default:
                    // One header; the widths of the first rows hold for the rest (all titles are as wide).
                    #expect(lines.filter { $0.hasPrefix("id ") }.count == 1)
                    let starts = Set(
                        lines.dropFirst(6).prefix(2999).compactMap { line in
                            line.range(of: "Book number").map {
                                line.distance(from: line.startIndex, to: $0.lowerBound)
                            }
                        })
                    #expect(starts.count == 1, "\(starts)")
                    if command == "ls" {
                        #expect(lines.contains { $0.hasPrefix("(3005 rows, snapshot at transaction") })
                    }
                }
            }
        }
    }

    @Test func anEntityWithoutObjectsStillHasItsHeader() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        // (CSV leaves out `notes`: each note's `chapter` holds it; asked for, it is written.)
        #expect(try inspect(["export", store.path, "Chapter", "--format", "csv"]).stdout == "id,title,number,book\n")
        #expect(
            try inspect(["export", store.path, "Chapter", "--format", "csv", "--fields", "title,notes"]).stdout
                == "id,title,notes\n")
        #expect(try inspect(["ls", store.path, "Chapter", "--format", "csv"]).stdout == "id,title,number,book,notes\n")
        let json = try inspect(["ls", store.path, "Chapter", "--format", "json"]).stdout
        #expect(json.hasPrefix("{\"transaction\": ") && json.hasSuffix("\"rows\": []}\n"), "\(json)")
        // Every entity's block, those without objects too, in schema order.
        let table = try inspect(["export", store.path, "--all", "--format", "table"]).stdout
        let headers = table.split(separator: "\n").filter { $0.hasPrefix("entity ") }
        #expect(headers.count == 6, "\(table)")
    }

    @Test func everyCommandPrintsOneJSONObject() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let commands: [[String]] = [
            ["info"], ["schema"], ["schema", "--history"], ["stats"], ["entities"], ["ls", "Book"], ["count", "Book"],
            ["get", "Book/p1"], ["check"], ["history", "--since", "0"], ["export", "Author"], ["export", "--all"],
        ]
        for command in commands {
            let output = try inspect([command[0], store.path] + command.dropFirst() + ["--format", "json"])
            #expect(output.status == 0, "\(command): \(output.stderr)")
            let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any]
            #expect(object != nil, "\(command): \(output.stdout)")
            if command[0] == "info" {
                // The store's properties themselves, not rows of properties.
                #expect(object?["path"] as? String == store.path)
                #expect(object?["schema version"] as? Int == 1)
                #expect(object?["rows"] == nil)
            } else {
                #expect(object?["rows"] is [Any], "\(command)")
            }
        }
        // NDJSON: info is one line.
        let info = try inspect(["info", store.path, "--format", "ndjson"])
        #expect(info.stdout.split(separator: "\n").count == 1)
    }

    @Test func toManyRelationshipsAreArraysInJSONAndSpacedElsewhere() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let json = try inspect(["get", store.path, "Author/p2", "--format", "json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let row = try #require((object["rows"] as? [[String: Any]])?.first)
        #expect(row["books"] as? [String] == ["Book/p2", "Book/p5"], "\(json.stdout)")
        let empty = try inspect(["get", store.path, "Book/p2", "--format", "ndjson", "--fields", "tags"])
        #expect(empty.stdout == "{\"id\":\"Book/p2\",\"tags\":[]}\n")
        let csv = try inspect(["get", store.path, "Author/p2", "--format", "csv", "--fields", "books"])
        #expect(csv.stdout == "id,books\nAuthor/p2,Book/p2 Book/p5\n")
    }

    @Test func quotesBackslashesAndControlCharactersStayValidJSON() throws {
        let directory = try TemporaryDirectory(prefix: "store-inspect-json")
        defer { directory.remove() }
        let path = directory.path("s.store")
        let title = "a\\b \"c\" \u{1}\t\n\u{1F600} é"
        do {
            let store = try PersistentStore.open(path: path, schema: try Fixtures.librarySchema())
            let context = ObjectContext(store: store)
            let book = try context.insert("Book")
            try book.setValue(.string(title), forKey: "title")
            try context.save()
        }
        for format in ["json", "ndjson"] {
            let output = try inspect(["ls", path, "Book", "--format", format, "--fields", "title"])
            #expect(output.status == 0, "\(output.stderr)")
            let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8))
            let row =
                format == "json"
                ? ((object as? [String: Any])?["rows"] as? [[String: Any]])?.first : object as? [String: Any]
            #expect(row?["title"] as? String == title, "\(output.stdout)")
        }
    }
}

/// `readers` and `info` show what `mdb_stat -r -f` shows.
@Suite struct StoreInspectReaderTableTests {
    @Test func readersListsAnotherProcesssSnapshotAndInfoCountsFreePages() throws {
        let store = try InspectedStore(books: 2000)
        defer { store.remove() }
        let holder = try RunningProcess.helper(["hold-read", store.path])
        defer { holder.kill() }  // it sleeps inside a read transaction
        try holder.waitForLine("holding")
        let readers = try inspect(["readers", store.path, "--format", "csv"])
        #expect(readers.status == 0, "\(readers.stderr)")
        let rows = readers.stdout.split(separator: "\n").map {
            $0.split(separator: ",", omittingEmptySubsequences: false)
        }
        #expect(rows.first == ["process", "thread", "snapshot", "alive"])
        let held = rows.first { $0.first.map(String.init) == String(holder.process.processIdentifier) }
        #expect(held?[3] == "true", "\(readers.stdout)")
        #expect(held.map { Int($0[2]) != nil } == true, "\(readers.stdout)")

        // Free pages as mdb_stat -f counts them (the batch inserts freed pages along the way).
        let info = try inspect(["info", store.path, "--format", "json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(info.stdout.utf8)) as? [String: Any])
        let mdbStat = try ChildProcess.run("/usr/bin/mdb_stat", ["-f", store.path])
        let freeLine = mdbStat.stdout.split(separator: "\n").first { $0.contains("Free pages:") }
        let expected = freeLine.flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
        #expect(expected != nil && object["free pages"] as? Int == expected, "\(info.stdout) vs \(mdbStat.stdout)")
    }
}

/// Stores on read-only media, and lock files a reader may not write.
@Suite struct StoreInspectReadOnlyMediaTests {
    @Test func aStoreOnAReadOnlyFileSystemIsReadWithoutALockFileAndSaysSo() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let mountPoint = store.directory.path("ro")
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: false)
        let tool = ChildProcess.executable("store-inspect")
        // A private mount namespace: the read-only bind mount is seen by this shell and its children only.
        let script = """
            mount --bind '\(store.directory.path)' '\(mountPoint)' && mount -o remount,bind,ro '\(mountPoint)' \
            && rm -f '\(mountPoint)/lib.store/lock.mdb' 2>/dev/null; \
            '\(tool)' info '\(mountPoint)/lib.store' --format json && '\(tool)' ls '\(mountPoint)/lib.store' Tag
            """
        let output = try ChildProcess.run("/usr/bin/unshare", ["-m", "/bin/sh", "-c", script])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("is on a read-only file system: reading it without a lock file"))
        #expect(output.stdout.contains("\"lock file\": \"none: read-only file system"), "\(output.stdout)")
        #expect(output.stdout.contains("{\"id\":\"Tag/p1\",\"name\":\"classic\",\"books\":"), "\(output.stdout)")
    }

    @Test func aLockFileTheReaderMayNotWriteIsNamed() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        #expect(try inspect(["info", store.path]).status == 0)  // the lock file exists
        for path in [store.directory.path, store.path] { chmod(path, 0o755) }
        for file in ["data.mdb", "lock.mdb"] { chmod(store.path + "/" + file, 0o644) }
        let output = try ChildProcess.run(
            "/usr/bin/setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", ChildProcess.executable("store-inspect"), "info",
                store.path,
            ])
        #expect(output.status == 66, "\(output.stderr)")
        #expect(output.stderr.contains("cannot open \(store.path)/lock.mdb for writing (permission denied)"))
        #expect(output.stdout.isEmpty)
    }
}

/// The man page and the completions are generated from the help, and the copies in `share/` are the generated ones.
@Suite struct StoreInspectManPageTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    @Test func theCheckedInManPageAndCompletionsAreTheGeneratedOnes() throws {
        for (arguments, file) in [
            (["manpage"], "share/man/man1/store-inspect.1"),
            (["completion", "bash"], "share/completions/store-inspect.bash"),
            (["completion", "zsh"], "share/completions/_store-inspect"),
        ] {
            let generated = try inspect(arguments)
            #expect(generated.status == 0, "\(generated.stderr)")
            let stored = try String(contentsOfFile: Self.root + "/" + file, encoding: .utf8)
            #expect(generated.stdout == stored, "\(file) is stale: run make share")
        }
        // Every subcommand has a section in the man page.
        let page = try inspect(["manpage"]).stdout
        for name in ["info", "ls", "export", "import", "readers", "watch", "backup"] {
            #expect(page.contains(".SS \(name)\n"), "\(name)")
        }
    }

    @Test func bashCompletesSubcommandsOptionsAndFormats() throws {
        let script = """
            source '\(Self.root)/share/completions/store-inspect.bash'
            COMP_WORDS=(store-inspect im); COMP_CWORD=1; _store_inspect; echo "${COMPREPLY[*]}"
            COMP_WORDS=(store-inspect ls s.store --wh); COMP_CWORD=3; _store_inspect; echo "${COMPREPLY[*]}"
            COMP_WORDS=(store-inspect ls s.store --format n); COMP_CWORD=4; _store_inspect; echo "${COMPREPLY[*]}"
            """
        let output = try ChildProcess.run("/bin/bash", ["-c", script])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout == "import\n--where\nndjson\n", "\(output.stdout)")
        #expect(try inspect(["completion", "fish"]).status == 64)
    }
}
