import Foundation
import LMDB
import Synchronization

/// An open store: an LMDB environment holding objects of a schema.
///
/// Opening a store with a schema migrates lightweight changes by itself (see ``open(path:schema:options:)``);
/// anything else is an error naming the entity and attribute, and nothing is ever wiped. `PersistentStore` is
/// `Sendable`: share one per store directory between threads and contexts.
///
/// <!-- snippet
/// uses: library
/// let schema = try Schema(version: 1, models: [Author.self, Book.self, Tag.self])
/// -->
/// ```swift
/// let store = try PersistentStore.open(path: "library.store", schema: schema)
/// let context = ObjectContext(store: store)
/// ```
public final class PersistentStore: Sendable {
    /// The store format this version of EntityStore writes and reads: 2 since records hold their fixed-size
    /// attributes first. Stores of format 1 are read as they are and marked format 2 when opened for writing (their
    /// records are rewritten as they are saved), so that an older EntityStore refuses them instead of misreading
    /// them.
    public static let formatVersion: UInt32 = 2

    /// Options for opening a store.
    public struct Options: Sendable {
        /// How commits reach the disk: durable by default.
        public var sync: Environment.SyncMode = .durable
        /// The initial map size; the map grows by itself.
        public var mapSize: Int = 8 << 20
        /// Open without writing: no migration; the schema is read from the store.
        public var readOnly = false

        /// Options with the given fields changed.
        public init(sync: Environment.SyncMode = .durable, mapSize: Int = 8 << 20, readOnly: Bool = false) {
            self.sync = sync
            self.mapSize = mapSize
            self.readOnly = readOnly
        }
    }

    /// The LMDB environment.
    public let environment: Environment
    /// The schema in force (the declared one, after migration; or the stored one for a read-only open).
    public let schema: Schema
    /// The store's identity, part of object URIs.
    public let storeID: UUID
    /// Whether the store was opened read-only.
    public let isReadOnly: Bool

    let meta: Database
    let historyDatabase: Database
    let storages: [String: EntityStorage]
    /// The schema's entity hierarchies: which entities a fetch reads, whose sequence gives an entity its keys.
    let hierarchies: Hierarchies
    /// Model classes by entity name: the schema's, and those checked against the store (a fetch of a superentity
    /// wraps each object in its own entity's class).
    let modelClasses: Locked<[String: Model.Type]>
    let publisher = StorePublisher()
    /// Fetch requests compiled and planned, by entity, predicate and sort keys.
    let preparedFetches = PreparedFetches()
    /// The tracers (``trace(_:_:)``).
    let tracers = Tracers()
    /// The derived attributes of the schema, parsed on first use (see `derivations()`).
    let parsedDerivations = Locked<[String: [Derivation]]?>(nil)
    /// Custom validation rules by entity (see `addValidation(for:_:)`).
    let validationRules = Locked<[String: [ValidationRule]]>([:])
    /// Model classes already checked against the schema.
    let checkedModels = Locked<Set<ObjectIdentifier>>([])
    /// The schema stamp the store's records must carry for this store to use them (checked by every read and write).
    let schemaStamp: [UInt8]?
    /// The newest read snapshot whose schema stamp was checked.
    let verifiedSnapshot = Atomic<Int>(-1)
    /// For a store a migration stage hands its code: the migration's write transaction, used by every read and
    /// write of this store (`nil` for every other store).
    let migration: MigrationScope?
    /// The key blocks of the sequences inserts have used, by sequence owner.
    private let keyBlocks = Locked<[String: KeyBlock]>([:])
    static let keyBlockSize: UInt64 = 256

    private init(
        environment: Environment, schema: Schema, storeID: UUID, readOnly: Bool, meta: Database, history: Database,
        storages: [String: EntityStorage], schemaStamp: [UInt8]?, migration: MigrationScope? = nil
    ) {
        self.migration = migration
        self.schemaStamp = schemaStamp
        self.environment = environment
        self.schema = schema
        self.storeID = storeID
        self.isReadOnly = readOnly
        // Handles opened by the (finished) opening transaction, in their published form: no lookup per use.
        self.meta = environment.published(meta)
        self.historyDatabase = environment.published(history)
        self.storages = storages.mapValues { $0.published(in: environment) }
        hierarchies = Hierarchies(schema)
        modelClasses = Locked(schema.modelClasses?.classes ?? [:])
    }

    deinit {
        publisher.shutDown()
    }

