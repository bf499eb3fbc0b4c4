import Foundation

/// One value computed over each group of an ``AggregateRequest``: Core Data's `NSExpressionDescription` with
/// `count:`, `sum:`, `average:`, `min:` or `max:`.
///
/// ```swift
/// let aggregates: [Aggregate] = [
///     .count(),                       // "count": the objects in the group
///     .sum("pages"),                  // "sum(pages)"
///     .average("score", as: "mean"),  // "mean"
///     .maximum("author.born"),        // through to-one relationships
/// ]
/// ```
public struct Aggregate: Sendable, Hashable {
    /// What is computed.
    public enum Function: String, Sendable, Hashable {
        /// The number of objects (no key path) or of non-nil values.
        case count
        /// The sum of the non-nil values: an `int64` for integers, a `double` for doubles, a `decimal` for decimals
        /// (an integer or decimal sum that overflows is an error); nil when there are none.
        case sum
        /// The mean of the non-nil values: a `double` (a `decimal` for decimals); nil when there are none.
        case average
        /// The smallest non-nil value (numbers, dates, strings); nil when there are none.
        case minimum
        /// The largest non-nil value; nil when there are none.
        case maximum
    }

    /// What is computed.
    public var function: Function
    /// The attribute, through to-one relationships; nil for a count of objects.
    public var keyPath: String?
    /// The key of the result in each row.
    public var name: String

    /// An aggregate of `function` over `keyPath`, named `name` (by default `"function(keyPath)"`, or `"count"`).
    public init(_ function: Function, _ keyPath: String?, as name: String? = nil) {
        self.function = function
        self.keyPath = keyPath
        self.name = name ?? keyPath.map { "\(function.rawValue)(\($0))" } ?? function.rawValue
    }

    /// The number of objects in the group.
    public static func count(as name: String = "count") -> Aggregate { Aggregate(.count, nil, as: name) }
    /// The number of non-nil values of `keyPath` in the group.
    public static func count(_ keyPath: String, as name: String? = nil) -> Aggregate {
        Aggregate(.count, keyPath, as: name)
    }
    /// The sum of `keyPath` over the group.
    public static func sum(_ keyPath: String, as name: String? = nil) -> Aggregate {
        Aggregate(.sum, keyPath, as: name)
    }
    /// The mean of `keyPath` over the group.
    public static func average(_ keyPath: String, as name: String? = nil) -> Aggregate {
        Aggregate(.average, keyPath, as: name)
    }
    /// The smallest value of `keyPath` in the group.
    public static func minimum(_ keyPath: String, as name: String? = nil) -> Aggregate {
        Aggregate(.minimum, keyPath, as: name)
    }
    /// The largest value of `keyPath` in the group.
    public static func maximum(_ keyPath: String, as name: String? = nil) -> Aggregate {
        Aggregate(.maximum, keyPath, as: name)
    }

    /// An aggregate over a typed model's key path (`.sum(\Book.pages)`).
    public static func sum<M: Model, V>(_ keyPath: KeyPath<M, V>, as name: String? = nil) -> Aggregate {
        Aggregate(.sum, ModelKeys.text(keyPath), as: name)
    }
    /// The mean over a typed model's key path.
    public static func average<M: Model, V>(_ keyPath: KeyPath<M, V>, as name: String? = nil) -> Aggregate {
        Aggregate(.average, ModelKeys.text(keyPath), as: name)
    }
    /// The smallest value of a typed model's key path.
    public static func minimum<M: Model, V>(_ keyPath: KeyPath<M, V>, as name: String? = nil) -> Aggregate {
        Aggregate(.minimum, ModelKeys.text(keyPath), as: name)
    }
    /// The largest value of a typed model's key path.
    public static func maximum<M: Model, V>(_ keyPath: KeyPath<M, V>, as name: String? = nil) -> Aggregate {
        Aggregate(.maximum, ModelKeys.text(keyPath), as: name)
    }
    /// The number of non-nil values of a typed model's key path.
    public static func count<M: Model, V>(_ keyPath: KeyPath<M, V>, as name: String? = nil) -> Aggregate {
        Aggregate(.count, ModelKeys.text(keyPath), as: name)
    }
}

