import SectionedDiff

/// A model kept in step with a controller only through its per-item and per-section callbacks, applied the way
/// UITableView applies a batch: deletes and move sources at old paths, section deletes and inserts, then inserts
/// and move targets at new paths.
public struct CallbackReplica<Item: Hashable> {
    public var sections: [[Item]]
    var deletedRows: [(Int, Int)] = []
    var deletedSections: [Int] = []
    var insertedSections: [(index: Int, items: [Item])] = []
    var placed: [(Int, Int, Item)] = []

    public init(_ sections: [[Item]]) { self.sections = sections }

    public mutating func begin() {
        deletedRows = []
        deletedSections = []
        insertedSections = []
        placed = []
    }

    public mutating func delete(at section: Int, _ row: Int) { deletedRows.append((section, row)) }
    public mutating func insert(_ item: Item, at section: Int, _ row: Int) { placed.append((section, row, item)) }
    public mutating func move(_ item: Item, from: (Int, Int), to: (Int, Int)) {
        deletedRows.append(from)
        placed.append((to.0, to.1, item))
    }
    public mutating func deleteSection(_ index: Int) { deletedSections.append(index) }
    /// A section inserted with the items it arrives with (a table view asks its data source for them: they get no
    /// row callback).
    public mutating func insertSection(_ index: Int, items: [Item] = []) { insertedSections.append((index, items)) }

    /// Applies the collected batch; returns a problem when it cannot apply.
    public mutating func end() -> String? {
        var working = sections.map { $0.map(Optional.some) }
        for (s, r) in deletedRows {
            guard working.indices.contains(s), working[s].indices.contains(r), working[s][r] != nil else {
                return "cannot delete row [\(s),\(r)]"
            }
            working[s][r] = nil
        }
        var kept: [[Item]] = []
        for (s, section) in working.enumerated() where !deletedSections.contains(s) {
            kept.append(section.compactMap { $0 })
        }
        for (index, items) in insertedSections.sorted(by: { $0.index < $1.index }) {
            guard index <= kept.count else { return "cannot insert section \(index)" }
            kept.insert(items, at: index)
        }
        for (s, r, item) in placed.sorted(by: { ($0.0, $0.1) < ($1.0, $1.1) }) {
            guard kept.indices.contains(s), r <= kept[s].count else { return "cannot place \(item) at [\(s),\(r)]" }
            kept[s].insert(item, at: r)
        }
        sections = kept
        return nil
    }
}
