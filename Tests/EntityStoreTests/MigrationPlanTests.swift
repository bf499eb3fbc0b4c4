import EntityStore
import Foundation
import LMDB
import Synchronization
import TestSupport
import Testing

/// Migration plans: staged versions, custom code, declared removals and duplicate resolutions, all or nothing.
@Suite struct MigrationPlanTests {
    /// Version 1: people with a full name and an age, and their pets.
    func v1() throws -> Schema {
        try Schema(version: 1) {
            Entity("Person") {
                Attribute("name", .string)
                Attribute("age", .int64, default: 0)
                Attribute("nickname", .string, optional: true)
                Relationship("pets", to: "Pet", inverse: "owner", toMany: true)
            }
            Entity("Pet") {
                Attribute("name", .string)
                Relationship("owner", to: "Person", inverse: "pets")
            }
        }
    }

    /// Version 2: the name split in two, the age as text.
    func v2() throws -> Schema {
        try Schema(version: 2) {
            Entity("Person") {
                Attribute("first", .string)
                Attribute("last", .string, default: "")
                Attribute("age", .string, optional: true)
                Attribute("nickname", .string, optional: true)
                Relationship("pets", to: "Pet", inverse: "owner", toMany: true)
            }
            Entity("Pet") {
                Attribute("name", .string)
                Relationship("owner", to: "Person", inverse: "pets")
            }
        }
    }

    /// Version 3: a count of people, kept by the last stage's code.
    func v3() throws -> Schema {
        var schema = try v2()
        schema = try Schema(version: 3, entities: schema.entities + [Entity("Census") { Attribute("people", .int64) }])
        return schema
    }

    /// A store at version 1 with `people` (name, age) and a pet each.
    func seed(
        _ path: String, _ people: [(String, Int64)] = [("Ada Lovelace", 36), ("Alan Turing", 41), ("Grace", 85)]
    )
        throws
    {
        let store = try PersistentStore.open(path: path, schema: try v1(), options: .init(sync: .noSync))
        let context = ObjectContext(store: store)
        for (name, age) in people {
            let person = try context.insert("Person")
            try person.setValue(.string(name), forKey: "name")
            try person.setValue(.int(age), forKey: "age")
            let pet = try context.insert("Pet")
            try pet.setValue(.string("pet of \(name)"), forKey: "name")
            try pet.setObject(person, forKey: "owner")
        }
        try context.save()
    }

    /// Splits `name` into `first` and `last`, and writes `age` as text.
    var splitting: MigrationTransform {
        MigrationTransform("Person") { old, new in
            guard case .string(let name) = try old.value(forKey: "name") else { return }
            let parts = name.split(separator: " ", maxSplits: 1).map(String.init)
            try new.setValue(.string(parts.first ?? ""), forKey: "first")
            if parts.count > 1 { try new.setValue(.string(parts[1]), forKey: "last") }
            if case .int(let age) = old["age"] { try new.setValue(.string("\(age) years"), forKey: "age") }
        }
    }

    /// Opens with `plan`, its stages in chunks of `chunkSize` objects (1 or 2: every stage that rewrites
    /// objects runs in chunks).
    func open(_ path: String, _ plan: MigrationPlan, chunkSize: Int = 100_000) throws -> PersistentStore {
        var plan = plan
        plan.chunkSize = chunkSize
        return try PersistentStore.open(path: path, plan: plan, options: .init(sync: .noSync))
    }

    /// Every person's values, by first key, as text.
    func people(_ store: PersistentStore, _ keys: [String], entity: String = "Person") throws -> [String] {
        let context = ObjectContext(store: store)
        return try context.fetch(FetchRequest(entity: entity, sortKeys: [SortKey(keys[0])])).map { person in
            try keys.map { key in
                switch try person.value(forKey: key) {
                case .string(let text): text
                case .null: "nil"
                case .int(let integer): "\(integer)"
                case .bool(let flag): "\(flag)"
                case let value: "\(value)"
                }
            }.joined(separator: "|")
        }
    }

