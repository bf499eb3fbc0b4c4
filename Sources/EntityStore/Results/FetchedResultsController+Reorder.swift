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
        let isInt = plan.entity.attributes[orderIndex].type == .int64
        // In display order: ascending values, or descending for a descending sort.
        let sign: Double = first.ascending ? 1 : -1
        func order(_ id: ObjectID) throws -> Double {
            switch try context.object(with: id).value(forKey: orderKey) {
            case .int(let v): sign * Double(v)
            case .double(let v): sign * v
            default: 0
            }
        }
        func write(_ id: ObjectID, _ displayValue: Double) throws {
            let value = sign * displayValue
            try context.object(with: id).setValue(isInt ? .int(Int64(value)) : .double(value), forKey: orderKey)
        }
        let before = destination.item > 0 ? try order(siblings[destination.item - 1]) : nil
        let after = destination.item < siblings.count ? try order(siblings[destination.item]) : nil
        try context.performUserDrivenChanges {
            if destination.section != source.section, let sectionNameKeyPath {
                guard plan.entity.attributeIndex(sectionNameKeyPath) != nil else {
                    throw EntityStoreError(
                        .invalidFetchRequest, "moving across sections needs the section key to be an attribute",
                        key: sectionNameKeyPath)
                }
                try object.setValue(displayed.sections[destination.section].key, forKey: sectionNameKeyPath)
            }
            switch (before, after) {
            case (nil, nil): try write(moving, 0)
            case (let low?, nil): try write(moving, isInt ? low + 1 : low + 1)
            case (nil, let high?): try write(moving, isInt ? high - 1 : high - 1)
            case (let low?, let high?):
                let middle = isInt ? (low + (high - low) / 2).rounded(.down) : (low + high) / 2
                if middle > low && middle < high {
                    try write(moving, middle)
                    return
                }
                // No room: shift the shorter run of tightly packed neighbours by one.
                let step: Double = 1
                var down: [ObjectID] = []
                var value = low
                for index in stride(from: destination.item - 1, through: 0, by: -1) {
                    let current = try order(siblings[index])
                    if index < destination.item - 1 && current < value - step { break }
                    down.append(siblings[index])
                    value = current
                }
                var up: [ObjectID] = []
                value = high
                for index in destination.item..<siblings.count {
                    let current = try order(siblings[index])
                    if index > destination.item && current > value + step { break }
                    up.append(siblings[index])
                    value = current
                }
                if up.count <= down.count {
                    try write(moving, low + step)
                    var next = low + 2 * step
                    for id in up {
                        if try order(id) >= next { break }
                        try write(id, next)
                        next += step
                    }
                } else {
                    try write(moving, high - step)
                    var next = high - 2 * step
                    for id in down {
                        if try order(id) <= next { break }
                        try write(id, next)
                        next -= step
                    }
                }
            }
        }
    }
}
