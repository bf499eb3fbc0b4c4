import SectionedDiff

/// The kind of a change reported to a delegate.
public enum ResultsChangeType: String, Sendable, Hashable {
    /// An object or section arrived.
    case insert
    /// An object or section went away.
    case delete
    /// An object moved (changed section or place).
    case move
    /// An object's values changed in place.
    case update
}

/// Section and item identifiers of a controller's results, for diffable-data-source-like consumers.
public struct ResultsSnapshot: Sendable, Hashable {
    /// The sections' names, in order (``SectionInfo/name``). Names are unique but where distinct section values
    /// print alike (nil and the empty string, binary data of one size, dates within one second): a consumer that
    /// needs unique identifiers there sections by a key that prints each value apart.
    public var sectionIdentifiers: [String]
    /// The objects of each section, in order.
    public var itemIdentifiers: [[ObjectID]]

    /// The objects of the section named `name`.
    public func itemIdentifiers(inSection name: String) -> [ObjectID] {
        sectionIdentifiers.firstIndex(of: name).map { itemIdentifiers[$0] } ?? []
    }
}

/// What a ``FetchedResultsController`` tells its delegate: everything Core Data's
/// `NSFetchedResultsControllerDelegate` offers (seed 000), with paths that are always right.
///
/// For one batch the calls come in this order: ``controllerWillChangeContent(_:)``; the object deletes (descending
/// old path), section deletes (descending), section inserts (ascending), object inserts (ascending new path), moves
/// (ascending new path) and updates (with old and new path); then the whole-batch calls (the change set, the
/// snapshot, and the `CollectionDifference` when the controller has no sections, for a delegate whose
/// ``deliversWholeBatches`` is `true`); then
/// ``controllerDidChangeContent(_:)``. An empty change sends nothing at all. Every method but
/// ``controller(_:didFailWith:)`` has a default that does nothing: implement the ones you need. A failure has no
/// default, so that no app loses one silently.
public protocol FetchedResultsControllerDelegate: AnyObject {
    /// A batch of changes is about to be reported.
    func controllerWillChangeContent(_ controller: FetchedResultsController)
    /// An object was inserted (at `newIndexPath`), deleted (at `indexPath`), moved (from `indexPath` to
    /// `newIndexPath`) or updated (`indexPath` before the batch, `newIndexPath` after it: apply updates after the
    /// structural changes, at the new path).
    func controller(
        _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
        for type: ResultsChangeType, newIndexPath: ItemPath?)
    /// A section was inserted or deleted.
    func controller(
        _ controller: FetchedResultsController, didChange section: SectionInfo, atSectionIndex index: Int,
        for type: ResultsChangeType)
    /// The batch has been reported.
    func controllerDidChangeContent(_ controller: FetchedResultsController)
    /// A batch could not be computed (its rows could not be read), or the context's merge of the store's changes
    /// met saves it cannot merge (``EntityStoreError/Code/historyPruned``: entries pruned before they were read; a
    /// history entry that cannot be read): the controller stops following changes, its results stay as they were
    /// before that batch, and ``FetchedResultsController/failure`` holds `error` until
    /// ``FetchedResultsController/performFetch()`` succeeds again.
    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError)
    /// The index title of a section; `nil` for the default (the name's capitalised first letter).
    func controller(_ controller: FetchedResultsController, sectionIndexTitleForSectionName name: String) -> String?
    /// The whole batch as a change set: every object's fate, section by section.
    func controller(_ controller: FetchedResultsController, didChangeContentWith changes: ChangeSet<Value, ObjectID>)
    /// The whole batch as the new snapshot of identifiers.
    func controller(_ controller: FetchedResultsController, didChangeContentWith snapshot: ResultsSnapshot)
    /// The whole batch as a `CollectionDifference`, for a controller without sections.
    func controller(
        _ controller: FetchedResultsController, didChangeContentWith difference: CollectionDifference<ObjectID>)
    /// Whether user-driven changes should be delivered (flagged by ``FetchedResultsController/isUserDrivenBatch``)
    /// rather than applied silently. `false` by default, as seed 000 recommends.
    var deliversUserDrivenChanges: Bool { get }
    /// Whether the whole-batch calls (change set, snapshot, `CollectionDifference`) are wanted. They describe all
    /// the results, so they cost O(n) per batch; without them an unwindowed controller delivers a batch of k
    /// changes in O(k log n). `false` by default.
    var deliversWholeBatches: Bool { get }
}

