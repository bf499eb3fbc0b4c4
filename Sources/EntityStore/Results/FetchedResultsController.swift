import LMDB
import SectionedDiff

/// Live, sectioned results of a fetch request, driving a list UI: it reports every change to its delegate by the
/// change contract (<doc:ChangeContract>), so that a batch always applies cleanly.
///
/// <!-- snippet
/// uses: library
/// final class BookList: FetchedResultsControllerDelegate {
///     let context = ObjectContext(store: try! openLibrary())
///     func show() throws {
/// <snippet>
///     }
///     func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {}
/// }
/// -->
/// ```swift
/// let controller = FetchedResultsController(
///     fetchRequest: FetchRequest(entity: "Book", sortKeys: [SortKey("title")]),
///     context: context, sectionNameKeyPath: "author.name")
/// controller.delegate = self
/// try controller.performFetch()
/// controller.sections[0].name; try controller.object(at: ItemPath(section: 0, item: 0))
/// ```
///
/// Sections are ordered by the section key (in the direction and comparison of a sort key on it, if there is one);
/// each holds one value, so values that such a comparison ties ("a" and "A" compared case-insensitively) are sections
/// of their own, side by side in the order of their values. Objects in a section are ordered by the sort keys, ties
/// broken by primary key (as a fetch breaks them). The controller reacts to its context's processed changes (unsaved
/// ones included), saves, merges from other contexts and processes, and rollbacks. It holds object IDs and sort keys,
/// not objects: objects fault in on access.
public final class FetchedResultsController {
    /// The request; change it and call ``performFetch()`` again to deliver the difference as one batch.
    public var fetchRequest: FetchRequest {
        didSet { resultsGeneration &+= 1 }
    }
    /// The context the controller observes.
    public let context: ObjectContext
    /// The key path of the section key (through to-one relationships); `nil` for one section.
    public let sectionNameKeyPath: String?
    /// Who is told about changes.
    public weak var delegate: (any FetchedResultsControllerDelegate)?
    /// The ``batches(includingUserDriven:)`` streams.
    var streams: [BatchStream] = []
    /// Whether the batch being delivered is user-driven (only when the delegate asks for such batches).
    public internal(set) var isUserDrivenBatch = false
    /// Why the controller stopped following changes: a batch could not be computed (its rows could not be read,
    /// say), or the context's merge met saves it cannot merge (history pruned before it was read). The delegate was
    /// told (``FetchedResultsControllerDelegate/controller(_:didFailWith:)``); the results stay as they were before
    /// that batch until ``performFetch()`` succeeds, which clears it.
    public internal(set) var failure: EntityStoreError?
    /// Whether the controller follows the context's changes: fetched, and not stopped by a failure since.
    var isFollowingChanges: Bool { hasFetched && failure == nil }

    /// A row on its way in: an object and its keys (the section value first when sectioned, then the sort keys).
    struct Row {
        var id: ObjectID
        var keys: [Value]
    }

    struct Plan {
        var entity: Entity
        var predicate: CompiledPredicate?
        var keyPaths: [ResolvedKeyPath]
        var sortKeys: [SortKey]
        /// How many of the first sort keys order the sections: the section key, and the same key compared by
        /// value when the request compares it otherwise (case-insensitively, say).
        var sectionKeyCount: Int {
            sortKeys.count > 1 && sortKeys[0].comparison != .binary && sortKeys[1].keyPath == sortKeys[0].keyPath
                ? 2 : 1
        }
        /// What the predicate, sort and section keys read through relationships.
        var dependencies: [Dependency]
        /// For an entity with sub-entities (fetched with them): the entities whose objects are rows.
        var family: Set<String>?
        /// The keys of a row's own object that the predicate, sort and section keys read (a relationship for a key
        /// path through it); `nil` when a derived attribute is among them (its value changes at a save without
        /// its own key being named). A change naming none of them cannot move a row, or put it in or out. A few
        /// names, tested by comparing (a set hashed every changed key with SipHash).
        var readKeys: [String]?

        /// Whether objects of `entityName` can be rows.
        func holds(_ entityName: String) -> Bool {
            entityName == entity.name || family?.contains(entityName) == true
        }
    }

