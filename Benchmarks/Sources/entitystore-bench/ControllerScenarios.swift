import CHeapStats
import EntityStore
import Foundation

/// Counts the moves a controller delivers.
final class CountingDelegate: FetchedResultsControllerDelegate {
    var moves = 0
    var batches = 0
    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        FileHandle.standardError.write(Data("the controller failed: \(error)\n".utf8))
        exit(1)
    }
    func controllerWillChangeContent(_ controller: FetchedResultsController) { batches += 1 }
    func controller(
        _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
        for type: ResultsChangeType, newIndexPath: ItemPath?
    ) {
        if type == .move { moves += 1 }
    }
}

/// A controller over the items sorted by score, flat or in 100 sections, fetched, counting its moves.
func scoreController(_ context: ObjectContext, sectioned: Bool) throws -> (FetchedResultsController, CountingDelegate) {
    let controller = FetchedResultsController(
        fetchRequest: FetchRequest(entity: "Item", sortKeys: [SortKey("score")]), context: context,
        sectionNameKeyPath: sectioned ? "group" : nil)
    let delegate = CountingDelegate()
    controller.delegate = delegate
    try controller.performFetch()
    return (controller, delegate)
}

/// Writes the items with primary keys `keys`: every other one a new score (a reorder), the rest a new title (an
/// update in place). Returns how many were reordered.
@discardableResult
func changeItems<S: Sequence>(_ keys: S, in context: ObjectContext, label: String) throws -> Int
where S.Element == UInt64 {
    var generator = SystemRandomNumberGenerator()
    var reordered = 0
    for (i, key) in keys.enumerated() {
        let object = try context.object(with: ObjectID(entityName: "Item", primaryKey: key))
        if i % 2 == 0 {
            try object.setValue(.int(Int64.random(in: 0..<10_000, using: &generator)), forKey: "score")
            reordered += 1
        } else {
            try object.setValue(.string("changed \(label) \(i)"), forKey: "title")
        }
    }
    return reordered
}

/// S6: the controller's change computation after 1% of rows change (half of them their order), flat and with
/// 100 sections, against the standard library's diff of the same lists.
func s6(_ report: Report, _ n: Int, batchesPerRepetition: Int = 5) throws {
    let items = (0..<n).map(ItemData.make)
    let path = temporaryDirectory("s6")
    let store = try entityStore(path, items)
    // ES_PROFILE_ONLY=flat or sectioned runs one of the two (for a profile of one).
    let only = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"]
    for sectioned in [false, true] where only != (sectioned ? "flat" : "sectioned") {
        let name = "S6 controller after 1% of \(n) rows change" + (sectioned ? ", 100 sections" : ", flat")
        // The moves and reordered objects of the first batch, or of the first batch with more moves than reordered
        // objects: every batch is checked.
        var firstBatch: (moves: Int, reordered: Int)?
        for repetition in 0..<3 {
            let context = ObjectContext(store: store)
            let (controller, delegate) = try scoreController(context, sectioned: sectioned)
            // Several batches per controller, each timed: one batch of ~2 ms is a single sample, and a moment of the
            // shared machine's noise decided a repetition (the medians are over every batch of every repetition).
            for batch in 0..<batchesPerRepetition {
                let before = controller.fetchedObjectIDs
                let keys = Set((0..<(n / 100)).map { _ in UInt64.random(in: 1...UInt64(n)) })
                let reordered = try changeItems(keys, in: context, label: "\(repetition).\(batch)")
                let movesBefore = delegate.moves
                var start = now()
                entitystore_profile_toggle()
                context.processPendingChanges()
                entitystore_profile_toggle()
                report.record(name, "EntityStore controller", "s", now() - start)
                let after = controller.fetchedObjectIDs
                start = now()
                let difference = after.difference(from: before).inferringMoves()
                report.record(name, "stdlib inferringMoves", "s", now() - start)
                consume(difference.count)
                let moves = delegate.moves - movesBefore
                if moves > reordered || firstBatch == nil { firstBatch = (moves, reordered) }
            }
            // The same batches through a `batches()` stream read late (kept, not read while the batches come):
            // each batch holds its changes, its snapshot built when read.
            let streamContext = ObjectContext(store: store)
            let (streamed, _) = try scoreController(streamContext, sectioned: sectioned)
            streamed.delegate = nil
            let stream = streamed.batches()
            for batch in 0..<batchesPerRepetition {
                let keys = Set((0..<(n / 100)).map { _ in UInt64.random(in: 1...UInt64(n)) })
                try changeItems(keys, in: streamContext, label: "stream \(repetition).\(batch)")
                let start = now()
                streamContext.processPendingChanges()
                report.record(name, "EntityStore controller, batches()", "s", now() - start)
            }
            withExtendedLifetime((streamed, stream)) {}
        }
        if let (moves, reordered) = firstBatch {
            report.target(
                "S6", "\(name): moves minimal (at most the \(reordered) reordered objects)",
                moves <= reordered, "\(moves) moves")
        }
        let es = report.median(name, "EntityStore controller")
        let stdlib = report.median(name, "stdlib inferringMoves")
        report.target("S6", "\(name): at most 2 ms", es <= 0.002, String(format: "%.2f ms", es * 1e3))
        let streamed = report.median(name, "EntityStore controller, batches()")
        report.target(
            "S6", "\(name): through batches() within 10% of the delegate", streamed <= es * 1.1,
            String(format: "%.2f ms, %.2fx", streamed * 1e3, streamed / es))
        report.target(
            "S6", "\(name): at least 50x faster than inferringMoves", es * 50 <= stdlib,
            String(format: "%.1fx", stdlib / es))
    }
    try? FileManager.default.removeItem(atPath: path)
}

