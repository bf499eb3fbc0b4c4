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
    /// Whether the batch is user-driven (only delivered to a stream that asked for such batches).
    public var isUserDriven: Bool
    /// Where the snapshot comes from: a value, or a step of a stream's chain (built when first read).
    private var source: SnapshotSource

    /// The results after the batch.
    ///
    /// A batch of a ``FetchedResultsController/batches(includingUserDriven:)`` stream builds it when first read, by
    /// applying the stream's changes to an earlier snapshot: a batch of k changes costs O(k) to make and to keep,
    /// and reading the snapshot costs O(n) once.
    public var snapshot: ResultsSnapshot {
        get {
            switch source {
            case .value(let snapshot): snapshot
            case .step(let chain, let index): chain.snapshot(after: index)
            }
        }
        set { source = .value(newValue) }
    }

    /// A batch of `changes` leading to `snapshot`.
    public init(changes: [Change], snapshot: ResultsSnapshot, isUserDriven: Bool = false) {
        self.changes = changes
        self.source = .value(snapshot)
        self.isUserDriven = isUserDriven
    }

    /// A batch whose snapshot is step `index` of `chain`.
    init(changes: [Change], chain: SnapshotChain, step index: Int, isUserDriven: Bool) {
        self.changes = changes
        self.source = .step(chain, index)
        self.isUserDriven = isUserDriven
    }

    /// Whether the snapshot is built when first read (a stream's batch following the one before it).
    var isBuiltOnDemand: Bool {
        if case .step = source { return true }
        return false
    }

    public static func == (lhs: ResultsBatch, rhs: ResultsBatch) -> Bool {
        lhs.isUserDriven == rhs.isUserDriven && lhs.changes == rhs.changes && lhs.snapshot == rhs.snapshot
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(changes)
        hasher.combine(isUserDriven)
        hasher.combine(snapshot)
    }

    private enum SnapshotSource: Sendable {
        case value(ResultsSnapshot)
        case step(SnapshotChain, Int)
    }
}

extension ResultsBatch.Change {
    /// The change a delegate's object call describes (its paths as the call gives them).
    static func object(_ id: ObjectID, _ type: ResultsChangeType, from: ItemPath?, to: ItemPath?) -> Self {
        switch (type, from, to) {
        case (.delete, let at?, _): .deleteItem(id, at: at)
        case (.insert, _, let at?): .insertItem(id, at: at)
        case (.move, let from?, let to?): .moveItem(id, from: from, to: to)
        case (.update, let from?, let to?): .updateItem(id, from: from, to: to)
        default: preconditionFailure("a \(type) of \(id) without its paths")
        }
    }
}

/// The snapshots of a run of a stream's batches: one snapshot and the changes of each batch after it. A batch's
/// snapshot is built from the newest one built before it (or the first), so a consumer reading every batch's
/// snapshot in order pays O(n + k) for each, and one reading none pays nothing.
///
/// Shared by the controller's actor (appending steps) and the consumers' threads (reading snapshots): its state is
/// behind a lock, and a snapshot is built outside it.
final class SnapshotChain: Sendable {
    private struct State {
        /// The changes of each step, in order.
        var steps: [[ResultsBatch.Change]] = []
        /// The newest snapshot built: after step `index` (-1: the first snapshot).
        var built: (index: Int, snapshot: ResultsSnapshot)
    }

    private let state: Locked<State>
    /// The first snapshot (kept: a consumer reading batches out of order builds from it).
    private let first: ResultsSnapshot
    /// The number of objects of the first snapshot.
    let baseCount: Int

    /// A chain starting at `base`.
    init(base: ResultsSnapshot) {
        first = base
        state = Locked(State(built: (-1, base)))
        baseCount = base.itemIdentifiers.reduce(0) { $0 + $1.count }
    }

    /// Adds the changes of one more batch; returns its step's index.
    func append(_ changes: [ResultsBatch.Change]) -> Int {
        state.withLock { state in
            state.steps.append(changes)
            return state.steps.count - 1
        }
    }

