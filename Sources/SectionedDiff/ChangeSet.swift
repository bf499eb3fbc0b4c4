/// The difference between two sectioned lists, by the change contract of EntityStore's fetched-results controller.
///
/// Every item's fate is listed, section by section: deleted (old path), inserted (new path), moved (old and new
/// path) or updated (old and new path), with the keys that changed. Moves are a minimal set: an item whose section
/// changed is always a move; within a section, the items kept in place are a heaviest increasing subsequence of
/// old positions, so items merely shifted by inserts and deletes never move, and among minimal sets the one that
/// moves items whose keys changed is chosen.
///
/// From the fates come the forms consumers need: ``batch`` (strict UITableView-like batch in causal delegate
/// order), ``steps`` (sequential, applying them to the old lists gives the new), ``splices`` (for flat list models)
/// and ``apply(to:)``.
///
/// ```swift
/// let old = SectionedList([.init(key: "K", items: ["p", "q", "r", "s"])])
/// let new = SectionedList([.init(key: "K", items: ["p", "r", "s", "q"])])
/// let changes = try ChangeSet(from: old, to: new, changedKeys: ["q": ["rank"]])
/// changes.movedItems   // q: [0,1] -> [0,3]; r and s are shifted, not moved
/// ```
///
/// Keyed and O(n + r log r) for n items in r runs of unmoved neighbours (not Myers).
public struct ChangeSet<SectionKey: Hashable, Item: Hashable> {
    /// One item's fate.
    public struct ItemChange: Hashable {
        /// The item.
        public var item: Item
        /// Where it was (`nil` for an insert).
        public var from: ItemPath?
        /// Where it is (`nil` for a delete).
        public var to: ItemPath?
        /// The keys whose values changed (empty when none were reported).
        public var changedKeys: Set<String>

        /// Creates an item's fate.
        @inlinable
        public init(item: Item, from: ItemPath?, to: ItemPath?, changedKeys: Set<String>) {
            self.item = item
            self.from = from
            self.to = to
            self.changedKeys = changedKeys
        }
    }

    /// The old lists.
    public let old: SectionedList<SectionKey, Item>
    /// The new lists.
    public let new: SectionedList<SectionKey, Item>
    /// Old indexes of sections that go away, ascending (including survivors whose order changed, which are
    /// deleted and inserted again).
    public private(set) var deletedSections: [Int] = []
    /// New indexes of sections that arrive, ascending.
    public private(set) var insertedSections: [Int] = []
    /// Every item that left, by old path.
    public private(set) var deletedItems: [ItemChange] = []
    /// Every item that arrived, by new path.
    public private(set) var insertedItems: [ItemChange] = []
    /// Every item that moved (changed section, or order against the other survivors), by new path.
    public private(set) var movedItems: [ItemChange] = []
    /// Every item whose values changed without moving, by new path.
    public private(set) var updatedItems: [ItemChange] = []

    /// Whether nothing changed: no callbacks at all are due.
    public var isEmpty: Bool {
        deletedSections.isEmpty && insertedSections.isEmpty && deletedItems.isEmpty && insertedItems.isEmpty
            && movedItems.isEmpty && updatedItems.isEmpty
    }

