import EntityStore
import Foundation
import LMDB

/// The exit codes of `store-inspect`.
public enum ExitCode {
    public static let ok: Int32 = 0
    public static let findings: Int32 = 1
    public static let usage: Int32 = 64
    public static let corruptData: Int32 = 65
    public static let storeUnavailable: Int32 = 66
    public static let formatTooNew: Int32 = 69
    public static let ioError: Int32 = 74
}

/// A failure with its exit code and one line for stderr.
struct CommandFailure: Error {
    var code: Int32
    var message: String
}

/// `store-inspect`: everything but the process itself, so that tests can call it.
public enum StoreInspect {
    /// Runs the CLI. Output goes through `out` (stdout) and `err` (stderr); nothing reaches `out` when the command
    /// fails.
    ///
    /// - Returns: The exit code.
    public static func run(
        _ arguments: [String], stdoutIsTerminal: Bool, environment: [String: String],
        out: @escaping @Sendable (String) -> Void, err: @escaping @Sendable (String) -> Void
    ) -> Int32 {
        let invocation: Invocation
        do {
            switch try parseArguments(arguments) {
            case .success(let parsed): invocation = parsed
            case .failure(let help):
                switch help.request {
                case .general: out(Commands.generalHelp)
                case .command(let name): out(Commands.spec(name)?.help ?? Commands.generalHelp)
                case .manPage: out(Commands.manPage)
                case .completion(let shell): out(shell == "zsh" ? Commands.zshCompletion : Commands.bashCompletion)
                case .version:
                    out(
                        "store-inspect \(entityStoreVersion) (EntityStore \(entityStoreVersion), \(Environment.lmdbVersion))\n"
                    )
                }
                return ExitCode.ok
            }
        } catch {
            let prefix = error.command.map { "store-inspect \($0): " } ?? "store-inspect: "
            err(prefix + Cell.visible(error.message) + "\n")
            return ExitCode.usage
        }
        let format = invocation.format ?? (stdoutIsTerminal ? .table : .ndjson)
        let color = stdoutIsTerminal && environment["NO_COLOR"].map(\.isEmpty) ?? true && environment["TERM"] != "dumb"
        do {
            if invocation.command == "import" {
                return try Importer(invocation: invocation, format: format, out: out, err: err).run()
            }
            let runner = try Runner(invocation: invocation, format: format, color: color, out: out, err: err)
            if !runner.store.environment.registersReaders {
                err(
                    "store-inspect: note: \(Cell.visible(invocation.store)) is on a read-only file system: reading it"
                        + " without a lock file (safe only while no process writes the store)\n")
            }
            let code = try runner.run()
            return code
        } catch let failure as CommandFailure {
            err("store-inspect \(invocation.command): \(Cell.visible(failure.message))\n")
            return failure.code
        } catch {
            let failure = classify(error, store: invocation.store)
            err("store-inspect \(invocation.command): \(Cell.visible(failure.message))\n")
            return failure.code
        }
    }