/// Groups the objects a predicate matches and computes aggregates per group: Core Data's dictionary fetch with
/// expressions, `propertiesToGroupBy` and `havingPredicate`; SQL's `SELECT ... GROUP BY ... HAVING`.
///
/// <!-- snippet
/// uses: library
/// let store = try openLibrary()
/// let context = ObjectContext(store: store)
/// -->
/// ```swift
/// var request = AggregateRequest(entity: "Book", where: try FetchPredicate("pages != nil"))
/// request.groupBy = ["author.name"]
/// request.aggregates = [.count(), .sum("pages"), .average("score", as: "mean")]
/// request.having = try FetchPredicate("count >= 2 AND sum(pages) > 500")
/// request.sortKeys = [SortKey("sum(pages)", ascending: false)]
/// let rows = try context.aggregate(request)   // [["author.name": "Ursula Le Guin", "count": 2, ...], ...]
/// ```
///
/// Each row holds the group's key paths and the aggregates, by name. Without group keys the whole match is one
/// group (one row, also when nothing matches: a count of 0 and nil for the rest). Group keys with no aggregates give
/// the distinct combinations of their values (Core Data's `returnsDistinctResults`). Values group as they compare
/// everywhere in the store (canonically equivalent strings are one group; every NaN is one; nil is its own group).
/// `having` and `sortKeys` name result keys as the row names them (`count`, `mean`, `author.name`, `sum(pages)`:
/// `FetchPredicate("sum(pages) > 1000")` compares that column); rows sort by the group keys when no sort key is given. The matches
/// are read through the same plan as a fetch (an index serves the predicate where it can: see
/// ``ObjectContext/explain(_:)-(AggregateRequest)``) and aggregated as they are read, without objects.
public struct AggregateRequest: Sendable, Hashable {
    /// The entity whose objects are grouped.
    public var entity: String
    /// Which objects; nil for all.
    public var predicate: FetchPredicate?
    /// Attribute key paths (through to-one relationships) whose values form the groups.
    public var groupBy: [String] = []
    /// What is computed per group.
    public var aggregates: [Aggregate] = []
    /// Which groups are kept, over the result keys.
    public var having: FetchPredicate?
    /// The order of the rows, over the result keys; by the group keys when empty.
    public var sortKeys: [SortKey] = []
    /// At most this many rows; 0 for no limit.
    public var fetchLimit = 0
    /// Skip this many rows first.
    public var fetchOffset = 0
    /// Reflect the context's unsaved changes.
    public var includesPendingChanges = true

    /// A request over the objects of `entity` that `predicate` matches.
    public init(entity: String, where predicate: FetchPredicate? = nil) {
        self.entity = entity
        self.predicate = predicate
    }

    /// A request over the models a typed predicate matches.
    public init<M: Model>(_ type: M.Type, where predicate: ModelPredicate<M>? = nil) {
        self.init(entity: ModelKeys.entityName(of: type), where: predicate?.predicate)
    }

    /// Adds a group key from a typed model's key path (`request.group(by: \Book.author?.name)`).
    public mutating func group<M: Model, V>(by keyPath: KeyPath<M, V>) {
        groupBy.append(ModelKeys.text(keyPath))
    }
}

extension ObjectContext {
    /// Groups and aggregates the objects an ``AggregateRequest`` matches; each row maps the group keys and the
    /// aggregates' names to values.
    ///
    /// - Throws: ``EntityStoreError/Code/invalidFetchRequest`` for a key path that is not an attribute reached
    ///   through to-one relationships, an aggregate that does not apply to its attribute's type (a sum of strings),
    ///   two result columns of one name, a `having` or sort key that names no result column, an integer or
    ///   decimal sum that overflows; ``EntityStoreError/Code/invalidPredicate`` for a bad predicate.
    public func aggregate(_ request: AggregateRequest) throws -> [[String: Value]] {
        let entity = try store.storage(for: request.entity).entity
        let accumulator = try AggregateSink(request, entity: entity, schema: store.schema)
        var fetch = FetchRequest(entity: request.entity, predicate: request.predicate)
        fetch.includesPendingChanges = request.includesPendingChanges
        _ = try run(fetch, shape: .aggregate(accumulator))
        return try accumulator.rows(request)
    }