/// S6, second part: a save that changes `changes` objects (half of them their order) under a controller over the
/// `n` rows of `store`, flat and with 100 sections.
func s6Few(_ report: Report, _ store: PersistentStore, _ n: Int, changes: Int) throws {
    for sectioned in [false, true] {
        let name = "S6 controller after \(changes) of \(n) rows change" + (sectioned ? ", 100 sections" : ", flat")
        let context = ObjectContext(store: store)
        let (controller, _) = try scoreController(context, sectioned: sectioned)
        for repetition in 0..<5 {
            var keys = Set<UInt64>()
            while keys.count < changes { keys.insert(UInt64.random(in: 1...UInt64(n))) }
            try changeItems(keys, in: context, label: "\(repetition)")
            let start = now()
            context.processPendingChanges()
            report.record(name, "EntityStore controller", "s", now() - start)
            context.rollback()
            context.processPendingChanges()
        }
        withExtendedLifetime(controller) {}  // it observes the context only while it lives
        let es = report.median(name, "EntityStore controller")
        report.target("S6", "\(name): at most 1 ms", es <= 0.001, String(format: "%.2f ms", es * 1e3))
    }
}

/// S7: the controller's performFetch over the n rows of `store` sectioned by an indexed key, and its resident
/// memory per row.
func s7(_ report: Report, _ store: PersistentStore, _ n: Int) throws {
    let name = "S7 controller performFetch, \(n) rows, sectioned"
    for _ in 0..<3 {
        let context = ObjectContext(store: store)
        // Touch every page first so that the memory map's resident pages are not counted as the controller's.
        consume(try context.count(for: FetchRequest(entity: "Item", predicate: try FetchPredicate("date < 0"))))
        let baseline = heapBytesInUse()
        let start = now()
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Item", sortKeys: [SortKey("score")]), context: context,
            sectionNameKeyPath: "group")
        try controller.performFetch()
        report.record(name, "EntityStore", "s", now() - start)
        report.record(name + " (memory)", "EntityStore", "bytes/row", Double(heapBytesInUse() - baseline) / Double(n))
        consume(controller.sections.count)
        withExtendedLifetime(controller) {}
    }
    let perRow = report.median(name + " (memory)", "EntityStore")
    report.target("S7", "at most 100 bytes per row", perRow <= 100, String(format: "%.0f bytes/row", perRow))
}

