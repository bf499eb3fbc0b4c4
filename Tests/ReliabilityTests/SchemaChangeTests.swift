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