    /// Opens (or creates) the store at `path` with `schema`, migrating the stored schema when it differs.
    ///
    /// Lightweight changes migrate by themselves, in one write transaction: adding an optional attribute or one
    /// with a default, adding an entity, relationship or index, removing one that holds no data, making a required
    /// attribute optional, and renames declared with `renamedFrom`. Anything else (dropping stored values
    /// included) fails with ``EntityStoreError/Code/migrationRefused`` naming entity, attribute and reason, and
    /// changes nothing; ``open(path:plan:options:)`` runs what a ``MigrationPlan`` declares.
    ///
    /// - Throws: ``EntityStoreError`` (``EntityStoreError/Code/schemaOlderThanStore``,
    ///   ``EntityStoreError/Code/notAStore``, ``EntityStoreError/Code/storeFormatTooNew``, ...;
    ///   ``EntityStoreError/Code/invalidSchema`` for a schema whose entities were changed into an invalid list
    ///   after it was made).
    public static func open(
        path: String, schema declared: Schema, options: Options = Options()
    ) throws
        -> PersistentStore
    {
        try open(path: path, plan: MigrationPlan(schemas: [declared]), options: options)
    }

    /// Opens (or creates) the store at `path` with the last schema of `plan`, running the plan's stages from the
    /// stored version on (see <doc:Migration>).
    ///
    /// Every stage runs in the opening write transaction: all of them, or (when one throws or is refused) none,
    /// and the store stays at its version.
    ///
    /// - Throws: What ``open(path:schema:options:)`` throws; ``EntityStoreError/Code/migrationRefused`` for a plan
    ///   whose versions do not ascend or whose stage joins no two listed versions, a stage that would drop stored
    ///   values it does not declare, duplicates of a new unique attribute it does not resolve; what a stage's code
    ///   throws.
    public static func open(path: String, plan: MigrationPlan, options: Options = Options()) throws -> PersistentStore {
        guard let last = plan.schemas.last else {
            throw EntityStoreError(.migrationRefused, "the migration plan lists no schema")
        }
        var plan = plan
        // A schema whose entities were changed after it was made (`schema.entities` is settable) is validated and
        // its sub-entities given their superentities' properties again, as when it was made.
        plan.schemas = try plan.schemas.map { try $0.validatedAgain() }
        try Migration.check(plan)
        let schema = plan.schemas.last ?? last
        if options.readOnly {
            let store = try openReadOnly(path: path, options: options)
            guard store.schema.fingerprint == schema.fingerprint else {
                throw EntityStoreError(
                    .migrationRefused,
                    "the store's schema (version \(store.schema.version)) differs from the declared one, and a"
                        + " read-only store cannot be migrated")
            }
            return store
        }
        // LMDB zeroes a per-database table at every transaction begin, so size it to the schema: its databases,
        // twice over for a migration that holds old and new ones, with room to spare.
        let databases = plan.schemas.flatMap(\.entities).reduce(2) { count, entity in
            count + 1 + entity.attributes.filter(\.isIndexed).count + entity.relationships.count
        }
        let environment = try mappingStorageErrors("opening the store at \(path)") {
            try Environment.open(
                path: path,
                options: .init(
                    mapSize: options.mapSize, maxDatabases: max(32, 2 * databases + 16), sync: options.sync))
        }
        // The opening transaction: a new store, or the stored one brought up to date (all of a plan that fits).
        let opening = try mappingStorageErrors("opening the store at \(path)") {
            try environment.write { txn -> (storeID: UUID, version: Int, opened: Opened?) in
                let meta = try openMeta(txn)
                if let stored = try readSchema(txn, meta: meta) {
                    let storeID = try readStoreID(txn, meta: meta)
                    let site = Migration.Site(environment: environment, meta: meta, storeID: storeID)
                    // A stage begun in chunks commits its start with this transaction and goes on below.
                    guard try Migration.run(plan, stored: stored, txn, site) else {
                        return (storeID, stored.version, nil)
                    }
                    return (storeID, stored.version, try finishOpening(txn, meta: meta, schema: schema))
                }
                let storeID = UUID()
                try txn.put(
                    StoreNames.MetaKey.format, withUnsafeBytes(of: formatVersion.littleEndian, Array.init), in: meta)
                try txn.put(StoreNames.MetaKey.storeID, withUnsafeBytes(of: storeID.uuid, Array.init), in: meta)
                try writeSchema(schema, history: [schema], txn, meta: meta)
                return (storeID, schema.version, try finishOpening(txn, meta: meta, schema: schema))
            }
        }
        let storeID = opening.storeID
        var opened = opening.opened
        if opened == nil {
            // A migration too large for one transaction: its chunks, its end and the plan's later stages.
            try mappingStorageErrors("migrating the store at \(path)") {
                try Migration.resumeOrAbandon(
                    plan, declared: schema, storeID: storeID, startVersion: opening.version, environment: environment)
                opened = try environment.write { txn in
                    let meta = try openMeta(txn)
                    guard let stored = try readSchema(txn, meta: meta), stored.fingerprint == schema.fingerprint else {
                        throw EntityStoreError(
                            .migrationRefused, "the store's migration did not reach version \(schema.version)")
                    }
                    return try finishOpening(txn, meta: meta, schema: schema)
                }
            }
        }
        guard let (meta, history, storages) = opened else {
            throw EntityStoreError(.storage, "the store at \(path) was not opened")
        }
        let store = PersistentStore(
            environment: environment, schema: schema, storeID: storeID, readOnly: false, meta: meta,
            history: history, storages: storages, schemaStamp: Array(schema.fingerprint.utf8))
        try store.computePendingDerivations()
        return store
    }

