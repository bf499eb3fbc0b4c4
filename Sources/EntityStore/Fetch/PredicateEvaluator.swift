import Foundation

/// A key path resolved against the schema.
struct ResolvedKeyPath: Hashable {
    enum Terminal: Hashable {
        case attribute(Int, Attribute)
        /// The key path ends at a relationship: compared by object ID.
        case relationship(Relationship)
        /// `@count` of the last step's to-many relationship.
        case count
        /// `@sum`, `@avg`, `@min` or `@max` of an attribute over the last step's to-many relationship.
        case collection(CollectionOperator, Int, Attribute)
        /// `SELF`: the object itself, compared by object ID.
        case object
    }

    /// A collection operator over a to-many relationship's attribute.
    enum CollectionOperator: String, Hashable {
        case sum = "@sum", avg = "@avg", min = "@min", max = "@max"
    }

    /// Relationships walked from the object.
    var steps: [Relationship]
    var terminal: Terminal
    var text: String

    /// The type of the terminal attribute, or `nil` when the path does not end at an attribute.
    var attributeType: AttributeType? {
        if case .attribute(_, let attribute) = terminal { attribute.type } else { nil }
    }

    /// Whether any step (or the terminal relationship) is to-many.
    var isToMany: Bool {
        switch terminal {
        case .count, .collection: return steps.dropLast().contains(where: \.isToMany)
        default: break
        }
        if case .relationship(let r) = terminal, r.isToMany { return true }
        return steps.contains(where: \.isToMany)
    }

    static func resolve(_ path: [String], from entity: Entity, in schema: Schema) throws -> ResolvedKeyPath {
        if FetchPredicate.isSelf(path, in: entity) {
            return ResolvedKeyPath(steps: [], terminal: .object, text: path[0])
        }
        if path.count == 1, path[0].hasPrefix("<"), path[0].hasSuffix(">") {
            // A typed key path that maps to no key (see `ModelKeys`): its text says why.
            throw EntityStoreError(.invalidPredicate, String(path[0].dropFirst().dropLast()), entity: entity.name)
        }
        var current = entity
        var steps: [Relationship] = []
        let text = path.joined(separator: ".")
        for (i, component) in path.enumerated() {
            let last = i == path.count - 1
            if let function = CollectionOperator(rawValue: component) {
                guard let previous = steps.last, previous.isToMany, i == path.count - 2,
                    let index = current.attributeIndex(path[i + 1])
                else {
                    throw EntityStoreError(
                        .invalidPredicate,
                        "\(component) must follow a to-many relationship and name one of its attributes (in '\(text)')",
                        entity: entity.name, key: text)
                }
                return ResolvedKeyPath(
                    steps: steps, terminal: .collection(function, index, current.attributes[index]), text: text)
            }
            if component == "@count" {
                guard last, let previous = steps.last, previous.isToMany else {
                    throw EntityStoreError(
                        .invalidPredicate, "@count must follow a to-many relationship (in '\(text)')",
                        entity: entity.name, key: text)
                }
                return ResolvedKeyPath(steps: steps, terminal: .count, text: text)
            }
            if let index = current.attributeIndex(component) {
                if !last && path[i + 1].hasPrefix("@") {
                    throw EntityStoreError(
                        .invalidPredicate, "\(path[i + 1]) must follow a to-many relationship (in '\(text)')",
                        entity: entity.name, key: text)
                }
                guard last else {
                    throw EntityStoreError(
                        .invalidPredicate,
                        "'\(component)' is an attribute of \(current.name), not a relationship"
                            + " (in '\(text)')", entity: entity.name, key: text)
                }
                return ResolvedKeyPath(steps: steps, terminal: .attribute(index, current.attributes[index]), text: text)
            }
            guard let relationship = current.relationship(component), let next = schema.entity(relationship.destination)
            else {
                throw EntityStoreError(
                    .invalidPredicate,
                    "\(current.name) has no key '\(component)'"
                        + (path.count > 1 ? " (in '\(text)')" : ""), entity: entity.name, key: text)
            }
            if last {
                return ResolvedKeyPath(steps: steps, terminal: .relationship(relationship), text: text)
            }
            steps.append(relationship)
            current = next
        }
        throw EntityStoreError(.invalidPredicate, "an empty key path", entity: entity.name)
    }
}

