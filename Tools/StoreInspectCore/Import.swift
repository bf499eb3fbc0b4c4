import EntityStore
import Foundation

/// `store-inspect import STORE FILE`: loads what `export` wrote (JSON, NDJSON, or one entity's CSV) into a store
/// through the public API, in one save (one write transaction: all or nothing).
///
/// Every row is read and checked before anything is written: an unknown entity or field, a value of the wrong type
/// or a reference to an object that is neither in the file nor in the store is exit 65 naming the row and the
/// field, with the store unchanged. Objects get the store's next keys; a reference to an object of the file follows
/// it to its new key. Into an empty store with the same schema, an export of a store whose keys have no gaps comes
/// back with the same keys, so that exporting the copy gives the same text.
struct Importer {
    let invocation: Invocation
    let format: OutputFormat
    let out: (String) -> Void
    /// Standard error, for the progress line.
    var err: (String) -> Void = { _ in }

    /// A cell as the file gave it, before it is typed by the schema.
    enum Field {
        case null
        case text(String)
        case number(NSNumber)
        case bool(Bool)
        case list([Field])
    }

    struct Row {
        /// Where the row is, for messages: "line 3" or "row 2".
        var place: String
        /// The object's ID in the file; nil for a row without one (a new object of ``entity``).
        var id: ObjectID?
        /// The row's entity: its ID's, or the one given for rows without IDs (`--entity`, a CSV file's name).
        var entity: String?
        var fields: [(key: String, value: Field)]
    }

    func run() throws -> Int32 {
        let creating = try storeToCreate()
        if creating == nil && !FileManager.default.fileExists(atPath: invocation.store) {
            throw CommandFailure(
                code: ExitCode.storeUnavailable,
                message: "no store at \(invocation.store): give --schema FILE (written by `store-inspect schema STORE"
                    + " --definition`) to create one")
        }
        if creating == nil { try Runner.checkStorePath(invocation.store) }
        if let input = invocation.options["--input"], !["json", "ndjson", "csv"].contains(input) {
            throw CommandFailure(code: ExitCode.usage, message: "unknown --input '\(input)' (json, ndjson or csv)")
        }
        let rows: [Row]
        do {
            rows = try read(invocation.positionals[0])
        } catch let failure as CommandFailure {
            throw CommandFailure(code: failure.code, message: "nothing was imported: \(failure.message)")
        }
        // Every row is typed and every reference resolved before the store is opened to write: bad input writes
        // nothing at all (an insert reserves keys in the store).
        let (schema, objects) = try checked(rows, creating: creating)
        let store: PersistentStore
        do {
            store = try PersistentStore.open(path: invocation.store, schema: schema)
        } catch {
            var message = "nothing was imported: the store cannot be opened: \(Self.message(error))"
            if creating != nil {
                do {
                    try FileManager.default.removeItem(atPath: invocation.store)
                } catch let removal {
                    message +=
                        "; what it made at \(invocation.store) could not be removed (\(removal.localizedDescription))"
                }
            }
            throw CommandFailure(code: ExitCode.corruptData, message: message)
        }
        let context = ObjectContext(store: store, name: "store-inspect import")
        var made: [ObjectID: ManagedObject] = [:]
        var counts: [String: (objects: Int, renumbered: Int)] = [:]
        let line = ProgressLine(
            "importing", unit: "objects", total: objects.count, invocation: invocation, err: err)
        defer { line?.finish() }
        do {
            // Attributes first (each object inserted), then relationships (their targets may come later).
            for (index, object) in objects.enumerated() {
                line?.update(index)
                let inserted = try context.insert(object.id.entityName)
                made[object.id] = inserted
                counts[object.id.entityName, default: (0, 0)].objects += 1
                if inserted.objectID != object.id { counts[object.id.entityName, default: (0, 0)].renumbered += 1 }
                for (key, value) in object.values { try inserted.setValue(value, forKey: key) }
            }
            for object in objects {
                let source = made[object.id]!
                for (key, targets, toMany) in object.relationships {
                    let resolved = try targets.map { try made[$0] ?? context.existingObject(with: $0) }
                    if toMany {
                        for target in resolved { try source.add(target, toKey: key) }
                    } else {
                        try source.setObject(resolved.first, forKey: key)
                    }
                }
            }
            try context.save()
        } catch {
            throw CommandFailure(code: ExitCode.corruptData, message: "nothing was imported: \(Self.message(error))")
        }
        var table = Table(columns: ["entity", "objects", "new keys"])
        for entity in schema.entities where counts[entity.name] != nil {
            let count = counts[entity.name]!
            table.rows.append([.text(entity.name), .int(Int64(count.objects)), .int(Int64(count.renumbered))])
        }
        out(table.render(format, color: false))
        return ExitCode.ok
    }

