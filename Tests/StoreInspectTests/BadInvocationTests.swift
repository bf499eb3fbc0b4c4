import Foundation
import LMDB
import TestSupport
import Testing

@Suite struct BadInvocationTests {
    /// Each bad invocation: one line on stderr, nothing on stdout, the documented exit code, the store unchanged.
    @Test func badInvocationsFailClearlyAndChangeNothing() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let dir = store.directory
        let s = store.path
        // Broken stores of every kind, next to the good one.
        _ = FileManager.default.createFile(atPath: dir.path("plain-file"), contents: Data("x".utf8))
        try FileManager.default.createDirectory(atPath: dir.path("empty-dir"), withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: dir.path("empty-data"), withIntermediateDirectories: false)
        _ = FileManager.default.createFile(atPath: dir.path("empty-data/data.mdb"), contents: Data())
        try FileManager.default.createDirectory(atPath: dir.path("text-data"), withIntermediateDirectories: false)
        _ = FileManager.default.createFile(
            atPath: dir.path("text-data/data.mdb"), contents: Data(String(repeating: "no", count: 5000).utf8))
        try FileManager.default.copyItem(atPath: s, toPath: dir.path("truncated"))
        #expect(truncate(dir.path("truncated/data.mdb"), 8192) == 0)
        do {
            let env = try Environment.open(path: dir.path("plain-lmdb"))
            let db = try env.openDatabase("other")
            try env.write { txn in try txn.put(Array("k".utf8), Array("v".utf8), in: db) }
        }
        try FileManager.default.copyItem(atPath: s, toPath: dir.path("future"))
        do {
            let env = try Environment.open(path: dir.path("future"))
            let meta = try env.openDatabase("meta", create: false)
            try env.write { txn in
                try txn.put(Array("format".utf8), withUnsafeBytes(of: UInt32(99).littleEndian) { Array($0) }, in: meta)
            }
        }
        try FileManager.default.createDirectory(atPath: dir.path("linked"), withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(
            atPath: dir.path("linked/data.mdb"), withDestinationPath: s + "/data.mdb")
        try FileManager.default.copyItem(atPath: s, toPath: dir.path("existing-backup"))

        let cases: [([String], Int32)] = [
            ([], 64), (["frobnicate", s], 64), (["info"], 64), (["info", s, "--bogus"], 64), (["ls", s], 64),
            (["ls", s, "Nope"], 64), (["ls", s, "Book", "--where", "pages >"], 64),
            (["ls", s, "Book", "--where", "titel == 'x'"], 64), (["ls", s, "Book", "--sort", ","], 64),
            (["ls", s, "Book", "--sort", "weight"], 64), (["ls", s, "Book", "--limit", "-1"], 64),
            (["ls", s, "Book", "--limit", "abc"], 64), (["ls", s, "Book", "--offset", "x"], 64),
            (["ls", s, "Book", "--fields", "nope"], 64), (["ls", s, "Book", "extra"], 64), (["get", s, "notanid"], 64),
            (["get", s, "Ship/p1"], 64), (["get", s, "Book/p999"], 1), (["info", dir.path("nowhere")], 66),
            (["info", dir.path("plain-file")], 65), (["info", dir.path("empty-dir")], 66),
            (["info", dir.path("empty-data")], 65), (["info", dir.path("text-data")], 65),
            (["info", dir.path("truncated")], 65), (["info", dir.path("plain-lmdb")], 65),
            (["info", dir.path("future")], 69), (["info", dir.path("linked")], 65),
            (["info", s, "--format", "xml"], 64),
            (["info", s, "--format"], 64), (["history", s, "--since", "x"], 64),
            (["watch", s, "Book", "--where", "pages >>"], 64), (["watch", s, "--where", "x == 1"], 64),
            (["export", s], 64), (["export", s, "Book", "--all"], 64), (["backup", s], 64),
            (["backup", s, dir.path("existing-backup")], 64), (["backup", s, "/proc/no-such-dir/backup"], 74),
            (["schema", s, "--version", "99"], 64), (["schema", s, "--version", "x"], 64),
            (["count", s, "Book", "--where", "ANY title == 'x'"], 64), (["info", s, "--history"], 64),
            (["ls", s, "Book", "--limit"], 64), (["count", s, "Book", "--explain=yes"], 64),
            (["get", s, "Book/p1", "--limit", "3"], 64),
            (["ls", s, "Book", "--where", "pages > 1", "--where", "pages < 3"], 64),
            // Numbers that do not fit, repeated --format, empty values, a URI of another store, versions and help.
            (["schema", s, "--version", "18446744073709551615"], 64), (["ls", s, "Book", "--limit", "+3"], 64),
            (["history", s, "--since", "99999999999999999999"], 64),
            (["ls", s, "Book", "--format", "csv", "--format", "json"], 64), (["ls", s, "Book", "--fields", ""], 64),
            (["ls", s, "Book", "--where="], 64), (["ls", s, "Book", "--sort", ""], 64),
            (["get", s, "entitystore://00000000-0000-0000-0000-000000000000/Book/p1"], 64),
            (["--version", s], 64), (["help", "nope"], 64), (["help", "ls", "extra"], 64),
            (["export", s, "--all", "--format", "csv"], 64), (["export", s, "Book", "--dir", dir.path("csv")], 64),
            // import: a missing file, an unknown input format, a directory without CSV, input that is not an export.
            (["import", s], 64), (["import", s, dir.path("no-such-file.json")], 66),
            (["import", s, "/dev/null", "--input", "xml"], 64), (["import", s, "/dev/null", "--input", ""], 64),
            (["import", s, dir.path("empty-dir")], 64), (["import", s, "/etc/hostname", "--input", "json"], 65),
            (["import", s, "a", "b"], 64),
            // Contradicting options, and field lists with no field or an empty one.
            (["schema", s, "--version", "1", "--history"], 64), (["ls", s, "Book", "--fields", ",,"], 64),
            (["ls", s, "Book", "--fields", "title,,pages"], 64), (["get", s, "Book/p1", "--fields", " , "], 64),
            (["export", s, "--all", "--fields", "title"], 64), (["export", s, "Book", "--fields", "tags.name"], 64),
        ]
        #expect(cases.count >= 40)
        let before = store.dataDigest()
        for (arguments, expected) in cases {
            let output = try inspect(arguments)
            #expect(output.status == expected, "\(arguments): \(output.status) \(output.stderr)")
            #expect(output.stdout.isEmpty, "\(arguments): \(output.stdout)")
            #expect(output.stderr.split(separator: "\n").count == 1, "\(arguments): \(output.stderr)")
            #expect(output.stderr.hasPrefix("store-inspect"), "\(arguments)")
        }
        #expect(store.dataDigest() == before)
        #expect(FileManager.default.contents(atPath: dir.path("empty-data/data.mdb"))?.count == 0)
        #expect(
            (try FileManager.default.attributesOfItem(atPath: dir.path("truncated/data.mdb"))[.size] as? Int) == 8192)
    }

    @Test func aNonUTF8ArgumentIsAUsageError() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        // A shell passes the raw bytes; Process would re-encode a String, so go through /bin/sh with printf.
        let binary = ChildProcess.executable("store-inspect")
        let output = try ChildProcess.run(
            "/bin/sh", ["-c", "\"$0\" ls \"$1\" \"$(printf 'B\\377ook')\"", binary, store.path])
        #expect(output.status == 64)
        #expect(output.stderr == "store-inspect: argument 3 is not valid UTF-8\n")
        #expect(output.stdout.isEmpty)
    }

    @Test func aStoreThatCannotBeReadIsExit66() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let binary = ChildProcess.executable("store-inspect")
        let output: ChildProcess.Output
        if getuid() == 0 {
            // Root reads everything: run the CLI as nobody against the private (0700) store.
            let setpriv = "/usr/bin/setpriv"
            try #require(FileManager.default.isExecutableFile(atPath: setpriv))
            output = try ChildProcess.run(
                setpriv, ["--reuid=65534", "--regid=65534", "--clear-groups", binary, "info", store.path])
        } else {
            #expect(chmod(store.path, 0) == 0)
            defer { chmod(store.path, 0o700) }
            output = try ChildProcess.run(binary, ["info", store.path])
        }
        #expect(output.status == 66, "\(output.stderr)")
        #expect(output.stdout.isEmpty)
    }
}
