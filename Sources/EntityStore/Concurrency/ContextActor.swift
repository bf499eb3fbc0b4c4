import Foundation

/// An actor that owns an ``ObjectContext`` and runs on that context's own thread: the long-lived importer or
/// syncer of an app, like SwiftData's `@ModelActor`.
///
/// <!-- snippet
/// uses: library
/// let store = try openLibrary()
/// let context = ObjectContext(store: store)
/// -->
/// ```swift
/// actor Importer: ContextActor {
///     nonisolated let contextExecutor: ContextExecutor
///     init(store: PersistentStore) { contextExecutor = ContextExecutor(store: store, name: "importer") }
///
///     func importBooks(_ titles: [String]) throws -> [ObjectID] {
///         let books = try titles.map { title in
///             let book = try context.insert(Book.self)
///             book.title = title
///             return book
///         }
///         try context.save()
///         return books.map(\.objectID)
///     }
/// }
/// let ids = try await Importer(store: store).importBooks(["Dune", "Emma"])
/// ```
///
/// The actor's methods run one at a time on the executor's thread, never on Swift's cooperative pool, so a durable
/// save (an `fsync`) blocks no other task. Its context merges every save of other contexts and processes on its own
/// (``ObjectContext/automaticallyMergesChangesFromStore`` is on): a merge runs on the actor between its jobs, so a
/// controller on the context is told about it there.
///
/// The context is reached only inside the actor (``context``): it, its objects and models stay in the actor, what
/// leaves is object IDs, change records and ``ModelSnapshot`` values.
public protocol ContextActor: Actor {
    /// The executor that owns the actor's context and thread. Store it in a `nonisolated let`.
    nonisolated var contextExecutor: ContextExecutor { get }
}

extension ContextActor {
    /// The actor runs on its context's executor.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { contextExecutor.asUnownedSerialExecutor() }

    /// The actor's context.
    public var context: ObjectContext { contextExecutor.context }

    /// The actor's store.
    public nonisolated var store: PersistentStore { contextExecutor.store }
}

/// The serial executor of a ``ContextActor``: one thread that runs the actor's jobs and its context's automatic
/// merges, and the context itself.
///
/// The thread ends when the executor is released (with the last reference to its actor).
public final class ContextExecutor: SerialExecutor, @unchecked Sendable {
    // @unchecked Sendable: `context` is touched only on the executor's thread (by the actor's jobs and the merges
    // enqueued here), or before the first job is enqueued; the queue is guarded by its condition's lock.
    /// The store the context works on.
    public let store: PersistentStore
    /// The context, confined to the executor's thread.
    nonisolated(unsafe) let context: ObjectContext
    private let queue: JobQueue

    /// An executor with a new context on `store` (named `name` in its saves), which merges the store's changes.
    public init(store: PersistentStore, name: String? = nil) {
        self.store = store
        let context = ObjectContext(store: store, name: name, isolation: nil)
        self.context = context
        queue = JobQueue(name: "EntityStore.ContextExecutor \(name ?? "")")
        queue.executor = asUnownedSerialExecutor()
        let queue = self.queue
        let reference = ContextReference(context)
        context.startMerging { [weak queue] in
            queue?.enqueue(.closure({ reference.context?.mergeWhenWoken() }))
        }
        // Its changes are processed at the end of each job, as a context made on an actor does.
        context.turnQueue = { [weak queue] work in queue?.enqueue(.closure(work)) }
        context.turn = .armed
    }

    deinit { queue.shutDown() }

    /// Runs a job of the actor on the executor's thread.
    public func enqueue(_ job: consuming ExecutorJob) {
        queue.enqueue(.job(UnownedJob(job)))
    }

    /// The executor, unowned, for the actor.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Whether the caller runs on the executor's thread.
    var isCurrent: Bool { queue.isCurrent }

    /// Stops the program unless it runs on the executor's thread (for `assumeIsolated`).
    public func checkIsolated() {
        precondition(queue.isCurrent, "not on the ContextExecutor's thread")
    }
}

/// The jobs of a ``ContextExecutor`` and the thread that runs them.
final class JobQueue: @unchecked Sendable {
    // @unchecked Sendable: `jobs`, `isShutDown` and `thread` are guarded by `condition`; `executor` is set once
    // before the first job.
    enum Job {
        case job(UnownedJob)
        case closure(@Sendable () -> Void)
    }

    private let condition = NSCondition()
    private var jobs: [Job] = []
    private var isShutDown = false
    private var threadID: pthread_t?
    nonisolated(unsafe) var executor: UnownedSerialExecutor?

    init(name: String) {
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.start()
    }

    var isCurrent: Bool {
        condition.lock()
        defer { condition.unlock() }
        return threadID.map { pthread_equal($0, pthread_self()) != 0 } ?? false
    }

    func enqueue(_ job: Job) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    func shutDown() {
        condition.lock()
        isShutDown = true
        condition.signal()
        condition.unlock()
    }

    private func run() {
        condition.lock()
        threadID = pthread_self()
        while true {
            while jobs.isEmpty && !isShutDown { condition.wait() }
            if jobs.isEmpty { break }
            let batch = jobs
            jobs = []
            condition.unlock()
            for job in batch {
                switch job {
                case .job(let job): job.runSynchronously(on: executor!)
                case .closure(let body): body()
                }
            }
            condition.lock()
        }
        condition.unlock()
    }
}

/// A weak reference to a context, for work enqueued where the context lives.
struct ContextReference: @unchecked Sendable {
    // @unchecked Sendable: the context is only used by work that runs in its isolation domain.
    weak var context: ObjectContext?
    init(_ context: ObjectContext) { self.context = context }
}
