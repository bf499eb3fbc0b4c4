/// A predicate's shape: the predicate with its constants reduced to their types.
///
/// Compiling a predicate, resolving its key paths and choosing its index read the constants' types (and whether they
/// are nil), never their values: `score == 4242` and `score == 17` compile alike, as a prepared SQL statement does for
/// its parameters. The store keeps prepared fetches by shape (see `PreparedFetches`), so a lookup by a new value
/// binds the kept form to its constants instead of compiling it again.
///
/// What the shape keeps whole: key paths, operators, options and quantifiers; `LIKE` and `MATCHES` patterns (a
/// pattern is compiled); key path operands; and every comparison with a `SUBQUERY` (its inner predicate is compiled
/// against another entity). A constant keeps its type or nil; a list, its length and each element's type or nil; an
/// object, its entity; a list of objects, its length and each one's entity.
extension FetchPredicate {
    /// Whether `self` and `other` have the same shape (see the extension's discussion).
    func hasSameShape(as other: FetchPredicate) -> Bool {
        switch (self, other) {
        case (.constant(let a), .constant(let b)): return a == b
        case (.comparison(let a), .comparison(let b)): return a.hasSameShape(as: b)
        case (.and(let a), .and(let b)), (.or(let a), .or(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.hasSameShape(as: $1) }
        case (.not(let a), .not(let b)): return a.hasSameShape(as: b)
        default: return false
        }
    }

    /// Hashes the shape: equal for predicates of the same shape.
    func hashShape(into hasher: inout Hasher) {
        switch self {
        case .constant(let value):
            hasher.combine(0 as UInt8)
            hasher.combine(value)
        case .comparison(let c):
            hasher.combine(1 as UInt8)
            c.hashShape(into: &hasher)
        case .and(let parts):
            hasher.combine(2 as UInt8)
            Self.hashShapes(of: parts, into: &hasher)
        case .or(let parts):
            hasher.combine(3 as UInt8)
            Self.hashShapes(of: parts, into: &hasher)
        case .not(let inner):
            hasher.combine(4 as UInt8)
            inner.hashShape(into: &hasher)
        }
    }

    private static func hashShapes(of parts: [FetchPredicate], into hasher: inout Hasher) {
        hasher.combine(parts.count)
        for part in parts { part.hashShape(into: &hasher) }
    }
}

extension FetchPredicate.Comparison {
    /// Whether the comparison's constants are part of its shape (compiled, or compiled against another entity).
    var keepsConstantsInShape: Bool { subquery != nil || op == .like || op == .matches }

    func hasSameShape(as other: FetchPredicate.Comparison) -> Bool {
        guard keyPath == other.keyPath, op == other.op, options == other.options, quantifier == other.quantifier
        else { return false }
        if keepsConstantsInShape || other.keepsConstantsInShape { return self == other }
        switch (operand, other.operand) {
        case (.value(let a), .value(let b)): return a.type == b.type
        case (.list(let a), .list(let b)): return a.count == b.count && zip(a, b).allSatisfy { $0.type == $1.type }
        case (.object(let a), .object(let b)): return a.entityName == b.entityName
        case (.objects(let a), .objects(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.entityName == $1.entityName }
        case (.keyPath(let a), .keyPath(let b)): return a == b
        default: return false
        }
    }

    func hashShape(into hasher: inout Hasher) {
        hasher.combine(keyPath)
        hasher.combine(op)
        hasher.combine(options.rawValue)
        hasher.combine(quantifier)
        if keepsConstantsInShape {
            hasher.combine(self)
            return
        }
        switch operand {
        case .value(let value):
            hasher.combine(0 as UInt8)
            hasher.combine(value.type)
        case .list(let values):
            hasher.combine(1 as UInt8)
            hasher.combine(values.count)
            for value in values { hasher.combine(value.type) }
        case .object(let id):
            hasher.combine(2 as UInt8)
            hasher.combine(id.entityName)
        case .keyPath(let path):
            hasher.combine(3 as UInt8)
            hasher.combine(path)
        case .objects(let ids):
            hasher.combine(4 as UInt8)
            hasher.combine(ids.count)
            for id in ids { hasher.combine(id.entityName) }
        }
    }
}
