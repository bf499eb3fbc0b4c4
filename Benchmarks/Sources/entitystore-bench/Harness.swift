import CHeapStats
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Wall-clock seconds from a monotonic clock.
func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Heap bytes in use (glibc's mallinfo): what a data structure holds, without the memory map's file pages.
func heapBytesInUse() -> Int {
    Int(entitystore_heap_in_use())
}

/// The process's peak resident memory so far, in bytes: `VmHWM` of `/proc/self/status`, the high-water mark of this
/// program's own memory. Not `getrusage`'s `ru_maxrss`: Linux keeps that across `exec`, so a child the suite spawns
/// (S1's memory rows, S12) started from the parent's peak, which hid the child's own (S12's "0 MB").
func peakResidentBytes() -> Int { statusBytes("VmHWM") }

/// A memory field of `/proc/self/status` (`VmHWM`, `VmRSS`, `RssAnon`), in bytes; the suite stops with a message if
/// it cannot read it (a figure it made up would be worse).
func statusBytes(_ field: String) -> Int {
    let status: String
    do {
        status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
    } catch {
        FileHandle.standardError.write(Data("entitystore-bench: cannot read /proc/self/status: \(error)\n".utf8))
        exit(1)
    }
    guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }),
        let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    else {
        FileHandle.standardError.write(Data("entitystore-bench: no \(field) in /proc/self/status\n".utf8))
        exit(1)
    }
    return kilobytes * 1024
}

/// Work results fold into this so that nothing is optimised away.
nonisolated(unsafe) var checksum: UInt64 = 0

func consume(_ value: Int) { checksum &+= UInt64(truncatingIfNeeded: value) }

/// One measured quantity of one system in one scenario; the median of the repetitions is reported.
struct Measurement: Codable {
    var scenario: String
    var system: String
    var unit: String
    var samples: [Double]
    var median: Double {
        let sorted = samples.sorted()
        return sorted.isEmpty ? .nan : sorted[sorted.count / 2]
    }
}

/// A target checked from the same run's medians.
struct Target: Codable {
    var scenario: String
    var description: String
    var met: Bool
    var detail: String
}

final class Report {
    var measurements: [Measurement] = []
    var targets: [Target] = []

    func record(_ scenario: String, _ system: String, _ unit: String, _ value: Double) {
        if let index = measurements.firstIndex(where: { $0.scenario == scenario && $0.system == system }) {
            measurements[index].samples.append(value)
        } else {
            measurements.append(Measurement(scenario: scenario, system: system, unit: unit, samples: [value]))
        }
    }

    func median(_ scenario: String, _ system: String) -> Double {
        measurements.first { $0.scenario == scenario && $0.system == system }?.median ?? .nan
    }

    /// The faster SQLite set-up's median for `scenario` and its name: the one a target holds against.
    func fasterSQLite(_ scenario: String) -> (median: Double, system: String) {
        SQLiteSetup.allCases.map { (median(scenario, $0.system), $0.system) }.filter { !$0.0.isNaN }.min { $0.0 < $1.0 }
            ?? (.nan, "SQLite")
    }

    /// A target that EntityStore's `es` is at least `factor` times as fast as the faster SQLite set-up.
    func targetAgainstSQLite(_ scenario: String, _ name: String, _ es: Double, factor: Double, _ what: String? = nil) {
        let (lite, system) = fasterSQLite(name)
        let label = factor == 1 ? "at least as fast as SQLite" : "at least \(factor)x faster than SQLite"
        let each = SQLiteSetup.allCases.map { "\($0.system) " + String(format: "%.2fx", median(name, $0.system) / es) }
        target(
            scenario, "\(what ?? name): \(label)", es * factor <= lite,
            String(format: "%.2fx", lite / es) + " against \(system) (" + each.joined(separator: ", ") + ")")
    }

    func target(_ scenario: String, _ description: String, _ met: Bool, _ detail: String) {
        targets.append(Target(scenario: scenario, description: description, met: met, detail: detail))
    }