/// What a predicate is evaluated on: an object's values and its related objects.
protocol PredicateSubject {
    /// The object's ID (`SELF`); nil for a row of values that is no object.
    var objectID: ObjectID? { get }
    func attribute(_ index: Int) throws -> Value
    func related(_ relationship: Relationship) throws -> [any PredicateSubject]
    func relatedIDs(_ relationship: Relationship) throws -> [ObjectID]
}

/// A predicate checked against the schema, ready to evaluate many times.
final class CompiledPredicate {
    indirect enum Node {
        case constant(Bool)
        case comparison(ResolvedKeyPath, FetchPredicate.Comparison, ResolvedKeyPath?)
        /// `SUBQUERY(collection, $x, predicate).@count op value`: the collection's path (ending in `@count`) and the
        /// predicate compiled against its destination.
        case subquery(ResolvedKeyPath, FetchPredicate.Comparison, CompiledPredicate)
        /// `attribute IN {…}` over a long list of the attribute's own type (integers, strings, UUIDs, data,
        /// booleans): a hash lookup instead of a comparison per element (a sync pull looks up hundreds of global
        /// IDs at once). Exact equality of these types is `Value`'s equality, so the answer is the same.
        /// The attribute's path and the comparison are kept to bind other constants the way ``compile(_:_:_:)``
        /// does (booleans for numbers, the membership's conditions).
        case member(Int, Set<Value>, ResolvedKeyPath, FetchPredicate.Comparison)
        /// A relationship (or `SELF`) `IN` a list of objects, the list as a set of primary keys (see
        /// ``sameObject(_:_:)``).
        case objects(ResolvedKeyPath, FetchPredicate.Comparison, Set<UInt64>)
        case and([Node])
        case or([Node])
        case not(Node)
    }

    let root: Node
    let source: FetchPredicate
    private var regexes: [String: NSRegularExpression] = [:]

    init(_ predicate: FetchPredicate, entity: Entity, schema: Schema) throws {
        try predicate.checkNesting()
        source = predicate
        root = try CompiledPredicate.compile(predicate, entity, schema)
    }

    private init(source: FetchPredicate, root: Node) {
        self.source = source
        self.root = root
    }

    /// This compiled predicate with the constants of `predicate`, a predicate of the same shape (see
    /// `FetchPredicate.hasSameShape(as:)`): key paths stay resolved and types stay checked, only the comparisons
    /// are taken from `predicate`. `nil` when the two do not line up node for node (the caller compiles instead).
    func rebound(to predicate: FetchPredicate) -> CompiledPredicate? {
        Self.rebind(root, to: predicate).map { CompiledPredicate(source: predicate, root: $0) }
    }

    private static func rebind(_ node: Node, to predicate: FetchPredicate) -> Node? {
        switch (node, predicate) {
        case (.constant(let a), .constant(let b)) where a == b:
            return node
        case (.comparison(let path, let old, let other), .comparison(let given)):
            // The constants as a compile takes them: a bool attribute's 0 and 1 as false and true.
            let new = booleansForNumbers(given, path)
            guard old.hasSameShape(as: new), membership(path, new) == nil else { return nil }
            return .comparison(path, new, other)
        case (.subquery(_, let old, _), .comparison(let new)) where old == new:
            return node
        case (.member(_, _, let path, let old), .comparison(let given)):
            // Bound as a compile binds it, or not at all (a list that is no longer a membership compiles anew).
            let new = booleansForNumbers(given, path)
            guard old.hasSameShape(as: new) else { return nil }
            return membership(path, new)
        case (.objects(let path, let old, _), .comparison(let new)) where old.hasSameShape(as: new):
            guard case .objects(let ids) = new.operand else { return nil }
            return .objects(path, new, Set(ids.lazy.map(\.primaryKey)))
        case (.and(let nodes), .and(let parts)):
            return rebind(nodes, to: parts).map { .and($0) }
        case (.or(let nodes), .or(let parts)):
            return rebind(nodes, to: parts).map { .or($0) }
        case (.not(let inner), .not(let part)):
            return rebind(inner, to: part).map { .not($0) }
        default:
            return nil
        }
    }