    /// A key path through relationships that the request reads: the relationships walked, and the key read at the
    /// end (`nil` when the path ends at a relationship or a count, read one level up). A change to an object at
    /// depth d matters only if it changed the key read there: the next relationship, or the final key.
    struct Dependency {
        var steps: [Relationship]
        var readKey: String?

        /// The key whose change at `depth` (the object reached by `steps[depth - 1]`) changes what is read.
        func key(atDepth depth: Int) -> String? { depth < steps.count ? steps[depth].name : readKey }
    }

    var plan: Plan?
    /// The entity of each row that is not of the plan's entity (sub-entities' objects); rows are kept by primary
    /// key, which is unique in a hierarchy.
    var rowEntities: [UInt64: String] = [:] {
        didSet { resultsGeneration &+= 1 }
    }
    /// Every matching row in order (before the fetch window): primary keys and packed keys.
    var rows = RowStore(sortKeys: [], types: []) {
        didSet { resultsGeneration &+= 1 }
    }
    /// What the delegate sees: the window of rows, grouped into sections (built when first needed after a change).
    var displayed: SectionedList<Value, ObjectID> {
        if let cached = displayedCache { return cached }
        display()
        return displayedCache ?? SectionedList()
    }
    var displayedCache: SectionedList<Value, ObjectID>?
    var displayedPathsCache: [ObjectID: ItemPath]?
    var displayedPaths: [ObjectID: ItemPath] {
        if let cached = displayedPathsCache { return cached }
        display()
        return displayedPathsCache ?? [:]
    }
    /// The sections of all rows (unwindowed): each key and the index of its first row, kept in step with `rows`.
    var sectionStarts: [(key: Value, start: Int)] = [] {
        didSet { resultsGeneration &+= 1 }
    }
    /// Counts the changes of what the results are made of (rows, sections, the request): a stream builds a batch's
    /// snapshot from its last one only when nothing changed between that one and the batch
    /// (``ResultsBatch/snapshot``). Simple `didSet`s: the values are still changed in place.
    var resultsGeneration: UInt64 = 0
    /// `resultsGeneration` when the batch being delivered started changing the results.
    var batchStartGeneration: UInt64 = 0
    /// From this many changed rows on (and when they are at least 1/512 of the rows), a batch rebuilds `rows` in one
    /// pass instead of moving rows one by one; at 0 every batch does.
    var mergeThreshold = 16
    var observation: ObservationToken?
    var hasFetched = false
    /// The rows touched by the records of a batch still open (a save), delivered as one batch when it ends.
    var pendingBatch = AffectedRows()

    /// Creates a controller; nothing is fetched until ``performFetch()``.
    public init(fetchRequest: FetchRequest, context: ObjectContext, sectionNameKeyPath: String? = nil) {
        self.fetchRequest = fetchRequest
        self.context = context
        self.sectionNameKeyPath = sectionNameKeyPath
    }

    // MARK: - Results

    /// The sections, in order. Each section's object IDs are read when asked for, so this costs O(sections).
    public var sections: [SectionInfo] {
        guard isUnwindowed, let plan, displayedCache == nil else { return displayed.sections.map(sectionInfo) }
        let order = rows.order
        return sectionStarts.indices.map { index in
            let name = Self.name(of: sectionStarts[index].key)
            return SectionInfo(
                name: name, indexTitle: indexTitle(for: name), value: sectionStarts[index].key, order: order,
                range: sectionStarts[index].start..<sectionEnd(index), entityName: plan.entity.name,
                others: rowEntities)
        }
    }

    /// The number of sections.
    public var numberOfSections: Int {
        isUnwindowed && plan != nil && displayedCache == nil ? sectionStarts.count : displayed.sections.count
    }

    /// The number of objects in section `section` (0 when there is no such section).
    public func numberOfObjects(inSection section: Int) -> Int {
        guard isUnwindowed, plan != nil, displayedCache == nil else {
            return displayed.sections.indices.contains(section) ? displayed.sections[section].items.count : 0
        }
        return sectionStarts.indices.contains(section) ? sectionEnd(section) - sectionStarts[section].start : 0
    }

