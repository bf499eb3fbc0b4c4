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

    @Test func seekingAValueAtLeastReturnsAKeyThatOutlivesTheCallersBuffer() throws {
        try withEnvironment { env, _ in
            let index = try env.openDatabase("index", dupSort: true)
            try env.write { txn in
                for value in ["1", "3", "5"] { try txn.put(b("red"), b(value), in: index) }
                try txn.put(b("rose"), b("9"), in: index)
            }
            let (found, missing) = try env.read { txn in
                try txn.withCursor(on: index) { cursor in
                    var key = b("red")
                    let entry = try key.withUnsafeBytes { k in
                        try b("2").withUnsafeBytes { try cursor.seek(key: k, valueAtLeast: $0) }
                    }
                    // The caller's buffer changes (or is freed): the entry still reads the stored key.
                    key.withUnsafeMutableBytes { $0.initializeMemory(as: UInt8.self, repeating: 0) }
                    let found = entry.map {
                        String(decoding: Array($0.key), as: UTF8.self) + "="
                            + String(decoding: Array($0.value), as: UTF8.self)
                    }
                    let missing = try b("red").withUnsafeBytes { k in
                        try b("6").withUnsafeBytes { try cursor.seek(key: k, valueAtLeast: $0) }
                    }
                    return (found, missing)
                }
            }
            #expect(found == "red=3")
            #expect(missing == nil)
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

    @Test func insertStoresAPairOnceAndAnswersWhenItWasThere() throws {
        try withEnvironment { env, _ in
            let index = try env.openDatabase("index", dupSort: true)
            let plain = try env.openDatabase("plain")
            let answers = try env.write { txn in
                func insert(_ key: String, _ value: String, _ database: Database) throws -> Bool {
                    try b(key).withUnsafeBytes { k in
                        try b(value).withUnsafeBytes { try txn.insert(k, $0, in: database) }
                    }
                }
                return [
                    try insert("k", "1", index), try insert("k", "2", index), try insert("k", "1", index),
                    try insert("k", "1", plain), try insert("k", "2", plain),
                ]
            }
            // A DUPSORT database takes another value of a key, not the same pair twice; another takes a key once.
            #expect(answers == [true, true, false, true, false])
            #expect(try entries(env, index) == ["k=1", "k=2"])
            #expect(try entries(env, plain) == ["k=1"])
            // A failure other than the pair being there is still thrown.
            let empty = lmdbError {
                try env.write { txn in
                    _ = try [UInt8]().withUnsafeBytes { k in
                        try b("1").withUnsafeBytes { try txn.insert(k, $0, in: index) }
                    }
                }
            }
            #expect(empty?.code == .badValueSize)
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
