import Foundation

/// What happened to one object in a change event: its kind, the keys that changed, and their values before and
/// after.
public struct ObjectChange: Sendable, Hashable, CustomStringConvertible {
    /// The kind of change.
    public enum Kind: String, Sendable, Hashable, Codable {
        /// The object was inserted (or appeared, as when a delete is undone).
        case insert
        /// Values or relationships of the object changed.
        case update
        /// The object was deleted.
        case delete
    }

    /// The object.
    public var objectID: ObjectID
    /// The kind of change.
    public var kind: Kind
    /// The attributes and relationships that changed (for an insert or a delete: every attribute).
    public var changedKeys: [String]
    /// The attributes' values before the change (for an update: the changed ones; for a delete: all of them).
    ///
    /// A store's batch update (``PersistentStore/batchUpdate(_:where:set:author:)``) names the changed keys of each
    /// object without their values, here and in ``newValues``, like Core Data's batch update.
    public var oldValues: [String: Value] {
        get { oldStorage.dictionary }
        set { oldStorage = .dictionary(newValue) }
    }
    /// The attributes' values after the change (for an update: the changed ones; for an insert: all of them).
    ///
    /// A record read back from the history (``PersistentStore/history(since:limit:)``) holds no values for an
    /// insert: they are in the object's record (the history keeps inserts small, a bulk insert's above all). Read
    /// the object for them. The last update the history records of an attribute, when it holds its new value,
    /// holds the value stored now.
    public var newValues: [String: Value] {
        get { newStorage.dictionary }
        set { newStorage = .dictionary(newValue) }
    }
    /// The relationships' targets before the change (each list in ID order), for the changed relationships that
    /// were loaded.
    ///
    /// A record read back from the history (``PersistentStore/history(since:limit:)``, and so a change merged
    /// from another process) holds, for an update, the targets the change took out of each relationship: the
    /// targets it kept and the ones it added are the relationship's targets in the store. The history keeps an
    /// update small whatever the size of the relationship it changes: adding one book to a tag of 20,000 wrote the
    /// 20,000 earlier targets into the history at every save (entries written before still hold them all). A
    /// delete holds all of the targets the object had, here and in the history.
    public var oldRelationships: [String: [ObjectID]] {
        get { links.arrays }
        set { links = .arrays(newValue) }
    }
    /// Whether the change was made inside a user-driven scope (``ObjectContext/performUserDrivenChanges(_:)``).
    public var isUserDriven: Bool

    /// Values by name: a dictionary, the attribute names with the values as they are (an insert's or a delete's
    /// every attribute, or an update's changed ones), or one value and its name (an update of one attribute, the
    /// usual one), so that building a change makes no dictionary nobody reads. The name is the entity's shared list
    /// of that one name (`EntityBox.singleAttributeNames`): 8 bytes where a string took 16, and a change 120 bytes
    /// instead of 136.
    enum ValueStorage: Sendable {
        case dictionary([String: Value])
        case positional(names: [String], values: [Value])
        case single(names: [String], value: Value)

        var dictionary: [String: Value] {
            switch self {
            case .dictionary(let values): values
            case .positional(let names, let values):
                Dictionary(zip(names, values), uniquingKeysWith: { first, _ in first })
            case .single(let names, let value): [names[0]: value]
            }
        }

        var isEmpty: Bool {
            switch self {
            case .dictionary(let values): values.isEmpty
            case .positional(let names, let values): names.isEmpty || values.isEmpty
            case .single: false
            }
        }

        /// The values of `names` (the names this storage holds, in their order), as an array to append to.
        func values(of names: [String]) -> [Value] {
            switch self {
            case .dictionary(let values): names.map { values[$0] ?? .null }
            case .positional(_, let values): values
            case .single(_, let value): [value]
            }
        }
    }

    var oldStorage: ValueStorage
    var newStorage: ValueStorage
    /// The old targets of the changed relationships.
    var links: LinkStorage

    /// The old targets of the changed relationships, as given (or read from the history), or the sets the context
    /// held, put in order only when ``oldRelationships`` is read: a change of a large to-many relationship sorted
    /// all of its targets at every save, twice, for a list that nearly nobody reads.
    enum LinkStorage: Sendable {
        case arrays([String: [ObjectID]])
        /// Each changed relationship's targets before the change and, for an update, after it.
        case sets([(name: String, old: TargetSet, new: TargetSet?)])

        static let none = LinkStorage.arrays([:])

        var isEmpty: Bool {
            switch self {
            case .arrays(let lists): lists.isEmpty
            case .sets(let sets): sets.isEmpty
            }
        }

        var arrays: [String: [ObjectID]] {
            switch self {
            case .arrays(let lists): lists
            case .sets(let sets):
                Dictionary(sets.map { ($0.name, $0.old.ordered) }, uniquingKeysWith: { first, _ in first })
            }
        }

        /// The targets `name` held before the change (for a record read back from the history: those the change
        /// took out).
        func old(_ name: String) -> TargetSet? {
            switch self {
            case .arrays(let lists): lists[name].map(TargetSet.init)
            case .sets(let sets): sets.first { $0.name == name }?.old
            }
        }

        /// What the history keeps, by relationship name in order: for an update made here, the targets the change
        /// took out (the rest are in the store); for a delete, every old target.
        var forHistory: [(name: String, targets: [ObjectID])] {
            switch self {
            case .arrays(let lists):
                return lists.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
            case .sets(let sets):
                return sets.sorted { $0.name < $1.name }.map { entry in
                    guard let new = entry.new else { return (entry.name, entry.old.ordered) }
                    return (entry.name, new.changes(since: entry.old).removed)
                }
            }
        }
    }

