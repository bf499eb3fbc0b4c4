import Foundation

/// An argument for a `%@`, `%K`, `%d` or `%f` placeholder in a predicate format string.
public enum PredicateArgument: Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral, ExpressibleByNilLiteral, ExpressibleByArrayLiteral
{
    /// A value for `%@`, `%d` or `%f`.
    case value(Value)
    /// A list for `IN %@`.
    case values([Value])
    /// An object, for `relationship == %@` or `SELF == %@`.
    case object(ObjectID)
    /// Objects, for `SELF IN %@`, `relationship IN %@` or `ANY relationship IN %@`.
    case objects([ObjectID])
    /// A key path for `%K`.
    case keyPath(String)

    /// A string value.
    public init(stringLiteral value: String) { self = .value(.string(value)) }
    /// An integer value.
    public init(integerLiteral value: Int64) { self = .value(.int(value)) }
    /// A double value.
    public init(floatLiteral value: Double) { self = .value(.double(value)) }
    /// A boolean value.
    public init(booleanLiteral value: Bool) { self = .value(.bool(value)) }
    /// nil.
    public init(nilLiteral: ()) { self = .value(.null) }
    /// A list of values.
    public init(arrayLiteral elements: Value...) { self = .values(elements) }
}

/// A value that can stand for a placeholder of a predicate format: `String`, every integer type, `Double`,
/// `Float`, `Bool`, `Date`, `UUID`, `Data`, `Decimal`, optionals, arrays and sets of those, `ObjectID`, managed objects,
/// models, and ``PredicateArgument`` itself (`.objects(ids)` for a list of objects: `SELF IN %@`).
///
/// ```swift
/// let name = "Momo"; let minimum = 300
/// try FetchPredicate("title == %@ OR pages > %d", name, minimum)
/// ```
public protocol PredicateArgumentConvertible {
    /// The argument it stands for.
    var predicateArgument: PredicateArgument { get }
}

extension PredicateArgument: PredicateArgumentConvertible {
    /// Itself.
    public var predicateArgument: PredicateArgument { self }
}

extension PredicateArgumentConvertible where Self: ValueConvertible {
    /// The value.
    public var predicateArgument: PredicateArgument { .value(value) }
}

extension String: PredicateArgumentConvertible {}
extension Int: PredicateArgumentConvertible {}
extension Int64: PredicateArgumentConvertible {}
extension Int32: PredicateArgumentConvertible {}
extension Int16: PredicateArgumentConvertible {}
extension Int8: PredicateArgumentConvertible {}
extension UInt32: PredicateArgumentConvertible {}
extension UInt16: PredicateArgumentConvertible {}
extension UInt8: PredicateArgumentConvertible {}
extension Double: PredicateArgumentConvertible {}
extension Float: PredicateArgumentConvertible {}
extension Bool: PredicateArgumentConvertible {}
extension Date: PredicateArgumentConvertible {}
extension UUID: PredicateArgumentConvertible {}
extension Data: PredicateArgumentConvertible {}
extension Decimal: PredicateArgumentConvertible {}
extension Optional: PredicateArgumentConvertible where Wrapped: ValueConvertible {}

extension Value: PredicateArgumentConvertible {
    /// The value.
    public var predicateArgument: PredicateArgument { .value(self) }
}

extension Array: PredicateArgumentConvertible where Element: ValueConvertible {
    /// The values, for `IN %@`.
    public var predicateArgument: PredicateArgument { .values(map(\.value)) }
}

extension Set: PredicateArgumentConvertible where Element: ValueConvertible {
    /// The values, for `IN %@`.
    public var predicateArgument: PredicateArgument { .values(map(\.value)) }
}

extension ObjectID: PredicateArgumentConvertible {
    /// The object, for `relationship == %@`.
    public var predicateArgument: PredicateArgument { .object(self) }
}

extension ManagedObject: PredicateArgumentConvertible {
    /// The object's ID, for `relationship == %@` or `SELF == %@`.
    public var predicateArgument: PredicateArgument { .object(objectID) }
}

extension Model: PredicateArgumentConvertible {
    /// The model's object, for `relationship == %@`.
    public var predicateArgument: PredicateArgument { .object(objectID) }
}

