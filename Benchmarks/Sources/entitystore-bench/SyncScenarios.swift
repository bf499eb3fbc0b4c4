import EntityStore
import EntityStoreSync
import Foundation

/// The items of S10, with the global ID attribute that makes them sync.
func syncBenchSchema() throws -> Schema {
    try Schema(version: 1) {
        Entity("Item") {
            Attribute("syncID", .uuid, optional: true, unique: true)
            Attribute("id", .int64)
            Attribute("title", .string)
            Attribute("score", .int64, indexed: true)
            Attribute("date", .double)
            Attribute("blob", .binary)
            Attribute("group", .int64, default: 0)
        }
    }
}

/// S10: sync through a real PostgreSQL (a scratch cluster started for the run): push and pull throughput of
/// inserts and updates, and the latency from a save on one store to the controller's delegate on another, both
/// syncing in the background.
func s10(_ report: Report, _ n: Int, latencySamples: Int) throws {
    let directory = temporaryDirectory("s10-pg")
    let port = Int.random(in: 20000..<60000)
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scratch-postgres.sh").path
    let started = shell([script, "start", directory, "\(port)"])
    guard started == 0 else {
        throw BenchFailure("S10: \(script) start failed (\(started)); see \(directory)/initdb.out and server.log")
    }
    defer {
        _ = shell([script, "stop", directory])
        try? FileManager.default.removeItem(atPath: directory)
    }
    let user = getuid() == 0 ? "postgres" : NSUserName()
    let connection = "host=\(directory) port=\(port) dbname=postgres user=\(user)"
    let name = "S10 sync through PostgreSQL, \(n) objects"
    for repetition in 0..<3 {
        let aPath = temporaryDirectory("s10-a")
        let bPath = temporaryDirectory("s10-b")
        let a = try PersistentStore.open(path: aPath, schema: syncBenchSchema(), options: .init(mapSize: 1 << 30))
        let b = try PersistentStore.open(path: bPath, schema: syncBenchSchema(), options: .init(mapSize: 1 << 30))
        let zone = "bench-\(repetition)"
        let syncA = try SyncEngine(store: a, configuration: .init(connection: connection, zone: zone))
        let syncB = try SyncEngine(store: b, configuration: .init(connection: connection, zone: zone))
        try syncA.syncNow()
        try syncB.syncNow()
        let context = ObjectContext(store: a)
        var objects: [ManagedObject] = []
        for i in 0..<n {
            let item = ItemData.make(i)
            let object = try context.insert("Item")
            for (key, value) in item.values { try object.setValue(value, forKey: key) }
            objects.append(object)
            if i % 100 == 99 { try context.save() }
        }
        try context.save()
        let changes = Double(n * 6)  // six attributes per insert

        var start = now()
        let pushed = try syncA.syncNow()
        report.record(name, "push inserts (values/s)", "/s", changes / (now() - start))
        start = now()
        let pulled = try syncB.syncNow()
        report.record(name, "pull inserts (objects/s)", "/s", Double(n) / (now() - start))
        guard pushed.pushedChanges == n * 6, pulled.pulledObjects == n else {
            throw BenchFailure("S10: pushed \(pushed.pushedChanges) values, pulled \(pulled.pulledObjects) objects")
        }

        for (i, object) in objects.enumerated() {
            try object.setValue(.int(Int64(i * 7)), forKey: "score")
            if i % 100 == 99 { try context.save() }
        }
        try context.save()
        start = now()
        try syncA.syncNow()
        report.record(name, "push updates (values/s)", "/s", Double(n) / (now() - start))
        start = now()
        try syncB.syncNow()
        report.record(name, "pull updates (objects/s)", "/s", Double(n) / (now() - start))

        // Latency: both in the background; B's screen context merges and drives a controller.
        let screen = ObjectContext(store: b)
        screen.automaticallyMergesChangesFromStore = true
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Item", sortKeys: [SortKey("id")]), context: screen)
        let delegate = ArrivalRecorder()
        controller.delegate = delegate
        try controller.performFetch()
        // start() returns once the loop listens for the other stores' pushes.
        try syncA.start(interval: 30)
        try syncB.start(interval: 30)
        var latencies: [Double] = []
        for i in 0..<latencySamples {
            let before = delegate.batches
            let object = try context.insert("Item")
            for (key, value) in ItemData.make(n + i).values { try object.setValue(value, forKey: key) }
            let saved = now()
            try context.save()
            let deadline = saved + 10
            while delegate.batches == before && now() < deadline {
                screen.processPendingChanges()
                if delegate.batches == before { usleep(50) }
            }
            guard delegate.batches > before else { throw BenchFailure("S10: a save did not reach the other store") }
            latencies.append(now() - saved)
            usleep(20_000)
        }
        syncA.stop()
        syncB.stop()
        latencies.sort()
        report.record(name, "save to delegate, median", "s", latencies[latencies.count / 2])
        report.record(
            name, "save to delegate, p99", "s", latencies[min(latencies.count - 1, latencies.count * 99 / 100)])
        try? FileManager.default.removeItem(atPath: aPath)
        try? FileManager.default.removeItem(atPath: bPath)
    }
}

/// Counts a controller's batches.
final class ArrivalRecorder: FetchedResultsControllerDelegate {
    var batches = 0
    func controllerDidChangeContent(_ controller: FetchedResultsController) { batches += 1 }
    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        FileHandle.standardError.write(Data("S10: the controller failed: \(error)\n".utf8))
    }
}

struct BenchFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Runs a program to its end with the benchmark's output, and gives its exit status.
func shell(_ argv: [String]) -> Int32 {
    var arguments = argv.map { strdup($0) } + [nil]
    defer { for argument in arguments { free(argument) } }
    var pid: pid_t = 0
    guard posix_spawn(&pid, argv[0], nil, nil, &arguments, environ) == 0 else { return -1 }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return status
}
