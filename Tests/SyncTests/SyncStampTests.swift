import EntityStore
import Foundation
import TestSupport
import Testing

@testable import EntityStoreSync

/// A change's stamp is decided by what its store had seen when the change was saved: a pull that comes between the
/// save and its push never makes it later, so the last writer wins, by the saves' own times and causal order.
@Suite(
    "Sync: stamps fixed at save time",
    .enabled(if: ScratchPostgres.isAvailable, "PostgreSQL is not installed (apt-get install postgresql libpq-dev)"))
struct SyncStampTests {
    /// Pulls for `engine` without pushing, as the pull of a sync whose push ran before a local save does.
    static func pullOnly(_ engine: SyncEngine) throws {
        try engine.lock.withLock {
            var report = SyncReport()
            try engine.pull(try engine.connected(), &report)
        }
    }

    /// Pushes for `engine` without pulling.
    static func pushOnly(_ engine: SyncEngine) throws {
        try engine.lock.withLock {
            var report = SyncReport()
            try engine.push(try engine.connected(), &report)
        }
    }

    /// Waits until the wall clock has moved on by a millisecond: stamps keep milliseconds, and the model below takes
    /// saves in distinct milliseconds as ordered by time.
    static func nextMillisecond() {
        let now = (Date().timeIntervalSince1970 * 1000).rounded(.down)
        while (Date().timeIntervalSince1970 * 1000).rounded(.down) <= now + 1 { usleep(200) }
    }

