import Foundation
import LMDB
import TestSupport
import Testing

@Suite struct EnvironmentTests {
    @Test func oneEnvironmentPerFileEvenThroughAnotherPathSpelling() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let first = try Environment.open(path: dir.path("a.store"))
        try FileManager.default.createSymbolicLink(atPath: dir.path("alias"), withDestinationPath: dir.path("a.store"))
        let second = try Environment.open(path: dir.path("alias"))
        let third = try Environment.open(path: dir.path("a.store") + "/.")
        #expect(first === second)
        #expect(first === third)
    }

    @Test func theEnvironmentClosesWithItsLastReferenceAndReopens() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        weak var weakEnv: Environment?
        do {
            let env = try Environment.open(path: dir.path("a.store"))
            let db = try env.openDatabase("things")
            try env.write { txn in try txn.put(b("k"), b("v"), in: db) }
            weakEnv = env
        }
        #expect(weakEnv == nil)
        let reopened = try Environment.open(path: dir.path("a.store"))
        #expect(try entries(reopened, try reopened.openDatabase("things", create: false)) == ["k=v"])
    }

    @Test func theMapGrowsFromOneMebibyteToMoreThanSixtyFourWithoutAnError() throws {
        try withEnvironment(options: .init(mapSize: 1 << 20, sync: .noSync)) { env, _ in
            let db = try env.openDatabase("bulk")
            let value = [UInt8](repeating: 7, count: 8192)
            // 80 MiB in transactions of 2 MiB: each fills the map at some point and is retried after growing.
            for batch in 0..<40 {
                try env.write { txn in
                    for i in 0..<256 { try txn.put(b("key-\(batch)-\(i)"), value, in: db) }
                }
            }
            #expect(env.info().mapSize > 64 << 20)
            let count = try env.read { try $0.statistics(db).entries }
            #expect(count == 40 * 256)
            let sample = try env.read { txn in try txn.get(b("key-39-255"), in: db).map(Array.init) }
            #expect(sample == value)
        }
    }

    @Test func theMapGrowsWhileOtherThreadsAreReading() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let env = try Environment.open(path: dir.path("t.store"), options: .init(mapSize: 1 << 20, sync: .noSync))
        let db = try env.openDatabase("bulk")
        try env.write { txn in try txn.put(b("anchor"), b("here"), in: db) }
        let value = [UInt8](repeating: 1, count: 4096)
        let failures = Counter()
        let reads = Counter()
        // Real threads: spinning readers in Swift tasks would fill the cooperative pool and starve the writer.
        let readers = (0..<2).map { _ in
            Thread {
                while env.info().mapSize < 32 << 20 {
                    let anchor = try? env.read { s(try $0.get(b("anchor"), in: db)) }
                    if anchor != "here" { failures.add() }
                    reads.add()
                }
            }
        }
        readers.forEach { $0.start() }
        var batch = 0
        while env.info().mapSize < 32 << 20 {
            try env.write { txn in
                for i in 0..<64 { try txn.put(b("k-\(batch)-\(i)"), value, in: db) }
            }
            batch += 1
        }
        while readers.contains(where: { !$0.isFinished }) { usleep(1000) }
        #expect(failures.value == 0)
        #expect(reads.value > 0)
        #expect(try env.read { try $0.statistics(db).entries } == batch * 64 + 1)
    }

    @Test func aHotBackupCopiesEveryDatabase() throws {
        try withEnvironment { env, dir in
            let db = try env.openDatabase("things")
            try env.write { txn in
                for i in 0..<1000 { try txn.put(b("k\(i)"), b("v\(i)"), in: db) }
            }
            try env.write { txn in
                for i in 0..<500 { try txn.delete(b("k\(i)"), in: db) }
            }
            try env.copy(to: dir.path("backup.store"))
            let copy = try Environment.open(path: dir.path("backup.store"), options: .init(readOnly: true))
            let copied = try entries(copy, try copy.openDatabase("things", create: false))
            #expect(copied == (try entries(env, db)))
            #expect(copied.count == 500)
            let again = lmdbError { try env.copy(to: dir.path("backup.store")) }
            #expect(again?.code == .invalidArgument)
        }
    }

    @Test func openingAnOpenEnvironmentAgainKeepsTheProcesssLocks() throws {
        // Closing any descriptor of lock.mdb drops every POSIX lock the process holds on it, LMDB's too: the one
        // that shows this process's readers are alive. A second open of an open environment used to allocate the
        // lock file through a descriptor of its own; another process's reader check then cleared our readers.
        let mdbStat = "/usr/bin/mdb_stat"
        try #require(FileManager.default.isExecutableFile(atPath: mdbStat), "lmdb-utils is installed by make test")
        try withEnvironment { env, dir in
            let db = try env.openDatabase("things")
            try env.write { txn in try txn.put(b("k"), b("v"), in: db) }
            try env.read { _ in
                let again = try Environment.open(path: dir.path("test.store"))
                #expect(again === env)
                let check = try ChildProcess.run(mdbStat, ["-rr", dir.path("test.store")])
                // (mdb_stat may then fail to open the main database of an environment with named ones: only the
                // reader check matters here.)
                #expect(check.stdout.contains("  0 stale readers cleared."), "\(check.stdout) \(check.stderr)")
                #expect(!check.stdout.contains("(no active readers)"), "\(check.stdout)")
            }
        }
    }

    @Test func debiansMdbStatReadsTheEnvironment() throws {
        let mdbStat = "/usr/bin/mdb_stat"
        try #require(FileManager.default.isExecutableFile(atPath: mdbStat), "lmdb-utils is installed by make test")
        try withEnvironment { env, dir in
            let db = try env.openDatabase("things")
            try env.write { txn in try txn.put(b("k"), b("v"), in: db) }
            let output = try ChildProcess.run(mdbStat, ["-a", dir.path("test.store")])
            #expect(output.status == 0)
            #expect(output.stdout.contains("Status of things"))
        }
    }

    @Test func theReaderTableListsAnOpenReader() throws {
        try withEnvironment { env, _ in
            let lines = try env.read { _ in env.readerTable() }
            #expect(lines.count >= 2)  // a header line and this reader
            #expect(env.checkReaders() == 0)
        }
    }
}

