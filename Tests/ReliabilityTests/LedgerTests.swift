import EntityStore
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Four writer processes move money between accounts, open and close accounts (a close moves the balance as read);
/// two reader processes check the total in every snapshot; one writer is killed part of the way. No snapshot may show
/// another total, the final total is exact and the integrity check is clean.
@Suite struct LedgerTests {
    @Test func writersReadersAndAKilledWriterKeepTheTotalExact() throws {
        // Each writer makes `operations` operations; the first is killed after a random number of them.
        let operations = TestScale.size(300, stress: 5_000)
        let dir = try TemporaryDirectory(prefix: "ledger-test")
        defer { dir.remove() }
        let path = dir.path("ledger.store")
        let created = try ChildProcess.helper(["ledger-create", path])
        #expect(created.status == 0, "\(created.stderr)")
        let readers = try (0..<2).map { _ in try RunningProcess.helper(["ledger-reader", path]) }
        let writers = try (0..<4).map { i in
            try RunningProcess.helper(["ledger-writer", path, "\(operations)", "\(1000 + i)"])
        }
        var generator = SystemRandomNumberGenerator()
        try writers[0].waitForLines(
            Int.random(in: operations / 4...operations / 2, using: &generator), "operations"
        ) { $0.hasPrefix("op ") }
        writers[0].kill()
        var saves = 0
        var conflicts = 0
        var snapshots = 0
        for (i, writer) in writers.enumerated() {
            let output = writer.finish()
            if i == 0 {
                #expect(output.terminationReason == .uncaughtSignal, "the first writer was killed mid-run")
                continue
            }
            #expect(output.status == 0, "writer \(i): \(output.stderr)")
            let numbers = output.stdout.split(separator: "\n").last?.split(separator: " ") ?? []
            #expect(numbers.count == 4, "writer \(i): \(output.stdout.suffix(200))")
            if numbers.count == 4 {
                saves += Int(numbers[1]) ?? 0
                conflicts += Int(numbers[3]) ?? 0
            }
        }
        #expect(saves + conflicts == 3 * operations, "every operation of the surviving writers was saved or refused")
        #expect(saves > 0)
        for reader in readers {
            // The readers read on while the writers write (they began first), and stop when told.
            reader.stop()
            let output = reader.finish()
            #expect(output.status == 0, "\(output.stderr)")
            #expect(output.stdout.contains("violations 0"), "\(output.stdout) \(output.stderr.prefix(500))")
            let numbers = output.stdout.split(separator: "\n").last?.split(separator: " ") ?? []
            if numbers.count == 4 { snapshots += Int(numbers[1]) ?? 0 }
        }

        let store = try PersistentStore.open(path: path, schema: try ledgerSchema())
        let context = ObjectContext(store: store)
        var total: Int64 = 0
        for account in try context.fetch(FetchRequest(entity: "Account")) {
            if case .int(let balance) = try account["balance"] { total += balance }
        }
        #expect(total == 20 * 1000)
        #expect(try store.checkIntegrity().findings.isEmpty)
        // No account was deleted twice in the history.
        var deletes: [ObjectID: Int] = [:]
        for change in try store.history().flatMap(\.changes) where change.kind == .delete {
            deletes[change.objectID, default: 0] += 1
        }
        #expect(deletes.values.allSatisfy { $0 == 1 })
        print(
            "ledger: \(operations) operations a writer, \(saves) saves and \(conflicts) conflicts by the surviving writers,"
                + " \(snapshots) snapshots checked, \(deletes.count) accounts closed, total \(total)")
    }

    func ledgerSchema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Account") {
                Attribute("name", .string, indexed: true)
                Attribute("balance", .int64, default: 0)
            }
        }
    }
}
