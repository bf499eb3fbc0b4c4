extension ChangeSet {
    /// One step of the sequential form: applied in order to the old lists, the steps give the new lists.
    public enum Step: Hashable {
        /// Remove the item at a path of the current lists.
        case removeItem(Item, at: ItemPath)
        /// Remove the section at an index of the current lists, with what it still holds.
        case removeSection(at: Int)
        /// Insert an empty section with this key.
        case insertSection(SectionKey, at: Int)
        /// Insert the item at a path of the current lists.
        case insertItem(Item, at: ItemPath)
    }

    /// The sequential form: moves split into a remove and an insert. Item removals (descending old path), section
    /// removals (descending), section insertions (ascending, empty), item insertions (ascending new path).
    @inlinable
    public var steps: [Step] {
        var removals: [(ItemPath, Item)] = []
        for change in deletedItems where oldSurvives[change.from!.section] {
            removals.append((change.from!, change.item))
        }
        for change in movedItems where oldSurvives[change.from!.section] {
            removals.append((change.from!, change.item))
        }
        removals.sort { $0.0 > $1.0 }
        var insertions: [(ItemPath, Item)] = []
        for change in insertedItems where newSurvives[change.to!.section] {
            insertions.append((change.to!, change.item))
        }
        for change in movedItems where newSurvives[change.to!.section] { insertions.append((change.to!, change.item)) }
        for index in insertedSections {
            for (row, item) in new.sections[index].items.enumerated() {
                insertions.append((ItemPath(section: index, item: row), item))
            }
        }
        insertions.sort { $0.0 < $1.0 }
        var steps: [Step] = removals.map { .removeItem($0.1, at: $0.0) }
        steps += deletedSections.reversed().map { .removeSection(at: $0) }
        steps += insertedSections.map { .insertSection(new.sections[$0].key, at: $0) }
        steps += insertions.map { .insertItem($0.1, at: $0.0) }
        return steps
    }

    /// Applies the steps to `lists` (normally ``old``).
    ///
    /// - Throws: ``SectionedDiffError`` when a step does not fit `lists` (they are not the lists the change set was
    ///   computed from).
    public func apply(
        to lists: SectionedList<SectionKey, Item>
    ) throws(SectionedDiffError) -> SectionedList<SectionKey, Item> {
        var sections = lists.sections
        for step in steps {
            switch step {
            case .removeItem(let item, let path):
                guard sections.indices.contains(path.section), sections[path.section].items.indices.contains(path.item),
                    sections[path.section].items[path.item] == item
                else { throw SectionedDiffError(message: "cannot remove \(item) at \(path)") }
                sections[path.section].items.remove(at: path.item)
            case .removeSection(let index):
                guard sections.indices.contains(index) else { throw SectionedDiffError(message: "no section \(index)") }
                sections.remove(at: index)
            case .insertSection(let key, let index):
                guard index <= sections.count else {
                    throw SectionedDiffError(message: "cannot insert section \(index)")
                }
                sections.insert(.init(key: key, items: []), at: index)
            case .insertItem(let item, let path):
                guard sections.indices.contains(path.section), path.item <= sections[path.section].items.count else {
                    throw SectionedDiffError(message: "cannot insert \(item) at \(path)")
                }
                sections[path.section].items.insert(item, at: path.item)
            }
        }
        return SectionedList(sections)
    }

    /// One splice of a flat list: remove `removed` items at `offset`, then insert `inserted` there.
    public struct Splice: Hashable {
        /// Where the splice starts in the flat list.
        public var offset: Int
        /// How many items it removes there.
        public var removed: Int
        /// The items it inserts there.
        public var inserted: [Item]

        /// Creates a splice.
        @inlinable
        public init(offset: Int, removed: Int, inserted: [Item]) {
            self.offset = offset
            self.removed = removed
            self.inserted = inserted
        }
    }

    /// The steps as splices of the flattened list (all sections' items in order), for list models without
    /// sections. Applied in order to the old flat list, they give the new one.
    @inlinable
    public var splices: [Splice] {
        var counts = old.sections.map(\.items.count)
        func offset(_ path: ItemPath) -> Int { counts[..<path.section].reduce(0, +) + path.item }
        var splices: [Splice] = []
        func add(_ splice: Splice) {
            if var last = splices.last {
                // Descending single removals next to each other, and ascending insertions, merge.
                if splice.inserted.isEmpty && last.inserted.isEmpty && splice.offset + splice.removed == last.offset {
                    last.offset = splice.offset
                    last.removed += splice.removed
                    splices[splices.count - 1] = last
                    return
                }
                if splice.removed == 0 && last.removed == 0 && splice.offset == last.offset + last.inserted.count {
                    last.inserted += splice.inserted
                    splices[splices.count - 1] = last
                    return
                }
            }
            splices.append(splice)
        }
        for step in steps {
            switch step {
            case .removeItem(_, let path):
                add(Splice(offset: offset(path), removed: 1, inserted: []))
                counts[path.section] -= 1
            case .removeSection(let index):
                if counts[index] > 0 {
                    add(Splice(offset: offset(ItemPath(section: index, item: 0)), removed: counts[index], inserted: []))
                }
                counts.remove(at: index)
            case .insertSection(_, let index):
                counts.insert(0, at: index)
            case .insertItem(let item, let path):
                add(Splice(offset: offset(path), removed: 0, inserted: [item]))
                counts[path.section] += 1
            }
        }
        return splices
    }

    /// The change of the flattened list as a standard `CollectionDifference` (moves associated), for consumers
    /// without sections; `nil` if the standard library refuses it.
    @inlinable
    public var flatDifference: CollectionDifference<Item>? {
        var oldOffset: [Item: Int] = [:]
        for (offset, item) in old.sections.flatMap(\.items).enumerated() { oldOffset[item] = offset }
        var newOffset: [Item: Int] = [:]
        for (offset, item) in new.sections.flatMap(\.items).enumerated() { newOffset[item] = offset }
        var removed = Set<Item>()
        var inserted = Set<Item>()
        for step in steps {
            switch step {
            case .removeItem(let item, _): removed.insert(item)
            case .removeSection(let index): removed.formUnion(old.sections[index].items)
            case .insertItem(let item, _): inserted.insert(item)
            case .insertSection: break
            }
        }
        var changes: [CollectionDifference<Item>.Change] = []
        for item in removed {
            guard let offset = oldOffset[item] else { continue }
            changes.append(
                .remove(offset: offset, element: item, associatedWith: inserted.contains(item) ? newOffset[item] : nil))
        }
        for item in inserted {
            guard let offset = newOffset[item] else { continue }
            changes.append(
                .insert(offset: offset, element: item, associatedWith: removed.contains(item) ? oldOffset[item] : nil))
        }
        return CollectionDifference(changes)
    }
}

extension ChangeSet.Step: Sendable where SectionKey: Sendable, Item: Sendable {}
extension ChangeSet.Splice: Sendable where Item: Sendable {}
