import EntityStore
import Foundation
import LMDB
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A migration while other processes (or other store instances) run the old schema, and stores created by several
/// processes at once: nobody writes records in a layout the store no longer has, and every record decodes.
@Suite struct SchemaChangeTests {
    @Test func aProcessOnTheOldSchemaStopsWritingWhenAnotherMigrates() throws {
        let dir = try TemporaryDirectory(prefix: "schema-change")
        defer { dir.remove() }
        let path = dir.path("lib.store")
        #expect(try ChildProcess.helper(["library-store", path]).status == 0)
        let saver = try RunningProcess.helper(["tag-saver-until-error", path])
        // Wait until the old-schema process is saving.
        try saver.waitForLine("ready")
        let migrated = try PersistentStore.open(path: path, schema: try Fixtures.librarySchemaWithTagColor(version: 2))
        let context = ObjectContext(store: migrated)
        let tag = try context.insert("Tag")
        try tag.setValue("new", forKey: "name")
        try tag.setValue("blue", forKey: "color")
        try context.save()
        let output = saver.finish()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains(": schemaChanged"), "\(output.stdout)")
        // Every record decodes with the new schema; the integrity check is clean.
        let tags = try ObjectContext(store: migrated).fetch(FetchRequest(entity: "Tag"))
        #expect(tags.count >= 21)
        for tag in tags { _ = try tag["color"] }
        #expect(try migrated.checkIntegrity().findings.isEmpty)
    }

    @Test func anotherStoreInstanceOfThisProcessIsRefusedAfterAMigration() throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let old = temporary.store
        let oldContext = ObjectContext(store: old)
        let tag = try oldContext.insert("Tag")
        try tag.setValue("before", forKey: "name")
        try oldContext.save()
        _ = try PersistentStore.open(
            path: temporary.path, schema: try Fixtures.librarySchemaWithTagColor(version: 2),
            options: .init(sync: .noSync))
        try tag.setValue("after", forKey: "name")
        let error = entityStoreError { try oldContext.save() }
        #expect(error?.code == .schemaChanged)
        #expect(error?.message.contains("now version 2") == true)
        #expect(
            entityStoreError { _ = try ObjectContext(store: old).fetch(FetchRequest(entity: "Tag")) }?.code
                == .schemaChanged)
        let reopened = try PersistentStore.open(
            path: temporary.path, schema: try Fixtures.librarySchemaWithTagColor(version: 2))
        let names = try ObjectContext(store: reopened).fetch(FetchRequest(entity: "Tag")).map { try $0["name"] }
        #expect(names == ["before"])
    }

    @Test func processesCreatingOneStoreAtOnce() throws {
        let dir = try TemporaryDirectory(prefix: "schema-change")
        defer { dir.remove() }
        for round in 0..<10 {
            // The same schema: every process opens the store.
            let same = dir.path("same\(round).store")
            let openers = try (0..<4).map { _ in try RunningProcess.helper(["open-library", same, "a"]) }
            for opener in openers {
                let output = opener.finish()
                #expect(output.status == 0, "round \(round): \(output.stderr)")
            }
            // Two schemas at one version: one creates the store, the other is refused clearly.
            let different = dir.path("different\(round).store")
            let rivals = try ["a", "b"].map { try RunningProcess.helper(["open-library", different, $0]) }
            let outcomes = rivals.map { rival in
                let output = rival.finish()
                return output.status == 0 ? "opened" : output.stderr
            }
            #expect(outcomes.filter { $0 == "opened" }.count == 1, "round \(round): \(outcomes)")
            #expect(outcomes.contains { $0.contains("error migrationRefused") }, "round \(round): \(outcomes)")
            let store = try PersistentStore.openReadOnly(path: different)
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func killsDuringTheFirstOpenLeaveNoStoreOrAValidOne() throws {
        let kills = TestScale.size(60, stress: 400)
        let dir = try TemporaryDirectory(prefix: "creation-kill")
        defer { dir.remove() }
        var g = SeededGenerator(seed: 99)
        // Each kill waits for the helper to say it is opening the store, then comes at a random moment of the
        // opening: within the time a whole opening takes from that line (the median of five).
        var durations: [Double] = []
        for i in 0..<5 {
            let opener = try RunningProcess.helper(["open-library", dir.path("timing\(i).store"), "a"])
            try opener.waitForLine("opening")
            let start = Date()
            #expect(opener.finish().status == 0)
            durations.append(Date().timeIntervalSince(start))
        }
        let span = UInt32(durations.sorted()[2] * 1_000_000)
        var emptyDataFiles = 0
        for round in 0..<kills {
            let path = dir.path("k\(round).store")
            let opener = try RunningProcess.helper(["open-library", path, "a"])
            try opener.waitForLine("opening")
            usleep(UInt32.random(in: 0...span, using: &g))
            opener.kill()
            _ = opener.finish()
            var info = stat()
            if stat(path + "/data.mdb", &info) == 0 && info.st_size == 0 { emptyDataFiles += 1 }
            // Whatever the moment of the kill, the next open gives a valid store.
            let store = try PersistentStore.open(path: path, schema: try Fixtures.librarySchema())
            #expect(try store.checkIntegrity().findings.isEmpty, "round \(round)")
            let context = ObjectContext(store: store)
            let tag = try context.insert("Tag")
            try tag.setValue("after the kill", forKey: "name")
            try context.save()
        }
        print("creation kills: \(kills) in a span of \(span) µs, \(emptyDataFiles) left an empty data file")
    }
}

/// A migration killed at any moment: the store is on the old schema or the new one, never between, and the next
/// open with the new schema finishes it (the derived values a migration adds are computed in a second
/// transaction, which a kill can leave undone).
@Suite struct MigrationKillTests {
    @Test func killsDuringAMigrationLeaveTheOldStoreOrTheMigratedOne() throws {
        let kills = TestScale.size(10, stress: 100)
        let books = 5_000
        let dir = try TemporaryDirectory(prefix: "migration-kill")
        defer { dir.remove() }
        let original = dir.path("original.store")
        let made = try ChildProcess.helper(["library-store", original, "\(books)"])
        #expect(made.status == 0, "\(made.stderr)")
        // Each kill waits for the helper to say it is opening the store; it comes at once, or at a random moment
        // within the time a whole migration takes from that line.
        func migrate(_ path: String, killAfter delay: UInt32?) throws -> (migrated: Bool, seconds: Double) {
            let migrator = try RunningProcess.helper(["migrate-library", path])
            try migrator.waitForLine("opening")
            let start = Date()
            if let delay {
                if delay > 0 { usleep(delay) }
                migrator.kill()
            }
            let output = migrator.finish()
            return (output.stdout.contains("migrated"), Date().timeIntervalSince(start))
        }
        let timing = dir.path("timing.store")
        try FileManager.default.copyItem(atPath: original, toPath: timing)
        let whole = try migrate(timing, killAfter: nil)
        #expect(whole.migrated)
        var g = SeededGenerator(seed: 7)
        var (old, migrated, finished) = (0, 0, 0)
        for round in 0..<kills {
            let path = dir.path("k\(round).store")
            try FileManager.default.copyItem(atPath: original, toPath: path)
            let span = UInt32(whole.seconds * 1_000_000)
            // Every third kill comes as soon as the helper says it is opening: before the migration can commit.
            let delay = round % 3 == 0 ? 0 : UInt32.random(in: 0...(span + span / 4), using: &g)
            let outcome = try migrate(path, killAfter: delay)
            if outcome.migrated { finished += 1 }
            // Still on the old schema (the migration's transaction never committed), or migrated.
            do {
                let store = try PersistentStore.open(
                    path: path, schema: try Fixtures.librarySchema(), options: .init(readOnly: true))
                #expect(try store.checkIntegrity().findings.isEmpty, "round \(round), old schema")
                old += 1
            } catch let error as EntityStoreError {
                #expect(
                    error.code == .migrationRefused || error.code == .schemaOlderThanStore, "round \(round): \(error)")
                migrated += 1
            }
            // The next open with the new schema migrates or finishes the migration; every book is there, with its
            // default edition, found through the new index, and every author counts its books.
            let store = try PersistentStore.open(path: path, schema: try Fixtures.librarySchemaMigrated())
            #expect(try store.checkIntegrity().findings.isEmpty, "round \(round)")
            let context = ObjectContext(store: store)
            #expect(try context.count(for: FetchRequest(entity: "Book")) == books + 5, "round \(round)")
            var firstEditions = FetchRequest(entity: "Book")
            firstEditions.predicate = try FetchPredicate("edition == 1")
            #expect(try context.count(for: firstEditions) == books + 5, "round \(round)")
            for author in try context.fetch(FetchRequest(entity: "Author")) {
                #expect(try author["bookCount"] == .int(Int64(try author.objects(forKey: "books").count)))
            }
        }
        // Kills came before the migration committed: the old schema stayed.
        #expect(old > 0, "no kill came before the migration committed")
        print(
            "migration kills: \(kills) within \(Int(whole.seconds * 1000)) ms of a \(books)-book migration: \(old) left"
                + " the old schema, \(migrated) the new one (\(finished) ended before the kill)")
    }
}

