import Foundation
import LMDB
import Synchronization

/// What a store did, as told to a tracer (``PersistentStore/trace(_:_:)``): the developer's view of a slow screen,
/// as GRDB's `trace` or Core Data's `-com.apple.CoreData.SQLDebug`.
public enum TraceEvent: Sendable, CustomStringConvertible {
    /// A context's fetch (objects, IDs, dictionaries or a count).
    case fetch(FetchTrace)
    /// A context's save that wrote.
    case save(SaveTrace)
    /// A context's merge of other saves (another context's, another process's).
    case merge(MergeTrace)
    /// A fetched-results controller's batch.
    case batch(BatchTrace)

    public var description: String {
        switch self {
        case .fetch(let trace): trace.description
        case .save(let trace): trace.description
        case .merge(let trace): trace.description
        case .batch(let trace): trace.description
        }
    }
}

/// A fetch: what was asked, the plan it ran with, what it read and returned, and how long it took.
public struct FetchTrace: Sendable, CustomStringConvertible {
    /// The context's name, if it has one.
    public var context: String?
    /// The entity fetched.
    public var entity: String
    /// The predicate as text (`nil`: every object).
    public var predicate: String?
    /// The sort keys as text (`-key` for descending).
    public var sortKeys: [String]
    /// The plan it ran with (the description of the plan `explain` gives for the request).
    public var plan: String
    /// The stored records read (each record the scan or the index ranges reached, matching or not).
    public var recordsRead: Int
    /// The objects (IDs, dictionaries, or matches counted) it returned.
    public var returned: Int
    /// How long the fetch took, its read transaction included.
    public var seconds: Double

    public var description: String {
        var text = "fetch \(entity)"
        if let predicate { text += " where \(predicate)" }
        if !sortKeys.isEmpty { text += " sorted by \(sortKeys.joined(separator: ", "))" }
        return text
            + String(
                format: ": %d returned, %d records read, %.3f ms (%@)%@", returned, recordsRead, seconds * 1_000, plan,
                context.map { " in \($0)" } ?? "")
    }
}

/// A save: what it changed, what the commit wrote, and how long it took.
public struct SaveTrace: Sendable, CustomStringConvertible {
    /// The context's name, if it has one.
    public var context: String?
    /// The objects the save inserted.
    public var inserted: Int
    /// The objects the save updated.
    public var updated: Int
    /// The objects the save deleted (its delete rules' included).
    public var deleted: Int
    /// The bytes the commit wrote to the store's files (pages and the meta page), as the kernel counted the
    /// committing thread's writes; 0 where the system does not count them (no `/proc/thread-self/io`).
    public var bytesWritten: Int
    /// ``bytesWritten`` in pages of the store.
    public var pagesWritten: Int
    /// The write transaction: the records, indexes and history written, and the commit with its sync.
    public var commitSeconds: Double
    /// The whole save (delete rules, validation, the transaction, the delivery of its changes).
    public var seconds: Double

    public var description: String {
        String(
            format:
                "save: %d inserted, %d updated, %d deleted; %d pages (%d bytes) written; commit %.3f ms of %.3f ms%@",
            inserted, updated, deleted, pagesWritten, bytesWritten, commitSeconds * 1_000, seconds * 1_000,
            context.map { " in \($0)" } ?? "")
    }
}

/// A merge of other saves into a context.
public struct MergeTrace: Sendable, CustomStringConvertible {
    /// The merging context's name, if it has one.
    public var context: String?
    /// The store's transaction merged (`nil` for another context's save in this process, before its number).
    public var transaction: UInt64?
    /// The object changes merged.
    public var changes: Int
    /// How long the merge took, its delivery to the context's observers and controllers included.
    public var seconds: Double

    public var description: String {
        String(
            format: "merge of %@: %d changes, %.3f ms%@", transaction.map { "transaction \($0)" } ?? "a save", changes,
            seconds * 1_000, context.map { " in \($0)" } ?? "")
    }
}

/// A fetched-results controller's batch: the rows it recomputed, the changes it delivered, and how long both took.
public struct BatchTrace: Sendable, CustomStringConvertible {
    /// The entity of the controller's request.
    public var entity: String
    /// The controller's rows the changes touched.
    public var rowsTouched: Int
    /// How long computing and delivering the batch took, the delegate's calls included.
    public var seconds: Double

