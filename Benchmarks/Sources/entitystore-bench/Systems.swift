import CLMDBRaw
import CSQLite
import EntityStore
import Foundation
import LMDB

/// The raw record the LMDB baselines store: id, score, date (8 bytes each), title (length + UTF-8), blob.
enum RawRecord {
    static func encode(_ item: ItemData, into buffer: inout [UInt8]) {
        buffer.removeAll(keepingCapacity: true)
        withUnsafeBytes(of: item.id.littleEndian) { buffer.append(contentsOf: $0) }
        withUnsafeBytes(of: item.score.littleEndian) { buffer.append(contentsOf: $0) }
        withUnsafeBytes(of: item.date.bitPattern.littleEndian) { buffer.append(contentsOf: $0) }
        let title = Array(item.title.utf8)
        buffer.append(UInt8(title.count))
        buffer.append(contentsOf: title)
        buffer.append(contentsOf: item.blob)
    }

    static func decode(_ bytes: UnsafeRawBufferPointer) -> ItemData {
        let id = Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: Int64.self))
        let score = Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: Int64.self))
        let date = Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self)))
        let length = Int(bytes[24])
        let title = String(decoding: bytes[25..<(25 + length)], as: UTF8.self)
        let blob = Array(bytes[(25 + length)...])
        return ItemData(id: id, title: title, score: score, date: date, blob: blob)
    }

    static func key(_ id: Int64) -> UInt64 { UInt64(id + 1).bigEndian }
    static func scoreKey(_ score: Int64) -> UInt64 { (UInt64(bitPattern: score) ^ (1 << 63)).bigEndian }
}

/// Raw LMDB through this project's safe Swift layer.
final class RawSwiftLMDB {
    let env: Environment
    let records: Database
    let index: Database

    init(path: String) throws {
        env = try Environment.open(path: path, options: .init(mapSize: 1 << 30))
        records = try env.openDatabase("records")
        index = try env.openDatabase("score", dupSort: true)
    }

    func insert(_ items: [ItemData]) throws {
        var buffer: [UInt8] = []
        try env.write { txn in
            for item in items {
                RawRecord.encode(item, into: &buffer)
                var key = RawRecord.key(item.id)
                var score = RawRecord.scoreKey(item.score)
                try withUnsafeBytes(of: &key) { k in
                    try buffer.withUnsafeBytes { v in try txn.put(k, v, in: records, flags: .append) }
                    try withUnsafeBytes(of: &score) { s in try txn.put(s, k, in: index) }
                }
            }
        }
    }

    func get(_ id: Int64) throws -> ItemData? {
        try env.read { txn in
            var key = RawRecord.key(id)
            return try withUnsafeBytes(of: &key) { k in try txn.get(k, in: records).map(RawRecord.decode) }
        }
    }

    func updateScore(_ id: Int64, _ score: Int64) throws {
        try env.write { txn in
            var key = RawRecord.key(id)
            try withUnsafeBytes(of: &key) { k in
                guard let bytes = try txn.get(k, in: records) else { return }
                var item = RawRecord.decode(bytes)
                item.score = score
                var buffer: [UInt8] = []
                RawRecord.encode(item, into: &buffer)
                try buffer.withUnsafeBytes { v in try txn.put(k, v, in: records) }
            }
        }
    }
}

/// Raw LMDB through the C API, as directly as Swift allows.
final class RawCLMDB {
    var env: OpaquePointer?
    var records: MDB_dbi = 0
    var index: MDB_dbi = 0
    var history: MDB_dbi = 0
    /// The last entry `saveLike` appended to `history`.
    var historyNumber: UInt64 = 0

    init(path: String, sync: Environment.SyncMode = .durable) {
        mdb_env_create(&env)
        mdb_env_set_mapsize(env, 1 << 30)
        mdb_env_set_maxdbs(env, 4)
        let syncFlags: Int32 =
            switch sync {
            case .durable: 0
            case .noMetaSync: MDB_NOMETASYNC
            case .noSync: MDB_NOSYNC
            }
        mdb_env_open(env, path, UInt32(MDB_NOTLS | syncFlags), 0o600)
        var txn: OpaquePointer?
        mdb_txn_begin(env, nil, 0, &txn)
        mdb_dbi_open(txn, "records", UInt32(MDB_CREATE), &records)
        mdb_dbi_open(txn, "score", UInt32(MDB_CREATE | MDB_DUPSORT), &index)
        mdb_dbi_open(txn, "history", UInt32(MDB_CREATE), &history)
        mdb_txn_commit(txn)
    }

    deinit { mdb_env_close(env) }

