import Foundation

/// A condition on objects: EntityStore's predicate, parsed from the NSPredicate format language or built in Swift.
///
/// (Named so as not to clash with Foundation's `Predicate`.) A predicate may nest NOT, AND and OR at most
/// ``maximumNesting`` levels deep (an AND directly inside an AND, or an OR inside an OR, does not count: it is the
/// same level); a deeper one is refused with ``EntityStoreError/Code/invalidPredicate`` before it is used.
///
/// ```swift
/// let parsed = try FetchPredicate("title BEGINSWITH[cd] %@ AND pages > %d", "du", 100)
/// let built: FetchPredicate = .key("title").beginsWith("du", options: .caseDiacriticInsensitive) && .key("pages") > 100
/// ```
public indirect enum FetchPredicate: Hashable, Sendable, CustomStringConvertible {
    /// `TRUEPREDICATE` or `FALSEPREDICATE`.
    case constant(Bool)
    /// A comparison of a key path with a value, a list or another key path.
    case comparison(Comparison)
    /// All of the predicates.
    case and([FetchPredicate])
    /// Any of the predicates.
    case or([FetchPredicate])
    /// The negation.
    case not(FetchPredicate)

    /// A comparison: `[quantifier] keyPath operator [options] operand`.
    public struct Comparison: Hashable, Sendable {
        /// The key path on the left, e.g. `["author", "name"]` or `["books", "@count"]`.
        public var keyPath: [String]
        /// The operator.
        public var op: Operator
        /// The right-hand side.
        public var operand: Operand
        /// `[c]`, `[d]`, `[cd]` for string comparisons.
        public var options: StringOptions
        /// `ANY`, `ALL` or `NONE` over a to-many key path; `nil` for a direct comparison.
        public var quantifier: Quantifier?
        /// For `SUBQUERY(keyPath, $x, predicate).@count`: the predicate the counted objects must match (the key path
        /// is then the collection followed by `@count`).
        public var subquery: Subquery?

        /// Creates a comparison.
        public init(
            keyPath: [String], op: Operator, operand: Operand, options: StringOptions = [],
            quantifier: Quantifier? = nil
        ) {
            self.keyPath = keyPath
            self.op = op
            self.operand = operand
            self.options = options
            self.quantifier = quantifier
        }
    }

    /// The predicate of a `SUBQUERY`: its variable, and the condition on each object of the collection (with key paths
    /// relative to that object).
    public struct Subquery: Hashable, Sendable {
        /// The variable's name as written (`$b`).
        public var variable: String
        /// The condition, on the collection's objects.
        public var predicate: FetchPredicate

        /// A subquery.
        public init(variable: String, predicate: FetchPredicate) {
            self.variable = variable
            self.predicate = predicate
        }
    }

    /// A comparison operator.
    public enum Operator: String, Hashable, Sendable {
        /// `==`
        case equal = "=="
        /// `!=`
        case notEqual = "!="
        /// `<`
        case less = "<"
        /// `<=`
        case lessOrEqual = "<="
        /// `>`
        case greater = ">"
        /// `>=`
        case greaterOrEqual = ">="
        /// `BEGINSWITH`: the string starts with the operand.
        case beginsWith = "BEGINSWITH"
        /// `ENDSWITH`: the string ends with the operand.
        case endsWith = "ENDSWITH"
        /// `CONTAINS`: the string contains the operand.
        case contains = "CONTAINS"
        /// `LIKE`: the string matches a pattern with `*` and `?`.
        case like = "LIKE"
        /// `MATCHES`: the whole string matches a regular expression.
        case matches = "MATCHES"
        /// `IN`: the value is in the list.
        case `in` = "IN"
        /// `BETWEEN`: the value lies between the two values of the list, inclusive.
        case between = "BETWEEN"
    }

    /// The right-hand side of a comparison.
    public enum Operand: Hashable, Sendable, CustomStringConvertible {
        /// A constant value (`nil` is `.value(.null)`).
        case value(Value)
        /// A list: the right side of `IN` and `BETWEEN`.
        case list([Value])
        /// An object, for comparing a to-one relationship (`author == %@`) or the object itself (`SELF == %@`).
        case object(ObjectID)
        /// Another key path of the same object.
        case keyPath([String])
        /// Objects: the right side of `IN` for a relationship or the object itself (`SELF IN %@`, `author IN %@`,
        /// `ANY tags IN %@`).
        case objects([ObjectID])

        /// The key path of a `.keyPath` operand.
        var keyPathValue: [String]? { if case .keyPath(let path) = self { path } else { nil } }

        public var description: String {
            switch self {
            case .value(let value): FetchPredicate.literal(value)
            case .list(let values): "{" + values.map(FetchPredicate.literal).joined(separator: ", ") + "}"
            case .object(let id): "\"\(id)\""
            case .keyPath(let path): path.joined(separator: ".")
            case .objects(let ids): "{" + ids.map { "\"\($0)\"" }.joined(separator: ", ") + "}"
            }
        }
    }

    /// `ANY`, `ALL`, `NONE`.
    public enum Quantifier: String, Hashable, Sendable {
        /// `ANY`: some object of the to-many key path matches.
        case any = "ANY"
        /// `ALL`: every object of the to-many key path matches.
        case all = "ALL"
        /// `NONE`: no object of the to-many key path matches.
        case none = "NONE"
    }

    /// String comparison options: `[c]`, `[d]`, `[cd]`.
    public struct StringOptions: OptionSet, Hashable, Sendable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// `[c]`
        public static let caseInsensitive = StringOptions(rawValue: 1)
        /// `[d]`
        public static let diacriticInsensitive = StringOptions(rawValue: 2)
        /// `[cd]`
        public static let caseDiacriticInsensitive: StringOptions = [.caseInsensitive, .diacriticInsensitive]
    }

    /// The predicate in the format language; parsing it gives the same predicate back.
    public var description: String {
        switch self {
        case .constant(let value): value ? "TRUEPREDICATE" : "FALSEPREDICATE"
        case .comparison(let c):
            if let subquery = c.subquery {
                "SUBQUERY(" + c.keyPath.dropLast().joined(separator: ".") + ", " + subquery.variable + ", "
                    + subquery.predicate.prefixingKeyPaths(with: subquery.variable).description + ").@count "
                    + c.op.rawValue + " " + c.operand.description
            } else {
                (c.quantifier.map { "\($0.rawValue) " } ?? "") + c.keyPath.joined(separator: ".") + " " + c.op.rawValue
                    + FetchPredicate.optionsText(c.options) + " " + c.operand.description
            }
        case .and(let parts): "(" + parts.map(\.description).joined(separator: " AND ") + ")"
        case .or(let parts): "(" + parts.map(\.description).joined(separator: " OR ") + ")"
        case .not(let inner): "NOT " + inner.description
        }
    }

    static func optionsText(_ options: StringOptions) -> String {
        switch options {
        case .caseInsensitive: "[c]"
        case .diacriticInsensitive: "[d]"
        case .caseDiacriticInsensitive: "[cd]"
        default: ""
        }
    }

    static func literal(_ value: Value) -> String {
        switch value {
        case .null: "nil"
        case .bool(let v): v ? "TRUE" : "FALSE"
        case .int(let v): "\(v)"
        case .double(let v): "\(v)"
        case .string(let v):
            "\"" + v.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
        case .decimal(let v): "\(v)"
        default: "\"\(value)\""
        }
    }

    /// Every key path the predicate reads.
    public var keyPaths: [[String]] {
        switch self {
        case .constant: []
        case .comparison(let c):
            if let subquery = c.subquery {
                // The collection's count, and what the subquery reads on its members (through the collection).
                [c.keyPath] + subquery.predicate.keyPaths.map { Array(c.keyPath.dropLast()) + $0 }
            } else if let other = c.operand.keyPathValue {
                [c.keyPath, other]
            } else {
                [c.keyPath]
            }
        case .and(let parts), .or(let parts): parts.flatMap(\.keyPaths)
        case .not(let inner): inner.keyPaths
        }
    }

    /// The predicate with every key path (left side and key-path operands) mapped by `transform`.
    func renamingKeyPaths(_ transform: ([String]) throws -> [String]) throws -> FetchPredicate {
        switch self {
        case .constant: return self
        case .comparison(var c):
            c.keyPath = try transform(c.keyPath)
            if case .keyPath(let other) = c.operand { c.operand = .keyPath(try transform(other)) }
            return .comparison(c)
        case .and(let parts): return .and(try parts.map { try $0.renamingKeyPaths(transform) })
        case .or(let parts): return .or(try parts.map { try $0.renamingKeyPaths(transform) })
        case .not(let inner): return .not(try inner.renamingKeyPaths(transform))
        }
    }

    /// The predicate with `variable` put back in front of its key paths (for printing a subquery).
    func prefixingKeyPaths(with variable: String) -> FetchPredicate {
        switch self {
        case .constant: return self
        case .comparison(var c):
            c.keyPath = [variable] + c.keyPath
            if case .keyPath(let other) = c.operand { c.operand = .keyPath([variable] + other) }
            return .comparison(c)
        case .and(let parts): return .and(parts.map { $0.prefixingKeyPaths(with: variable) })
        case .or(let parts): return .or(parts.map { $0.prefixingKeyPaths(with: variable) })
        case .not(let inner): return .not(inner.prefixingKeyPaths(with: variable))
        }
    }
}