extension FetchPredicate {
    /// The longest format string accepted, in UTF-8 bytes.
    public static let maximumFormatLength = 4096
    /// The deepest nesting of parentheses and NOT accepted.
    public static let maximumNesting = 64

    /// Parses a predicate in the NSPredicate format language.
    ///
    /// Supported: `==` `=` `!=` `<>` `<` `<=` `>` `>=`; `AND` `&&` `OR` `||` `NOT` `!`; parentheses;
    /// `BEGINSWITH` `ENDSWITH` `CONTAINS` `LIKE` `MATCHES` with `[c]` `[d]` `[cd]`; `IN` with `{list}` or an argument;
    /// `BETWEEN {low, high}`; `nil`/`NULL`; `TRUEPREDICATE`, `FALSEPREDICATE`; key paths through relationships;
    /// `ANY` `SOME` `ALL` `NONE` and `@count`; the placeholders `%@` `%K` `%d` `%i` `%ld` `%f`. `SELF` is the object
    /// itself: `SELF == %@` with an object, `SELF IN %@` with ``PredicateArgument/objects(_:)`` (the objects are read
    /// by ID, not found by a scan); a relationship takes `IN %@` too (`author IN %@`, `ANY tags IN %@`), and a to-many
    /// one `CONTAINS %@` or `%@ IN tags`. Booleans are
    /// `TRUE`/`YES` and `FALSE`/`NO`; as in Core Data, a bool attribute also compares with the numbers 1 and 0
    /// (`done == 0`, `done == %d`).
    ///
    /// - Throws: ``EntityStoreError/Code/invalidPredicate`` with the position and what was expected there.
    public init(_ format: String, _ arguments: any PredicateArgumentConvertible...) throws {
        self = try FetchPredicate(format: format, arguments: arguments.map(\.predicateArgument))
    }

    /// Parses a predicate with an argument array.
    public init(format: String, arguments: [PredicateArgument]) throws {
        guard format.utf8.count <= FetchPredicate.maximumFormatLength else {
            throw EntityStoreError(
                .invalidPredicate,
                "the predicate is \(format.utf8.count) bytes long; the limit is \(FetchPredicate.maximumFormatLength)")
        }
        var parser = PredicateParser(format: format, arguments: arguments)
        self = try parser.parse()
    }
}

/// A recursive-descent parser for the NSPredicate format language.
struct PredicateParser {
    enum Token: Equatable {
        case word(String)
        case string(String)
        case number(Value)
        case symbol(String)
        case placeholder(Character)
        case keyComponent(String)  // `@count`, `@sum`, `@avg`, `@min`, `@max`
        case escaped(String)  // `#key`: a key that is also a keyword
        case end
    }

    let scalars: [Unicode.Scalar]
    var arguments: [PredicateArgument]
    var argumentIndex = 0
    var position = 0
    var tokenStart = 0
    var token: Token = .end
    var depth = 0
    /// The variables of the SUBQUERYs being parsed (innermost last).
    var variables: [String] = []

    init(format: String, arguments: [PredicateArgument]) {
        scalars = Array(format.unicodeScalars)
        self.arguments = arguments
    }

    mutating func parse() throws -> FetchPredicate {
        try advance()
        let predicate = try parseOr()
        guard token == .end else { throw expected("AND, OR or the end of the predicate") }
        guard argumentIndex == arguments.count else {
            throw EntityStoreError(
                .invalidPredicate,
                "\(arguments.count) arguments were given but the format uses \(argumentIndex)")
        }
        return predicate
    }

    // MARK: Errors

    func describe(_ token: Token) -> String {
        switch token {
        case .word(let w): "'\(w)'"
        case .string(let s): "the string \"\(s)\""
        case .number(let n): "the number \(n)"
        case .symbol(let s): "'\(s)'"
        case .placeholder(let c): "'%\(c)'"
        case .keyComponent(let k): "'\(k)'"
        case .escaped(let k): "'#\(k)'"
        case .end: "the end of the predicate"
        }
    }

    func expected(_ what: String) -> EntityStoreError {
        EntityStoreError(
            .invalidPredicate, "at position \(tokenStart + 1): expected \(what), found \(describe(token))")
    }

