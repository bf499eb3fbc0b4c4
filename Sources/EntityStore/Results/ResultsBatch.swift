import LMDB
import SectionedDiff

/// One batch of a ``FetchedResultsController`` as a `Sendable` value: the changes in the contract's order and the
/// results after them, for a consumer on another actor or in a task.
///
/// Apply ``changes`` in order to the previous results (or to a list UI) and you get ``snapshot``: the same
/// guarantees as the delegate's calls (<doc:ChangeContract>).
public struct ResultsBatch: Sendable, Hashable {
    /// One change of a batch.
    public enum Change: Sendable, Hashable {
        /// An object left the results from `at` (an old path).
        case deleteItem(ObjectID, at: ItemPath)
        /// A section left the results from `at` (an old index).
        case deleteSection(SectionInfo, at: Int)
        /// A section arrived at `at` (a new index).
        case insertSection(SectionInfo, at: Int)
        /// An object arrived at `at` (a new path).
        case insertItem(ObjectID, at: ItemPath)
        /// An object moved from `from` (old path) to `to` (new path).
        case moveItem(ObjectID, from: ItemPath, to: ItemPath)
        /// An object's values changed in place: `from` before the batch, `to` after it.
        case updateItem(ObjectID, from: ItemPath, to: ItemPath)
    }

    /// The changes: object deletes, section deletes, section inserts, object inserts, moves, updates.
    public var changes: [Change]
    /// The results after the batch.
    public var snapshot: ResultsSnapshot
    /// Whether the batch is user-driven (only delivered to a stream that asked for such batches).
    public var isUserDriven: Bool

    /// A batch of `changes` leading to `snapshot`.
    public init(changes: [Change], snapshot: ResultsSnapshot, isUserDriven: Bool = false) {
        self.changes = changes
        self.snapshot = snapshot
        self.isUserDriven = isUserDriven
    }
}

extension FetchedResultsController {
    /// Every batch from now on, as `Sendable` values, for a consumer on the controller's actor or elsewhere.
    ///
    /// <!-- snippet
    /// uses: library
    /// final class Screen {
    ///     func apply(_ batch: ResultsBatch) {}
    /// }
    /// let screen = Screen()
    /// let controller = FetchedResultsController(
    ///     fetchRequest: FetchRequest(entity: "Book", sortKeys: [SortKey("title")]), context: ObjectContext(store: try openLibrary()))
    /// -->
    /// ```swift
    /// // On the main actor:
    /// let batches = controller.batches()
    /// Task { for try await batch in batches { screen.apply(batch) } }
    /// ```
    ///
    /// The stream works alongside the ``delegate`` (which it does not replace). It ends when the consumer stops
    /// iterating or cancels its task (the controller drops it at once or at its next batch), when the controller
    /// is released, or, by throwing the error, when a batch cannot be computed
    /// (``FetchedResultsControllerDelegate/controller(_:didFailWith:)``); after ``performFetch()`` succeeds again,
    /// ask for a new stream.
    ///
    /// Batches are buffered until consumed, so a slow consumer sees every one, in order.
    ///
    /// - Parameter includingUserDriven: Deliver user-driven batches too (flagged ``ResultsBatch/isUserDriven``);
    ///   by default they apply silently, as for a delegate.
    public func batches(includingUserDriven: Bool = false) -> AsyncThrowingStream<ResultsBatch, any Error> {
        let (stream, continuation) = AsyncThrowingStream<ResultsBatch, any Error>.makeStream()
        let receiver = BatchStream(continuation, includingUserDriven: includingUserDriven)
        streams.append(receiver)
        return stream
    }

    /// The controller's current results as identifiers.
    public var snapshot: ResultsSnapshot {
        ResultsSnapshot(
            sectionIdentifiers: displayed.sections.map { Self.name(of: $0.key) },
            itemIdentifiers: displayed.sections.map(\.items))
    }

    /// Who is told about a batch: the delegate, then the live streams, in the order they were made.
    var receivers: [any FetchedResultsControllerDelegate] {
        if streams.contains(where: \.hasEnded) { streams.removeAll(where: \.hasEnded) }
        guard let delegate else { return streams }
        return [delegate] + streams
    }

    /// The number of streams the controller still feeds (for tests of their removal).
    var liveStreamCount: Int { receivers.count - (delegate == nil ? 0 : 1) }
}

/// A ``FetchedResultsController/batches(includingUserDriven:)`` stream, receiving batches as a delegate does.
final class BatchStream: FetchedResultsControllerDelegate {
    private let continuation: AsyncThrowingStream<ResultsBatch, any Error>.Continuation
    private let ended = Locked(false)
    private let includingUserDriven: Bool
    private var changes: [ResultsBatch.Change] = []

    init(_ continuation: AsyncThrowingStream<ResultsBatch, any Error>.Continuation, includingUserDriven: Bool) {
        self.continuation = continuation
        self.includingUserDriven = includingUserDriven
        let ended = self.ended
        continuation.onTermination = { _ in ended.withLock { $0 = true } }
    }

    deinit { continuation.finish() }

    var hasEnded: Bool { ended.withLock { $0 } }
    var deliversUserDrivenChanges: Bool { includingUserDriven }

    func controllerWillChangeContent(_ controller: FetchedResultsController) { changes = [] }

    func controller(
        _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
        for type: ResultsChangeType, newIndexPath: ItemPath?
    ) {
        switch (type, indexPath, newIndexPath) {
        case (.delete, let at?, _): changes.append(.deleteItem(objectID, at: at))
        case (.insert, _, let at?): changes.append(.insertItem(objectID, at: at))
        case (.move, let from?, let to?): changes.append(.moveItem(objectID, from: from, to: to))
        case (.update, let from?, let to?): changes.append(.updateItem(objectID, from: from, to: to))
        default: preconditionFailure("a \(type) of \(objectID) without its paths")
        }
    }

    func controller(
        _ controller: FetchedResultsController, didChange section: SectionInfo, atSectionIndex index: Int,
        for type: ResultsChangeType
    ) {
        changes.append(type == .delete ? .deleteSection(section, at: index) : .insertSection(section, at: index))
    }

    func controllerDidChangeContent(_ controller: FetchedResultsController) {
        let batch = ResultsBatch(
            changes: changes, snapshot: controller.snapshot, isUserDriven: controller.isUserDrivenBatch)
        changes = []
        continuation.yield(batch)
    }

    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        ended.withLock { $0 = true }
        continuation.finish(throwing: error)
    }
}
