import LMDB

/// How a fetch reads the store: which index (if any) serves it, and what is left to do in memory.
///
/// `explain` returns one; its description is what `store-inspect --explain` prints.
public struct QueryPlan: Sendable, CustomStringConvertible {
    /// How records are reached.
    public enum Access: Sendable, Equatable {
        /// Every record of the entity, predicate evaluated on each.
        case fullScan
        /// Index entries in key ranges of one attribute's index (equality, IN, range, BEGINSWITH).
        case indexRanges(attribute: String, ranges: Int, description: String)
        /// The index of the first sort key, walked in order. No sort is left to do in memory when it is the only
        /// sort key, ascending, and its index keys are exact; otherwise the rows read are sorted, and with a limit
        /// the walk stops once the window is full and the key changes.
        case indexOrder(attribute: String, descending: Bool)
        /// The records of the objects `SELF == %@` or `SELF IN %@` names, read by their IDs.
        case objectIDs(count: Int)
        /// The objects `relationship == %@` or `relationship IN %@` (a to-one), or `ANY relationship == %@` or
        /// `ANY relationship IN %@` (a to-many: `tags CONTAINS %@`) asks for, read from the inverse relationship of
        /// the `count` objects named: the store keeps every link in both directions, so a folder's notes are the ones
        /// its `notes` holds, where a scan read every note's `folder`.
        case inverse(relationship: String, inverse: String, count: Int)
        /// The objects `relationship.attribute` compares (a to-one, or `ANY` of a to-many, with a comparison that
        /// nil fails: `folder.name == %@`, `ANY tags.name BEGINSWITH %@`) asks for: the destination's objects that
        /// match `predicate` fetched first (through its own plan: an index, or a scan of the destination), then the
        /// objects their inverse relationship holds, where a scan read every object's relationship and its target.
        case join(relationship: String, inverse: String, predicate: String)
    }

    /// The entity.
    public var entity: String
    /// How records are reached.
    public var access: Access
    /// Whether a predicate is evaluated on each record reached.
    public var filters: Bool
    /// Whether the results are sorted in memory.
    public var sortsInMemory: Bool
    /// Whether the fetch stops early once offset + limit results are found: the results are read in their order (an
    /// index's, or a scan's by primary key when there are no sort keys), or an index's order is cut after the rows of
    /// the last key the window needs.
    public var stopsEarly: Bool

    /// For a fetch of an entity with sub-entities: the plan of each entity it reads, whose results are merged
    /// (in sort order when sorted); empty otherwise.
    public var parts: [QueryPlan] = []

    var ranges: [KeyRange] = []
    var indexPosition: Int?
    /// For `.inverse`: the inverse relationship's name and the objects whose targets are read.
    var inverse: QueryPlanner.InverseAccess?
    /// For `.join`: the relationship, its inverse and the destination's predicate.
    var join: QueryPlanner.JoinAccess?
    /// For `.objectIDs`: the primary keys read, ascending.
    var primaryKeys: [UInt64] = []
    /// The one index range yields the rows in the requested order (sorted by the range's attribute only): they
    /// are read in index order, without collecting and sorting.
    var rangeInSortOrder = false

    public var description: String {
        guard self.parts.isEmpty else {
            return self.parts.map { "\($0.entity): \($0)" }.joined(separator: " | ")
                + "; merge the results of \(self.parts.map(\.entity).joined(separator: ", "))"
                + (sortsInMemory ? " in sort order" : "") + (stopsEarly ? "; stop at the limit" : "")
        }
        var parts: [String] = []
        switch access {
        case .fullScan: parts.append("full scan of \(entity)")
        case .indexRanges(let attribute, _, let ranges):
            parts.append(
                "index \(entity).\(attribute): \(ranges)" + (filters ? "" : " (the index holds exactly the matches)"))
        case .indexOrder(let attribute, let descending):
            parts.append("index \(entity).\(attribute) in \(descending ? "descending" : "ascending") order")
        case .objectIDs(let count):
            parts.append("\(count) \(entity) object\(count == 1 ? "" : "s") read by ID")
        case .inverse(let relationship, let inverse, let count):
            parts.append(
                "the \(entity) objects \(inverse) holds, of \(count) object\(count == 1 ? "" : "s") (the inverse of"
                    + " \(relationship))" + (filters ? "" : " (exactly the matches)"))
        case .join(let relationship, let inverse, let predicate):
            parts.append(
                "the \(entity) objects \(inverse) holds, of the \(join?.destination ?? "") objects matching \(predicate)"
                    + " (the inverse of \(relationship))" + (filters ? "" : " (exactly the matches)"))
        }
        if filters { parts.append("filter each record with the predicate") }
        parts.append(sortsInMemory ? "sort in memory" : "no sort needed")
        if stopsEarly { parts.append("stop at the limit") }
        return parts.joined(separator: "; ")
    }
}

