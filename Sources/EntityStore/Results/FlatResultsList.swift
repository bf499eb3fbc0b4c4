import SectionedDiff

/// A controller's results as one flat list, each section a header row followed by its objects, that turns each
/// batch into the splices of that list: the changes a flat list model consumes (GTK's `GListModel`
/// `items-changed(position, removed, added)`, a Qt `QAbstractListModel`'s remove and insert rows).
///
/// ``apply(_:splice:update:)`` takes a batch's changes in the contract's order (<doc:ChangeContract>) and calls
/// `splice` once per run of rows removed (last run first) and then once per run of rows inserted (first run first),
/// each time after the list has taken that splice: a consumer that reads the list from inside `splice` (as GTK's
/// list view reads `get_n_items` and `get_item` inside its `items-changed` handler) sees the state the splice
/// describes, never the batch half applied. Objects changed in place come last, through `update`, at their new
/// position: for a toolkit whose rows update from the item (a GObject's `notify`) rather than from a splice.
///
/// A moved object leaves with the removals and comes back with the insertions, the same object: a toolkit that
/// keeps one item per object (GTK reuses a row's widget for the same `GObject`) keeps its row. The list keeps
/// only identifiers, in chunks, so a splice costs O(√n) rather than O(n), and rows are built by the consumer when
/// asked for (a 100,000-row list makes only the items on screen).
///
/// <!-- snippet
/// uses: library
/// let store = try openLibrary()
/// -->
/// ```swift
/// let context = ObjectContext(store: store)
/// let controller = FetchedResultsController(
///     fetchRequest: FetchRequest(entity: "Book", sortKeys: [SortKey("genre"), SortKey("title")]),
///     context: context, sectionNameKeyPath: "genre")
/// try controller.performFetch()
/// let list = FlatResultsList(sections: controller.sections)
/// let collector = ResultsBatchCollector { changes, _ in
///     do {
///         try list.apply(changes) { position, removed, added in
///             print("items-changed", position, removed, added)  // g_list_model_items_changed(...)
///         }
///     } catch {
///         print("rebuild the list:", error)  // a batch that does not fit: nothing was changed
///     }
/// } failure: { error in
///     print("the list stopped following:", error.message)
/// }
/// controller.delegate = collector
/// ```
public final class FlatResultsList {
    /// A row of the flat list.
    public enum Row: Hashable, Sendable {
        /// A section's header: its name (``SectionInfo/name``).
        case header(String)
        /// An object.
        case object(ObjectID)
    }

    /// Whether each section has a header row before its objects.
    public let hasHeaders: Bool
    private var rows = ChunkedRows()
    /// The number of objects of each section.
    private var counts: [Int]

    /// The flat list of `sections` (a controller's ``FetchedResultsController/sections``), with a header row before
    /// each section's objects unless `headers` is `false` (a list without sections: one section, no header row).
    public init(sections: [SectionInfo], headers: Bool = true) {
        hasHeaders = headers
        counts = sections.map(\.numberOfObjects)
        var all: [Row] = []
        all.reserveCapacity(sections.count * (headers ? 1 : 0) + counts.reduce(0, +))
        for section in sections {
            if headers { all.append(.header(section.name)) }
            all.append(contentsOf: section.objectIDs.map(Row.object))
        }
        rows.insert(all[...], at: 0)
    }

    /// The flat list of a snapshot's sections.
    public convenience init(_ snapshot: ResultsSnapshot, headers: Bool = true) {
        self.init(
            sections: zip(snapshot.sectionIdentifiers, snapshot.itemIdentifiers).map {
                SectionInfo(name: $0, indexTitle: nil, value: .string($0), objectIDs: $1)
            }, headers: headers)
    }

    /// The number of rows (headers and objects).
    public var count: Int { rows.count }

    /// The row at `position` (`0 ..< count`).
    public subscript(position: Int) -> Row { rows[position] }

    /// Every row, in order.
    public var allRows: [Row] { rows.all }

    /// The number of sections.
    public var numberOfSections: Int { counts.count }

    /// The flat position of the object at `path`, or of section `path.section`'s header when `path.item` is -1;
    /// `nil` when the list has no such row.
    public func position(of path: ItemPath) -> Int? {
        guard counts.indices.contains(path.section), path.item < counts[path.section],
            path.item >= (hasHeaders ? -1 : 0)
        else { return nil }
        return start(of: path.section) + header + path.item
    }

    /// The path of the row at `position`: the object's, or `item` -1 for a section's header; `nil` past the end.
    public func itemPath(at position: Int) -> ItemPath? {
        guard position >= 0 else { return nil }
        var start = 0
        for (section, count) in counts.enumerated() {
            let end = start + header + count
            if position < end { return ItemPath(section: section, item: position - start - header) }
            start = end
        }
        return nil
    }

