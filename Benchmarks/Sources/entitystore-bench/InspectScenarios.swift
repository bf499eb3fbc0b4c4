import EntityStore
import Foundation
import StoreInspectCore

/// S13: `store-inspect export` and `import` of `n` books as CSV, with and without a date attribute (an import with
/// dates took 4-5x one without: a date formatter made per cell), against `batchInsert` of the same rows. One run of
/// each: an import of 50,000 rows takes seconds.
func s13(_ report: Report, _ n: Int) throws {
    for withDate in [false, true] {
        let schema = try Schema(version: 1) {
            Entity("Book") {
                Attribute("title", .string)
                Attribute("pages", .int64)
                if withDate { Attribute("published", .date) }
            }
        }
        let keys = withDate ? ["title", "pages", "published"] : ["title", "pages"]
        let rows: [[Value]] = (0..<n).map { i in
            let row: [Value] = [.string("Book \(i) of the import"), .int(Int64(i % 1_000))]
            return withDate ? row + [.date(Date(timeIntervalSince1970: 1_600_000_000 + Double(i) * 3_607.25))] : row
        }
        let directory = temporaryDirectory("s13")
        defer {
            do {
                try FileManager.default.removeItem(atPath: directory)
            } catch {
                FileHandle.standardError.write(Data("entitystore-bench: \(directory) was left: \(error)\n".utf8))
            }
        }
        let source = directory + "/source.store", copy = directory + "/copy.store", csv = directory + "/books.csv"
        var start = now()
        do {
            let store = try PersistentStore.open(path: source, schema: schema, options: .init(mapSize: 1 << 30))
            try store.batchInsert(into: "Book", keys: keys, rows: rows)
        }
        let batchInsert = now() - start
        FileManager.default.createFile(atPath: csv, contents: nil)
        let file = try FileHandle(forWritingTo: URL(fileURLWithPath: csv))
        start = now()
        let exported = StoreInspect.run(
            ["export", source, "Book", "--format", "csv"], stdoutIsTerminal: false, environment: [:],
            out: { file.write(Data($0.utf8)) }, err: { FileHandle.standardError.write(Data($0.utf8)) })
        let export = now() - start
        try file.close()
        guard exported == 0 else { throw BenchFailure("store-inspect export exited with \(exported)") }
        do { _ = try PersistentStore.open(path: copy, schema: schema, options: .init(mapSize: 1 << 30)) }
        start = now()
        let imported = StoreInspect.run(
            ["import", copy, csv], stdoutIsTerminal: false, environment: [:], out: { _ in },
            err: { FileHandle.standardError.write(Data($0.utf8)) })
        let importTime = now() - start
        guard imported == 0 else { throw BenchFailure("store-inspect import exited with \(imported)") }
        let name = "S13 store-inspect, \(n) books\(withDate ? " with a date" : "")"
        report.record(name + ": export", "EntityStore", "s", export)
        report.record(name + ": import", "EntityStore", "s", importTime)
        report.record(name + ": import", "batchInsert", "s", batchInsert)
    }
    let plain = report.median("S13 store-inspect, \(n) books: import", "EntityStore")
    let dated = report.median("S13 store-inspect, \(n) books with a date: import", "EntityStore")
    report.target(
        "S13", "an import with a date ≤ 1.2x one without", dated <= 1.2 * plain,
        String(format: "%.2fx (%.2f s against %.2f s)", dated / plain, dated, plain))
    let batch = report.median("S13 store-inspect, \(n) books: import", "batchInsert")
    report.target(
        "S13", "an import ≤ 2x batchInsert of its rows", plain <= 2 * batch,
        String(format: "%.1fx (%.2f s against %.2f s)", plain / batch, plain, batch))
}