    private static func rebind(_ nodes: [Node], to parts: [FetchPredicate]) -> [Node]? {
        guard nodes.count == parts.count else { return nil }
        var rebound: [Node] = []
        rebound.reserveCapacity(nodes.count)
        for (node, part) in zip(nodes, parts) {
            guard let new = rebind(node, to: part) else { return nil }
            rebound.append(new)
        }
        return rebound
    }

    /// Attribute positions of the entity itself that the predicate reads.
    var ownAttributes: Set<Int> {
        var result = Set<Int>()
        func visit(_ node: Node) {
            switch node {
            case .constant: break
            case .comparison(let path, _, let other):
                for p in [path] + (other.map { [$0] } ?? []) where p.steps.isEmpty {
                    if case .attribute(let i, _) = p.terminal { result.insert(i) }
                }
            case .subquery: break
            case .member(let index, _, _, _): result.insert(index)
            case .objects: break
            case .and(let nodes), .or(let nodes): nodes.forEach(visit)
            case .not(let inner): visit(inner)
            }
        }
        visit(root)
        return result
    }

    /// The entities the predicate reads objects of through relationships (each step's destination, and a compared
    /// relationship's); nil for any entity (a subquery).
    var reachedEntities: Set<String>? {
        var reached = Set<String>()
        func add(_ path: ResolvedKeyPath) {
            for step in path.steps { reached.insert(step.destination) }
            if case .relationship(let relationship) = path.terminal { reached.insert(relationship.destination) }
        }
        func visit(_ node: Node) -> Bool {
            switch node {
            case .constant, .member: return true
            case .comparison(let path, _, let other):
                add(path)
                if let other { add(other) }
                return true
            case .subquery: return false
            case .objects(let path, _, _):
                add(path)
                return true
            case .and(let nodes), .or(let nodes): return nodes.allSatisfy(visit)
            case .not(let inner): return visit(inner)
            }
        }
        return visit(root) ? reached : nil
    }

    static func compile(_ predicate: FetchPredicate, _ entity: Entity, _ schema: Schema) throws -> Node {
        switch predicate {
        case .constant(let value): return .constant(value)
        case .and(let parts): return .and(try parts.map { try compile($0, entity, schema) })
        case .or(let parts): return .or(try parts.map { try compile($0, entity, schema) })
        case .not(let inner): return .not(try compile(inner, entity, schema))
        case .comparison(let c) where c.subquery != nil:
            let path = try ResolvedKeyPath.resolve(c.keyPath, from: entity, in: schema)
            guard case .count = path.terminal, let collection = path.steps.last,
                let destination = schema.entity(collection.destination)
            else {
                throw EntityStoreError(
                    .invalidPredicate, "SUBQUERY needs a to-many key path, not '\(path.text)'", entity: entity.name,
                    key: path.text)
            }
            try checkTypes(path, c, entity, schema)
            return .subquery(path, c, try CompiledPredicate(c.subquery!.predicate, entity: destination, schema: schema))
        case .comparison(let given):
            let path = try ResolvedKeyPath.resolve(given.keyPath, from: entity, in: schema)
            let c = booleansForNumbers(given, path)
            if path.isToMany && c.quantifier == nil {
                throw EntityStoreError(
                    .invalidPredicate,
                    "'\(path.text)' goes through a to-many relationship: use ANY, ALL or NONE, or @count",
                    entity: entity.name, key: path.text)
            }
            if !path.isToMany && c.quantifier != nil {
                throw EntityStoreError(
                    .invalidPredicate, "\(c.quantifier!.rawValue) needs a to-many key path; '\(path.text)' is not",
                    entity: entity.name, key: path.text)
            }
            var other: ResolvedKeyPath?
            if case .keyPath(let otherPath) = c.operand {
                other = try ResolvedKeyPath.resolve(otherPath, from: entity, in: schema)
                if other!.isToMany {
                    throw EntityStoreError(
                        .invalidPredicate, "the right side '\(other!.text)' cannot be to-many", entity: entity.name,
                        key: other!.text)
                }
            }
            try checkTypes(path, c, entity, schema)
            if let member = membership(path, c) { return member }
            if case .objects(let ids) = c.operand { return .objects(path, c, Set(ids.lazy.map(\.primaryKey))) }
            return .comparison(path, c, other)
        }
    }

