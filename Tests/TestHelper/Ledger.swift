import EntityStore
import Foundation
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The ledger workload: writers move amounts between accounts, open accounts with money taken from another and
/// close accounts moving their balance (as read) to another; readers check the total in one snapshot. Every
/// operation is one save under `.error`, retried from a fresh read on a conflict, so money is never created or lost.
enum Ledger {
    static let accounts = 20
    static let opening: Int64 = 1000
    static var total: Int64 { Int64(accounts) * opening }

    static func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Account") {
                Attribute("name", .string, indexed: true)
                Attribute("balance", .int64, default: 0)
            }
        }
    }

    static func create(at path: String) throws {
        let store = try PersistentStore.open(path: path, schema: schema())
        let context = ObjectContext(store: store)
        for i in 0..<accounts {
            let account = try context.insert("Account")
            try account.setValue(.string("a\(i)"), forKey: "name")
            try account.setValue(.int(opening), forKey: "balance")
        }
        try context.save()
    }

    /// The total of all balances and the number of accounts, from one snapshot.
    static func state(_ store: PersistentStore) throws -> (total: Int64, accounts: Int) {
        let rows = try ObjectContext(store: store).fetchSnapshot(FetchRequest(entity: "Account")).rows
        let index = store.schema.entity("Account")!.attributeIndex("balance")!
        var total: Int64 = 0
        for row in rows { if case .int(let balance) = row.values[index] { total += balance } }
        return (total, rows.count)
    }

    static func balance(_ account: ManagedObject) throws -> Int64 {
        guard case .int(let balance) = try account["balance"] else {
            throw HelperFailure("\(account.objectID) has no balance")
        }
        return balance
    }

    /// One operation in one save; `false` when it met a conflict (nothing was written).
    static func operate(
        _ store: PersistentStore, writer: String, serial: Int, using g: inout SeededGenerator
    ) throws
        -> Bool
    {
        let context = ObjectContext(store: store, name: writer)
        let accounts = try context.fetch(FetchRequest(entity: "Account"))
        guard accounts.count >= 2 else { return true }
        let from = accounts.randomElement(using: &g)!
        var to = accounts.randomElement(using: &g)!
        while to === from { to = accounts.randomElement(using: &g)! }
        switch Int.random(in: 0..<10, using: &g) {
        case 0 where accounts.count < 40:
            // Open an account with money taken from another.
            let amount = Int64.random(in: 1...50, using: &g)
            let opened = try context.insert("Account")
            try opened.setValue(.string("\(writer)-\(serial)"), forKey: "name")
            try opened.setValue(.int(amount), forKey: "balance")
            try from.setValue(.int(try balance(from) - amount), forKey: "balance")
        case 1 where accounts.count > 10:
            // Close an account: its balance as read goes to another.
            try to.setValue(.int(try balance(to) + balance(from)), forKey: "balance")
            try context.delete(from)
        default:
            let amount = Int64.random(in: 1...50, using: &g)
            try from.setValue(.int(try balance(from) - amount), forKey: "balance")
            try to.setValue(.int(try balance(to) + amount), forKey: "balance")
        }
        do {
            try context.save()
            return true
        } catch let error as EntityStoreError where error.code == .conflict {
            return false
        }
    }

    /// `operations` ledger operations, each acknowledged with `op N` once it is saved or refused.
    static func write(path: String, operations: Int, seed: UInt64) throws {
        let store = try PersistentStore.open(path: path, schema: schema())
        var g = SeededGenerator(seed: seed)
        let writer = "w\(getpid())"
        var saves = 0
        var conflicts = 0
        print("ready")
        fflush(nil)
        for serial in 1...operations {
            if try operate(store, writer: writer, serial: serial, using: &g) { saves += 1 } else { conflicts += 1 }
            print("op \(serial)")
            fflush(nil)
        }
        print("saves \(saves) conflicts \(conflicts)")
    }

    /// Checks the total in one snapshot after another, until standard input ends (and at least once).
    static func read(path: String) throws {
        let store = try PersistentStore.open(path: path, schema: schema())
        let stop = StopRequest()
        var snapshots = 0
        var violations = 0
        print("ready")
        fflush(nil)
        repeat {
            let (total, _) = try state(store)
            if total != Self.total {
                violations += 1
                // A few lines only: nobody may be reading the pipe until the end.
                if violations <= 5 { FileHandle.standardError.write(Data("violation: total \(total)\n".utf8)) }
            }
            snapshots += 1
        } while !stop.isRequested
        print("snapshots \(snapshots) violations \(violations)")
    }
}
