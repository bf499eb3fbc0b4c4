import Foundation
import LMDB
import TestSupport
import Testing

@testable import EntityStore

/// Threads race on the same objects through contexts of their own with the property-level merge policy, each
/// writing an attribute (or the to-one relationship) no other thread writes: whatever the interleaving, no save may
/// lose another thread's saved value, and the store stays consistent (indexes, inverses).
@Suite struct PropertyLevelRaceTests {
    @Test func racingContextsLoseNoOneElsesSavedValues() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let setup = world.context
        let owners = try world.addOwners(["o1", "o2", "o3"]).map(\.objectID)
        let items = try (0..<12).map { i in try world.add("i\(i)", group: "A", rank: 0) }
        try setup.save()
        let ids = items.map(\.objectID)
        let store = world.store
        let rounds = TestScale.size(150, stress: 3_000)

        // What each thread saved last, per item: its key, then the item's index and the value.
        let keys = ["title", "rank", "position", "owner"]
        let lastSaved = Locked<[String: [Int: Value]]>([:])
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: keys.count) { thread in
            let key = keys[thread]
            let context = ObjectContext(store: store, name: key)
            context.mergePolicy = .propertyLevel
            var g = SeededGenerator(seed: UInt64(thread + 1))
            do {
                for round in 0..<rounds {
                    var written: [Int: Value] = [:]
                    for _ in 0..<Int.random(in: 1...3, using: &g) {
                        let index = Int.random(in: 0..<ids.count, using: &g)
                        let item = try context.existingObject(with: ids[index])
                        let value: Value
                        switch key {
                        case "title": value = .string("t\(round)-\(index)")
                        case "rank": value = .int(Int64(round * 100 + index))
                        case "position": value = .double(Double(round) + Double(index) / 100)
                        default:
                            let owner = owners[Int.random(in: 0..<owners.count, using: &g)]
                            try item.setObject(try context.existingObject(with: owner), forKey: "owner")
                            value = .string(owner.description)
                            written[index] = value
                            continue
                        }
                        try item.setValue(value, forKey: key)
                        written[index] = value
                    }
                    try context.save()
                    lastSaved.withLock { $0[key, default: [:]].merge(written) { $1 } }
                    // Now and then, start over from the store (the next round's reads are all fresh).
                    if Int.random(in: 0..<5, using: &g) == 0 { context.reset() }
                }
            } catch {
                failures.withLock { $0.append("\(key): \(error)") }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")

        let check = ObjectContext(store: store)
        for (key, values) in lastSaved.withLock({ $0 }) {
            for (index, expected) in values {
                let item = try check.existingObject(with: ids[index])
                let stored: Value =
                    key == "owner"
                    ? .string(try item.object(forKey: "owner")?.objectID.description ?? "nil") : try item[key]
                #expect(stored == expected, "item \(index)'s \(key): stored \(stored), last saved \(expected)")
            }
        }
        let (findings, _) = try store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings)")
        let replay = try HistoryReplay(store)
        #expect(replay.problems.isEmpty, "\(replay.problems.prefix(40))")
        // Each owner's items are exactly the items that name it.
        for owner in owners {
            let members = try check.existingObject(with: owner).objectIDs(forKey: "items")
            let naming = try ids.filter {
                try check.existingObject(with: $0).object(forKey: "owner")?.objectID == owner
            }
            #expect(Set(members) == Set(naming), "owner \(owner)")
        }
    }

    /// Threads moving the same items between owners at once, through the to-one and through the to-many, under
    /// every policy but the error one: each item ends with one owner that lists it, whatever the interleaving.
    @Test(arguments: [MergePolicy.propertyLevel, .contextWins, .storeWins])
    func racingMovesKeepEveryToOneSingleAndItsInverseExact(policy: MergePolicy) throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let owners = try world.addOwners(["o1", "o2", "o3"]).map(\.objectID)
        let ids = try (0..<6).map { i in try world.add("i\(i)", group: "A").objectID }
        try world.context.save()
        let store = world.store
        let rounds = TestScale.size(150, stress: 3_000)
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 3) { thread in
            let context = ObjectContext(store: store, name: "mover \(thread)")
            context.mergePolicy = policy
            var g = SeededGenerator(seed: UInt64(thread + 10))
            do {
                for _ in 0..<rounds {
                    let item = try context.existingObject(with: ids.randomElement(using: &g)!)
                    let owner = try context.existingObject(with: owners.randomElement(using: &g)!)
                    if thread == 0 {
                        try owner.add(item, toKey: "items")
                    } else {
                        try item.setObject(owner, forKey: "owner")
                    }
                    try context.save()
                    if Bool.random(using: &g) { context.reset() }
                }
            } catch {
                failures.withLock { $0.append("mover \(thread): \(error)") }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        let (findings, _) = try store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings)")
        let replay = try HistoryReplay(store)
        #expect(replay.problems.isEmpty, "\(replay.problems.prefix(40))")
        let check = ObjectContext(store: store)
        var listed: [ObjectID] = []
        for owner in owners {
            let members = try check.existingObject(with: owner).objectIDs(forKey: "items")
            for member in members {
                #expect(try check.existingObject(with: member).objectIDs(forKey: "owner") == [owner])
            }
            listed += members
        }
        #expect(listed.sorted() == ids.sorted())
    }
}