    func fail(_ message: String) -> EntityStoreError {
        EntityStoreError(.invalidPredicate, "at position \(tokenStart + 1): \(message)")
    }

    // MARK: Tokens

    /// Whether `c` is white space (ASCII answered without the Unicode property tables).
    @inline(__always)
    static func isWhitespace(_ c: Unicode.Scalar) -> Bool {
        c.value < 0x80 ? c == " " || (0x09...0x0D).contains(c.value) : c.properties.isWhitespace
    }

    /// Whether `c` may continue a word: a letter, `_` or a digit (ASCII answered without the property tables).
    @inline(__always)
    static func isWordCharacter(_ c: Unicode.Scalar) -> Bool {
        if c.value < 0x80 {
            let byte = UInt8(c.value) | 0x20
            return (byte >= 0x61 && byte <= 0x7A) || c == "_" || ("0"..."9").contains(c)
        }
        return c.properties.isAlphabetic
    }

    /// The format's scalars in `range` as a string, appended one by one (a string made from the slice went through
    /// the standard library's unspecialized generic path, a thousand instructions and more per word).
    func text(_ range: Range<Int>) -> String {
        var text = ""
        text.unicodeScalars.reserveCapacity(range.count)
        for i in range { text.unicodeScalars.append(scalars[i]) }
        return text
    }

    mutating func advance() throws {
        while position < scalars.count, Self.isWhitespace(scalars[position]) { position += 1 }
        tokenStart = position
        guard position < scalars.count else {
            token = .end
            return
        }
        let c = scalars[position]
        if (Self.isWordCharacter(c) && !("0"..."9").contains(c)) || c == "#" || c == "$" {
            if c == "#" || c == "$" { position += 1 }
            let start = position
            while position < scalars.count, Self.isWordCharacter(scalars[position]) {
                position += 1
            }
            guard position > start else { throw fail("'\(c)' must be followed by a name") }
            let word = text(start..<position)
            token = c == "#" ? .escaped(word) : .word(c == "$" ? "$" + word : word)
            return
        }
        if ("0"..."9").contains(c)
            || (c == "-" && position + 1 < scalars.count && ("0"..."9").contains(scalars[position + 1]))
        {
            try lexNumber()
            return
        }
        if c == "\"" || c == "'" {
            try lexString(quote: c)
            return
        }
        if c == "%" {
            position += 1
            var spec = ""
            while position < scalars.count, "lqh".unicodeScalars.contains(scalars[position]) { position += 1 }
            guard position < scalars.count else { throw fail("'%' must be followed by @, K, d, i or f") }
            spec = String(scalars[position])
            guard ["@", "K", "d", "i", "u", "f"].contains(spec) else {
                throw fail("unknown placeholder '%\(spec)' (expected %@, %K, %d or %f)")
            }
            position += 1
            token = .placeholder(Character(spec))
            return
        }
        if c == "@" {
            position += 1
            let start = position
            while position < scalars.count, scalars[position].properties.isAlphabetic { position += 1 }
            let name = text(start..<position)
            guard ["count", "sum", "avg", "min", "max"].contains(name) else {
                throw fail("unknown key '@\(name)' (@count, @sum, @avg, @min and @max are supported)")
            }
            token = .keyComponent("@" + name)
            return
        }
        let two = position + 1 < scalars.count ? String(c) + String(scalars[position + 1]) : ""
        if ["==", "!=", "<>", "<=", ">=", "=<", "=>", "&&", "||"].contains(two) {
            position += 2
            let normal = ["<>": "!=", "=<": "<=", "=>": ">="][two] ?? two
            token = .symbol(normal)
            return
        }
        if "=<>!(){},.[]".unicodeScalars.contains(c) {
            position += 1
            token = .symbol(c == "=" ? "==" : String(c))
            return
        }
        throw fail("unexpected character '\(c)'")
    }