    @Test func aRenameWithoutRenamedFromIsRefusedNamingTheValuesItWouldLoseAndSuggestingTheRename() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("p.store")
        try seed(path)
        let renamed = try Schema(version: 2) {
            Entity("Person") {
                Attribute("fullName", .string, default: "")
                Attribute("age", .int64, default: 0)
                Attribute("nickname", .string, optional: true)
                Relationship("pets", to: "Pet", inverse: "owner", toMany: true)
            }
            Entity("Pet") {
                Attribute("name", .string)
                Relationship("owner", to: "Person", inverse: "pets")
            }
        }
        let error = entityStoreError { _ = try PersistentStore.open(path: path, schema: renamed) }
        #expect(error?.code == .migrationRefused)
        #expect(error?.entity == "Person" && error?.key == "name")
        let message = error?.message ?? ""
        #expect(message.contains("removing attribute 'name' would lose 3 stored value(s)"), "\(message)")
        #expect(message.contains("if 'fullName' is 'name' renamed, declare it with renamedFrom: \"name\""))
        // Nothing changed: the store opens at version 1 with its values. (The nil nicknames are no loss.)
        let store = try PersistentStore.open(path: path, schema: try v1())
        #expect(try people(store, ["name"]) == ["Ada Lovelace", "Alan Turing", "Grace"])
        #expect(try store.schemaHistory().map(\.version) == [1])
    }

    @Test func droppingAnEntityOrARelationshipThatHoldsDataIsRefusedUnlessTheStageDeclaresIt() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("p.store")
        try seed(path)
        let alone = try Schema(version: 2) {
            Entity("Person") {
                Attribute("name", .string)
                Attribute("age", .int64, default: 0)
                Attribute("nickname", .string, optional: true)
            }
        }
        let error = entityStoreError { _ = try PersistentStore.open(path: path, schema: alone) }
        #expect(error?.code == .migrationRefused)
        let messages = error?.failures.map(\.message) ?? []
        #expect(messages.contains { $0.contains("removing entity Pet would delete its 3 object(s)") }, "\(messages)")
        #expect(messages.contains { $0.contains("removing relationship 'pets' would lose 3 stored link(s)") })

        // Declared, the same change runs (an entity's removal covers its own relationships).
        let plan = MigrationPlan(
            schemas: [try v1(), alone],
            stages: [.lightweight(from: 1, to: 2, removing: [.entity("Pet"), .relationship("pets", of: "Person")])])
        let store = try open(path, plan)
        #expect(try people(store, ["name", "age"]) == ["Ada Lovelace|36", "Alan Turing|41", "Grace|85"])
        #expect(try store.checkIntegrity().findings.isEmpty)
        #expect(try store.migrationLog().map(\.kind) == ["lightweight"])
    }

    @Test(arguments: [100_000, 2, 1])
    func aCustomStageSplitsAnAttributeAndRetypesAnother(chunkSize: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("p.store")
        try seed(path)
        let plan = MigrationPlan(
            schemas: [try v1(), try v2()],
            stages: [.custom(from: 1, to: 2, removing: [.attribute("name", of: "Person")], transforms: [splitting])])
        let store = try open(path, plan, chunkSize: chunkSize)
        #expect(
            try people(store, ["first", "last", "age"]) == [
                "Ada|Lovelace|36 years", "Alan|Turing|41 years", "Grace||85 years",
            ])
        // Relationships and the other entity are as they were.
        let context = ObjectContext(store: store)
        let pets = try context.fetch(FetchRequest(entity: "Pet"))
        #expect(pets.count == 3)
        for pet in pets {
            let owner = try #require(try pet.object(forKey: "owner"), "\(pet.objectID) lost its owner")
            guard case .string(let name) = try pet["name"], case .string(let first) = try owner["first"] else {
                Issue.record("\(pet.objectID) or its owner lost a name")
                continue
            }
            #expect(name == "pet of \(first)" || name.hasPrefix("pet of \(first) "), "\(name) belongs to \(first)")
        }
        #expect(try store.checkIntegrity().findings.isEmpty)
        #expect(try store.schemaHistory().map(\.version) == [1, 2])
    }

    @Test(arguments: [100_000, 1])
    func aStoreSeveralVersionsBehindRunsEveryStageInOrderWithItsCode(chunkSize: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("p.store")
        try seed(path)
        let reports = Mutex<[MigrationProgress]>([])
        let order = Mutex<[String]>([])
        let plan = MigrationPlan(
            schemas: [try v1(), try v2(), try v3()],
            stages: [
                .custom(
                    from: 1, to: 2, removing: [.attribute("name", of: "Person")], transforms: [splitting],
                    willMigrate: { context in
                        // The old schema: names as stored. Grace leaves before the split.
                        order.withLock { $0.append("will 1→2") }
                        let grace = try context.fetch(
                            FetchRequest(entity: "Person", predicate: try FetchPredicate("name == 'Grace'")))
                        #expect(grace.count == 1)
                        for person in grace { try context.delete(person) }
                    },
                    didMigrate: { context in
                        order.withLock { $0.append("did 1→2") }
                        let firsts = try context.fetch(FetchRequest(entity: "Person", sortKeys: [SortKey("first")]))
                            .map { try $0.value(forKey: "first") }
                        #expect(firsts == [.string("Ada"), .string("Alan")])
                    }),
                .custom(
                    from: 2, to: 3,
                    didMigrate: { context in
                        order.withLock { $0.append("did 2→3") }
                        let census = try context.insert("Census")
                        try census.setValue(
                            .int(try context.count(for: FetchRequest(entity: "Person"))), forKey: "people")
                    }),
            ],
            progress: { report in reports.withLock { $0.append(report) } })
        let store = try open(path, plan, chunkSize: chunkSize)
        #expect(order.withLock { $0 } == ["will 1→2", "did 1→2", "did 2→3"])
        #expect(try people(store, ["first", "last"]) == ["Ada|Lovelace", "Alan|Turing"])
        let census = try ObjectContext(store: store).fetch(FetchRequest(entity: "Census"))
        #expect(try census.map { try $0.value(forKey: "people") } == [.int(2)])
        #expect(try store.schemaHistory().map(\.version) == [1, 2, 3])
        let log = try store.migrationLog()
        #expect(log.map { "\($0.fromVersion)→\($0.toVersion) \($0.kind)" } == ["1→2 custom", "2→3 custom"])
        // The first stage rewrote the two people left (the pets' records keep their layout: not rewritten).
        #expect(log.first?.objects == 2)
        // Progress: each stage from its start to its end, never going back.
        let seen = reports.withLock { $0 }
        #expect(Set(seen.map(\.stage)) == [0, 1] && seen.allSatisfy { $0.stageCount == 2 })
        for stage in [0, 1] {
            let mine = seen.filter { $0.stage == stage }
            #expect(mine.first?.completed == 0 && mine.last?.completed == mine.last?.total)
            #expect(zip(mine, mine.dropFirst()).allSatisfy { $0.completed <= $1.completed })
        }
        // Reopened with the plan, nothing runs again.
        let again = try open(path, plan, chunkSize: chunkSize)
        #expect(try again.migrationLog().count == 2 && order.withLock { $0 }.count == 3)
    }

    @Test(arguments: [100_000, 1])
    func aFailingStageKeepsNothingOfAnyStage(chunkSize: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("p.store")
        try seed(path)
        struct Refused: Error, CustomStringConvertible {
            var description: String { "no Alan" }
        }
        // The second stage's transform throws for one object: the first stage's work goes too.
        var failing = MigrationPlan(
            schemas: [try v1(), try v2(), try v3()],
            stages: [
                .custom(from: 1, to: 2, removing: [.attribute("name", of: "Person")], transforms: [splitting]),
                .custom(
                    from: 2, to: 3,
                    transforms: [
                        MigrationTransform("Person") { old, _ in
                            if old["first"] == .string("Alan") { throw Refused() }
                        }
                    ]),
            ])
        let error = entityStoreError { _ = try open(path, failing, chunkSize: chunkSize) }
        #expect(error?.message.contains("migrating Person/p") == true && error?.message.contains("no Alan") == true)
        if chunkSize == 1 {
            // Stages in chunks commit as each ends: the failing one is abandoned, the one before it stays.
            let store = try PersistentStore.open(path: path, schema: try v2())
            #expect(try people(store, ["first"]) == ["Ada", "Alan", "Grace"])
            #expect(try store.migrationLog().map(\.toVersion) == [2] && store.checkIntegrity().findings.isEmpty)
            return
        }
        var store = try PersistentStore.open(path: path, schema: try v1())
        #expect(try people(store, ["name"]) == ["Ada Lovelace", "Alan Turing", "Grace"])
        #expect(try store.schemaHistory().map(\.version) == [1] && store.migrationLog().isEmpty)

        // A transform leaving a required attribute nil fails, naming the object and the attribute.
        failing.stages = [.custom(from: 1, to: 2, removing: [.attribute("name", of: "Person")], transforms: [])]
        failing.stages[0].transforms = [MigrationTransform("Person") { _, _ in }]
        let required = entityStoreError { _ = try open(path, failing, chunkSize: chunkSize) }
        #expect(required?.code == .validationFailed && required?.key == "first", "\(String(describing: required))")

        // A save that fails inside a stage's code fails the migration even when the code catches its error.
        failing.stages = [
            .custom(
                from: 1, to: 2, removing: [.attribute("name", of: "Person")], transforms: [splitting],
                didMigrate: { context in
                    let person = try context.insert("Person")  // `first` is required: the save fails
                    do {
                        try context.save()
                    } catch {
                        try context.delete(person)  // handled here, but not by the migration
                    }
                }),
            .lightweight(from: 2, to: 3),
        ]
        let swallowed = entityStoreError { _ = try open(path, failing, chunkSize: chunkSize) }
        #expect(swallowed?.code == .validationFailed, "\(String(describing: swallowed))")
        store = try PersistentStore.open(path: path, schema: try v1())
        #expect(try people(store, ["name"]) == ["Ada Lovelace", "Alan Turing", "Grace"])
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    /// Every write of a chunked migration fails once, in turn (an I/O error, as a dying disk or process leaves it):
    /// the store then either opens at version 1 as it was, or holds the stage's marker; an open with the plan
    /// finishes it, an open with version 1 abandons it; either way the end equals an uninterrupted migration.
    @Test func aChunkedMigrationInterruptedAtAnyWriteResumesOrIsAbandoned() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let plan = MigrationPlan(
            schemas: [try v1(), try v2()],
            stages: [.custom(from: 1, to: 2, removing: [.attribute("name", of: "Person")], transforms: [splitting])])
        let seeded = ["Ada Lovelace|36", "Alan Turing|41", "Grace|85"]
        let expected = ["Ada|Lovelace|36 years", "Alan|Turing|41 years", "Grace||85 years"]
        var call = 0
        var interrupted = (resumed: 0, abandoned: 0, beforeTheMarker: 0)
        while true {
            call += 1
            let path = dir.path("p\(call).store")
            try seed(path)
            // The version-1 store stays open: its environment is the one the migration uses, with the fault armed.
            let old = try PersistentStore.open(path: path, schema: try v1(), options: .init(sync: .noSync))
            old.environment.injectFault(afterCalls: call, code: EIO)
            let migrated = Result { try open(path, plan, chunkSize: 1) }
            let fired = !old.environment.hasPendingFault
            old.environment.clearInjectedFault()
            if case .success(let store) = migrated {
                #expect(try people(store, ["first", "last", "age"]) == expected)
                if !fired { break }  // every write of the migration has failed once
                continue
            }
            // Interrupted: the old schema's store reads the data as it was, is told a migration is under way, or
            // (the fault hit after the migration's last transaction) that the store is at version 2.
            var underWay = false
            switch Result(catching: { try people(old, ["name", "age"]) }) {
            case .success(let rows):
                #expect(rows == seeded)
                interrupted.beforeTheMarker += 1
            case .failure(let error):
                underWay = "\(error)".contains("being migrated from version 1 to 2")
                #expect(underWay || "\(error)".contains("now version 2"), "\(error)")
            }
            if call % 2 == 0 || !underWay {
                interrupted.resumed += underWay ? 1 : 0
            } else {
                // Opened with version 1: the stage is abandoned and the store is as it was.
                let abandoned = try PersistentStore.open(path: path, schema: try v1(), options: .init(sync: .noSync))
                #expect(try people(abandoned, ["name", "age"]) == seeded)
                #expect(try abandoned.checkIntegrity().findings.isEmpty)
                interrupted.abandoned += 1
            }
            let store = try open(path, plan, chunkSize: 1)
            #expect(try people(store, ["first", "last", "age"]) == expected, "after a fault at write \(call)")
            #expect(try store.checkIntegrity().findings.isEmpty, "after a fault at write \(call)")
            #expect(try store.migrationLog().map(\.toVersion) == [2])
        }
        #expect(
            interrupted.resumed > 3 && interrupted.abandoned > 3 && interrupted.beforeTheMarker > 0, "\(interrupted)")
    }

    @Test(arguments: [100_000, 1])
    func aCustomStageBetweenSchemasOfOneShapeMigratesTheDataAlone(chunkSize: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("p.store")
        try seed(path)
        let same = try Schema(version: 2, entities: try v1().entities)
        let plan = MigrationPlan(
            schemas: [try v1(), same],
            stages: [
                .custom(
                    from: 1, to: 2,
                    transforms: [
                        MigrationTransform("Person") { old, new in
                            guard case .string(let name) = old["name"] else { return }
                            try new.setValue(.string(name.uppercased()), forKey: "name")
                        }
                    ])
            ])
        let store = try open(path, plan, chunkSize: chunkSize)
        #expect(try people(store, ["name"]) == ["ADA LOVELACE", "ALAN TURING", "GRACE"])
        #expect(try store.schemaHistory().map(\.version) == [1, 2] && store.migrationLog().map(\.objects) == [3])
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    @Test(arguments: ["refuse", "useDefault", "setNil"], [100_000, 1])
    func aDeclaredConversionRetypesStoredValuesAndListsThoseThatDoNotConvert(rule: String, chunkSize: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("p.store")
        let textual = try Schema(version: 1) {
            Entity("Reading") {
                Attribute("label", .string)
                Attribute("value", .string, optional: true)
                Attribute("flag", .string, default: "no")
            }
        }
        do {
            let context = ObjectContext(store: try PersistentStore.open(path: path, schema: textual))
            for (label, value, flag) in [
                ("a", "36", "yes"), ("b", "forty", "1"), ("c", nil, "false"), ("d", " 7 ", "NO"),
            ] {
                let reading = try context.insert("Reading")
                try reading.setValue(.string(label), forKey: "label")
                try reading.setValue(value.map(Value.string) ?? .null, forKey: "value")
                try reading.setValue(.string(flag), forKey: "flag")
            }
            try context.save()
        }
        let numeric = try Schema(version: 2) {
            Entity("Reading") {
                Attribute("label", .string)
                Attribute("value", .int64, optional: true, default: -1)
                Attribute("flag", .bool, default: false)
            }
        }
        // Without a declared conversion the retype is refused, pointing at one.
        let refused = entityStoreError { _ = try PersistentStore.open(path: path, schema: numeric) }
        #expect(refused?.failures.contains { $0.message.contains("converting: AttributeConversion") } == true)
        let unconvertible: AttributeConversion.Unconvertible =
            switch rule {
            case "useDefault": .useDefault
            case "setNil": .setNil
            default: .refuse
            }
        var plan = MigrationPlan(
            schemas: [textual, numeric],
            stages: [
                .lightweight(
                    from: 1, to: 2,
                    converting: [
                        AttributeConversion("Reading", "value", unconvertible: unconvertible),
                        AttributeConversion("Reading", "flag"),
                    ])
            ])
        plan.chunkSize = chunkSize
        if rule == "refuse" {
            let error = entityStoreError { _ = try PersistentStore.open(path: path, plan: plan) }
            #expect(error?.code == .migrationRefused && error?.key == "value", "\(String(describing: error))")
            #expect(error?.message.contains("1 value(s) of Reading.value do not convert to int64") == true)
            #expect(error?.message.contains("Reading/p2 \"forty\"") == true, "\(String(describing: error))")
            let store = try PersistentStore.open(path: path, schema: textual)
            #expect(try people(store, ["label", "value"], entity: "Reading") == ["a|36", "b|forty", "c|nil", "d| 7 "])
            return
        }
        let store = try PersistentStore.open(path: path, plan: plan)
        let forty = rule == "useDefault" ? "-1" : "nil"
        #expect(
            try people(store, ["label", "value", "flag"], entity: "Reading") == [
                "a|36|true", "b|\(forty)|true", "c|nil|false", "d|7|false",
            ])
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    @Test func aStagesContextUsedAfterItsStageIsRefused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("p.store")
        try seed(path)
        /// The stage's context, kept by the app's code (the migration runs on this thread).
        final class Kept: @unchecked Sendable {
            var context: ObjectContext?
        }
        let kept = Kept()
        let plan = MigrationPlan(
            schemas: [try v1(), try v2()],
            stages: [
                .custom(
                    from: 1, to: 2, removing: [.attribute("name", of: "Person")], transforms: [splitting],
                    didMigrate: { context in kept.context = context })
            ])
        _ = try open(path, plan)
        let context = try #require(kept.context)
        let error = entityStoreError { _ = try context.fetch(FetchRequest(entity: "Person")) }
        #expect(error?.message.contains("used after its stage ended") == true, "\(String(describing: error))")
    }

    func unique(_ version: Int) throws -> Schema {
        try Schema(version: version) {
            Entity("Person") {
                Attribute("name", .string, unique: true)
                Attribute("age", .int64, default: 0)
                Attribute("nickname", .string, optional: true)
                Relationship("pets", to: "Pet", inverse: "owner", toMany: true)
            }
            Entity("Pet") {
                Attribute("name", .string)
                Relationship("owner", to: "Person", inverse: "pets")
            }
        }
    }

    @Test(arguments: ["refused", "keepFirst", "keepNewest", "merge"], [100_000, 2])
    func uniquenessOverStoredDuplicatesIsRefusedNamingThemOrResolvedAsThePlanSays(rule: String, chunkSize: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("p.store")
        try seed(path, [("Ada", 1), ("Bob", 2), ("Ada", 3), ("Ada", 4), ("Cy", 5), ("Bob", 6)])
        let resolution: UniquenessResolution.Rule? =
            switch rule {
            case "keepFirst": .keepFirst
            case "keepNewest": .keepNewest
            case "merge":
                .merge { keeper, duplicate in
                    // The keeper takes the duplicate's age added to its own, and its pets.
                    guard case .int(let mine) = try keeper["age"], case .int(let theirs) = try duplicate["age"]
                    else { return }
                    try keeper.setValue(.int(mine + theirs), forKey: "age")
                    for pet in try duplicate.objects(forKey: "pets") { try pet.setObject(keeper, forKey: "owner") }
                }
            default: nil
            }
        let plan = MigrationPlan(
            schemas: [try v1(), try unique(2)],
            stages: resolution.map { [.lightweight(from: 1, to: 2, resolving: [.init("Person", "name", by: $0)])] }
                ?? [])
        guard resolution != nil else {
            let error = entityStoreError { _ = try open(path, plan, chunkSize: chunkSize) }
            #expect(error?.code == .migrationRefused && error?.key == "name")
            #expect(error?.message.contains("3 duplicate(s)") == true, "\(String(describing: error?.message))")
            #expect(error?.message.contains("both hold \"Ada\"") == true)
            #expect(try PersistentStore.open(path: path, schema: try v1()).schemaHistory().map(\.version) == [1])
            return
        }
        let store = try open(path, plan, chunkSize: chunkSize)
        let expected =
            switch rule {
            case "keepFirst": ["Ada|1", "Bob|2", "Cy|5"]
            case "keepNewest": ["Ada|4", "Bob|6", "Cy|5"]
            default: ["Ada|8", "Bob|8", "Cy|5"]
            }
        #expect(try people(store, ["name", "age"]) == expected)
        let context = ObjectContext(store: store)
        let owned = try context.fetch(FetchRequest(entity: "Pet")).filter { try $0.object(forKey: "owner") != nil }
        #expect(owned.count == (rule == "merge" ? 6 : 3), "the merge moved the duplicates' pets")
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    @Test func aPlanThatCannotRunIsRefusedBeforeTheStoreIsTouched() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("p.store")
        try seed(path)
        let descending = MigrationPlan(schemas: [try v2(), try v1()])
        #expect(entityStoreError { _ = try open(path, descending) }?.message.contains("must ascend") == true)
        let skipping = MigrationPlan(schemas: [try v1(), try v2(), try v3()], stages: [.lightweight(from: 1, to: 3)])
        #expect(entityStoreError { _ = try open(path, skipping) }?.message.contains("does not join") == true)
        let unknown = MigrationPlan(
            schemas: [try v1(), try v2()], stages: [.custom(from: 1, to: 2, transforms: [.init("Nobody") { _, _ in }])])
        #expect(entityStoreError { _ = try open(path, unknown) }?.entity == "Nobody")
        // A retype without a transform is refused, pointing at the custom stage.
        let retyped = entityStoreError { _ = try PersistentStore.open(path: path, schema: try v2()) }
        #expect(retyped?.failures.contains { $0.message.contains("or a transform of Person") } == true)
        #expect(try PersistentStore.open(path: path, schema: try v1()).schemaHistory().map(\.version) == [1])
    }
}

