import EntityStore
import EntityStoreSync
import Foundation
import TestSupport
import Testing

/// The sync engine's state under power loss, as the crash-consistency tests explore a store's: a sync of a store
/// (pushing its local tasks, pulling another store's, in batches) is recorded by the I/O recorder, and every state a
/// power loss may leave of the store is rebuilt and synced again through the same server. It must open whole and
/// converge to what a fresh replica pulls, and its second sync must push nothing the server did not have: no change
/// lost (a push the state does not remember is pushed again, once), none duplicated.
@Suite struct SyncCrashStateTests {
    @Test func everyPowerLossStateOfASyncConvergesWithoutLossOrDuplicates() throws {
        let tasks = TestScale.size(40, stress: 120)
        let (samplesPerEpoch, tornSamples) = (TestScale.size(4, stress: 16), TestScale.size(3, stress: 12))
        let server = try ScratchPostgres()
        defer { server.remove() }
        let dir = try TemporaryDirectory(prefix: "sync-crash-states", inMemory: true)
        defer { dir.remove() }
        let library = try IORecording.buildRecorder(into: dir.path)
        // Another store's tasks on the server, and this store's own, not pushed yet.
        func add(_ prefix: String, to path: String) throws -> PersistentStore {
            let store = try PersistentStore.open(path: path, schema: try Fixtures.syncSchema())
            let context = ObjectContext(store: store)
            for i in 0..<tasks {
                try context.insert("Task").setValue(.string("\(prefix) \(i)"), forKey: "title")
                if i % 5 == 4 { try context.save() }
            }
            try context.save()
            return store
        }
        do {
            let other = try add("other", to: dir.path("other.store"))
            let engine = try SyncEngine(store: other, configuration: .init(connection: server.connection))
            while try engine.syncNow().pushedChanges > 0 {}
        }
        let path = dir.path("recorded.store")
        _ = try add("own", to: path)
        let initial = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")))
        let environment = IORecording.environment(library: library, watching: path, log: dir.path("io.log"))
        let run = try ChildProcess.run(
            ChildProcess.executable("es-sync-helper"), ["sync", path, server.connection], environment: environment)
        #expect(run.status == 0 && run.stdout.contains("synced"), "\(run.stderr)")
        let (events, files) = try IORecording.readLog(dir.path("io.log"))
        // The data file, and the sync engine's lock file (which is never written).
        let dataFile = files.firstIndex(of: path + "/data.mdb")
        #expect(
            dataFile != nil && Set(files).subtracting([path + "/data.mdb", path + "/sync.lock"]).isEmpty, "\(files)")

        // What every replica converges to: a fresh one pulls it all.
        let reference = try PersistentStore.open(path: dir.path("reference.store"), schema: try Fixtures.syncSchema())
        let referenceEngine = try SyncEngine(store: reference, configuration: .init(connection: server.connection))
        func pulled() throws -> String {
            while try referenceEngine.syncNow().pulledObjects > 0 {}
            return try Fixtures.syncedContents(of: reference, globalID: referenceEngine.globalID(of:))
        }
        let truth = try pulled()
        #expect(try ObjectContext(store: reference).count(for: FetchRequest(entity: "Task")) == 2 * tasks)

        // How far the recorded sync's push got, as its store says once it finished.
        let pushedThrough = try SyncState.read(from: try PersistentStore.openReadOnly(path: path))?.pushedThrough ?? 0
        #expect(pushedThrough > 0)
        var epochs: [[(offset: Int, bytes: [UInt8])]] = [[]]
        for event in events {
            switch event {
            case .write(let file, let offset, let bytes):
                #expect(file == dataFile, "the sync wrote \(files[file])")
                epochs[epochs.count - 1].append((offset, bytes))
            case .sync: epochs.append([])
            default: Issue.record("the sync truncated, linked or unlinked a store file: \(event)")
            }
        }
        var random = SeededGenerator(seed: 5432)
        var synced = initial
        var seen: Set<Int> = []
        var repushed = 0
        for (index, writes) in epochs.enumerated() {
            let states = IORecording.crashImages(
                of: writes, over: synced, subsets: samplesPerEpoch, torn: tornSamples, using: &random)
            for image in states where IORecording.isNew(image, seen: &seen) {
                // Written over the recorded store's own data file: a power loss leaves the same file, and the sync
                // state knows its file (a store in another file is a copy, which syncs as a replica of its own).
                try Self.overwrite(path + "/data.mdb", with: image)
                let store = try PersistentStore.open(
                    path: path, schema: try Fixtures.syncSchema(), options: .init(sync: .noSync))
                #expect(try store.checkIntegrity().findings.isEmpty, "epoch \(index)")
                // A state that does not remember the whole push pushes again what the server already has.
                if try (SyncState.read(from: store)?.pushedThrough ?? 0) < pushedThrough { repushed += 1 }
                let engine = try SyncEngine(store: store, configuration: .init(connection: server.connection))
                var passes = 0
                while passes < 10 {
                    let report = try engine.syncNow()
                    if report.pushedChanges == 0 && report.pulledObjects == 0 { break }
                    passes += 1
                }
                #expect(passes < 10, "epoch \(index): the state's sync never settled")
                let contents = try Fixtures.syncedContents(of: store, globalID: engine.globalID(of:))
                #expect(contents == truth, "epoch \(index): the state synced differs from what a fresh replica pulls")

            }
            for write in writes { IORecording.apply(write, to: &synced) }
        }
        // Nothing a state pushed again changed the server: a fresh look pulls the same, with no task twice.
        #expect(try pulled() == truth)
        let fresh = try PersistentStore.open(path: dir.path("fresh.store"), schema: try Fixtures.syncSchema())
        let freshEngine = try SyncEngine(store: fresh, configuration: .init(connection: server.connection))
        while try freshEngine.syncNow().pulledObjects > 0 {}
        #expect(try Fixtures.syncedContents(of: fresh, globalID: freshEngine.globalID(of:)) == truth)
        #expect(try ObjectContext(store: fresh).count(for: FetchRequest(entity: "Task")) == 2 * tasks)
        print("sync crash states: \(seen.count) distinct over \(epochs.count) epochs, \(repushed) behind the push")
        #expect(repushed > 0, "no state had a push to make again: the states do not reach inside the push")
    }

    /// Replaces the contents of the file at `path` with `bytes`, keeping the file (its inode).
    static func overwrite(_ path: String, with bytes: [UInt8]) throws {
        let fd = open(path, O_WRONLY | O_TRUNC)
        guard fd >= 0 else { throw RecorderFailure("cannot open \(path): errno \(errno)") }
        defer { close(fd) }
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count else { throw RecorderFailure("cannot write \(path): errno \(errno)") }
    }
}