    /// The objects of section `section`, in order (none when there is no such section).
    func sectionItems(_ section: Int) -> [ObjectID] {
        guard isUnwindowed, let plan, displayedCache == nil else {
            return displayed.sections.indices.contains(section) ? displayed.sections[section].items : []
        }
        guard sectionStarts.indices.contains(section) else { return [] }
        return rows.order.keys(in: sectionStarts[section].start..<sectionEnd(section)).map { id($0, plan) }
    }

    /// The section key's value of section `section`.
    func sectionValue(_ section: Int) -> Value? {
        guard isUnwindowed, plan != nil, displayedCache == nil else {
            return displayed.sections.indices.contains(section) ? displayed.sections[section].key : nil
        }
        return sectionStarts.indices.contains(section) ? sectionStarts[section].key : nil
    }

    /// The end of section `section` in `rows` (unwindowed).
    func sectionEnd(_ section: Int) -> Int {
        section + 1 < sectionStarts.count ? sectionStarts[section + 1].start : rows.count
    }

    /// The ID of the row with primary key `pk`.
    func id(_ pk: UInt64, _ plan: Plan) -> ObjectID {
        ObjectID(
            entityName: rowEntities.isEmpty ? plan.entity.name : rowEntities[pk] ?? plan.entity.name, primaryKey: pk)
    }

    /// Notes the entity of rows that are not of the plan's entity.
    func noteEntities(of ids: some Sequence<ObjectID>, _ plan: Plan) {
        guard plan.family != nil else { return }
        for id in ids where id.entityName != plan.entity.name { rowEntities[id.primaryKey] = id.entityName }
    }

    func sectionInfo(_ section: SectionedList<Value, ObjectID>.Section) -> SectionInfo {
        let name = Self.name(of: section.key)
        return SectionInfo(name: name, indexTitle: indexTitle(for: name), value: section.key, objectIDs: section.items)
    }

    /// The IDs of the fetched objects, in order.
    public var fetchedObjectIDs: [ObjectID] {
        guard isUnwindowed, let plan, displayedCache == nil else { return displayed.sections.flatMap(\.items) }
        return rows.order.keys(in: 0..<rows.count).map { id($0, plan) }
    }

    /// The fetched objects, in order (faults until their values are read).
    public var fetchedObjects: [ManagedObject] { fetchedObjectIDs.map { context.registeredObject(for: $0) } }

    /// The object at `path`.
    /// - Throws: ``EntityStoreError/Code/invalidFetchRequest`` when the path is out of range.
    public func object(at path: ItemPath) throws -> ManagedObject {
        guard let id = objectID(at: path) else {
            throw EntityStoreError(.invalidFetchRequest, "no object at \(path)", entity: fetchRequest.entity)
        }
        return try context.object(with: id)
    }

    /// The ID of the object at `path`, or `nil` when the path is out of range.
    public func objectID(at path: ItemPath) -> ObjectID? {
        if isUnwindowed, let plan, displayedCache == nil {
            // O(log n) from the section boundaries, without building the display.
            guard sectionStarts.indices.contains(path.section), path.item >= 0 else { return nil }
            let index = sectionStarts[path.section].start + path.item
            return index < sectionEnd(path.section) ? id(rows.pk(at: index), plan) : nil
        }
        guard displayed.sections.indices.contains(path.section),
            displayed.sections[path.section].items.indices.contains(path.item)
        else { return nil }
        return displayed.sections[path.section].items[path.item]
    }

    /// Where an object is, or `nil` when it is not in the results.
    public func indexPath(for id: ObjectID) -> ItemPath? {
        if isUnwindowed, let plan, displayedPathsCache == nil {
            // O(log n) by binary search on the row's keys, without building the display.
            return rowIndex(of: id, plan).map { path(ofRowAt: $0, in: sectionStarts) }
        }
        return displayedPaths[id]
    }

    /// Whether the controller shows all its rows (no fetch window): rows and display positions coincide.
    var isUnwindowed: Bool { fetchRequest.fetchLimit == 0 && fetchRequest.fetchOffset == 0 }