    /// The attributes whose values differ between `previous` and `current` (in the entity's record order), with
    /// both values: one changed attribute (most updates) allocates nothing, its name alone shared by the entity and
    /// its values held inline; more are arrays made at their size (grown from empty, the standard library's slow
    /// growth path was most of what building an update cost).
    static func differences(
        _ entity: EntityBox, from previous: [Value], to current: [Value]
    ) -> (keys: [String], old: ValueStorage, new: ValueStorage) {
        let names = entity.attributeNames
        var first = -1
        var count = 0
        previous.withUnsafeBufferPointer { previous in
            current.withUnsafeBufferPointer { current in
                for i in names.indices where previous[i] != current[i] {
                    if count == 0 { first = i }
                    count += 1
                }
            }
        }
        if count == 0 { return ([], .dictionary([:]), .dictionary([:])) }
        if count == 1 {
            let name = entity.singleAttributeNames[first]
            return (name, .single(names: name, value: previous[first]), .single(names: name, value: current[first]))
        }
        var keys: [String] = []
        var old: [Value] = []
        var new: [Value] = []
        keys.reserveCapacity(count)
        old.reserveCapacity(count)
        new.reserveCapacity(count)
        for i in first..<names.count where previous[i] != current[i] {
            keys.append(names[i])
            old.append(previous[i])
            new.append(current[i])
        }
        return (keys, .positional(names: keys, values: old), .positional(names: keys, values: new))
    }

    /// Creates a change.
    public init(
        objectID: ObjectID, kind: Kind, changedKeys: [String], oldValues: [String: Value] = [:],
        newValues: [String: Value] = [:], oldRelationships: [String: [ObjectID]] = [:], isUserDriven: Bool = false
    ) {
        self.init(
            objectID: objectID, kind: kind, changedKeys: changedKeys, old: .dictionary(oldValues),
            new: .dictionary(newValues), links: .arrays(oldRelationships), isUserDriven: isUserDriven)
    }

    init(
        objectID: ObjectID, kind: Kind, changedKeys: [String], old: ValueStorage, new: ValueStorage,
        links: LinkStorage = .none, isUserDriven: Bool = false
    ) {
        self.objectID = objectID
        self.kind = kind
        self.changedKeys = changedKeys
        oldStorage = old
        newStorage = new
        self.links = links
        self.isUserDriven = isUserDriven
    }

    public static func == (lhs: ObjectChange, rhs: ObjectChange) -> Bool {
        lhs.objectID == rhs.objectID && lhs.kind == rhs.kind && lhs.changedKeys == rhs.changedKeys
            && lhs.oldValues == rhs.oldValues && lhs.newValues == rhs.newValues
            && lhs.oldRelationships == rhs.oldRelationships && lhs.isUserDriven == rhs.isUserDriven
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(objectID)
        hasher.combine(kind)
        hasher.combine(changedKeys)
        hasher.combine(isUserDriven)
    }

    public var description: String {
        var text = "\(kind.rawValue) \(objectID)"
        if kind == .update {
            text +=
                " "
                + changedKeys.map { key in
                    guard let old = oldValues[key], let new = newValues[key] else { return key }
                    return "\(key): \(old) -> \(new)"
                }.joined(separator: ", ")
        }
        if isUserDriven { text += " (user-driven)" }
        return text
    }
}

/// A batch of changes: one objects-did-change event, one save, or one merged commit. Sendable: it crosses threads
/// and processes, unlike managed objects.
public struct ChangeRecord: Sendable, Hashable, CustomStringConvertible {
    /// Where the record comes from.
    public enum Kind: String, Sendable, Hashable {
        /// Changes processed in a context, saved or not (`processPendingChanges`).
        case objectsDidChange
        /// A context's committed save.
        case didSave
        /// Another context's or process's save, merged into this context.
        case merged
    }

    /// Where the record comes from.
    public var kind: Kind
    /// The changes, in object ID order.
    public var changes: [ObjectChange]
    /// The history transaction number of a save (`nil` for unsaved changes).
    public var transaction: UInt64?
    /// The name of the context that made the changes.
    public var author: String?
    /// When the changes were made.
    public var date: Date
    /// The process that saved them.
    public var processID: Int32
    /// The context instance that made the changes (to recognise one's own saves).
    public var contextID: UUID?

    /// Creates a record.
    public init(
        kind: Kind, changes: [ObjectChange], transaction: UInt64? = nil, author: String? = nil, date: Date = Date(),
        processID: Int32 = getpid(), contextID: UUID? = nil
    ) {
        self.contextID = contextID
        self.kind = kind
        self.changes = changes
        self.transaction = transaction
        self.author = author
        self.date = date
        self.processID = processID
    }

    /// The inserted objects.
    public var insertedIDs: [ObjectID] { changes.filter { $0.kind == .insert }.map(\.objectID) }
    /// The updated objects.
    public var updatedIDs: [ObjectID] { changes.filter { $0.kind == .update }.map(\.objectID) }
    /// The deleted objects.
    public var deletedIDs: [ObjectID] { changes.filter { $0.kind == .delete }.map(\.objectID) }
    /// Whether every change was user-driven.
    public var isUserDriven: Bool { !changes.isEmpty && changes.allSatisfy(\.isUserDriven) }
    /// Whether the record holds no change.
    public var isEmpty: Bool { changes.isEmpty }

    public var description: String {
        "\(kind.rawValue)" + (transaction.map { " tx \($0)" } ?? "") + (author.map { " by \($0)" } ?? "") + ": "
            + changes.map(\.description).joined(separator: "; ")
    }
}
