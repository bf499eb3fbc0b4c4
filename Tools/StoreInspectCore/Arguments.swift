/// A command line that does not parse: exit 64 with the message on stderr.
public struct UsageError: Error, Equatable, Sendable {
    public var message: String
    public var command: String?

    public init(_ message: String, command: String? = nil) {
        self.message = message
        self.command = command
    }
}

/// One subcommand's grammar.
struct CommandSpec {
    var name: String
    var overview: String
    /// Positional arguments after the store path, by name; `?` marks an optional one.
    var positionals: [String]
    /// Options taking a value, with their help.
    var options: [(String, String)]
    /// Flags, with their help.
    var flags: [(String, String)]
    /// Example command lines, shown in the help (`STORE` stands for a store's path).
    var examples: [String] = []

    var usage: String {
        var parts = ["store-inspect", name, "STORE"]
        parts += positionals.map { $0.hasSuffix("?") ? "[\($0.dropLast())]" : $0 }
        if !options.isEmpty || !flags.isEmpty { parts.append("[OPTIONS]") }
        return parts.joined(separator: " ")
    }

    var help: String {
        var text = "OVERVIEW: \(overview)\n\nUSAGE: \(usage)\n\nOPTIONS:\n"
        for (name, help) in options + [
            ("--format F", "table, json, ndjson or csv (a table on a terminal, NDJSON when piped)")
        ] {
            text += "  " + name.padding(toLength: 22, withPad: " ", startingAt: 0) + help + "\n"
        }
        for (name, help) in flags + [("-h, --help", "Show help for this subcommand.")] {
            text += "  " + name.padding(toLength: 22, withPad: " ", startingAt: 0) + help + "\n"
        }
        if !examples.isEmpty {
            text += "\nEXAMPLES:\n" + examples.map { "  store-inspect \(name) \($0)\n" }.joined()
        }
        return text
    }
}

/// A parsed command line.
public struct Invocation: Equatable, Sendable {
    public var command: String
    public var store: String
    public var positionals: [String]
    public var options: [String: String]
    public var flags: Set<String>
    public var format: OutputFormat?
}

/// What `--help` asks for.
public enum HelpRequest: Equatable, Sendable {
    case general
    case command(String)
    /// `--version`: the tool's version.
    case version
    /// `manpage`: the man page in roff, generated from the help.
    case manPage
    /// `completion bash|zsh`: a shell completion script.
    case completion(String)
}

