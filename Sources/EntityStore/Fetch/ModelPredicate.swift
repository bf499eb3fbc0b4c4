import Foundation

/// A predicate over a model type, written with key paths and plain Swift values and checked by the compiler: a
/// `String` key path compares with strings only. It is a ``FetchPredicate`` underneath: the same planner, the same
/// `explain`.
///
/// <!-- snippet
/// uses: library
/// -->
/// ```swift
/// let recent: ModelPredicate<Book> = \Book.pages > 300 && (\Book.title).contains("war", .caseInsensitive)
/// let byHerbert = \Book.author?.name == "Frank Herbert"
/// let some = ["Dune", "Momo"].contains(\Book.title) || (100...200).contains(\Book.pages)
/// let tagged = (\Book.tags).any(\Tag.name == "sf")
/// ```
public struct ModelPredicate<M: Model>: Sendable, CustomStringConvertible {
    /// The predicate it stands for.
    public let predicate: FetchPredicate

    /// Wraps a predicate.
    public init(_ predicate: FetchPredicate) { self.predicate = predicate }

    /// A predicate in the format language with plain Swift arguments (`String`, `Int`, `Double`, `Date`, arrays of
    /// them, `ObjectID`, models, ...).
    ///
    /// - Throws: ``EntityStoreError/Code/invalidPredicate`` naming the position and what was expected there.
    public init(_ format: String, _ arguments: any PredicateArgumentConvertible...) throws {
        predicate = try FetchPredicate(format: format, arguments: arguments.map(\.predicateArgument))
    }

    /// Every object.
    public static var all: ModelPredicate { ModelPredicate(.constant(true)) }

    public var description: String { predicate.description }

    /// Both predicates.
    public static func && (lhs: ModelPredicate, rhs: ModelPredicate) -> ModelPredicate {
        ModelPredicate(lhs.predicate && rhs.predicate)
    }
    /// Either predicate.
    public static func || (lhs: ModelPredicate, rhs: ModelPredicate) -> ModelPredicate {
        ModelPredicate(lhs.predicate || rhs.predicate)
    }
    /// The negation.
    public static prefix func ! (operand: ModelPredicate) -> ModelPredicate { ModelPredicate(!operand.predicate) }
}

func comparison<M: Model, V>(
    _ keyPath: KeyPath<M, V>, _ op: FetchPredicate.Operator, _ operand: FetchPredicate.Operand,
    _ options: FetchPredicate.StringOptions = [], quantifier: FetchPredicate.Quantifier? = nil
) -> ModelPredicate<M> {
    ModelPredicate(
        .comparison(
            .init(
                keyPath: ModelKeys.components(keyPath), op: op, operand: operand,
                options: options, quantifier: quantifier)))
}

// MARK: - Comparisons of attributes

/// `keyPath == value`
public func == <M: Model, V: ValueConvertible>(lhs: KeyPath<M, V>, rhs: V) -> ModelPredicate<M> {
    comparison(lhs, .equal, .value(rhs.value))
}
/// `keyPath != value`
public func != <M: Model, V: ValueConvertible>(lhs: KeyPath<M, V>, rhs: V) -> ModelPredicate<M> {
    comparison(lhs, .notEqual, .value(rhs.value))
}
/// `keyPath < value`
public func < <M: Model, V: ValueConvertible & Comparable>(lhs: KeyPath<M, V>, rhs: V) -> ModelPredicate<M> {
    comparison(lhs, .less, .value(rhs.value))
}
/// `keyPath <= value`
public func <= <M: Model, V: ValueConvertible & Comparable>(lhs: KeyPath<M, V>, rhs: V) -> ModelPredicate<M> {
    comparison(lhs, .lessOrEqual, .value(rhs.value))
}
/// `keyPath > value`
public func > <M: Model, V: ValueConvertible & Comparable>(lhs: KeyPath<M, V>, rhs: V) -> ModelPredicate<M> {
    comparison(lhs, .greater, .value(rhs.value))
}
/// `keyPath >= value`
public func >= <M: Model, V: ValueConvertible & Comparable>(lhs: KeyPath<M, V>, rhs: V) -> ModelPredicate<M> {
    comparison(lhs, .greaterOrEqual, .value(rhs.value))
}
/// `keyPath < value` for an optional attribute (nil takes part in no ordering comparison).
public func < <M: Model, V: ValueConvertible & Comparable>(lhs: KeyPath<M, V?>, rhs: V) -> ModelPredicate<M> {
    comparison(lhs, .less, .value(rhs.value))
}
/// `keyPath <= value` for an optional attribute.
public func <= <M: Model, V: ValueConvertible & Comparable>(lhs: KeyPath<M, V?>, rhs: V) -> ModelPredicate<M> {
    comparison(lhs, .lessOrEqual, .value(rhs.value))
}
/// `keyPath > value` for an optional attribute.
public func > <M: Model, V: ValueConvertible & Comparable>(lhs: KeyPath<M, V?>, rhs: V) -> ModelPredicate<M> {
    comparison(lhs, .greater, .value(rhs.value))
}
/// `keyPath >= value` for an optional attribute.
public func >= <M: Model, V: ValueConvertible & Comparable>(lhs: KeyPath<M, V?>, rhs: V) -> ModelPredicate<M> {
    comparison(lhs, .greaterOrEqual, .value(rhs.value))
}