    typealias Opened = (meta: Database, history: Database, storages: [String: EntityStorage])

    /// The end of an opening transaction, once the store holds `schema`: the format and stamp, the handles.
    private static func finishOpening(_ txn: WriteTransaction, meta: Database, schema: Schema) throws -> Opened {
        if try checkFormat(txn, meta: meta) < formatVersion {
            try txn.put(
                StoreNames.MetaKey.format, withUnsafeBytes(of: formatVersion.littleEndian, Array.init), in: meta)
        }
        // Stores written before the stamp existed get it now.
        let stamp = Array(schema.fingerprint.utf8)
        if try txn.get(StoreNames.MetaKey.schemaStamp, in: meta).map(Array.init) != stamp {
            try txn.put(StoreNames.MetaKey.schemaStamp, stamp, in: meta)
        }
        var storages: [String: EntityStorage] = [:]
        for entity in schema.entities {
            storages[entity.name] = try EntityStorage.open(entity, in: txn, create: true)
        }
        try upgradeIndexKeys(txn, meta: meta, storages: storages)
        let history = try txn.openDatabase(StoreNames.history, create: true)
        return (meta, history, storages)
    }

    /// Opens the store at `path` read-only, with the schema stored in it: no writes, no migration.
    ///
    /// Safe while an app has the store open. For tools such as `store-inspect`, which need no app code.
    public static func openReadOnly(
        path: String, options: Options = Options(readOnly: true)
    ) throws
        -> PersistentStore
    {
        let environment = try mappingStorageErrors("opening the store at \(path) read-only") {
            try Environment.open(path: path, options: .init(mapSize: options.mapSize, readOnly: true))
        }
        let store = try mappingStorageErrors("reading the store at \(path)") {
            try environment.read { txn in
                let meta: Database
                do {
                    meta = try txn.openDatabase(StoreNames.meta)
                } catch let error as LMDBError where error.code == .databaseNotFound {
                    throw EntityStoreError(.notAStore, "\(path) is an LMDB environment but not an EntityStore store")
                }
                try checkFormat(txn, meta: meta)
                guard let schema = try readSchema(txn, meta: meta) else {
                    throw EntityStoreError(.notAStore, "\(path) has no stored schema")
                }
                let storeID = try readStoreID(txn, meta: meta)
                var storages: [String: EntityStorage] = [:]
                for entity in schema.entities {
                    storages[entity.name] = try EntityStorage.open(entity, in: txn, create: false)
                }
                let history = try txn.openDatabase(StoreNames.history)
                let stamp = try txn.get(StoreNames.MetaKey.schemaStamp, in: meta).map(Array.init)
                return (schema, storeID, meta, history, storages, stamp)
            }
        }
        // Made after the read ended, so that the handles it opened are published.
        return PersistentStore(
            environment: environment, schema: store.0, storeID: store.1, readOnly: true, meta: store.2,
            history: store.3, storages: store.4, schemaStamp: store.5)
    }

    /// A store in `schema` over the migration transaction of `scope`, for a stage's code: every read and write goes
    /// to that transaction, until the stage ends.
    static func migrating(
        _ scope: MigrationScope, environment: Environment, schema: Schema, storeID: UUID, meta: Database
    ) throws -> PersistentStore {
        let txn = try scope.transaction()
        var storages: [String: EntityStorage] = [:]
        for entity in schema.entities {
            storages[entity.name] = try EntityStorage.open(entity, in: txn, create: true)
        }
        let history = try txn.openDatabase(StoreNames.history, create: true)
        return PersistentStore(
            environment: environment, schema: schema, storeID: storeID, readOnly: false, meta: meta, history: history,
            storages: storages, schemaStamp: Array(schema.fingerprint.utf8), migration: scope)
    }

