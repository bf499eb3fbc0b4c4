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
    @Test(arguments: NoteWorkload.allCases)
    func everyPowerLossStateOpensWithEveryAcknowledgedStepWhole(workload: NoteWorkload) throws {
        let saves = workload == .growth ? TestScale.size(16, stress: 40) : TestScale.size(24, stress: 120)
        let samplesPerEpoch = TestScale.size(12, stress: 96)
        let tornSamples = TestScale.size(10, stress: 160)
        let dir = try TemporaryDirectory(prefix: "crash-states-\(workload)", inMemory: true)
        defer { dir.remove() }
        let library = try IORecording.buildRecorder(into: dir.path)
        let path = dir.path("recorded.store")
        var initial: [UInt8] = []
        if workload != .creation {
            do { _ = try PersistentStore.open(path: path, schema: try NoteFixture.schema(), options: workload.options) }
            initial = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")))
        } else {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        let environment = IORecording.environment(library: library, watching: path, log: dir.path("io.log"))
        let run = try ChildProcess.helper(
            ["note-saver", path, "\(saves)", workload.rawValue], environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        let (events, files) = try IORecording.readLog(dir.path("io.log"))
        #expect(files == [path + "/data.mdb"], "the workload wrote only the data file: \(files)")
        if workload == .growth {
            // The map grew in the middle of the saves: the file outgrew the map the store opened with.
            let size = try FileManager.default.attributesOfItem(atPath: path + "/data.mdb")[.size] as? Int ?? 0
            #expect(size > workload.options.mapSize, "the map did not grow: \(size) bytes")
        }
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
            case .truncate, .link, .unlink:
                Issue.record("the workload truncated, linked or unlinked a store file: \(event)")
            }
        }
        // The state after steps 1...m, for each m (the last m when two leave the same).
        let stepsLeaving = Dictionary(
            (0...saves).map { (workload.expected(after: $0), $0) }, uniquingKeysWith: { max($0, $1) })
        var random = SeededGenerator(seed: 2014)
        var explored = 0
        var refused = 0
        var duplicates = 0
        var seen: Set<Int> = []
        let statePath = dir.path("state.store")
        var synced = initial
        for (index, epoch) in epochs.enumerated() {
            // Every save acknowledged before the barrier that ends this epoch is durable in every state built from
            // it: its own last barrier came before this epoch began. (An epoch records the acknowledgements before
            // the barrier that opens it.)
            let mustHold = index + 1 < epochs.count ? epochs[index + 1].acked : acked
            let states = IORecording.crashImages(
                of: epoch.writes, over: synced, subsets: samplesPerEpoch, torn: tornSamples, using: &random)
            for image in states {
                guard IORecording.isNew(image, seen: &seen) else {
                    duplicates += 1
                    continue
                }
                explored += 1
                try IORecording.writeStore(image, at: statePath)
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
                let m = stepsLeaving[try NoteFixture.notes(store)] ?? -1
                #expect(m >= mustHold, "epoch \(index): not the state after steps 1...m for any m ≥ \(mustHold)")
                #expect(try store.checkIntegrity().findings.isEmpty, "epoch \(index)")
            }
            for write in epoch.writes { IORecording.apply(write, to: &synced) }
        }
        print(
            "crash states (\(workload)): \(explored) distinct states explored (\(duplicates) built twice) over"
                + " \(epochs.count) epochs of \(saves) steps, \(refused) refused with a clear error, 0 vulnerable")
        #expect(explored > saves * 4)
        guard workload == .saves else { return }

        // The check can fail: states no power loss leaves (a save's meta page without the pages it points to, the
        // writes of a barrier dropped) are caught, by store-inspect in a process of its own (they may point LMDB
        // at any page).
        var caught = 0
        var attempts = 0
        var impossible = initial
        for (index, epoch) in epochs.enumerated() where index > 1 && index % 2 == 0 {
            defer { for write in epochs[index - 1].writes + epoch.writes { IORecording.apply(write, to: &impossible) } }
            // About 24 of them, spread over the workload (each is a process).
            guard index % max(2, epochs.count / 24 / 2 * 2) == 0 else { continue }
            attempts += 1
            // Everything up to two epochs back, then this epoch's writes without the previous epoch's.
            var image = impossible
            for write in epoch.writes { IORecording.apply(write, to: &image) }
            try IORecording.writeStore(image, at: statePath)
            let check = try ChildProcess.run(ChildProcess.executable("store-inspect"), ["check", statePath])
            if check.status != 0 { caught += 1 }
        }
        print("impossible states caught: \(caught) of \(attempts)")
        #expect(caught > 0, "no state that skips a barrier was caught: the check cannot fail")
    }

    /// `store-inspect backup`'s power-loss states, over the files of the backup directory: the copy's writes to
    /// `data.mdb.partial` (dropped, reordered, torn within each epoch), its names (made, linked as `data.mdb`,
    /// removed: in order, a prefix of them within an epoch). Every sync is a barrier for every file, as ext4's
    /// journal makes it. A state holds no `data.mdb` (the backup is not there), or one that opens with every note
    /// and a clean integrity check; once the command returned, the backup is there.
    @Test func everyPowerLossStateOfABackupHasNoBackupOrAWholeOne() throws {
        let saves = TestScale.size(24, stress: 120)
        let dir = try TemporaryDirectory(prefix: "crash-states-backup", inMemory: true)
        defer { dir.remove() }
        let library = try IORecording.buildRecorder(into: dir.path)
        let source = dir.path("source.store")
        do {
            let context = ObjectContext(store: try PersistentStore.open(path: source, schema: try NoteFixture.schema()))
            for i in 1...saves { try NoteFixture.save(i, in: context) }
        }
        let backup = dir.path("backup")
        try FileManager.default.createDirectory(atPath: backup, withIntermediateDirectories: true)
        let environment = IORecording.environment(library: library, watching: backup, log: dir.path("io.log"))
        let run = try ChildProcess.run(
            ChildProcess.executable("store-inspect"), ["backup", source, backup], environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        let (events, files) = try IORecording.readLog(dir.path("io.log"))
        #expect(files.contains(backup + "/data.mdb.partial"), "\(files)")

        // Epochs: data writes and name operations between two syncs.
        struct Epoch {
            var writes: [(file: Int, offset: Int, bytes: [UInt8])] = []
            var names: [IORecording.Event] = []
        }
        var epochs = [Epoch()]
        var opened: Set<Int> = []
        for event in events {
            switch event {
            case .write(let file, let offset, let bytes):
                if opened.insert(file).inserted { epochs[epochs.count - 1].names.append(.sync(file: file)) }
                epochs[epochs.count - 1].writes.append((file, offset, bytes))
            case .sync(let file):
                if opened.insert(file).inserted { epochs[epochs.count - 1].names.append(.sync(file: file)) }
                epochs.append(Epoch())
            case .link, .unlink: epochs[epochs.count - 1].names.append(event)
            case .ack, .truncate: Issue.record("a backup acknowledged or truncated: \(event)")
            }
        }
        // A state: contents by file, and names (in the backup directory) by file. A file's first write or sync
        // stands for its name being made (by its open with O_CREAT).
        struct State {
            var contents: [Int: [UInt8]] = [:]
            var names: [String: Int] = [:]
        }
        func name(_ operation: IORecording.Event, in state: inout State) {
            switch operation {
            case .sync(let file): state.names[files[file]] = file
            case .link(let from, let to): state.names[to] = state.names[from]
            case .unlink(let path): state.names[path] = nil
            default: break
            }
        }
        func write(_ write: (file: Int, offset: Int, bytes: [UInt8]), in state: inout State, sectors: Set<Int>? = nil) {
            var image = state.contents[write.file] ?? []
            IORecording.apply((write.offset, write.bytes), to: &image, sectors: sectors)
            state.contents[write.file] = image
        }
        // Checks a state: no backup, or a whole one. Returns whether the backup was there.
        let statePath = dir.path("state")
        func check(_ state: State, _ what: String) throws -> Bool? {
            if FileManager.default.fileExists(atPath: statePath) {
                try FileManager.default.removeItem(atPath: statePath)
            }
            try FileManager.default.createDirectory(atPath: statePath, withIntermediateDirectories: true)
            guard let file = state.names[backup + "/data.mdb"] else { return false }
            try Data(state.contents[file] ?? []).write(to: URL(fileURLWithPath: statePath + "/data.mdb"))
            do {
                let store = try PersistentStore.openReadOnly(path: statePath)
                guard try NoteFixture.notes(store) == NoteFixture.expected(after: saves),
                    try store.checkIntegrity().findings.isEmpty
                else { return nil }
                return true
            } catch {
                return nil
            }
        }
        var random = SeededGenerator(seed: 1)
        var synced = State()
        var (explored, there) = (0, 0)
        for (index, epoch) in epochs.enumerated() {
            let count = epoch.writes.count
            let subsets: [[Int]] =
                count <= 4
                ? (0..<(1 << count)).map { mask in (0..<count).filter { mask & (1 << $0) != 0 } }
                : (0..<12).map { _ in (0..<count).filter { _ in Bool.random(using: &random) } } + [Array(0..<count)]
            for subset in subsets {
                for prefix in 0...epoch.names.count {
                    var state = synced
                    for operation in epoch.names.prefix(prefix) { name(operation, in: &state) }
                    for w in subset.shuffled(using: &random) { write(epoch.writes[w], in: &state) }
                    // A write of the subset torn, now and then.
                    if let torn = subset.randomElement(using: &random), epoch.writes[torn].bytes.count > 512,
                        Bool.random(using: &random)
                    {
                        var tornState = synced
                        for operation in epoch.names.prefix(prefix) { name(operation, in: &tornState) }
                        for w in subset where w != torn { write(epoch.writes[w], in: &tornState) }
                        let sectors = (epoch.writes[torn].bytes.count + 511) / 512
                        write(
                            epoch.writes[torn], in: &tornState,
                            sectors: Set((0..<sectors).filter { _ in Bool.random(using: &random) }))
                        explored += 1
                        let result = try check(tornState, "epoch \(index), torn")
                        #expect(result != nil, "epoch \(index): a torn state holds a data.mdb that is not whole")
                        if result == true { there += 1 }
                    }
                    explored += 1
                    let result = try check(state, "epoch \(index)")
                    #expect(result != nil, "epoch \(index): a state holds a data.mdb that is not whole")
                    if result == true { there += 1 }
                }
            }
            for operation in epoch.names { name(operation, in: &synced) }
            for w in epoch.writes { write(w, in: &synced) }
        }
        // Once the command returned, the backup is there.
        #expect(try check(synced, "the end") == true, "the backup is not there after the command returned")
        print("backup crash states: \(explored) explored over \(epochs.count) epochs, \(there) with the backup there")
        #expect(there > 0 && there < explored)

        // The check can fail: the names made while the copy's writes are lost (the barrier between them skipped).
        var impossible = State()
        for epoch in epochs { for operation in epoch.names { name(operation, in: &impossible) } }
        #expect(try check(impossible, "impossible") == nil, "a backup without its pages passed the check")
    }

    /// A chunked migration's power-loss states (PeopleFixture's plan, in eight chunks): each state opens read-only
    /// at the old version (as it was, or with the stage under way) or the new one, and the new one once the
    /// migration's open returned; opened with the plan, it ends equal to an uninterrupted migration, with a clean
    /// integrity check and the stage logged once.
    @Test func everyPowerLossStateOfAChunkedMigrationOpensOldOrResumesToTheSameEnd() throws {
        let people = TestScale.size(600, stress: 2_000)
        let (samplesPerEpoch, tornSamples) = (TestScale.size(6, stress: 24), TestScale.size(4, stress: 24))
        let chunk = people / 8
        let dir = try TemporaryDirectory(prefix: "crash-states-migration", inMemory: true)
        defer { dir.remove() }
        let library = try IORecording.buildRecorder(into: dir.path)
        let original = dir.path("original.store")
        try PeopleFixture.make(at: original, count: people)
        let whole = dir.path("whole.store")
        try FileManager.default.copyItem(atPath: original, toPath: whole)
        let expected = try PeopleFixture.rows(
            try PersistentStore.open(path: whole, plan: try PeopleFixture.plan(chunkSize: chunk)))
        let path = dir.path("recorded.store")
        try FileManager.default.copyItem(atPath: original, toPath: path)
        let initial = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")))
        let environment = IORecording.environment(library: library, watching: path, log: dir.path("io.log"))
        let run = try ChildProcess.helper(["migrate-people", path, "\(chunk)"], environment: environment)
        #expect(run.status == 0 && run.stdout.hasSuffix("migrated\n"), "\(run.stderr)")
        let (events, files) = try IORecording.readLog(dir.path("io.log"))
        #expect(files == [path + "/data.mdb"], "\(files)")
        var epochs: [(writes: [(offset: Int, bytes: [UInt8])], acked: Int)] = [([], 0)]
        var acked = 0
        for event in events {
            switch event {
            case .write(_, let offset, let bytes): epochs[epochs.count - 1].writes.append((offset, bytes))
            case .sync: epochs.append(([], acked))
            case .ack(let n): acked = n
            default: Issue.record("the migration truncated, linked or unlinked a store file: \(event)")
            }
        }
        #expect(acked == 1, "the migration's open was not acknowledged")
        var random = SeededGenerator(seed: 1977)
        var synced = initial
        var seen: Set<Int> = []
        var outcomes = (old: 0, underWay: 0, new: 0)
        let statePath = dir.path("state.store")
        for (index, epoch) in epochs.enumerated() {
            let migrated = (index + 1 < epochs.count ? epochs[index + 1].acked : acked) == 1
            let states = IORecording.crashImages(
                of: epoch.writes, over: synced, subsets: samplesPerEpoch, torn: tornSamples, using: &random)
            for image in states where IORecording.isNew(image, seen: &seen) {
                try IORecording.writeStore(image, at: statePath)
                // A look first, read-only (and closed before the store opens to write).
                func look() throws -> (version: Int, underWay: Bool) {
                    let store = try PersistentStore.openReadOnly(path: statePath)
                    return (store.schema.version, try store.migrationUnderWay() != nil)
                }
                let (version, underWay) = try look()
                #expect(!migrated || version == 2, "epoch \(index): the migration returned, the store is not migrated")
                if version == 2 {
                    outcomes.new += 1
                } else if underWay {
                    outcomes.underWay += 1
                } else {
                    outcomes.old += 1
                }
                let store = try PersistentStore.open(
                    path: statePath, plan: try PeopleFixture.plan(chunkSize: chunk), options: .init(sync: .noSync))
                #expect(try PeopleFixture.rows(store) == expected, "epoch \(index)")
                #expect(try store.checkIntegrity().findings.isEmpty, "epoch \(index)")
                #expect(try store.migrationLog().map(\.toVersion) == [2], "epoch \(index)")
            }
            for write in epoch.writes { IORecording.apply(write, to: &synced) }
        }
        print("migration crash states: \(seen.count) distinct over \(epochs.count) epochs: \(outcomes)")
        #expect(outcomes.old > 0 && outcomes.underWay > 0 && outcomes.new > 0, "\(outcomes)")
    }
}

/// I/O faults at every call, as SQLite's I/O-error tests fail each I/O in turn: the recorder's fault mode makes the
/// N-th write, sync or truncation of the store's files fail (EIO, ENOSPC, or a short write) for every N of a
/// workload of saves, in a process of its own that retries what failed.
@Suite struct IOFaultTests {
    @Test(arguments: NoteWorkload.allCases, ["eio", "enospc", "short"])
    func aFaultAtEveryIOCallIsReportedAndLosesNothing(workload: NoteWorkload, mode: String) throws {
        let saves = TestScale.size(6, stress: 40)
        let dir = try TemporaryDirectory(prefix: "io-faults-\(workload)-\(mode)", inMemory: true)
        defer { dir.remove() }
        let library = try IORecording.buildRecorder(into: dir.path)
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
