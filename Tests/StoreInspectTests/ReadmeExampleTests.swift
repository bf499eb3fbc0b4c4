import EntityStore
import Foundation
import TestSupport
import Testing

/// The README's store-inspect examples, run as written (through `/bin/sh`, in a directory holding `library.store`,
/// a fixture library, and `other.store`, an empty store of its schema): each exits 0 with nothing on stderr. `STORE-ID` stands for the store's ID, and
/// `watch`, which follows commits until stopped, is stopped once it has shown another process's save.
@Suite struct ReadmeExampleTests {
    static let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("README.md")

    /// The lines of the README's shell block of store-inspect examples.
    static func examples() throws -> [String] {
        let text = try String(contentsOf: readme, encoding: .utf8)
        var blocks: [[String]] = []
        var current: [String]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line.hasPrefix("```sh") {
                current = []
            } else if let lines = current, line.hasPrefix("```") {
                blocks.append(lines)
                current = nil
            } else if current != nil {
                current!.append(String(line))
            }
        }
        return blocks.first { $0.first?.hasPrefix("store-inspect ") == true } ?? []
    }

    @Test func theReadmesStoreInspectExamplesRunAsWritten() throws {
        let examples = try Self.examples()
        #expect(examples.count >= 10, "the README's store-inspect block: \(examples)")
        let directory = try TemporaryDirectory(prefix: "readme-examples")
        defer { directory.remove() }
        let path = directory.path("library.store")
        let made = try ChildProcess.helper(["library-store", path, "50"])
        try #require(made.status == 0, "\(made.stderr)")
        let other = try ChildProcess.helper(["open-library", directory.path("other.store"), "a"])
        try #require(other.status == 0, "\(other.stderr)")
        let storeID = try PersistentStore.openReadOnly(path: path).storeID.uuidString
        let environment = [
            "PATH": ChildProcess.productsDirectory.path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? ""),
            "NO_COLOR": "1",
        ]
        var ran: [String] = []
        for example in examples {
            let command = example.replacingOccurrences(of: "STORE-ID", with: storeID)
            let arguments = ["-c", "cd '\(directory.path)' && exec " + command]
            if command.hasPrefix("store-inspect watch ") {
                let watch = try RunningProcess("/bin/sh", arguments, environment: environment)
                defer { watch.kill() }
                // The watch follows the commits after its start (which says nothing when its output is not a
                // terminal: JSON has no header): another process's saves, until one is shown.
                let store = try PersistentStore.open(path: path, schema: try Fixtures.librarySchema())
                let context = ObjectContext(store: store, name: "readme")
                func shown() -> Bool { watch.outputLines.contains { $0.contains("insert") && $0.contains("Book/") } }
                let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline)
                while !shown() && watch.process.isRunning && Date() < deadline {
                    let book = try context.insert("Book")
                    try book.setValue("Watched", forKey: "title")
                    try context.save()
                    usleep(50_000)
                }
                #expect(shown(), "\(example): \(watch.outputLines) \(watch.errorText)")
                #expect(watch.errorText.isEmpty, "\(example): \(watch.errorText)")
            } else {
                let output = try ChildProcess.run("/bin/sh", arguments, environment: environment)
                #expect(output.status == 0, "\(example): exit \(output.status): \(output.stderr)")
                #expect(output.stderr.isEmpty, "\(example): \(output.stderr)")
            }
            ran.append(String(command.prefix { $0 != " " }))
        }
        #expect(ran.count == examples.count)
    }
}
