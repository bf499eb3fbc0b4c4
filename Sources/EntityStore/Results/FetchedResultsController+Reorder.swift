import SectionedDiff

extension FetchedResultsController {
    /// Moves the object at `source` to `destination` the way a user reorders rows, by rewriting its order
    /// attribute (and, across sections, its section attribute) with as few writes as possible, as a user-driven
    /// change: the controller takes the new order silently, since the UI already shows it.
    ///
    /// The controller must be sorted first by `orderKey` (after the section key), an `int64` or `double`
    /// attribute. One write when there is room between the new neighbours; otherwise the shortest run of
    /// neighbours on one side is shifted by one.
    ///
    /// - Throws: ``EntityStoreError/Code/invalidFetchRequest`` when the paths are out of range or the controller is
    ///   not sorted by `orderKey`; what the context throws on writes.
    public func moveObject(from source: ItemPath, to destination: ItemPath, orderKey: String) throws {
        guard let plan, let first = fetchRequest.sortKeys.first, first.keyPath == orderKey,
            let orderIndex = plan.entity.attributeIndex(orderKey),
            [.int64, .double].contains(plan.entity.attributes[orderIndex].type)
        else {
            throw EntityStoreError(
                .invalidFetchRequest,
                "moveObject needs the controller sorted first by '\(orderKey)', an int64 or double attribute",
                entity: fetchRequest.entity, key: orderKey)
        }
        guard let moving = objectID(at: source), displayed.sections.indices.contains(destination.section) else {
            throw EntityStoreError(.invalidFetchRequest, "no object at \(source) or no section \(destination.section)")
        }
        var siblings = displayed.sections[destination.section].items
        siblings.removeAll { $0 == moving }
        guard destination.item <= siblings.count else {
            throw EntityStoreError(.invalidFetchRequest, "no row \(destination.item) in section \(destination.section)")
        }
        let object = try context.object(with: moving)
        let movesSection = destination.section != source.section && sectionNameKeyPath != nil
        if movesSection, let sectionNameKeyPath, plan.entity.attributeIndex(sectionNameKeyPath) == nil {
            throw EntityStoreError(
                .invalidFetchRequest, "moving across sections needs the section key to be an attribute",
                key: sectionNameKeyPath)
        }
        // In display order: ascending values, or negated for a descending sort. Integers are planned in 128 bits,
        // exactly (a double rounds them past 2^53, and negating Int64.min overflows), and written only if every
        // new value fits an int64: a move fails before it changes anything.
        let ascending = first.ascending
        let values: [(ObjectID, Value)]
        if plan.entity.attributes[orderIndex].type == .int64 {
            let writes = try Self.planReorder(siblings, at: destination.item, moving: moving, half: { $0 / 2 }) {
                id -> Int128 in
                guard case .int(let v) = try context.object(with: id).value(forKey: orderKey) else { return 0 }
                return ascending ? Int128(v) : -Int128(v)
            }
            values = try writes.map { id, display in
                guard let integer = Int64(exactly: ascending ? display : -display) else {
                    throw EntityStoreError(
                        .invalidValue,
                        "moving \(moving) needs a '\(orderKey)' of \(ascending ? display : -display) for \(id),"
                            + " past what an int64 holds", entity: fetchRequest.entity, key: orderKey, objectID: id)
                }
                return (id, .int(integer))
            }
        } else {
            let writes = try Self.planReorder(siblings, at: destination.item, moving: moving, half: { $0 / 2 }) {
                id -> Double in
                guard case .double(let v) = try context.object(with: id).value(forKey: orderKey) else { return 0 }
                return ascending ? v : -v
            }
            values = writes.map { id, display in (id, .double(ascending ? display : -display)) }
        }
        try context.performUserDrivenChanges {
            if movesSection, let sectionNameKeyPath {
                try object.setValue(displayed.sections[destination.section].key, forKey: sectionNameKeyPath)
            }
            for (id, value) in values { try context.object(with: id).setValue(value, forKey: orderKey) }
        }
    }

    /// The order values (in display order) to write for `moving` to land at `item` among `siblings` (the
    /// destination section's rows without it): one value between the new neighbours when there is room, else the
    /// shorter run of tightly packed neighbours shifted by one.
    static func planReorder<N: SignedNumeric & Comparable>(
        _ siblings: [ObjectID], at item: Int, moving: ObjectID, half: (N) -> N, order: (ObjectID) throws -> N
    ) throws -> [(ObjectID, N)] {
        let before = item > 0 ? try order(siblings[item - 1]) : nil
        let after = item < siblings.count ? try order(siblings[item]) : nil
        switch (before, after) {
        case (nil, nil): return [(moving, 0)]
        case (let low?, nil): return [(moving, low + 1)]
        case (nil, let high?): return [(moving, high - 1)]
        case (let low?, let high?):
            let middle = low + half(high - low)
            if middle > low && middle < high { return [(moving, middle)] }
            // No room: shift the shorter run of tightly packed neighbours by one.
            var down: [ObjectID] = []
            var value = low
            for index in stride(from: item - 1, through: 0, by: -1) {
                let current = try order(siblings[index])
                if index < item - 1 && current < value - 1 { break }
                down.append(siblings[index])
                value = current
            }
            var up: [ObjectID] = []
            value = high
            for index in item..<siblings.count {
                let current = try order(siblings[index])
                if index > item && current > value + 1 { break }
                up.append(siblings[index])
                value = current
            }
            var writes: [(ObjectID, N)]
            if up.count <= down.count {
                writes = [(moving, low + 1)]
                var next = low + 2
                for id in up {
                    if try order(id) >= next { break }
                    writes.append((id, next))
                    next += 1
                }
            } else {
                writes = [(moving, high - 1)]
                var next = high - 2
                for id in down {
                    if try order(id) <= next { break }
                    writes.append((id, next))
                    next -= 1
                }
            }
            return writes
        }
    }
}
