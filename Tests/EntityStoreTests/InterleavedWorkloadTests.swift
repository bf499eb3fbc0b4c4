import EntityStore
import Foundation
import TestSupport
import Testing

/// The multi-process library workload (`LibraryWorkload`) with its parties taking turns in one process, seeded, so
/// that what it finds reproduces: three long-lived contexts under different merge policies, each merging the
/// others' saves from the history as another process does (or, for even seeds, two of them as the store delivers
/// them), with short-lived contexts, child contexts, undo, refreshes and the store's batch changes in between.
/// After every step each party's controllers equal their callback replicas and, when nothing was saved since its
/// last merge, a fresh fetch; its unchanged objects equal the store's.
@Suite struct InterleavedWorkloadTests {
    static var steps: Int { ProcessInfo.processInfo.environment["ENTITYSTORE_STRESS"] == nil ? 600 : 20_000 }

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
        #expect(parties.map(\.saves).reduce(0, +) > Self.steps / 4)
        #expect(parties.map(\.checks).reduce(0, +) > Self.steps / 2)
    }
}