/// Chooses a plan for a fetch request.
enum QueryPlanner {
    /// The plan for `request`, given its predicate's best index (``bestIndex(_:_:_:)``, kept with the request's
    /// prepared form).
    static func plan(
        _ request: FetchRequest, entity: Entity, storage: EntityStorage, mergesPending: Bool, index: Choice?
    ) -> QueryPlan {
        var plan = QueryPlan(
            entity: entity.name, access: .fullScan, filters: request.predicate != nil,
            sortsInMemory: !request.sortKeys.isEmpty, stopsEarly: false)
        if let keys = index?.primaryKeys {
            plan.access = .objectIDs(count: keys.count)
            plan.primaryKeys = keys
            return plan
        }
        if let choice = index, let join = choice.join {
            plan.access = .join(
                relationship: join.relationship, inverse: join.inverse, predicate: join.predicate.description)
            plan.join = join
            plan.filters = !choice.exact
            return plan
        }
        if let choice = index, let inverse = choice.inverse {
            plan.access = .inverse(
                relationship: inverse.relationship, inverse: inverse.name, count: inverse.objects.count)
            plan.inverse = inverse
            plan.filters = !choice.exact
            return plan
        }
        if let choice = index {
            plan.access = .indexRanges(
                attribute: entity.attributes[choice.position].name, ranges: choice.ranges.count,
                description: choice.description)
            plan.ranges = choice.ranges
            plan.indexPosition = choice.position
            plan.filters = !choice.exact
            // One range of a scalar index, sorted by that attribute ascending only: index order (value, then
            // primary key) is the requested order, ties included.
            let attribute = entity.attributes[choice.position]
            if choice.ranges.count == 1, request.sortKeys.count == 1, let first = request.sortKeys.first,
                first.ascending, first.keyPath == attribute.name, attribute.type.isScalar
            {
                plan.rangeInSortOrder = true
                plan.sortsInMemory = false
                plan.stopsEarly = request.fetchLimit > 0 && !mergesPending
            }
            return plan
        }
        if let first = request.sortKeys.first, let position = entity.attributeIndex(first.keyPath),
            let index = storage.indexes[position], !entity.attributes[position].isCaseInsensitive,
            first.comparison == .binary || entity.attributes[position].type != .string
        {
            _ = index
            plan.access = .indexOrder(attribute: first.keyPath, descending: !first.ascending)
            plan.indexPosition = position
            // Within one key, index entries come in primary-key order: an ascending walk matches the tie-break.
            // A string's or binary value's key is cut at LMDB's key limit and a decimal's is a double, so values
            // that share a key are not in order: the rows are sorted, as they are for more keys or a descending
            // walk. Every row whose key comes before the last one the window needs is read first, so a limited
            // walk stops after the rows of that key.
            let type = entity.attributes[position].type
            let exactKeys = type.isScalar || type == .uuid
            plan.sortsInMemory = request.sortKeys.count > 1 || !first.ascending || !exactKeys
            plan.stopsEarly = request.fetchLimit > 0 && !mergesPending
        } else if request.sortKeys.isEmpty {
            // A scan without sort keys reads the results in their order (by primary key): it stops at the limit.
            plan.stopsEarly = request.fetchLimit > 0 && !mergesPending
        }
        return plan
    }