    func printTable() {
        print("\nMedians of 3 interleaved repetitions:\n")
        print(
            "scenario".padding(toLength: 60, withPad: " ", startingAt: 0)
                + "system".padding(toLength: 40, withPad: " ", startingAt: 0) + "median")
        for m in measurements {
            print(
                m.scenario.padding(toLength: 59, withPad: " ", startingAt: 0) + " "
                    + m.system.padding(toLength: 39, withPad: " ", startingAt: 0) + " "
                    + format(m.median, m.unit))
        }
        print("\nTargets (ratios from this run):\n")
        for t in targets {
            print("\(t.met ? "met   " : "MISSED") \(t.scenario): \(t.description) — \(t.detail)")
        }
        print("\nchecksum \(checksum)")
    }

    func format(_ value: Double, _ unit: String) -> String {
        switch unit {
        case "s/op":
            if value < 1e-6 { return String(format: "%.0f ns/op", value * 1e9) }
            if value < 1e-3 { return String(format: "%.2f µs/op", value * 1e6) }
            return String(format: "%.2f ms/op", value * 1e3)
        case "s": return value < 1e-3 ? String(format: "%.1f µs", value * 1e6) : String(format: "%.2f ms", value * 1e3)
        case "bytes/row": return String(format: "%.0f bytes/row", value)
        case "MB": return String(format: "%.0f MB", value)
        case "/s": return String(format: "%.0f /s", value)
        default: return "\(value) \(unit)"
        }
    }

    func json() -> String {
        struct Output: Codable {
            var measurements: [Measurement]
            var targets: [Target]
            var checksum: UInt64
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let data =
            (try? encoder.encode(Output(measurements: measurements, targets: targets, checksum: checksum))) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}

/// The benchmark data: an Item with an int64 id, a ~40-byte title, an indexed int score, a double date and a
/// ~50-byte blob.
struct ItemData {
    var id: Int64
    var title: String
    var score: Int64
    var date: Double
    var blob: [UInt8]

    static func make(_ i: Int) -> ItemData {
        var state = UInt64(i) &* 0x9E37_79B9_7F4A_7C15
        state ^= state >> 29
        return ItemData(
            id: Int64(i),
            title: "Item number \(i) with a forty-byte title…".padding(toLength: 40, withPad: "x", startingAt: 0),
            score: Int64(state % 10_000), date: 700_000_000 + Double(i),
            blob: [UInt8](repeating: UInt8(i & 0xFF), count: 50))
    }
}

/// A fresh temporary directory.
func temporaryDirectory(_ name: String) -> String {
    let path = NSTemporaryDirectory() + "entitystore-bench-\(getpid())-\(name)"
    try? FileManager.default.removeItem(atPath: path)
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// The largest anonymous resident memory (`RssAnon` of `/proc/self/status`: the heap and every private page, not the
/// pages of a mapped file such as the store's) seen while it runs, sampled every 2 ms on a thread of its own: the
/// part of a peak RSS that is the program's own memory, where the rest is the store's file mapped and read.
final class AnonymousMemorySampler: @unchecked Sendable {
    // @unchecked Sendable: `state` is only touched under its lock.
    private let state = NSLock()
    private var peak = 0
    private var running = true
    private let done = DispatchSemaphore(value: 0)

    init() {
        peak = Self.anonymousBytes()
        Thread.detachNewThread { [self] in
            while state.withLock({ running }) {
                let now = Self.anonymousBytes()
                state.withLock { peak = max(peak, now) }
                usleep(2_000)
            }
            done.signal()
        }
    }

    /// Stops sampling; returns the peak seen.
    func stop() -> Int {
        state.withLock { running = false }
        done.wait()
        let last = Self.anonymousBytes()
        return state.withLock { max(peak, last) }
    }

    static func anonymousBytes() -> Int { statusBytes("RssAnon") }
}

/// Runs this program again with `arguments` (a child's command: `s12-child`, `memory-child`) and reads the numbers it
/// prints on one line, `count` of them: each memory figure is then the child's own.
func childFigures(_ arguments: [String], count: Int) throws -> [Double] {
    let child = Process()
    child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    child.arguments = arguments
    let pipe = Pipe()
    child.standardOutput = pipe
    try child.run()
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    child.waitUntilExit()
    let fields = output.split(separator: " ").compactMap { Double($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    guard child.terminationStatus == 0, fields.count == count else {
        throw BenchFailure("\(arguments.joined(separator: " ")) failed (status \(child.terminationStatus)): \(output)")
    }
    return fields
}