/// A chunked migration (PeopleFixture's plan) killed with SIGKILL at random moments: after the kill the store is
/// the old version as it was, or mid-migration (an old-schema open is told so, or abandons it); an open with the
/// plan finishes it, and the end equals an uninterrupted migration, with a clean integrity check.
@Suite struct ChunkedMigrationKillTests {
    /// SIGKILLs at random moments of a custom migration of 200,000 objects in 100 chunks: before its marker, inside
    /// a chunk's transaction, between chunks, inside the last transaction (which swaps the chunks in and builds the
    /// indexes), and again in the open that resumes. Each store is killed again and again until its migration
    /// finishes (a chain), and after every kill a read-only look compares it, byte for byte through LMDB, with the
    /// store before and with the store an uninterrupted migration made: every database as it was (the old version,
    /// with or without a stage under way) or as the uninterrupted one made it, and the stage's rewritten objects a
    /// prefix of the new records. Some stages under way are abandoned by the old app's open, and the chain goes on.
    @Test func killsAtRandomMomentsOfAChunkedMigrationLeaveTheOldStoreOrOneThatResumes() throws {
        let kills = TestScale.size(200, stress: 1_000)
        // Kills at random moments in a chain before it goes on to its last transaction (see `patient` below): at
        // full size as many as a chain took before (about 170; six chains in all), since each chain costs a copy, a
        // whole migration and an integrity check of 200,000 objects.
        let patience = TestScale.size(30, stress: 150)
        let people = 200_000
        let chunk = 2_000
        let dir = try TemporaryDirectory(prefix: "chunked-migration-kill")
        defer { dir.remove() }
        let original = dir.path("original.store")
        let made = try ChildProcess.helper(["people-store", original, "\(people)"])
        #expect(made.status == 0, "\(made.stderr)")
        // The uninterrupted migration, in another process.
        let whole = dir.path("whole.store")
        try FileManager.default.copyItem(atPath: original, toPath: whole)
        let uninterrupted = try ChildProcess.helper(["migrate-people", whole, "\(chunk)"])
        #expect(uninterrupted.stdout.hasSuffix("migrated\n"), "\(uninterrupted.stderr)")
        let before = try StoreBytes(path: original)
        let after = try StoreBytes(path: whole)
        #expect(before.entries("records.Person") == people && after.entries("records.Person") == people)
        // Both ends are whole (and so is a store that equals one of them byte for byte).
        #expect(try PersistentStore.openReadOnly(path: original).checkIntegrity().findings.isEmpty)
        #expect(try PersistentStore.openReadOnly(path: whole).checkIntegrity().findings.isEmpty)
        let expected = try PeopleFixture.rows(try PersistentStore.openReadOnly(path: whole))
        #expect(expected.count == people && expected[12_345] == "Given12345|Family26|15")

        var g = SeededGenerator(seed: 11)
        var outcomes = (old: 0, underWay: 0, allRewritten: 0, done: 0, abandoned: 0)
        var killed = 0
        var chains = 0
        while killed < kills {
            let path = dir.path("chain\(chains).store")
            chains += 1
            try FileManager.default.copyItem(atPath: original, toPath: path)
            // Every other chain (the first among them) is abandoned once, by the old app, at a kill that found a
            // stage under way.
            var abandonAt = chains % 2 == 1 ? Int.random(in: 1...40, using: &g) : nil
            var killsInTheLastTransaction = 0
            var look = try Look(path: path)
            var kill = 0
            while look.state != .done {
                let migrator = try RunningProcess.helper(["migrate-people", path, "\(chunk)"])
                if killed < kills && killsInTheLastTransaction < 3 {
                    // A kill after an acknowledged moment (the start, or a chunk committed), and half the time a
                    // random moment later (within a chunk's transaction). The first kill of a chain comes at the
                    // start (before the stage's first transaction commits); the kill after the last chunk at once
                    // (within the last transaction, which swaps the chunks in and builds the indexes), and the
                    // next two a random moment into the last transaction (or after it); then it may finish. A
                    // migration that ends first is not killed.
                    let lastChunk = look.state == .underWay && look.underWay.map { $0.total - $0.completed <= chunk }!
                    // Past `patient` kills a chain goes on to its last transaction (a kill after its last chunk's
                    // report): kills at random moments may make no progress at all, and a busy machine makes fewer
                    // chunks fit between two moments, so without it a chain might use up every kill among its
                    // chunks and none would land in the last transaction.
                    let patient = kill >= patience
                    let chunksLeft =
                        look.underWay.map { ($0.total - $0.completed + chunk - 1) / chunk } ?? people / chunk
                    let reports =
                        lastChunk
                        ? 1
                        : kill == 0 || look.state == .allRewritten
                            ? 0 : patient ? chunksLeft : Int.random(in: 0...1, using: &g)
                    let ended =
                        reports == 0
                        ? try migrator.waitForLinesOrEnd(1, "'opening'") { $0 == "opening" }.ended
                        : try migrator.waitForLinesOrEnd(reports, "progress reports") { $0.hasPrefix("progress") }.ended
                    if !ended {
                        if look.state == .allRewritten {
                            usleep(UInt32.random(in: 0...1_000_000, using: &g))
                            killsInTheLastTransaction += 1
                        } else if kill > 0 && !lastChunk && !patient && Bool.random(using: &g) {
                            usleep(UInt32.random(in: 0...40_000, using: &g))
                        }
                        migrator.kill()
                        killed += 1
                        kill += 1
                    }
                }
                let output = migrator.finish()
                #expect(output.status == 0 || output.terminationReason == .uncaughtSignal, "\(output.stderr)")
                look = try Look(path: path)
                let round = "chain \(chains) kill \(kill)"
                switch look.state {
                case .old:
                    // Before the marker (or after an abandoned stage): every database as it was.
                    #expect(try before.matches(path), "\(round)")
                    outcomes.old += 1
                case .underWay, .allRewritten:
                    // The old records and indexes as they were; the rewritten objects the new records' first ones.
                    #expect(try before.matches(path, besides: ["migrating.Person"]), "\(round)")
                    let rewritten = try after.prefix("migrating.Person", of: path, is: "records.Person")
                    #expect(rewritten == look.underWay?.completed, "\(round): \(String(describing: look.underWay))")
                    #expect(look.underWay?.total == people && look.version == 1, "\(round)")
                    if look.state == .allRewritten { outcomes.allRewritten += 1 } else { outcomes.underWay += 1 }
                    if outcomes.underWay == 1 && look.state == .underWay {
                        // store-inspect says so.
                        let info = try ChildProcess.run(ChildProcess.executable("store-inspect"), ["info", path])
                        #expect(info.stdout.contains("from version 1 to 2: "), "\(info.stdout)\(info.stderr)")
                    }
                    if let at = abandonAt, kill >= at {
                        // The old app opens it: the stage is abandoned, the store is as it was, and the chain starts
                        // over.
                        try Self.openWithTheOldSchema(path)
                        #expect(try before.matches(path), "\(round)")
                        look = try Look(path: path)
                        abandonAt = nil
                        outcomes.abandoned += 1
                    }
                case .done:
                    #expect(try after.matches(path), "\(round)")
                    outcomes.done += 1
                }
            }
            // The finished store opens with the plan, as the uninterrupted one, and is whole.
            let store = try PersistentStore.open(path: path, plan: try PeopleFixture.plan(chunkSize: chunk))
            #expect(try store.checkIntegrity().findings.isEmpty, "chain \(chains)")
            #expect(try store.migrationLog().map(\.toVersion) == [2], "chain \(chains)")
            if chains == 1 { #expect(try PeopleFixture.rows(store) == expected) }
        }
        // Kills landed before the marker, during the chunks (resumed and abandoned), in the last transaction, and
        // after it.
        #expect(
            outcomes.old > 0 && outcomes.underWay > 0 && outcomes.allRewritten > 0 && outcomes.abandoned > 0,
            "\(outcomes)")
        print("chunked migration kills: \(killed) kills over \(chains) chains, \(outcomes)")
    }

