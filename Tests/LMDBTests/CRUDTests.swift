import LMDB
import Testing

@Suite struct CRUDTests {
    @Test func putThenGetReturnsTheValueAndDeleteRemovesIt() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("things")
            try env.write { txn in
                try txn.put(b("apple"), b("red"), in: db)
                try txn.put(b("banana"), b("yellow"), in: db)
            }
            #expect(try env.read { s(try $0.get(b("apple"), in: db)) } == "red")
            #expect(try env.read { try $0.get(b("cherry"), in: db) } == nil)

            try env.write { txn in try txn.put(b("apple"), b("green"), in: db) }
            #expect(try env.read { s(try $0.get(b("apple"), in: db)) } == "green")

            let deleted = try env.write { txn in try txn.delete(b("apple"), in: db) }
            let deletedAgain = try env.write { txn in try txn.delete(b("apple"), in: db) }
            #expect(deleted)
            #expect(!deletedAgain)
            #expect(try entries(env, db) == ["banana=yellow"])
        }
    }

    @Test func integerKeysAreBigEndianSoTheySortNumerically() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("numbers")
            try env.write { txn in
                for n: UInt64 in [300, 2, 70_000, 1] {
                    try b("\(n)").withUnsafeBytes { try txn.put(n, $0, in: db) }
                }
            }
            let values = try env.read { txn in
                var result: [String] = []
                try txn.forEach(in: db) { _, value in
                    result.append(s(value)!)
                    return .continue
                }
                return result
            }
            #expect(values == ["1", "2", "300", "70000"])
            #expect(try env.read { s(try $0.get(UInt64(300), in: db)) } == "300")
        }
    }

    @Test func aThrowingWriteClosureLeavesNothingBehind() throws {
        struct Stop: Error {}
        try withEnvironment { env, _ in
            let db = try env.openDatabase("things")
            #expect(throws: Stop.self) {
                try env.write { txn in
                    try txn.put(b("a"), b("1"), in: db)
                    throw Stop()
                }
            }
            #expect(try entries(env, db).isEmpty)
        }
    }

    @Test func noOverwriteRefusesAnExistingKeyWithKeyExists() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("things")
            try env.write { txn in try txn.put(b("a"), b("1"), in: db) }
            let error = lmdbError { try env.write { txn in try txn.put(b("a"), b("2"), in: db, flags: .noOverwrite) } }
            #expect(error?.code == .keyExists)
            #expect(error?.code.name == "MDB_KEYEXIST")
            #expect(try entries(env, db) == ["a=1"])
        }
    }

    @Test func reservedPutWritesInPlace() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("things")
            try env.write { txn in
                try b("key").withUnsafeBytes { key in
                    try txn.put(key, reserving: 3, in: db) { buffer in buffer.copyBytes(from: b("xyz")) }
                }
            }
            #expect(try entries(env, db) == ["key=xyz"])
        }
    }

    @Test func databaseNamesAndStatisticsDescribeTheEnvironment() throws {
        try withEnvironment { env, _ in
            let first = try env.openDatabase("first")
            _ = try env.openDatabase("second", dupSort: true)
            try env.write { txn in
                for i in 0..<100 { try txn.put(b("k\(i)"), b("v"), in: first) }
            }
            let before = env.info().lastTransactionID
            try env.write { txn in try txn.put(b("k100"), b("v"), in: first) }
            #expect(env.info().lastTransactionID == before + 1)
            let names = try env.read { try $0.databaseNames() }
            #expect(names == ["first", "second"])
            let stats = try env.read { try $0.statistics(first) }
            #expect(stats.entries == 101)
            #expect(stats.leafPages >= 1)
            #expect(stats.pageSize == 4096)
        }
    }

    @Test func emptyRemovesEveryEntryButKeepsTheDatabase() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("things")
            try env.write { txn in
                try txn.put(b("a"), b("1"), in: db)
                try txn.put(b("b"), b("2"), in: db)
            }
            try env.write { txn in try txn.empty(db) }
            #expect(try entries(env, db).isEmpty)
            try env.write { txn in try txn.put(b("c"), b("3"), in: db) }
            #expect(try entries(env, db) == ["c=3"])
        }
    }
}
