import EntityStore
import Foundation
import TestSupport
import Testing

/// The multi-process library workload (`LibraryWorkload`) with its parties taking turns in one process, seeded, so
/// that what it finds reproduces: three long-lived contexts under different merge policies, each merging the
/// others' saves from the history as another process does (or, for even seeds, two of them as the store delivers
/// them), with short-lived contexts, child contexts, undo, refreshes and the store's batch changes in between.
/// After every step each party's controllers equal their callback replicas and, when nothing was saved since its
/// last merge, a fresh fetch; its unchanged objects equal the store's. At the end the history, replayed, gives back
/// what the store holds (`HistoryReplay`).
@Suite struct InterleavedWorkloadTests {
    static var steps: Int { TestScale.size(250, stress: 2_000) }

    @Test(arguments: [1 as UInt64, 2, 3, 4])
    func partiesTakingTurnsKeepTheirViewsEqualToTheStore(seed: UInt64) throws {
        let temporary = try TemporaryStore(schema: try Fixtures.librarySchemaWithDerivations())
        defer { temporary.remove() }
        let store = temporary.store
        try LibraryWorkload.seed(store)
        let parties = try (0..<3).map {
            // Even seeds: two parties merge the others' saves as the store delivers them, one from the history.
            try LibraryWorkload(
                store: store, name: "p\($0)", seed: seed * 10 + UInt64($0),
                mergesAutomatically: seed % 2 == 0 && $0 != 0)
        }
        var g = SeededGenerator(seed: seed)
        for _ in 0..<Self.steps {
            try parties.randomElement(using: &g)!.step()
            let violations = parties.flatMap(\.violations)
            guard violations.isEmpty else {
                Issue.record("seed \(seed): \(violations.prefix(3))")
                return
            }
        }
        #expect(try store.checkIntegrity().findings.isEmpty)
        let replay = try HistoryReplay(store)
        #expect(replay.problems.isEmpty, "seed \(seed): \(replay.problems.prefix(40))")
        #expect(replay.compared > 10)
        #expect(parties.map(\.saves).reduce(0, +) > Self.steps / 4)
        #expect(parties.map(\.checks).reduce(0, +) > Self.steps / 2)
    }
}

/// The same parties on threads of their own, sharing one store instance: saves, merges and the checks' reads race
/// (a check is made only when nothing was saved between the party's merge and its reads).
@Suite struct ThreadedWorkloadTests {
    final class Findings: @unchecked Sendable {
        // @unchecked Sendable: every field is only touched while `lock` is held.
        let lock = NSLock()
        var violations: [String] = []
        var errors: [String] = []
        var steps = 0
        var checks = 0
    }

    @Test(arguments: [1 as UInt64, 2])
    func partiesOnThreadsOfTheirOwnKeepTheirViewsEqualToTheStore(seed: UInt64) throws {
        // Each party makes `steps` steps and, at least, `checks` checks of its view (a check needs a moment when no
        // other thread commits: a party short of them goes on, up to 20 times its steps).
        let (steps, checks) = TestScale.size((40, 4), stress: (600, 40))
        let temporary = try TemporaryStore(schema: try Fixtures.librarySchemaWithDerivations())
        defer { temporary.remove() }
        let store = temporary.store
        try LibraryWorkload.seed(store)
        let findings = Findings()
        let group = DispatchGroup()
        for i in 0..<3 {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                do {
                    // Made and used on this thread only.
                    let party = try LibraryWorkload(store: store, name: "t\(i)", seed: seed * 10 + UInt64(i))
                    while party.violations.isEmpty
                        && (party.steps < steps || (party.checks < checks && party.steps < steps * 20))
                    {
                        try party.step()
                    }
                    findings.lock.withLock {
                        findings.violations += party.violations
                        findings.steps += party.steps
                        findings.checks += party.checks
                    }
                } catch {
                    findings.lock.withLock { findings.errors.append("party \(i): \(error)") }
                }
            }
            thread.stackSize = 8 << 20
            thread.start()
        }
        group.wait()
        findings.lock.withLock {
            #expect(findings.errors.isEmpty, "\(findings.errors)")
            #expect(findings.violations.isEmpty, "\(findings.violations.prefix(3))")
            #expect(findings.steps >= 3 * steps)
            #expect(findings.checks >= 3 * checks, "the views were compared with the store (\(findings.checks) times)")
        }
        #expect(try store.checkIntegrity().findings.isEmpty)
        let replay = try HistoryReplay(store)
        #expect(replay.problems.isEmpty, "seed \(seed): \(replay.problems.prefix(40))")
    }
}