    /// Maps an error to an exit code and a one-line message.
    static func classify(_ error: any Error, store: String) -> CommandFailure {
        if let error = error as? EntityStoreError {
            let message = error.message.replacingOccurrences(of: "\n", with: " ")
            switch error.code {
            case .storage:
                if let underlying = error.underlying { return classify(underlying, store: store) }
                return CommandFailure(code: ExitCode.ioError, message: message)
            case .notAStore, .corruptData: return CommandFailure(code: ExitCode.corruptData, message: message)
            case .storeFormatTooNew: return CommandFailure(code: ExitCode.formatTooNew, message: message)
            case .objectNotFound: return CommandFailure(code: ExitCode.findings, message: message)
            default: return CommandFailure(code: ExitCode.usage, message: message)
            }
        }
        if let error = error as? LMDBError {
            let message = "\(error.message) (\(error.code.name), \(error.context))"
            switch error.code {
            case .permissionDenied:
                // A reader registers in lock.mdb: readable data with a lock file it may not write is the usual case.
                let lock = store + "/lock.mdb"
                if FileManager.default.isReadableFile(atPath: store + "/data.mdb")
                    && FileManager.default.fileExists(atPath: lock) && access(lock, W_OK) != 0
                {
                    return CommandFailure(
                        code: ExitCode.storeUnavailable,
                        message: "cannot open \(lock) for writing (permission denied): a reader registers its "
                            + "snapshot there; give this user write access to the lock file (the data file may stay "
                            + "read-only), or inspect a copy (store-inspect backup)")
                }
                return CommandFailure(code: ExitCode.storeUnavailable, message: message)
            case .noSuchFile:
                return CommandFailure(code: ExitCode.storeUnavailable, message: message)
            case .truncatedDataFile, .notAnEnvironment, .corrupted, .invalid, .pageNotFound, .unsafeFile,
                .databaseNotFound:
                return CommandFailure(code: ExitCode.corruptData, message: message)
            case .incompatible:
                // A read-only tool opens every database with the flags the store was made with: other flags in
                // the catalog mean the catalog entry is damaged.
                return CommandFailure(code: ExitCode.corruptData, message: message + "; the store's catalog is damaged")
            case .badTransaction:
                // The tool only reads, one transaction at a time: LMDB fails a read transaction only after it met
                // a damaged page (some cursor moves report that as "no more entries" and mark the transaction).
                return CommandFailure(
                    code: ExitCode.corruptData, message: message + "; the store's pages are damaged")
            case .versionMismatch: return CommandFailure(code: ExitCode.formatTooNew, message: message)
            default:
                if error.code.rawValue == ENOTDIR {
                    return CommandFailure(code: ExitCode.storeUnavailable, message: message)
                }
                return CommandFailure(code: ExitCode.ioError, message: message)
            }
        }
        return CommandFailure(code: ExitCode.ioError, message: "\(error)")
    }
}

/// Runs one parsed command against a read-only store.
struct Runner {
    let invocation: Invocation
    let format: OutputFormat
    let color: Bool
    let out: @Sendable (String) -> Void
    /// Notes on stderr that do not end the command (a failure is thrown instead).
    let err: @Sendable (String) -> Void
    let store: PersistentStore

    init(
        invocation: Invocation, format: OutputFormat, color: Bool, out: @escaping @Sendable (String) -> Void,
        err: @escaping @Sendable (String) -> Void
    ) throws {
        self.invocation = invocation
        self.format = format
        self.color = color
        self.out = out
        self.err = err
        try Self.checkStorePath(invocation.store)
        // LMDB walks the store's pages from its first read on: a fault on a damaged one is exit 65 naming the
        // page (`CrashGuard`, when the executable installed it). The environment is opened first, so that the
        // guard knows where the data file is mapped before the store reads its catalog; the store then shares it.
        let environment: Environment
        do {
            environment = try Environment.open(path: invocation.store, options: .init(readOnly: true))
        } catch {
            // Opening the store below fails the same way and says why.
            store = try PersistentStore.openReadOnly(path: invocation.store)
            return
        }
        CrashGuard.watch(
            command: invocation.command, store: invocation.store, pageSize: Int(getpagesize()),
            lastPage: environment.info().lastPageNumber)
        store = try PersistentStore.openReadOnly(path: invocation.store)
        CrashGuard.nameDatabases(environment.databaseNumbers())
    }

