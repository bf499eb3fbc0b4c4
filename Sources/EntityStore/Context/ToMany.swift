import Foundation

/// A to-many relationship of a ``Model`` subclass, read and written as an array of models (ordered by object ID).
///
/// <!-- snippet
/// final class Book: Model {
///     @Stored var title: String
///     @ToOne var author: Author?
/// }
/// let context = ObjectContext(
///     store: try PersistentStore.open(path: "library.store", schema: Schema(version: 1, models: [Author.self, Book.self])))
/// let author = try context.insert(Author.self)
/// let dune = try context.insert(Book.self)
/// -->
/// ```swift
/// final class Author: Model {
///     @ToMany(inverse: "author", deleteRule: .cascade) var books: [Book]
/// }
/// author.books.append(dune)          // read, change, write back: additions and removals are applied
/// try author.add(dune, to: \.books)  // or one at a time
/// ```
/// Assigning an array adds the objects it has and the relationship did not, and removes the ones it no longer has;
/// inverses are kept consistent. The key is the property's name unless given.
///
/// Reading the property again while the relationship is unchanged answers without reading the relationship or
/// wrapping its objects again, and an assignment that only appends to what the last read returned
/// (`author.books.append(dune)`, `+=`) adds just the appended objects, one that only takes objects out of it
/// (`remove(at:)`, `removeAll(where:)`) removes just those. The array is still compared with the
/// relationship's objects on each assignment (their references, about a nanosecond each), a cost that grows
/// with the relationship: to link many thousands of objects to one, set each one's to-one inverse
/// (`dune.author = author`) or call ``ModelType/add(_:to:)``, whose cost does not grow.
@propertyWrapper
public struct ToMany<Destination: Model>: ModelProperty {
    /// The key given explicitly, if any; the property's name otherwise.
    public let explicitKey: String?
    /// The inverse relationship's key on the destination; `nil` to find the only candidate.
    public let inverse: String?
    /// What deleting the object does to the destination objects.
    public let deleteRule: DeleteRule

    /// A to-many relationship.
    ///
    /// - Parameters:
    ///   - key: The key, when it is not the property's name.
    ///   - inverse: The inverse's key on the destination (found by itself when only one relationship of the
    ///     destination points back).
    ///   - deleteRule: What deleting the object does to the destination objects (`.nullify` by default).
    public init(_ key: String? = nil, inverse: String? = nil, deleteRule: DeleteRule = .nullify) {
        explicitKey = key
        self.inverse = inverse
        self.deleteRule = deleteRule
    }

    /// A to-many relationship keyed by the property's name, its inverse found by the schema.
    public init() {
        self.init(nil)
    }

    @available(*, unavailable, message: "@ToMany is only available on Model subclasses")
    public var wrappedValue: [Destination] {
        get { fatalError("unreachable: @ToMany outside a Model") }
        set { fatalError("unreachable: @ToMany outside a Model") }
    }

    public static subscript<Owner: Model>(
        _enclosingInstance owner: Owner, wrapped wrappedKeyPath: ReferenceWritableKeyPath<Owner, [Destination]>,
        storage storageKeyPath: ReferenceWritableKeyPath<Owner, ToMany<Destination>>
    ) -> [Destination] {
        get {
            let key = ModelKeys.key(of: owner, storageKeyPath)
            if let recorder = owner.managedObject.recorder {
                recorder.readRelationship(key, on: owner.managedObject, giving: nil)
                return []
            }
            ModelObservation.access(owner, storageKeyPath)
            do {
                guard let context = owner.context else { return [] }
                if let list = context.lastToMany(of: owner.managedObject, key, Destination.self) { return list.take() }
                let models = try owner.managedObject.objects(forKey: key).map {
                    try context.model(Destination.self, for: $0)
                }
                context.keepToMany(ModelList(models), of: owner.managedObject, key)
                return models
            } catch {
                owner.report(error, "reading", key: key, write: false)
                return []
            }
        }
        set {
            let key = ModelKeys.key(of: owner, storageKeyPath)
            ModelObservation.mutation(owner, storageKeyPath) {
                do {
                    if try appliesAsEdit(owner.managedObject, key, newValue) { return }
                    let current = Set(try owner.managedObject.objectIDs(forKey: key))
                    let wanted = Set(newValue.map(\.objectID))
                    for target in newValue where !current.contains(target.objectID) {
                        try owner.managedObject.add(target.managedObject, toKey: key)
                    }
                    guard let context = owner.context else { return }
                    for id in current.subtracting(wanted).sorted() {
                        try owner.managedObject.remove(try context.object(with: id), fromKey: key)
                    }
                } catch {
                    owner.report(error, "setting", key: key, write: true)
                }
            }
        }
    }