    func insert(_ items: [ItemData]) {
        var txn: OpaquePointer?
        mdb_txn_begin(env, nil, 0, &txn)
        var buffer: [UInt8] = []
        for item in items {
            RawRecord.encode(item, into: &buffer)
            var key = RawRecord.key(item.id)
            var score = RawRecord.scoreKey(item.score)
            buffer.withUnsafeMutableBytes { v in
                withUnsafeMutablePointer(to: &key) { k in
                    var keyValue = MDB_val(mv_size: 8, mv_data: k)
                    var data = MDB_val(mv_size: v.count, mv_data: v.baseAddress)
                    mdb_put(txn, records, &keyValue, &data, UInt32(MDB_APPEND))
                    withUnsafeMutablePointer(to: &score) { s in
                        var scoreValue = MDB_val(mv_size: 8, mv_data: s)
                        var pk = MDB_val(mv_size: 8, mv_data: k)
                        mdb_put(txn, index, &scoreValue, &pk, 0)
                    }
                }
            }
        }
        mdb_txn_commit(txn)
    }

    func get(_ id: Int64) -> ItemData? {
        var txn: OpaquePointer?
        mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn)
        defer { mdb_txn_abort(txn) }
        var key = RawRecord.key(id)
        return withUnsafeMutablePointer(to: &key) { k in
            var keyValue = MDB_val(mv_size: 8, mv_data: k)
            var data = MDB_val()
            guard mdb_get(txn, records, &keyValue, &data) == 0 else { return nil }
            return RawRecord.decode(UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size))
        }
    }

    /// One durable commit of one put.
    func putOne(_ id: Int64, _ bytes: [UInt8]) {
        var txn: OpaquePointer?
        mdb_txn_begin(env, nil, 0, &txn)
        var key = RawRecord.key(id)
        var copy = bytes
        copy.withUnsafeMutableBytes { v in
            withUnsafeMutablePointer(to: &key) { k in
                var keyValue = MDB_val(mv_size: 8, mv_data: k)
                var data = MDB_val(mv_size: v.count, mv_data: v.baseAddress)
                mdb_put(txn, records, &keyValue, &data, 0)
            }
        }
        mdb_txn_commit(txn)
    }

    /// One durable commit of the writes an EntityStore save of one changed score makes, done by hand: the record
    /// replaced, the index entry moved from `oldScore` to `score`, and an entry of `entry`'s bytes appended to a
    /// history database. The floor of a save under this storage layout: what is left above it is the object layer.
    func saveLike(_ id: Int64, record: [UInt8], oldScore: Int64, score: Int64, entry: [UInt8]) {
        var txn: OpaquePointer?
        mdb_txn_begin(env, nil, 0, &txn)
        var key = RawRecord.key(id)
        var old = RawRecord.scoreKey(oldScore)
        var new = RawRecord.scoreKey(score)
        historyNumber += 1
        var number = historyNumber.bigEndian
        var recordCopy = record
        var entryCopy = entry
        withUnsafeMutablePointer(to: &key) { k in
            var keyValue = MDB_val(mv_size: 8, mv_data: k)
            recordCopy.withUnsafeMutableBytes { v in
                var data = MDB_val(mv_size: v.count, mv_data: v.baseAddress)
                mdb_put(txn, records, &keyValue, &data, 0)
            }
            withUnsafeMutablePointer(to: &old) { o in
                var oldKey = MDB_val(mv_size: 8, mv_data: o)
                var pk = MDB_val(mv_size: 8, mv_data: k)
                mdb_del(txn, index, &oldKey, &pk)
            }
            withUnsafeMutablePointer(to: &new) { n in
                var newKey = MDB_val(mv_size: 8, mv_data: n)
                var pk = MDB_val(mv_size: 8, mv_data: k)
                mdb_put(txn, index, &newKey, &pk, 0)
            }
        }
        withUnsafeMutablePointer(to: &number) { n in
            var numberKey = MDB_val(mv_size: 8, mv_data: n)
            entryCopy.withUnsafeMutableBytes { e in
                var data = MDB_val(mv_size: e.count, mv_data: e.baseAddress)
                mdb_put(txn, history, &numberKey, &data, UInt32(MDB_APPEND))
            }
        }
        mdb_txn_commit(txn)
    }

    /// Scans every record, decoding only the date: the raw floor for a predicate scan.
    func scanDates(atLeast threshold: Double) -> Int {
        var txn: OpaquePointer?
        mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn)
        defer { mdb_txn_abort(txn) }
        var cursor: OpaquePointer?
        mdb_cursor_open(txn, records, &cursor)
        defer { mdb_cursor_close(cursor) }
        var key = MDB_val()
        var data = MDB_val()
        var matches = 0
        var rc = mdb_cursor_get(cursor, &key, &data, MDB_FIRST)
        while rc == 0 {
            let bits = UInt64(littleEndian: data.mv_data.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
            if Double(bitPattern: bits) >= threshold { matches += 1 }
            rc = mdb_cursor_get(cursor, &key, &data, MDB_NEXT)
        }
        return matches
    }
}