    /// A row typed by the schema: its attribute values (derived ones left out: a save computes them) and its
    /// relationships' targets.
    struct Checked {
        var id: ObjectID
        var values: [(String, Value)]
        var relationships: [(String, [ObjectID], Bool)]
    }

    /// The store's schema and every row typed by it, each reference resolved (to a row of the file, or an object
    /// the store has); throws with every problem found (the first ten named).
    func checked(_ rows: [Row], creating: Schema?) throws -> (Schema, [Checked]) {
        // The read-only handle is released before the store is opened to write.
        let store = try creating == nil ? PersistentStore.openReadOnly(path: invocation.store) : nil
        guard let schema = creating ?? store?.schema else {
            throw CommandFailure(code: ExitCode.usage, message: "no schema")
        }
        let refs = try references(in: schema)
        var failures: [String] = []
        var ids = Set<ObjectID>()
        var result: [Checked] = []
        // Rows without IDs get IDs of their own, past any key a store gives, for references among the file's rows.
        var unnamed = Self.firstUnnamedKey
        var rows = rows
        for index in rows.indices where rows[index].id == nil {
            guard let entity = rows[index].entity ?? invocation.options["--entity"] else {
                failures.append("\(rows[index].place) has no id like Book/p1 (for new objects, give --entity)")
                continue
            }
            rows[index].id = ObjectID(entityName: entity, primaryKey: unnamed)
            unnamed += 1
        }
        // The file's objects by the unique values --ref names them by (the store's are looked up as needed).
        var byReference: [String: [Value: [ObjectID]]] = [:]
        for row in rows {
            guard let id = row.id else { continue }
            for (key, ref) in refs where schema.isKind(id.entityName, of: ref.entity) {
                // (A value that is not of the attribute's type is reported with the row's own fields.)
                guard let field = row.fields.first(where: { $0.key == ref.attribute })?.value,
                    case .success(let value) = Result(catching: { try Self.value(field, ref.type) }), !value.isNull
                else { continue }
                let unique = ValueSemantics.uniquenessKey(value, caseInsensitive: ref.caseInsensitive)
                byReference[key, default: [:]][unique, default: []].append(id)
            }
        }
        for row in rows {
            guard let id = row.id else { continue }
            guard let entity = schema.entity(id.entityName) else {
                failures.append("\(row.place): \(Self.label(id)): the store has no entity \(id.entityName)")
                continue
            }
            if entity.isAbstract {
                failures.append("\(row.place): \(Self.label(id)): \(entity.name) is abstract")
                continue
            }
            guard ids.insert(id).inserted else {
                failures.append("\(row.place): \(id) is given twice")
                continue
            }
            var checked = Checked(id: id, values: [], relationships: [])
            for (key, field) in row.fields {
                do {
                    if let attribute = entity.attribute(key) {
                        if attribute.derivation == nil {
                            checked.values.append((key, try Self.value(field, attribute.type)))
                        }
                    } else if let relationship = entity.relationship(key), let ref = refs[key] {
                        let targets = try resolve(
                            field, ref, key: key, toMany: relationship.isToMany, file: byReference[key] ?? [:],
                            store: store)
                        checked.relationships.append((key, targets, relationship.isToMany))
                    } else if let relationship = entity.relationship(key) {
                        let targets = try Self.references(field, toMany: relationship.isToMany)
                        checked.relationships.append((key, targets, relationship.isToMany))
                    } else {
                        throw CommandFailure(
                            code: ExitCode.corruptData, message: "\(entity.name) has no field '\(key)'")
                    }
                } catch {
                    failures.append("\(row.place): \(Self.label(id)).\(key): \(Self.message(error))")
                }
            }
            result.append(checked)
        }
        for object in result {
            for (key, targets, _) in object.relationships {
                for target in targets where !ids.contains(target) {
                    // Not in the file: an object the store already has (an export of one entity, loaded into the
                    // store its references point into).
                    if try store?.readObject(target) == nil {
                        failures.append(
                            "\(Self.label(object.id)).\(key): \(target) is neither in the file nor in the store")
                    }
                }
            }
        }
        if !failures.isEmpty {
            let more = failures.count > 10 ? " (and \(failures.count - 10) more)" : ""
            throw CommandFailure(
                code: ExitCode.corruptData,
                message: "nothing was imported: \(failures.prefix(10).joined(separator: "; "))\(more)")
        }
        return (schema, result)
    }