// MARK: - The typed builder

extension String {
    /// The components of a dotted key path (`author.name` → `["author", "name"]`, empty components dropped). A key
    /// without a dot is its own only component, made without the split's slices: a request built in a loop (a
    /// lookup by one key after another) splits its key paths every time.
    var keyPathComponents: [String] {
        if isEmpty { return [] }
        return utf8.contains(UInt8(ascii: "."))
            ? split(separator: ".", omittingEmptySubsequences: false).map(String.init) : [self]
    }
}

extension FetchPredicate {
    /// A key path to compare: `.key("author.name") == "Le Guin"`.
    public static func key(_ path: String) -> KeyExpression {
        KeyExpression(path: path.keyPathComponents)
    }

    /// `ANY path ...`: true when some object of a to-many key path matches.
    public static func any(_ path: String) -> KeyExpression { KeyExpression(path: key(path).path, quantifier: .any) }
    /// `ALL path ...`: true when every object of a to-many key path matches.
    public static func all(_ path: String) -> KeyExpression { KeyExpression(path: key(path).path, quantifier: .all) }
    /// `NONE path ...`: true when no object of a to-many key path matches.
    public static func none(_ path: String) -> KeyExpression {
        KeyExpression(path: key(path).path, quantifier: FetchPredicate.Quantifier.none)
    }