    /// Computes the change set from `old` to `new`.
    ///
    /// - Parameters:
    ///   - old: The lists before.
    ///   - new: The lists after.
    ///   - changedKeys: The items whose values changed, with the keys that changed. An item in both lists and not
    ///     moved is an update when it has keys here.
    /// - Throws: ``SectionedDiffError`` when a section key or an item appears twice in one of the lists.
    @inlinable
    public init(
        from old: SectionedList<SectionKey, Item>, to new: SectionedList<SectionKey, Item>,
        changedKeys: [Item: Set<String>] = [:]
    ) throws(SectionedDiffError) {
        var deletedSections: [Int] = []
        var insertedSections: [Int] = []
        var deletedItems: [ItemChange] = []
        var insertedItems: [ItemChange] = []
        var movedItems: [ItemChange] = []
        var updatedItems: [ItemChange] = []
        let oldSections = try Self.sectionIndex(old, "old")
        _ = try Self.sectionIndex(new, "new")  // duplicates in the new lists are an error too
        let oldPaths = try Self.itemPaths(old, "old")
        let newPaths = try Self.itemPaths(new, "new")
        let itemCount = oldPaths.count + newPaths.count + 1

        // Sections: survivors keep their relative order; the heaviest increasing run of old indexes (weighted
        // by item count) survives, the rest are deleted and inserted.
        var survivorNew: [Int] = []
        var survivorOld: [Int] = []
        for (j, section) in new.sections.enumerated() {
            if let i = oldSections[section.key] {
                survivorNew.append(j)
                survivorOld.append(i)
            }
        }
        let keptSections = heaviestIncreasingSubsequence(
            keys: survivorOld, weights: survivorNew.map { itemCount + new.sections[$0].items.count })
        var oldSurvives = [Bool](repeating: false, count: old.sections.count)
        var newSurvives = [Bool](repeating: false, count: new.sections.count)
        for (k, kept) in keptSections.enumerated() where kept {
            oldSurvives[survivorOld[k]] = true
            newSurvives[survivorNew[k]] = true
        }
        deletedSections = oldSurvives.indices.filter { !oldSurvives[$0] }
        insertedSections = newSurvives.indices.filter { !newSurvives[$0] }

        // Items: per new section, the items that stay in the section with the same key.
        var moved = Set<Item>()
        for (j, section) in new.sections.enumerated() {
            guard let i = oldSections[section.key] else { continue }
            let oldItems = old.sections[i].items
            var oldRank: [Item: Int] = [:]
            var rank = 0
            for item in oldItems where newPaths[item]?.section == j {
                oldRank[item] = rank
                rank += 1
            }
            // Runs of stayers adjacent in both orders: kept or moved as a whole.
            var runs = WeightedRuns<Item>(itemCount: itemCount)
            for item in section.items {
                guard let r = oldRank[item] else { continue }
                runs.append(rank: r, unchanged: changedKeys[item]?.isEmpty ?? true ? 1 : 0, member: item)
            }
            moved.formUnion(runs.movedMembers())
        }

        for (item, from) in oldPaths where newPaths[item] == nil {
            deletedItems.append(ItemChange(item: item, from: from, to: nil, changedKeys: changedKeys[item] ?? []))
        }
        for (item, to) in newPaths {
            guard let from = oldPaths[item] else {
                insertedItems.append(ItemChange(item: item, from: nil, to: to, changedKeys: changedKeys[item] ?? []))
                continue
            }
            let keys = changedKeys[item] ?? []
            if old.sections[from.section].key != new.sections[to.section].key || moved.contains(item) {
                movedItems.append(ItemChange(item: item, from: from, to: to, changedKeys: keys))
            } else if !keys.isEmpty {
                updatedItems.append(ItemChange(item: item, from: from, to: to, changedKeys: keys))
            }
        }
        deletedItems.sort { $0.from! < $1.from! }
        insertedItems.sort { $0.to! < $1.to! }
        movedItems.sort { $0.to! < $1.to! }
        updatedItems.sort { $0.to! < $1.to! }
        self.init(
            old: old, new: new, deletedSections: deletedSections, insertedSections: insertedSections,
            deletedItems: deletedItems, insertedItems: insertedItems, movedItems: movedItems,
            updatedItems: updatedItems, oldSurvives: oldSurvives, newSurvives: newSurvives)
    }

    @usableFromInline
    init(
        old: SectionedList<SectionKey, Item>, new: SectionedList<SectionKey, Item>, deletedSections: [Int],
        insertedSections: [Int], deletedItems: [ItemChange], insertedItems: [ItemChange], movedItems: [ItemChange],
        updatedItems: [ItemChange], oldSurvives: [Bool], newSurvives: [Bool]
    ) {
        self.old = old
        self.new = new
        self.deletedSections = deletedSections
        self.insertedSections = insertedSections
        self.deletedItems = deletedItems
        self.insertedItems = insertedItems
        self.movedItems = movedItems
        self.updatedItems = updatedItems
        self.oldSurvives = oldSurvives
        self.newSurvives = newSurvives
    }

    /// Whether each old section survives (is neither deleted nor deleted and inserted again).
    @usableFromInline let oldSurvives: [Bool]
    /// Whether each new section survived from the old lists.
    @usableFromInline let newSurvives: [Bool]

    @inlinable
    static func sectionIndex(
        _ list: SectionedList<SectionKey, Item>, _ which: String
    ) throws(SectionedDiffError)
        -> [SectionKey: Int]
    {
        var index: [SectionKey: Int] = [:]
        index.reserveCapacity(list.sections.count)
        for (i, section) in list.sections.enumerated() {
            if index.updateValue(i, forKey: section.key) != nil {
                throw SectionedDiffError(message: "the \(which) lists hold section \(section.key) twice")
            }
        }
        return index
    }

    @inlinable
    static func itemPaths(
        _ list: SectionedList<SectionKey, Item>, _ which: String
    ) throws(SectionedDiffError)
        -> [Item: ItemPath]
    {
        var paths: [Item: ItemPath] = [:]
        paths.reserveCapacity(list.itemCount)
        for (s, section) in list.sections.enumerated() {
            for (r, item) in section.items.enumerated() {
                if paths.updateValue(ItemPath(section: s, item: r), forKey: item) != nil {
                    throw SectionedDiffError(message: "the \(which) lists hold item \(item) twice")
                }
            }
        }
        return paths
    }
}

extension ChangeSet.ItemChange: Sendable where Item: Sendable {}
extension ChangeSet: Sendable where SectionKey: Sendable, Item: Sendable {}