    /// Every schema version the store has been opened with, oldest first.
    public func schemaHistory() throws -> [Schema] {
        try mappingStorageErrors("reading the schema history") {
            try environment.read { txn in
                guard let bytes = try txn.get(StoreNames.MetaKey.schemaHistory, in: meta) else { return [] }
                return try Self.decodeJSON([Schema].self, bytes, what: "schema history")
            }
        }
    }

    /// The object's URI: `entitystore://STORE-ID/Entity/p42`.
    public func uri(for id: ObjectID) -> String { "entitystore://\(storeID.uuidString)/\(id)" }

    /// The object ID named by a URI from ``uri(for:)``.
    /// - Throws: ``EntityStoreError/Code/invalidObjectID`` for a URI of another store, an unknown entity or a bad
    ///   form.
    public func objectID(forURI uri: String) throws -> ObjectID {
        let prefix = "entitystore://\(storeID.uuidString)/"
        guard uri.hasPrefix(prefix) else {
            throw EntityStoreError(.invalidObjectID, "'\(uri)' is not an object URI of this store")
        }
        return try objectID(from: String(uri.dropFirst(prefix.count)))
    }

    /// The object ID named by the string form `Entity/p42`, checked against the schema.
    public func objectID(from string: String) throws -> ObjectID {
        guard let id = ObjectID(string: string) else {
            throw EntityStoreError(.invalidObjectID, "'\(string)' is not an object ID (expected Entity/p<number>)")
        }
        guard storages[id.entityName] != nil else {
            throw EntityStoreError(.unknownEntity, "unknown entity '\(id.entityName)'", entity: id.entityName)
        }
        return id
    }

    func storage(for entity: String) throws -> EntityStorage {
        guard let storage = storages[entity] else {
            throw EntityStoreError(.unknownEntity, "the schema has no entity '\(entity)'", entity: entity)
        }
        return storage
    }

    /// The storage of an entity that objects are inserted into: not an abstract one.
    func insertableStorage(for entity: String) throws -> EntityStorage {
        let storage = try storage(for: entity)
        if storage.entity.isAbstract {
            let concrete = hierarchies.concrete(entity)
            throw EntityStoreError(
                .invalidObject,
                "\(entity) is abstract: insert one of its sub-entities"
                    + (concrete.isEmpty ? " (it has none)" : " (\(concrete.joined(separator: ", ")))"),
                entity: entity)
        }
        return storage
    }

    /// The key block of `name`'s sequence (its hierarchy's root's): made on first use, then kept, so that a context
    /// inserting objects of one entity takes keys from it without a lookup by name.
    func keyBlock(for name: String) -> KeyBlock {
        let owner = hierarchies.sequenceOwner(name)
        return keyBlocks.withLock { blocks in
            if let block = blocks[owner] { return block }
            let block = KeyBlock(owner: owner)
            blocks[owner] = block
            return block
        }
    }

    /// Reserves a new primary key from `block`. Keys are reserved from the store's sequence in blocks, so that an
    /// insert rarely writes and keys are unique across contexts and processes. The entities of one hierarchy share
    /// their root's sequence (a key names one object of the hierarchy).
    func newPrimaryKey(from block: KeyBlock) throws -> UInt64 {
        if let key = block.take() { return key }
        let owner = block.owner
        let start = try mappingStorageErrors("reserving primary keys for \(owner)") {
            try write { txn -> UInt64 in
                let next = try nextKey(of: owner, txn)
                try txn.put(StoreNames.MetaKey.sequence(owner), IndexKey.primaryKey(next + Self.keyBlockSize), in: meta)
                return next
            }
        }
        return block.refill(from: start, count: Self.keyBlockSize)
    }
}

/// The primary keys of one sequence (an entity's, or a hierarchy's root's) that this store reserved and has not
/// handed out yet.
final class KeyBlock: Sendable {
    /// The entity whose sequence the keys come from.
    let owner: String
    /// A pthread mutex (``Locked``), which ThreadSanitizer sees, unlike `Synchronization.Mutex` on Linux: an app's
    /// own TSan run of inserts from two threads reported a race here.
    private let range = Locked<(next: UInt64, end: UInt64)>((0, 0))

    init(owner: String) { self.owner = owner }

    /// The next key of the block, or nil when it is used up.
    func take() -> UInt64? {
        range.withLock { range in
            guard range.next < range.end else { return nil }
            defer { range.next += 1 }
            return range.next
        }
    }

