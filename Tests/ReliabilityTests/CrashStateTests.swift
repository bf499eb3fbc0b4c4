import EntityStore
import Foundation
import TestSupport
import Testing

/// What a power loss can leave of a store, explored as ALICE does: a workload's writes and syncs on the store's
/// files are recorded by an `LD_PRELOAD` shim (`Tests/IORecorder/iorecorder.c`, built here with the system's C
/// compiler), and every state a crash may leave is built from them: each epoch between two sync barriers applied
/// over everything synced before it, with its writes all there, dropped (every subset for small epochs, random ones
/// for large), reordered, and with a write's 512-byte sectors torn. Each state is opened as a store: it must open,
/// hold every save acknowledged before the barrier that ends the epoch, hold exactly the effects of saves 1...m for
/// some m (each save all or nothing), and pass the integrity check.
@Suite struct CrashStateTests {
    /// One recorded event.
    enum Event {
        case write(file: Int, offset: Int, bytes: [UInt8])
        case sync(file: Int)
        case ack(Int)
        case truncate(file: Int, size: Int)
    }

    /// Builds the recorder from its C source with the system's compiler.
    static func buildRecorder(into directory: String) throws -> String {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("IORecorder/iorecorder.c").path
        let library = directory + "/libiorecorder.so"
        // The system's compiler, or the Swift toolchain's clang (on the PATH wherever `swift` is).
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"
        for name in ["cc", "gcc", "clang"] {
            for directory in path.split(separator: ":") {
                let compiler = "\(directory)/\(name)"
                guard FileManager.default.isExecutableFile(atPath: compiler) else { continue }
                let built = try ChildProcess.run(compiler, ["-shared", "-fPIC", "-O2", "-o", library, source, "-ldl"])
                #expect(built.status == 0, "\(compiler): \(built.stderr)")
                return library
            }
        }
        throw RecorderFailure("no C compiler (cc, gcc or clang) on the PATH to build the I/O recorder")
    }

    /// Reads the recorder's log: the events and the recorded files' paths by index.
    static func readLog(_ path: String) throws -> (events: [Event], files: [String]) {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        var events: [Event] = []
        var files: [String] = []
        var at = 0
        func integer(_ offset: Int, _ size: Int) -> Int {
            var value = 0
            for i in (0..<size).reversed() { value = value << 8 | Int(bytes[at + offset + i]) }
            return value
        }
        while at + 21 <= bytes.count {
            let kind = bytes[at]
            let (file, offset, length) = (integer(1, 4), integer(5, 8), integer(13, 8))
            at += 21
            switch kind {
            case 1:
                events.append(.write(file: file, offset: offset, bytes: Array(bytes[at..<(at + length)])))
                at += length
            case 2: events.append(.sync(file: file))
            case 3: events.append(.ack(offset))
            case 4: events.append(.truncate(file: file, size: offset))
            case 5:
                files.append(String(decoding: bytes[at..<(at + length)], as: UTF8.self))
                at += length
            default: throw RecorderFailure("the I/O log has a record of kind \(kind) at byte \(at - 21)")
            }
        }
        #expect(at == bytes.count, "the I/O log ends inside a record")
        return (events, files)
    }

    /// Applies `write` (or the sectors of it that `sectors` keeps) to `image`.
    static func apply(_ write: (offset: Int, bytes: [UInt8]), to image: inout [UInt8], sectors: Set<Int>? = nil) {
        let end = write.offset + write.bytes.count
        if image.count < end { image += [UInt8](repeating: 0, count: end - image.count) }
        guard let sectors else {
            image.replaceSubrange(write.offset..<end, with: write.bytes)
            return
        }
        for (index, start) in stride(from: 0, to: write.bytes.count, by: 512).enumerated() where sectors.contains(index)
        {
            let stop = min(start + 512, write.bytes.count)
            image.replaceSubrange((write.offset + start)..<(write.offset + stop), with: write.bytes[start..<stop])
        }
    }