    /// Applies one batch's changes (in the contract's order, as a ``ResultsBatch`` or a
    /// ``ResultsBatchCollector`` gives them), telling `splice` each run of rows removed and then each run inserted,
    /// each after the list took it, and `update` each object changed in place at its position after the batch.
    ///
    /// - Throws: ``EntityStoreError/Code/invalidValue`` before anything changes when a change names a path or
    ///   section the list does not have (the changes are of another list, or a batch was skipped): rebuild the
    ///   list from the controller's sections. What `splice` or `update` throw, as they throw it.
    public func apply(
        _ changes: [ResultsBatch.Change], splice: (_ position: Int, _ removed: Int, _ added: Int) throws -> Void,
        update: (_ position: Int, _ id: ObjectID) throws -> Void = { _, _ in }
    ) throws {
        if changes.isEmpty { return }
        let oldStarts = starts(of: counts)
        var removed: [Int] = []
        var inserted: [(position: Int, row: Row)] = []
        var deletedSections = Set<Int>()
        var leaving = [Int](repeating: 0, count: counts.count)
        func oldPosition(_ path: ItemPath, _ change: ResultsBatch.Change) throws -> Int {
            guard counts.indices.contains(path.section), (0..<counts[path.section]).contains(path.item) else {
                throw Self.misfit(change, "the list has no row at \(path)")
            }
            leaving[path.section] += 1
            return oldStarts[path.section] + header + path.item
        }
        // The new sections: the old ones without those deleted, with those inserted; their counts follow.
        var insertedSections: [(index: Int, info: SectionInfo)] = []
        var arriving: [ItemPath] = []
        for change in changes {
            switch change {
            case .deleteItem(_, let at): removed.append(try oldPosition(at, change))
            case .moveItem(_, let from, let to):
                removed.append(try oldPosition(from, change))
                arriving.append(to)
            case .deleteSection(_, let at):
                guard counts.indices.contains(at), deletedSections.insert(at).inserted else {
                    throw Self.misfit(change, "the list has no section \(at) to delete")
                }
                removed.append(contentsOf: oldStarts[at]..<(oldStarts[at] + header + counts[at]))
            case .insertSection(let info, let at): insertedSections.append((at, info))
            case .insertItem(_, let at): arriving.append(at)
            case .updateItem: break
            }
        }
        var newCounts: [Int] = []
        newCounts.reserveCapacity(counts.count - deletedSections.count + insertedSections.count)
        for (section, count) in counts.enumerated() where !deletedSections.contains(section) {
            newCounts.append(count - leaving[section])
        }
        for (index, info) in insertedSections.sorted(by: { $0.index < $1.index }) {
            guard index <= newCounts.count else {
                throw Self.misfit(.insertSection(info, at: index), "the list has \(newCounts.count) sections before it")
            }
            newCounts.insert(info.numberOfObjects, at: index)
        }
        for path in arriving {
            guard newCounts.indices.contains(path.section) else {
                throw Self.misfit(nil, "an object arrives in section \(path.section) of \(newCounts.count)")
            }
            newCounts[path.section] += 1
        }
        let newStarts = starts(of: newCounts)
        func newPosition(_ path: ItemPath, _ change: ResultsBatch.Change) throws -> Int {
            guard newCounts.indices.contains(path.section), (0..<newCounts[path.section]).contains(path.item) else {
                throw Self.misfit(change, "the list after the batch has no row at \(path)")
            }
            return newStarts[path.section] + header + path.item
        }
        var updated: [(position: Int, id: ObjectID)] = []
        for change in changes {
            switch change {
            case .insertSection(let info, let at):
                var position = newStarts[at]
                if hasHeaders {
                    inserted.append((position, .header(info.name)))
                    position += 1
                }
                for id in info.objectIDs {
                    inserted.append((position, .object(id)))
                    position += 1
                }
            case .insertItem(let id, let at): inserted.append((try newPosition(at, change), .object(id)))
            case .moveItem(let id, _, let to): inserted.append((try newPosition(to, change), .object(id)))
            case .updateItem(let id, _, let to): updated.append((try newPosition(to, change), id))
            case .deleteItem, .deleteSection: break
            }
        }
        guard Set(removed).count == removed.count, Set(inserted.map(\.position)).count == inserted.count else {
            throw Self.misfit(nil, "two changes name one row")
        }

        // Removals, last run first: each splice leaves the rows before it where they were.
        removed.sort(by: >)
        var index = 0
        while index < removed.count {
            var low = removed[index]
            var end = index + 1
            while end < removed.count, removed[end] == low - 1 {
                low -= 1
                end += 1
            }
            rows.remove(at: low, count: end - index)
            try splice(low, end - index, 0)
            index = end
        }
        counts = newCounts
        // Insertions, first run first: each lands at its final position, everything before it being final.
        inserted.sort { $0.position < $1.position }
        index = 0
        while index < inserted.count {
            let low = inserted[index].position
            var end = index + 1
            while end < inserted.count, inserted[end].position == low + (end - index) { end += 1 }
            rows.insert(inserted[index..<end].lazy.map(\.row), at: low)
            try splice(low, 0, end - index)
            index = end
        }
        for (position, id) in updated.sorted(by: { $0.position < $1.position }) { try update(position, id) }
    }