    struct Choice {
        var position: Int
        var ranges: [KeyRange]
        var score: Int
        var description: String
        /// The ranges hold exactly the rows that satisfy the comparisons (int64 and bool keys, no options, no nil):
        /// no row needs the predicate evaluated again.
        var exact = false
        /// How many conjuncts of the predicate the ranges serve.
        var conjuncts = 1
        /// For `SELF == %@` or `SELF IN %@`: the primary keys of the entity's objects named, ascending (the ranges
        /// and position are unused).
        var primaryKeys: [UInt64]?
        /// For a relationship compared with objects (``QueryPlanner/inverseChoice(_:_:_:)``): the inverse
        /// relationship to read (the ranges and position are unused).
        var inverse: InverseAccess?
        /// For a relationship's attribute compared with a value (``QueryPlanner/joinChoice(_:_:_:)``): the
        /// destination's predicate and the inverse to read (the ranges and position are unused).
        var join: JoinAccess?
    }

    /// A relationship's attribute compared with a value, served by a fetch of the destination and its inverse
    /// (``QueryPlan/Access/join``).
    struct JoinAccess {
        /// The compared relationship, of the fetched entity.
        var relationship: String
        /// Its destination (with its sub-entities), and the inverse relationship there.
        var destination: String
        var inverse: String
        /// The comparison, of the destination's attribute.
        var predicate: FetchPredicate
    }

    /// A relationship compared with objects, served by its inverse (``QueryPlan/Access/inverse``).
    struct InverseAccess {
        /// The compared relationship, of the fetched entity.
        var relationship: String
        /// Its destination, and the inverse relationship there, whose targets are the candidates.
        var destination: String
        var name: String
        /// The objects compared with (each of the destination's kind, or it holds nothing).
        var objects: [ObjectID]
    }

    /// The best index-served conjunct of the predicate's top-level AND.
    static func bestIndex(
        _ predicate: FetchPredicate, _ entity: Entity, _ storage: EntityStorage, _ schema: Schema
    ) -> Choice? {
        let conjuncts: [FetchPredicate]
        if case .and(let parts) = predicate { conjuncts = parts } else { conjuncts = [predicate] }
        var best: Choice?
        for conjunct in conjuncts {
            // The objects themselves, named: read by ID, whatever else the predicate says.
            if case .comparison(let c) = conjunct, c.quantifier == nil, FetchPredicate.isSelf(c.keyPath, in: entity) {
                let ids: [ObjectID]
                switch (c.op, c.operand) {
                case (.equal, .object(let id)): ids = [id]
                case (.in, .objects(let list)): ids = list
                default: continue
                }
                // By primary key, as predicates compare objects (the IDs are checked to be of the hierarchy): a key
                // this entity does not hold reads nothing.
                let keys = Set(ids.lazy.map(\.primaryKey)).sorted()
                return Choice(
                    position: -1, ranges: [], score: .max, description: "\(keys.count) objects by ID",
                    primaryKeys: keys)
            }
            if let choice = inverseChoice(conjunct, entity, schema) ?? joinChoice(conjunct, entity, schema) {
                if choice.score > (best?.score ?? 0) { best = choice }
                continue
            }
            guard case .comparison(let c) = conjunct, c.quantifier == nil, c.keyPath.count == 1,
                let position = entity.attributeIndex(c.keyPath[0]), storage.indexes[position] != nil
            else { continue }
            let attribute = entity.attributes[position]
            guard var choice = choice(c, attribute) else { continue }
            choice.position = position
            if let current = best, current.position == position, current.ranges.count == 1, choice.ranges.count == 1,
                let merged = intersect(current.ranges[0], choice.ranges[0])
            {
                best = Choice(
                    position: position, ranges: [merged], score: max(current.score, choice.score) + 1,
                    description: current.description + " and " + choice.description,
                    exact: current.exact && choice.exact, conjuncts: current.conjuncts + 1)
                continue
            }
            if choice.score > (best?.score ?? 0) { best = choice }
        }
        // Exact only when the ranges serve every conjunct.
        if best?.conjuncts != conjuncts.count { best?.exact = false }
        return best
    }