// MARK: - Comparisons of relationships

/// `relationship == object` (or `== nil`).
public func == <M: Model, D: Model>(lhs: KeyPath<M, D?>, rhs: D?) -> ModelPredicate<M> {
    comparison(lhs, .equal, rhs.map { .object($0.objectID) } ?? .value(.null))
}
/// `relationship != object` (or `!= nil`).
public func != <M: Model, D: Model>(lhs: KeyPath<M, D?>, rhs: D?) -> ModelPredicate<M> {
    comparison(lhs, .notEqual, rhs.map { .object($0.objectID) } ?? .value(.null))
}

// MARK: - Strings

extension KeyPath where Root: Model, Value: StringKey {
    /// `keyPath CONTAINS[options] text`
    public func contains(_ text: String, _ options: FetchPredicate.StringOptions = []) -> ModelPredicate<Root> {
        comparison(self, .contains, .value(.string(text)), options)
    }
    /// `keyPath BEGINSWITH[options] prefix`
    public func hasPrefix(_ prefix: String, _ options: FetchPredicate.StringOptions = []) -> ModelPredicate<Root> {
        comparison(self, .beginsWith, .value(.string(prefix)), options)
    }
    /// `keyPath ENDSWITH[options] suffix`
    public func hasSuffix(_ suffix: String, _ options: FetchPredicate.StringOptions = []) -> ModelPredicate<Root> {
        comparison(self, .endsWith, .value(.string(suffix)), options)
    }
    /// `keyPath ==[options] text`
    public func equals(_ text: String, _ options: FetchPredicate.StringOptions) -> ModelPredicate<Root> {
        comparison(self, .equal, .value(.string(text)), options)
    }
    /// `keyPath LIKE[options] pattern` (`*` and `?` wildcards)
    public func like(_ pattern: String, _ options: FetchPredicate.StringOptions = []) -> ModelPredicate<Root> {
        comparison(self, .like, .value(.string(pattern)), options)
    }
    /// `keyPath MATCHES[options] regex` (the whole string)
    public func matches(_ regex: String, _ options: FetchPredicate.StringOptions = []) -> ModelPredicate<Root> {
        comparison(self, .matches, .value(.string(regex)), options)
    }
}

/// `String` and `String?`: the key paths that take string comparisons.
public protocol StringKey {}
extension String: StringKey {}
extension Optional: StringKey where Wrapped == String {}

// MARK: - Lists and ranges

extension Sequence where Element: ValueConvertible {
    /// `keyPath IN {values}`: whether the attribute holds one of the values.
    public func contains<M: Model>(_ keyPath: KeyPath<M, Element>) -> ModelPredicate<M> {
        comparison(keyPath, .in, .list(map(\.value)))
    }
}

extension Sequence where Element: Model {
    /// `SELF IN {objects}`: whether the object is one of these (`books.contains(\Book.self)`); the objects are read
    /// by ID.
    public func contains(_ identity: KeyPath<Element, Element>) -> ModelPredicate<Element> {
        guard identity == \Element.self else {
            // Only the identity key path names the object itself: say so at use, as other misuses do.
            return ModelPredicate(
                .comparison(
                    .init(
                        keyPath: ["<contains(_:) of models takes \\.self, not \(identity)>"], op: .equal,
                        operand: .value(.null))))
        }
        return ModelPredicate(
            .comparison(.init(keyPath: [FetchPredicate.selfKey], op: .in, operand: .objects(map(\.objectID)))))
    }