    mutating func lexNumber() throws {
        let start = position
        if scalars[position] == "-" { position += 1 }
        var isDouble = false
        while position < scalars.count {
            let c = scalars[position]
            if ("0"..."9").contains(c) {
                position += 1
            } else if c == "." && !isDouble && position + 1 < scalars.count
                && ("0"..."9").contains(scalars[position + 1])
            {
                isDouble = true
                position += 1
            } else if (c == "e" || c == "E") && position + 1 < scalars.count {
                isDouble = true
                position += 1
                if scalars[position] == "-" || scalars[position] == "+" { position += 1 }
            } else {
                break
            }
        }
        let text = text(start..<position)
        if !isDouble, let n = Int64(text) {
            token = .number(.int(n))
        } else if let d = Double(text), d.isFinite {
            token = .number(.double(d))
        } else {
            throw fail("'\(text)' is not a number this predicate can hold")
        }
    }

    mutating func lexString(quote: Unicode.Scalar) throws {
        position += 1
        var text = String.UnicodeScalarView()
        while true {
            guard position < scalars.count else { throw fail("the string is not closed (expected \(quote))") }
            let c = scalars[position]
            position += 1
            if c == quote { break }
            if c == "\\" {
                guard position < scalars.count else { throw fail("the string ends in an escape") }
                let e = scalars[position]
                position += 1
                switch e {
                case "n": text.append("\n")
                case "t": text.append("\t")
                case "r": text.append("\r")
                case "0": text.append("\0")
                default: text.append(e)
                }
            } else {
                text.append(c)
            }
        }
        token = .string(String(text))
    }

    /// Whether the token is the word `keyword` (upper-case ASCII), in any case.
    ///
    /// Keywords are ASCII, so a word is one only when it is the keyword's letters in ASCII upper or lower case: a
    /// word with any other character (`ın` with a dotless i, the Kelvin sign) is a key path. Compared byte by byte
    /// with no string made: a Foundation case-insensitive comparison per keyword tried was most of the time it took
    /// to parse a short predicate.
    func isKeyword(_ keyword: StaticString) -> Bool {
        guard case .word(let w) = token else { return false }
        return Self.keywordForm(of: w, is: keyword)
    }

    /// Whether the token is either of two keywords (see ``isKeyword(_:)``).
    func isKeyword(_ keyword: StaticString, _ other: StaticString) -> Bool {
        isKeyword(keyword) || isKeyword(other)
    }

    /// Whether `word`, with its ASCII letters in upper case, is `keyword`.
    static func keywordForm(of word: String, is keyword: StaticString) -> Bool {
        keyword.withUTF8Buffer { keyword in
            var i = 0
            for byte in word.utf8 {
                guard i < keyword.count else { return false }
                let upper = byte >= 0x61 && byte <= 0x7A ? byte - 0x20 : byte
                guard upper == keyword[i] else { return false }
                i += 1
            }
            return i == keyword.count
        }
    }