/// How a SQLite side is set up. Each SQLite scenario runs both, and its targets hold against the faster.
enum SQLiteSetup: CaseIterable {
    /// WAL and SQLite's defaults otherwise (a 2 MB page cache, `synchronous=FULL`): what an app gets that turns on
    /// WAL and nothing else.
    case defaults
    /// What a SQLite or GRDB expert sets for such work: WAL, a page cache that holds the working set
    /// (`cache_size=-262144`, 256 MB), `synchronous=NORMAL` for bulk work (FULL for a durable save), temporary
    /// tables in memory, the database file memory-mapped (`mmap_size`, 1 GB), and indexes built after a bulk load
    /// into a new table.
    case expert

    /// The system name a measurement is recorded under.
    var system: String { self == .defaults ? "SQLite" : "SQLite (expert)" }
}

/// SQLite through the C API: prepared statements, WAL, one transaction per batch, set up as `setup` says.
final class SQLiteItems {
    var db: OpaquePointer?
    let setup: SQLiteSetup
    let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// Opens (creates) the database at `path` with the `items` table; `durable` keeps `synchronous=FULL` for an
    /// expert set-up (a durable save: in WAL mode, NORMAL may lose the last commits at a power loss). The default
    /// set-up's index is made now, an expert's after the first `insert` (a bulk load into a new table).
    init(path: String, setup: SQLiteSetup = .defaults, durable: Bool = false) {
        self.setup = setup
        sqlite3_open(path, &db)
        exec("PRAGMA journal_mode=WAL")
        if setup == .expert {
            exec("PRAGMA cache_size=-262144")
            exec("PRAGMA synchronous=\(durable ? "FULL" : "NORMAL")")
            exec("PRAGMA temp_store=MEMORY")
            exec("PRAGMA mmap_size=1073741824")
        }
        exec("CREATE TABLE items (id INTEGER PRIMARY KEY, title TEXT, score INTEGER, date REAL, blob BLOB)")
        if setup == .defaults { exec("CREATE INDEX items_score ON items(score)") }
    }

    /// Makes an expert set-up's commits durable (`synchronous=FULL`) from now on, for saves measured as durable.
    func makeDurable() {
        if setup == .expert { exec("PRAGMA synchronous=FULL") }
    }

    /// Runs `body` (a bulk load) in one transaction, and builds `index` afterwards in it for an expert set-up: on a
    /// default one, `create` made it before the load.
    func load(index: String, _ body: () -> Void) {
        exec("BEGIN")
        body()
        if setup == .expert { exec("CREATE INDEX IF NOT EXISTS \(index)") }
        exec("COMMIT")
    }

    /// The plan SQLite chose for `sql` (`EXPLAIN QUERY PLAN`'s details, joined), checked to contain `expected`: a
    /// scenario measures the statement it means to, an index used where it intends one.
    func requirePlan(_ sql: String, uses expected: String) throws {
        let statement = prepare("EXPLAIN QUERY PLAN " + sql)
        defer { sqlite3_finalize(statement) }
        var details: [String] = []
        while sqlite3_step(statement) == SQLITE_ROW {
            details.append(String(cString: sqlite3_column_text(statement, 3)))
        }
        let plan = details.joined(separator: "; ")
        guard plan.contains(expected) else {
            throw BenchFailure("SQLite (\(setup.system)) plans '\(sql)' as '\(plan)', not with '\(expected)'")
        }
    }

    deinit { sqlite3_close(db) }

    func exec(_ sql: String) { sqlite3_exec(db, sql, nil, nil, nil) }

    func prepare(_ sql: String) -> OpaquePointer? {
        var statement: OpaquePointer?
        sqlite3_prepare_v2(db, sql, -1, &statement, nil)
        return statement
    }

    func insert(_ items: [ItemData]) {
        load(index: "items_score ON items(score)") {
            let statement = prepare("INSERT INTO items (id, title, score, date, blob) VALUES (?, ?, ?, ?, ?)")
            for item in items {
                sqlite3_bind_int64(statement, 1, item.id)
                sqlite3_bind_text(statement, 2, item.title, -1, transient)
                sqlite3_bind_int64(statement, 3, item.score)
                sqlite3_bind_double(statement, 4, item.date)
                item.blob.withUnsafeBytes {
                    _ = sqlite3_bind_blob(statement, 5, $0.baseAddress, Int32($0.count), transient)
                }
                sqlite3_step(statement)
                sqlite3_reset(statement)
            }
            sqlite3_finalize(statement)
        }
    }

    /// Reads every column of every row a statement returns.
    func readRows(_ statement: OpaquePointer?) -> [ItemData] {
        var rows: [ItemData] = []
        while sqlite3_step(statement) == SQLITE_ROW {
            let title = String(cString: sqlite3_column_text(statement, 1))
            let count = Int(sqlite3_column_bytes(statement, 4))
            let blob =
                count > 0 ? Array(UnsafeRawBufferPointer(start: sqlite3_column_blob(statement, 4), count: count)) : []
            rows.append(
                ItemData(
                    id: sqlite3_column_int64(statement, 0), title: title, score: sqlite3_column_int64(statement, 2),
                    date: sqlite3_column_double(statement, 3), blob: blob))
        }
        sqlite3_reset(statement)
        return rows
    }
}