    /// Core Data's NSNumber idiom for booleans: a bool attribute compared with the number 0 or 1 (`done == 0`,
    /// `ANY books.inPrint == 1`, `done IN {0, 1}`) is compared with false or true. Other numbers stay, and are
    /// refused by ``checkTypes(_:_:_:_:)``.
    static func booleansForNumbers(
        _ c: FetchPredicate.Comparison, _ path: ResolvedKeyPath
    ) -> FetchPredicate.Comparison {
        guard case .attribute(_, let attribute) = path.terminal, attribute.type == .bool else { return c }
        func boolean(_ value: Value) -> Value? {
            switch value {
            case .int(0), .double(0), .decimal(0): .bool(false)
            case .int(1), .double(1), .decimal(1): .bool(true)
            default: nil
            }
        }
        var coerced = c
        switch c.operand {
        case .value(let value):
            guard let b = boolean(value) else { return c }
            coerced.operand = .value(b)
        case .list(let values):
            guard values.contains(where: { boolean($0) != nil }) else { return c }
            coerced.operand = .list(values.map { boolean($0) ?? $0 })
        case .object, .keyPath, .objects:
            return c
        }
        return coerced
    }

    /// The ``Node/member(_:_:)`` form of `attribute IN list`, when it gives the same answers.
    static func membership(_ path: ResolvedKeyPath, _ c: FetchPredicate.Comparison) -> Node? {
        guard c.op == .in, c.options.isEmpty, c.quantifier == nil, path.steps.isEmpty,
            case .attribute(let index, let attribute) = path.terminal, case .list(let list) = c.operand,
            list.count >= 8, [.int64, .string, .uuid, .binary, .bool].contains(attribute.type),
            list.allSatisfy({ $0.isNull || $0.type == attribute.type })
        else { return nil }
        return .member(index, Set(list), path, c)
    }

    static func checkTypes(
        _ path: ResolvedKeyPath, _ c: FetchPredicate.Comparison, _ entity: Entity, _ schema: Schema
    ) throws {
        let stringOps: [FetchPredicate.Operator] = [.beginsWith, .endsWith, .contains, .like, .matches]
        func fail(_ message: String) -> EntityStoreError {
            EntityStoreError(.invalidPredicate, message, entity: entity.name, key: path.text)
        }
        switch path.terminal {
        case .attribute(_, let attribute):
            if stringOps.contains(c.op) && attribute.type != .string {
                throw fail("\(c.op.rawValue) needs a string; '\(path.text)' is \(attribute.type.withArticle)")
            }
            let values: [Value]
            switch c.operand {
            case .value(let v): values = [v]
            case .list(let vs): values = vs
            case .object, .objects:
                throw fail("'\(path.text)' is an attribute and cannot be compared with an object")
            case .keyPath: values = []
            }
            for value in values where !value.isNull {
                guard let type = value.type else { continue }
                let numeric: Set<AttributeType> = [.int64, .double, .decimal]
                let compatible =
                    type == attribute.type || (numeric.contains(type) && numeric.contains(attribute.type))
                if !compatible && !(c.op == .matches || c.op == .like) {
                    let hint = attribute.type == .bool && numeric.contains(type) ? " (only with 0 or 1)" : ""
                    throw fail(
                        "'\(path.text)' is \(attribute.type.withArticle) and cannot be compared with \(value)\(hint)")
                }
            }
        case .relationship(let relationship):
            try checkObjects(
                c, holding: relationship.destination, in: schema, what: "'\(path.text)' is a relationship",
                holds: "'\(path.text)' holds", fail)
        case .object:
            // Objects of the entity's hierarchy: a fetch of a superentity reads each sub-entity's objects with the
            // same predicate, and an object of another entity of the hierarchy is simply not among them.
            try checkObjects(
                c, holding: schema.root(of: entity.name), in: schema, what: "SELF is the object itself",
                holds: "SELF stands for", fail)
        case .count:
            switch c.operand {
            case .value(.int), .value(.double), .list: break
            default: throw fail("@count is compared with a number")
            }
        case .collection(let function, _, let attribute):
            let numeric: Set<AttributeType> = [.int64, .double, .decimal]
            if (function == .sum || function == .avg) && !numeric.contains(attribute.type) {
                throw fail("\(function.rawValue) needs numbers; '\(attribute.name)' is \(attribute.type.withArticle)")
            }
            if [.binary, .uuid].contains(attribute.type) {
                throw fail(
                    "\(function.rawValue) needs values that order; '\(attribute.name)' is \(attribute.type.withArticle)"
                )
            }
            if stringOps.contains(c.op) && attribute.type != .string {
                throw fail("\(c.op.rawValue) needs a string; '\(path.text)' is not")
            }
            switch c.operand {
            case .object, .objects: throw fail("'\(path.text)' cannot be compared with an object")
            default: break
            }
        }
    }

