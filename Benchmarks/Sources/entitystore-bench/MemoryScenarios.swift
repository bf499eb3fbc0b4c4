import CHeapStats
import EntityStore
import Foundation

/// S1's memory beside its time, each path in a child process of its own (a peak is the process's, so each path's
/// must start from nothing of the others'):
/// - the peak RSS growth of a `batchInsert` of `n` rows beyond its input (the rows are made before the peak is read);
/// - fetching every object of a store of `n` into a context, then releasing the context: the heap it held, and what
///   it still holds once released (which must be nothing: the context's objects, records and registry go with it).
func s1Memory(_ report: Report, _ n: Int) throws {
    let name = "S1 insert \(n) with one index, one save"
    let path = temporaryDirectory("s1-memory")
    defer { try? FileManager.default.removeItem(atPath: path) }
    var rowsGrowth: [Double] = []
    var held: [Double] = []
    var left: [Double] = []
    for repetition in 0..<3 {
        try? FileManager.default.removeItem(atPath: path + "/data.mdb")
        let rows = try childFigures(["memory-child", "rows", path, "\(n)"], count: 3)
        rowsGrowth.append(rows[1])
        // The store the rows made, fetched whole into a context.
        let fetched = try childFigures(["memory-child", "fetch", path, "\(n)"], count: 3)
        held.append(fetched[1])
        left.append(fetched[2])
        if repetition == 0 {
            report.record(name + " (peak RSS growth)", "EntityStore batchInsert rows", "MB", rows[1] / 1e6)
        }
    }
    let median = { (values: [Double]) in values.sorted()[values.count / 2] }
    report.record(
        "fetch all \(n) objects into a context (heap held)", "EntityStore", "MB", median(held) / 1e6)
    report.record(
        "fetch all \(n) objects into a context (heap left once released)", "EntityStore", "MB", median(left) / 1e6)
    let growth = median(rowsGrowth)
    report.target(
        "S1", "batchInsert rows: peak RSS growth at most 100 MB beyond its input", growth <= 100e6,
        String(format: "%.0f MB", growth / 1e6))
    report.target(
        "S1", "fetching \(n) objects into a context and releasing it returns the memory", median(left) <= 1e6,
        String(format: "%.0f MB held, %.1f MB left once released", median(held) / 1e6, median(left) / 1e6))
}

/// The child of ``s1Memory(_:_:)``. `rows`: makes `n` items' rows, then batch-inserts them into a new store at
/// `path`, and prints the seconds, the peak RSS growth during the insert and 0. `fetch`: fetches every object of the
/// store into a context, and prints the seconds, the heap the context held and the heap still held once it is
/// released (each from the heap in use before).
func memoryChildMain(_ kind: String, _ path: String, _ n: Int) throws {
    let store = try PersistentStore.open(path: path, schema: benchSchema(), options: .init(mapSize: 1 << 31))
    if kind == "rows" {
        let rows = (0..<n).map { ItemData.make($0).row }
        // From what the process holds now, not from its peak: making the rows peaked above what they hold.
        entitystore_heap_trim()
        let before = statusBytes("VmRSS")
        let anonymousBefore = AnonymousMemorySampler.anonymousBytes()
        let sampler = AnonymousMemorySampler()
        let start = now()
        try store.batchInsert(into: "Item", keys: ItemData.rowKeys, rows: rows)
        let seconds = now() - start
        print("\(seconds) \(peakResidentBytes() - before) \(sampler.stop() - anonymousBefore)")
        withExtendedLifetime(rows) {}
        return
    }
    let baseline = heapBytesInUse()
    let start = now()
    var heldBytes = 0
    do {
        let context = ObjectContext(store: store)
        let objects = try context.fetch(FetchRequest(entity: "Item"))
        // Every object's values read, as a list that shows them does.
        for object in objects { consume(try object.value(forKey: "title").hashValue) }
        guard objects.count == n else { throw BenchFailure("fetched \(objects.count) of \(n) objects") }
        heldBytes = heapBytesInUse() - baseline
    }
    print("\(now() - start) \(heldBytes) \(max(0, heapBytesInUse() - baseline))")
}
