import CLMDB

/// A read transaction: one consistent snapshot of the environment.
///
/// Only valid inside the closure given to ``Environment/read(_:)`` (or ``Environment/write(_:)`` for a
/// ``WriteTransaction``); using it afterwards throws ``LMDBError/Code/misuse``. Bytes it returns borrow LMDB's
/// memory map: copy what must outlive the transaction.
public class ReadTransaction {
    /// The environment.
    public let environment: Environment
    @usableFromInline let pointer: OpaquePointer
    // The mutable state below is `@exclusivity(unchecked)`: a transaction belongs to the thread that began it, and
    // only its own methods touch these (the run-time checks ran on every get and cursor step).
    @usableFromInline @exclusivity(unchecked) var isLive = true
    /// The environment's handle generation read before the transaction began: handles published later are not
    /// visible to it.
    @usableFromInline let beginGeneration: UInt64
    /// Handles this transaction opened: private to it until it commits.
    @exclusivity(unchecked) var opened: [Database] = []
    /// Whether this transaction holds the environment's open lock (from its first open to its end).
    @exclusivity(unchecked) var holdsOpenLock = false
    /// Set when the transaction needs a handle published after it began: it is aborted and run again.
    @exclusivity(unchecked) var needsRetry = false

    init(environment: Environment, pointer: OpaquePointer, beginGeneration: UInt64) {
        self.environment = environment
        self.pointer = pointer
        self.beginGeneration = beginGeneration
    }

    /// Marks the transaction ended (after `mdb_txn_commit` or `mdb_txn_abort`); releases the open lock, publishing
    /// the handles it opened when it committed.
    func end(committed: Bool) {
        isLive = false
        if holdsOpenLock {
            holdsOpenLock = false
            environment.handles.unlock(publishing: committed ? opened : [])
        }
    }

    @usableFromInline
    func requireLive(_ what: @autoclosure () -> String) throws {
        if !isLive {
            throw LMDBError(
                code: .misuse, message: "the transaction was used after its closure returned", context: what())
        }
    }

    /// Checks that the transaction is live and can see `database`'s handle.
    @usableFromInline
    func requireUsable(_ database: Database, _ what: @autoclosure () -> String) throws {
        try requireLive(what())
        if database.generation > beginGeneration { try checkLateHandle(database, what()) }
    }

    /// A handle stamped after this transaction began: one it opened itself, or one it cannot see.
    func checkLateHandle(_ database: Database, _ what: String) throws {
        if opened.contains(where: { $0.dbi == database.dbi && $0.name == database.name }) { return }
        var published: Database? = database
        if database.generation == Database.pending {
            // A handle returned from inside the transaction that opened it: usable once that one committed.
            published = environment.handles.cached(database.name ?? "").flatMap { $0.dbi == database.dbi ? $0 : nil }
        }
        guard let published else {
            throw LMDBError(
                code: .misuse,
                message: "the handle of database \(database) comes from a transaction that did not commit",
                context: what)
        }
        guard published.generation <= beginGeneration else {
            throw LMDBError(
                code: .misuse,
                message: "the handle of database \(database) was opened after this transaction began", context: what)
        }
    }

    /// Whether this is a write transaction.
    public var isReadOnly: Bool { true }

    /// The transaction's ID: for a read, the last committed transaction it sees; for a write, the one it will be.
    /// - Throws: ``LMDBError/Code/misuse`` after the transaction ended.
    public var id: Int {
        get throws {
            try requireLive("reading the transaction ID")
            return mdb_txn_id(pointer)
        }
    }