    public var description: String {
        String(format: "batch of %@: %d rows touched, %.3f ms", entity, rowsTouched, seconds * 1_000)
    }
}

/// Which events a tracer hears.
public struct TraceOptions: OptionSet, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Each fetch (``FetchTrace``).
    public static let fetches = TraceOptions(rawValue: 1)
    /// Each save that writes (``SaveTrace``).
    public static let saves = TraceOptions(rawValue: 2)
    /// Each merge of other saves (``MergeTrace``).
    public static let merges = TraceOptions(rawValue: 4)
    /// Each controller batch (``BatchTrace``).
    public static let batches = TraceOptions(rawValue: 8)
    /// Everything.
    public static let all: TraceOptions = [.fetches, .saves, .merges, .batches]
}

/// Ends a tracer (``PersistentStore/trace(_:_:)``); a released token ends it too.
public final class TraceToken: Sendable {
    private let end: @Sendable () -> Void
    private let ended = Atomic<Bool>(false)

    init(_ end: @escaping @Sendable () -> Void) { self.end = end }

    /// Stops the tracer: no event reaches it after this returns.
    public func cancel() {
        if !ended.exchange(true, ordering: .relaxed) { end() }
    }

    deinit { cancel() }
}

/// A store's tracers. With none, a traced path costs one relaxed atomic load.
final class Tracers: Sendable {
    private let on = Atomic<UInt8>(0)
    private let handlers = Locked<[UInt64: (TraceOptions, @Sendable (TraceEvent) -> Void)]>([:])
    private let next = Atomic<UInt64>(0)

    /// Whether any tracer hears `kind`.
    @inline(__always)
    func wants(_ kind: TraceOptions) -> Bool { on.load(ordering: .relaxed) & kind.rawValue != 0 }

    func add(_ options: TraceOptions, _ handler: @escaping @Sendable (TraceEvent) -> Void) -> UInt64 {
        let id = next.add(1, ordering: .relaxed).newValue
        handlers.withLock { handlers in
            handlers[id] = (options, handler)
            on.store(handlers.values.reduce(0) { $0 | $1.0.rawValue }, ordering: .relaxed)
        }
        return id
    }

    func remove(_ id: UInt64) {
        handlers.withLock { handlers in
            handlers[id] = nil
            on.store(handlers.values.reduce(0) { $0 | $1.0.rawValue }, ordering: .relaxed)
        }
    }

    func emit(_ kind: TraceOptions, _ event: @autoclosure () -> TraceEvent) {
        let listeners = handlers.withLock { $0.values.filter { $0.0.contains(kind) }.map(\.1) }
        guard !listeners.isEmpty else { return }
        let event = event()
        for listener in listeners { listener(event) }
    }

    /// Seconds on a monotonic clock, for spans.
    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// The bytes the calling thread has written through system calls (`wchar` of `/proc/thread-self/io`); nil where
    /// the system does not say.
    static func threadBytesWritten() -> Int? {
        let descriptor = open("/proc/thread-self/io", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 512)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[..<count], as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix("wchar:") {
            return Int(line.dropFirst(6).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }
}

extension PersistentStore {
    /// Calls `handler` with what the store's contexts and controllers do, on the thread that does it: each fetch
    /// (its plan, the records it read, what it returned, its time), each save that writes (its changes, the pages
    /// and bytes its commit wrote, the commit's time with its sync), each merge of other saves, and each
    /// controller batch. Until the token is cancelled or released. With no tracer the store pays one relaxed
    /// atomic load per fetch, save, merge and batch (S1 and S3 of the benchmarks are unchanged).
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// -->
    /// ```swift
    /// let token = store.trace([.fetches, .saves]) { event in print(event) }
    /// _ = try context.fetch(Book.self, where: \Book.pages > 300)
    /// // fetch Book where pages > 300: 12 returned, 12 records read, 0.043 ms (index Book.pages: pages > 300 ...)
    /// token.cancel()
    /// ```
    public func trace(
        _ options: TraceOptions = .all, _ handler: @escaping @Sendable (TraceEvent) -> Void
    ) -> TraceToken {
        let tracers = self.tracers
        let id = tracers.add(options, handler)
        return TraceToken { tracers.remove(id) }
    }
}