    /// `word` in upper case when it is ASCII (a candidate keyword or operator), and "" otherwise: keywords are ASCII,
    /// and `uppercased()` would turn some other words into one (`ın` into `IN`).
    static func keywordForm(of word: String) -> String {
        guard word.utf8.allSatisfy({ $0 < 0x80 }) else { return "" }
        return String(decoding: word.utf8.map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }, as: UTF8.self)
    }

    // MARK: Grammar

    mutating func parseOr() throws -> FetchPredicate {
        var parts = [try parseAnd()]
        while isKeyword("OR") || token == .symbol("||") {
            try advance()
            parts.append(try parseAnd())
        }
        return parts.count == 1 ? parts[0] : .or(parts)
    }

    mutating func parseAnd() throws -> FetchPredicate {
        var parts = [try parseNot()]
        while isKeyword("AND") || token == .symbol("&&") {
            try advance()
            parts.append(try parseNot())
        }
        return parts.count == 1 ? parts[0] : .and(parts)
    }

    mutating func nest() throws {
        depth += 1
        if depth > FetchPredicate.maximumNesting {
            throw fail("the predicate nests deeper than \(FetchPredicate.maximumNesting) levels")
        }
    }

    mutating func parseNot() throws -> FetchPredicate {
        if isKeyword("NOT") || token == .symbol("!") {
            try advance()
            try nest()
            defer { depth -= 1 }
            return .not(try parseNot())
        }
        return try parsePrimary()
    }

    mutating func parsePrimary() throws -> FetchPredicate {
        if token == .symbol("(") {
            try advance()
            try nest()
            defer { depth -= 1 }
            let inner = try parseOr()
            guard token == .symbol(")") else { throw expected("')'") }
            try advance()
            return inner
        }
        if isKeyword("TRUEPREDICATE") {
            try advance()
            return .constant(true)
        }
        if isKeyword("FALSEPREDICATE") {
            try advance()
            return .constant(false)
        }
        return try parseComparison()
    }

    enum Side {
        case keyPath([String])
        case value(Value)
        case list([Value])
        case object(ObjectID)
        case objects([ObjectID])
    }

    mutating func parseComparison() throws -> FetchPredicate {
        var quantifier: FetchPredicate.Quantifier?
        if isKeyword("ANY", "SOME") {
            quantifier = .any
        } else if isKeyword("ALL") {
            quantifier = .all
        } else if isKeyword("NONE") {
            quantifier = FetchPredicate.Quantifier.none  // not `.none`: that is Optional's nil
        }
        if quantifier != nil { try advance() }
        if quantifier == nil, isKeyword("SUBQUERY") { return try parseSubquery() }
        let leftStart = tokenStart
        let left = try parseExpression()
        let opStart = tokenStart
        let op = try parseOperator()
        let options = try parseOptions()
        let right = try parseExpression()

        switch (left, right) {
        case (.keyPath(let path), _):
            let operand: FetchPredicate.Operand
            switch right {
            case .keyPath(let other): operand = .keyPath(other)
            case .value(let value): operand = .value(value)
            case .list(let values): operand = .list(values)
            case .object(let id): operand = .object(id)
            case .objects(let ids): operand = .objects(ids)
            }
            if op == .contains, case .object(let id) = operand, quantifier == nil, options.isEmpty {
                // `tags CONTAINS %@`: the to-many relationship holds the object.
                return try make(path, .equal, .object(id), options, .any, opStart)
            }
            return try make(path, op, operand, options, quantifier, opStart)
        case (.value(let value), .keyPath(let path)) where quantifier == nil:
            if op == .in {
                // `value IN collection`: some element of the collection equals the value.
                return try make(path, .equal, .value(value), options, .any, opStart)
            }
            guard let flipped = op.flipped else {
                tokenStart = leftStart
                throw fail("the left side of \(op.rawValue) must be a key path")
            }
            return try make(path, flipped, .value(value), options, nil, opStart)
        case (.object(let id), .keyPath(let path)) where quantifier == nil && (op == .equal || op == .notEqual):
            return try make(path, op, .object(id), options, nil, opStart)
        case (.object(let id), .keyPath(let path)) where quantifier == nil && op == .in && options.isEmpty:
            // `%@ IN tags`: the to-many relationship holds the object.
            return try make(path, .equal, .object(id), options, .any, opStart)
        default:
            tokenStart = leftStart
            throw fail("a comparison needs a key path on one side")
        }
    }

    /// `SUBQUERY(collection, $x, predicate on $x).@count op value`: how many objects of a to-many key path match a
    /// predicate.
    mutating func parseSubquery() throws -> FetchPredicate {
        try advance()
        guard token == .symbol("(") else { throw expected("'(' after SUBQUERY") }
        try advance()
        try nest()
        defer { depth -= 1 }
        let collection = try parseKeyPath()
        guard token == .symbol(",") else { throw expected("',' after the SUBQUERY's collection") }
        try advance()
        guard case .word(let variable) = token, variable.hasPrefix("$") else {
            throw expected("a variable such as $x")
        }
        try advance()
        guard token == .symbol(",") else { throw expected("',' after the SUBQUERY's variable") }
        try advance()
        variables.append(variable)
        let inner = try parseOr()
        variables.removeLast()
        guard token == .symbol(")") else { throw expected("')' closing the SUBQUERY") }
        try advance()
        guard token == .symbol(".") else { throw expected("'.@count' after the SUBQUERY") }
        try advance()
        guard token == .keyComponent("@count") else { throw expected("'@count' after the SUBQUERY") }
        try advance()
        let opStart = tokenStart
        let op = try parseOperator()
        let options = try parseOptions()
        let operand: FetchPredicate.Operand
        switch try parseExpression() {
        case .value(let value): operand = .value(value)
        case .list(let values): operand = .list(values)
        default: throw fail("a SUBQUERY's @count is compared with a number")
        }
        // Key paths inside start with the variable, which stands for each object of the collection.
        let predicate = try inner.renamingKeyPaths { path in
            if path == [variable] { return [FetchPredicate.selfKey] }  // each object itself
            guard path.first == variable, path.count > 1 else {
                throw fail(
                    "inside SUBQUERY, key paths start with \(variable) ('\(path.joined(separator: "."))' does not)")
            }
            return Array(path.dropFirst())
        }
        guard case .comparison(var comparison) = try make(collection + ["@count"], op, operand, options, nil, opStart)
        else { return .constant(false) }
        comparison.subquery = FetchPredicate.Subquery(variable: variable, predicate: predicate)
        return .comparison(comparison)
    }

    func make(
        _ path: [String], _ op: FetchPredicate.Operator, _ operand: FetchPredicate.Operand,
        _ options: FetchPredicate.StringOptions, _ quantifier: FetchPredicate.Quantifier?, _ at: Int
    ) throws -> FetchPredicate {
        var copy = self
        copy.tokenStart = at
        switch op {
        case .in:
            switch operand {
            case .list, .objects: break
            default: throw copy.fail("IN needs a list: {a, b} or an array argument")
            }
        case .between:
            guard case .list(let values) = operand, values.count == 2 else {
                throw copy.fail("BETWEEN needs a list of two values: {low, high}")
            }
        default:
            switch operand {
            case .list, .objects: throw copy.fail("\(op.rawValue) cannot take a list")
            default: break
            }
        }
        return .comparison(.init(keyPath: path, op: op, operand: operand, options: options, quantifier: quantifier))
    }

    mutating func parseOperator() throws -> FetchPredicate.Operator {
        let op: FetchPredicate.Operator
        switch token {
        case .symbol("=="): op = .equal
        case .symbol("!="): op = .notEqual
        case .symbol("<"): op = .less
        case .symbol("<="): op = .lessOrEqual
        case .symbol(">"): op = .greater
        case .symbol(">="): op = .greaterOrEqual
        case .word(let w):
            switch Self.keywordForm(of: w) {
            case "BEGINSWITH": op = .beginsWith
            case "ENDSWITH": op = .endsWith
            case "CONTAINS": op = .contains
            case "LIKE": op = .like
            case "MATCHES": op = .matches
            case "IN": op = .in
            case "BETWEEN": op = .between
            default: throw expected("a comparison operator (==, <, BEGINSWITH, IN, ...)")
            }
        default: throw expected("a comparison operator (==, <, BEGINSWITH, IN, ...)")
        }
        try advance()
        return op
    }

    mutating func parseOptions() throws -> FetchPredicate.StringOptions {
        guard token == .symbol("[") else { return [] }
        try advance()
        guard case .word(let w) = token else { throw expected("c, d or cd") }
        var options: FetchPredicate.StringOptions = []
        for c in w.lowercased() {
            switch c {
            case "c": options.insert(.caseInsensitive)
            case "d": options.insert(.diacriticInsensitive)
            case "n": break  // normalized: our comparisons are already on normalized text
            default: throw fail("unknown comparison option '\(c)' (expected c, d or cd)")
            }
        }
        try advance()
        guard token == .symbol("]") else { throw expected("']'") }
        try advance()
        return options
    }

    mutating func nextArgument(_ spec: Character) throws -> PredicateArgument {
        guard argumentIndex < arguments.count else {
            throw fail("'%\(spec)' has no argument (\(arguments.count) given)")
        }
        defer { argumentIndex += 1 }
        return arguments[argumentIndex]
    }

    mutating func parseExpression() throws -> Side {
        switch token {
        case .word(let w):
            switch Self.keywordForm(of: w) {
            case "NIL", "NULL":
                try advance()
                return .value(.null)
            case "TRUE", "YES":
                try advance()
                return .value(.bool(true))
            case "FALSE", "NO":
                try advance()
                return .value(.bool(false))
            case "AND", "OR", "NOT", "IN", "BETWEEN", "BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE", "MATCHES", "ANY",
                "ALL", "NONE", "SOME", "TRUEPREDICATE", "FALSEPREDICATE":
                throw expected("a key path or a value")
            default:
                return .keyPath(try parseKeyPath())
            }
        case .escaped:
            return .keyPath(try parseKeyPath())
        case .string(let s):
            try advance()
            return .value(.string(s))
        case .number(let n):
            try advance()
            return .value(n)
        case .symbol("{"):
            try advance()
            var values: [Value] = []
            if token != .symbol("}") {
                while true {
                    // A list in a list is refused before it is read: read first, lists nested thousands deep (a
                    // hostile format string) ran the parser out of stack.
                    if token == .symbol("{") { throw fail("a list holds values only") }
                    switch try parseExpression() {
                    case .value(let v): values.append(v)
                    default: throw fail("a list holds values only")
                    }
                    if token == .symbol(",") {
                        try advance()
                        continue
                    }
                    break
                }
            }
            guard token == .symbol("}") else { throw expected("',' or '}'") }
            try advance()
            return .list(values)
        case .placeholder(let spec):
            let argument = try nextArgument(spec)
            switch (spec, argument) {
            case ("K", .keyPath(let path)), ("K", .value(.string(let path))):
                try advance()
                let components = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
                guard components.allSatisfy({ !$0.isEmpty }) else { throw fail("'\(path)' is not a key path") }
                return .keyPath(components)
            case ("K", _):
                throw fail("%K needs a key path (a string) argument")
            case ("d", .value(.int(let n))), ("i", .value(.int(let n))), ("u", .value(.int(let n))):
                try advance()
                return .value(.int(n))
            case ("d", _), ("i", _), ("u", _):
                throw fail("%\(spec) needs an integer argument")
            case ("f", .value(.double(let d))):
                try advance()
                return .value(.double(d))
            case ("f", .value(.int(let n))):
                try advance()
                return .value(.double(Double(n)))
            case ("f", _):
                throw fail("%f needs a floating-point argument")
            case (_, .value(let v)):
                try advance()
                return .value(v)
            case (_, .values(let vs)):
                try advance()
                return .list(vs)
            case (_, .object(let id)):
                try advance()
                return .object(id)
            case (_, .objects(let ids)):
                try advance()
                return .objects(ids)
            case (_, .keyPath):
                throw fail("%@ cannot take a key path; use %K")
            }
        default:
            throw expected("a key path or a value")
        }
    }

    mutating func parseKeyPath() throws -> [String] {
        var path: [String] = []
        if case .word(let w) = token, Self.keywordForm(of: w, is: "SELF") {
            // The object itself: alone, `SELF`; before a key, nothing (`SELF.title` is `title`).
            try advance()
            guard token == .symbol(".") else { return [w] }
            try advance()
        }
        while true {
            switch token {
            case .word(let w) where w.hasPrefix("$") && !variables.contains(w):
                throw fail(
                    variables.isEmpty
                        ? "\(w): variables are only used inside SUBQUERY"
                        : "\(w) is not the SUBQUERY's variable (\(variables.last!))")
            case .word(let w): path.append(w)
            case .escaped(let k): path.append(k)
            case .keyComponent(let k): path.append(k)
            default: throw expected("a key")
            }
            try advance()
            if path.count == 1, token == .symbol("("), Aggregate.Function(rawValue: path[0]) != nil {
                // An aggregate's column as its row names it (`sum(pages) > 10` in an aggregate's `having`).
                try advance()
                let inner = try parseKeyPath()
                guard token == .symbol(")") else { throw expected("')' after \(path[0])'s key path") }
                try advance()
                return ["\(path[0])(\(inner.joined(separator: ".")))"]
            }
            guard token == .symbol(".") else { return path }
            try advance()
        }
    }
}

extension FetchPredicate.Operator {
    /// The operator with its sides swapped (`5 < x` is `x > 5`).
    var flipped: FetchPredicate.Operator? {
        switch self {
        case .equal: .equal
        case .notEqual: .notEqual
        case .less: .greater
        case .lessOrEqual: .greaterOrEqual
        case .greater: .less
        case .greaterOrEqual: .lessOrEqual
        default: nil
        }
    }
}