    /// Replaces the block with the `count` keys from `start`, and takes the first.
    func refill(from start: UInt64, count: UInt64) -> UInt64 {
        range.withLock { range in
            range = (start + 1, start + count)
            return start
        }
    }
}

extension PersistentStore {
    /// Rebuilds the indexes of a store whose index keys were written in an older format (before strings were keyed
    /// by their NFC form and NaN by one pattern), once, inside the opening transaction.
    static func upgradeIndexKeys(_ txn: WriteTransaction, meta: Database, storages: [String: EntityStorage]) throws {
        let stored = try txn.get(StoreNames.MetaKey.indexFormat, in: meta).map { bytes -> UInt32 in
            guard bytes.count == 4 else { return 0 }
            return UInt32(littleEndian: bytes.loadUnaligned(as: UInt32.self))
        }
        guard stored != IndexKey.currentFormat else { return }
        for storage in storages.values.sorted(by: { $0.entity.name < $1.entity.name }) where !storage.indexes.isEmpty {
            try Migration.rebuildIndexes(
                of: storage.entity, records: storage.records, txn, enforcingUniqueness: false)
        }
        try txn.put(
            StoreNames.MetaKey.indexFormat, withUnsafeBytes(of: IndexKey.currentFormat.littleEndian, Array.init),
            in: meta)
    }

    /// The next unreserved primary key of `name`, from its sequence (its hierarchy's) in the meta database.
    func nextKey(of name: String, _ txn: ReadTransaction) throws -> UInt64 {
        let entity = hierarchies.sequenceOwner(name)
        guard let bytes = try txn.get(StoreNames.MetaKey.sequence(entity), in: meta) else { return 1 }
        guard bytes.count == 8 else {
            throw EntityStoreError(
                .corruptData, "the primary-key sequence of \(entity) holds \(bytes.count) bytes, expected 8",
                entity: entity)
        }
        return UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self))
    }

    static func openMeta(_ txn: WriteTransaction) throws -> Database {
        let names = try txn.databaseNames()
        if !names.contains(StoreNames.meta) && !names.isEmpty {
            throw EntityStoreError(
                .notAStore,
                "the LMDB environment at \(txn.environment.path) is not an EntityStore store (it holds"
                    + " \(names.prefix(3).map { "'\($0)'" }.joined(separator: ", ")))")
        }
        let meta = try txn.openDatabase(StoreNames.meta, create: true)
        try checkFormat(txn, meta: meta)
        return meta
    }

    /// Checks that this EntityStore reads the store's format, and returns it (the current one for a new store).
    @discardableResult
    static func checkFormat(_ txn: ReadTransaction, meta: Database) throws -> UInt32 {
        guard let bytes = try txn.get(StoreNames.MetaKey.format, in: meta) else { return formatVersion }
        guard bytes.count == 4 else { throw EntityStoreError(.corruptData, "the store's format version is corrupt") }
        let format = UInt32(littleEndian: bytes.loadUnaligned(as: UInt32.self))
        if format > formatVersion {
            throw EntityStoreError(
                .storeFormatTooNew,
                "the store has format version \(format); this EntityStore reads up to \(formatVersion)")
        }
        return format
    }

    static func readSchema(_ txn: ReadTransaction, meta: Database) throws -> Schema? {
        guard let bytes = try txn.get(StoreNames.MetaKey.schema, in: meta) else { return nil }
        return try decodeJSON(Schema.self, bytes, what: "schema")
    }

    static func readStoreID(_ txn: ReadTransaction, meta: Database) throws -> UUID {
        guard let bytes = try txn.get(StoreNames.MetaKey.storeID, in: meta), bytes.count == 16 else {
            throw EntityStoreError(.corruptData, "the store's ID is missing or corrupt")
        }
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: bytes) }
        return UUID(uuid: uuid)
    }

    static func writeSchema(_ schema: Schema, history: [Schema], _ txn: WriteTransaction, meta: Database) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try txn.put(StoreNames.MetaKey.schema, Array(try encoder.encode(schema)), in: meta)
        try txn.put(StoreNames.MetaKey.schemaHistory, Array(try encoder.encode(history)), in: meta)
        try txn.put(StoreNames.MetaKey.schemaStamp, Array(schema.fingerprint.utf8), in: meta)
    }

    static func decodeJSON<T: Decodable>(_ type: T.Type, _ bytes: UnsafeRawBufferPointer, what: String) throws -> T {
        do {
            return try JSONDecoder().decode(type, from: Data(bytes))
        } catch {
            throw EntityStoreError(.corruptData, "the stored \(what) does not decode: \(error)")
        }
    }
}