/// A long read of the whole store keeps every page it read resident in the process (the map is of the file);
/// `releaseResidentPages` drops them from the process (they stay in the page cache) and later reads see the same data.
@Suite struct ResidentPagesTests {
    /// The resident kilobytes of this process's maps of `file` (`Rss:` of each in `/proc/self/smaps`).
    static func residentKilobytes(of file: String) throws -> Int {
        let real = URL(fileURLWithPath: file).resolvingSymlinksInPath().path
        var total = 0
        var inFile = false
        for line in try Self.procFile("/proc/self/smaps").split(separator: "\n") {
            if let first = line.first, first.isHexDigit, line.contains("-"), line.split(separator: " ").count >= 5 {
                inFile = line.hasSuffix(" " + real)
            } else if inFile && line.hasPrefix("Rss:") {
                total += Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
            }
        }
        return total
    }

    /// A file of `/proc` read to its end (its size says 0: Foundation's readers stop short of its end).
    static func procFile(_ path: String) throws -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw CocoaError(.fileReadNoSuchFile, userInfo: [NSFilePathErrorKey: path]) }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    @Test(arguments: [false, true])
    func pagesReadLeaveTheProcessAndReadTheSameAfterwards(insideATransaction: Bool) throws {
        try withEnvironment(options: .init(mapSize: 1 << 28, sync: .noSync)) { env, _ in
            let db = try env.openDatabase("things")
            let value = [UInt8](repeating: 9, count: 1000)
            try env.write { txn in
                for i in 0..<16_000 { try txn.put(b(String(format: "key-%06d", i)), value, in: db) }
            }
            func readAll(_ txn: ReadTransaction) throws -> Int {
                var sum = 0
                try txn.forEach(in: db) { _, value in
                    sum += value.count + Int(value[value.count - 1])
                    return .continue
                }
                return sum
            }
            let expected = 16_000 * (1000 + 9)
            // About 16 MB of pages read through the map.
            let (before, after, again) = try env.read { txn in
                let sum = try readAll(txn)
                let before = try Self.residentKilobytes(of: env.dataFilePath)
                if insideATransaction { txn.releaseResidentPages() } else { env.releaseResidentPages() }
                let after = try Self.residentKilobytes(of: env.dataFilePath)
                return (sum == expected ? before : -1, after, try readAll(txn))
            }
            #expect(before >= 12_000, "the pages read were not resident: \(before) kB")
            #expect(after < before / 10, "\(before) kB resident before, \(after) kB after")
            #expect(again == expected)
        }
    }
}
