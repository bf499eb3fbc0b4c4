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
        let stress = TestScale.isStress
        // Each process that is not killed makes at least `steps` steps and `checks` checks of its view; `kills`
        // processes are killed, each after a random number of its steps.
        let (steps, checks, kills) = stress ? (1_500, 60, 60) : (120, 4, 5)
        let dir = try TemporaryDirectory(prefix: "library-processes")
        defer { dir.remove() }
        let path = dir.path("library.store")
        try LibraryWorkload.seed(
            try PersistentStore.open(path: path, schema: try Fixtures.librarySchemaWithDerivations()))

        var seed: UInt64 = 40
        func start() throws -> RunningProcess {
            seed += 1
            // Every other process merges the others' saves as the store's wake-ups deliver them.
            return try RunningProcess.helper(
                ["library-worker", path, "\(steps)", "\(checks)", "\(seed)"] + (seed % 2 == 0 ? ["auto"] : []))
        }
        func isStep(_ line: String) -> Bool { line.hasPrefix("step ") }
        var workers = try (0..<3).map { _ in try start() }
        var killed: [RunningProcess] = []
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<kills {
            // The victim is killed once it has made a few more steps (it is working, however slow the machine),
            // at a random moment of the step after them.
            let victim = Int.random(in: 0..<workers.count, using: &generator)
            let done = workers[victim].outputLines.filter(isStep).count
            try workers[victim].waitForLines(done + Int.random(in: 1...8, using: &generator), "steps", where: isStep)
            usleep(UInt32.random(in: 0...5_000, using: &generator))
            workers[victim].kill()
            killed.append(workers[victim])
            workers[victim] = try start()
        }
        for worker in workers { worker.stop() }
        var (madeSteps, madeChecks, saves) = (0, 0, 0)
        for worker in workers {
            let output = worker.finish()
            #expect(output.status == 0, "\(output.stderr.prefix(2000))")
            #expect(
                output.stdout.contains("violations 0"), "\(output.stdout.suffix(300)) \(output.stderr.prefix(2000))")
            let words = output.stdout.split(separator: "\n").last?.split(separator: " ") ?? []
            #expect(words.count == 10, "\(output.stdout.suffix(300))")
            guard words.count == 10 else { continue }
            let (made, saved, checked) = (Int(words[1]) ?? 0, Int(words[3]) ?? 0, Int(words[7]) ?? 0)
            #expect(made >= steps)
            #expect(checked >= checks, "the view was compared with the store: \(words.joined(separator: " "))")
            madeSteps += made
            saves += saved
            madeChecks += checked
        }
        for worker in killed {
            // A killed process reports what it found before it died.
            let output = worker.finish()
            #expect(output.terminationReason == .uncaughtSignal, "killed mid-run")
            #expect(!output.stderr.contains("violation"), "\(output.stderr.prefix(2000))")
        }
        #expect(saves > 0, "the processes got work done (\(madeSteps) steps, \(saves) saves)")

        let store = try PersistentStore.open(path: path, schema: try Fixtures.librarySchemaWithDerivations())
        let (findings, _) = try store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings.prefix(10))")
        let replay = try HistoryReplay(store)
        #expect(replay.problems.isEmpty, "\(replay.problems.prefix(40))")
        #expect(replay.compared > 0)
        print(
            "library processes: \(madeSteps) steps and \(saves) saves by the surviving processes, \(madeChecks) checks of"
                + " their views, \(killed.count) processes killed, \(replay.transactions) transactions, \(replay.objects) objects,"
                + " \(replay.compared) values checked against the history")
    }
}
