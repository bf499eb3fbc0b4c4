import EntityStore
import Foundation
import LMDB
import TestSupport
import Testing

@Suite struct FaultInjectionTests {
    /// The state a failed save must leave the context in.
    struct ContextState: Equatable {
        var inserted: [ObjectID]
        var updated: [ObjectID]
        var changes: [[String: Value]]
    }

    func state(_ context: ObjectContext) -> ContextState {
        ContextState(
            inserted: context.insertedObjects.map(\.objectID), updated: context.updatedObjects.map(\.objectID),
            changes: context.updatedObjects.map { $0.changedValues() }
                + context.insertedObjects.map { $0.changedValues() })
    }

    @Test(arguments: [("EIO", EIO), ("ENOSPC", ENOSPC), ("MDB_MAP_FULL", -30792)])
    func aFaultAtEveryCallOfASaveLeavesStoreAndContextUnchangedAndTheSaveRetries(name: String, code: Int32) throws {
        let dir = try TemporaryDirectory(prefix: "fault-test")
        defer { dir.remove() }
        let path = dir.path("bank.store")
        try Fixtures.makeBank(at: path)
        let store = try PersistentStore.open(path: path, schema: try Fixtures.bankSchema())
        var generator = SeededGenerator(seed: 7)
        var serial: Int64 = 1
        var faultsThatFired = 0
        for call in 1...400 {
            let context = ObjectContext(store: store)
            // Prepare a transfer without saving it: set up the changes, then save under the fault.
            let accounts = try context.fetch(FetchRequest(entity: "Account", sortKeys: [SortKey("name")]))
            let (from, to) = (
                accounts[Int.random(in: 0..<10, using: &generator)], accounts[Int.random(in: 0..<10, using: &generator)]
            )
            guard case .int(let a) = try from["balance"] else { return }
            try from.setValue(.int(a - 5), forKey: "balance")
            guard case .int(let b) = try to["balance"] else { return }
            try to.setValue(.int(b + 5), forKey: "balance")
            let transfer = try context.insert("Transfer")
            try transfer.setValue(5, forKey: "amount")
            try transfer.setValue(.int(serial), forKey: "serial")
            try transfer.setObject(from, forKey: "from")
            try transfer.setObject(to, forKey: "to")
            context.processPendingChanges()
            let before = state(context)
            let storeBefore = try Fixtures.bankState(store)
            let historyBefore = try store.lastTransaction()

            store.environment.injectFault(afterCalls: call, code: code)
            var failed = false
            do {
                try context.save()
            } catch {
                failed = true
                #expect(code != -30792, "MDB_MAP_FULL reached the caller: \(error)")
            }
            let fired = !store.environment.hasPendingFault
            store.environment.clearInjectedFault()
            if failed {
                faultsThatFired += 1
                #expect(state(context) == before, "\(name) at call \(call)")
                #expect(try Fixtures.bankState(store) == storeBefore, "\(name) at call \(call)")
                #expect(try store.lastTransaction() == historyBefore)
                try context.save()  // the retry succeeds
            } else if fired {
                faultsThatFired += 1  // a map-full fault, absorbed by growing the map
            }
            let after = try Fixtures.bankState(store)
            #expect(after.total == Fixtures.bankTotal)
            #expect(after.transfers == storeBefore.transfers + 1)
            #expect(try store.checkIntegrity().findings.isEmpty, "\(name) at call \(call)")
            serial += 1
            if !fired { break }  // the save no longer reaches the Nth call: every call has been covered
        }
        #expect(faultsThatFired >= 8, "only \(faultsThatFired) calls of a save were covered")
        print(
            "fault injection \(name): \(faultsThatFired) calls of a save failed in turn; store and context unchanged each time"
        )
    }
}