    /// The snapshot after step `index`.
    func snapshot(after index: Int) -> ResultsSnapshot {
        let (start, steps): (ResultsSnapshot, ArraySlice<[ResultsBatch.Change]>) = state.withLock { state in
            let from = state.built.index <= index ? state.built : (index: -1, snapshot: first)
            return (from.snapshot, state.steps[(from.index + 1)..<(index + 1)])
        }
        guard !steps.isEmpty else { return start }
        var snapshot = start
        for changes in steps { snapshot.apply(changes) }
        state.withLock { state in
            if index > state.built.index { state.built = (index, snapshot) }
        }
        return snapshot
    }
}

extension ResultsSnapshot {
    /// Applies a batch's changes in the contract's meaning: deletes (objects and move sources by old path, sections
    /// by old index, with their objects) against the snapshot before the batch, then inserts (sections by new
    /// index, with the objects their ``SectionInfo`` lists; objects and move targets by new path) against the one
    /// after it. Updates change no place.
    mutating func apply(_ changes: [ResultsBatch.Change]) {
        var removed: [Int: [Int]] = [:]
        var removedSections = Set<Int>()
        var insertedSections: [(index: Int, info: SectionInfo)] = []
        var inserted: [(path: ItemPath, id: ObjectID)] = []
        for change in changes {
            switch change {
            case .deleteItem(_, let at): removed[at.section, default: []].append(at.item)
            case .deleteSection(_, let at): removedSections.insert(at)
            case .insertSection(let info, let at): insertedSections.append((at, info))
            case .insertItem(let id, let at): inserted.append((at, id))
            case .moveItem(let id, let from, let to):
                removed[from.section, default: []].append(from.item)
                inserted.append((to, id))
            case .updateItem: break
            }
        }
        guard !removed.isEmpty || !removedSections.isEmpty || !insertedSections.isEmpty || !inserted.isEmpty else {
            return
        }
        // The old sections that stay, without the removed objects.
        var names: [String] = []
        var items: [[ObjectID]] = []
        names.reserveCapacity(sectionIdentifiers.count + insertedSections.count)
        items.reserveCapacity(sectionIdentifiers.count + insertedSections.count)
        for section in sectionIdentifiers.indices where !removedSections.contains(section) {
            names.append(sectionIdentifiers[section])
            guard let gone = removed[section] else {
                items.append(itemIdentifiers[section])
                continue
            }
            let goneSet = Set(gone)
            precondition(goneSet.count == gone.count, "a batch removes an object of section \(section) twice")
            let old = itemIdentifiers[section]
            var kept: [ObjectID] = []
            kept.reserveCapacity(old.count - gone.count)
            for (item, id) in old.enumerated() where !goneSet.contains(item) { kept.append(id) }
            precondition(kept.count == old.count - gone.count, "a batch removes an object past section \(section)")
            items.append(kept)
        }
        // The new sections with their objects, at their new indices (ascending, each past the ones before it).
        for (index, info) in insertedSections.sorted(by: { $0.index < $1.index }) {
            precondition(index <= names.count, "a batch inserts section \(index) past the end")
            names.insert(info.name, at: index)
            items.insert(info.objectIDs, at: index)
        }
        // The new objects, at their new paths, section by section in one pass each.
        inserted.sort { ($0.path.section, $0.path.item) < ($1.path.section, $1.path.item) }
        var start = 0
        while start < inserted.count {
            let section = inserted[start].path.section
            var end = start
            while end < inserted.count && inserted[end].path.section == section { end += 1 }
            precondition(items.indices.contains(section), "a batch inserts an object into missing section \(section)")
            let old = items[section]
            var merged: [ObjectID] = []
            merged.reserveCapacity(old.count + end - start)
            var next = old.startIndex
            for entry in inserted[start..<end] {
                while merged.count < entry.path.item && next < old.endIndex {
                    merged.append(old[next])
                    next += 1
                }
                precondition(merged.count == entry.path.item, "a batch inserts an object past section \(section)")
                merged.append(entry.id)
            }
            merged.append(contentsOf: old[next...])
            items[section] = merged
            start = end
        }
        sectionIdentifiers = names
        itemIdentifiers = items
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
    /// Batches are buffered until consumed, so a slow consumer sees every one, in order. A batch of k changes costs
    /// O(k) to make and to keep: its ``ResultsBatch/snapshot`` is built when first read, from the stream's previous
    /// snapshot and the changes since (a stream made after ``performFetch()`` starts from the results then, an O(n)
    /// copy of their identifiers).
    ///
    /// - Parameter includingUserDriven: Deliver user-driven batches too (flagged ``ResultsBatch/isUserDriven``);
    ///   by default they apply silently, as for a delegate.
    public func batches(includingUserDriven: Bool = false) -> AsyncThrowingStream<ResultsBatch, any Error> {
        let (stream, continuation) = AsyncThrowingStream<ResultsBatch, any Error>.makeStream()
        let receiver = BatchStream(continuation, includingUserDriven: includingUserDriven)
        if isFollowingChanges { receiver.start(from: snapshot, generation: resultsGeneration) }
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
    /// The snapshots of this stream's batches since the last one built from the controller.
    private var chain: SnapshotChain?
    /// The number of changes in `chain`.
    private var changesInChain = 0
    /// The controller's results generation after the last batch.
    private var seenGeneration: UInt64 = 0

    init(_ continuation: AsyncThrowingStream<ResultsBatch, any Error>.Continuation, includingUserDriven: Bool) {
        self.continuation = continuation
        self.includingUserDriven = includingUserDriven
        let ended = self.ended
        continuation.onTermination = { _ in ended.withLock { $0 = true } }
    }

    deinit { continuation.finish() }

    /// Starts the stream's snapshots from the controller's current results (made at `generation`).
    func start(from snapshot: ResultsSnapshot, generation: UInt64) {
        chain = SnapshotChain(base: snapshot)
        seenGeneration = generation
    }

    var hasEnded: Bool { ended.withLock { $0 } }
    var deliversUserDrivenChanges: Bool { includingUserDriven }

    func controllerWillChangeContent(_ controller: FetchedResultsController) { changes = [] }

    func controller(
        _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
        for type: ResultsChangeType, newIndexPath: ItemPath?
    ) {
        changes.append(.object(objectID, type, from: indexPath, to: newIndexPath))
    }

    func controller(
        _ controller: FetchedResultsController, didChange section: SectionInfo, atSectionIndex index: Int,
        for type: ResultsChangeType
    ) {
        changes.append(type == .delete ? .deleteSection(section, at: index) : .insertSection(section, at: index))
    }

    func controllerDidChangeContent(_ controller: FetchedResultsController) {
        let changes = self.changes
        self.changes = []
        let batch: ResultsBatch
        if let chain, controller.batchStartGeneration == seenGeneration,
            changesInChain + changes.count <= max(256, chain.baseCount)
        {
            // The batch follows the last one this stream saw: its snapshot is that one's with these changes.
            changesInChain += changes.count
            batch = ResultsBatch(
                changes: changes, chain: chain, step: chain.append(changes), isUserDriven: controller.isUserDrivenBatch)
        } else {
            // The first batch of a stream made before the fetch, one after results this stream did not see change (a silent user-driven batch), or
            // a chain as long as the results: a new chain from the controller's snapshot (O(n), at most once per
            // n changes).
            let snapshot = controller.snapshot
            chain = SnapshotChain(base: snapshot)
            changesInChain = 0
            batch = ResultsBatch(changes: changes, snapshot: snapshot, isUserDriven: controller.isUserDrivenBatch)
        }
        seenGeneration = controller.resultsGeneration
        continuation.yield(batch)
    }

    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        ended.withLock { $0 = true }
        continuation.finish(throwing: error)
    }
}