    /// Opens a named database inside this transaction.
    ///
    /// A handle opened here is private to the transaction until it commits (LMDB closes it when the transaction
    /// aborts). Opening is serialised in the process: the first open of a transaction waits for any other
    /// transaction that opened databases to end. When the handle was published by another transaction since this
    /// one began, this transaction cannot see it: it is aborted and its closure runs again, as after a map resize.
    ///
    /// A named database's keys (and a DUPSORT database's values) sort as their bytes, unsigned, a key before its
    /// extensions: LMDB's default order, computed eight bytes at a time (CLMDB's `entitystore_compare_bytes`). The
    /// files are the same as with LMDB's own comparison, so other LMDB programs read and write them.
    ///
    /// - Parameters:
    ///   - name: The database's name, or `nil` for the main database.
    ///   - dupSort: Whether keys hold several sorted values. Must match how the database was created.
    ///   - create: Create the database when missing (write transactions only).
    public func openDatabase(_ name: String?, dupSort: Bool = false, create: Bool = false) throws -> Database {
        try requireLive("opening database \(name ?? "main")")
        guard let name else {
            // The main database always exists; opening it touches no handle slot.
            guard !dupSort else {
                throw LMDBError(
                    code: .incompatible, message: "the main database is not DUPSORT",
                    context: "opening the main database")
            }
            var dbi: MDB_dbi = 0
            FaultDiagnostics.noteMain()
            try check(mdb_dbi_open(pointer, nil, 0, &dbi), "mdb_dbi_open of the main database")
            return Database(dbi: dbi, name: nil, isDupSort: false)
        }
        if let known = try knownDatabase(name, dupSort: dupSort) { return known }
        if create && isReadOnly {
            throw LMDBError(
                code: .readOnly, message: "cannot create a database in a read transaction",
                context: "opening database '\(name)'")
        }
        try takeOpenLock("opening database '\(name)'")
        var flags: UInt32 = 0
        if dupSort { flags |= UInt32(MDB_DUPSORT) }
        if create { flags |= UInt32(MDB_CREATE) }
        var dbi: MDB_dbi = 0
        FaultDiagnostics.noteMain()
        let rc = mdb_dbi_open(pointer, name, flags, &dbi)
        if rc == MDB_NOTFOUND {
            throw LMDBError(
                code: .databaseNotFound, message: "database '\(name)' does not exist", context: environment.path)
        }
        if rc == MDB_INCOMPATIBLE {
            throw LMDBError(
                code: .incompatible,
                message:
                    "database '\(name)' exists with other flags (DUPSORT \(dupSort ? "expected" : "not expected"))",
                context: environment.path)
        }
        try check(rc, "mdb_dbi_open '\(name)'")
        try useFastComparison(dbi, dupSort: dupSort, name: name)
        let database = Database(dbi: dbi, name: name, isDupSort: dupSort, generation: Database.pending)
        opened.append(database)
        return database
    }

    /// Sets LMDB's comparisons of a named database's keys (and values, for DUPSORT) to
    /// `entitystore_compare_bytes`, which orders exactly as LMDB's default does, eight bytes at a time. The setting is
    /// the environment's for as long as the handle stays open, so it is made once, when the handle is opened, before
    /// any read or write of the database.
    func useFastComparison(_ dbi: MDB_dbi, dupSort: Bool, name: String) throws {
        try check(mdb_set_compare(pointer, dbi, entitystore_compare_bytes), "mdb_set_compare '\(name)'")
        if dupSort {
            try check(mdb_set_dupsort(pointer, dbi, entitystore_compare_bytes), "mdb_set_dupsort '\(name)'")
        }
    }

    /// Takes the environment's open lock for the rest of this transaction, once; a handle published meanwhile makes
    /// the transaction run again.
    func takeOpenLock(_ what: @autoclosure () -> String) throws {
        guard !holdsOpenLock else { return }
        try environment.handles.lockForOpening(what())
        holdsOpenLock = true
        // Another transaction may have published handles while this one waited: none of them is visible here.
        if environment.handles.generation.load(ordering: .sequentiallyConsistent) > beginGeneration {
            needsRetry = true
            throw HandleRetry()
        }
    }

    /// A handle this transaction can use without opening it: one it opened, or a cached one published before it
    /// began (a later one makes the transaction run again).
    func knownDatabase(_ name: String, dupSort: Bool) throws -> Database? {
        if let mine = opened.last(where: { $0.name == name }) { return try checkFlags(mine, dupSort: dupSort) }
        guard let cached = environment.handles.cached(name) else { return nil }
        guard cached.generation <= beginGeneration else {
            needsRetry = true
            throw HandleRetry()
        }
        return try checkFlags(cached, dupSort: dupSort)
    }

