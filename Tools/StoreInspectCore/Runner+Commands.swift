import EntityStore
import Foundation
import LMDB

extension Runner {
    func info() throws {
        let environment = store.environment
        let info = environment.info()
        let stats = try environment.statistics()
        let history = try store.lastTransaction()
        let free = try environment.read { try $0.freePages() }
        let properties: [(String, Cell)] = [
            ("path", .text(invocation.store)),
            ("format version", .int(Int64(try store.storedFormatVersion()))),
            ("schema version", .int(Int64(store.schema.version))),
            ("schema fingerprint", .text(store.schema.fingerprint)),
            ("store id", .text(store.storeID.uuidString)),
            ("entities", .int(Int64(store.schema.entities.count))),
            ("map size", .int(Int64(info.mapSize))),
            ("bytes used", .int(Int64((info.lastPageNumber + 1) * stats.pageSize))),
            ("page size", .int(Int64(stats.pageSize))),
            ("last LMDB transaction", .int(Int64(info.lastTransactionID))),
            ("last saved transaction", .int(Int64(history))),
            ("free pages", .int(Int64(free.pages))),
            ("free-list entries", .int(Int64(free.entries))),
            (
                "lock file",
                .text(
                    environment.registersReaders
                        ? "lock.mdb"
                        : "none: read-only file system (readers are not registered; safe only while"
                            + " nothing writes the store)")
            ),
            ("readers", .int(Int64(info.readersUsed))),
            ("max readers", .int(Int64(info.maxReaders))),
            (
                "migration under way",
                try store.migrationUnderWay().map {
                    .text(
                        "from version \($0.fromVersion) to \($0.toVersion): \($0.completed) of \($0.total) objects"
                            + " rewritten (an open with its plan goes on; one with version \($0.fromVersion) abandons it)"
                    )
                } ?? .text("none")
            ),
        ]
        emitProperties(properties)
    }

    /// Named values: a terminal gets a property per line; the other formats one record (JSON: one object).
    func emitProperties(_ properties: [(String, Cell)]) {
        if format == .table {
            var table = Table(columns: ["property", "value"])
            table.rows = properties.map { [.text($0.0), $0.1] }
            return emit(table)
        }
        emit(Table(columns: properties.map(\.0), rows: [properties.map(\.1)], isRecord: true))
    }

    /// The reader table, like `mdb_stat -r`: each slot's process, thread and snapshot, and whether the process
    /// is still alive (a dead one's slot is stale: `check` reports it, and the next writer clears it).
    func readers() throws {
        var table = Table(columns: ["process", "thread", "snapshot", "alive"])
        for reader in store.environment.readers() {
            let alive = kill(reader.processID, 0) == 0 || errno == EPERM
            table.rows.append([
                .int(Int64(reader.processID)), .text(reader.thread),
                reader.transactionID.map { .int(Int64($0)) } ?? .null, .bool(alive),
            ])
        }
        emit(table)
    }

