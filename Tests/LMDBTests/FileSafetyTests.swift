import Foundation
import LMDB
import TestSupport
import Testing

@Suite struct FileSafetyTests {
    /// Creates a store with some data in `dir` and closes it.
    func makeStore(_ dir: TemporaryDirectory, _ name: String = "s.store", keys: Int = 2000) throws -> String {
        let path = dir.path(name)
        let env = try Environment.open(path: path)
        let db = try env.openDatabase("things")
        try env.write { txn in
            for i in 0..<keys { try txn.put(b("key-\(i)"), [UInt8](repeating: 9, count: 100), in: db) }
        }
        return path
    }

    func size(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1
    }

    @Test(arguments: [0.5, 0.9, 0.1])
    func aTruncatedDataFileIsRefusedBeforeLMDBTouchesIt(fraction: Double) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try makeStore(dir)
        let data = path + "/data.mdb"
        let full = try size(data)
        let cut = Int(Double(full) * fraction) / 4096 * 4096
        #expect(truncate(data, off_t(cut)) == 0)
        let error = lmdbError { _ = try Environment.open(path: path) }
        #expect(error?.code == .truncatedDataFile)
        #expect(error?.message.contains("truncated") == true)
        #expect(try size(data) == cut)
    }

    @Test func anEmptyDataFileIsInitialisedAndAForeignOneIsNotAnEnvironment() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // What a first open killed before LMDB wrote its meta pages leaves: read-only it is not a store yet,
        // read-write LMDB initialises it.
        try FileManager.default.createDirectory(atPath: dir.path("empty.store"), withIntermediateDirectories: false)
        _ = FileManager.default.createFile(atPath: dir.path("empty.store/data.mdb"), contents: Data())
        let readOnly = lmdbError {
            _ = try Environment.open(path: dir.path("empty.store"), options: .init(readOnly: true))
        }
        #expect(readOnly?.code == .notAnEnvironment)
        #expect(try size(dir.path("empty.store/data.mdb")) == 0)
        do {
            let env = try Environment.open(path: dir.path("empty.store"))
            let db = try env.openDatabase("things")
            try env.write { txn in try txn.put(b("k"), b("v"), in: db) }
        }
        #expect(try size(dir.path("empty.store/data.mdb")) > 0)

        try FileManager.default.createDirectory(atPath: dir.path("text.store"), withIntermediateDirectories: false)
        let text = Data(String(repeating: "not a database\n", count: 1000).utf8)
        _ = FileManager.default.createFile(atPath: dir.path("text.store/data.mdb"), contents: text)
        let foreign = lmdbError { _ = try Environment.open(path: dir.path("text.store")) }
        #expect(foreign?.code == .notAnEnvironment)
        #expect(FileManager.default.contents(atPath: dir.path("text.store/data.mdb")) == text)

        _ = FileManager.default.createFile(atPath: dir.path("plainfile"), contents: Data("x".utf8))
        let notDirectory = lmdbError { _ = try Environment.open(path: dir.path("plainfile")) }
        #expect(notDirectory?.code == .notAnEnvironment)
    }

    @Test func aSymlinkedLockFileIsRefused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try makeStore(dir)
        try FileManager.default.removeItem(atPath: path + "/lock.mdb")
        _ = FileManager.default.createFile(atPath: dir.path("elsewhere"), contents: Data())
        try FileManager.default.createSymbolicLink(
            atPath: path + "/lock.mdb", withDestinationPath: dir.path("elsewhere"))
        let error = lmdbError { _ = try Environment.open(path: path) }
        #expect(error?.code == .unsafeFile)
        #expect(error?.context.hasSuffix("lock.mdb") == true)
        #expect(try size(dir.path("elsewhere")) == 0)
    }

    @Test func aSymlinkedOrSpecialDataFileIsRefused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try makeStore(dir)
        try FileManager.default.moveItem(atPath: path + "/data.mdb", toPath: dir.path("real.mdb"))
        try FileManager.default.createSymbolicLink(
            atPath: path + "/data.mdb", withDestinationPath: dir.path("real.mdb"))
        let linked = lmdbError { _ = try Environment.open(path: path) }
        #expect(linked?.code == .unsafeFile)
        #expect(linked?.context.hasSuffix("data.mdb") == true)

        try FileManager.default.removeItem(atPath: path + "/data.mdb")
        #expect(mkfifo(path + "/data.mdb", 0o600) == 0)
        let fifo = lmdbError { _ = try Environment.open(path: path) }
        #expect(fifo?.code == .unsafeFile)
    }

    @Test func aNewStoreIsPrivateEvenUnderUmaskZero() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("private.store")
        // umask is per process: a child process sets it, so the tests running alongside are not affected.
        let output = try ChildProcess.helper(["create-store-umask0", path])
        #expect(output.status == 0, "\(output.stderr)")
        func mode(_ path: String) throws -> Int {
            ((try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]) as? Int) ?? -1
        }
        #expect(try mode(path) == 0o700)
        #expect(try mode(path + "/data.mdb") == 0o600)
        #expect(try mode(path + "/lock.mdb") == 0o600)
    }
}
