import EntityStore
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Four writer processes move money between accounts, open and close accounts (a close moves the balance as read);
/// two reader processes check the total in every snapshot; one writer is killed halfway. No snapshot may show
/// another total, the final total is exact and the integrity check is clean.
@Suite struct LedgerTests {
    @Test func writersReadersAndAKilledWriterKeepTheTotalExact() throws {
        let seconds = ProcessInfo.processInfo.environment["ENTITYSTORE_STRESS"] == nil ? 4.0 : 60.0
        let dir = try TemporaryDirectory(prefix: "ledger-test")
        defer { dir.remove() }
        let path = dir.path("ledger.store")
        let created = try ChildProcess.helper(["ledger-create", path])
        #expect(created.status == 0, "\(created.stderr)")
        let helper = ChildProcess.executable("es-test-helper")
        let writers = try (0..<4).map { i in
            try ChildProcess.start(helper, ["ledger-writer", path, "\(seconds)", "\(1000 + i)"])
        }
        let readers = try (0..<2).map { _ in try ChildProcess.start(helper, ["ledger-reader", path, "\(seconds)"]) }
        usleep(UInt32(seconds / 2 * 1_000_000))
        kill(writers[0].0.processIdentifier, SIGKILL)
        var saves = 0
        var conflicts = 0
        var snapshots = 0
        for (i, (process, out, err)) in writers.enumerated() {
            let stdout = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            if i == 0 { continue }
            #expect(process.terminationStatus == 0, "writer \(i): \(stderr)")
            let numbers = stdout.split(separator: "\n").last?.split(separator: " ") ?? []
            if numbers.count == 4 {
                saves += Int(numbers[1]) ?? 0
                conflicts += Int(numbers[3]) ?? 0
            }
        }
        for (process, out, err) in readers {
            let stdout = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(stderr)")
            #expect(stdout.contains("violations 0"), "\(stdout) \(stderr.prefix(500))")
            let numbers = stdout.split(separator: "\n").last?.split(separator: " ") ?? []
            if numbers.count == 4 { snapshots += Int(numbers[1]) ?? 0 }
        }
        #expect(saves > 20, "the writers got work done (\(saves) saves, \(conflicts) conflicts)")

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
            "ledger: \(seconds) s, \(saves) saves and \(conflicts) conflicts by the surviving writers,"
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