    @Test("a save made during its store's own sync loses to a later save of another store")
    func aSaveDuringTheStoresSyncLosesToALaterOne() throws {
        let zone = try SyncZone()
        defer { zone.remove() }
        let a = try zone.open("a")
        let b = try zone.open("b")
        let made = ObjectContext(store: b)
        try made.insert("Task").setValue("X", forKey: "title")
        try made.save()
        try zone.sync("b", "a")
        func task(_ store: PersistentStore) throws -> (ObjectContext, ManagedObject) {
            let context = ObjectContext(store: store)
            return (context, try #require(try context.fetch(FetchRequest(entity: "Task")).first))
        }
        // A's sync has pushed; while it pulls, A saves, and B saves later and pushes, so that A's pull brings B's
        // later value before A's save is pushed.
        let (aContext, aTask) = try task(a)
        try aTask.setValue("A, first", forKey: "title")
        try aContext.save()
        Self.nextMillisecond()
        let (bContext, bTask) = try task(b)
        try bTask.setValue("B, later", forKey: "title")
        try bContext.save()
        try zone.sync("b")
        try Self.pullOnly(zone.engine("a"))
        for _ in 0..<3 { try zone.sync("a", "b") }
        #expect(try task(a).1.value(forKey: "title") == "B, later")
        #expect(try task(b).1.value(forKey: "title") == "B, later")
        #expect(try zone.contents("a") == zone.contents("b"))
    }

    @Test("under newestWins, a delete made during its store's own sync loses to a later change, on that store too")
    func aDeleteDuringTheStoresSyncLosesToALaterChangeUnderNewestWins() throws {
        let zone = try SyncZone()
        defer { zone.remove() }
        let a = try zone.open("a", deletePolicy: .newestWins)
        let b = try zone.open("b", deletePolicy: .newestWins)
        let made = ObjectContext(store: b)
        try made.insert("Task").setValue("X", forKey: "title")
        try made.save()
        try zone.sync("b", "a")
        // A deletes the task; B changes it later and pushes; A's pull brings the change before A's delete is
        // pushed (the change is left to the delete, which is pushed next), then A pushes: the change is newer, so
        // the task lives, and A, whose own delete lost, must get it back.
        let aContext = ObjectContext(store: a)
        try aContext.delete(try #require(try aContext.fetch(FetchRequest(entity: "Task")).first))
        try aContext.save()
        Self.nextMillisecond()
        let bContext = ObjectContext(store: b)
        try #require(try bContext.fetch(FetchRequest(entity: "Task")).first).setValue(4, forKey: "priority")
        try bContext.save()
        try zone.sync("b")
        try Self.pullOnly(zone.engine("a"))
        for _ in 0..<3 { try zone.sync("a", "b") }
        for store in [a, b] {
            let tasks = try ObjectContext(store: store).fetch(FetchRequest(entity: "Task"))
            #expect(tasks.count == 1)
            #expect(try tasks.first?.value(forKey: "priority") == 4)
            #expect(try tasks.first?.value(forKey: "title") == "X")
        }
        #expect(try zone.contents("a") == zone.contents("b"))
    }

    @Test("random interleavings of saves, pushes and pulls on three stores end with the last save of each value")
    func randomInterleavingsEndWithTheLastSave() throws {
        let zone = try SyncZone()
        defer { zone.remove() }
        let names = ["a", "b", "c"]
        let stores = try names.map { try zone.open($0) }
        // Two tasks everyone has, whose two values the stores keep changing (few values: many clashes).
        let context = ObjectContext(store: stores[0])
        for i in 0..<2 { try context.insert("Task").setValue(.string("t\(i)"), forKey: "title") }
        try context.save()
        try zone.sync("a", "b", "c")
        let ids = try ObjectContext(store: stores[0]).fetch(FetchRequest(entity: "Task")).map {
            try zone.engine("a").globalID(of: $0)
        }
        // The model: the value of each property is the last one saved (saves are in distinct milliseconds, one
        // after the other, so the last is also last in causal order).
        var expected: [String: Value] = [:]
        var generator = SeededGenerator(seed: 73)
        let steps = TestScale.size(150, stress: 1_500)
        var saves = 0
        func save(_ store: Int, _ id: UUID, _ key: String, at step: Int) throws {
            Self.nextMillisecond()
            let engine = zone.engine(names[store])
            let local = ObjectContext(store: stores[store])
            let task = try #require(
                try local.fetch(FetchRequest(entity: "Task")).first { try engine.globalID(of: $0) == id })
            let value: Value = key == "title" ? .string("\(names[store]) \(step)") : .int(Int64(step))
            try task.setValue(value, forKey: key)
            try local.save()
            expected["\(id.uuidString).\(key)"] = value
            saves += 1
        }
        for step in 0..<steps {
            let store = Int.random(in: 0..<3, using: &generator)
            let engine = zone.engine(names[store])
            let id = ids.randomElement(using: &generator)!
            let key = ["title", "priority"].randomElement(using: &generator)!
            switch Int.random(in: 0..<8, using: &generator) {
            case 0, 1, 2: try save(store, id, key, at: step)
            case 3: try Self.pushOnly(engine)
            case 4: try Self.pullOnly(engine)
            case 5:
                // A save, a later save of the same value elsewhere pushed, then the first store's pull before its
                // push: the interleaving of a save made while its store's own sync pulls.
                let other = (store + Int.random(in: 1...2, using: &generator)) % 3
                try save(store, id, key, at: step)
                try save(other, id, key, at: step)
                try Self.pushOnly(zone.engine(names[other]))
                try Self.pullOnly(engine)
            default: try engine.syncNow()
            }
        }
        #expect(try syncUntilQuiet(names.map { zone.engine($0) }))
        var mismatches: [String] = []
        for (index, name) in names.enumerated() {
            for task in try ObjectContext(store: stores[index]).fetch(FetchRequest(entity: "Task")) {
                let id = try zone.engine(name).globalID(of: task).uuidString
                for key in ["title", "priority"] {
                    guard let value = expected["\(id).\(key)"] else { continue }
                    if try task.value(forKey: key) != value {
                        mismatches.append("\(name): \(id).\(key) is \(try task.value(forKey: key)), not \(value)")
                    }
                }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) mismatches of \(saves) saves: \(mismatches.prefix(5))")
        #expect(saves > 0)
    }
}