    /// The store to create, when there is none at the path: the schema of `--schema FILE` (as
    /// `schema --definition` writes it); nil when the store exists.
    func storeToCreate() throws -> Schema? {
        let exists = FileManager.default.fileExists(atPath: invocation.store)
        guard let file = invocation.options["--schema"] else { return nil }
        if exists {
            throw CommandFailure(
                code: ExitCode.usage, message: "\(invocation.store) exists: --schema creates a store that does not")
        }
        let data = try Self.read(file)
        do {
            return try JSONDecoder().decode(Schema.self, from: data)
        } catch let error as EntityStoreError {
            throw CommandFailure(code: ExitCode.corruptData, message: "\(file) is not a valid schema: \(error.message)")
        } catch {
            throw CommandFailure(
                code: ExitCode.corruptData,
                message: "\(file) is not a schema as `store-inspect schema STORE --definition` writes one")
        }
    }

    /// A relationship whose targets the file names by a unique attribute (`--ref shelf=Shelf.name`).
    struct Reference {
        var entity: String
        var attribute: String
        var type: AttributeType
        var caseInsensitive: Bool
    }

    /// `--ref K=E.A,...`, checked against the schema: E an entity, A its unique attribute.
    func references(in schema: Schema) throws -> [String: Reference] {
        guard let text = invocation.options["--ref"] else { return [:] }
        var result: [String: Reference] = [:]
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
            let target = parts.count == 2 ? parts[1].split(separator: ".").map(String.init) : []
            guard parts.count == 2, !parts[0].isEmpty, target.count == 2 else {
                throw CommandFailure(
                    code: ExitCode.usage, message: "--ref '\(item)' is not KEY=ENTITY.ATTRIBUTE (shelf=Shelf.name)")
            }
            guard let entity = schema.entity(target[0]), let attribute = entity.attribute(target[1]) else {
                throw CommandFailure(code: ExitCode.usage, message: "--ref \(item): the schema has no \(parts[1])")
            }
            guard attribute.isUnique else {
                throw CommandFailure(
                    code: ExitCode.usage,
                    message: "--ref \(item): \(parts[1]) is not unique, so a value may name several objects")
            }
            result[parts[0]] = Reference(
                entity: entity.name, attribute: attribute.name, type: attribute.type,
                caseInsensitive: attribute.isCaseInsensitive)
        }
        return result
    }

    /// The targets a field names by `ref`'s unique attribute: objects of the file, else of the store; exactly one
    /// each.
    func resolve(
        _ field: Field, _ ref: Reference, key: String, toMany: Bool, file: [Value: [ObjectID]], store: PersistentStore?
    ) throws -> [ObjectID] {
        let fields: [Field]
        switch field {
        case .null: return []
        case .list(let items) where toMany: fields = items
        case _ where toMany:
            throw CommandFailure(
                code: ExitCode.corruptData,
                message: "\(Self.describe(field)) is not a list: a to-many named by --ref needs a JSON list")
        default: fields = [field]
        }
        return try fields.map { field in
            let value = try Self.value(field, ref.type)
            let inFile = file[ValueSemantics.uniquenessKey(value, caseInsensitive: ref.caseInsensitive)] ?? []
            if inFile.count == 1 { return inFile[0] }
            if inFile.count > 1 {
                throw CommandFailure(
                    code: ExitCode.corruptData,
                    message: "\(inFile.count) rows of the file have \(ref.entity).\(ref.attribute) \(value)")
            }
            let found =
                try store.map { store in
                    try ObjectContext(store: store).fetchObjectIDs(
                        FetchRequest(
                            entity: ref.entity,
                            predicate: try FetchPredicate(
                                ref.caseInsensitive ? "%K ==[c] %@" : "%K == %@", ref.attribute, value)))
                } ?? []
            guard found.count == 1 else {
                throw CommandFailure(
                    code: ExitCode.corruptData,
                    message: "no \(ref.entity) with \(ref.attribute) \(value) in the file or the store")
            }
            return found[0]
        }
    }

    /// The first ID given to a row without one (``checked(_:creating:)``).
    static let firstUnnamedKey: UInt64 = 1 << 62

    /// An object of the file as messages name it: its ID, or "the new Book" for a row without one.
    static func label(_ id: ObjectID) -> String {
        id.primaryKey >= firstUnnamedKey ? "the new \(id.entityName)" : "\(id)"
    }

    static func message(_ error: any Error) -> String {
        if let failure = error as? CommandFailure { return failure.message }
        if let error = error as? EntityStoreError {
            // A save's error counts its failures; name them.
            guard error.failures.count > 1 else { return error.failures.first?.message ?? error.message }
            return error.failures.prefix(10).map(\.message).joined(separator: "; ")
                + (error.failures.count > 10 ? " (and \(error.failures.count - 10) more)" : "")
        }
        return "\(error)"
    }

    // MARK: - Reading the file

    /// The rows of `file`: a JSON, NDJSON or CSV file, standard input (`-`), or a directory of `ENTITY.csv` files.
    func read(_ file: String) throws -> [Row] {
        var isDirectory: ObjCBool = false
        guard
            file != "-" && FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory)
                && isDirectory.boolValue
        else {
            return try parse(try Self.read(file), named: file == "-" ? "standard input" : file)
        }
        // What `export --all --format csv --dir D` wrote: every ENTITY.csv, loaded together (their references
        // cross).
        let names = try FileManager.default.contentsOfDirectory(atPath: file).filter { $0.hasSuffix(".csv") }.sorted()
        guard !names.isEmpty else { throw CommandFailure(code: ExitCode.usage, message: "\(file) holds no .csv file") }
        var rows: [Row] = []
        for name in names { rows += try Self.csvRows(try Self.read(file + "/" + name), name: name) }
        return rows
    }

    /// The bytes of `file` (or of standard input for `-`): read through a file handle, so that pipes and devices
    /// (`<(...)`, `/dev/stdin`) work as files do.
    static func read(_ file: String) throws -> Data {
        if file == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        guard let handle = FileHandle(forReadingAtPath: file) else {
            let reason = FileManager.default.fileExists(atPath: file) ? "it cannot be opened" : "no such file"
            throw CommandFailure(code: ExitCode.storeUnavailable, message: "cannot read \(file): \(reason)")
        }
        do {
            let data = try handle.readToEnd() ?? Data()
            try handle.close()
            return data
        } catch {
            throw CommandFailure(
                code: ExitCode.ioError, message: "cannot read \(file): \(error.localizedDescription)")
        }
    }

    func parse(_ data: Data, named name: String) throws -> [Row] {
        let input = invocation.options["--input"] ?? Self.guessFormat(data)
        switch input {
        case "json":
            let parsed = try Self.json(data, "\(name) is not JSON")
            guard let rows = (parsed as? [String: Any])?["rows"] as? [Any] else {
                throw CommandFailure(
                    code: ExitCode.corruptData, message: "\(name) is not an export in JSON (an object with \"rows\")")
            }
            return try rows.enumerated().map { try Self.row($1, place: "row \($0 + 1)") }
        case "ndjson":
            var rows: [Row] = []
            for (number, line) in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
                .enumerated() where !line.allSatisfy({ $0 == 0x20 || $0 == 0x0D })
            {
                let object = try Self.json(Data(line), "\(name) line \(number + 1) is not a JSON object")
                rows.append(try Self.row(object, place: "line \(number + 1)"))
            }
            return rows
        case "csv":
            return try Self.csvRows(data, name: name, entity: invocation.options["--entity"])
        default:
            throw CommandFailure(code: ExitCode.usage, message: "unknown --input '\(input)' (json, ndjson or csv)")
        }
    }

    /// `data` parsed as JSON; a failure says `what` and the parser's reason.
    static func json(_ data: Data, _ what: String) throws -> Any {
        do {
            return try JSONSerialization.jsonObject(with: data)
        } catch {
            throw CommandFailure(code: ExitCode.corruptData, message: "\(what) (\(error.localizedDescription))")
        }
    }

    /// JSON when the file is one object holding `"rows"`, NDJSON when it starts with an object, CSV otherwise.
    static func guessFormat(_ data: Data) -> String {
        guard let first = data.first(where: { ![0x20, 0x0A, 0x0D, 0x09].contains($0) }), first == UInt8(ascii: "{")
        else { return "csv" }
        let head = data.prefix(64)
        return String(decoding: head, as: UTF8.self).range(
            of: #"^\s*\{\s*"(transaction|rows)""#, options: .regularExpression)
            != nil ? "json" : "ndjson"
    }

    static func row(_ object: Any, place: String) throws -> Row {
        guard let dictionary = object as? [String: Any] else {
            throw CommandFailure(code: ExitCode.corruptData, message: "\(place) is not a JSON object")
        }
        let entity = dictionary["entity"] as? String
        var id: ObjectID?
        if let given = dictionary["id"] {
            guard let idText = given as? String, let parsed = ObjectID(string: idText) else {
                throw CommandFailure(code: ExitCode.corruptData, message: "\(place) has no \"id\" like \"Book/p1\"")
            }
            if let entity, entity != parsed.entityName {
                throw CommandFailure(
                    code: ExitCode.corruptData, message: "\(place): \"entity\" is \(entity) but the id is \(idText)")
            }
            id = parsed
        }
        let fields = try dictionary.filter { $0.key != "id" && $0.key != "entity" }.sorted { $0.key < $1.key }.map {
            ($0.key, try field($0.value, place: "\(place).\($0.key)"))
        }
        return Row(place: place, id: id, entity: id?.entityName ?? entity, fields: fields)
    }

    static func field(_ value: Any, place: String) throws -> Field {
        switch value {
        case is NSNull: return .null
        case let text as String: return .text(text)
        // JSON's true and false come as NSNumbers of C type `char` (other numbers as `int`, `long long`, `double`
        // or NSDecimalNumber; numbers 0 and 1 also cast to Bool, so the type is what tells them apart).
        case let number as NSNumber where !(number is NSDecimalNumber) && String(cString: number.objCType) == "c":
            return .bool(number.boolValue)
        case let number as NSNumber: return .number(number)
        case let list as [Any]: return .list(try list.map { try field($0, place: place) })
        default:
            throw CommandFailure(code: ExitCode.corruptData, message: "\(place) holds a value of no known kind")
        }
    }

    /// A CSV export of one entity (RFC 4180; an empty field is nil, `""` the empty string).
    static func csvRows(_ data: Data, name: String, entity: String? = nil) throws -> [Row] {
        let records = try CSVReader.records(Array(data), name: name)
        guard let header = records.first else { return [] }
        let keys = header.map { $0.text ?? "" }
        // Without an id column, new objects of `entity` (--entity, or the file's name: Book.csv).
        let idColumn = keys.firstIndex(of: "id")
        let named = name.hasSuffix(".csv") ? String(name.dropLast(4).split(separator: "/").last ?? "") : nil
        return try records.dropFirst().enumerated().map { number, record in
            let place = "\(name) row \(number + 1)"
            guard record.count == keys.count else {
                throw CommandFailure(
                    code: ExitCode.corruptData,
                    message: "\(place) has \(record.count) fields; the header has \(keys.count)")
            }
            var id: ObjectID?
            if let idColumn {
                guard let idText = record[idColumn].text, let parsed = ObjectID(string: idText) else {
                    throw CommandFailure(code: ExitCode.corruptData, message: "\(place) has no id like Book/p1")
                }
                id = parsed
            }
            var fields: [(String, Field)] = []
            for (key, cell) in zip(keys, record) where key != "id" && key != "entity" {
                fields.append((key, cell.text.map(Field.text) ?? .null))
            }
            return Row(place: place, id: id, entity: id?.entityName ?? entity ?? named, fields: fields)
        }
    }

    // MARK: - Typing

    /// The value of `field` for an attribute of `type`, read as `export` writes it.
    static func value(_ field: Field, _ type: AttributeType) throws -> Value {
        func wrong() -> CommandFailure {
            CommandFailure(code: ExitCode.corruptData, message: "\(describe(field)) is not \(type.withArticle)")
        }
        switch (field, type) {
        case (.null, _): return .null
        case (.text(let text), .string): return .string(text)
        case (.number(let number), .int64):
            // A whole number (JSON has one kind of number). One past what a machine integer holds, or written with a
            // fraction, the parser keeps as a decimal: it must be exactly the integer it converts to
            // (-9223372036854775809 converts to Int64.min), or it is refused rather than stored changed.
            guard let value = number as? Int else { throw wrong() }
            if let exact = number as? NSDecimalNumber, exact.decimalValue != Decimal(value) { throw wrong() }
            return .int(Int64(value))
        case (.text(let text), .int64):
            guard let value = Int64(text) else { throw wrong() }
            return .int(value)
        case (.number(let number), .double): return .double(number.doubleValue)
        case (.text(let text), .double):
            // Non-finite doubles are written as text: nan, inf, -inf, and NaNs with a payload as Swift prints them.
            guard let value = Double(exactDescription: text) else { throw wrong() }
            return .double(value)
        case (.bool(let flag), .bool): return .bool(flag)
        case (.text("true"), .bool): return .bool(true)
        case (.text("false"), .bool): return .bool(false)
        case (.text(let text), .date):
            guard let date = Cell.parseExactDate(text) ?? Cell.parseDateBeyondTheCalendar(text) else { throw wrong() }
            return .date(date)
        case (.text(let text), .uuid):
            guard let uuid = UUID(uuidString: text) else { throw wrong() }
            return .uuid(uuid)
        case (.text(let text), .binary):
            guard let data = Data(base64Encoded: text) else { throw wrong() }
            return .data(Array(data))
        case (.text(let text), .decimal):
            guard text.range(of: #"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$"#, options: .regularExpression) != nil,
                let decimal = Decimal(string: text)
            else { throw wrong() }
            return .decimal(decimal)
        default: throw wrong()
        }
    }

    /// The object IDs a relationship's field names: one ID (or nil) for a to-one, a list (JSON) or IDs separated by
    /// spaces (CSV) for a to-many.
    static func references(_ field: Field, toMany: Bool) throws -> [ObjectID] {
        func id(_ text: String) throws -> ObjectID {
            guard let id = ObjectID(string: text) else {
                throw CommandFailure(code: ExitCode.corruptData, message: "'\(text)' is not an object ID like Book/p1")
            }
            return id
        }
        switch field {
        case .null: return []
        case .text(let text) where toMany: return try text.split(separator: " ").map { try id(String($0)) }
        case .text(let text): return [try id(text)]
        case .list(let items) where toMany:
            return try items.map { item in
                guard case .text(let text) = item else {
                    throw CommandFailure(code: ExitCode.corruptData, message: "\(describe(item)) is not an object ID")
                }
                return try id(text)
            }
        default:
            throw CommandFailure(
                code: ExitCode.corruptData,
                message: "\(describe(field)) is not \(toMany ? "a list of object IDs" : "an object ID")")
        }
    }

    static func describe(_ field: Field) -> String {
        switch field {
        case .null: "null"
        case .text(let text): "'\(Cell.visible(String(text.prefix(40))))'"
        case .number(let number): "\(number)"
        case .bool(let flag): "\(flag)"
        case .list(let items): "a list of \(items.count)"
        }
    }
}

/// An RFC 4180 reader that tells an empty field (nil) from a quoted empty one (the empty string).
enum CSVReader {
    struct Cell {
        /// The field's text; nil for an empty, unquoted field.
        var text: String?
    }

    static func records(_ bytes: [UInt8], name: String) throws -> [[Cell]] {
        // A UTF-8 byte order mark (spreadsheets write one) is not part of the first column's name.
        let bytes = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? Array(bytes.dropFirst(3)) : bytes
        var records: [[Cell]] = []
        var record: [Cell] = []
        var field: [UInt8] = []
        var quoted = false
        var inQuotes = false
        var line = 1
        var i = 0
        func endField() {
            record.append(Cell(text: field.isEmpty && !quoted ? nil : String(decoding: field, as: UTF8.self)))
            field = []
            quoted = false
        }
        while i < bytes.count {
            let byte = bytes[i]
            i += 1
            if inQuotes {
                if byte == 0x22 {
                    if i < bytes.count && bytes[i] == 0x22 {
                        field.append(0x22)
                        i += 1
                    } else {
                        inQuotes = false
                    }
                } else {
                    if byte == 0x0A { line += 1 }
                    field.append(byte)
                }
                continue
            }
            switch byte {
            case 0x22 where field.isEmpty && !quoted:
                inQuotes = true
                quoted = true
            case 0x2C: endField()
            case 0x0D where i < bytes.count && bytes[i] == 0x0A: continue
            case 0x0A:
                endField()
                records.append(record)
                record = []
                line += 1
            default:
                if quoted {
                    throw CommandFailure(
                        code: ExitCode.corruptData, message: "\(name) line \(line): text after a closing quote")
                }
                field.append(byte)
            }
        }
        if inQuotes {
            throw CommandFailure(code: ExitCode.corruptData, message: "\(name) line \(line): a quote is not closed")
        }
        if !field.isEmpty || quoted || !record.isEmpty {
            endField()
            records.append(record)
        }
        return records
    }
}