    /// Where an object is, or `nil` when it is not in the results.
    public func indexPath(for object: ManagedObject) -> ItemPath? { indexPath(for: object.objectID) }

    /// The sections' index titles, each once, in order.
    public var sectionIndexTitles: [String] {
        var seen = Set<String>()
        return sections.compactMap(\.indexTitle).filter { seen.insert($0).inserted }
    }

    /// The index of the first section with the index title `title` (`index` is its position in
    /// ``sectionIndexTitles``, used when no section has the title).
    public func section(forSectionIndexTitle title: String, at index: Int) -> Int {
        if let section = sections.firstIndex(where: { $0.indexTitle == title }) { return section }
        return min(max(0, index), max(0, numberOfSections - 1))
    }

    static func name(of value: Value) -> String {
        switch value {
        case .null: ""
        case .string(let text): text
        // Values a section treats as one are named alike.
        case .double, .date: ValueSemantics.canonical(value).description
        default: value.description
        }
    }

    func indexTitle(for name: String) -> String? {
        if let title = delegate?.controller(self, sectionIndexTitleForSectionName: name) { return title }
        guard sectionNameKeyPath != nil, let first = name.first else { return nil }
        return String(first).uppercased()
    }

    // MARK: - Fetching

    /// Fetches the results and starts observing the context.
    ///
    /// Called again (say after changing ``fetchRequest``'s sort or predicate), it delivers the difference between
    /// the old and the new results as one batch, so that a control switching the sort animates.
    ///
    /// - Throws: What a fetch throws: ``EntityStoreError/Code/invalidPredicate``,
    ///   ``EntityStoreError/Code/invalidFetchRequest``, ...
    public func performFetch() throws {
        batchStartGeneration = resultsGeneration
        let plan = try makePlan()
        var unwindowed = fetchRequest
        unwindowed.sortKeys = plan.sortKeys
        unwindowed.fetchLimit = 0
        unwindowed.fetchOffset = 0
        let candidates = try context.run(unwindowed, shape: .objectIDs)
        let wasFetched = hasFetched
        // What the delegate saw, built before the rows change (the display is built lazily).
        let old = wasFetched && !receivers.isEmpty ? displayed : SectionedList()
        self.plan = plan
        rows = RowStore(sortKeys: plan.sortKeys, types: plan.keyPaths.map(\.attributeType))
        rows.replaceAll(with: candidates.map { ($0.id.primaryKey, $0.sortValues) })
        rowEntities = [:]
        noteEntities(of: candidates.lazy.map(\.id), plan)
        displayedCache = nil
        displayedPathsCache = nil
        rebuildSectionStarts()
        hasFetched = true
        if observation == nil {
            observation = context.addObserver(
                { [weak self] record in self?.handle(record) }, endOfBatch: { [weak self] in self?.endBatch() },
                onMergeFailure: MergeFailureReceiver(
                    isFollowing: { [weak self] in self?.isFollowingChanges ?? false },
                    fail: { [weak self] error in self?.fail(error) }))
        }
        failure = nil
        pendingBatch = AffectedRows()
        if wasFetched { deliver(try ChangeSet(from: old, to: displayed), userDriven: false) }
    }

