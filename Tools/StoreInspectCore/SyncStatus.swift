import EntityStore
import EntityStoreSync
import Foundation

extension Runner {
    /// The sync state kept in the store (by the sync engine; `sync-state.json` beside it for versions before)
    /// and what the history holds that is not pushed yet. Reads nothing from the server: it works offline, as the
    /// store does.
    func syncStatus() throws {
        let state: SyncState?
        do {
            state = try SyncState.read(from: store) ?? SyncState.read(storeDirectory: invocation.store)
        } catch let error as SyncError {
            throw CommandFailure(code: ExitCode.corruptData, message: error.message)
        }
        guard let state else {
            return emitProperties([
                ("synced", .bool(false)),
                ("note", .text("this store has never synced (it holds no sync state)")),
            ])
        }
        let entries = try store.history(since: state.pushedThrough)
        let pending = entries.filter { !SyncEngine.isRemote($0) }
        func date(_ value: Date?) -> Cell { value.map { .text($0.formatted(.iso8601)) } ?? .null }
        // Exactly as the file holds it, past Int64.max too (a damaged or foreign file).
        func number(_ value: UInt64) -> Cell { Int64(exactly: value).map(Cell.int) ?? .text("\(value)") }
        emitProperties([
            ("synced", .bool(true)),
            ("zone", .text(state.zone)),
            ("store id", .text(state.storeID.uuidString)),
            ("origin id", .text(state.originID.uuidString)),
            ("former store ids", .text(state.formerStoreIDs.map(\.uuidString).joined(separator: " "))),
            ("own objects from", state.ownObjectsFrom.map { number($0) } ?? .null),
            ("pushed through", number(state.pushedThrough)),
            ("last saved transaction", number(try store.lastTransaction())),
            ("entries not pushed", .int(Int64(pending.count))),
            ("changes not pushed", .int(Int64(pending.reduce(0) { $0 + $1.changes.count }))),
            ("pulled through", .int(state.pulledThrough)),
            (
                "clock",
                .text(
                    state.clock == 0
                        ? "0" : "\(state.clock) (\(HybridLogicalClock.date(of: state.clock).formatted(.iso8601)))")
            ),
            ("objects to pull again", .int(Int64(state.refetch.count))),
            ("deletes to push", .int(Int64(state.pendingTombstones.count))),
            ("last push", date(state.lastPush)),
            ("last pull", date(state.lastPull)),
            ("last error", state.lastError.map { .text($0) } ?? .null),
        ])
    }
}
