// entitystore-bench: EntityStore side by side with raw LMDB and SQLite.
//
//   entitystore-bench [--quick] [--json] [--only S1,S3,...]
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "s8-observer", arguments.count == 3, let saves = Int(arguments[2]) {
    try await s8Observer(path: arguments[1], saves: saves)
    exit(0)
}
if arguments.first == "memory-child", arguments.count == 4, let n = Int(arguments[3]) {
    try memoryChildMain(arguments[1], arguments[2], n)
    exit(0)
}
if arguments.first == "s12-child", arguments.count == 3 {
    try s12ChildMain(arguments[1], arguments[2])
    exit(0)
}
let usage = "usage: entitystore-bench [--quick] [--json] [--only S1,S3,...] [--controller-rows N]"
if arguments.contains("-h") || arguments.contains("--help") {
    print(usage)
    exit(0)
}
let scenarios = Set((1...13).map { "S\($0)" })
var argumentIndex = 0
while argumentIndex < arguments.count {
    let argument = arguments[argumentIndex]
    argumentIndex += 1
    switch argument {
    case "--quick", "--json": continue
    case "--controller-rows" where argumentIndex < arguments.count && Int(arguments[argumentIndex]) != nil:
        argumentIndex += 1
    case "--only" where argumentIndex < arguments.count:
        let names = arguments[argumentIndex].split(separator: ",").map(String.init)
        argumentIndex += 1
        if let unknown = names.first(where: { !scenarios.contains($0) }) {
            FileHandle.standardError.write(
                Data("entitystore-bench: no scenario '\(unknown)' (S1...S13)\n\(usage)\n".utf8))
            exit(64)
        }
    default:
        FileHandle.standardError.write(Data("entitystore-bench: unknown argument '\(argument)'\n\(usage)\n".utf8))
        exit(64)
    }
}
let quick = arguments.contains("--quick")
let json = arguments.contains("--json")
let only: Set<String>? = arguments.firstIndex(of: "--only").flatMap { i in
    i + 1 < arguments.count ? Set(arguments[i + 1].split(separator: ",").map(String.init)) : nil
}
func runs(_ scenario: String) -> Bool { only?.contains(scenario) ?? true }

#if DEBUG
print("WARNING: a debug build; numbers mean nothing. Build with -c release (make bench does).")
#endif

var sizes =
    quick
    ? Sizes(
        insert: 10_000, fetch: [10_000], query: 10_000, scan: 10_000, controller: 10_000, controllerMemory: 10_000,
        saves: 100, crossProcessSaves: 30)
    : Sizes(
        insert: 1_000_000, fetch: [100_000, 1_000_000], query: 100_000, scan: 1_000_000, controller: 100_000,
        controllerMemory: 1_000_000, saves: 1000, crossProcessSaves: 300)

// --controller-rows N: S6 and S7 at N rows (for profiling one size).
if let i = arguments.firstIndex(of: "--controller-rows"), let rows = Int(arguments[i + 1]) {
    sizes.controller = rows
    sizes.controllerMemory = rows
}
let report = Report()
if !json { print("EntityStore benchmarks (\(quick ? "quick" : "full") sizes), 3 repetitions, interleaved") }
do {
    if runs("S1") {
        try s1(report, sizes.insert)
        try s1Memory(report, sizes.insert)
    }
    if runs("S2") {
        try s2(report, sizes.saves)
        try s2Concurrent(report, savesPerSaver: quick ? 10 : 50)
    }
    if runs("S3") { for n in sizes.fetch { try s3(report, n) } }
    if runs("S4") || runs("S5") {
        try s4s5(report, queryN: runs("S4") ? sizes.query : 0, scanN: runs("S5") ? sizes.scan : 0)
    }
    if runs("S6") {
        // ES_S6_BATCHES=N times N batches per controller (for a profile dominated by the batches).
        let batches = ProcessInfo.processInfo.environment["ES_S6_BATCHES"].flatMap { Int($0) } ?? 5
        try s6(report, sizes.controller, batchesPerRepetition: batches)
    }
    if runs("S6") || runs("S7") {
        // One store of controllerMemory objects for both: building a million objects takes a while.
        let n = sizes.controllerMemory
        let path = temporaryDirectory("s6s7")
        let store = try entityStore(path, (0..<n).map(ItemData.make))
        if runs("S6") { try s6Few(report, store, n, changes: 10) }
        if runs("S7") { try s7(report, store, n) }
        try? FileManager.default.removeItem(atPath: path)
    }
    if runs("S7") {
        for n in quick ? [10_000] : [50_000, 1_000_000] { try s7ThroughToOne(report, n) }
    }
    if runs("S9") {
        try s9(report, sizes.scan)
        try s9Upsert(report, sizes.query)
    }
    if runs("S8") {
        for _ in 0..<3 {
            try s8(report, sizes.crossProcessSaves, idleSaves: quick ? 3 : 10, idleGap: quick ? 0.5 : 1.5)
        }
        s8Targets(report)
    }
    if runs("S11") {
        try s11(report, folders: quick ? 100 : 1_000, perFolder: 100)
        try s11OneFolder(report, quick ? 2_000 : 20_000, adds: quick ? 50 : 200)
    }
    if runs("S12") { try s12(report, quick ? 10_000 : 1_000_000) }
    if runs("S10") { try s10(report, quick ? 1_000 : 20_000, latencySamples: quick ? 20 : 100) }
    if runs("S13") { try s13(report, quick ? 5_000 : 50_000) }
} catch {
    FileHandle.standardError.write(Data("entitystore-bench: \(error)\n".utf8))
    exit(1)
}
if json { print(report.json()) } else { report.printTable() }
