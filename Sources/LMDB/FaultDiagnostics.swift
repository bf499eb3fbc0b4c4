/// What a tool's fault handler can name when LMDB faults on a damaged page: the database last entered.
///
/// Off by default (the library's own users pay one predictable branch per read). A tool that installs a fault
/// handler (store-inspect) turns it on: each `get` and each cursor then notes its database's handle number, and the
/// handler names it from a table the tool prepared (``Environment/databaseNumbers()``). The notes are plain stores
/// to a global, read only by a handler that then ends the process. Neither global is checked for exclusive access
/// (`@exclusivity(unchecked)`): the run-time check cost a call per read, more than the rest of a `get`'s Swift side.
public enum FaultDiagnostics {
    /// Whether reads note their database.
    @exclusivity(unchecked) nonisolated(unsafe) public static var isEnabled = false
    /// The handle number of the database a read last entered (`UInt32.max` before any).
    @exclusivity(unchecked) nonisolated(unsafe) public static var lastDatabase = UInt32.max

    @inline(__always)
    static func note(_ database: Database) {
        if isEnabled { lastDatabase = database.dbi }
    }

    /// Notes the main database (handle 1, the catalog of named databases), which opening a database reads.
    @inline(__always)
    static func noteMain() {
        if isEnabled { lastDatabase = 1 }
    }
}

extension Environment {
    /// The handle number of every database opened so far, with its name, for ``FaultDiagnostics``.
    public func databaseNumbers() -> [(number: UInt32, name: String)] {
        handles.state.withLock { state in state.cache.values.map { ($0.dbi, $0.name ?? "(main)") } }
    }
}