    /// `relationship IN {objects}`: whether a to-one relationship holds one of these (`authors.contains(\Book.author)`).
    public func contains<M: Model>(_ keyPath: KeyPath<M, Element?>) -> ModelPredicate<M> {
        comparison(keyPath, .in, .objects(map(\.objectID)))
    }
}

extension ClosedRange where Bound: ValueConvertible {
    /// `keyPath BETWEEN {lower, upper}`: whether the attribute lies in the range.
    public func contains<M: Model>(_ keyPath: KeyPath<M, Bound>) -> ModelPredicate<M> {
        comparison(keyPath, .between, .list([lowerBound.value, upperBound.value]))
    }

    /// `keyPath BETWEEN {lower, upper}` for an optional attribute.
    public func contains<M: Model>(_ keyPath: KeyPath<M, Bound?>) -> ModelPredicate<M> {
        comparison(keyPath, .between, .list([lowerBound.value, upperBound.value]))
    }
}

// MARK: - To-many relationships

extension KeyPath where Root: Model {
    /// `ANY path.key op value`: some related object matches `comparison` (a single comparison of the destination).
    public func any<D: Model>(_ comparison: ModelPredicate<D>) -> ModelPredicate<Root> where Value == [D] {
        quantified(.any, comparison)
    }
    /// `ALL path.key op value`: every related object matches.
    public func all<D: Model>(_ comparison: ModelPredicate<D>) -> ModelPredicate<Root> where Value == [D] {
        quantified(.all, comparison)
    }
    /// `NONE path.key op value`: no related object matches.
    public func none<D: Model>(_ comparison: ModelPredicate<D>) -> ModelPredicate<Root> where Value == [D] {
        quantified(.none, comparison)
    }
    /// `path.@count op n`: the number of related objects.
    public func count<D: Model>() -> ModelCount<Root> where Value == [D] {
        ModelCount(path: ModelKeys.components(self) + ["@count"])
    }

    private func quantified<D: Model>(
        _ quantifier: FetchPredicate.Quantifier, _ inner: ModelPredicate<D>
    ) -> ModelPredicate<Root> {
        let prefix = ModelKeys.components(self)
        guard case .comparison(var c) = inner.predicate, c.quantifier == nil else {
            // A compound condition over one related object needs SUBQUERY, which is not supported: say so at use.
            return ModelPredicate(
                .comparison(
                    .init(
                        keyPath: ["<\(quantifier.rawValue) takes one comparison of \(D.entityName), not \(inner)>"],
                        op: .equal, operand: .value(.null))))
        }
        c.keyPath = prefix + c.keyPath
        c.quantifier = quantifier
        return ModelPredicate(.comparison(c))
    }
}

/// The number of objects of a to-many relationship, to compare: `(\Author.books).count() > 3`.
public struct ModelCount<M: Model>: Sendable {
    let path: [String]

    func compare(_ op: FetchPredicate.Operator, _ count: Int) -> ModelPredicate<M> {
        ModelPredicate(.comparison(.init(keyPath: path, op: op, operand: .value(.int(Int64(count))))))
    }

    /// `path.@count == n`
    public static func == (lhs: ModelCount, rhs: Int) -> ModelPredicate<M> { lhs.compare(.equal, rhs) }
    /// `path.@count != n`
    public static func != (lhs: ModelCount, rhs: Int) -> ModelPredicate<M> { lhs.compare(.notEqual, rhs) }
    /// `path.@count < n`
    public static func < (lhs: ModelCount, rhs: Int) -> ModelPredicate<M> { lhs.compare(.less, rhs) }
    /// `path.@count <= n`
    public static func <= (lhs: ModelCount, rhs: Int) -> ModelPredicate<M> { lhs.compare(.lessOrEqual, rhs) }
    /// `path.@count > n`
    public static func > (lhs: ModelCount, rhs: Int) -> ModelPredicate<M> { lhs.compare(.greater, rhs) }
    /// `path.@count >= n`
    public static func >= (lhs: ModelCount, rhs: Int) -> ModelPredicate<M> { lhs.compare(.greaterOrEqual, rhs) }
}

// MARK: - Sorts

extension SortKey {
    /// A sort by a model key path (through to-one relationships too: `\Book.author?.name`).
    public init<M: Model, V: ValueConvertible>(
        _ keyPath: KeyPath<M, V>, ascending: Bool = true, comparison: Comparison = .binary
    ) {
        self.init(ModelKeys.text(keyPath), ascending: ascending, comparison: comparison)
    }
}
