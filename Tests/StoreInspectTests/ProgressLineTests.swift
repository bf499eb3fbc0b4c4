import Foundation
import TestSupport
import Testing

/// Long work shows one progress line on stderr when stderr is a terminal (a pseudo-terminal here), redrawn in place
/// and cleared at the end; nothing with `--quiet` or when stderr is not a terminal.
@Suite struct ProgressLineTests {
    /// Runs store-inspect with its stderr on a pseudo-terminal (stdout to /dev/null); returns what the terminal got.
    func onATerminal(_ arguments: [String]) throws -> (status: Int32, terminal: String) {
        let script = """
            import os, pty, subprocess, sys
            master, slave = pty.openpty()
            child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
            os.close(slave)
            seen = b""
            while True:
                try:
                    data = os.read(master, 4096)
                except OSError:
                    break
                if not data:
                    break
                seen += data
            sys.stdout.buffer.write(seen)
            sys.exit(child.wait())
            """
        let output = try ChildProcess.run(
            "/usr/bin/python3", ["-c", script, ChildProcess.executable("store-inspect")] + arguments)
        // (The child's output is read as lines: the last comes back with a newline.)
        return (output.status, output.stdout.hasSuffix("\n") ? String(output.stdout.dropLast()) : output.stdout)
    }

    @Test func exportImportAndCheckDrawAProgressLineOnATerminalOnly() throws {
        let store = try InspectedStore(books: 2_000)
        defer { store.remove() }
        let export = try onATerminal(["export", store.path, "Book", "--format", "csv"])
        #expect(export.status == 0)
        #expect(
            export.terminal.hasPrefix("\rexporting: ") && export.terminal.contains("/2005 objects"),
            "\(export.terminal.debugDescription)")
        #expect(export.terminal.hasSuffix("\r\u{1B}[K"), "\(export.terminal.debugDescription)")
        let check = try onATerminal(["check", store.path])
        #expect(
            check.status == 0 && check.terminal.hasPrefix("\rchecking: ") && check.terminal.contains(" records"),
            "\(check.terminal.debugDescription)")
        let directory = try TemporaryDirectory(prefix: "progress")
        defer { directory.remove() }
        let exported = try inspect(["export", store.path, "Tag", "--format", "ndjson", "--fields", "name"])
        try exported.stdout.write(toFile: directory.path("tags.ndjson"), atomically: true, encoding: .utf8)
        let copy = directory.path("copy.store")
        try StoreInspectImportTests.emptyStore(copy)
        let imported = try onATerminal(["import", copy, directory.path("tags.ndjson"), "--format", "csv"])
        #expect(
            imported.status == 0 && imported.terminal.hasPrefix("\rimporting: 0/1 objects"),
            "\(imported.terminal.debugDescription)")
        // --quiet: nothing; and nothing when stderr is not a terminal (a pipe).
        #expect(try onATerminal(["export", store.path, "Book", "--format", "csv", "--quiet"]).terminal.isEmpty)
        #expect(try onATerminal(["check", store.path, "--quiet"]).terminal.isEmpty)
        let piped = try inspect(["export", store.path, "Book", "--format", "csv"])
        #expect(piped.status == 0 && piped.stderr.isEmpty)
    }
}

/// `stats` ends with the free pages and the whole file, as `mdb_stat -f -e` do; the file's bytes are `info`'s.
@Suite struct StatsSummaryTests {
    @Test func statsEndsWithTheFreePagesAndTheFile() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let stats = try inspect(["stats", store.path, "--format", "csv"])
        #expect(stats.status == 0, "\(stats.stderr)")
        let lines = stats.stdout.split(separator: "\n").map(String.init)
        let info = try inspect(["info", store.path, "--format", "json"]).stdout
        let used = info.range(of: #""bytes used": ?(\d+)"#, options: .regularExpression).map {
            String(info[$0]).filter(\.isNumber)
        }
        #expect(lines.dropLast().last?.hasPrefix("(free pages),") == true, "\(lines)")
        #expect(used != nil && lines.last == "(the file),,\(used ?? ""),,,,", "\(lines.last ?? "") \(info)")
    }
}