    /// Both predicates.
    ///
    /// Conjunctions are flattened (`a && b && c` is one AND of three), so a predicate built clause by clause in a
    /// loop stays one level deep.
    public static func && (lhs: FetchPredicate, rhs: FetchPredicate) -> FetchPredicate {
        var parts: [FetchPredicate] = []
        for side in [lhs, rhs] {
            if case .and(let inner) = side { parts += inner } else { parts.append(side) }
        }
        return .and(parts)
    }
    /// Either predicate (disjunctions are flattened like conjunctions).
    public static func || (lhs: FetchPredicate, rhs: FetchPredicate) -> FetchPredicate {
        var parts: [FetchPredicate] = []
        for side in [lhs, rhs] {
            if case .or(let inner) = side { parts += inner } else { parts.append(side) }
        }
        return .or(parts)
    }
    /// The negation.
    public static prefix func ! (operand: FetchPredicate) -> FetchPredicate { .not(operand) }
}

/// The left side of a built comparison.
public struct KeyExpression: Sendable {
    let path: [String]
    var quantifier: FetchPredicate.Quantifier?

    func compare(
        _ op: FetchPredicate.Operator, _ operand: FetchPredicate.Operand, _ options: FetchPredicate.StringOptions = []
    )
        -> FetchPredicate
    {
        .comparison(.init(keyPath: path, op: op, operand: operand, options: options, quantifier: quantifier))
    }

