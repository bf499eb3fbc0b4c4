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
}
