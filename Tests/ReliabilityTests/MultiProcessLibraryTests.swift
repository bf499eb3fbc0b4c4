import EntityStore
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Three processes edit one library store at random (`es-test-helper library-worker`: relationships with cascade,
/// nullify and deny rules, derived attributes, unique tags and emails, batch updates and deletes), each checking its
/// merged view against the store as it goes; one process at a time is killed at a random moment, and another takes
/// its place. Afterwards the store passes its integrity check (every inverse, index entry and derived attribute in
/// place), its history numbers every save once with no gap, and replaying the history from the start gives back
/// exactly the objects the store holds, and the last value the history recorded of each attribute.
@Suite struct MultiProcessLibraryTests {
    @Test func processesEditingAndKilledKeepTheStoreTheViewsAndTheHistoryRight() throws {
        let stress = ProcessInfo.processInfo.environment["ENTITYSTORE_STRESS"] != nil
        let seconds = stress ? 60.0 : 6.0
        let dir = try TemporaryDirectory(prefix: "library-processes")
        defer { dir.remove() }
        let path = dir.path("library.store")
        try LibraryWorkload.seed(
            try PersistentStore.open(path: path, schema: try Fixtures.librarySchemaWithDerivations()))

        let helper = ChildProcess.executable("es-test-helper")
        var seed: UInt64 = 40
        func start() throws -> (Process, Pipe, Pipe) {
            seed += 1
            // Every other process merges the others' saves as the store's wake-ups deliver them.
            return try ChildProcess.start(
                helper, ["library-worker", path, "\(seconds)", "\(seed)"] + (seed % 2 == 0 ? ["auto"] : []))
        }
        var workers = try (0..<3).map { _ in try start() }
        var killed: [(Process, Pipe, Pipe)] = []
        var generator = SystemRandomNumberGenerator()
        let end = Date().addingTimeInterval(seconds * 0.7)
        while Date() < end {
            usleep(UInt32.random(in: 300_000...900_000, using: &generator))
            let victim = Int.random(in: 0..<workers.count, using: &generator)
            kill(workers[victim].0.processIdentifier, SIGKILL)
            workers[victim].0.waitUntilExit()
            killed.append(workers[victim])
            workers[victim] = try start()
        }
        var steps = 0
        var checks = 0
        var saves = 0
        for (process, out, err) in workers {
            let stdout = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(stderr.prefix(2000))")
            #expect(stdout.contains("violations 0"), "\(stdout.suffix(300)) \(stderr.prefix(2000))")
            let words = stdout.split(separator: "\n").last?.split(separator: " ") ?? []
            if words.count == 10 {
                steps += Int(words[1]) ?? 0
                saves += Int(words[3]) ?? 0
                checks += Int(words[7]) ?? 0
            }
        }
        for (_, _, err) in killed {
            // A killed process reports what it found before it died.
            let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(!stderr.contains("violation"), "\(stderr.prefix(2000))")
        }
        #expect(killed.count >= 3)
        #expect(saves > 30, "the processes got work done (\(steps) steps, \(saves) saves)")
        #expect(checks > 10, "the views were compared with the store (\(checks) times)")

        let store = try PersistentStore.open(path: path, schema: try Fixtures.librarySchemaWithDerivations())
        let (findings, _) = try store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings.prefix(10))")
        let replay = try HistoryReplay(store)
        #expect(replay.problems.isEmpty, "\(replay.problems.prefix(40))")
        #expect(replay.compared > 50)
        print(
            "library processes: \(steps) steps and \(saves) saves by the surviving processes, \(checks) checks of"
                + " their views, \(killed.count) processes killed, \(replay.transactions) transactions, \(replay.objects) objects,"
                + " \(replay.compared) values checked against the history")
    }
}