    /// Checks a comparison of objects (a relationship's, or `SELF`): `==` or `!=` to an object of `destination`'s
    /// kind or nil, or `IN` a list of such objects. `what` names the left side, `holds` starts the sentence about
    /// the objects it holds.
    static func checkObjects(
        _ c: FetchPredicate.Comparison, holding destination: String, in schema: Schema, what: String, holds: String,
        _ fail: (String) -> EntityStoreError
    ) throws {
        var ids: [ObjectID] = []
        switch (c.op, c.operand) {
        case (.equal, .object(let id)), (.notEqual, .object(let id)): ids = [id]
        case (.equal, .value(.null)), (.notEqual, .value(.null)): break
        case (.in, .objects(let list)): ids = list
        default:
            throw fail("\(what): compare it with == or != to an object or nil, or with IN to a list of objects")
        }
        for id in ids where !schema.isKind(id.entityName, of: destination) {
            throw fail("\(holds) \(destination) objects, not \(id.entityName)")
        }
    }

    // MARK: Evaluation

    func evaluate<S: PredicateSubject>(_ subject: S) throws -> Bool {
        try evaluate(root, subject)
    }

    private func evaluate<S: PredicateSubject>(_ node: Node, _ subject: S) throws -> Bool {
        switch node {
        case .constant(let value): return value
        case .and(let nodes):
            for node in nodes where try !evaluate(node, subject) { return false }
            return true
        case .or(let nodes):
            for node in nodes where try evaluate(node, subject) { return true }
            return false
        case .not(let inner): return try !evaluate(inner, subject)
        case .subquery(let path, let c, let inner):
            var subjects: [any PredicateSubject] = [subject]
            for step in path.steps.dropLast() { subjects = try subjects.flatMap { try $0.related(step) } }
            guard let collection = path.steps.last else { return false }
            var count: Int64 = 0
            for owner in subjects {
                for member in try owner.related(collection) where try inner.evaluate(member) { count += 1 }
            }
            return try compare(.int(count), c, c.operand)
        case .member(let index, let set, _, _):
            return set.contains(try subject.attribute(index))
        case .objects(let path, let c, let set):
            let ids = try CompiledPredicate.ids(of: path, subject)
            switch c.quantifier {
            case nil: return ids.first.map { set.contains($0.primaryKey) } ?? false
            case .any?: return ids.contains { set.contains($0.primaryKey) }
            case .all?: return ids.allSatisfy { set.contains($0.primaryKey) }
            case .none?: return !ids.contains { set.contains($0.primaryKey) }
            }
        case .comparison(let path, let c, let other):
            let right: FetchPredicate.Operand
            if let other {
                right = .value(try CompiledPredicate.values(of: other, subject).first ?? .null)
            } else {
                right = c.operand
            }
            // The common case: an attribute of the object itself, read without building arrays.
            if path.steps.isEmpty, case .attribute(let index, _) = path.terminal, c.quantifier == nil {
                return try compare(try subject.attribute(index), c, right)
            }
            switch path.terminal {
            case .relationship, .object:
                let ids = try CompiledPredicate.ids(of: path, subject)
                let target: ObjectID? = if case .object(let id) = right { id } else { nil }
                func test(_ id: ObjectID?) -> Bool { Self.sameObject(id, target) == (c.op == .equal) }
                switch c.quantifier {
                case nil: return test(ids.first)
                case .any?: return ids.contains { test($0) }
                case .all?: return ids.allSatisfy { test($0) }
                case .none?: return !ids.contains { test($0) }
                }
            default: break
            }
            let values = try CompiledPredicate.values(of: path, subject)
            switch c.quantifier {
            case nil: return try compare(values.first ?? .null, c, right)
            case .any?:
                for value in values where try compare(value, c, right) { return true }
                return false
            case .all?:
                for value in values where try !compare(value, c, right) { return false }
                return true
            case .none?:
                for value in values where try compare(value, c, right) { return false }
                return true
            }
        }
    }