    /// Applies `newValue` when it is the relationship's objects, in the order a read gives them, with objects
    /// appended (`append`, `+=`) or with some taken out (`remove(at:)`, `removeAll(where:)`): only those objects are
    /// linked or unlinked, where comparing the whole array with the relationship sorted and hashed every ID for
    /// each change. Returns false, having changed nothing, for any other array.
    private static func appliesAsEdit(_ owner: ManagedObject, _ key: String, _ newValue: [Destination]) throws -> Bool {
        guard let context = owner.context, let list = context.lastToMany(of: owner, key, Destination.self) else {
            return false
        }
        if newValue.count > list.members.count { return try appends(newValue, to: list, owner, key, context) }
        if newValue.count < list.members.count { return try removes(newValue, from: list, owner, key, context) }
        return false
    }

    /// ``appliesAsEdit(_:_:_:)`` for an array longer than the relationship.
    private static func appends(
        _ newValue: [Destination], to list: ModelList<Destination>, _ owner: ManagedObject, _ key: String,
        _ context: ObjectContext
    ) throws -> Bool {
        // The same objects in the same places: their references compared as bytes, against the list's own copy
        // (which keeps them alive, so that no other object can have taken one's address). This generic code runs
        // unspecialized, where iterating the two arrays looked up type metadata for every element.
        // (No local copy of `members`: it would share its buffer, and the append to it below would copy it.)
        let count = list.members.count
        let samePrefix =
            count == 0
            || list.members.withUnsafeBytes { old in
                newValue.withUnsafeBytes { new in memcmp(old.baseAddress!, new.baseAddress!, old.count) == 0 }
            }
        guard samePrefix else { return false }
        // Kept as the next read's answer when the added objects come after the others in ID order (new objects
        // do), each once: the order the read gives. Otherwise the next read reads the relationship again.
        var inOrder = true
        var last = list.members.last?.objectID
        let added = newValue[count...]
        for object in added {
            if let previous = last, !(previous < object.objectID) { inOrder = false }
            last = object.objectID
            try owner.add(object.managedObject, toKey: key)
        }
        guard inOrder else {
            context.lastToMany = nil
            return true
        }
        list.members.append(contentsOf: added)
        list.assigned = newValue
        context.keepToMany(list, of: owner, key)
        return true
    }

    /// ``appliesAsEdit(_:_:_:)`` for an array shorter than the relationship: applied when it is the members with
    /// some left out, the others in their order (each reference the next kept member's, compared as a word).
    private static func removes(
        _ newValue: [Destination], from list: ModelList<Destination>, _ owner: ManagedObject, _ key: String,
        _ context: ObjectContext
    ) throws -> Bool {
        var dropped: [Int] = []
        let isSubsequence = list.members.withUnsafeBytes { old in
            newValue.withUnsafeBytes { new in
                let word = MemoryLayout<UInt>.stride
                let oldCount = old.count / word
                let newCount = new.count / word
                var kept = 0
                for place in 0..<oldCount {
                    let member = old.load(fromByteOffset: place * word, as: UInt.self)
                    if kept < newCount && new.load(fromByteOffset: kept * word, as: UInt.self) == member {
                        kept += 1
                    } else {
                        dropped.append(place)
                    }
                }
                return kept == newCount
            }
        }
        guard isSubsequence else { return false }
        // A removal that throws leaves the kept answer behind the owner's relationship version if an earlier one
        // changed it (the next read reads the relationship), and current if none did.
        for place in dropped { try owner.remove(list.members[place].managedObject, fromKey: key) }
        for place in dropped.reversed() { list.members.remove(at: place) }
        list.assigned = newValue
        context.keepToMany(list, of: owner, key)
        return true
    }