    /// `relationship == %@` or `relationship IN %@` of a to-one relationship with objects, or `ANY relationship ==
    /// %@` (`relationship CONTAINS %@`) or `ANY relationship IN %@` of a to-many: served by the inverse relationship,
    /// whose entries are the same links seen from the other side. Only where no delete leaves a link on this side
    /// alone: a destination object deleted under the inverse's `noAction` rule takes its own entries with it and
    /// leaves this side's, which a scan would still match.
    static func inverseChoice(_ conjunct: FetchPredicate, _ entity: Entity, _ schema: Schema) -> Choice? {
        // The operand first: a comparison of values (most of them) is not one.
        guard case .comparison(let c) = conjunct else { return nil }
        let objects: [ObjectID]
        let score: Int
        switch (c.op, c.operand) {
        case (.equal, .object(let id)):
            objects = [id]
            score = 9
        case (.in, .objects(let list)):
            // Each once (a list may name one twice).
            var seen = Set<ObjectID>()
            objects = list.filter { seen.insert($0).inserted }
            score = 7
        default:
            return nil
        }
        // A to-one compared as it is; a to-many through ANY (`tags CONTAINS %@` and `%@ IN tags` read the same).
        guard c.subquery == nil, c.keyPath.count == 1, let relationship = entity.relationship(c.keyPath[0]),
            c.quantifier == (relationship.isToMany ? .any : nil), !relationship.inverse.isEmpty,
            let inverse = schema.entity(relationship.destination)?.relationship(relationship.inverse),
            inverse.deleteRule != .noAction
        else { return nil }
        return Choice(
            position: -1, ranges: [], score: score,
            description: "\(relationship.name) \(c.op.rawValue) \(objects.count) object(s)", exact: true,
            inverse: InverseAccess(
                relationship: relationship.name, destination: relationship.destination, name: inverse.name,
                objects: objects))
    }

    /// `relationship.attribute` (or a longer path, `folder.owner.name`) compared with a value, of a to-one, or
    /// through `ANY` where the path passes through a to-many: served by the destination's objects that match the
    /// rest of the path's comparison (fetched through their own plan) and the objects their inverse holds. An object
    /// whose relationship holds nothing reads the attribute as nil, so only a comparison that nil fails is served
    /// (not `!=`, not `== nil`, not an `IN` list with nil). The objects a fetch of the destination returns are the
    /// ones whose attribute a scan would read through the relationship (the same snapshot, the same unsaved
    /// changes), so the answer is exact. Unlike ``inverseChoice(_:_:_:)``, a `noAction` rule does no harm: the
    /// link a deleted destination object leaves on this side reaches nothing, whose attribute reads as nil, and a
    /// deleted object is not among the destination's matches.
    static func joinChoice(_ conjunct: FetchPredicate, _ entity: Entity, _ schema: Schema) -> Choice? {
        guard case .comparison(let c) = conjunct, c.subquery == nil, c.keyPath.count >= 2 else { return nil }
        switch (c.op, c.operand) {
        case (.notEqual, _): return nil
        case (_, .value(let value)) where !value.isNull: break
        case (.in, .list(let values)) where !values.contains(where: \.isNull): break
        case (.between, .list(let values)) where values.count == 2 && !values.contains(where: \.isNull): break
        default: return nil
        }
        guard let relationship = entity.relationship(c.keyPath[0]), !relationship.inverse.isEmpty,
            let destination = schema.entity(relationship.destination),
            let inverse = destination.relationship(relationship.inverse)
        else { return nil }
        // The rest of the path, from the destination: relationships, then one of their attributes
        // (`folder.owner.name`). The destination's fetch compares it as this one would, through ANY where it
        // passes through a to-many.
        var current = destination
        var restIsToMany = false
        for step in c.keyPath.dropFirst().dropLast() {
            guard let next = current.relationship(step), let entity = schema.entity(next.destination) else {
                return nil
            }
            restIsToMany = restIsToMany || next.isToMany
            current = entity
        }
        guard current.attributeIndex(c.keyPath[c.keyPath.count - 1]) != nil,
            c.quantifier == (relationship.isToMany || restIsToMany ? .any : nil)
        else { return nil }
        var nested = c
        nested.keyPath = Array(c.keyPath.dropFirst())
        nested.quantifier = restIsToMany ? .any : nil
        return Choice(
            position: -1, ranges: [], score: 4,
            description: "\(c.keyPath.joined(separator: ".")) \(c.op.rawValue) \(c.operand)", exact: true,
            join: JoinAccess(
                relationship: relationship.name, destination: destination.name, inverse: inverse.name,
                predicate: .comparison(nested)))
    }