    /// `path.@count`
    public var count: KeyExpression { KeyExpression(path: path + ["@count"], quantifier: quantifier) }
    /// `path.@sum.key`: the sum of a to-many relationship's attribute (0 when empty).
    public func sum(_ key: String) -> KeyExpression {
        KeyExpression(path: path + ["@sum", key], quantifier: quantifier)
    }
    /// `path.@avg.key`: the mean of a to-many relationship's attribute (nil when empty).
    public func average(_ key: String) -> KeyExpression {
        KeyExpression(path: path + ["@avg", key], quantifier: quantifier)
    }
    /// `path.@min.key`: the smallest value of a to-many relationship's attribute (nil when empty).
    public func minimum(_ key: String) -> KeyExpression {
        KeyExpression(path: path + ["@min", key], quantifier: quantifier)
    }
    /// `path.@max.key`: the largest value of a to-many relationship's attribute (nil when empty).
    public func maximum(_ key: String) -> KeyExpression {
        KeyExpression(path: path + ["@max", key], quantifier: quantifier)
    }

    /// `path == value`
    public static func == (lhs: KeyExpression, rhs: Value) -> FetchPredicate { lhs.compare(.equal, .value(rhs)) }
    /// `path != value`
    public static func != (lhs: KeyExpression, rhs: Value) -> FetchPredicate { lhs.compare(.notEqual, .value(rhs)) }
    /// `path < value`
    public static func < (lhs: KeyExpression, rhs: Value) -> FetchPredicate { lhs.compare(.less, .value(rhs)) }
    /// `path <= value`
    public static func <= (lhs: KeyExpression, rhs: Value) -> FetchPredicate { lhs.compare(.lessOrEqual, .value(rhs)) }
    /// `path > value`
    public static func > (lhs: KeyExpression, rhs: Value) -> FetchPredicate { lhs.compare(.greater, .value(rhs)) }
    /// `path >= value`
    public static func >= (lhs: KeyExpression, rhs: Value) -> FetchPredicate {
        lhs.compare(.greaterOrEqual, .value(rhs))
    }
    /// `relationship == object`
    public static func == (lhs: KeyExpression, rhs: ObjectID) -> FetchPredicate { lhs.compare(.equal, .object(rhs)) }

    /// `path == value`, for any plain Swift value (`String`, `Int`, `Date`, ...).
    public static func == (lhs: KeyExpression, rhs: some ValueConvertible) -> FetchPredicate {
        lhs.compare(.equal, .value(rhs.value))
    }
    /// `path != value`, for any plain Swift value.
    public static func != (lhs: KeyExpression, rhs: some ValueConvertible) -> FetchPredicate {
        lhs.compare(.notEqual, .value(rhs.value))
    }
    /// `path < value`, for any plain Swift value.
    public static func < (lhs: KeyExpression, rhs: some ValueConvertible) -> FetchPredicate {
        lhs.compare(.less, .value(rhs.value))
    }
    /// `path <= value`, for any plain Swift value.
    public static func <= (lhs: KeyExpression, rhs: some ValueConvertible) -> FetchPredicate {
        lhs.compare(.lessOrEqual, .value(rhs.value))
    }
    /// `path > value`, for any plain Swift value.
    public static func > (lhs: KeyExpression, rhs: some ValueConvertible) -> FetchPredicate {
        lhs.compare(.greater, .value(rhs.value))
    }
    /// `path >= value`, for any plain Swift value.
    public static func >= (lhs: KeyExpression, rhs: some ValueConvertible) -> FetchPredicate {
        lhs.compare(.greaterOrEqual, .value(rhs.value))
    }

