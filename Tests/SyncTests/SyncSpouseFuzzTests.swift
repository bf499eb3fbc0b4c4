import EntityStore
import EntityStoreSync
import Foundation
import TestSupport
import Testing

/// Three stores marry and part people at random (`spouse`, a to-one relationship that is its own inverse) and sync
/// in a random order: every store then holds the same couples, and its integrity check finds nothing.
@Suite(
    "Sync: a to-one relationship that is its own inverse converges",
    .enabled(if: ScratchPostgres.isAvailable, "PostgreSQL is not installed (apt-get install postgresql libpq-dev)"))
struct SyncSpouseFuzzTests {
    static func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Person") {
                Attribute("syncID", .uuid, optional: true, unique: true)
                Attribute("name", .string)
                Relationship("spouse", to: "Person", inverse: "spouse")
            }
        }
    }

    /// The couples as text, person by person in global-ID order.
    static func contents(_ store: PersistentStore, _ engine: SyncEngine) throws -> String {
        let context = ObjectContext(store: store)
        return try context.fetch(FetchRequest(entity: "Person")).map { person in
            let spouse = try person.object(forKey: "spouse").map { try engine.globalID(of: $0).uuidString }
            return "\(try engine.globalID(of: person).uuidString) \(try person["name"]) \(spouse ?? "-")"
        }.sorted().joined(separator: "\n")
    }

    /// A marries B on one store while A marries C on another, later: the server holds A's side from the later
    /// marriage and B's from the earlier, which disagree. Every store ends with A and C married and B single (before,
    /// each store's result depended on the order it applied the sides in).
    @Test("two marriages of one person made at once end alike everywhere")
    func concurrentMarriagesOfOnePersonEndAlike() throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let replicas = try ["one", "two", "three"].map { name -> (store: PersistentStore, engine: SyncEngine) in
            let store = try PersistentStore.open(path: directory.path("\(name).store"), schema: Self.schema())
            return (store, try SyncEngine(store: store, configuration: .init(connection: server.connection)))
        }
        // Eight trios at once: the order a store applied the sides in was its dictionary's, so one trio could agree
        // everywhere by chance.
        let trios = 0..<8
        let making = ObjectContext(store: replicas[0].store)
        for trio in trios {
            for name in ["a", "b", "c"] {
                try making.insert("Person").setValue(.string("\(name)\(trio)"), forKey: "name")
            }
        }
        try making.save()
        for replica in replicas { try replica.engine.syncNow() }

        func person(_ name: String, _ context: ObjectContext) throws -> ManagedObject {
            try #require(
                try context.fetch(FetchRequest(entity: "Person", predicate: FetchPredicate("name == %@", name))).first)
        }
        let one = ObjectContext(store: replicas[0].store)
        for trio in trios { try person("a\(trio)", one).setObject(try person("b\(trio)", one), forKey: "spouse") }
        try one.save()
        Thread.sleep(forTimeInterval: 0.01)
        let two = ObjectContext(store: replicas[1].store)
        for trio in trios { try person("a\(trio)", two).setObject(try person("c\(trio)", two), forKey: "spouse") }
        try two.save()
        for engine in [replicas[0].engine, replicas[1].engine, replicas[0].engine, replicas[2].engine] {
            try engine.syncNow()
        }

        for (i, replica) in replicas.enumerated() {
            let context = ObjectContext(store: replica.store)
            for trio in trios {
                let spouses = try ["a", "b", "c"].map {
                    try person("\($0)\(trio)", context).object(forKey: "spouse")?["name"]
                }
                #expect(spouses == ["c\(trio)", nil, "a\(trio)"], "store \(i), trio \(trio): \(spouses)")
            }
        }
        let contents = try replicas.map { try Self.contents($0.store, $0.engine) }
        #expect(contents[1] == contents[0])
        #expect(contents[2] == contents[0])
    }

    @Test("random marriages converge", arguments: TestScale.seeds(2, stress: 12))
    func randomMarriagesConverge(seed: UInt64) throws {
        try run(seed: seed, background: false)
    }

    @Test("marriages made while the stores sync in the background converge", arguments: TestScale.seeds(1, stress: 6))
    func marriagesWhileSyncingInTheBackgroundConverge(seed: UInt64) throws {
        try run(seed: seed, background: true)
    }

    func run(seed: UInt64, background: Bool) throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var random = SeededGenerator(seed: seed + 501)
        let replicas = try openReplicas(
            3, schema: Self.schema(), in: directory, server: server,
            deletePolicy: seed % 2 == 1 ? .newestWins : .deleteWins, batchSize: 4)
        let syncs = try BackgroundSyncs(background ? replicas.map(\.engine) : [], interval: 0.02)
        for step in 0..<250 {
            let store = replicas.randomElement(using: &random)!.store
            let context = ObjectContext(store: store)
            let people = try context.fetch(FetchRequest(entity: "Person"))
            let person = people.randomElement(using: &random)
            switch Int.random(in: 0..<10, using: &random) {
            case 0, 1:
                let made = try context.insert("Person")
                try made.setValue(.string("p\(step)"), forKey: "name")
                if Bool.random(using: &random), let person { try made.setObject(person, forKey: "spouse") }
            case 2, 3, 4, 5:
                guard let person, let other = people.randomElement(using: &random), other.objectID != person.objectID
                else { break }
                try person.setObject(other, forKey: "spouse")
            case 6, 7:
                try person?.setObject(nil, forKey: "spouse")
            case 8:
                if let person, Int.random(in: 0..<3, using: &random) == 0 { try context.delete(person) }
            default:
                try person?.setValue(.string("r\(step)"), forKey: "name")
            }
            if context.hasChanges {
                do {
                    try context.save()
                } catch let error as EntityStoreError where background && error.code == .conflict {
                    context.rollback()  // a sync saved in between: the app's to handle
                }
            }
            if background {
                Thread.sleep(forTimeInterval: 0.002)
            } else if Int.random(in: 0..<3, using: &random) == 0 {
                let report = try replicas.randomElement(using: &random)!.engine.syncNow()
                #expect(report.problems.isEmpty, "seed \(seed), step \(step): \(report.problems)")
            }
        }
        syncs.stop()
        #expect(
            try syncUntilQuiet(replicas.map(\.engine)),
            "seed \(seed): the stores still exchange changes after 10 passes")
        let contents = try replicas.map { try Self.contents($0.store, $0.engine) }
        #expect(contents[0].split(separator: "\n").count > 10, "seed \(seed): hardly anyone is left")
        #expect(contents[0].split(separator: "\n").contains { !$0.hasSuffix(" -") }, "seed \(seed): nobody is married")
        for (i, replica) in replicas.enumerated() {
            #expect(contents[i] == contents[0], "seed \(seed): store \(i) differs from store 0")
            #expect(try replica.store.checkIntegrity().findings.isEmpty, "seed \(seed): store \(i)")
        }
    }
}