/// S8: from a save in this process to the delegate call of a controller in another process: saves 5 ms apart
/// (busy), then saves after idle gaps (the watcher sleeps until the commit wakes it), and the observer's CPU time
/// while nothing happens.
func s8(_ report: Report, _ saves: Int, idleSaves: Int, idleGap: Double) throws {
    let path = temporaryDirectory("s8")
    let store = try entityStore(path, (0..<100).map(ItemData.make))
    let observer = Process()
    observer.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    observer.arguments = ["s8-observer", path, "\(saves + idleSaves)"]
    let pipe = Pipe()
    observer.standardOutput = pipe
    try observer.run()
    // Wait for the observer to be ready.
    let handle = pipe.fileHandleForReading
    var ready = Data()
    while !String(decoding: ready, as: UTF8.self).contains("ready\n") {
        let chunk = handle.availableData
        if chunk.isEmpty { break }
        ready.append(chunk)
    }
    let context = ObjectContext(store: store)
    let object = try context.fetch(FetchRequest(entity: "Item", predicate: try FetchPredicate("id == 1")))[0]
    var saved: [Double] = []
    func save(_ i: Int) throws {
        try object.setValue(.int(Int64(i)), forKey: "score")
        try context.save()
        saved.append(Date().timeIntervalSince1970)
    }
    for i in 0..<saves {
        try save(i)
        usleep(5_000)
    }
    // Idle: the observer should use no CPU; then each save comes after a quiet gap.
    usleep(200_000)
    let cpuBefore = cpuSeconds(of: observer.processIdentifier)
    usleep(UInt32(idleGap * 1_000_000))
    let cpuIdle = cpuSeconds(of: observer.processIdentifier) - cpuBefore
    for i in 0..<idleSaves {
        if i > 0 { usleep(UInt32(idleGap * 1_000_000)) }
        try save(saves + i)
    }
    // The observer stops after its deliveries; never wait for it longer than 30 s.
    let deadline = Date().addingTimeInterval(30)
    while observer.isRunning && Date() < deadline { usleep(10_000) }
    if observer.isRunning { observer.terminate() }
    let output = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
    observer.waitUntilExit()
    let received = output.split(separator: "\n").compactMap { Double($0) }
    let latencies = zip(saved, received).map { $1 - $0 }
    func percentile(_ values: [Double], _ p: Int) -> Double {
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, sorted.count * p / 100)]
    }
    let busy = Array(latencies.prefix(saves))
    let idle = Array(latencies.dropFirst(saves))
    if !busy.isEmpty {
        report.record("S8 save-to-delegate across processes (median)", "EntityStore", "s", percentile(busy, 50))
        report.record("S8 save-to-delegate across processes (p99)", "EntityStore", "s", percentile(busy, 99))
    }
    if !idle.isEmpty {
        report.record("S8 after an idle gap (median)", "EntityStore", "s", percentile(idle, 50))
        report.record("S8 after an idle gap (p99)", "EntityStore", "s", percentile(idle, 99))
    }
    report.record("S8 observer CPU while idle", "EntityStore", "ms/s", cpuIdle * 1000 / idleGap)
    do { try FileManager.default.removeItem(atPath: path) } catch { print("cannot remove \(path): \(error)") }
}

/// The targets of S8, from the medians of the repetitions.
func s8Targets(_ report: Report) {
    let median = report.median("S8 after an idle gap (median)", "EntityStore")
    let p99 = report.median("S8 after an idle gap (p99)", "EntityStore")
    let busy = report.median("S8 save-to-delegate across processes (median)", "EntityStore")
    report.target(
        "S8", "median <= 2 ms and p99 <= 10 ms, also after idle gaps", median <= 0.002 && p99 <= 0.010 && busy <= 0.002,
        String(
            format: "busy median %.2f ms; after idle median %.2f ms, p99 %.2f ms", busy * 1000, median * 1000,
            p99 * 1000))
    let cpu = report.median("S8 observer CPU while idle", "EntityStore")
    report.target("S8", "no CPU use while idle", cpu < 1, String(format: "%.3f ms of CPU per second idle", cpu))
}