    /// `path == [options] value`
    public func equals(_ value: Value, options: FetchPredicate.StringOptions = []) -> FetchPredicate {
        compare(.equal, .value(value), options)
    }
    /// `path BEGINSWITH prefix`
    public func beginsWith(_ prefix: String, options: FetchPredicate.StringOptions = []) -> FetchPredicate {
        compare(.beginsWith, .value(.string(prefix)), options)
    }
    /// `path ENDSWITH suffix`
    public func endsWith(_ suffix: String, options: FetchPredicate.StringOptions = []) -> FetchPredicate {
        compare(.endsWith, .value(.string(suffix)), options)
    }
    /// `path CONTAINS text`
    public func contains(_ text: String, options: FetchPredicate.StringOptions = []) -> FetchPredicate {
        compare(.contains, .value(.string(text)), options)
    }
    /// `path LIKE pattern` (`*` and `?` wildcards)
    public func like(_ pattern: String, options: FetchPredicate.StringOptions = []) -> FetchPredicate {
        compare(.like, .value(.string(pattern)), options)
    }
    /// `path MATCHES regex` (the whole string)
    public func matches(_ regex: String, options: FetchPredicate.StringOptions = []) -> FetchPredicate {
        compare(.matches, .value(.string(regex)), options)
    }
    /// `path IN {values}`
    public func isIn(_ values: [Value], options: FetchPredicate.StringOptions = []) -> FetchPredicate {
        compare(.in, .list(values), options)
    }
    /// `path BETWEEN {lower, upper}`
    public func between(_ lower: Value, _ upper: Value) -> FetchPredicate { compare(.between, .list([lower, upper])) }
    /// `path == nil`
    public var isNil: FetchPredicate { compare(.equal, .value(.null)) }
}

extension KeyExpression {
    /// A key path, so that `.key("pages") > 3` reads the same inside an operator expression.
    public static func key(_ path: String) -> KeyExpression { FetchPredicate.key(path) }
    /// `ANY path`
    public static func any(_ path: String) -> KeyExpression { FetchPredicate.any(path) }
    /// `ALL path`
    public static func all(_ path: String) -> KeyExpression { FetchPredicate.all(path) }
    /// `NONE path`
    public static func none(_ path: String) -> KeyExpression { FetchPredicate.none(path) }
}

extension FetchPredicate {
    /// How deeply NOT, AND and OR nest, counted without recursion (a predicate built in code can be deep enough
    /// to overflow the stack of any recursive walk); an AND inside an AND, or an OR inside an OR, adds no level.
    var nesting: Int {
        var deepest = 0
        var pending: [(FetchPredicate, depth: Int)] = [(self, 1)]
        while let (node, depth) = pending.popLast() {
            deepest = max(deepest, depth)
            switch node {
            case .constant, .comparison: break
            case .and(let parts):
                for part in parts {
                    if case .and = part { pending.append((part, depth)) } else { pending.append((part, depth + 1)) }
                }
            case .or(let parts):
                for part in parts {
                    if case .or = part { pending.append((part, depth)) } else { pending.append((part, depth + 1)) }
                }
            case .not(let inner):
                pending.append((inner, depth + 1))
            }
        }
        return deepest
    }

    /// Refuses a predicate nested deeper than ``maximumNesting``.
    func checkNesting() throws {
        let nesting = self.nesting
        guard nesting <= Self.maximumNesting + 1 else {
            throw EntityStoreError(
                .invalidPredicate,
                "the predicate nests \(nesting - 1) levels of NOT, AND and OR; the limit is \(Self.maximumNesting)")
        }
    }
}

extension FetchPredicate {
    /// The predicate with every key path (left side and key-path operands) replaced by `rename` of its text.
    func renamingKeys(_ rename: (String) throws -> String) throws -> FetchPredicate {
        switch self {
        case .constant: return self
        case .comparison(var c):
            c.keyPath = [try rename(c.keyPath.joined(separator: "."))]
            if case .keyPath(let other) = c.operand { c.operand = .keyPath([try rename(other.joined(separator: "."))]) }
            return .comparison(c)
        case .and(let parts): return .and(try parts.map { try $0.renamingKeys(rename) })
        case .or(let parts): return .or(try parts.map { try $0.renamingKeys(rename) })
        case .not(let inner): return .not(try inner.renamingKeys(rename))
        }
    }
}

extension FetchPredicate {
    /// The key path of the object itself (`SELF`).
    static let selfKey = "SELF"

    /// Whether a key path names the object itself in `entity`: one component spelled `SELF` in any case, when the
    /// entity has no key of that spelling (which is meant instead).
    static func isSelf(_ path: [String], in entity: Entity) -> Bool {
        path.count == 1 && PredicateParser.keywordForm(of: path[0], is: "SELF") && entity.attributeIndex(path[0]) == nil
            && entity.relationship(path[0]) == nil
    }
}