    /// The rows of an ``AggregateRequest``, each decoded into `Row` by its column names: the group keys and the
    /// aggregates' names (give an aggregate a name a property can have with `as:`).
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// -->
    /// ```swift
    /// struct Row: Decodable {
    ///     let inPrint: Bool
    ///     let total: Int?
    ///     let books: Int
    /// }
    /// var request = AggregateRequest(entity: "Book")
    /// request.groupBy = ["inPrint"]
    /// request.aggregates = [.sum(\Book.pages, as: "total"), .count(as: "books")]
    /// let rows = try context.aggregate(request, as: Row.self)
    /// ```
    ///
    /// - Throws: What ``aggregate(_:)`` throws; ``EntityStoreError/Code/unknownKey`` naming a property of `Row`
    ///   that no column holds, ``EntityStoreError/Code/typeMismatch`` naming one whose type the column's values
    ///   are not of (a sum of integers read as `String`; a column that may be nil read as non-optional where a
    ///   group has nil).
    public func aggregate<Row: Decodable>(_ request: AggregateRequest, as type: Row.Type) throws -> [Row] {
        try ValueCoding.decode([Row].self, from: try aggregate(request))
    }

    /// The plan the matches of an aggregate request are read with.
    public func explain(_ request: AggregateRequest) throws -> QueryPlan {
        try explain(FetchRequest(entity: request.entity, predicate: request.predicate))
    }
}

/// Accumulates the groups of an aggregate request as matches are read. Used by one fetch on one thread, touched only
/// by its own methods: its state skips the run-time exclusivity checks (they were a fifth of a grouped scan).
final class AggregateSink {
    /// The key paths read per match: the group keys, then each aggregate's key path (when it has one).
    let keys: [String]
    private let groupCount: Int
    private let aggregates: [Aggregate]
    /// For each aggregate, its key path's position in `keys` (nil for a count of objects).
    private let inputs: [Int?]
    private let inputTypes: [AttributeType?]
    private let columns: [(name: String, type: AttributeType)]
    /// Groups by their canonical key (one key: by the value itself, without an array per match): each group's number.
    @exclusivity(unchecked) private var groupOfKey: [[Value]: Int] = [:]
    @exclusivity(unchecked) private var groupOfValue: [Value: Int] = [:]
    /// Integer keys seen last, by their low bits, with their group (-1 for none).
    @exclusivity(unchecked) private var recentGroups = [(key: Int64, group: Int)](repeating: (0, -1), count: 256)
    /// Each group's key values as first seen (what its row shows).
    @exclusivity(unchecked) private var shown: [[Value]] = []
    /// The aggregates' states, `aggregates.count` per group, group after group.
    @exclusivity(unchecked) private var states: [State] = []

    enum State {
        case count(Int)
        case sumInt(Int64, any: Bool)
        case sumDouble(Double, any: Bool)
        case sumDecimal(Decimal, any: Bool)
        case average(Double, Decimal, Int)
        case extreme(Value?)
    }

    init(_ request: AggregateRequest, entity: Entity, schema: Schema) throws {
        func fail(_ message: String, key: String? = nil) -> EntityStoreError {
            EntityStoreError(.invalidFetchRequest, message, entity: entity.name, key: key)
        }
        func type(of key: String) throws -> AttributeType {
            let path = try ResolvedKeyPath.resolve(key.keyPathComponents, from: entity, in: schema)
            guard case .attribute(_, let attribute) = path.terminal, !path.isToMany else {
                throw fail("'\(key)' is not an attribute reached through to-one relationships", key: key)
            }
            return attribute.type
        }
        var keys = request.groupBy
        var columns: [(String, AttributeType)] = []
        for key in request.groupBy { columns.append((key, try type(of: key))) }
        var inputs: [Int?] = []
        var inputTypes: [AttributeType?] = []
        for aggregate in request.aggregates {
            guard let keyPath = aggregate.keyPath else {
                guard aggregate.function == .count else {
                    throw fail("\(aggregate.function.rawValue) needs a key path", key: aggregate.name)
                }
                inputs.append(nil)
                inputTypes.append(nil)
                columns.append((aggregate.name, .int64))
                continue
            }
            let type = try type(of: keyPath)
            let resultType: AttributeType
            switch aggregate.function {
            case .count: resultType = .int64
            case .sum, .average:
                guard [.int64, .double, .decimal].contains(type) else {
                    throw fail(
                        "\(aggregate.function.rawValue) applies to numbers; '\(keyPath)' is \(type.withArticle)",
                        key: keyPath)
                }
                resultType = aggregate.function == .sum ? type : (type == .decimal ? .decimal : .double)
            case .minimum, .maximum:
                guard [.int64, .double, .decimal, .date, .string, .bool].contains(type) else {
                    throw fail(
                        "\(aggregate.function.rawValue) applies to values that order; '\(keyPath)' is"
                            + " \(type.withArticle)", key: keyPath)
                }
                resultType = type
            }
            inputs.append(keys.count)
            inputTypes.append(type)
            keys.append(keyPath)
            columns.append((aggregate.name, resultType))
        }
        var seen = Set<String>()
        for (name, _) in columns where !seen.insert(name).inserted {
            throw fail("two result columns are named '\(name)'", key: name)
        }
        self.keys = keys
        groupCount = request.groupBy.count
        aggregates = request.aggregates
        self.inputs = inputs
        self.inputTypes = inputTypes
        self.columns = columns
    }