    func checkFlags(_ database: Database, dupSort: Bool) throws -> Database {
        guard database.isDupSort == dupSort else {
            throw LMDBError(
                code: .incompatible, message: "database \(database) is \(database.isDupSort ? "" : "not ")DUPSORT",
                context: "opening database \(database)")
        }
        return database
    }

    /// The value stored under `key`, borrowed from the map; `nil` when the key is absent.
    ///
    /// For a DUPSORT database, the first (smallest) value of the key.
    public func get(_ key: UnsafeRawBufferPointer, in database: Database) throws -> UnsafeRawBufferPointer? {
        try requireUsable(database, "get in database \(database)")
        try environment.checkKey(key, "get in database \(database)")
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val()
        FaultDiagnostics.note(database)
        let rc = mdb_get(pointer, database.dbi, &keyValue, &data)
        if rc == MDB_NOTFOUND { return nil }
        try check(rc, "mdb_get in database \(database)")
        return UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size)
    }

    /// The value stored under `key`, borrowed from the map.
    @inlinable
    public func get(_ key: [UInt8], in database: Database) throws -> UnsafeRawBufferPointer? {
        try key.withUnsafeBytes { try get($0, in: database) }
    }

    /// The value stored under an 8-byte big-endian integer key, borrowed from the map.
    @inlinable
    public func get(_ key: UInt64, in database: Database) throws -> UnsafeRawBufferPointer? {
        try withUnsafeBytes(of: key.bigEndian) { try get($0, in: database) }
    }

    /// The statistics of one database (`mdb_stat`).
    public func statistics(_ database: Database) throws -> DatabaseStatistics {
        try requireUsable(database, "statistics of database \(database)")
        var raw = MDB_stat()
        try check(mdb_stat(pointer, database.dbi, &raw), "mdb_stat of database \(database)")
        return DatabaseStatistics(raw)
    }

    /// The pages LMDB keeps for reuse, as `mdb_stat -f` counts them: the free-list's entries (one per transaction
    /// that freed pages) and the pages they list.
    public func freePages() throws -> (entries: Int, pages: Int) {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(pointer, 0, &cursor), "mdb_cursor_open on the free list")  // FREE_DBI is 0
        defer { mdb_cursor_close(cursor) }
        var key = MDB_val()
        var data = MDB_val()
        var entries = 0
        var pages = 0
        var rc = mdb_cursor_get(cursor, &key, &data, MDB_FIRST)
        while rc == MDB_SUCCESS {
            // An entry's value is an array of page numbers whose first element is their count.
            guard data.mv_size >= MemoryLayout<Int>.size, let base = data.mv_data else {
                throw LMDBError(code: .corrupted, message: "a free-list entry is too short", context: "free pages")
            }
            entries += 1
            pages += base.loadUnaligned(as: Int.self)
            rc = mdb_cursor_get(cursor, &key, &data, MDB_NEXT)
        }
        guard rc == MDB_NOTFOUND else { throw LMDBError(lmdbCode: rc, context: "reading the free list") }
        return (entries, pages)
    }

    /// The names of the named databases in the environment (the keys of the main database).
    public func databaseNames() throws -> [String] {
        let main = try openDatabase(nil)
        var names: [String] = []
        try forEach(in: main) { key, _ in
            names.append(String(decoding: key, as: UTF8.self))
            return .continue
        }
        return names
    }

    /// ``Environment/releaseResidentPages()`` from inside a transaction (which keeps the map in place): the pages of
    /// the map this process read so far leave its resident memory; what the transaction wrote is its own memory and
    /// stays. A transaction that reads the whole store (a migration's last step) calls it as it goes.
    public func releaseResidentPages() {
        environment.unguardedReleaseResidentPages()
    }

    /// Runs `body` with a cursor on `database`; the cursor is closed when `body` returns.
    public func withCursor<R>(on database: Database, _ body: (Cursor) throws -> R) throws -> R {
        try requireUsable(database, "cursor on database \(database)")
        var cursorPointer: OpaquePointer?
        FaultDiagnostics.note(database)
        try check(mdb_cursor_open(pointer, database.dbi, &cursorPointer), "mdb_cursor_open on database \(database)")
        let cursor = Cursor(pointer: cursorPointer!, database: database, environment: environment)
        defer {
            cursor.isLive = false
            mdb_cursor_close(cursorPointer)
        }
        return try body(cursor)
    }

    /// Visits the entries of `database` in `range`, in key order (or in reverse), until `body` says stop.
    ///
    /// In a DUPSORT database every key/value pair is visited, values of one key in their sorted order.
    ///
    /// <!-- snippet
    /// let env = try Environment.open(path: "numbers.mdb")
    /// let index = try env.openDatabase("index")
    /// try env.read { txn in
    /// <snippet>
    /// }
    /// -->
    /// ```swift
    /// try txn.forEach(in: index, range: .prefix(Array("ab".utf8))) { key, value in
    ///     print(Array(key)); return .continue
    /// }
    /// ```
    public func forEach(
        in database: Database, range: KeyRange = .all, reverse: Bool = false,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> IterationControl
    ) throws {
        try withCursor(on: database) { cursor in
            var entry = reverse ? try cursor.positionAtEnd(of: range) : try cursor.positionAtStart(of: range)
            while let (key, value) = entry {
                if reverse ? !range.allows(lowerSideOf: key) : !range.allows(upperSideOf: key) { return }
                if try body(key, value) == .stop { return }
                entry = reverse ? try cursor.previous() : try cursor.next()
            }
        }
    }
}

