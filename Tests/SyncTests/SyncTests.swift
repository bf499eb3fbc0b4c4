import EntityStore
import EntityStoreSync
import Foundation
import LMDB
import TestSupport
import Testing

/// Two or three stores and a real PostgreSQL server (a scratch cluster per test).
@Suite(
    "Sync through PostgreSQL",
    .enabled(if: ScratchPostgres.isAvailable, "PostgreSQL is not installed (apt-get install postgresql libpq-dev)"))
struct SyncTests {
    /// A store and its engine.
    struct Replica {
        let store: PersistentStore
        let engine: SyncEngine
        var context: ObjectContext

        init(_ directory: TemporaryDirectory, _ name: String, _ server: ScratchPostgres, version: Int = 1) throws {
            store = try PersistentStore.open(path: directory.path(name), schema: Fixtures.syncSchema(version: version))
            engine = try SyncEngine(store: store, configuration: .init(connection: server.connection))
            context = ObjectContext(store: store)
        }

        func contents() throws -> String {
            try Fixtures.syncedContents(of: store, globalID: engine.globalID(of:))
        }

        func object(_ entity: String, named name: String, key: String = "name") throws -> ManagedObject? {
            try context.fetch(FetchRequest(entity: entity, predicate: try FetchPredicate("\(key) == %@", name))).first
        }
    }

    /// A server and two stores syncing with it.
    final class Pair {
        let server: ScratchPostgres
        let directory: TemporaryDirectory
        let a: Replica
        let b: Replica

        init() throws {
            server = try ScratchPostgres()
            directory = try TemporaryDirectory()
            a = try Replica(directory, "a.store", server)
            b = try Replica(directory, "b.store", server)
        }

        /// A task made on A, synced to both.
        func share(taskTitled title: String) throws {
            let task = try a.context.insert("Task")
            try task.setValue(.string(title), forKey: "title")
            try a.context.save()
            try a.engine.syncNow()
            try b.engine.syncNow()
        }

        func remove() {
            server.remove()
            directory.remove()
        }
    }

