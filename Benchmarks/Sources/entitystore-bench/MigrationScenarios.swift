import EntityStore
import Foundation

/// S12's schemas: items with a title, an indexed score and a note; version 2 has the same shape (the stage
/// rewrites the data alone).
func s12Schema(version: Int) throws -> Schema {
    try Schema(version: version) {
        Entity("Item") {
            Attribute("title", .string)
            Attribute("score", .int64, default: 0, indexed: true)
            Attribute("note", .string, optional: true)
        }
    }
}

/// S12: a custom migration stage that rewrites one attribute of `n` objects, against a `batchUpdate` of the same
/// attribute on a copy of the same store: the time and the peak resident memory of each, each in a process of its
/// own (so that each peak is its own), and the ratio of the times.
func s12(_ report: Report, _ n: Int) throws {
    let name = "S12 rewrite one attribute of \(n) objects"
    for _ in 0..<3 {
        let path = temporaryDirectory("s12")
        do {
            let store = try PersistentStore.open(
                path: path, schema: try s12Schema(version: 1), options: .init(sync: .noSync))
            for start in stride(from: 0, to: n, by: 100_000) {
                let objects = (start..<min(n, start + 100_000)).map { i -> [String: Value] in
                    ["title": .string("item \(i)"), "score": .int(Int64(i % 1000)), "note": .string("old \(i)")]
                }
                try store.batchInsert(into: "Item", objects: objects)
            }
        }
        let copy = temporaryDirectory("s12-copy")
        try FileManager.default.removeItem(atPath: copy)
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        let update = try s12Child("update", path)
        let migration = try s12Child("migrate", copy)
        report.record(name, "EntityStore batchUpdate", "s", update.seconds)
        report.record(name, "EntityStore custom migration stage", "s", migration.seconds)
        report.record(name + " (peak RSS growth)", "EntityStore batchUpdate", "MB", update.peakGrowth / 1e6)
        report.record(
            name + " (peak RSS growth)", "EntityStore custom migration stage", "MB", migration.peakGrowth / 1e6)
        report.record(name + " (peak anonymous growth)", "EntityStore batchUpdate", "MB", update.anonymous / 1e6)
        report.record(
            name + " (peak anonymous growth)", "EntityStore custom migration stage", "MB", migration.anonymous / 1e6)
        try? FileManager.default.removeItem(atPath: path)
        try? FileManager.default.removeItem(atPath: copy)
    }
    let update = report.median(name, "EntityStore batchUpdate")
    let migration = report.median(name, "EntityStore custom migration stage")
    let peak = report.median(name + " (peak RSS growth)", "EntityStore custom migration stage")
    report.target(
        "S12", "\(name): a custom stage at most 2x a batchUpdate", migration <= 2 * update,
        String(format: "%.2fx (%.2f s against %.2f s)", migration / update, migration, update))
    report.target(
        "S12", "\(name): a custom stage's peak RSS growth at most 200 MB", peak <= 200,
        String(format: "%.0f MB", peak))
}

/// Runs `s12-child KIND PATH` and reads its seconds, peak RSS growth and peak anonymous growth.
func s12Child(_ kind: String, _ path: String) throws -> (seconds: Double, peakGrowth: Double, anonymous: Double) {
    let figures = try childFigures(["s12-child", kind, path], count: 3)
    return (figures[0], figures[1], figures[2])
}

/// The child of S12: rewrites the notes by `batchUpdate` (`update`) or by a custom migration stage (`migrate`),
/// and prints the seconds it took and its peak RSS growth in bytes.
func s12ChildMain(_ kind: String, _ path: String) throws {
    let before = peakResidentBytes()
    let anonymousBefore = AnonymousMemorySampler.anonymousBytes()
    let sampler = AnonymousMemorySampler()
    let start = now()
    if kind == "update" {
        let store = try PersistentStore.open(
            path: path, schema: try s12Schema(version: 1), options: .init(sync: .noSync))
        try store.batchUpdate("Item", set: ["note": .string("new")])
    } else {
        let plan = MigrationPlan(
            schemas: [try s12Schema(version: 1), try s12Schema(version: 2)],
            stages: [
                .custom(
                    from: 1, to: 2,
                    transforms: [MigrationTransform("Item") { _, new in try new.setValue("new", forKey: "note") }])
            ])
        _ = try PersistentStore.open(path: path, plan: plan, options: .init(sync: .noSync))
    }
    let seconds = now() - start
    print("\(seconds) \(peakResidentBytes() - before) \(sampler.stop() - anonymousBefore)")
}