enum Commands {
    static let specs: [CommandSpec] = [
        CommandSpec(
            name: "info",
            overview: "Show the store's path, format, schema version, map, pages, free pages and readers.",
            positionals: [], options: [], flags: [],
            examples: ["library.store", "library.store --format json"]),
        CommandSpec(
            name: "schema", overview: "Show the entities, attributes and relationships stored in the store.",
            positionals: [], options: [("--version N", "Show version N of the schema history.")],
            flags: [
                (
                    "--history",
                    "List every schema version the store has had, with the migration stage that reached it (when, its"
                        + " kind, how long, how many objects it rewrote)."
                ),
                ("--definition", "Print the schema as JSON: a file import --schema creates a store with."),
            ],
            examples: [
                "library.store", "library.store --history", "library.store --version 1 --format csv",
                "library.store --definition > library.json",
            ]),
        CommandSpec(
            name: "stats",
            overview:
                "Show entries, bytes and pages per database (records, indexes, relationships, history), the free pages, and the largest records.",
            positionals: [], options: [], flags: [],
            examples: ["library.store"]),
        CommandSpec(
            name: "entities",
            overview: "List the entities with their objects (own, and with sub-entities), like sqlite3's .tables.",
            positionals: [], options: [], flags: [],
            examples: ["library.store"]),
        CommandSpec(
            name: "readers",
            overview: "List the reader table's slots (process, thread, snapshot, alive), like mdb_stat -r.",
            positionals: [], options: [], flags: [], examples: ["library.store", "library.store --format json"]),
        CommandSpec(
            name: "sync-status",
            overview: "Show the store's sync: zone, cursors, entries not pushed yet, clock and the last error.",
            positionals: [], options: [], flags: [], examples: ["library.store", "library.store --format json"]),
        CommandSpec(
            name: "ls", overview: "List objects of an entity.", positionals: ["ENTITY"],
            options: [
                ("--where PREDICATE", "Only objects matching the predicate (NSPredicate syntax)."),
                ("--sort KEYS", "Sort keys, comma separated; -key for descending."),
                ("--limit N", "At most N objects (0: no limit)."), ("--offset N", "Skip N objects."),
                ("--fields A,B", "Only these attributes and relationships, or paths through to-ones (author.name)."),
            ], flags: [("--explain", "Print the query plan instead of the objects.")],
            examples: [
                "library.store Book --where \"pages > 300 AND author.name BEGINSWITH 'Ur'\" --sort -pages,title",
                "library.store Book --fields title,author.name --limit 20 --format csv",
                "library.store Author --where \"born < '1950-01-01'\" --explain",
            ]),
        CommandSpec(
            name: "count", overview: "Count objects of an entity.", positionals: ["ENTITY"],
            options: [("--where PREDICATE", "Only objects matching the predicate.")],
            flags: [("--explain", "Print the query plan beside the count.")],
            examples: ["library.store Book --where \"ANY tags.name == 'sf'\""]),
        CommandSpec(
            name: "get", overview: "Show one object by its ID (Entity/p42, or its entitystore:// URI).",
            positionals: ["OBJECT-ID"],
            options: [
                ("--fields A,B", "Only these attributes and relationships, or paths through to-ones (author.name).")
            ], flags: [],
            examples: ["library.store Book/p42", "library.store entitystore://STORE-ID/Book/p42 --format json"]),
        CommandSpec(
            name: "check",
            overview: "Check records, indexes, relationships, history and readers; exit 1 with the findings.",
            positionals: [], options: [],
            flags: [("--quiet", "No progress line on stderr (shown only when stderr is a terminal).")],
            examples: ["library.store", "library.store --format ndjson"]),
        CommandSpec(
            name: "history", overview: "List saved transactions.", positionals: [],
            options: [
                ("--since TX", "Only transactions after TX."), ("--limit N", "At most N transactions (0: no limit)."),
            ],
            flags: [],
            examples: ["library.store --since 120 --limit 10"]),
        CommandSpec(
            name: "watch", overview: "Follow commits made by any process, live.", positionals: ["ENTITY?"],
            options: [
                ("--where PREDICATE", "Only changes to objects matching the predicate."),
                (
                    "--since TX",
                    "Start after TX (default: now). Entries pruned before they were shown are named in a warning on"
                        + " stderr, and the watch goes on."
                ), ("--max N", "Stop after N transactions."),
            ], flags: [],
            examples: ["library.store Book --where \"pages > 300\"", "library.store --since 0 --max 5 --format ndjson"]),
        CommandSpec(
            name: "export", overview: "Export objects as JSON, NDJSON or CSV.", positionals: ["ENTITY?"],
            options: [
                ("--dir D", "With --all --format csv: write one ENTITY.csv per entity into D (CSV holds one table)."),
                (
                    "--fields A,B",
                    "With one ENTITY: only these fields (in CSV a to-many relationship that the other entity's"
                        + " column holds is written only when asked here)."
                ),
            ],
            flags: [
                ("--all", "Export every entity (each object once, under its own entity)."),
                ("--quiet", "No progress line on stderr (shown only when stderr is a terminal)."),
            ],
            examples: [
                "library.store Book --format ndjson > books.ndjson", "library.store --all --format json > all.json",
                "library.store --all --format csv --dir csv/",
            ]),
        CommandSpec(
            name: "import",
            overview:
                "Load an export (JSON, NDJSON, CSV, or a directory of ENTITY.csv) into the store, all or nothing;"
                + " the only subcommand that writes.",
            positionals: ["FILE"],
            options: [
                ("--input F", "The file's format: json, ndjson or csv (default: read from its first byte)."),
                (
                    "--schema FILE",
                    "Create the store (when it does not exist) with this schema (written by schema --definition)."
                ),
                ("--entity E", "The entity of rows without an id (default: a CSV file's name, ENTITY.csv)."),
                (
                    "--ref K=E.A,...",
                    "Relationship K names its target by E's unique attribute A (e.g. shelf=Shelf.name), not by ID."
                ),
            ],
            flags: [("--quiet", "No progress line on stderr (shown only when stderr is a terminal).")],
            examples: [
                "copy.store all.json", "copy.store books.ndjson", "copy.store csv/", "copy.store csv/Tag.csv",
                "copy.store - < books.ndjson",
                "new.store books.csv --schema library.json --entity Book --ref shelf=Shelf.name",
            ]),
        CommandSpec(
            name: "backup", overview: "Write a hot, compacted copy of the store into DEST.", positionals: ["DEST"],
            options: [], flags: [],
            examples: ["library.store /backups/library-2026-11-30"]),
    ]

    static func spec(_ name: String) -> CommandSpec? { specs.first { $0.name == name } }

    static var generalHelp: String {
        var text = """
            OVERVIEW: Inspect any EntityStore store, read-only (but for import): it reads the schema from the store.

            USAGE: store-inspect SUBCOMMAND STORE [ARGUMENTS] [OPTIONS]

            OPTIONS:
              --format F            table, json, ndjson or csv (a table on a terminal, NDJSON when piped)
              -h, --help            Show help (for a subcommand: store-inspect help SUBCOMMAND).
              --version             Show the version of store-inspect and of the EntityStore it reads with.

            MORE: store-inspect manpage > store-inspect.1; store-inspect completion bash|zsh (shell completions).

            SUBCOMMANDS:

            """
        // Each name whole, the overviews in one column after the longest (`padding` cuts a longer name short).
        let width = specs.map(\.name.count).max()! + 2
        for spec in specs {
            text += "  " + spec.name.padding(toLength: width, withPad: " ", startingAt: 0) + spec.overview + "\n"
        }
        text += "\nEXIT CODES: 0 ok, 1 findings, 64 usage, 65 corrupt data, 66 store missing or unreadable,\n"
        text += "  69 store format newer than this tool, 74 I/O error.\n"
        return text
    }
}

