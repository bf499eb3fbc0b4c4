import LMDB
import Testing

@Suite struct CursorTests {
    func fill(_ env: Environment, _ db: Database, _ keys: [String]) throws {
        try env.write { txn in
            for key in keys { try txn.put(b(key), b(key.uppercased()), in: db) }
        }
    }

    @Test func forwardAndBackwardVisitEveryKeyInOrder() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("keys")
            try fill(env, db, ["c", "a", "b"])
            #expect(try entries(env, db) == ["a=A", "b=B", "c=C"])
            #expect(try entries(env, db, reverse: true) == ["c=C", "b=B", "a=A"])
        }
    }

    @Test func rangesHonourInclusiveAndExclusiveBoundsInBothDirections() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("keys")
            try fill(env, db, ["a", "b", "c", "d", "e"])
            #expect(try entries(env, db, .from(b("c"))) == ["c=C", "d=D", "e=E"])
            #expect(try entries(env, db, .from(b("bb"))) == ["c=C", "d=D", "e=E"])
            #expect(try entries(env, db, .through(b("b"))) == ["a=A", "b=B"])
            #expect(try entries(env, db, .through(b("b")), reverse: true) == ["b=B", "a=A"])
            #expect(try entries(env, db, .through(b("bb")), reverse: true) == ["b=B", "a=A"])
            let open = KeyRange(lower: .init(b("b"), inclusive: false), upper: .init(b("d"), inclusive: false))
            #expect(try entries(env, db, open) == ["c=C"])
            #expect(try entries(env, db, open, reverse: true) == ["c=C"])
            let closed = KeyRange(lower: .init(b("b")), upper: .init(b("d")))
            #expect(try entries(env, db, closed, reverse: true) == ["d=D", "c=C", "b=B"])
            #expect(try entries(env, db, .from(b("z"))).isEmpty)
            #expect(try entries(env, db, .through(b("z")), reverse: true).count == 5)
        }
    }

    @Test func prefixRangesFindExactlyTheKeysWithThePrefix() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("keys")
            try fill(env, db, ["ab", "abc", "abd", "ac", "b", "aa"])
            #expect(try entries(env, db, .prefix(b("ab"))) == ["ab=AB", "abc=ABC", "abd=ABD"])
            #expect(try entries(env, db, .prefix(b("ab")), reverse: true) == ["abd=ABD", "abc=ABC", "ab=AB"])
            #expect(try entries(env, db, .prefix(b("x"))).isEmpty)
        }
    }

    @Test func prefixOfAllFFBytesHasNoUpperBoundAndStillMatches() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("bytes")
            try env.write { txn in
                try txn.put([0xFE], [1], in: db)
                try txn.put([0xFF], [2], in: db)
                try txn.put([0xFF, 0x00], [3], in: db)
                try txn.put([0xFF, 0xFF], [4], in: db)
            }
            let values = try env.read { txn in
                var result: [UInt8] = []
                try txn.forEach(in: db, range: .prefix([0xFF]), reverse: true) { _, value in
                    result.append(value[0])
                    return .continue
                }
                return result
            }
            #expect(values == [4, 3, 2])
        }
    }

    @Test func aWholeDatabaseScanVisitsWhatForEachVisitsAndStops() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("keys")
            let empty = try env.openDatabase("empty")
            let dups = try env.openDatabase("dups", dupSort: true)
            try fill(env, db, (0..<300).map { String(format: "k%03d", ($0 * 7) % 300) })
            try env.write { txn in
                for value in ["z", "x", "y"] { try txn.put(b("one"), b(value), in: dups) }
                try txn.put(b("two"), b("w"), in: dups)
            }
            try env.read { txn in
                for database in [db, empty, dups] {
                    var scanned: [String] = []
                    try txn.forEachEntry(in: database) { key, value in
                        scanned.append(
                            String(decoding: key, as: UTF8.self) + "=" + String(decoding: value, as: UTF8.self))
                        return .continue
                    }
                    var walked: [String] = []
                    try txn.forEach(in: database) { key, value in
                        walked.append(
                            String(decoding: key, as: UTF8.self) + "=" + String(decoding: value, as: UTF8.self))
                        return .continue
                    }
                    #expect(scanned == walked)
                    var backwards: [String] = []
                    try txn.forEachEntry(in: database, reverse: true) { key, value in
                        backwards.append(
                            String(decoding: key, as: UTF8.self) + "=" + String(decoding: value, as: UTF8.self))
                        return .continue
                    }
                    #expect(backwards == walked.reversed())
                }
                var count = 0
                try txn.forEachEntry(in: db) { _, _ in
                    count += 1
                    return count == 5 ? .stop : .continue
                }
                #expect(count == 5)
                var last: [String] = []
                try txn.forEachEntry(in: db, reverse: true) { key, _ in
                    last.append(String(decoding: key, as: UTF8.self))
                    return last.count == 2 ? .stop : .continue
                }
                #expect(last == ["k299", "k298"])
            }
        }
    }

    @Test func iterationStopsWhenTheBodySaysStop() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("keys")
            try fill(env, db, ["a", "b", "c"])
            let seen = try env.read { txn in
                var count = 0
                try txn.forEach(in: db) { _, _ in
                    count += 1
                    return count == 2 ? .stop : .continue
                }
                return count
            }
            #expect(seen == 2)
        }
    }

    @Test func cursorPositioningReturnsTheEntriesItLandsOn() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("keys")
            try fill(env, db, ["a", "c", "e"])
            let landed: [String?] = try env.read { txn in
                try txn.withCursor(on: db) { cursor in
                    [
                        s(try cursor.first()?.key),
                        s(try cursor.next()?.key),
                        s(try cursor.last()?.value),
                        s(try cursor.previous()?.key),
                        s(try b("b").withUnsafeBytes { try cursor.seek(atLeast: $0) }?.key),
                        s(try b("b").withUnsafeBytes { try cursor.seek(exactly: $0) }?.key),
                        s(try b("f").withUnsafeBytes { try cursor.seek(atLeast: $0) }?.key),
                    ]
                }
            }
            #expect(landed == ["a", "c", "E", "c", "c", nil, nil])
        }
    }
}
