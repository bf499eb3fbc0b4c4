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
        let (watcher, _, _) = try ChildProcess.start(
            ChildProcess.executable("store-inspect"), ["watch", path, "--format", "ndjson"])
        defer {
            // SIGKILL: a child started from a test thread inherits its blocked SIGTERM.
            kill(watcher.processIdentifier, SIGKILL)
            watcher.waitUntilExit()
        }
        func descriptors() -> Int {
            (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(watcher.processIdentifier)/fd").count) ?? -1
        }
        #expect(try ChildProcess.helper(["tag-saver", path, "20"]).status == 0)
        usleep(200_000)
        let early = descriptors()
        #expect(try ChildProcess.helper(["tag-saver", path, "300"]).status == 0)
        usleep(200_000)
        #expect(watcher.isRunning)
        #expect(descriptors() == early, "the watch opened descriptors as commits went by")
    }

    @Test func theLiveDemoKeepsAFixedNumberOfDescriptors() throws {
        let dir = try TemporaryDirectory(prefix: "resource-test")
        defer { dir.remove() }
        let path = dir.path("demo.store")
        let demo = ChildProcess.executable("store-demo")
        let (process, out, _) = try ChildProcess.start(demo, ["--live", "--store", path])
        defer {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        let output = GrowingText()
        out.fileHandleForReading.readabilityHandler = { output.append($0.availableData) }
        defer { out.fileHandleForReading.readabilityHandler = nil }
        func waitFor(_ text: String) -> Bool {
            let deadline = Date().addingTimeInterval(60)
            while !output.value.contains(text) && Date() < deadline && process.isRunning { usleep(10_000) }
            return output.value.contains(text)
        }
        func descriptors() -> Int {
            (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.processIdentifier)/fd").count) ?? -1
        }
        try #require(waitFor("Live:"), "the demo did not reach its live mode: \(output.value)")
        #expect(try ChildProcess.run(demo, ["add", "first", "4", "9", "--store", path]).status == 0)
        try #require(waitFor("insert first"))
        let early = descriptors()
        for index in 0..<40 {
            #expect(try ChildProcess.run(demo, ["add", "item\(index)", "5", "\(index)", "--store", path]).status == 0)
        }
        try #require(waitFor("insert item39"), "\(output.value.suffix(2000))")
        #expect(process.isRunning)
        #expect(descriptors() == early, "the live demo opened descriptors as commits went by")
    }
}

/// Text read from a child's pipe as it comes; guarded by a lock.
final class GrowingText: @unchecked Sendable {
    // @unchecked Sendable: `text` is only touched while `lock` is held.
    private let lock = NSLock()
    private var text = ""
    func append(_ data: Data) { lock.withLock { text += String(decoding: data, as: UTF8.self) } }
    var value: String { lock.withLock { text } }
}