extension FetchedResultsControllerDelegate {
    /// Does nothing by default.
    public func controllerWillChangeContent(_ controller: FetchedResultsController) {}
    /// Does nothing by default.
    public func controller(
        _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
        for type: ResultsChangeType, newIndexPath: ItemPath?
    ) {}
    /// Does nothing by default.
    public func controller(
        _ controller: FetchedResultsController, didChange section: SectionInfo, atSectionIndex index: Int,
        for type: ResultsChangeType
    ) {}
    /// Does nothing by default.
    public func controllerDidChangeContent(_ controller: FetchedResultsController) {}
    /// Does nothing by default.
    public func controller(
        _ controller: FetchedResultsController, sectionIndexTitleForSectionName name: String
    )
        -> String?
    { nil }
    /// Does nothing by default.
    public func controller(
        _ controller: FetchedResultsController, didChangeContentWith changes: ChangeSet<Value, ObjectID>
    ) {}
    /// Does nothing by default.
    public func controller(_ controller: FetchedResultsController, didChangeContentWith snapshot: ResultsSnapshot) {}
    /// Does nothing by default.
    public func controller(
        _ controller: FetchedResultsController, didChangeContentWith difference: CollectionDifference<ObjectID>
    ) {}
    /// `false` by default: user-driven changes apply silently.
    public var deliversUserDrivenChanges: Bool { false }
    /// `false` by default: only the per-object and per-section calls.
    public var deliversWholeBatches: Bool { false }
}

/// A section of a controller's results.
///
/// A section taken from ``FetchedResultsController/sections`` shares the controller's rows as they were then: its
/// ``objectIDs`` are read when asked for, so listing the sections of a million rows costs nothing per row.
public struct SectionInfo: Sendable, Hashable {
    /// The section's name: the section key's value as text (`""` for nil), the same whichever of the section's
    /// objects it is read from (`0.0` for a zero of either sign, `nan` for every NaN).
    ///
    /// A section is one value of the key (``value``), and names are for display: distinct values can share one
    /// (nil and the empty string, binary data of one size, dates within one second).
    public var name: String
    /// The section's index title.
    public var indexTitle: String?
    /// The section key's value.
    public var value: Value
    /// The number of objects.
    public let numberOfObjects: Int
    private let members: Members

    private enum Members: Sendable {
        case ids([ObjectID])
        /// Rows of `entityName`, except those `others` names (a controller of an entity with sub-entities).
        case rows(RowOrder, Range<Int>, entityName: String, others: [UInt64: String])
    }

    /// The objects' IDs, in order.
    public var objectIDs: [ObjectID] {
        switch members {
        case .ids(let ids): ids
        case .rows(let order, let range, let entityName, let others):
            order.keys(in: range).map { ObjectID(entityName: others[$0] ?? entityName, primaryKey: $0) }
        }
    }

    /// A section of `objectIDs`.
    public init(name: String, indexTitle: String?, value: Value, objectIDs: [ObjectID]) {
        self.name = name
        self.indexTitle = indexTitle
        self.value = value
        numberOfObjects = objectIDs.count
        members = .ids(objectIDs)
    }

    init(
        name: String, indexTitle: String?, value: Value, order: RowOrder, range: Range<Int>, entityName: String,
        others: [UInt64: String]
    ) {
        self.name = name
        self.indexTitle = indexTitle
        self.value = value
        numberOfObjects = range.count
        members = .rows(order, range, entityName: entityName, others: others)
    }

    public static func == (lhs: SectionInfo, rhs: SectionInfo) -> Bool {
        lhs.name == rhs.name && lhs.indexTitle == rhs.indexTitle && lhs.value == rhs.value
            && lhs.numberOfObjects == rhs.numberOfObjects && lhs.objectIDs == rhs.objectIDs
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(name)
        hasher.combine(value)
        hasher.combine(numberOfObjects)
    }
}