extension ReadTransaction {
    /// Visits every entry of `database` in key order (descending with `reverse`) until `body` says stop:
    /// ``forEach(in:range:reverse:_:)`` over the whole database, in one loop over `mdb_cursor_get` (the scan path of
    /// fetches: no range checks and no cursor wrapper per entry).
    public func forEachEntry(
        in database: Database, reverse: Bool = false,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> IterationControl
    ) throws {
        try withCursor(on: database) { cursor in
            var key = MDB_val(mv_size: 0, mv_data: nil)
            var value = MDB_val(mv_size: 0, mv_data: nil)
            var op = reverse ? MDB_LAST : MDB_FIRST
            while true {
                let rc = mdb_cursor_get(cursor.pointer, &key, &value, op)
                if rc == MDB_NOTFOUND { return }
                try check(rc, "mdb_cursor_get on database \(database)")
                let control = try body(
                    UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size),
                    UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size))
                if control == .stop { return }
                op = reverse ? MDB_PREV : MDB_NEXT
            }
        }
    }
}

/// Whether an iteration goes on.
public enum IterationControl: Sendable {
    /// Visit the next entry.
    case `continue`
    /// Stop the iteration.
    case stop
}

/// A write transaction: a ``ReadTransaction`` that can also put and delete.
public final class WriteTransaction: ReadTransaction {
    var sawMapFull = false
    /// Databases dropped in this transaction: their cached handles are closed and must be opened again.
    var dropped: Set<String> = []

    /// The cursors ``putCursor(on:)`` opened, at most one per database.
    @exclusivity(unchecked) var putCursors: [PutCursor] = []

    /// Always `false`.
    override public var isReadOnly: Bool { false }

    override func end(committed: Bool) {
        // LMDB frees a write transaction's cursors when it commits or aborts.
        closePutCursors { _ in true }
        super.end(committed: committed)
    }

    /// Marks the put cursors that `which` picks unusable (their database dropped, or the transaction ended).
    private func closePutCursors(_ which: (PutCursor) -> Bool) {
        for cursor in putCursors where which(cursor) { cursor.isLive = false }
        putCursors.removeAll(where: which)
    }

    /// A database dropped in this transaction must be opened again.
    override func knownDatabase(_ name: String, dupSort: Bool) throws -> Database? {
        if dropped.contains(name) && !opened.contains(where: { $0.name == name }) { return nil }
        return try super.knownDatabase(name, dupSort: dupSort)
    }

    @usableFromInline
    func fail(_ rc: Int32, _ what: @autoclosure () -> String) throws {
        if rc == MDB_MAP_FULL { sawMapFull = true }
        try check(rc, what())
    }