    private static func openWithTheOldSchema(_ path: String) throws {
        let old = try PersistentStore.open(path: path, schema: try PeopleFixture.schema(version: 1))
        #expect(try old.migrationUnderWay() == nil && old.checkIntegrity().findings.isEmpty)
    }

    /// What a read-only look at a store finds.
    struct Look {
        enum State { case old, underWay, allRewritten, done }
        let version: Int
        let underWay: MigrationProgress?
        var state: State {
            if version == 2 { return .done }
            guard let underWay else { return .old }
            return underWay.completed == underWay.total ? .allRewritten : .underWay
        }

        init(path: String) throws {
            let store = try PersistentStore.openReadOnly(path: path)
            (version, underWay) = (store.schema.version, try store.migrationUnderWay())
        }
    }
}

/// Every database of a store but its meta database, byte for byte as LMDB returns it: each flattened to its entries
/// in key order (key length, key, value length, value). Other stores are compared with it entry by entry as they are
/// read, without a copy (a debug build would spend most of a kill test copying).
struct StoreBytes {
    private var databases: [String: (entries: Int, bytes: [UInt8])] = [:]

    init(path: String) throws {
        try Self.walk(path) { name, txn, database in
            var (entries, bytes) = (0, [UInt8]())
            try txn.forEachEntry(in: database) { key, value in
                withUnsafeBytes(of: UInt32(key.count).littleEndian) { bytes.append(contentsOf: $0) }
                bytes.append(contentsOf: key)
                withUnsafeBytes(of: UInt32(value.count).littleEndian) { bytes.append(contentsOf: $0) }
                bytes.append(contentsOf: value)
                entries += 1
                return .continue
            }
            databases[name] = (entries, bytes)
        }
    }

