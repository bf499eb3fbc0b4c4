extension ChangeSet {
    /// One delegate callback of a batch.
    public enum Callback: Hashable {
        /// Delete the item at its old path.
        case deleteItem(Item, at: ItemPath)
        /// Delete the section at its old index.
        case deleteSection(at: Int)
        /// Insert a section at its new index.
        case insertSection(at: Int)
        /// Insert the item at its new path.
        case insertItem(Item, at: ItemPath)
        /// Move the item from its old path to its new path.
        case moveItem(Item, from: ItemPath, to: ItemPath, changedKeys: Set<String>)
        /// Reload the item: its old path before the batch, its new path after it.
        case updateItem(Item, from: ItemPath, to: ItemPath, changedKeys: Set<String>)
    }

    /// The change set as a strict batch, valid for a UITableView-like consumer: no row operation inside a deleted
    /// or inserted section, a move out of a deleted section lowered to an insert and one into an inserted section
    /// lowered to a delete, one operation per item, and every surviving section's count adds up.
    public struct Batch: Hashable {
        /// Old indexes, ascending.
        public var deletedSections: [Int] = []
        /// New indexes, ascending.
        public var insertedSections: [Int] = []
        /// Row deletes at old paths, ascending.
        public var deletedItems: [ItemChange] = []
        /// Row inserts at new paths, ascending.
        public var insertedItems: [ItemChange] = []
        /// Moves between surviving sections, ascending by new path.
        public var movedItems: [ItemChange] = []
        /// Updates with their old and new paths (apply them after the structural changes, at the new path).
        public var updatedItems: [ItemChange] = []

        /// Creates an empty batch over the given section changes.
        @inlinable
        public init(deletedSections: [Int] = [], insertedSections: [Int] = []) {
            self.deletedSections = deletedSections
            self.insertedSections = insertedSections
        }

        /// Whether the batch has no callback at all.
        public var isEmpty: Bool {
            deletedSections.isEmpty && insertedSections.isEmpty && deletedItems.isEmpty && insertedItems.isEmpty
                && movedItems.isEmpty && updatedItems.isEmpty
        }

        /// The callbacks in causal order (seed 002): item deletes (descending), section deletes (descending),
        /// section inserts (ascending), item inserts (ascending), moves (ascending by new path), updates.
        @inlinable
        public var callbacks: [Callback] {
            var result: [Callback] = []
            for change in deletedItems.reversed() { result.append(.deleteItem(change.item, at: change.from!)) }
            for index in deletedSections.reversed() { result.append(.deleteSection(at: index)) }
            for index in insertedSections { result.append(.insertSection(at: index)) }
            for change in insertedItems { result.append(.insertItem(change.item, at: change.to!)) }
            for change in movedItems {
                result.append(
                    .moveItem(change.item, from: change.from!, to: change.to!, changedKeys: change.changedKeys))
            }
            for change in updatedItems {
                result.append(
                    .updateItem(change.item, from: change.from!, to: change.to!, changedKeys: change.changedKeys))
            }
            return result
        }
    }

    /// The strict batch form.
    @inlinable
    public var batch: Batch {
        var batch = Batch(deletedSections: deletedSections, insertedSections: insertedSections)
        for change in deletedItems where oldSurvives[change.from!.section] {
            batch.deletedItems.append(change)
        }
        for change in insertedItems where newSurvives[change.to!.section] {
            batch.insertedItems.append(change)
        }
        for change in movedItems {
            switch (oldSurvives[change.from!.section], newSurvives[change.to!.section]) {
            case (true, true): batch.movedItems.append(change)
            case (true, false):
                batch.deletedItems.append(
                    ItemChange(item: change.item, from: change.from, to: nil, changedKeys: change.changedKeys))
            case (false, true):
                batch.insertedItems.append(
                    ItemChange(item: change.item, from: nil, to: change.to, changedKeys: change.changedKeys))
            case (false, false): break
            }
        }
        for change in updatedItems where oldSurvives[change.from!.section] && newSurvives[change.to!.section] {
            batch.updatedItems.append(change)
        }
        batch.deletedItems.sort { $0.from! < $1.from! }
        batch.insertedItems.sort { $0.to! < $1.to! }
        return batch
    }
}

extension ChangeSet.Batch: Sendable where Item: Sendable {}
extension ChangeSet.Callback: Sendable where Item: Sendable {}