    /// Whether a relationship's target (or the subject itself) is the object compared with, or both are nil. The
    /// primary keys decide: the objects compared with are checked to be of the key path's kinds, which are one
    /// hierarchy, whose objects share one sequence of keys. A link to an object deleted under a `noAction` rule
    /// reads back from the store as the destination's kind (`Folder/p7`: the store keeps the key alone), where a
    /// context that held the object still says `Shelf/p7`: both are the same link, and match alike.
    static func sameObject(_ id: ObjectID?, _ other: ObjectID?) -> Bool {
        id?.primaryKey == other?.primaryKey
    }

    /// The values a key path reaches from a subject: one (or none) for a to-one path, many for a to-many path.
    static func values<S: PredicateSubject>(of path: ResolvedKeyPath, _ subject: S) throws -> [Value] {
        if path.steps.isEmpty, case .attribute(let index, _) = path.terminal { return [try subject.attribute(index)] }
        var subjects: [any PredicateSubject] = [subject]
        let walk: [Relationship]
        switch path.terminal {
        case .count, .collection: walk = Array(path.steps.dropLast())
        default: walk = path.steps
        }
        for step in walk {
            subjects = try subjects.flatMap { try $0.related(step) }
        }
        switch path.terminal {
        case .attribute(let index, _):
            return try subjects.map { try $0.attribute(index) }
        case .count:
            guard let last = path.steps.last else { return [] }
            return try subjects.map { .int(Int64(try $0.relatedIDs(last).count)) }
        case .collection(let function, let index, let attribute):
            guard let last = path.steps.last else { return [] }
            return try subjects.map { subject in
                let values = try subject.related(last).map { try $0.attribute(index) }.filter { !$0.isNull }
                return collect(function, values, attribute.type)
            }
        case .relationship, .object:
            return []
        }
    }

    /// `@sum` (0 for none), `@avg` (nil for none), `@min` and `@max` (nil for none) of the non-nil values.
    static func collect(
        _ function: ResolvedKeyPath.CollectionOperator, _ values: [Value], _ type: AttributeType
    ) -> Value {
        switch function {
        case .sum, .avg:
            if function == .avg && values.isEmpty { return .null }
            switch type {
            case .int64:
                // As a double beyond 64 bits rather than wrapping.
                var total: Int64 = 0
                var overflowed = false
                for case .int(let x) in values where !overflowed {
                    let (sum, overflow) = total.addingReportingOverflow(x)
                    if overflow { overflowed = true } else { total = sum }
                }
                if overflowed {
                    let sum = values.reduce(0.0) { if case .int(let x) = $1 { $0 + Double(x) } else { $0 } }
                    return .double(function == .sum ? sum : sum / Double(values.count))
                }
                return function == .sum ? .int(total) : .double(Double(total) / Double(values.count))
            case .decimal:
                let sum = values.reduce(Decimal(0)) { if case .decimal(let x) = $1 { $0 + x } else { $0 } }
                return .decimal(function == .sum ? sum : sum / Decimal(values.count))
            default:
                let sum = values.reduce(0.0) { if case .double(let x) = $1 { $0 + x } else { $0 } }
                return .double(function == .sum ? sum : sum / Double(values.count))
            }
        case .min, .max:
            var best: Value?
            for value in values {
                guard let current = best else {
                    best = value
                    continue
                }
                let order = ValueComparison.order(value, current, []) ?? .orderedSame
                if function == .min ? order == .orderedAscending : order == .orderedDescending { best = value }
            }
            return best ?? .null
        }
    }

    /// The objects a relationship key path reaches from a subject, or the subject itself for `SELF`.
    static func ids<S: PredicateSubject>(of path: ResolvedKeyPath, _ subject: S) throws -> [ObjectID] {
        if case .object = path.terminal { return subject.objectID.map { [$0] } ?? [] }
        guard case .relationship(let relationship) = path.terminal else { return [] }
        var subjects: [any PredicateSubject] = [subject]
        for step in path.steps { subjects = try subjects.flatMap { try $0.related(step) } }
        return try subjects.flatMap { try $0.relatedIDs(relationship) }
    }

