import EntityStore
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A released store closes: open descriptors, threads and mappings of its files return to where they were, for
/// every public way of using a store, and long-running tools stay within a fixed number of descriptors.
@Suite struct ResourceTests {
    /// Each path runs in a fresh process (other tests' threads and files would blur the counts).
    @Test func twoHundredStoresPerPathLeaveNothingOpen() throws {
        let dir = try TemporaryDirectory(prefix: "resource-test")
        defer { dir.remove() }
        let output = try ChildProcess.helper(["resource-cycles", dir.path, "200"])
        #expect(output.status == 0, "\(output.stderr)")
        for path in [
            "context and save", "fetch", "controller", "sectioned controller merging by hand",
            "windowed controller merging by hand", "automatic merging with a controller", "store.changes() finished",
            "store.changes() cancelled", "context.changes finished and cancelled", "observeCommits", "typed models",
            "context actor and performBackgroundTask", "controller batches stream", "read-only open beside the app",
        ] {
            #expect(output.stdout.contains("\(path): 200 stores"), "\(path) did not run")
        }
    }

    @Test func storeInspectWatchKeepsAFixedNumberOfDescriptors() throws {
        let dir = try TemporaryDirectory(prefix: "resource-test")
        defer { dir.remove() }
        let path = dir.path("lib.store")
        #expect(try ChildProcess.helper(["library-store", path]).status == 0)
        let last = try PersistentStore.openReadOnly(path: path).lastTransaction()
        let watcher = try RunningProcess(
            ChildProcess.executable("store-inspect"), ["watch", path, "--format", "ndjson", "--since", "\(last)"])
        defer {
            // SIGKILL: a child started from a test thread inherits its blocked SIGTERM.
            watcher.kill()
        }
        func descriptors() -> Int {
            (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(watcher.process.processIdentifier)/fd").count)
                ?? -1
        }
        // Each save inserts one tag: one line of the watch.
        #expect(try ChildProcess.helper(["tag-saver", path, "20"]).status == 0)
        try watcher.waitForLines(20, "watched changes") { $0.contains("\"insert\"") }
        let early = descriptors()
        #expect(try ChildProcess.helper(["tag-saver", path, "300"]).status == 0)
        try watcher.waitForLines(320, "watched changes") { $0.contains("\"insert\"") }
        #expect(watcher.process.isRunning)
        #expect(descriptors() == early, "the watch opened descriptors as commits went by")
    }

    @Test func theLiveDemoKeepsAFixedNumberOfDescriptors() throws {
        let dir = try TemporaryDirectory(prefix: "resource-test")
        defer { dir.remove() }
        let path = dir.path("demo.store")
        let demo = ChildProcess.executable("store-demo")
        let live = try RunningProcess(demo, ["--live", "--store", path])
        defer { live.kill() }
        func waitFor(_ text: String) throws { try live.waitForLines(1, "'\(text)'") { $0.contains(text) } }
        func descriptors() -> Int {
            (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(live.process.processIdentifier)/fd").count)
                ?? -1
        }
        try waitFor("Live:")
        #expect(try ChildProcess.run(demo, ["add", "first", "4", "9", "--store", path]).status == 0)
        try waitFor("insert first")
        let early = descriptors()
        for index in 0..<40 {
            #expect(try ChildProcess.run(demo, ["add", "item\(index)", "5", "\(index)", "--store", path]).status == 0)
        }
        try waitFor("insert item39")
        #expect(live.process.isRunning)
        #expect(descriptors() == early, "the live demo opened descriptors as commits went by")
    }
}