    /// Stores `value` under `key`.
    ///
    /// - Throws: ``LMDBError/Code/badValueSize`` for an empty key or one longer than ``Environment/maxKeySize``
    ///   (and for such a value in a DUPSORT database); ``LMDBError/Code/keyExists`` under `.noOverwrite` or
    ///   `.noDuplicateData`.
    public func put(
        _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, in database: Database, flags: PutFlags = []
    ) throws {
        try requireUsable(database, "put in database \(database)")
        try environment.checkPut(key, value, in: database)
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        let rc = environment.injectedFault() ?? mdb_put(pointer, database.dbi, &keyValue, &data, flags.rawValue)
        try fail(rc, "mdb_put in database \(database)")
    }

    /// Stores the pair unless it is there: `.noDuplicateData` in a DUPSORT database, `.noOverwrite` (the key) in
    /// another. Finding it there is an answer, not a failure: no error is made for it.
    ///
    /// - Returns: Whether the pair was stored (false: it was there already).
    /// - Throws: As ``put(_:_:in:flags:)-(UnsafeRawBufferPointer,_,_,_)`` does, but never ``LMDBError/Code/keyExists``.
    public func insert(
        _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, in database: Database
    ) throws
        -> Bool
    {
        try requireUsable(database, "put in database \(database)")
        try environment.checkPut(key, value, in: database)
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        let flags: PutFlags = database.isDupSort ? .noDuplicateData : .noOverwrite
        let rc = environment.injectedFault() ?? mdb_put(pointer, database.dbi, &keyValue, &data, flags.rawValue)
        if rc == MDB_KEYEXIST { return false }
        try fail(rc, "mdb_put in database \(database)")
        return true
    }

    /// Stores `value` under `key`.
    @inlinable
    public func put(_ key: [UInt8], _ value: [UInt8], in database: Database, flags: PutFlags = []) throws {
        try key.withUnsafeBytes { k in try value.withUnsafeBytes { v in try put(k, v, in: database, flags: flags) } }
    }

    /// Stores `value` under an 8-byte big-endian integer key.
    @inlinable
    public func put(
        _ key: UInt64, _ value: UnsafeRawBufferPointer, in database: Database, flags: PutFlags = []
    )
        throws
    {
        try withUnsafeBytes(of: key.bigEndian) { try put($0, value, in: database, flags: flags) }
    }

    /// The transaction's cursor for putting into `database`, opened on first use and valid until the transaction
    /// ends (LMDB closes a write transaction's cursors with it).
    ///
    /// For runs of puts in key order, or of appends: LMDB first looks for a put's place on the page the cursor is
    /// on, so each put lands next to the one before without searching the tree from its root (what
    /// ``put(_:_:in:flags:)-(UnsafeRawBufferPointer,_,_,_)`` does for every put).
    ///
    /// <!-- snippet
    /// let env = try Environment.open(path: "numbers.mdb")
    /// let index = try env.openDatabase("index")
    /// let sortedEntries = [(Array("a".utf8), Array("1".utf8))]
    /// try env.write { txn in
    /// <snippet>
    /// }
    /// -->
    /// ```swift
    /// let cursor = try txn.putCursor(on: index)
    /// for (key, value) in sortedEntries { try cursor.put(key, value) }
    /// ```
    public func putCursor(on database: Database) throws -> PutCursor {
        try requireUsable(database, "cursor on database \(database)")
        if let open = putCursors.first(where: { $0.database.dbi == database.dbi }) { return open }
        var cursorPointer: OpaquePointer?
        FaultDiagnostics.note(database)
        try fail(mdb_cursor_open(pointer, database.dbi, &cursorPointer), "mdb_cursor_open on database \(database)")
        let cursor = PutCursor(pointer: cursorPointer!, database: database, transaction: self)
        putCursors.append(cursor)
        return cursor
    }

    /// Reserves `count` bytes under `key` and lets `body` write them in place (`MDB_RESERVE`): no copy.
    ///
    /// Not for DUPSORT databases.
    public func put(
        _ key: UnsafeRawBufferPointer, reserving count: Int, in database: Database, flags: PutFlags = [],
        _ body: (UnsafeMutableRawBufferPointer) throws -> Void
    ) throws {
        try requireUsable(database, "put in database \(database)")
        try environment.checkKey(key, "put in database \(database)")
        guard !database.isDupSort else {
            throw LMDBError(
                code: .invalidArgument, message: "MDB_RESERVE cannot be used in a DUPSORT database",
                context: "put in database \(database)")
        }
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val(mv_size: count, mv_data: nil)
        try fail(
            environment.injectedFault()
                ?? mdb_put(pointer, database.dbi, &keyValue, &data, flags.rawValue | UInt32(MDB_RESERVE)),
            "mdb_put (reserve) in database \(database)")
        try body(UnsafeMutableRawBufferPointer(start: data.mv_data, count: count))
    }