    /// Refuses a path that is not a directory, before LMDB says so less plainly.
    static func checkStorePath(_ path: String) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw CommandFailure(code: ExitCode.storeUnavailable, message: "no store at \(path)")
        }
        guard isDirectory.boolValue else {
            throw CommandFailure(
                code: ExitCode.corruptData, message: "\(path) is a file; a store is a directory holding data.mdb")
        }
    }

    func emit(_ table: Table) { out(table.render(format, color: color)) }

    func run() throws -> Int32 {
        switch invocation.command {
        case "info": try info()
        case "schema": try schema()
        case "stats": try stats()
        case "entities": try entities()
        case "readers": try readers()
        case "sync-status": try syncStatus()
        case "ls": try list()
        case "count": try count()
        case "get": try get()
        case "check": return try check()
        case "history": try history()
        case "watch": try watch()
        case "export": try export()
        case "backup": try backup()
        default: throw CommandFailure(code: ExitCode.usage, message: "unknown subcommand")
        }
        return ExitCode.ok
    }

    func entity(_ name: String) throws -> Entity {
        guard let entity = store.schema.entity(name) else {
            let known = store.schema.entities.map(\.name).joined(separator: ", ")
            throw CommandFailure(code: ExitCode.usage, message: "unknown entity '\(name)' (the store has \(known))")
        }
        return entity
    }

    func request(for entity: Entity) throws -> FetchRequest {
        var request = FetchRequest(entity: entity.name)
        if let condition = invocation.options["--where"] {
            request.predicate = try literalsTyped(try FetchPredicate(condition), for: entity)
        }
        if let sort = invocation.options["--sort"] {
            request.sortKeys = try sort.split(separator: ",", omittingEmptySubsequences: false).map { text in
                guard let key = SortKey(parsing: String(text)) else {
                    throw CommandFailure(code: ExitCode.usage, message: "bad sort key '\(text)'")
                }
                return key
            }
        }
        request.fetchLimit = invocation.options["--limit"].flatMap { Int($0) } ?? 0
        request.fetchOffset = invocation.options["--offset"].flatMap { Int($0) } ?? 0
        return request
    }

    /// The predicate with its text literals read as dates or UUIDs where they are compared with a date or UUID
    /// attribute (a command line has no `%@`): `--where "born > '1950-01-01'"`, `--where "id == '6F9619FF-...'"`.
    /// Dates are ISO 8601: a day, or a day and time with an optional fraction and zone (UTC when none).
    func literalsTyped(_ predicate: FetchPredicate, for entity: Entity) throws -> FetchPredicate {
        switch predicate {
        case .constant: return predicate
        case .and(let parts): return .and(try parts.map { try literalsTyped($0, for: entity) })
        case .or(let parts): return .or(try parts.map { try literalsTyped($0, for: entity) })
        case .not(let inner): return .not(try literalsTyped(inner, for: entity))
        case .comparison(var comparison):
            guard comparison.subquery == nil, let type = attributeType(comparison.keyPath, from: entity) else {
                return predicate
            }
            func typed(_ value: Value) throws -> Value {
                guard case .string(let text) = value else { return value }
                switch type {
                case .date:
                    guard let date = Self.parseDate(text) else {
                        throw CommandFailure(
                            code: ExitCode.usage,
                            message: "'\(text)' is not a date for \(comparison.keyPath.joined(separator: ".")) (use"
                                + " ISO 8601: 2025-01-31 or 2025-01-31T12:00:00Z)")
                    }
                    return .date(date)
                case .uuid:
                    guard let uuid = UUID(uuidString: text) else {
                        throw CommandFailure(
                            code: ExitCode.usage,
                            message: "'\(text)' is not a UUID for \(comparison.keyPath.joined(separator: "."))")
                    }
                    return .uuid(uuid)
                default:
                    return value
                }
            }
            switch comparison.operand {
            case .value(let value): comparison.operand = .value(try typed(value))
            case .list(let values): comparison.operand = .list(try values.map(typed))
            default: break
            }
            return .comparison(comparison)
        }
    }

    /// The type of the attribute a key path (through to-one relationships) ends at.
    func attributeType(_ path: [String], from entity: Entity) -> AttributeType? {
        var current = entity
        for (i, component) in path.enumerated() {
            if i == path.count - 1 { return current.attribute(component)?.type }
            guard let relationship = current.relationship(component),
                let next = store.schema.entity(relationship.destination)
            else { return nil }
            current = next
        }
        return nil
    }

    /// An ISO 8601 day (`2025-01-31`, midnight UTC) or date and time (`2025-01-31T12:00:00`, with an optional
    /// fraction of a second and zone; UTC when none).
    static func parseDate(_ text: String) -> Date? {
        let withZone = text.hasSuffix("Z") || text.range(of: #"[+-]\d\d:?\d\d$"#, options: .regularExpression) != nil
        let full = text.contains("T") ? (withZone ? text : text + "Z") : text + "T00:00:00Z"
        for options: ISO8601DateFormatter.Options in [
            [.withInternetDateTime], [.withInternetDateTime, .withFractionalSeconds],
        ] {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = options
            if let date = formatter.date(from: full) { return date }
        }
        return nil
    }

    func fields(of entity: Entity) throws -> [String] {
        let all = entity.attributes.map(\.name) + entity.relationships.map(\.name)
        guard let text = invocation.options["--fields"] else { return all }
        let chosen = text.split(separator: ",", omittingEmptySubsequences: false).map {
            String($0).trimmingCharacters(in: .whitespaces)
        }
        if chosen.allSatisfy(\.isEmpty) {
            throw CommandFailure(code: ExitCode.usage, message: "--fields '\(text)' names no field")
        }
        if chosen.contains("") {
            throw CommandFailure(code: ExitCode.usage, message: "--fields '\(text)' has an empty field")
        }
        for field in chosen where !all.contains(field) {
            // A key path through to-one relationships: `shelf.name`, `shelf.owner.name`.
            let path = field.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard path.count > 1, !path.contains("") else {
                throw CommandFailure(code: ExitCode.usage, message: "\(entity.name) has no field '\(field)'")
            }
            if let problem = ToOnePathReader.problem(path, from: entity, in: store.schema) {
                throw CommandFailure(code: ExitCode.usage, message: "no field '\(field)': \(problem)")
            }
        }
        return chosen
    }

    /// The key paths among `fields` (those with a dot), each as its components, in order.
    func keyPaths(_ fields: [String]) -> [[String]] {
        fields.filter { $0.contains(".") }.map { $0.split(separator: ".").map(String.init) }
    }

    /// Where each field of a row comes from, worked out once per entity: an attribute's position, or a
    /// relationship's (and whether it is to-many).
    enum FieldSource {
        case attribute(Int)
        case relationship(Int, toMany: Bool)
        /// A key path's value (its position among the paths asked for).
        case path(Int)
    }

    func sources(_ entity: Entity, _ fields: [String]) -> [FieldSource] {
        var paths = 0
        return fields.compactMap { field in
            if field.contains(".") {
                paths += 1
                return .path(paths - 1)
            }
            if let index = entity.attributeIndex(field) { return .attribute(index) }
            guard let index = entity.relationships.firstIndex(where: { $0.name == field }) else { return nil }
            return .relationship(index, toMany: entity.relationships[index].isToMany)
        }
    }

    /// A row's cells: the ID, then each field (to-many targets as a list, a missing to-one as nil).
    func row(
        _ id: ObjectID, _ values: [Value], _ relationships: [[ObjectID]], _ sources: [FieldSource],
        pathValues: [Value] = []
    ) -> [Cell] {
        var cells: [Cell] = [.text(id.description)]
        cells.reserveCapacity(sources.count + 1)
        for source in sources {
            switch source {
            case .attribute(let index): cells.append(Cell(values[index]))
            case .path(let index): cells.append(Cell(pathValues[index]))
            case .relationship(let index, let toMany):
                let targets = relationships[index]
                if toMany {
                    cells.append(.list(targets.map { .text($0.description) }))
                } else {
                    cells.append(targets.first.map { .text($0.description) } ?? .null)
                }
            }
        }
        return cells
    }
}
