import EntityStore
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct MalformedFileTests {
    /// Opens damaged copies of a store in child processes (`store-inspect check`), so that a crash inside LMDB
    /// is caught and counted. Our own checks must answer with a documented exit code, and the file stays as it
    /// was.
    func openDamaged(
        _ damage: (String, Int) throws -> Void, runs: Int, label: String
    ) throws -> (codes: [Int32: Int], crashes: Int) {
        let dir = try TemporaryDirectory(prefix: "malformed-test")
        defer { dir.remove() }
        let original = dir.path("lib.store")
        let made = try ChildProcess.helper(["library-store", original])
        try #require(made.status == 0)
        var codes: [Int32: Int] = [:]
        var crashes = 0
        for run in 0..<runs {
            let copy = dir.path("damaged-\(run)")
            try FileManager.default.copyItem(atPath: original, toPath: copy)
            try damage(copy + "/data.mdb", run)
            let before = FileManager.default.contents(atPath: copy + "/data.mdb")
            let output = try ChildProcess.run(
                ChildProcess.executable("store-inspect"), ["check", copy, "--format", "csv"])
            if output.terminationReason == .uncaughtSignal {
                crashes += 1
            } else {
                codes[output.status, default: 0] += 1
                #expect(
                    [0, 1, 65, 66, 69].contains(output.status),
                    "\(label) run \(run): exit \(output.status) \(output.stderr)")
            }
            #expect(
                FileManager.default.contents(atPath: copy + "/data.mdb") == before,
                "\(label) run \(run): the file changed")
            try? FileManager.default.removeItem(atPath: copy)
        }
        print(
            "malformed files, \(label): \(runs) opens, exit codes \(codes.sorted { $0.key < $1.key }), \(crashes) crashes inside LMDB"
        )
        return (codes, crashes)
    }

    @Test func truncationAtManyOffsetsIsRefusedBeforeLMDBSeesIt() throws {
        let (codes, crashes) = try openDamaged(
            { path, run in
                let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
                let offset = run == 0 ? 0 : size * run / 40
                #expect(truncate(path, off_t(offset)) == 0)
            }, runs: 40, label: "truncation")
        #expect(crashes == 0)  // the preflight check owns truncation: LMDB never sees a short file
        #expect(codes[65] == 40)
    }

    @Test func randomByteFlipsNeverCrashOurChecksAndWriteNothing() throws {
        var generator = SeededGenerator(seed: 99)
        let (codes, _) = try openDamaged(
            { path, _ in
                guard var data = FileManager.default.contents(atPath: path) else { return }
                for _ in 0..<Int.random(in: 1...8, using: &generator) {
                    data[Int.random(in: 0..<data.count, using: &generator)] ^= UInt8.random(
                        in: 1...255, using: &generator)
                }
                try data.write(to: URL(fileURLWithPath: path))
            }, runs: 60, label: "byte flips")
        #expect(codes.values.reduce(0, +) > 0)
    }
}

@Suite struct SchemaMismatchTests {
    @Test func aStoreOpenedWithAnIncompatibleSchemaInAChildProcessIsRefusedAndUntouched() throws {
        let dir = try TemporaryDirectory(prefix: "mismatch-test")
        defer { dir.remove() }
        let path = dir.path("lib.store")
        #expect(try ChildProcess.helper(["library-store", path]).status == 0)
        let before = FileManager.default.contents(atPath: path + "/data.mdb")
        let output = try ChildProcess.helper(["open-mismatched", path])
        #expect(output.terminationReason == .exit)
        #expect(output.status == 1)
        #expect(output.stderr.contains("migrationRefused"))
        #expect(output.stderr.contains("the type changed from int64 to string"))
        #expect(FileManager.default.contents(atPath: path + "/data.mdb") == before)
    }
}