    func entries(_ name: String) -> Int? { databases[name]?.entries }

    /// Whether the store at `path` has the same databases as this one, byte for byte, but those named in `besides`.
    func matches(_ path: String, besides: Set<String> = []) throws -> Bool {
        var names: Set<String> = []
        var same = true
        try Self.walk(path) { name, txn, database in
            names.insert(name)
            guard !besides.contains(name), same else { return }
            guard let mine = databases[name] else { return same = false }
            let (entries, agreed) = try Self.agreeing(txn, database, with: mine.bytes)
            same = agreed && entries == mine.entries
        }
        return same && names.subtracting(besides) == Set(databases.keys).subtracting(besides)
    }

    /// How many entries database `name` of the store at `path` has (none when it is missing) when they are, byte for
    /// byte, the first entries of this store's database `mine`; nil when they are not.
    func prefix(_ name: String, of path: String, is mine: String) throws -> Int? {
        guard let expected = databases[mine] else { return nil }
        var result: Int? = 0  // a stage that has rewritten nothing yet may not have made its database
        try Self.walk(path) { found, txn, database in
            guard found == name else { return }
            let (entries, agreed) = try Self.agreeing(txn, database, with: expected.bytes)
            result = agreed ? entries : nil
        }
        return result
    }

    /// Calls `body` for every database of the store at `path` but its meta database, in one read transaction.
    private static func walk(
        _ path: String, _ body: (String, ReadTransaction, Database) throws -> Void
    ) throws {
        let environment = try Environment.open(path: path, options: Environment.Options(readOnly: true))
        try environment.read { txn in
            for name in try txn.databaseNames() where name != "meta" {
                let dupSort = name.hasPrefix("index.") || name.hasPrefix("rel.")
                try body(name, txn, try txn.openDatabase(name, dupSort: dupSort, create: false))
            }
        }
    }

    /// Compares a database's entries with `flat` from its start: how many entries it has, and whether all of them
    /// agree with the first entries of `flat`.
    private static func agreeing(
        _ txn: ReadTransaction, _ database: Database, with flat: [UInt8]
    ) throws -> (entries: Int, agreed: Bool) {
        try flat.withUnsafeBytes { expected in
            var (entries, offset, agreed) = (0, 0, true)
            try txn.forEachEntry(in: database) { key, value in
                entries += 1
                agreed = agreed && agrees(key, expected, &offset) && agrees(value, expected, &offset)
                return .continue
            }
            return (entries, agreed)
        }
    }

    /// Whether `part` is, with its length before it, what `expected` holds at `offset` (moved past it when it is).
    private static func agrees(
        _ part: UnsafeRawBufferPointer, _ expected: UnsafeRawBufferPointer, _ offset: inout Int
    ) -> Bool {
        guard offset + 4 + part.count <= expected.count, let base = expected.baseAddress else { return false }
        var length = UInt32(part.count).littleEndian
        guard memcmp(base + offset, &length, 4) == 0,
            part.isEmpty || memcmp(base + offset + 4, part.baseAddress!, part.count) == 0
        else { return false }
        offset += 4 + part.count
        return true
    }
}