    private func compare(
        _ value: Value, _ c: FetchPredicate.Comparison, _ operand: FetchPredicate.Operand
    ) throws
        -> Bool
    {
        switch (c.op, operand) {
        case (.in, .list(let list)):
            return list.contains { ValueComparison.equal(value, $0, c.options) }
        case (.between, .list(let list)) where list.count == 2:
            guard let low = ValueComparison.order(value, list[0], c.options),
                let high = ValueComparison.order(value, list[1], c.options)
            else { return false }
            return low != .orderedAscending && high != .orderedDescending
        case (_, .value(let right)):
            return try compare(value, c.op, right, c.options)
        default:
            return false
        }
    }

    private func compare(
        _ left: Value, _ op: FetchPredicate.Operator, _ right: Value, _ options: FetchPredicate.StringOptions
    )
        throws -> Bool
    {
        switch op {
        case .equal: return ValueComparison.equal(left, right, options)
        case .notEqual: return !ValueComparison.equal(left, right, options)
        case .less: return ValueComparison.order(left, right, options) == .orderedAscending
        case .lessOrEqual:
            guard let order = ValueComparison.order(left, right, options) else { return false }
            return order != .orderedDescending
        case .greater: return ValueComparison.order(left, right, options) == .orderedDescending
        case .greaterOrEqual:
            guard let order = ValueComparison.order(left, right, options) else { return false }
            return order != .orderedAscending
        case .beginsWith, .endsWith, .contains, .like, .matches:
            guard case .string(let text) = left, case .string(let pattern) = right else { return false }
            if let answer = ValueComparison.ascii(text, op, pattern, options) { return answer }
            let (t, p) = (ValueComparison.fold(text, options), ValueComparison.fold(pattern, options))
            switch op {
            case .beginsWith: return t.unicodeScalars.starts(with: p.unicodeScalars)
            case .endsWith: return t.unicodeScalars.reversed().starts(with: p.unicodeScalars.reversed())
            case .contains: return p.isEmpty || t.contains(p)
            case .like: return ValueComparison.like(Array(t.unicodeScalars), Array(p.unicodeScalars))
            default: return try matches(text, pattern, options)
            }
        case .in, .between:
            return false
        }
    }

    private func matches(_ text: String, _ pattern: String, _ options: FetchPredicate.StringOptions) throws -> Bool {
        let key = "\(options.rawValue):\(pattern)"
        let regex: NSRegularExpression
        if let cached = regexes[key] {
            regex = cached
        } else {
            do {
                regex = try NSRegularExpression(
                    pattern: "^(?:\(pattern))$", options: options.contains(.caseInsensitive) ? [.caseInsensitive] : [])
            } catch {
                throw EntityStoreError(.invalidPredicate, "MATCHES: '\(pattern)' is not a regular expression")
            }
            regexes[key] = regex
        }
        let subject =
            options.contains(.diacriticInsensitive) ? ValueComparison.fold(text, [.diacriticInsensitive]) : text
        let range = NSRange(subject.startIndex..., in: subject)
        return regex.firstMatch(in: subject, range: range) != nil
    }
}

/// Comparisons of stored values, shared by predicates and sorts.
enum ValueComparison {
    /// Folds a string for `[c]`, `[d]`, `[cd]` (not `String.Comparator`, which traps on non-ASCII text on Linux).
    /// The result is in normalization form C, so that scalar-wise operations (BEGINSWITH, LIKE, ...) treat
    /// canonically equivalent text alike, as index keys do.
    static func fold(_ text: String, _ options: FetchPredicate.StringOptions) -> String {
        guard !options.isEmpty else { return text.canonicalForm }
        var fold: String.CompareOptions = []
        if options.contains(.caseInsensitive) { fold.insert(.caseInsensitive) }
        if options.contains(.diacriticInsensitive) { fold.insert(.diacriticInsensitive) }
        return text.folding(options: fold, locale: nil).canonicalForm
    }

