import SectionedDiff

/// Checks a batch the way UITableView's `performBatchUpdates` does, and more strictly.
///
/// - every section index in range and used once; the section count adds up;
/// - no row delete, move source or update inside a deleted section; no row insert, move target or update inside
///   an inserted section;
/// - every row path in range of its section before (deletes, move sources, update sources) or after (inserts,
///   move targets, update targets) the batch;
/// - one operation per item and per path;
/// - every surviving section's count adds up: old − deletes − moves out + inserts + moves in = new.
public enum BatchValidator {
    /// The problems found; empty when the batch is valid.
    public static func problems<S: Hashable, I: Hashable>(
        _ batch: ChangeSet<S, I>.Batch, oldCounts: [Int], newCounts: [Int]
    ) -> [String] {
        var problems: [String] = []
        let deleted = Set(batch.deletedSections)
        let inserted = Set(batch.insertedSections)
        if deleted.count != batch.deletedSections.count { problems.append("a section is deleted twice") }
        if inserted.count != batch.insertedSections.count { problems.append("a section is inserted twice") }
        for s in deleted where !oldCounts.indices.contains(s) { problems.append("deleted section \(s) out of range") }
        for s in inserted where !newCounts.indices.contains(s) { problems.append("inserted section \(s) out of range") }
        if oldCounts.count - deleted.count + inserted.count != newCounts.count {
            problems.append(
                "section count: \(oldCounts.count) - \(deleted.count) + \(inserted.count) != \(newCounts.count)")
            return problems
        }
        let survivorsOld = oldCounts.indices.filter { !deleted.contains($0) }
        let survivorsNew = newCounts.indices.filter { !inserted.contains($0) }
        var oldToNew: [Int: Int] = [:]
        for (o, n) in zip(survivorsOld, survivorsNew) { oldToNew[o] = n }

        var usedFrom = Set<ItemPath>()
        var usedTo = Set<ItemPath>()
        var usedItems = Set<I>()
        var delta = [Int: Int]()  // by new section index
        func from(_ path: ItemPath?, _ what: String) {
            guard let path else { return problems.append("\(what) without a source path") }
            if deleted.contains(path.section) { problems.append("\(what) at \(path) inside deleted section") }
            if !oldCounts.indices.contains(path.section) || !(0..<oldCounts[path.section]).contains(path.item) {
                problems.append("\(what) at \(path) out of range")
            }
            if !usedFrom.insert(path).inserted { problems.append("two operations at old path \(path)") }
        }
        func to(_ path: ItemPath?, _ what: String) {
            guard let path else { return problems.append("\(what) without a target path") }
            if inserted.contains(path.section) { problems.append("\(what) at \(path) inside inserted section") }
            if !newCounts.indices.contains(path.section) || !(0..<newCounts[path.section]).contains(path.item) {
                problems.append("\(what) at \(path) out of range")
            }
            if !usedTo.insert(path).inserted { problems.append("two operations at new path \(path)") }
        }
        func item(_ item: I) {
            if !usedItems.insert(item).inserted { problems.append("two operations on item \(item)") }
        }
        for change in batch.deletedItems {
            from(change.from, "delete")
            item(change.item)
            if let s = change.from?.section, let n = oldToNew[s] { delta[n, default: 0] -= 1 }
        }
        for change in batch.insertedItems {
            to(change.to, "insert")
            item(change.item)
            if let t = change.to?.section { delta[t, default: 0] += 1 }
        }
        for change in batch.movedItems {
            from(change.from, "move")
            to(change.to, "move")
            item(change.item)
            if let s = change.from?.section, let n = oldToNew[s] { delta[n, default: 0] -= 1 }
            if let t = change.to?.section { delta[t, default: 0] += 1 }
        }
        // Updates name both paths; UIKit applies them after the structural changes, at the new path, so they may
        // share paths with moves and inserts in other positions but never operate twice on one item.
        for change in batch.updatedItems {
            item(change.item)
            guard let f = change.from, let t = change.to else {
                problems.append("an update without both paths")
                continue
            }
            if deleted.contains(f.section) || inserted.contains(t.section) {
                problems.append("update \(f)->\(t) inside a deleted or inserted section")
            }
            if usedFrom.contains(f) { problems.append("update at old path \(f) also has another operation") }
        }
        for (o, n) in oldToNew where oldCounts[o] + (delta[n] ?? 0) != newCounts[n] {
            problems.append(
                "section \(o)->\(n): \(oldCounts[o]) + \(delta[n] ?? 0) != \(newCounts[n]) (the counts do not add up)")
        }
        return problems
    }

    /// The problems of a change set's batch against its own lists.
    public static func problems<S: Hashable, I: Hashable>(_ changes: ChangeSet<S, I>) -> [String] {
        problems(
            changes.batch, oldCounts: changes.old.sections.map(\.items.count),
            newCounts: changes.new.sections.map(\.items.count))
    }
}