    func makePlan() throws -> Plan {
        let storage = try context.store.storage(for: fetchRequest.entity)
        let entity = storage.entity
        let schema = context.store.schema
        let predicate = try fetchRequest.predicate.map { try CompiledPredicate($0, entity: entity, schema: schema) }
        var sortKeys = fetchRequest.sortKeys
        if let sectionNameKeyPath {
            // Sections follow the section key, in the direction of a sort key on it if there is one.
            let onSection = sortKeys.first { $0.keyPath == sectionNameKeyPath } ?? SortKey(sectionNameKeyPath)
            sortKeys.insert(onSection, at: 0)
            // A section holds one value. Values its comparison ties ("a" and "A" compared case-insensitively) are
            // sections of their own, side by side in the order of their values.
            if onSection.comparison != .binary {
                sortKeys.insert(SortKey(sectionNameKeyPath, ascending: onSection.ascending), at: 1)
            }
        }
        var keyPaths: [ResolvedKeyPath] = []
        for key in sortKeys {
            let what = key.keyPath == sectionNameKeyPath ? "the section key path" : "the sort key"
            let path: ResolvedKeyPath
            do {
                path = try ResolvedKeyPath.resolve(
                    key.keyPath.keyPathComponents, from: entity, in: schema)
            } catch let error as EntityStoreError {
                throw EntityStoreError(
                    .invalidFetchRequest, "\(what) '\(key.keyPath)': \(error.message)", entity: entity.name,
                    key: key.keyPath)
            }
            guard case .attribute = path.terminal, !path.isToMany else {
                throw EntityStoreError(
                    .invalidFetchRequest,
                    "'\(key.keyPath)' cannot sort or section: it must be an attribute reached through to-one relationships",
                    entity: entity.name, key: key.keyPath)
            }
            keyPaths.append(path)
        }
        var dependencies: [Dependency] = []
        for path in keyPaths where !path.steps.isEmpty {
            if case .attribute(_, let attribute) = path.terminal {
                dependencies.append(Dependency(steps: path.steps, readKey: attribute.name))
            }
        }
        for path in fetchRequest.predicate?.keyPaths ?? [] {
            let resolved = try ResolvedKeyPath.resolve(path, from: entity, in: schema)
            switch resolved.terminal {
            case .attribute(_, let attribute):
                if !resolved.steps.isEmpty {
                    dependencies.append(Dependency(steps: resolved.steps, readKey: attribute.name))
                }
            case .relationship(let relationship):
                dependencies.append(Dependency(steps: resolved.steps + [relationship], readKey: nil))
            case .count:
                if resolved.steps.count > 1 { dependencies.append(Dependency(steps: resolved.steps, readKey: nil)) }
            case .collection(_, _, let attribute):
                // The members' attribute, and (past the first step) who the members are.
                dependencies.append(Dependency(steps: resolved.steps, readKey: attribute.name))
                if resolved.steps.count > 1 { dependencies.append(Dependency(steps: resolved.steps, readKey: nil)) }
            case .object:
                break  // the object's identity: no change of any object moves it
            }
        }
        let family = context.entities(of: fetchRequest)
        var readKeys = Set(sortKeys.compactMap { $0.keyPath.split(separator: ".").first.map(String.init) })
        for path in fetchRequest.predicate?.keyPaths ?? [] { if let first = path.first { readKeys.insert(first) } }
        let readsDerived = readKeys.contains { entity.attribute($0)?.derivation != nil }
        return Plan(
            entity: entity, predicate: predicate, keyPaths: keyPaths, sortKeys: sortKeys, dependencies: dependencies,
            family: family == [entity.name] ? nil : Set(family), readKeys: readsDerived ? nil : readKeys.sorted())
    }

    /// Groups the window of rows into the displayed sections.
    func display() {
        let start = min(fetchRequest.fetchOffset, rows.count)
        let end = min(rows.count, fetchRequest.windowEnd)
        var sections: [SectionedList<Value, ObjectID>.Section] = []
        var paths: [ObjectID: ItemPath] = [:]
        let name = plan?.entity.name ?? fetchRequest.entity
        let others = rowEntities
        let window = rows.order.keys(in: start..<end)
        if sectionNameKeyPath == nil {
            sections = [
                .init(key: .null, items: window.map { ObjectID(entityName: others[$0] ?? name, primaryKey: $0) })
            ]
            for (i, id) in sections[0].items.enumerated() { paths[id] = ItemPath(section: 0, item: i) }
        } else {
            for pk in window {
                let key = rows.key(0, of: pk)
                let id = ObjectID(entityName: others[pk] ?? name, primaryKey: pk)
                if sections.last?.key != key { sections.append(.init(key: key, items: [])) }
                paths[id] = ItemPath(section: sections.count - 1, item: sections[sections.count - 1].items.count)
                sections[sections.count - 1].items.append(id)
            }
        }
        displayedCache = SectionedList(sections)
        displayedPathsCache = paths
    }
}