/// The models of a contact app's two versions, frozen side by side (each names the entity it maps).
final class ContactV1: Model {
    override class var entityName: String { "Contact" }
    @Stored var name: String
}

final class ContactV2: Model {
    override class var entityName: String { "Contact" }
    @Stored var first: String
    @Stored var last: String = ""
    @Stored var initials: String = ""
}

@Suite struct TypedMigrationPlanTests {
    @Test func aStagesCodeReadsAndWritesWithTheTypedModelsOfEachVersion() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("c.store")
        let v1 = try Schema(version: 1, models: [ContactV1.self])
        let v2 = try Schema(version: 2, models: [ContactV2.self])
        do {
            let context = ObjectContext(store: try PersistentStore.open(path: path, schema: v1))
            for name in ["Ada Lovelace", "Alan Turing", ""] { try context.insert(ContactV1.self).name = name }
            try context.save()
        }
        let plan = MigrationPlan(
            schemas: [v1, v2],
            stages: [
                .custom(
                    from: 1, to: 2, removing: [.attribute("name", of: "Contact")],
                    transforms: [
                        MigrationTransform("Contact") { old, new in
                            guard case .string(let name) = old["name"] else { return }
                            let parts = name.split(separator: " ", maxSplits: 1).map(String.init)
                            try new.setValue(.string(parts.first ?? ""), forKey: "first")
                            try new.setValue(.string(parts.count > 1 ? parts[1] : ""), forKey: "last")
                        }
                    ],
                    willMigrate: { context in
                        // The old models: contacts without a name leave.
                        for contact in try context.fetch(ContactV1.self) where contact.name.isEmpty {
                            try context.delete(contact)
                        }
                    },
                    didMigrate: { context in
                        // The new models: initials from the split names.
                        for contact in try context.fetch(ContactV2.self) {
                            contact.initials = String(contact.first.prefix(1)) + String(contact.last.prefix(1))
                        }
                    })
            ])
        let store = try PersistentStore.open(path: path, plan: plan)
        let contacts = try ObjectContext(store: store).fetch(ContactV2.self, sortedBy: [SortKey(\ContactV2.first)])
        #expect(contacts.map { "\($0.first) \($0.last) \($0.initials)" } == ["Ada Lovelace AL", "Alan Turing AT"])
    }
}