    @Test("an insert, an update, a relationship and a delete reach the other store")
    func basicRoundTrip() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b) = (pair.a, pair.b)

        let project = try a.context.insert("Project")
        try project.setValue("Launch", forKey: "name")
        try project.setValue(.decimal(Decimal(string: "1234.50")!), forKey: "budget")
        let task = try a.context.insert("Task")
        try task.setValue("Write \"the\" \\ {announcement}, NULL 🚀", forKey: "title")
        try task.setValue(.double(-0.0), forKey: "estimate")
        try task.setValue(.date(Date(timeIntervalSinceReferenceDate: 1e9 + 0.123456789)), forKey: "due")
        try task.setValue(.data([0, 255, 10]), forKey: "attachment")
        try task.setObject(project, forKey: "project")
        let draft = try a.context.insert("Draft")
        try draft.setValue("local only", forKey: "text")
        try a.context.save()

        let pushed = try a.engine.syncNow()
        #expect(pushed.pushedEntries >= 1)
        #expect(pushed.problems.isEmpty)
        let pulled = try b.engine.syncNow()
        #expect(pulled.pulledObjects == 2)
        #expect(pulled.pulledSaves == 1)
        #expect(try a.contents() == b.contents())
        #expect(try b.context.count(for: FetchRequest(entity: "Draft")) == 0)
        let copy = try #require(try b.object("Task", named: "Write \"the\" \\ {announcement}, NULL 🚀", key: "title"))
        #expect(try copy.object(forKey: "project")?.value(forKey: "name") == "Launch")
        #expect(try copy.value(forKey: "attachment") == .data([0, 255, 10]))

        // An update and a delete the other way.
        try copy.setValue(true, forKey: "done")
        try b.context.save()
        try b.engine.syncNow()
        try a.engine.syncNow()
        a.context.reset()
        #expect(
            try a.object("Task", named: "Write \"the\" \\ {announcement}, NULL 🚀", key: "title")?.value(forKey: "done")
                == true)
        try b.context.delete(try #require(try b.object("Project", named: "Launch")))
        try b.context.save()
        try b.engine.syncNow()
        try a.engine.syncNow()
        a.context.reset()
        #expect(try a.context.count(for: FetchRequest(entity: "Project")) == 0)
        #expect(try a.context.count(for: FetchRequest(entity: "Task")) == 0)  // cascade, on both sides
        #expect(try a.contents() == b.contents())
    }

    @Test("a batch upsert's inserts and updates reach the other store, which upserts in turn")
    func batchUpsertsSync() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b) = (pair.a, pair.b)
        try a.store.batchInsert(into: "Tag", objects: [["name": "swift"], ["name": "lmdb"]], onConflict: .update)
        try a.engine.syncNow()
        #expect(try b.engine.syncNow().pulledObjects == 2)
        // On B: "SWIFT" is the pulled "swift" (the name is unique without regard to case), renamed; "postgres" new.
        let ids = try b.store.batchInsert(
            into: "Tag", objects: [["name": "SWIFT"], ["name": "postgres"]], onConflict: .update)
        #expect(try b.object("Tag", named: "SWIFT")?.objectID == ids[0])
        try b.engine.syncNow()
        try a.engine.syncNow()
        #expect(try a.context.count(for: FetchRequest(entity: "Tag")) == 3)
        #expect(try a.object("Tag", named: "SWIFT") != nil && a.object("Tag", named: "swift") == nil)
        #expect(try a.contents() == b.contents())
    }

    @Test("pulled saves are marked remote, reach a controller as one batch, and are not pushed back")
    func pulledChangesAreOneRemoteBatch() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b) = (pair.a, pair.b)

        let screen = ObjectContext(store: b.store)
        screen.automaticallyMergesChangesFromStore = true
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Task", sortKeys: [SortKey("title")]), context: screen)
        let delegate = BatchCounter()
        controller.delegate = delegate
        try controller.performFetch()

        for title in ["one", "two", "three"] {
            let task = try a.context.insert("Task")
            try task.setValue(.string(title), forKey: "title")
            try a.context.save()
        }
        try a.engine.syncNow()
        try b.engine.syncNow()
        screen.processPendingChanges()
        #expect(delegate.batches == 1)
        #expect(controller.fetchedObjects.count == 3)
        let history = try b.store.history()
        #expect(history.filter(SyncEngine.isRemote).count == 1)
        // B pushes nothing back.
        let again = try b.engine.syncNow()
        #expect(again.pushedEntries == 0)
        #expect(again.pushedChanges == 0)
    }

    @Test("in the background, a save on one store reaches the other store's controller without a call")
    func backgroundSync() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b) = (pair.a, pair.b)
        let errors = Locked<[SyncError]>([])
        let reports = Locked<[SyncReport]>([])
        try a.engine.start(interval: 30, onError: { error in errors.withLock { $0.append(error) } })
        try b.engine.start(interval: 30, onSync: { report in reports.withLock { $0.append(report) } }) { error in
            errors.withLock { $0.append(error) }
        }
        defer {
            a.engine.stop()
            b.engine.stop()
        }
        Thread.sleep(forTimeInterval: 0.3)  // both listen
        let task = try a.context.insert("Task")
        try task.setValue("Pushed by itself", forKey: "title")
        try a.context.save()
        let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline)
        var arrived = false
        while !arrived && Date() < deadline {
            arrived = try ObjectContext(store: b.store).count(for: FetchRequest(entity: "Task")) == 1
            if !arrived { Thread.sleep(forTimeInterval: 0.01) }
        }
        #expect(arrived)
        // The report follows the save that brought the object.
        while !reports.withLock({ $0.contains { $0.pulledObjects == 1 } }) && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.01)
        }
        #expect(reports.withLock { $0.contains { $0.pulledObjects == 1 } })
        #expect(errors.withLock { $0 }.isEmpty)
    }

    @Test("in the background, a save made while the server is down arrives once it is back")
    func backgroundSyncRidesOutARestart() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b, server) = (pair.a, pair.b, pair.server)
        let errors = Locked<[SyncError]>([])
        try a.engine.start(interval: 0.5, onError: { error in errors.withLock { $0.append(error) } })
        try b.engine.start(interval: 0.5, onError: { error in errors.withLock { $0.append(error) } })
        defer {
            a.engine.stop()
            b.engine.stop()
        }
        Thread.sleep(forTimeInterval: 0.3)
        try server.stop()
        let task = try a.context.insert("Task")
        try task.setValue("Saved offline", forKey: "title")
        try a.context.save()
        // The next timed sync (every 0.5 s) reports the server as unavailable.
        let offline = Date().addingTimeInterval(RunningProcess.hangDeadline)
        while !errors.withLock({ $0.contains { $0.code == .serverUnavailable } }) && Date() < offline {
            Thread.sleep(forTimeInterval: 0.02)
        }
        #expect(errors.withLock { $0.contains { $0.code == .serverUnavailable } })
        try server.start()
        let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline)
        var arrived = false
        while !arrived && Date() < deadline {
            arrived = try ObjectContext(store: b.store).count(for: FetchRequest(entity: "Task")) == 1
            if !arrived { Thread.sleep(forTimeInterval: 0.02) }
        }
        #expect(arrived)
        // A publishes its status after the server's commit, which B can see and pull first: wait for it too.
        let last = try a.store.lastTransaction()
        while a.engine.status.pushedThrough != last && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(a.engine.status.pushedThrough == last)
    }

    @Test("a typed model's global ID is its object's, and the other store's copy carries it in syncID")
    func typedModelsHaveGlobalIDs() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b) = (pair.a, pair.b)
        let task = try a.context.insert(SyncedTask.self)
        task.title = "typed"
        try a.context.save()
        let id = try a.engine.globalID(of: task)
        #expect(id == (try a.engine.globalID(of: task.managedObject)))
        #expect(task.syncID == nil)  // made here: derived, nothing written
        try a.engine.syncNow()
        try b.engine.syncNow()
        let copy = try #require(try b.context.fetch(SyncedTask.self).first)
        #expect(copy.syncID == id)
        #expect(try b.engine.globalID(of: copy) == id)
    }

    @Test("a value of another type under a key is reported as a problem naming it; the rest applies")
    func mismatchedValuesAreReported() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (b, server, directory) = (pair.b, pair.server, pair.directory)
        // Another app of the zone whose tasks have a string priority.
        let other = try Schema(version: 1) {
            Entity("Task") {
                Attribute("syncID", .uuid, optional: true, unique: true)
                Attribute("title", .string)
                Attribute("priority", .string)
            }
        }
        let c = try PersistentStore.open(path: directory.path("c.store"), schema: other)
        let syncC = try SyncEngine(store: c, configuration: .init(connection: server.connection))
        let context = ObjectContext(store: c)
        let task = try context.insert("Task")
        try task.setValue("mixed", forKey: "title")
        try task.setValue("high", forKey: "priority")
        try context.save()
        try syncC.syncNow()
        let report = try b.engine.syncNow()
        #expect(report.problems.count == 1)
        #expect(report.problems.first?.contains("priority") == true)
        #expect(report.problems.first?.contains("not an int64") == true)
        let copy = try #require(try b.object("Task", named: "mixed", key: "title"))
        #expect(try copy.value(forKey: "priority") == .int(0))
    }

    @Test("the last writer wins property by property, by the hybrid logical clock")
    func lastWriterWinsPerProperty() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b) = (pair.a, pair.b)
        try pair.share(taskTitled: "Plan")

        // Both change the title while apart; A also changes the priority, B the done flag. B saves last.
        let mine = try #require(try a.object("Task", named: "Plan", key: "title"))
        try mine.setValue("Plan (A)", forKey: "title")
        try mine.setValue(5, forKey: "priority")
        try a.context.save()
        Thread.sleep(forTimeInterval: 0.01)
        let theirs = try #require(try b.object("Task", named: "Plan", key: "title"))
        try theirs.setValue("Plan (B)", forKey: "title")
        try theirs.setValue(true, forKey: "done")
        try b.context.save()

        // A pushes first; B's later title wins all the same, and each keeps the other's other property.
        try a.engine.syncNow()
        let report = try b.engine.syncNow()
        #expect(report.refusedChanges == 0)
        try a.engine.syncNow()
        try b.engine.syncNow()
        let contents = try a.contents()
        #expect(contents == (try b.contents()))
        #expect(contents.contains("title=\"Plan (B)\""))
        #expect(contents.contains("priority=5"))
        #expect(contents.contains("done=true"))
    }

    @Test("an older change refused by the server is replaced by the newer one")
    func refusedChangeIsReplaced() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b) = (pair.a, pair.b)
        try pair.share(taskTitled: "Plan")

        // B's change is older but pushed after A's.
        let theirs = try #require(try b.object("Task", named: "Plan", key: "title"))
        try theirs.setValue("older", forKey: "title")
        try b.context.save()
        Thread.sleep(forTimeInterval: 0.01)
        let mine = try #require(try a.object("Task", named: "Plan", key: "title"))
        try mine.setValue("newer", forKey: "title")
        try a.context.save()
        try a.engine.syncNow()
        let report = try b.engine.syncNow()
        #expect(report.refusedChanges == 1)
        #expect(try b.contents().contains("title=\"newer\""))
        #expect(try a.contents() == b.contents())
    }

    @Test("a delete wins over a concurrent update, unless the policy says the newest change wins")
    func deletesWinOverUpdates() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b, server, directory) = (pair.a, pair.b, pair.server, pair.directory)
        let task = try a.context.insert("Task")
        try task.setValue("Doomed", forKey: "title")
        try a.context.save()
        try a.engine.syncNow()
        try b.engine.syncNow()
        try a.context.delete(try #require(try a.object("Task", named: "Doomed", key: "title")))
        try a.context.save()
        Thread.sleep(forTimeInterval: 0.01)
        let theirs = try #require(try b.object("Task", named: "Doomed", key: "title"))
        try theirs.setValue(9, forKey: "priority")
        try b.context.save()
        try a.engine.syncNow()
        try b.engine.syncNow()
        try a.engine.syncNow()
        b.context.reset()
        #expect(try b.context.count(for: FetchRequest(entity: "Task")) == 0)
        #expect(try a.context.count(for: FetchRequest(entity: "Task")) == 0)

        // With newestWins, an update after the delete brings the object back everywhere.
        let c = try PersistentStore.open(path: directory.path("c.store"), schema: Fixtures.syncSchema())
        let d = try PersistentStore.open(path: directory.path("d.store"), schema: Fixtures.syncSchema())
        let config = SyncConfiguration(connection: server.connection, zone: "newest", deletePolicy: .newestWins)
        let syncC = try SyncEngine(store: c, configuration: config)
        let syncD = try SyncEngine(store: d, configuration: config)
        let cContext = ObjectContext(store: c)
        let kept = try cContext.insert("Task")
        try kept.setValue("Phoenix", forKey: "title")
        try cContext.save()
        try syncC.syncNow()
        try syncD.syncNow()
        try cContext.delete(kept)
        try cContext.save()
        Thread.sleep(forTimeInterval: 0.01)
        let dContext = ObjectContext(store: d)
        let later = try #require(try dContext.fetch(FetchRequest(entity: "Task")).first)
        try later.setValue(7, forKey: "priority")
        try dContext.save()
        try syncC.syncNow()
        try syncD.syncNow()
        try syncC.syncNow()
        let cContents = try Fixtures.syncedContents(of: c, globalID: syncC.globalID(of:))
        #expect(try cContents == Fixtures.syncedContents(of: d, globalID: syncD.globalID(of:)))
        #expect(cContents.contains("title=\"Phoenix\""))
    }

    @Test("two stores that give a unique value to different objects keep the same one, and say so")
    func uniquenessConflictsResolveTheSameEverywhere() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b) = (pair.a, pair.b)
        for replica in [a, b] {
            let tag = try replica.context.insert("Tag")
            try tag.setValue(replica.store === a.store ? "urgent" : "URGENT", forKey: "name")
            let task = try replica.context.insert("Task")
            try task.setValue(.string("task of \(replica.store === a.store ? "a" : "b")"), forKey: "title")
            try task.add(tag, toKey: "tags")
            try replica.context.save()
        }
        try a.engine.syncNow()
        let report = try b.engine.syncNow()
        #expect(report.conflicts.count == 1)
        try a.engine.syncNow()
        try b.engine.syncNow()
        let contents = try a.contents()
        #expect(contents == (try b.contents()))
        #expect(try a.context.count(for: FetchRequest(entity: "Tag")) == 1)
        let conflict = try #require(report.conflicts.first)
        #expect(conflict.kept.uuidString < conflict.removed.uuidString)
        #expect(contents.contains(conflict.kept.uuidString))
        #expect(!contents.contains(conflict.removed.uuidString))
    }

    @Test("a push retried from an old cursor writes nothing twice")
    func pushesAreIdempotent() throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var a: Replica? = try Replica(directory, "a.store", server)
        try a!.engine.syncNow()
        let task = try a!.context.insert("Task")
        try task.setValue("Once", forKey: "title")
        try a!.context.save()
        let before = try #require(try a!.store.metadata(forKey: SyncState.metadataKey))
        try a!.engine.syncNow()
        // As if killed after PostgreSQL committed but before the store wrote the push cursor.
        a = nil
        let reopened = try PersistentStore.open(path: directory.path("a.store"), schema: Fixtures.syncSchema())
        try reopened.setMetadata(before, forKey: SyncState.metadataKey)
        a = try Replica(directory, "a.store", server)
        let retry = try a!.engine.syncNow()
        #expect(retry.pushedEntries == 0)
        let b = try Replica(directory, "b.store", server)
        let pulled = try b.engine.syncNow()
        #expect(pulled.pulledEntries == 1)
        #expect(try b.context.count(for: FetchRequest(entity: "Task")) == 1)
    }

    @Test("a copy of a store's directory becomes a new replica by itself: nothing is lost, all converge")
    func aCopiedStoreBecomesANewReplica() throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let a = try Replica(directory, "a.store", server)
        func add(_ title: String, to replica: Replica) throws {
            try replica.context.insert("Task").setValue(.string(title), forKey: "title")
            try replica.context.save()
        }
        try add("one", to: a)
        try a.engine.syncNow()
        try add("saved before the copy", to: a)  // not pushed when the directory is copied
        try FileManager.default.copyItem(atPath: directory.path("a.store"), toPath: directory.path("c.store"))
        try add("two", to: a)
        try a.engine.syncNow()
        let c = try Replica(directory, "c.store", server)
        // The copy's data file is not the one its state was written with: a new replica, the original's former.
        #expect(c.engine.status.storeID != a.engine.status.storeID)
        #expect(c.engine.status.formerStoreIDs == [a.engine.status.storeID])
        #expect(c.engine.status.originID == a.engine.status.originID)
        try add("three", to: c)  // the same key as "two" in the original: another object all the same
        try c.engine.syncNow()
        try a.engine.syncNow()
        let b = try Replica(directory, "b.store", server)
        #expect(try syncUntilQuiet([a.engine, b.engine, c.engine]))
        let contents = try a.contents()
        #expect(try b.contents() == contents)
        #expect(try c.contents() == contents)
        let titles = try ObjectContext(store: b.store).fetch(FetchRequest(entity: "Task")).map {
            try $0.value(forKey: "title")
        }
        // The change saved before the copy and not pushed is in both directories: each pushes its own.
        #expect(
            titles.sorted { $0.description < $1.description }
                == ["one", "saved before the copy", "saved before the copy", "three", "two"].map(Value.string))
    }

    @Test("with PostgreSQL down the store keeps working, and the next sync resumes from the cursors")
    func offlineFirst() throws {
        let pair = try Pair()
        defer { pair.remove() }
        let (a, b, server, directory) = (pair.a, pair.b, pair.server, pair.directory)
        try a.engine.syncNow()
        try server.stop()
        let task = try a.context.insert("Task")
        try task.setValue("Offline", forKey: "title")
        try a.context.save()
        let error = try #require(throws: SyncError.self) { try a.engine.syncNow() }
        #expect(error.code == .serverUnavailable)
        #expect(a.engine.status.lastError?.contains("serverUnavailable") == true)
        // store-inspect reads the state offline: the error, and the one entry waiting.
        let inspect = ChildProcess.executable("store-inspect")
        let waiting = try ChildProcess.run(inspect, ["sync-status", directory.path("a.store"), "--format", "json"])
        #expect(waiting.status == 0, "\(waiting.stderr)")
        #expect(waiting.stdout.contains("\"entries not pushed\": 1"), "\(waiting.stdout)")
        #expect(waiting.stdout.contains("serverUnavailable"), "\(waiting.stdout)")
        try server.start()
        try a.engine.syncNow()
        #expect(a.engine.status.lastError == nil)
        let synced = try ChildProcess.run(inspect, ["sync-status", directory.path("a.store"), "--format", "json"])
        #expect(synced.stdout.contains("\"entries not pushed\": 0"), "\(synced.stdout)")
        #expect(synced.stdout.contains("\"last error\": null"), "\(synced.stdout)")
        try b.engine.syncNow()
        #expect(try b.object("Task", named: "Offline", key: "title") != nil)
    }

    @Test("changes of a newer schema wait on the server until the store migrates")
    func newerSchemaWaits() throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let new = try Replica(directory, "new.store", server, version: 2)
        let old = try Replica(directory, "old.store", server)
        let milestone = try new.context.insert("Milestone")
        try milestone.setValue("Beta", forKey: "title")
        try new.context.save()
        try new.engine.syncNow()
        let error = try #require(throws: SyncError.self) { try old.engine.syncNow() }
        #expect(error.code == .schemaTooNew)
        #expect(error.message.contains("schema version 2"))
        #expect(old.engine.status.pulledThrough == 0)
    }

    @Test("an entity's global ID must be a unique uuid, and one engine syncs a store at a time")
    func configurationErrors() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let schema = try Schema(version: 1) {
            Entity("Item") {
                Attribute("syncID", .string, optional: true)
            }
        }
        let store = try PersistentStore.open(path: directory.path("x.store"), schema: schema)
        let error = try #require(throws: SyncError.self) {
            try SyncEngine(store: store, configuration: .init(connection: "host=/nonexistent"))
        }
        #expect(error.code == .notSyncable)
        #expect(error.message.contains("Item.syncID"))

        let synced = try PersistentStore.open(path: directory.path("y.store"), schema: Fixtures.syncSchema())
        let first = try SyncEngine(store: synced, configuration: .init(connection: "host=/nonexistent"))
        let busy = try #require(throws: SyncError.self) {
            try SyncEngine(store: synced, configuration: .init(connection: "host=/nonexistent"))
        }
        #expect(busy.code == .busy)
        let offline = try #require(throws: SyncError.self) { try first.syncNow() }
        #expect(offline.code == .serverUnavailable)
    }

    @Test("an engine in another process holds the store's sync until that process ends")
    func anEngineInAnotherProcessHoldsTheStore() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("held.store")
        _ = try PersistentStore.open(path: path, schema: Fixtures.syncSchema())
        let worker = try RunningProcess(
            ChildProcess.executable("es-sync-helper"), ["work", path, "host=/nonexistent", "1", "1"])
        try worker.waitForLine("round 0 offline")
        let store = try PersistentStore.open(path: path, schema: Fixtures.syncSchema())
        let busy = try #require(throws: SyncError.self) {
            try SyncEngine(store: store, configuration: .init(connection: "host=/nonexistent"))
        }
        #expect(busy.code == .busy)
        #expect(busy.message.contains("another sync engine holds it"), "\(busy)")
        worker.stop()
        let ended = worker.finish()
        #expect(ended.status == 0, "\(ended.stderr)")
        _ = try SyncEngine(store: store, configuration: .init(connection: "host=/nonexistent"))
    }

    /// A child the app spawns while an engine runs shares the engine's open files until it calls `exec` (and keeps
    /// any it is handed): the lock must stay the engine's, so the next engine is not refused once it is gone.
    @Test("a child process that shares the lock file's descriptor does not hold the store's sync")
    func aChildSharingTheLockFileDoesNotHoldTheStore() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("shared.store")
        let store = try PersistentStore.open(path: path, schema: Fixtures.syncSchema())
        var child: pid_t = 0
        do {
            let engine = try SyncEngine(store: store, configuration: .init(connection: "host=/nonexistent"))
            let lockFile = try #require(try Self.descriptor(of: path + "/sync.lock"))
            // The child keeps the descriptor as its fd 3 (as a fork keeps every one until it execs) and sleeps.
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_adddup2(&actions, lockFile, 3)
            let arguments: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("600"), nil]
            defer { arguments.forEach { free($0) } }
            #expect(posix_spawn(&child, "/bin/sleep", &actions, nil, arguments, environ) == 0)
            withExtendedLifetime(engine) {}
        }
        defer {
            kill(child, SIGKILL)
            var status: Int32 = 0
            waitpid(child, &status, 0)
        }
        #expect(try Self.descriptor(of: path + "/sync.lock") == nil, "the released engine kept its lock file open")
        _ = try SyncEngine(store: store, configuration: .init(connection: "host=/nonexistent"))
    }

    /// An app that copies the store's directory while its engine runs opens and closes `sync.lock`: the engine keeps
    /// the store (a POSIX record lock would have been dropped by that close).
    @Test("reading the lock file in the engine's process (a copy of the directory) keeps the store's sync")
    func readingTheLockFileKeepsTheStore() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("copied.store")
        let store = try PersistentStore.open(path: path, schema: Fixtures.syncSchema())
        let engine = try SyncEngine(store: store, configuration: .init(connection: "host=/nonexistent"))
        try FileManager.default.copyItem(atPath: path, toPath: directory.path("copy.store"))
        #expect(FileManager.default.fileExists(atPath: directory.path("copy.store/sync.lock")))
        // Another process cannot take the store, nor can another engine of this process.
        let other = try ChildProcess.run(
            ChildProcess.executable("es-sync-helper"), ["sync", path, "host=/nonexistent"])
        #expect(other.status == 1 && other.stderr.contains("another sync engine holds it"), "\(other.stderr)")
        let busy = try #require(throws: SyncError.self) {
            try SyncEngine(store: store, configuration: .init(connection: "host=/nonexistent"))
        }
        #expect(busy.code == .busy)
        withExtendedLifetime(engine) {}
    }

    /// This process's descriptor open on `path`, if any.
    static func descriptor(of path: String) throws -> Int32? {
        // A descriptor closed between the listing and its `readlink` (the listing's own) reads as no path.
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap(Int32.init).first { fd in
            var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let length = readlink("/proc/self/fd/\(fd)", &target, target.count - 1)
            return length > 0
                && String(decoding: target[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) == path
        }
    }
}

/// The sync fixture's task as a typed model.
final class SyncedTask: Model {
    override class var entityName: String { "Task" }
    @Stored var syncID: UUID?
    @Stored var title: String
}

/// Counts a controller's batches.
final class BatchCounter: FetchedResultsControllerDelegate {
    var batches = 0
    var failures: [String] = []

    func controllerDidChangeContent(_ controller: FetchedResultsController) { batches += 1 }
    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        failures.append(error.message)
    }
}