    func schema() throws {
        var schema = store.schema
        let history = try store.schemaHistory()
        if invocation.flags.contains("--definition") {
            if invocation.flags.contains("--history") {
                throw CommandFailure(
                    code: ExitCode.usage, message: "--definition prints one schema: not with --history")
            }
            if let text = invocation.options["--version"], let version = Int(text) {
                guard let found = history.first(where: { $0.version == version }) else {
                    throw CommandFailure(code: ExitCode.usage, message: "the store has no schema version \(version)")
                }
                schema = found
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            out(String(decoding: try encoder.encode(schema), as: UTF8.self) + "\n")
            return
        }
        if invocation.flags.contains("--history") {
            if invocation.options["--version"] != nil {
                throw CommandFailure(
                    code: ExitCode.usage,
                    message: "--history lists every version and --version N shows one: give one of them")
            }
            // Each version with the migration stage that reached it, when the store logged one.
            let log = try store.migrationLog()
            var table = Table(columns: [
                "version", "entities", "fingerprint", "migrated", "stage", "seconds", "objects rewritten",
            ])
            table.rows = history.map { schema in
                let stage = log.last { $0.toVersion == schema.version }
                return [
                    .int(Int64(schema.version)), .int(Int64(schema.entities.count)), .text(schema.fingerprint),
                    stage.map { .text($0.date.formatted(.iso8601)) } ?? .null,
                    stage.map { .text("\($0.kind) from \($0.fromVersion)") } ?? .null,
                    stage.map { .double(($0.seconds * 1000).rounded() / 1000) } ?? .null,
                    stage.map { .int(Int64($0.objects)) } ?? .null,
                ]
            }
            return emit(table)
        }
        if let text = invocation.options["--version"], let version = Int(text) {
            guard let found = history.first(where: { $0.version == version }) else {
                throw CommandFailure(
                    code: ExitCode.usage,
                    message:
                        "the store has no schema version \(version) (it has \(history.map { String($0.version) }.joined(separator: ", ")))"
                )
            }
            schema = found
        }
        var table = Table(columns: [
            "entity", "kind", "name", "type", "optional", "default", "indexed", "unique", "inverse", "delete rule",
            "details",
        ])
        for entity in schema.entities {
            let parent = entity.superentity.flatMap { schema.entity($0) }
            // Sub-entities and abstract entities get a row of their own; the others are as they always were.
            if parent != nil || entity.isAbstract {
                let details = [
                    entity.isAbstract ? "abstract" : nil, entity.superentity.map { "inherits \($0)" },
                ].compactMap { $0 }.joined(separator: "; ")
                table.rows.append(
                    [.text(entity.name), .text("entity"), .text(entity.name)] + Array(repeating: .null, count: 7)
                        + [.text(details)])
            }
            func inherited(_ name: String) -> String? {
                parent.map { schema.declaringEntity(of: name, in: $0.name) }.map { "inherited from \($0)" }
            }
            for a in entity.attributes + entity.transientAttributes {
                let details = [
                    parent?.attribute(a.name) != nil ? inherited(a.name) : nil,
                    a.isTransient ? "transient" : nil,
                    a.derivation.map { "derived: \($0)" },
                    a.generatedDefault.map { "generated: \($0 == .uuid ? "a new UUID" : "the time it is made")" },
                    a.validation.map { "rules: \($0)" },
                ].compactMap { $0 }.joined(separator: "; ")
                table.rows.append([
                    .text(entity.name), .text("attribute"), .text(a.name), .text(a.type.rawValue), .bool(a.isOptional),
                    Cell(a.defaultValue), .bool(a.isIndexed), .bool(a.isUnique), .null, .null,
                    details.isEmpty ? .null : .text(details),
                ])
            }
            for r in entity.relationships {
                let fromParent = parent?.relationship(r.name) != nil
                table.rows.append([
                    .text(entity.name), .text("relationship"), .text(r.name),
                    .text((r.isToMany ? "to-many " : "to-one ") + r.destination), .bool(r.isToMany || r.isOptional),
                    .null,
                    .null, .null, .text(r.inverse), .text(r.deleteRule.rawValue),
                    fromParent ? inherited(r.name).map(Cell.text) ?? .null : .null,
                ])
            }
        }
        emit(table)
    }

    func entities() throws {
        let context = ObjectContext(store: store)
        var table = Table(columns: ["entity", "objects", "with sub-entities", "superentity", "abstract"])
        for entity in store.schema.entities {
            var own = FetchRequest(entity: entity.name)
            own.includesSubentities = false
            let count = try context.count(for: own)
            let all = try context.count(for: FetchRequest(entity: entity.name))
            table.rows.append([
                .text(entity.name), .int(Int64(count)), .int(Int64(all)), entity.superentity.map(Cell.text) ?? .null,
                .bool(entity.isAbstract),
            ])
        }
        emit(table)
    }

    func stats() throws {
        var table = Table(columns: [
            "database", "entries", "bytes", "leaf pages", "branch pages", "overflow pages", "largest records",
        ])
        let environment = store.environment
        let names = try environment.read { try $0.databaseNames() }
        for name in names {
            let dupSort = name.hasPrefix("index.") || name.hasPrefix("rel.")
            let database = try environment.openDatabase(name, dupSort: dupSort, create: false)
            let stats = try environment.read { try $0.statistics(database) }
            var largest: Cell = .null
            if name.hasPrefix("records.") {
                let entity = String(name.dropFirst("records.".count))
                if store.schema.entity(entity) != nil {
                    largest = .text(
                        try store.largestRecords(entity, count: 3).map { "\($0.0) (\($0.1) B)" }.joined(separator: ", ")
                    )
                }
            }
            table.rows.append([
                .text(name), .int(Int64(stats.entries)), .int(Int64(stats.bytes)), .int(Int64(stats.leafPages)),
                .int(Int64(stats.branchPages)), .int(Int64(stats.overflowPages)), largest,
            ])
        }
        // As mdb_stat -f and -e: the free pages LMDB will reuse (their free-list entries counted as entries), and
        // every page the file holds (the two meta pages and the databases' catalog included).
        let free = try environment.read { try $0.freePages() }
        let pageSize = try environment.statistics().pageSize
        let used = environment.info().lastPageNumber + 1
        table.rows.append([
            .text("(free pages)"), .int(Int64(free.entries)), .int(Int64(free.pages * pageSize)), .null, .null, .null,
            .null,
        ])
        table.rows.append([.text("(the file)"), .null, .int(Int64(used * pageSize)), .null, .null, .null, .null])
        emit(table)
    }

    /// The entity, request and context of `ls` and `count`; `nil` when `--explain` printed the plan instead.
    func query() throws -> (Entity, FetchRequest, ObjectContext)? {
        let entity = try entity(invocation.positionals[0])
        let request = try request(for: entity)
        let context = ObjectContext(store: store)
        if invocation.flags.contains("--explain") {
            out(try context.explain(request).description + "\n")
            return nil
        }
        return (entity, request, context)
    }

    func list() throws {
        guard let (entity, request, context) = try query() else { return }
        let fields = try fields(of: entity)
        // A fetch of a superentity holds its sub-entities' objects: their values are at the same positions.
        let sources = sources(entity, fields)
        var stream: RowStream?
        try context.streamSnapshot([request], keyPaths: keyPaths(fields)) { transaction in
            stream = RowStream(
                columns: ["id"] + fields, format: format, color: color, transaction: transaction, out: out)
        } row: { _, row in
            stream?.add(self.row(row.id, row.values, row.relationships, sources, pathValues: row.pathValues))
        }
        stream?.finish()
    }

    /// The count; with `--explain`, the plan beside it (a column, in every format).
    func count() throws {
        let entity = try entity(invocation.positionals[0])
        let request = try request(for: entity)
        let context = ObjectContext(store: store)
        let explain = invocation.flags.contains("--explain")
        var table = Table(columns: ["entity", "count"] + (explain ? ["plan"] : []))
        let plan: [Cell] = explain ? [.text(try context.explain(request).description)] : []
        table.rows = [[.text(entity.name), .int(Int64(try context.count(for: request)))] + plan]
        emit(table)
    }

    func get() throws {
        // `Entity/p42`, or the URI the API gives (`PersistentStore.uri(for:)`): checked against this store's ID.
        let text = invocation.positionals[0]
        let id = try text.hasPrefix("entitystore://") ? store.objectID(forURI: text) : store.objectID(from: text)
        let entity = try entity(id.entityName)
        let fields = try fields(of: entity)
        guard
            let (values, relationships, pathValues, transaction) = try store.readObject(id, keyPaths: keyPaths(fields))
        else {
            throw CommandFailure(code: ExitCode.findings, message: "\(id) does not exist")
        }
        var table = Table(columns: ["id"] + fields, transaction: transaction)
        table.rows = [row(id, values, relationships, sources(entity, fields), pathValues: pathValues)]
        emit(table)
    }

    func check() throws -> Int32 {
        let line = ProgressLine("checking", unit: "records", total: 0, invocation: invocation, err: err)
        let (findings, transaction) = try store.checkIntegrity(
            progress: line.map { line in
                { checked, total in
                    line.total = total
                    line.update(checked)
                }
            })
        line?.finish()
        var table = Table(columns: ["finding", "location", "detail"], transaction: transaction)
        table.rows = findings.map { [.text($0.kind.rawValue), .text($0.location), .text($0.detail)] }
        emit(table)
        return findings.isEmpty ? ExitCode.ok : ExitCode.findings
    }

    static func changeRows(_ record: ChangeRecord, filter: (ObjectChange) -> Bool = { _ in true }) -> [[Cell]] {
        record.changes.filter(filter).map { change in
            [
                .int(Int64(record.transaction ?? 0)), .text(record.date.formatted(.iso8601)),
                record.author.map(Cell.text) ?? .null, .int(Int64(record.processID)), .text(change.kind.rawValue),
                .text(change.objectID.description), .list(change.changedKeys.map(Cell.text)),
                .bool(change.isUserDriven), changes(change),
            ]
        }
    }

    /// The values a change holds, by key: `old → new` (an update), the values an object was deleted with, the
    /// targets a relationship lost. An insert read back from the history holds none (they are in its record),
    /// nor does a batch update's change.
    static func changes(_ change: ObjectChange) -> Cell {
        let old = change.oldValues, new = change.newValues, oldLinks = change.oldRelationships
        return .fields(
            change.changedKeys.compactMap { key in
                if let links = oldLinks[key] {
                    return (key, .change(old: .list(links.map { .text($0.description) }), new: nil))
                }
                guard old[key] != nil || new[key] != nil else { return nil }
                return (key, .change(old: old[key].map(Cell.init), new: new[key].map(Cell.init)))
            })
    }

    static let changeColumns = [
        "transaction", "date", "author", "process", "kind", "object", "keys", "user-driven", "changes",
    ]

    func history() throws {
        let since = invocation.options["--since"].flatMap { UInt64($0) } ?? 0
        // 0 is no limit, as for `ls` (and a fetch request's limit).
        let limit = invocation.options["--limit"].flatMap { Int($0) }.flatMap { $0 == 0 ? nil : $0 }
        var table = Table(columns: Self.changeColumns)
        for record in try store.history(since: since, limit: limit) { table.rows += Self.changeRows(record) }
        emit(table)
    }

    func watch() throws {
        let entityName = invocation.positionals.first
        let watched = try entityName.map { try entity($0) }
        let predicate = try invocation.options["--where"].map { text in
            let parsed = try FetchPredicate(text)
            return try watched.map { try literalsTyped(parsed, for: $0) } ?? parsed
        }
        if predicate != nil && entityName == nil {
            throw CommandFailure(code: ExitCode.usage, message: "--where needs an ENTITY")
        }
        // 0 is no maximum, as --limit 0 is no limit.
        let maximum = invocation.options["--max"].flatMap { Int($0) }.flatMap { $0 == 0 ? nil : $0 }
        let last = try store.lastTransaction()
        let since = invocation.options["--since"].flatMap { UInt64($0) } ?? last
        if since > last {
            throw CommandFailure(
                code: ExitCode.usage,
                message: "--since \(since) is past the store's last transaction (\(last)): nothing to wait for there")
        }
        let state = WatchState()
        let done = state.done
        let store = self.store
        let format = self.format
        let out = self.out
        let color = self.color
        let schema = store.schema
        // Rows stream one at a time: a table's columns have fixed widths (the header's or a typical value's).
        let widths = [11, 24, 12, 7, 6, 20, 24, 11, 0]
        @Sendable func fixedLine(_ cells: [String]) -> String {
            zip(cells, widths).map { text, width in
                text + String(repeating: " ", count: max(0, width - Cell.displayWidth(text)))
            }.joined(separator: "  ").trimmingCharacters(in: .whitespaces) + "\n"
        }
        switch format {
        case .table:
            let header = fixedLine(Self.changeColumns)
            out(color ? "\u{1B}[1m\(header.dropLast())\u{1B}[0m\n" : header)
        case .csv:
            out(Table(columns: Self.changeColumns).render(.csv, color: false))
        case .json, .ndjson:
            break
        }
        let err = self.err
        let onError: @Sendable (EntityStoreError) -> Void = { error in
            // Entries pruned before the watch read them: a viewer says so and shows the ones after them. (The
            // message's advice after its first ";" is for apps: fetch again, reset the context.)
            guard error.code == .historyPruned else { return state.fail(error) }
            let what = error.message.split(separator: ";", maxSplits: 1).first.map(String.init) ?? error.message
            err("store-inspect watch: warning: \(Cell.visible(what)); the watch goes on with the entries after them\n")
        }
        let token = try store.observeCommits(since: since, onError: onError) { record in
            // Transactions past --max (already stored ones arrive in one go) are not shown.
            if let maximum, state.shown >= maximum { return }
            let rows = Self.changeRows(record) { change in
                if let entityName, !schema.isKind(change.objectID.entityName, of: entityName) { return false }
                guard let predicate else { return true }
                do {
                    // The object as the transaction left it (a delete: as it was when deleted).
                    return try store.object(change, in: record.transaction, matches: predicate)
                } catch {
                    state.fail(EntityStoreError.wrapping(error, "testing \(change.objectID) against --where"))
                    return false
                }
            }
            guard !rows.isEmpty else { return }
            switch format {
            case .table:
                out(rows.map { row in fixedLine(row.map { $0.visibleText }) }.joined())
            case .csv:
                let text = Table(columns: Self.changeColumns, rows: rows).render(.csv, color: false)
                out(String(text.drop { $0 != "\n" }.dropFirst()))
            case .json, .ndjson:
                out(Table(columns: Self.changeColumns, rows: rows).render(.ndjson, color: color))
            }
            if let maximum, state.add() >= maximum { done.signal() }
        }
        done.wait()
        token.cancel()
        if let failure = state.failure { throw failure }
    }

    /// What an export writes of `entity` without `--fields`: every attribute and relationship, but in CSV a to-many
    /// relationship only where no other column holds it: not one whose inverse is a to-one (the targets' CSV names
    /// this object), and a many-to-many on one side (the first of the two by entity and relationship name). A CSV
    /// of shelves no longer lists every book of each shelf, and an export of every entity still loads back whole.
    func exportedFields(of entity: Entity) -> [String] {
        let relationships = entity.relationships.filter { relationship in
            guard format == .csv, relationship.isToMany else { return true }
            guard let destination = store.schema.entity(relationship.destination),
                let inverse = destination.relationship(relationship.inverse)
            else { return true }
            guard inverse.isToMany else { return false }
            return (entity.name, relationship.name) <= (destination.name, inverse.name)
        }
        return entity.attributes.map(\.name) + relationships.map(\.name)
    }

    func export() throws {
        let names: [String]
        if invocation.flags.contains("--all") {
            guard invocation.positionals.isEmpty else {
                throw CommandFailure(code: ExitCode.usage, message: "give an ENTITY or --all, not both")
            }
            names = store.schema.entities.map(\.name)
        } else {
            guard let name = invocation.positionals.first else {
                throw CommandFailure(code: ExitCode.usage, message: "give an ENTITY or --all")
            }
            names = [try entity(name).name]
        }
        let directory = invocation.options["--dir"]
        let all = invocation.flags.contains("--all")
        if let directory {
            // With --all, whatever the number of entities (a store of one entity too).
            guard format == .csv, all else {
                throw CommandFailure(code: ExitCode.usage, message: "--dir goes with --all --format csv")
            }
            guard !directory.isEmpty else { throw CommandFailure(code: ExitCode.usage, message: "--dir needs a path") }
        } else if format == .csv && names.count > 1 {
            throw CommandFailure(
                code: ExitCode.usage,
                message: "CSV holds one table: with --all, give --dir D for one ENTITY.csv per entity")
        }
        let entities = try names.map { try entity($0) }
        // With --all each entity is read alone: an object of a sub-entity is exported once, under its own entity.
        let requests = names.map { name in
            var request = FetchRequest(entity: name)
            request.includesSubentities = names.count == 1
            return request
        }
        let labelled = names.count > 1 && directory == nil
        if invocation.options["--fields"] != nil && all {
            throw CommandFailure(code: ExitCode.usage, message: "--fields goes with one ENTITY, not --all")
        }
        let chosen = try entities.map { entity in
            invocation.options["--fields"] != nil ? try fields(of: entity) : exportedFields(of: entity)
        }
        func columns(_ position: Int) -> [String] {
            (labelled ? ["entity"] : []) + ["id"] + chosen[position]
        }
        let plans = entities.enumerated().map { position, entity in
            (name: Cell.text(entity.name), sources: sources(entity, chosen[position]))
        }
        let paths = chosen.map(keyPaths)
        guard paths.allSatisfy(\.isEmpty) || entities.count == 1 else {
            throw CommandFailure(code: ExitCode.usage, message: "key paths in --fields go with one ENTITY")
        }
        func cells(_ position: Int, _ row: ObjectContext.SnapshotRow) -> [Cell] {
            let cells = self.row(
                row.id, row.values, row.relationships, plans[position].sources, pathValues: row.pathValues)
            return labelled ? [plans[position].name] + cells : cells
        }
        let keys = entities.indices.map { ColumnKeys(columns($0)) }
        let context = ObjectContext(store: store)
        // Exporting to files (--dir, or stdout not a terminal): a progress line on stderr, if that is one.
        var line: ProgressLine?
        if directory != nil || isatty(1) != 1,
            let made = ProgressLine("exporting", unit: "objects", total: 0, invocation: invocation, err: err)
        {
            made.total = try requests.reduce(0) { $0 + (try context.count(for: $1)) }
            line = made
        }
        if let directory {
            defer { line?.finish() }
            return try exportFiles(entities, requests, directory, context: context, columns, cells, line)
        }
        // JSON and NDJSON: one stream of objects (each with its entity's keys); tables: one block per entity, each
        // with its header, separated by a blank line.
        let oneStream = format == .json || format == .ndjson
        var stream: RowStream?
        var current = -1
        // Tables and CSV: each entity's block starts when its first row comes, or (without rows) when a later
        // entity's does or the export ends: every entity gets its header.
        func advance(to position: Int) {
            while current < position {
                if let stream {
                    stream.finish()
                    out("\n")
                }
                current += 1
                stream =
                    current < entities.count
                    ? RowStream(columns: columns(current), format: format, color: color, transaction: nil, out: out)
                    : nil
            }
        }
        var exported = 0
        defer { line?.finish() }
        try context.streamSnapshot(requests, keyPaths: paths.first ?? []) { transaction in
            if oneStream {
                stream = RowStream(columns: [], format: format, color: color, transaction: transaction, out: out)
            }
        } row: { position, row in
            exported += 1
            line?.update(exported)
            if oneStream {
                stream?.add(cells(position, row), keys: keys[position])
                return
            }
            advance(to: position)
            stream?.add(cells(position, row))
        }
        if oneStream {
            stream?.finish()
        } else {
            advance(to: entities.count - 1)
            stream?.finish()
        }
    }

    /// `export --all --format csv --dir D`: one `ENTITY.csv` per entity in `directory` (created 0700 when missing),
    /// each 0600 and new (an existing file is refused before anything is written), from one snapshot, streamed.
    /// Lists what was written.
    func exportFiles(
        _ entities: [Entity], _ requests: [FetchRequest], _ directory: String, context: ObjectContext,
        _ columns: (Int) -> [String], _ cells: (Int, ObjectContext.SnapshotRow) -> [Cell], _ line: ProgressLine?
    ) throws {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw CommandFailure(
                code: ExitCode.ioError, message: "cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        let paths = entities.map { directory + "/" + $0.name + ".csv" }
        for path in paths where FileManager.default.fileExists(atPath: path) {
            throw CommandFailure(code: ExitCode.usage, message: "\(path) exists; choose an empty directory")
        }
        var files: [OutputFile] = []
        defer { for file in files { file.close() } }
        for path in paths { files.append(try OutputFile(creating: path)) }
        // Every file gets its header, an entity without objects too.
        let streams = files.enumerated().map { position, file in
            RowStream(columns: columns(position), format: .csv, color: false, transaction: nil, out: file.write)
        }
        var exported = 0
        try context.streamSnapshot(requests) { _ in
        } row: { position, row in
            streams[position].add(cells(position, row))
            exported += 1
            line?.update(exported)
        }
        for stream in streams { stream.finish() }
        var table = Table(columns: ["file", "rows"])
        for (index, file) in files.enumerated() {
            try file.finish()
            table.rows.append([.text(file.path), .int(Int64(streams[index].count))])
        }
        emit(table)
    }

    func backup() throws {
        let destination = invocation.positionals[0]
        if FileManager.default.fileExists(atPath: destination + "/data.mdb") {
            throw CommandFailure(
                code: ExitCode.usage, message: "\(destination) already holds a store; choose an empty directory")
        }
        do {
            try store.environment.copy(to: destination, compact: true)
        } catch {
            throw CommandFailure(
                code: ExitCode.ioError, message: "cannot write the backup to \(destination): \(error.message)")
        }
        var table = Table(columns: ["backup", "bytes"])
        var info = stat()
        guard stat(destination + "/data.mdb", &info) == 0 else {
            throw CommandFailure(
                code: ExitCode.ioError,
                message:
                    "the backup was written but \(destination)/data.mdb cannot be read: \(String(cString: strerror(errno)))"
            )
        }
        table.rows = [[.text(destination), .int(Int64(info.st_size))]]
        emit(table)
    }
}

/// Counts watched transactions across the watcher's thread.
final class WatchState: @unchecked Sendable {
    // @unchecked Sendable: `count` and `stored` are only touched while `lock` is held; `done` is a semaphore.
    private let lock = NSLock()
    private var count = 0
    private var stored: EntityStoreError?
    /// Signalled when the watch ends: enough transactions shown, or a failure.
    let done = DispatchSemaphore(value: 0)

    /// How many transactions were shown.
    var shown: Int { lock.withLock { count } }

    func add() -> Int {
        lock.withLock {
            count += 1
            return count
        }
    }

    /// Ends the watch with `error` (the first one counts).
    func fail(_ error: EntityStoreError) {
        let first = lock.withLock {
            defer { stored = stored ?? error }
            return stored == nil
        }
        if first { done.signal() }
    }

    var failure: EntityStoreError? { lock.withLock { stored } }
}

/// A new file (0600, never an existing one) that a ``RowStream`` writes into; the first write error is kept and
/// thrown by ``finish()``.
final class OutputFile {
    let path: String
    private var descriptor: Int32
    private var failure: String?

    init(creating path: String) throws {
        self.path = path
        descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw CommandFailure(
                code: ExitCode.ioError, message: "cannot create \(path): \(String(cString: strerror(errno)))")
        }
    }

    func write(_ text: String) {
        guard failure == nil, descriptor >= 0 else { return }
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written >= 0 else {
                failure = String(cString: strerror(errno))
                return
            }
            bytes = bytes.dropFirst(written)
        }
    }

    /// Closes the file; throws the first error met writing or closing it.
    func finish() throws {
        let closed = descriptor < 0 || Glibc.close(descriptor) == 0
        if !closed && failure == nil { failure = String(cString: strerror(errno)) }
        descriptor = -1
        if let failure {
            throw CommandFailure(code: ExitCode.ioError, message: "cannot write \(path): \(failure)")
        }
    }

    /// Closes the file if ``finish()`` did not.
    func close() {
        if descriptor >= 0 { _ = Glibc.close(descriptor) }
        descriptor = -1
    }
}
