import EntityStore
import Foundation
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
    @Test func killsDuringAChunkedMigrationLeaveTheOldStoreOrOneThatResumes() throws {
        let kills = TestScale.size(20, stress: 100)
        let people = TestScale.size(4_000, stress: 20_000)
        let chunk = people / 16
        let dir = try TemporaryDirectory(prefix: "chunked-migration-kill")
        defer { dir.remove() }
        let original = dir.path("original.store")
        let made = try ChildProcess.helper(["people-store", original, "\(people)"])
        #expect(made.status == 0, "\(made.stderr)")
        let seeded = try PeopleFixture.rows(try PersistentStore.openReadOnly(path: original))
        // The uninterrupted migration, in another process, and its reports.
        let whole = dir.path("whole.store")
        try FileManager.default.copyItem(atPath: original, toPath: whole)
        let uninterrupted = try ChildProcess.helper(["migrate-people", whole, "\(chunk)"])
        #expect(uninterrupted.stdout.hasSuffix("migrated\n"), "\(uninterrupted.stderr)")
        let reports = uninterrupted.stdout.split(separator: "\n").filter { $0.hasPrefix("progress") }.count
        let expected = try PeopleFixture.rows(try PersistentStore.openReadOnly(path: whole))
        #expect(expected.count == people && expected.first == "Given0|Family0|0")

        var g = SeededGenerator(seed: 11)
        var outcomes = (old: 0, underWay: 0, abandoned: 0, done: 0)
        for round in 0..<kills {
            let path = dir.path("k\(round).store")
            try FileManager.default.copyItem(atPath: original, toPath: path)
            let migrator = try RunningProcess.helper(["migrate-people", path, "\(chunk)"])
            // A kill after an acknowledged moment: the start, or the k-th progress report (a chunk committed),
            // sometimes a moment later (inside the next chunk's transaction).
            let reported = Int.random(in: 0...reports, using: &g)
            if reported == 0 {
                try migrator.waitForLine("opening")
            } else {
                try migrator.waitForLines(reported, "progress reports") { $0.hasPrefix("progress") }
            }
            // Half the kills move a random moment past the acknowledged point, into the next chunk's transaction
            // (where exactly does not matter: every outcome is checked below, and nothing counts work done by then).
            if Bool.random(using: &g) { usleep(UInt32.random(in: 0...20_000, using: &g)) }
            migrator.kill()
            _ = migrator.finish()
            // A read-only look: the old version as it was (its records untouched while a stage is under way), a
            // migration under way, or the new version.
            // (Read in a function of its own: the read-only environment is closed before the store opens to write.)
            func look() throws -> (version: Int, underWay: MigrationProgress?, rows: [String]) {
                let store = try PersistentStore.openReadOnly(path: path)
                return (store.schema.version, try store.migrationUnderWay(), try PeopleFixture.rows(store))
            }
            let (version, underWay, rows) = try look()
            if version == 2 {
                #expect(underWay == nil && rows == expected, "round \(round)")
                outcomes.done += 1  // killed after the migration's last transaction
            } else {
                #expect(rows == seeded, "round \(round)")
                if let underWay {
                    #expect(underWay.fromVersion == 1 && underWay.toVersion == 2 && underWay.total == people)
                    outcomes.underWay += 1
                    if outcomes.underWay == 1 {
                        // store-inspect says so.
                        let info = try ChildProcess.run(ChildProcess.executable("store-inspect"), ["info", path])
                        #expect(info.stdout.contains("from version 1 to 2: "), "\(info.stdout)\(info.stderr)")
                    }
                    if round % 2 == 0 {
                        // The old app opens it: the stage is abandoned, the data is as it was.
                        let old = try PersistentStore.open(path: path, schema: try PeopleFixture.schema(version: 1))
                        #expect(try PeopleFixture.rows(old) == seeded, "round \(round)")
                        #expect(try old.checkIntegrity().findings.isEmpty && old.migrationUnderWay() == nil)
                        outcomes.abandoned += 1
                    }
                } else {
                    outcomes.old += 1
                }
            }
            if round % 4 == 1 {
                // Killed again while finishing: the second open finishes it.
                let again = try RunningProcess.helper(["migrate-people", path, "\(chunk)"])
                try again.waitForLine("opening")
                again.kill()
                _ = again.finish()
            }
            let store = try PersistentStore.open(path: path, plan: try PeopleFixture.plan(chunkSize: chunk))
            #expect(try PeopleFixture.rows(store) == expected, "round \(round)")
            #expect(try store.checkIntegrity().findings.isEmpty, "round \(round)")
            #expect(try store.migrationLog().map(\.toVersion) == [2], "round \(round)")
        }
        // Kills landed before the marker, during the chunks (resumed and abandoned), and the rest.
        #expect(outcomes.old > 0 && outcomes.underWay > outcomes.abandoned && outcomes.abandoned > 0, "\(outcomes)")
    }
}
