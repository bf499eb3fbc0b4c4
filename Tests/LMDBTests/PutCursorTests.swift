import LMDB
import Testing

@Suite struct PutCursorTests {
    /// Keys that make LMDB split pages many times: 4-byte big-endian numbers with 100-byte values.
    func key(_ n: Int) -> [UInt8] { withUnsafeBytes(of: UInt32(n).bigEndian) { Array($0) } }

    @Test func putsInOrderAndOutOfOrderThroughACursorStoreWhatPlainPutsStore() throws {
        try withEnvironment { env, _ in
            let viaCursor = try env.openDatabase("cursor")
            let viaPut = try env.openDatabase("put")
            // In order, then backwards, then a scatter, with plain puts and deletes on the same database between
            // (LMDB moves the cursor when the tree changes under it).
            let order = Array(0..<3000) + Array((3000..<4000).reversed()) + (0..<1000).map { ($0 * 7919) % 5000 }
            try env.write { txn in
                let cursor = try txn.putCursor(on: viaCursor)
                for (step, n) in order.enumerated() {
                    let value = [UInt8](repeating: UInt8(step % 251), count: 100)
                    if step % 2 == 0 {
                        try key(n).withUnsafeBytes { k in try value.withUnsafeBytes { try cursor.put(k, $0) } }
                    } else {
                        try cursor.put(key(n), value)  // the byte-array form
                    }
                    try txn.put(key(n), value, in: viaPut)
                    if step % 97 == 0 {
                        #expect(try txn.delete(key(n / 2), in: viaCursor) == (try txn.delete(key(n / 2), in: viaPut)))
                    }
                }
            }
            let stored = try env.read { txn in
                var pairs: [[UInt8]: [UInt8]] = [:]
                try txn.forEach(in: viaCursor) { key, value in
                    pairs[Array(key)] = Array(value)
                    return .continue
                }
                var matches = true
                var count = 0
                try txn.forEach(in: viaPut) { key, value in
                    count += 1
                    if pairs[Array(key)] != Array(value) { matches = false }
                    return .continue
                }
                return (matches, count, pairs.count)
            }
            #expect(stored.0)
            #expect(stored.1 == stored.2)
            #expect(stored.1 > 4000)
        }
    }

    @Test func sortedDuplicatesThroughACursorAreAllStoredInOrder() throws {
        try withEnvironment { env, _ in
            let index = try env.openDatabase("index", dupSort: true)
            try env.write { txn in
                let cursor = try txn.putCursor(on: index)
                for group in 0..<20 {
                    for member in 0..<500 {
                        try b("group\(group)").withUnsafeBytes { k in
                            try key(member).withUnsafeBytes { try cursor.put(k, $0) }
                        }
                    }
                }
            }
            let members = try env.read { txn in
                var found: [Int] = []
                try txn.forEach(in: index, range: .exactly(b("group7"))) { _, value in
                    found.append(value.reduce(0) { $0 << 8 | Int($1) })
                    return .continue
                }
                return found
            }
            #expect(members == Array(0..<500))
        }
    }

    @Test func appendsThroughACursorRefuseAKeyBelowTheLastAndWriteNothing() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("records")
            try env.write { txn in
                let cursor = try txn.putCursor(on: db)
                for n in 1...100 {
                    try key(n).withUnsafeBytes { k in
                        try [UInt8(1)].withUnsafeBytes { try cursor.put(k, $0, flags: .append) }
                    }
                }
                let error = lmdbError {
                    try key(50).withUnsafeBytes { k in
                        try [UInt8(2)].withUnsafeBytes { try cursor.put(k, $0, flags: .append) }
                    }
                }
                #expect(error?.code == .keyExists)
                // The cursor still puts where a key belongs once told not to append.
                try key(0).withUnsafeBytes { k in try [UInt8(3)].withUnsafeBytes { try cursor.put(k, $0) } }
            }
            #expect(try env.read { txn in try txn.get(key(50), in: db).map(Array.init) } == [1])
            #expect(try env.read { txn in try txn.get(key(0), in: db).map(Array.init) } == [3])
        }
    }

    @Test func aCursorIsOnePerDatabaseAndUnusableOnceItsTransactionEndsOrItsDatabaseIsDropped() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("records")
            let other = try env.openDatabase("other")
            var kept: PutCursor?
            try env.write { txn in
                let cursor = try txn.putCursor(on: db)
                #expect(try txn.putCursor(on: db) === cursor)
                #expect(try txn.putCursor(on: other) !== cursor)
                kept = cursor
            }
            let afterCommit = lmdbError {
                try b("k").withUnsafeBytes { k in try k.withUnsafeBytes { try kept!.put(k, $0) } }
            }
            #expect(afterCommit?.code == .misuse)
            #expect(afterCommit?.message.contains("transaction ended") == true)
            try env.write { txn in
                let cursor = try txn.putCursor(on: other)
                try txn.drop(other)
                let afterDrop = lmdbError {
                    try b("k").withUnsafeBytes { k in try k.withUnsafeBytes { try cursor.put(k, $0) } }
                }
                #expect(afterDrop?.code == .misuse)
            }
        }
    }

    @Test func aCursorChecksKeysAndDuplicateValuesLikePut() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("records")
            let index = try env.openDatabase("index", dupSort: true)
            try env.write { txn in
                let cursor = try txn.putCursor(on: db)
                let empty = lmdbError {
                    try [UInt8]().withUnsafeBytes { k in try [UInt8(1)].withUnsafeBytes { try cursor.put(k, $0) } }
                }
                #expect(empty?.code == .badValueSize)
                let long = [UInt8](repeating: 1, count: env.maxKeySize + 1)
                let tooLong = lmdbError {
                    try long.withUnsafeBytes { k in try [UInt8(1)].withUnsafeBytes { try cursor.put(k, $0) } }
                }
                #expect(tooLong?.code == .badValueSize)
                let duplicates = try txn.putCursor(on: index)
                let bigValue = lmdbError {
                    try b("k").withUnsafeBytes { k in try long.withUnsafeBytes { try duplicates.put(k, $0) } }
                }
                #expect(bigValue?.code == .badValueSize)
                #expect(bigValue?.message.contains("DUPSORT") == true)
            }
        }
    }
}
