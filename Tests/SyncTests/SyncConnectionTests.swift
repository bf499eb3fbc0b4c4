import EntityStore
import EntityStoreSync
import Foundation
import Synchronization
import TestSupport
import Testing

/// Connection failures say what kind they are (an app retries only the server being away), a background sync
/// stops on the ones retrying cannot mend, listens before its first sync, and an async sync leaves its caller free.
@Suite(
    "Sync: connections",
    .enabled(if: ScratchPostgres.isAvailable, "PostgreSQL is not installed (apt-get install postgresql libpq-dev)"))
struct SyncConnectionTests {
    func store(_ directory: TemporaryDirectory, _ name: String = "a.store") throws -> PersistentStore {
        try PersistentStore.open(path: directory.path(name), schema: Fixtures.syncSchema())
    }

    func error(_ connection: String, _ store: PersistentStore) throws -> SyncError {
        let engine = try SyncEngine(store: store, configuration: .init(connection: connection))
        return try #require(throws: SyncError.self) { try engine.syncNow() }
    }

    @Test("each kind of connection failure has its own code, naming what was wrong")
    func connectionFailuresHaveTheirOwnCodes() throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try store(directory)
        try server.psql("CREATE ROLE alice LOGIN PASSWORD 'right'")
        try server.requirePassword(for: "alice")

        let wrongPassword = try error(server.connection(as: "alice", password: "wrong"), store)
        #expect(wrongPassword.code == .authenticationFailed, "\(wrongPassword)")
        #expect(wrongPassword.message.contains("password authentication failed"), "\(wrongPassword)")
        let noPassword = try error(server.connection(as: "alice"), store)
        #expect(noPassword.code == .authenticationFailed, "\(noPassword)")
        let unknownUser = try error(server.connection(as: "nobody"), store)
        #expect(unknownUser.code == .configurationInvalid, "\(unknownUser)")
        #expect(unknownUser.message.contains("nobody"), "\(unknownUser)")
        let unknownDatabase = try error(server.connection(as: "postgres", database: "nowhere"), store)
        #expect(unknownDatabase.code == .configurationInvalid, "\(unknownDatabase)")
        #expect(unknownDatabase.message.contains("nowhere"), "\(unknownDatabase)")
        let malformed = try error("host=\(server.directory) port", store)
        #expect(malformed.code == .configurationInvalid, "\(malformed)")
        let unknownOption = try error(server.connection + " colour=blue", store)
        #expect(unknownOption.code == .configurationInvalid, "\(unknownOption)")
        #expect(unknownOption.message.contains("colour"), "\(unknownOption)")
        // A statement the server refuses: a role that may not make the sync tables (SQLSTATE 42501).
        try server.psql("CREATE ROLE bob LOGIN")
        let refused = try error(server.connection(as: "bob"), store)
        #expect(refused.code == .server, "\(refused)")
        #expect(refused.message.contains("SQLSTATE 42501"), "\(refused)")
        // Away: the one to retry.
        try server.stop()
        let away = try error(server.connection, store)
        #expect(away.code == .serverUnavailable, "\(away)")
        #expect(away.isRetryable && !wrongPassword.isRetryable && !malformed.isRetryable)
    }

    @Test("a background sync refused its credentials reports it once and stops; with the server away it goes on")
    func aBackgroundSyncStopsOnRefusedCredentials() throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try server.psql("CREATE ROLE alice LOGIN PASSWORD 'right'")
        try server.requirePassword(for: "alice")
        let store = try store(directory)
        let engine = try SyncEngine(
            store: store, configuration: .init(connection: server.connection(as: "alice", password: "wrong")))
        let errors = Mutex<[SyncError]>([])
        try engine.start(interval: 0.05, onError: { error in errors.withLock { $0.append(error) } })
        let deadline = Date().addingTimeInterval(RunningProcess.hangDeadline)
        while engine.isSyncingInBackground && Date() < deadline { usleep(5_000) }
        #expect(!engine.isSyncingInBackground, "the loop ended by itself")
        // Saves no longer wake anything, and nothing more is reported.
        let context = ObjectContext(store: store)
        try context.insert("Tag").setValue("after", forKey: "name")
        try context.save()
        #expect(errors.withLock { $0.map(\.code) } == [.authenticationFailed])
        #expect(engine.status.lastError?.contains("password authentication failed") == true)
        engine.stop()
    }

    @Test("a save made right after start() reaches another started store by its notification, 50 times in 50")
    func aSaveRightAfterStartIsHeard() throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let a = try store(directory, "a.store")
        let b = try store(directory, "b.store")
        let tries = TestScale.size(50, stress: 200)
        let senders = try SyncEngine(store: a, configuration: .init(connection: server.connection))
        let receiver = try SyncEngine(store: b, configuration: .init(connection: server.connection))
        for round in 0..<tries {
            // An hour between timed syncs: only the push's notification can bring the save to B in time.
            try receiver.start(interval: 3600)
            try senders.start(interval: 3600)
            let context = ObjectContext(store: a)
            try context.insert("Tag").setValue(.string("round \(round)"), forKey: "name")
            try context.save()
            let deadline = Date().addingTimeInterval(60)
            var arrived = false
            while !arrived && Date() < deadline {
                arrived = try ObjectContext(store: b).count(for: FetchRequest(entity: "Tag")) == round + 1
                if !arrived { usleep(2_000) }
            }
            senders.stop()
            receiver.stop()
            try #require(arrived, "round \(round): B did not hear A's push")
        }
    }

    @Test("syncNow() awaited from the main actor leaves it free; status is read without waiting")
    @MainActor func anAsyncSyncLeavesTheMainActorFree() async throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try store(directory)
        let engine = try SyncEngine(store: store, configuration: .init(connection: server.connection))
        let context = ObjectContext(store: store)
        try context.insert("Tag").setValue("async", forKey: "name")
        try context.save()
        let ticks = Mutex(0)
        let ticker = Task { @MainActor in
            while !Task.isCancelled {
                ticks.withLock { $0 += 1 }
                await Task.yield()
            }
        }
        let report = try await engine.syncNow()
        ticker.cancel()
        #expect(report.pushedEntries == 1)
        #expect(engine.status.pushedThrough == (try store.lastTransaction()))
        #expect(ticks.withLock { $0 } > 0, "the main actor ran while the sync did")
    }
}