/// Parses `store-inspect`'s arguments (without the program name).
///
/// - Returns: The invocation, or the help that was asked for.
/// - Throws: ``UsageError`` naming what was wrong.
public func parseArguments(_ arguments: [String]) throws(UsageError) -> Result<Invocation, HelpRequestBox> {
    guard let command = arguments.first else { throw UsageError("missing subcommand (try --help)") }
    if command == "--version" || command == "version" {
        guard arguments.count == 1 else { throw UsageError("\(command) takes no arguments") }
        return .failure(HelpRequestBox(.version))
    }
    if command == "manpage" {
        guard arguments.count == 1 else { throw UsageError("manpage takes no arguments") }
        return .failure(HelpRequestBox(.manPage))
    }
    if command == "completion" {
        guard arguments.count == 2, ["bash", "zsh"].contains(arguments[1]) else {
            throw UsageError("completion takes a shell: bash or zsh")
        }
        return .failure(HelpRequestBox(.completion(arguments[1])))
    }
    if command == "help", arguments.count == 2 {
        guard Commands.spec(arguments[1]) != nil else {
            throw UsageError("unknown subcommand '\(arguments[1])' (try --help)")
        }
        return .failure(HelpRequestBox(.command(arguments[1])))
    }
    if command == "-h" || command == "--help" || command == "help" {
        guard arguments.count == 1 else { throw UsageError("unexpected argument '\(arguments[1])' after \(command)") }
        return .failure(HelpRequestBox(.general))
    }
    guard let spec = Commands.spec(command) else {
        throw UsageError("unknown subcommand '\(command)' (try --help)")
    }
    var positionals: [String] = []
    var options: [String: String] = [:]
    var flags = Set<String>()
    var format: OutputFormat?
    var index = 1
    var onlyPositionals = false
    while index < arguments.count {
        let argument = arguments[index]
        index += 1
        if onlyPositionals || !argument.hasPrefix("-") || argument == "-" {
            positionals.append(argument)
            continue
        }
        if argument == "--" {
            onlyPositionals = true
            continue
        }
        if argument == "-h" || argument == "--help" { return .failure(HelpRequestBox(.command(command))) }
        var name = argument
        var inlineValue: String?
        if let equals = argument.firstIndex(of: "=") {
            name = String(argument[..<equals])
            inlineValue = String(argument[argument.index(after: equals)...])
        }
        func value() throws(UsageError) -> String {
            if let inlineValue { return inlineValue }
            guard index < arguments.count else { throw UsageError("\(name) needs a value", command: command) }
            index += 1
            return arguments[index - 1]
        }
        if name == "--format" {
            if format != nil { throw UsageError("--format given twice", command: command) }
            let text = try value()
            guard let parsed = OutputFormat(rawValue: text) else {
                throw UsageError("unknown format '\(text)' (table, json, ndjson or csv)", command: command)
            }
            format = parsed
        } else if spec.options.contains(where: { $0.0.split(separator: " ")[0] == name }) {
            if options[name] != nil { throw UsageError("\(name) given twice", command: command) }
            let text = try value()
            if text.isEmpty { throw UsageError("\(name) needs a value, not an empty one", command: command) }
            options[name] = text
        } else if spec.flags.contains(where: { $0.0 == name }) {
            if inlineValue != nil { throw UsageError("\(name) takes no value", command: command) }
            flags.insert(name)
        } else {
            throw UsageError("unknown option '\(name)' for \(command)", command: command)
        }
    }
    guard let store = positionals.first else { throw UsageError("missing STORE path", command: command) }
    let rest = Array(positionals.dropFirst())
    let required = spec.positionals.filter { !$0.hasSuffix("?") }.count
    if rest.count < required {
        throw UsageError("missing \(spec.positionals[rest.count].uppercased())", command: command)
    }
    if rest.count > spec.positionals.count {
        throw UsageError("unexpected argument '\(rest[spec.positionals.count])'", command: command)
    }
    // Every number is a whole number from 0 to Int.max, parsed one way by every command (the commands read them
    // with `Int`: a number that does not fit must not pass here and be dropped there).
    for numeric in ["--limit", "--offset", "--since", "--max", "--version"] {
        if let text = options[numeric], Int(text).map({ $0 >= 0 }) != true || text.hasPrefix("+") {
            throw UsageError(
                "\(numeric) needs a whole number from 0 to \(Int.max), not '\(text)'", command: command)
        }
    }
    return .success(
        Invocation(command: command, store: store, positionals: rest, options: options, flags: flags, format: format))
}

/// A help request, as the failure side of ``parseArguments(_:)``'s result.
public struct HelpRequestBox: Error, Equatable, Sendable {
    public var request: HelpRequest
    init(_ request: HelpRequest) { self.request = request }
}
