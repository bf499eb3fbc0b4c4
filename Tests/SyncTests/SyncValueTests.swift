import EntityStore
import EntityStoreSync
import Foundation
import TestSupport
import Testing

/// Values at the edges of their types reach the other store exactly: PostgreSQL keeps them as text.
@Suite(
    "Sync: hostile values",
    .enabled(if: ScratchPostgres.isAvailable, "PostgreSQL is not installed (apt-get install postgresql libpq-dev)"))
struct SyncValueTests {
    @Test("strings with NUL, NaN and signed zeros, far dates, long decimals and every byte arrive exactly")
    func hostileValuesArriveExactly() throws {
        let zone = try SyncZone()
        defer { zone.remove() }
        let a = try zone.open("a")
        let b = try zone.open("b")
        let (syncA, syncB) = (zone.engine("a"), zone.engine("b"))
        // A NUL (PostgreSQL's text cannot hold one: a string with it stopped every push of the store), a
        // combining mark, a byte-order mark, a long string, a string that looks like a relationship, escapes.
        let titles = [
            "nul\u{0}inside", "\u{0}", "e\u{301}", "\u{FEFF}bom", String(repeating: "x", count: 200_000), "", "r:abc",
            "tab\tnew\nline", "🧪👩‍👩‍👧", "\\x00 {\"quoted\"}, NULL",
        ]
        // NaNs with a payload too (quiet and signaling, of either sign), as Swift prints them.
        let estimates: [Double] = [
            .nan, .infinity, -.infinity, -0.0, 5e-324, .greatestFiniteMagnitude, 0.1,
            Double(bitPattern: 0x7FF8_0000_0000_0001), Double(bitPattern: 0x7FF0_0000_0000_0002),
            Double(bitPattern: 0xFFF8_0000_0000_0003),
        ]
        let dates: [Date] = [
            .distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: -0.0),
            Date(timeIntervalSinceReferenceDate: 1e-300),
        ]
        let context = ObjectContext(store: a)
        for (i, title) in titles.enumerated() {
            let task = try context.insert("Task")
            try task.setValue(.string(title), forKey: "title")
            try task.setValue(.int(i == 0 ? .min : Int64(i)), forKey: "priority")
            try task.setValue(.double(estimates[i % estimates.count]), forKey: "estimate")
            try task.setValue(.date(dates[i % dates.count]), forKey: "due")
            try task.setValue(.data([UInt8](0...255) + [UInt8](repeating: 0, count: i * 1000)), forKey: "attachment")
        }
        for digits in ["0", "-1.5", "1e-120", "12345678901234567890123456789012345678", "0.000001"] {
            let project = try context.insert("Project")
            try project.setValue(.string(digits), forKey: "name")
            try project.setValue(.decimal(try #require(Decimal(string: digits))), forKey: "budget")
        }
        try context.save()
        try syncA.syncNow()
        let pulled = try syncB.syncNow()
        #expect(pulled.problems.isEmpty, "\(pulled.problems)")
        #expect(pulled.pulledObjects == titles.count + 5)

        let reader = ObjectContext(store: b)
        let arrived = try reader.fetch(FetchRequest(entity: "Task", sortKeys: [SortKey("priority")]))
        #expect(try arrived.map { try $0.value(forKey: "title") } == titles.map(Value.string))
        for (i, task) in arrived.enumerated() {
            guard case .double(let estimate) = try task.value(forKey: "estimate") else {
                Issue.record("task \(i) has no estimate")
                continue
            }
            #expect(estimate.bitPattern == estimates[i % estimates.count].bitPattern, "task \(i)'s estimate")
        }
        #expect(try zone.contents("a") == zone.contents("b"))
    }
}

/// A state file of an earlier version (which kept the state beside the store) is taken over by the engine, and
/// shown exactly by `store-inspect sync-status` before, which never stops on its numbers.
@Suite("Sync: a state file from an earlier version")
struct SyncStateFileTests {
    @Test("a state file pushed past the store's history makes it a new replica, and sync-status shows it exactly")
    func aStatePushedPastTheStoresHistory() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("lib.store")
        do {
            let store = try PersistentStore.open(path: path, schema: try Fixtures.syncSchema())
            let context = ObjectContext(store: store)
            try context.insert("Project").setValue("one", forKey: "name")
            try context.save()
        }
        let state = """
            {"zone": "default", "storeID": "7F000000-0000-4000-8000-000000000000",
             "pushedThrough": 18446744073709551615, "pulledThrough": -9223372036854775808,
             "clock": 18446744073709551615, "refetch": [], "pendingTombstones": []}
            """
        try Data(state.utf8).write(to: SyncState.url(inStore: path))
        let inspect = try ChildProcess.run(
            ChildProcess.executable("store-inspect"), ["sync-status", path, "--format", "json"])
        #expect(inspect.status == 0, "\(inspect.stderr)")
        #expect(inspect.stdout.contains("\"pushed through\": \"18446744073709551615\""), "\(inspect.stdout)")
        #expect(inspect.stdout.contains("\"pulled through\": -9223372036854775808"), "\(inspect.stdout)")
        // The store is older than the file (restored from a backup): a new replica, whose own history starts
        // with its first entry saved after the file's last push (it has none: every entry is its own).
        let store = try PersistentStore.open(path: path, schema: try Fixtures.syncSchema())
        let engine = try SyncEngine(store: store, configuration: .init(connection: "host=/nonexistent"))
        #expect(engine.status.formerStoreIDs == [UUID(uuidString: "7F000000-0000-4000-8000-000000000000")!])
        #expect(engine.status.ownObjectsFrom == 1)
        #expect(engine.status.pushedThrough == 0)
        #expect(!FileManager.default.fileExists(atPath: SyncState.url(inStore: path).path), "taken over")
        #expect(try SyncState.read(from: store) == engine.status)
    }
}