    /// Deletes `key` (and, in a DUPSORT database, all its values).
    /// - Returns: Whether the key was there.
    @discardableResult
    public func delete(_ key: UnsafeRawBufferPointer, in database: Database) throws -> Bool {
        try delete(key, value: nil, in: database)
    }

    /// Deletes one key/value pair of a DUPSORT database (or `key` when `value` is nil).
    /// - Returns: Whether it was there.
    @discardableResult
    public func delete(
        _ key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?, in database: Database
    ) throws
        -> Bool
    {
        try requireUsable(database, "delete in database \(database)")
        try environment.checkKey(key, "delete in database \(database)")
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        let rc: Int32
        if let injected = environment.injectedFault() {
            rc = injected
        } else if let value {
            var data = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
            rc = mdb_del(pointer, database.dbi, &keyValue, &data)
        } else {
            rc = mdb_del(pointer, database.dbi, &keyValue, nil)
        }
        if rc == MDB_NOTFOUND { return false }
        try fail(rc, "mdb_del in database \(database)")
        return true
    }

    /// Deletes `key`.
    @discardableResult @inlinable
    public func delete(_ key: [UInt8], in database: Database) throws -> Bool {
        try key.withUnsafeBytes { try delete($0, in: database) }
    }

    /// Deletes one key/value pair of a DUPSORT database.
    @discardableResult @inlinable
    public func delete(_ key: [UInt8], value: [UInt8], in database: Database) throws -> Bool {
        try key.withUnsafeBytes { k in try value.withUnsafeBytes { v in try delete(k, value: v, in: database) } }
    }

    /// Deletes an 8-byte big-endian integer key.
    @discardableResult @inlinable
    public func delete(_ key: UInt64, in database: Database) throws -> Bool {
        try withUnsafeBytes(of: key.bigEndian) { try delete($0, in: database) }
    }

    /// Deletes `database` and everything in it. The handle is closed when the transaction commits.
    public func drop(_ database: Database) throws {
        try requireUsable(database, "dropping database \(database)")
        // mdb_drop closes the handle at once, even if the transaction then aborts: it changes the handle table, so it
        // holds the open lock like an open, and the handle leaves the cache now.
        try takeOpenLock("dropping database \(database)")
        try fail(
            environment.injectedFault() ?? mdb_drop(pointer, database.dbi, 1),
            "mdb_drop (delete) of database \(database)")
        opened.removeAll { $0.name == database.name }
        closePutCursors { $0.database.dbi == database.dbi }
        environment.handles.forget(database.name)
        if let name = database.name { dropped.insert(name) }
    }

    /// Removes every entry of `database`, keeping the database.
    public func empty(_ database: Database) throws {
        try requireUsable(database, "emptying database \(database)")
        try fail(
            environment.injectedFault() ?? mdb_drop(pointer, database.dbi, 0),
            "mdb_drop (empty) of database \(database)")
    }
}

extension Environment {
    /// Checks a put's key, and its value in a DUPSORT database (values there are keys of a sub-database).
    func checkPut(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, in database: Database) throws {
        try checkKey(key, "put in database \(database)")
        if database.isDupSort && value.count > maxKeySize {
            throw LMDBError(
                code: .badValueSize,
                message: "a value of \(value.count) bytes exceeds LMDB's limit of \(maxKeySize) bytes"
                    + " for DUPSORT values",
                context: "put in database \(database)")
        }
    }

    @usableFromInline
    func checkKey(_ key: UnsafeRawBufferPointer, _ what: @autoclosure () -> String) throws {
        if key.isEmpty {
            throw LMDBError(code: .badValueSize, message: "an empty key is not allowed", context: what())
        }
        if key.count > maxKeySize {
            throw LMDBError(
                code: .badValueSize,
                message: "a key of \(key.count) bytes exceeds LMDB's limit of \(maxKeySize) bytes", context: what())
        }
    }
}