    static func equal(_ a: Value, _ b: Value, _ options: FetchPredicate.StringOptions) -> Bool {
        if case .string(let x) = a, case .string(let y) = b {
            // Swift's == is canonical equivalence.
            if options.isEmpty { return x == y }
            return ascii(x, .equal, y, options) ?? (fold(x, options) == fold(y, options))
        }
        if a.isNull || b.isNull { return a.isNull && b.isNull }
        return order(a, b, options) == .orderedSame
    }

    /// The order of two values of comparable types (``ValueSemantics``); `nil` when either is nil or the types do
    /// not compare.
    static func order(_ a: Value, _ b: Value, _ options: FetchPredicate.StringOptions) -> ComparisonResult? {
        switch (a, b) {
        case (.int(let x), .int(let y)): return x < y ? .orderedAscending : x > y ? .orderedDescending : .orderedSame
        case (.string(let x), .string(let y)):
            if options.isEmpty { return binaryOrder(x, y) }
            return SortKey.asciiOrder(x, y, foldsCase: options.contains(.caseInsensitive))
                ?? foldedOrder(x, y, options, numeric: false)
        case (.double(let x), .double(let y)): return ValueSemantics.order(x, y)
        case (.date(let x), .date(let y)):
            return ValueSemantics.order(x.timeIntervalSinceReferenceDate, y.timeIntervalSinceReferenceDate)
        case (.bool(let x), .bool(let y)): return x == y ? .orderedSame : (!x ? .orderedAscending : .orderedDescending)
        case (.uuid(let x), .uuid(let y)):
            return order(.string(x.uuidString), .string(y.uuidString), [])
        case (.data(let x), .data(let y)):
            return x.lexicographicallyPrecedes(y)
                ? .orderedAscending : y.lexicographicallyPrecedes(x) ? .orderedDescending : .orderedSame
        default:
            guard let x = decimal(a), let y = decimal(b) else {
                guard let x = double(a), let y = double(b) else { return nil }
                return ValueSemantics.order(x, y)
            }
            return x < y ? .orderedAscending : x > y ? .orderedDescending : .orderedSame
        }
    }

    static func double(_ value: Value) -> Double? {
        switch value {
        case .int(let v): Double(v)
        case .double(let v): v
        case .decimal(let v): NSDecimalNumber(decimal: v).doubleValue
        default: nil
        }
    }

    /// Exact decimal comparison when one side is a decimal and the other an integer or decimal.
    static func decimal(_ value: Value) -> Decimal? {
        switch value {
        case .int(let v): Decimal(v)
        case .decimal(let v): v
        default: nil
        }
    }

    /// The binary order of two strings: the UTF-8 bytes of their canonical forms (NFC), which is the order of their
    /// scalars and of index keys. Not the standard library's `<`, which (Swift 6.3 on Linux) answers neither `<` nor
    /// `>` nor `==` for some text not in canonical form against text that is (`"e\u{301}"` and `"éi"`), so that a
    /// sort had no consistent order to find and disagreed with the index.
    static func binaryOrder(_ x: String, _ y: String) -> ComparisonResult {
        canonicalBinaryOrder(x, y) ?? bytesOrder(x.canonicalForm, y.canonicalForm)
    }

    /// `LIKE`: `*` matches any run of characters, `?` one character.
    static func like(_ text: [Unicode.Scalar], _ pattern: [Unicode.Scalar]) -> Bool {
        like(text, pattern, any: "?", run: "*", ==)
    }

    /// LIKE of `text` and `pattern` (`run` matches any run of elements, `any` any one), elements compared by `same`.
    static func like<C: RandomAccessCollection>(
        _ text: C, _ pattern: C, any: C.Element, run: C.Element, _ same: (C.Element, C.Element) -> Bool
    ) -> Bool where C.Index == Int, C.Element: Equatable {
        var t = 0
        var p = 0
        var starP = -1
        var starT = 0
        while t < text.count {
            if p < pattern.count && (pattern[p] == any || (pattern[p] != run && same(pattern[p], text[t]))) {
                t += 1
                p += 1
            } else if p < pattern.count && pattern[p] == run {
                starP = p
                starT = t
                p += 1
            } else if starP >= 0 {
                p = starP + 1
                starT += 1
                t = starT
            } else {
                return false
            }
        }
        while p < pattern.count && pattern[p] == run { p += 1 }
        return p == pattern.count
    }
}
