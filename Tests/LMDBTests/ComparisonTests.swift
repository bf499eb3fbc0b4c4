import CLMDB
import Foundation
import LMDB
import TestSupport
import Testing

/// Named databases compare keys (and DUPSORT values) with `entitystore_compare_bytes`, eight bytes at a time. Its order
/// must be exactly LMDB's default one (bytes as unsigned, a prefix before its extensions), or a store written by
/// another program (LMDB's tools, an older build) would be searched in the wrong order.
@Suite struct ComparisonTests {
    /// Keys of 1-20 bytes from a few values around the signed and unsigned edges, so that many share a prefix of 8 or
    /// 16 bytes and differ past it, or only in length.
    static func keys(_ count: Int, seed: UInt64) -> [[UInt8]] {
        var state = seed
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 33
        }
        let alphabet: [UInt8] = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]
        var keys = Set<[UInt8]>()
        while keys.count < count {
            let length = [8, 16, 7, 9, 15, 17][Int(next() % 6)] - Int(next() % 2) * Int(next() % 7)
            keys.insert((0..<max(1, length)).map { _ in alphabet[Int(next() % 6)] })
        }
        return keys.shuffled()
    }

    static func lexicographic(_ keys: [[UInt8]]) -> [[UInt8]] {
        keys.sorted { $0.lexicographicallyPrecedes($1) }
    }

    /// Every key of `db`, in the order LMDB keeps them.
    static func storedKeys(_ env: Environment, _ db: Database) throws -> [[UInt8]] {
        try env.read { txn in
            var stored: [[UInt8]] = []
            try txn.forEach(in: db) { key, _ in
                stored.append(Array(key))
                return .continue
            }
            return stored
        }
    }

    /// Where `stored` first departs from the keys in byte order, as a short description; nil when it does not.
    static func departure(_ stored: [[UInt8]], from keys: [[UInt8]]) -> String? {
        let expected = lexicographic(keys)
        guard stored != expected else { return nil }
        let common = min(stored.count, expected.count)
        let place = (0..<common).first { stored[$0] != expected[$0] } ?? common
        let found = place < stored.count ? "\(stored[place])" : "nothing"
        let wanted = place < expected.count ? "\(expected[place])" : "nothing"
        return "\(stored.count) entries for \(expected.count); at \(place): \(found), expected \(wanted)"
    }

    @Test func keysOfEveryLengthSortAsTheirBytes() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("keys", create: true)
            let keys = Self.keys(3_000, seed: 1)
            try env.write { txn in
                for key in keys { try txn.put(key, key, in: db) }
            }
            let missing = try env.read { txn in try keys.filter { try txn.get($0, in: db).map(Array.init) != $0 } }
            #expect(missing.count == 0, "keys not found: \(missing.prefix(3))")
            #expect(Self.departure(try Self.storedKeys(env, db), from: keys) == nil)
        }
    }

    @Test func duplicateValuesOfEveryLengthSortAsTheirBytes() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("index", dupSort: true, create: true)
            let values = Self.keys(1_000, seed: 2)
            try env.write { txn in
                for (i, value) in values.enumerated() { try txn.put([UInt8(i % 3)], value, in: db) }
            }
            let stored = try env.read { txn in
                var stored: [[[UInt8]]] = [[], [], []]
                try txn.forEach(in: db) { key, value in
                    stored[Int(key[0])].append(Array(value))
                    return .continue
                }
                return stored
            }
            for group in 0..<3 {
                let expected = values.enumerated().filter { $0.offset % 3 == group }.map(\.element)
                #expect(Self.departure(stored[group], from: expected) == nil)
            }
        }
    }

    /// A store written through LMDB's C API with its default comparison is read, searched and extended here in the
    /// same order, and LMDB's default comparison then reads what this library wrote.
    @Test func aStoreWrittenWithLMDBsOwnComparisonReadsAndGrowsInTheSameOrder() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path("raw.store")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let first = Self.keys(2_000, seed: 3)
        let second = Self.keys(4_000, seed: 4).filter { !first.contains($0) }
        try rawLMDB(path) { txn, dbi in
            for key in first {
                var k = key
                var v = key
                try k.withUnsafeMutableBytes { kb in
                    try v.withUnsafeMutableBytes { vb in
                        var kv = MDB_val(mv_size: kb.count, mv_data: kb.baseAddress)
                        var vv = MDB_val(mv_size: vb.count, mv_data: vb.baseAddress)
                        try #require(mdb_put(txn, dbi, &kv, &vv, 0) == 0)
                    }
                }
            }
        }
        do {
            let env = try Environment.open(path: path, options: .init(sync: .noSync))
            let db = try env.openDatabase("keys")
            let missing = try env.read { txn in
                try first.filter { try txn.get($0, in: db).map(Array.init) != $0 }
            }
            #expect(missing.count == 0, "keys not found: \(missing.prefix(3))")
            try env.write { txn in
                for key in second { try txn.put(key, key, in: db) }
            }
            #expect(Self.departure(try Self.storedKeys(env, db), from: first + second) == nil)
        }
        // Back under LMDB's default comparison: every key is found where it searches for it.
        var found = 0
        try rawLMDB(path) { txn, dbi in
            for key in first + second {
                var k = key
                k.withUnsafeMutableBytes { kb in
                    var kv = MDB_val(mv_size: kb.count, mv_data: kb.baseAddress)
                    var vv = MDB_val()
                    if mdb_get(txn, dbi, &kv, &vv) == 0,
                        Array(UnsafeRawBufferPointer(start: vv.mv_data, count: vv.mv_size)) == key
                    {
                        found += 1
                    }
                }
            }
        }
        #expect(found == first.count + second.count)
    }

    /// Opens the environment at `path` with LMDB's C API alone (default comparisons) and runs `body` in a write
    /// transaction on the named database "keys", created when missing; commits when `body` returns.
    func rawLMDB(_ path: String, _ body: (OpaquePointer?, MDB_dbi) throws -> Void) throws {
        var env: OpaquePointer?
        try #require(mdb_env_create(&env) == 0)
        defer { mdb_env_close(env) }
        try #require(mdb_env_set_maxdbs(env, 4) == 0)
        try #require(mdb_env_set_mapsize(env, 64 << 20) == 0)
        try #require(mdb_env_open(env, path, UInt32(MDB_NOTLS), 0o600) == 0)
        var txn: OpaquePointer?
        try #require(mdb_txn_begin(env, nil, 0, &txn) == 0)
        var dbi: MDB_dbi = 0
        guard mdb_dbi_open(txn, "keys", UInt32(MDB_CREATE), &dbi) == 0 else {
            mdb_txn_abort(txn)
            Issue.record("mdb_dbi_open of 'keys' failed")
            return
        }
        do {
            try body(txn, dbi)
        } catch {
            mdb_txn_abort(txn)
            throw error
        }
        try #require(mdb_txn_commit(txn) == 0)
    }
}