    @Test(arguments: NoteWorkload.allCases)
    func everyPowerLossStateOpensWithEveryAcknowledgedStepWhole(workload: NoteWorkload) throws {
        let saves = workload == .growth ? TestScale.size(12, stress: 60) : TestScale.size(24, stress: 120)
        let samplesPerEpoch = TestScale.size(12, stress: 48)
        let dir = try TemporaryDirectory(prefix: "crash-states-\(workload)")
        defer { dir.remove() }
        let library = try Self.buildRecorder(into: dir.path)
        let path = dir.path("recorded.store")
        var initial: [UInt8] = []
        if workload != .creation {
            do { _ = try PersistentStore.open(path: path, schema: try NoteFixture.schema(), options: workload.options) }
            initial = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")))
        } else {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = library
        environment["IOREC_DIR"] = path
        environment["IOREC_LOG"] = dir.path("io.log")
        let run = try ChildProcess.helper(
            ["note-saver", path, "\(saves)", workload.rawValue], environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        let (events, files) = try Self.readLog(dir.path("io.log"))
        #expect(files == [path + "/data.mdb"], "the workload wrote only the data file: \(files)")
        #expect(events.filter { if case .ack = $0 { true } else { false } }.count == saves)

        // Epochs: the writes between two syncs; acknowledgements count for the barrier that ends their epoch.
        var epochs: [(writes: [(offset: Int, bytes: [UInt8])], acked: Int)] = [([], 0)]
        var acked = 0
        for event in events {
            switch event {
            case .write(_, let offset, let bytes): epochs[epochs.count - 1].writes.append((offset, bytes))
            case .sync:
                epochs.append(([], acked))
            case .ack(let n):
                acked = n
            case .truncate: Issue.record("the workload truncated the data file: states do not model it yet")
            }
        }
        var random = SeededGenerator(seed: 2014)
        var explored = 0
        var refused = 0
        let statePath = dir.path("state.store")
        var synced = initial
        for (index, epoch) in epochs.enumerated() {
            // Every save acknowledged before the barrier that ends this epoch is durable in every state built from
            // it: its own last barrier came before this epoch began. (An epoch records the acknowledgements before
            // the barrier that opens it.)
            let mustHold = index + 1 < epochs.count ? epochs[index + 1].acked : acked
            var states: [[UInt8]] = []
            let count = epoch.writes.count
            // Subsets of the epoch's writes (all of them for a few writes), in a random order each.
            let subsets: [[Int]] =
                count <= 4
                ? (0..<(1 << count)).map { mask in (0..<count).filter { mask & (1 << $0) != 0 } }
                : (0..<samplesPerEpoch).map { _ in (0..<count).filter { _ in Bool.random(using: &random) } }
                    + [Array(0..<count)]
            for subset in subsets {
                var image = synced
                for write in subset.shuffled(using: &random) { Self.apply(epoch.writes[write], to: &image) }
                states.append(image)
            }
            // Torn writes: one write of the epoch keeps a random part of its sectors, the others all or nothing.
            for write in epoch.writes.indices where epoch.writes[write].bytes.count > 512 {
                var image = synced
                for other in epoch.writes.indices where other != write && Bool.random(using: &random) {
                    Self.apply(epoch.writes[other], to: &image)
                }
                let sectorCount = (epoch.writes[write].bytes.count + 511) / 512
                let kept = Set((0..<sectorCount).filter { _ in Bool.random(using: &random) })
                Self.apply(epoch.writes[write], to: &image, sectors: kept)
                states.append(image)
            }
            for image in states {
                explored += 1
                if FileManager.default.fileExists(atPath: statePath) {
                    try FileManager.default.removeItem(atPath: statePath)
                }
                try FileManager.default.createDirectory(atPath: statePath, withIntermediateDirectories: true)
                try Data(image).write(to: URL(fileURLWithPath: statePath + "/data.mdb"))
                let store: PersistentStore
                do {
                    store = try PersistentStore.open(
                        path: statePath, schema: try NoteFixture.schema(), options: .init(sync: .noSync))
                } catch {
                    // Only a store that no acknowledged step reached may fail to open (a creation cut short), and
                    // store-inspect check then names what is wrong.
                    #expect(mustHold == 0 && workload == .creation, "epoch \(index): \(error)")
                    let check = try ChildProcess.run(ChildProcess.executable("store-inspect"), ["check", statePath])
                    #expect(check.status != 0 && !check.stderr.isEmpty, "epoch \(index): \(check.stdout)")
                    refused += 1
                    if refused == 1 { print("crash states (\(workload)): refused: \(error)") }
                    continue
                }
                let notes = try NoteFixture.notes(store)
                let m = (mustHold...saves).first { workload.expected(after: $0) == notes }
                #expect(m != nil, "epoch \(index): not the state after steps 1...m for any m ≥ \(mustHold)")
                #expect(try store.checkIntegrity().findings.isEmpty, "epoch \(index)")
            }
            for write in epoch.writes { Self.apply(write, to: &synced) }
        }
        print(
            "crash states (\(workload)): \(explored) explored over \(epochs.count) epochs of \(saves) steps,"
                + " \(refused) refused with a clear error, 0 vulnerable")
        #expect(explored > saves * 4)
        guard workload == .saves else { return }

        // The check can fail: states no power loss leaves (a save's meta page without the pages it points to, the
        // writes of a barrier dropped) are caught, by store-inspect in a process of its own (they may point LMDB
        // at any page).
        var caught = 0
        var attempts = 0
        var impossible = initial
        for (index, epoch) in epochs.enumerated() where index > 1 && index % 2 == 0 {
            defer { for write in epochs[index - 1].writes + epoch.writes { Self.apply(write, to: &impossible) } }
            // About 24 of them, spread over the workload (each is a process).
            guard index % max(2, epochs.count / 24 / 2 * 2) == 0 else { continue }
            attempts += 1
            // Everything up to two epochs back, then this epoch's writes without the previous epoch's.
            var image = impossible
            for write in epoch.writes { Self.apply(write, to: &image) }
            try? FileManager.default.removeItem(atPath: statePath)
            try FileManager.default.createDirectory(atPath: statePath, withIntermediateDirectories: true)
            try Data(image).write(to: URL(fileURLWithPath: statePath + "/data.mdb"))
            let check = try ChildProcess.run(ChildProcess.executable("store-inspect"), ["check", statePath])
            if check.status != 0 { caught += 1 }
        }
        print("impossible states caught: \(caught) of \(attempts)")
        #expect(caught > 0, "no state that skips a barrier was caught: the check cannot fail")
    }
}

struct RecorderFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// I/O faults at every call, as SQLite's I/O-error tests fail each I/O in turn: the recorder's fault mode makes the
/// N-th write, sync or truncation of the store's files fail (EIO, ENOSPC, or a short write) for every N of a
/// workload of saves, in a process of its own that retries what failed.
@Suite struct IOFaultTests {
    @Test(arguments: NoteWorkload.allCases, ["eio", "enospc", "short"])
    func aFaultAtEveryIOCallIsReportedAndLosesNothing(workload: NoteWorkload, mode: String) throws {
        let saves = TestScale.size(10, stress: 40)
        let dir = try TemporaryDirectory(prefix: "io-faults-\(workload)-\(mode)")
        defer { dir.remove() }
        let library = try CrashStateTests.buildRecorder(into: dir.path)
        let initial = dir.path("initial.store")
        if workload == .creation {
            try FileManager.default.createDirectory(atPath: initial, withIntermediateDirectories: true)
        } else {
            _ = try PersistentStore.open(path: initial, schema: try NoteFixture.schema(), options: workload.options)
        }
        // LMDB reports a short write as EIO, or (writing a new store's meta pages) as ENOSPC.
        let (eio, enospc) = ("EIO: Input/output error", "ENOSPC: No space left on device")
        let causes = mode == "enospc" ? [enospc] : mode == "eio" ? [eio] : [eio, enospc]
        var outcomes = (retried: 0, reopened: 0, openFailed: 0)
        var position = 1
        while true {
            let path = dir.path("faulted.store")
            if FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(atPath: path) }
            try FileManager.default.copyItem(atPath: initial, toPath: path)
            var environment = ProcessInfo.processInfo.environment
            environment["LD_PRELOAD"] = library
            environment["IOREC_DIR"] = path
            environment["IOREC_FAIL_AT"] = "\(position)"
            environment["IOREC_FAIL_MODE"] = mode
            let run = try ChildProcess.helper(
                ["note-saver-retrying", path, "\(saves)", workload.rawValue], environment: environment)
            let at = "\(workload): \(mode) at call \(position)"
            #expect(run.status == 0, "\(at): \(run.stdout)\(run.stderr)")
            let lines = run.stdout.split(separator: "\n").map(String.init)
            #expect(lines.filter { $0.hasPrefix("ack ") } == (1...saves).map { "ack \($0)" }, "\(at)")
            // The first failure names the cause; a failure after it that LMDB stopped the store says so.
            let failures = lines.filter { $0.hasPrefix("failed") }
            if let first = failures.first {
                #expect(causes.contains { first.contains($0) }, "\(at): \(first)")
                for later in failures.dropFirst() {
                    #expect(
                        later.contains("failed earlier") || causes.contains { later.contains($0) }, "\(at): \(later)")
                }
            }
            if lines.contains(where: { $0.hasPrefix("reopened") }) {
                // The store opened afresh held every save acknowledged before, and only those.
                #expect(lines.contains { $0.hasPrefix("intact") }, "\(at): \(run.stdout)")
                #expect(failures.first?.contains("LMDB stopped using the store") == true, "\(at)")
                outcomes.reopened += 1
            } else if failures.contains(where: { $0.hasPrefix("failed open") }) {
                outcomes.openFailed += 1
            } else if !failures.isEmpty {
                outcomes.retried += 1
            }
            // Every save, once, and a clean integrity check.
            let store = try PersistentStore.open(path: path, schema: try NoteFixture.schema())
            #expect(try NoteFixture.notes(store) == workload.expected(after: saves), "\(at)")
            #expect(try store.checkIntegrity().findings.isEmpty, "\(at)")
            guard run.stderr.contains("iorecorder: fault") else { break }  // past the workload's last call
            #expect(!failures.isEmpty, "\(at): a fault nobody reported: \(run.stderr)")
            position += 1
        }
        print(
            "I/O faults (\(workload), \(mode)): \(position - 1) calls failed in turn over \(saves) steps: \(outcomes)")
        #expect(position > saves * 2 && outcomes.retried > 0 && outcomes.reopened > 0, "\(outcomes)")
    }
}