    private func initialStates() -> [State] {
        zip(aggregates, inputTypes).map { aggregate, type in
            switch aggregate.function {
            case .count: .count(0)
            case .sum:
                switch type {
                case .int64: .sumInt(0, any: false)
                case .decimal: .sumDecimal(0, any: false)
                default: .sumDouble(0, any: false)
                }
            case .average: .average(0, 0, 0)
            case .minimum, .maximum: .extreme(nil)
            }
        }
    }

    /// Adds one match: the values of `keys`, in order.
    func add(_ values: [Value]) throws { try add { values[$0] } }

    /// Adds one match from its decoded record, when every key path is an attribute of the object itself (`positions`
    /// are the keys' attribute positions): no array is made per match.
    func add(record: [Value], at positions: [Int]) throws { try add { record[positions[$0]] } }

    @inline(__always)
    private func add(_ value: (Int) -> Value) throws {
        let group: Int
        switch groupCount {
        case 0:
            if shown.isEmpty { newGroup([]) }
            group = 0
        case 1:
            let key = value(0)
            if case .int(let number) = key {
                // Integer keys go through a small direct-mapped cache first: most groupings are by small sets of
                // integers (years, states, IDs), and a hit costs no hashing.
                let slot = Int(truncatingIfNeeded: number) & 255
                if recentGroups[slot].group >= 0 && recentGroups[slot].key == number {
                    group = recentGroups[slot].group
                } else {
                    if let found = groupOfValue[key] {
                        group = found
                    } else {
                        group = newGroup([key])
                        groupOfValue[key] = group
                    }
                    recentGroups[slot] = (number, group)
                }
                break
            }
            let canonical = ValueSemantics.uniquenessKey(key, caseInsensitive: false)
            if let found = groupOfValue[canonical] {
                group = found
            } else {
                group = newGroup([key])
                groupOfValue[canonical] = group
            }
        default:
            let keys = (0..<groupCount).map(value)
            let canonical = keys.map { ValueSemantics.uniquenessKey($0, caseInsensitive: false) }
            if let found = groupOfKey[canonical] {
                group = found
            } else {
                group = newGroup(keys)
                groupOfKey[canonical] = group
            }
        }
        let base = group * aggregates.count
        for i in aggregates.indices {
            guard let position = inputs[i] else {
                if case .count(let n) = states[base + i] { states[base + i] = .count(n + 1) }
                continue
            }
            let input = value(position)
            if input.isNull { continue }
            switch (states[base + i], input) {
            case (.count(let n), _): states[base + i] = .count(n + 1)
            case (.sumInt(let total, _), .int(let x)):
                let (sum, overflow) = total.addingReportingOverflow(x)
                if overflow { throw Self.overflow(aggregates[i], "a 64-bit integer") }
                states[base + i] = .sumInt(sum, any: true)
            case (.sumDouble(let total, _), .double(let x)): states[base + i] = .sumDouble(total + x, any: true)
            case (.sumDecimal(let total, _), .decimal(let x)):
                let sum = total + x
                if sum.isNaN { throw Self.overflow(aggregates[i], "a decimal") }
                states[base + i] = .sumDecimal(sum, any: true)
            case (.average(let total, let decimalTotal, let n), .int(let x)):
                states[base + i] = .average(total + Double(x), decimalTotal, n + 1)
            case (.average(let total, let decimalTotal, let n), .double(let x)):
                states[base + i] = .average(total + x, decimalTotal, n + 1)
            case (.average(let total, let decimalTotal, let n), .decimal(let x)):
                let sum = decimalTotal + x
                if sum.isNaN { throw Self.overflow(aggregates[i], "a decimal") }
                states[base + i] = .average(total, sum, n + 1)
            case (.extreme(let best), _):
                guard let best else {
                    states[base + i] = .extreme(input)
                    continue
                }
                let order = ValueComparison.order(input, best, []) ?? .orderedSame
                if aggregates[i].function == .minimum ? order == .orderedAscending : order == .orderedDescending {
                    states[base + i] = .extreme(input)
                }
            default: break
            }
        }
    }