    static func choice(_ c: FetchPredicate.Comparison, _ attribute: Attribute) -> Choice? {
        let folded = attribute.isCaseInsensitive
        // A case-insensitive index holds folded keys: it serves comparisons that fold (a superset of any option
        // set for equality); a binary index serves only comparisons without options.
        let exactUsable = folded || c.options.isEmpty
        func key(_ value: Value) -> (bytes: [UInt8], cut: Bool) {
            var buffer: [UInt8] = []
            let cut = IndexKey.encode(value, caseInsensitive: folded, into: &buffer)
            return (buffer, cut)
        }
        func sameType(_ value: Value) -> Bool { value.type == attribute.type }
        let name = attribute.name
        var result = choose()
        // Integers and booleans have one key per value and no NaN: the range is the comparison.
        if [.int64, .bool].contains(attribute.type), !folded, c.options.isEmpty,
            [.equal, .in, .between, .less, .lessOrEqual, .greater, .greaterOrEqual].contains(c.op)
        {
            switch c.operand {
            case .value(let value): result?.exact = sameType(value)
            case .list(let values): result?.exact = values.allSatisfy(sameType)
            default: break
            }
        }
        return result

        func choose() -> Choice? {
            switch (c.op, c.operand) {
            case (.equal, .value(let value)) where exactUsable && (value.isNull || sameType(value)):
                return Choice(
                    position: 0, ranges: [.exactly(key(value).bytes)], score: 10, description: "\(name) == \(value)")
            case (.in, .list(let values)) where exactUsable && values.allSatisfy({ $0.isNull || sameType($0) }):
                let keys = Set(values.map { key($0).bytes }).sorted { $0.lexicographicallyPrecedes($1) }
                return Choice(
                    position: 0, ranges: keys.map { .exactly($0) }, score: 8,
                    description: "\(name) IN \(values.count) values")
            case (.beginsWith, .value(.string(let prefix)))
            where c.options.isEmpty && !folded || folded && c.options == .caseDiacriticInsensitive:
                let k = key(.string(prefix))
                return Choice(
                    position: 0, ranges: [.prefix(k.bytes)], score: 5, description: "\(name) BEGINSWITH \"\(prefix)\"")
            case (.between, .list(let values))
            where values.count == 2 && !folded && c.options.isEmpty && values.allSatisfy(sameType):
                let (low, high) = (key(values[0]), key(values[1]))
                return Choice(
                    position: 0, ranges: [KeyRange(lower: .init(low.bytes), upper: .init(high.bytes))], score: 5,
                    description: "\(name) BETWEEN \(values[0]) AND \(values[1])")
            case (.less, .value(let v)), (.lessOrEqual, .value(let v)), (.greater, .value(let v)),
                (.greaterOrEqual, .value(let v)):
                guard !folded, c.options.isEmpty, sameType(v) else { return nil }
                let k = key(v)
                // Nil sorts first in the index and matches no ordering comparison: start after it.
                let nonNull = KeyRange.Bound([IndexKey.valueTag])
                let range: KeyRange
                switch c.op {
                case .less, .lessOrEqual:
                    range = KeyRange(lower: nonNull, upper: .init(k.bytes, inclusive: c.op == .lessOrEqual || k.cut))
                default:
                    range = KeyRange(lower: .init(k.bytes, inclusive: c.op == .greaterOrEqual || k.cut))
                }
                return Choice(position: 0, ranges: [range], score: 3, description: "\(name) \(c.op.rawValue) \(v)")
            default:
                return nil
            }
        }
    }

    /// The intersection of two ranges, when both bound the same keys.
    static func intersect(_ a: KeyRange, _ b: KeyRange) -> KeyRange? {
        func later(_ x: KeyRange.Bound?, _ y: KeyRange.Bound?) -> KeyRange.Bound? {
            guard let x else { return y }
            guard let y else { return x }
            if x.bytes == y.bytes { return .init(x.bytes, inclusive: x.inclusive && y.inclusive) }
            return x.bytes.lexicographicallyPrecedes(y.bytes) ? y : x
        }
        func earlier(_ x: KeyRange.Bound?, _ y: KeyRange.Bound?) -> KeyRange.Bound? {
            guard let x else { return y }
            guard let y else { return x }
            if x.bytes == y.bytes { return .init(x.bytes, inclusive: x.inclusive && y.inclusive) }
            return x.bytes.lexicographicallyPrecedes(y.bytes) ? x : y
        }
        return KeyRange(lower: later(a.lower, b.lower), upper: earlier(a.upper, b.upper))
    }
}