    private var header: Int { hasHeaders ? 1 : 0 }

    private func start(of section: Int) -> Int {
        counts[..<section].reduce(0, +) + header * section
    }

    private func starts(of counts: [Int]) -> [Int] {
        var result: [Int] = []
        result.reserveCapacity(counts.count)
        var position = 0
        for count in counts {
            result.append(position)
            position += header + count
        }
        return result
    }

    private static func misfit(_ change: ResultsBatch.Change?, _ message: String) -> EntityStoreError {
        EntityStoreError(
            .invalidValue,
            "a batch does not fit this flat list: \(message)\(change.map { " (\($0))" } ?? ""); "
                + "rebuild the list from the controller's sections")
    }
}

/// A delegate that hands each batch of a ``FetchedResultsController`` to a closure as the changes of a
/// ``ResultsBatch`` (in the contract's order), and its failures to another: the glue between a controller and a
/// ``FlatResultsList`` or any consumer that applies whole batches.
public final class ResultsBatchCollector: FetchedResultsControllerDelegate {
    private let onBatch: (_ changes: [ResultsBatch.Change], _ isUserDriven: Bool) -> Void
    private let onFailure: (EntityStoreError) -> Void
    private var changes: [ResultsBatch.Change] = []
    /// Whether user-driven batches are delivered too (`true` by default: a flat toolkit's view moves no row by
    /// itself, so its model must hear of a user's reorder as of any other change).
    public var deliversUserDrivenChanges = true

    /// A collector calling `batch` with each batch's changes and whether it is user-driven, and `failure` with a
    /// failure of the controller (its results stay as they were: see
    /// ``FetchedResultsControllerDelegate/controller(_:didFailWith:)``).
    public init(
        _ batch: @escaping (_ changes: [ResultsBatch.Change], _ isUserDriven: Bool) -> Void,
        failure: @escaping (EntityStoreError) -> Void
    ) {
        onBatch = batch
        onFailure = failure
    }

    public func controllerWillChangeContent(_ controller: FetchedResultsController) { changes = [] }

    public func controller(
        _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
        for type: ResultsChangeType, newIndexPath: ItemPath?
    ) {
        changes.append(.object(objectID, type, from: indexPath, to: newIndexPath))
    }

    public func controller(
        _ controller: FetchedResultsController, didChange section: SectionInfo, atSectionIndex index: Int,
        for type: ResultsChangeType
    ) {
        changes.append(type == .delete ? .deleteSection(section, at: index) : .insertSection(section, at: index))
    }

    public func controllerDidChangeContent(_ controller: FetchedResultsController) {
        let batch = changes
        changes = []
        onBatch(batch, controller.isUserDrivenBatch)
    }

    public func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        onFailure(error)
    }
}

/// Rows in chunks of at most `limit`: a splice moves the rows of one or two chunks, not of the whole list.
struct ChunkedRows {
    private static let limit = 1_024
    private var chunks: [[FlatResultsList.Row]] = []
    private(set) var count = 0

    var all: [FlatResultsList.Row] { chunks.flatMap { $0 } }

    /// The chunk holding `position` and the position within it (the last chunk's end for `count`).
    private func locate(_ position: Int) -> (chunk: Int, offset: Int) {
        var offset = position
        for (index, chunk) in chunks.enumerated() {
            if offset < chunk.count { return (index, offset) }
            offset -= chunk.count
        }
        return (chunks.count - 1, chunks.last?.count ?? 0)
    }

    subscript(position: Int) -> FlatResultsList.Row {
        precondition((0..<count).contains(position), "row \(position) of \(count)")
        let (chunk, offset) = locate(position)
        return chunks[chunk][offset]
    }

    mutating func insert(_ new: some Collection<FlatResultsList.Row>, at position: Int) {
        precondition((0...count).contains(position), "insert at \(position) of \(count)")
        if new.isEmpty { return }
        if chunks.isEmpty { chunks.append([]) }
        let (index, offset) = locate(position)
        chunks[index].insert(contentsOf: new, at: offset)
        count += new.count
        if chunks[index].count > Self.limit {
            let whole = chunks[index]
            let pieces = stride(from: 0, to: whole.count, by: Self.limit / 2).map {
                Array(whole[$0..<min($0 + Self.limit / 2, whole.count)])
            }
            chunks.replaceSubrange(index...index, with: pieces)
        }
    }

    mutating func remove(at position: Int, count removing: Int) {
        precondition(position >= 0 && position + removing <= count, "remove \(removing) at \(position) of \(count)")
        var left = removing
        while left > 0 {
            let (index, offset) = locate(position)
            let taken = min(left, chunks[index].count - offset)
            chunks[index].removeSubrange(offset..<(offset + taken))
            if chunks[index].isEmpty { chunks.remove(at: index) }
            left -= taken
        }
        count -= removing
    }
}