    /// The error of a sum that `aggregate`'s values take past what `type` holds.
    private static func overflow(_ aggregate: Aggregate, _ type: String) -> EntityStoreError {
        EntityStoreError(
            .invalidFetchRequest, "the sum of '\(aggregate.keyPath ?? "")' overflows \(type)", key: aggregate.keyPath)
    }

    @discardableResult
    private func newGroup(_ keys: [Value]) -> Int {
        shown.append(keys)
        states.append(contentsOf: initialStates())
        return shown.count - 1
    }

    /// The rows: one per group (one in all without group keys), kept by `having`, sorted and windowed.
    func rows(_ request: AggregateRequest) throws -> [[String: Value]] {
        if groupCount == 0 && shown.isEmpty { newGroup([]) }
        var rows: [[Value]] = []
        rows.reserveCapacity(shown.count)
        for (group, keys) in shown.enumerated() {
            var row = keys
            for (i, type) in inputTypes.enumerated() {
                row.append(Self.result(states[group * aggregates.count + i], type))
            }
            rows.append(row)
        }
        // `having` and the sort keys name result columns: compiled against an entity made of them.
        var resultEntity = Entity("Groups")
        resultEntity.attributes = columns.enumerated().map { index, column in
            Attribute("c\(index)", column.type, optional: true)
        }
        let positions = Dictionary(uniqueKeysWithValues: columns.enumerated().map { ($1.name, $0) })
        func column(_ name: String) throws -> Int {
            guard let position = positions[name] else {
                throw EntityStoreError(
                    .invalidFetchRequest,
                    "'\(name)' is not a result column (\(columns.map(\.name).joined(separator: ", ")))", key: name)
            }
            return position
        }
        if let having = request.having {
            let renamed = try having.renamingKeys { try "c\(column($0))" }
            let compiled = try CompiledPredicate(
                renamed, entity: resultEntity, schema: try Schema(version: 1, entities: [resultEntity]))
            rows = try rows.filter { try compiled.evaluate(ValuesSubject(values: $0)) }
        }
        let order: [(Int, SortKey)] =
            request.sortKeys.isEmpty
            ? (0..<groupCount).map { ($0, SortKey(columns[$0].name)) }
            : try request.sortKeys.map { (try column($0.keyPath), $0) }
        rows.sort { a, b in
            for (position, key) in order {
                let result = key.order(a[position], b[position])
                if result != .orderedSame { return result == .orderedAscending }
            }
            return false
        }
        let start = min(request.fetchOffset, rows.count)
        let end = request.fetchLimit > 0 ? min(rows.count, start + request.fetchLimit) : rows.count
        return rows[start..<end].map { row in
            Dictionary(uniqueKeysWithValues: zip(columns.map(\.name), row))
        }
    }

    private static func result(_ state: State, _ inputType: AttributeType?) -> Value {
        switch state {
        case .count(let n): .int(Int64(n))
        case .sumInt(let total, let any): any ? .int(total) : .null
        case .sumDouble(let total, let any): any ? .double(total) : .null
        case .sumDecimal(let total, let any): any ? .decimal(total) : .null
        case .average(let total, let decimalTotal, let n):
            n == 0 ? .null : inputType == .decimal ? .decimal(decimalTotal / Decimal(n)) : .double(total / Double(n))
        case .extreme(let value): value ?? .null
        }
    }
}

/// A row of values seen by a compiled predicate (result columns).
struct ValuesSubject: PredicateSubject {
    let values: [Value]
    var objectID: ObjectID? { nil }
    func attribute(_ index: Int) throws -> Value { values[index] }
    func related(_ relationship: Relationship) throws -> [any PredicateSubject] { [] }
    func relatedIDs(_ relationship: Relationship) throws -> [ObjectID] { [] }
}
