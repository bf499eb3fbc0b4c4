import LMDB
import Testing

@Suite struct DupSortTests {
    @Test func aKeyHoldsSeveralSortedValues() throws {
        try withEnvironment { env, _ in
            let index = try env.openDatabase("index", dupSort: true)
            try env.write { txn in
                for (key, value) in [("red", "3"), ("red", "1"), ("blue", "2"), ("red", "2")] {
                    try txn.put(b(key), b(value), in: index)
                }
            }
            #expect(try entries(env, index) == ["blue=2", "red=1", "red=2", "red=3"])
            #expect(try entries(env, index, .exactly(b("red"))) == ["red=1", "red=2", "red=3"])
            #expect(try entries(env, index, .exactly(b("red")), reverse: true) == ["red=3", "red=2", "red=1"])
            #expect(try entries(env, index, .through(b("red")), reverse: true).first == "red=3")
            let count = try env.read { txn in
                try txn.withCursor(on: index) { cursor in
                    _ = try b("red").withUnsafeBytes { try cursor.seek(exactly: $0) }
                    return try cursor.duplicateCount()
                }
            }
            #expect(count == 3)
        }
    }

    @Test func deletingOnePairKeepsTheOtherValues() throws {
        try withEnvironment { env, _ in
            let index = try env.openDatabase("index", dupSort: true)
            try env.write { txn in
                try txn.put(b("k"), b("1"), in: index)
                try txn.put(b("k"), b("2"), in: index)
            }
            let removed = try env.write { txn in try txn.delete(b("k"), value: b("1"), in: index) }
            #expect(removed)
            #expect(try entries(env, index) == ["k=2"])
            let duplicate = lmdbError {
                try env.write { txn in try txn.put(b("k"), b("2"), in: index, flags: .noDuplicateData) }
            }
            #expect(duplicate?.code == .keyExists)
        }
    }

    @Test func exclusiveLowerBoundSkipsEveryValueOfThatKey() throws {
        try withEnvironment { env, _ in
            let index = try env.openDatabase("index", dupSort: true)
            try env.write { txn in
                for value in ["1", "2", "3"] { try txn.put(b("a"), b(value), in: index) }
                try txn.put(b("b"), b("9"), in: index)
            }
            let range = KeyRange(lower: .init(b("a"), inclusive: false))
            #expect(try entries(env, index, range) == ["b=9"])
        }
    }

    @Test func dupSortValuesOverTheKeyLimitAreRefusedClearly() throws {
        try withEnvironment { env, _ in
            let index = try env.openDatabase("index", dupSort: true)
            let error = lmdbError {
                try env.write { txn in try txn.put(b("k"), [UInt8](repeating: 1, count: 600), in: index) }
            }
            #expect(error?.code == .badValueSize)
            #expect(error?.message.contains("600 bytes") == true)
        }
    }
}