    @usableFromInline
    func declaration(key: String) -> Property {
        .relationship(
            Relationship(key, to: Destination.entityName, inverse: inverse ?? "", toMany: true, deleteRule: deleteRule))
    }

    @usableFromInline
    func mismatches(key: String, in entity: Entity, model: String) -> [EntityStoreError.Failure] {
        relationshipMismatches(key: key, in: entity, model: model, destination: Destination.entityName, toMany: true)
    }
}

/// What every ``Model`` is: gives its methods `Self` in parameter positions (a class cannot, a protocol can).
public protocol ModelType: AnyObject {}

extension Model: ModelType {}

extension ModelType where Self: Model {
    /// Adds `object` to a to-many relationship (and sets the inverse).
    ///
    /// - Throws: What ``ManagedObject/add(_:toKey:)`` throws.
    public func add<Destination: Model>(_ object: Destination, to keyPath: KeyPath<Self, [Destination]>) throws {
        try managedObject.add(object.managedObject, toKey: try ModelKeys.single(keyPath))
    }

    /// Removes `object` from a to-many relationship (and clears the inverse).
    ///
    /// - Throws: What ``ManagedObject/remove(_:fromKey:)`` throws.
    public func remove<Destination: Model>(_ object: Destination, from keyPath: KeyPath<Self, [Destination]>) throws {
        try managedObject.remove(object.managedObject, fromKey: try ModelKeys.single(keyPath))
    }
}

extension ModelKeys {
    /// The key of a key path that reads one typed property of its root.
    static func single<M: Model, V>(_ keyPath: KeyPath<M, V>) throws -> String {
        let path = path(keyPath)
        guard path.count == 1 else {
            throw EntityStoreError(
                .unknownKey, "\(keyPath) is not one @Stored, @ToOne or @ToMany property of \(M.entityName)",
                entity: M.entityName)
        }
        return path[0]
    }
}

/// What a typed to-many read returned last (``ObjectContext/lastToMany``): current while the owner's relationships
/// have not changed (``ManagedObject/relatedVersion``) and no object has left the context's registry (a target's
/// delete saved, a reset).
final class LastToMany {
    let owner: ManagedObject
    let key: String
    let version: UInt32
    let departures: UInt64
    /// The models, as a `ModelList` of the property's destination class.
    let models: AnyObject

    init(owner: ManagedObject, key: String, version: UInt32, departures: UInt64, models: AnyObject) {
        self.owner = owner
        self.key = key
        self.version = version
        self.departures = departures
        self.models = models
    }
}

/// The models of a to-many, of one class, behind a reference whose class cast is one comparison (casting an array
/// of models, or an `Any` holding one, can check every element).
///
/// `members` is the list's own array, never handed out: what an assignment is compared with. `assigned` is the
/// array the last assignment gave, handed to the next read and let go of then, so that the app's copy is the only
/// reference to it and an `append` to it grows it in place (a read answered with an array the list also held was
/// copied by every append).
final class ModelList<M: Model> {
    var members: [M]
    var assigned: [M]?

    init(_ models: [M]) { members = models }

    /// The models, in the order a read gives them.
    func take() -> [M] {
        guard let assigned else { return members }
        self.assigned = nil
        return assigned
    }
}

extension ObjectContext {
    /// The models of `owner`'s to-many `key` as the last typed read or append left them, if they are still what a
    /// read would return.
    func lastToMany<M: Model>(of owner: ManagedObject, _ key: String, _ type: M.Type) -> ModelList<M>? {
        guard let last = lastToMany, last.owner === owner, last.version == owner.relatedVersion,
            last.departures == registered.departures, last.key == key
        else { return nil }
        return last.models as? ModelList<M>
    }

    /// Keeps `list` as what a read of `owner`'s to-many `key` returns now.
    func keepToMany<M: Model>(_ list: ModelList<M>, of owner: ManagedObject, _ key: String) {
        lastToMany = LastToMany(
            owner: owner, key: key, version: owner.relatedVersion, departures: registered.departures, models: list)
    }
}