/// User plus system CPU seconds a process has used (from /proc/PID/stat).
func cpuSeconds(of pid: Int32) -> Double {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = text.lastIndex(of: ")")
    else { return 0 }
    let fields = text[text.index(after: close)...].split(separator: " ")
    // After the command: state is field 3; utime and stime are fields 14 and 15.
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// The other process of S8: a controller on a merging context, printing the wall time of each delegate call.
@MainActor
func s8Observer(path: String, saves: Int) async throws {
    let store = try PersistentStore.open(path: path, schema: benchSchema())
    let context = ObjectContext(store: store)
    final class Printer: FetchedResultsControllerDelegate {
        func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
            FileHandle.standardError.write(Data("the controller failed: \(error)\n".utf8))
            exit(1)
        }
        var count = 0
        func controllerDidChangeContent(_ controller: FetchedResultsController) {
            count += 1
            print(Date().timeIntervalSince1970)
            fflush(nil)
        }
    }
    let printer = Printer()
    let controller = FetchedResultsController(
        fetchRequest: FetchRequest(entity: "Item", sortKeys: [SortKey("score")]), context: context)
    controller.delegate = printer
    try controller.performFetch()
    let changes = store.changes()
    print("ready")
    fflush(nil)
    for try await record in changes {
        context.merge(record)
        if printer.count >= saves { break }
    }
}

/// Books on shelves: a book's `genre` is its shelf's name, kept on the book, so that a list sectioned by the book's
/// own attribute and one sectioned through the to-one `shelf.name` show the same sections.
func shelfSchema() throws -> Schema {
    try Schema(version: 1) {
        Entity("Shelf") {
            Attribute("name", .string)
            Relationship("books", to: "Book", inverse: "shelf", toMany: true)
        }
        Entity("Book") {
            Attribute("title", .string)
            Attribute("genre", .string)
            Relationship("shelf", to: "Shelf", inverse: "books")
        }
    }
}

/// S7 through a relationship: the first fetch of a controller over `n` books sorted by title, sectioned through a
/// to-one key path (`shelf.name`, 100 shelves), against one sectioned by the book's own attribute of the same values.
func s7ThroughToOne(_ report: Report, _ n: Int) throws {
    let path = temporaryDirectory("s7-shelves")
    defer { try? FileManager.default.removeItem(atPath: path) }
    let store = try PersistentStore.open(path: path, schema: shelfSchema(), options: .init(mapSize: 1 << 32))
    let setup = ObjectContext(store: store)
    let shelves = try (0..<100).map { s in
        let shelf = try setup.insert("Shelf")
        try shelf.setValue(.string("Shelf \((s * 37) % 100)"), forKey: "name")
        return shelf
    }
    try setup.save()
    // In saves of 50k, so that setting up a million books does not hold them all unsaved.
    for start in stride(from: 0, to: n, by: 50_000) {
        let context = ObjectContext(store: store)
        for i in start..<min(n, start + 50_000) {
            let book = try context.insert("Book")
            let shelf = try context.existingObject(with: shelves[(i &* 7919) % 100].objectID)
            try book.setValue(.string("Book \((i &* 104_729) % n)"), forKey: "title")
            try book.setValue(try shelf.value(forKey: "name"), forKey: "genre")
            try book.setObject(shelf, forKey: "shelf")
        }
        try context.save()
    }
    let own = "S7 first fetch of \(n) books, sections: genre"
    let throughShelf = "S7 first fetch of \(n) books, sections: shelf.name"
    let profile = ProcessInfo.processInfo.environment["ES_PROFILE_ONLY"]
    var sections: [[Int]] = []
    for _ in 0..<3 {
        for (name, keyPath) in [(own, "genre"), (throughShelf, "shelf.name")] {
            let context = ObjectContext(store: store)
            let profiled = profile == (keyPath == "genre" ? "genre" : "shelf")
            let start = now()
            if profiled { entitystore_profile_toggle() }
            let controller = FetchedResultsController(
                fetchRequest: FetchRequest(entity: "Book", sortKeys: [SortKey("title")]), context: context,
                sectionNameKeyPath: keyPath)
            try controller.performFetch()
            if profiled { entitystore_profile_toggle() }
            report.record(name, "EntityStore", "s", now() - start)
            sections.append(controller.sections.map(\.numberOfObjects))
        }
    }
    guard sections.allSatisfy({ $0 == sections[0] && $0.count == 100 }) else {
        throw BenchFailure("S7: the controllers sectioned by genre and by shelf.name differ")
    }
    let ratio = report.median(throughShelf, "EntityStore") / report.median(own, "EntityStore")
    report.target(
        "S7", "\(n) books: sectioned through a to-one at most 1.5x sectioned by an own attribute", ratio <= 1.5,
        String(format: "%.2fx", ratio))
}
