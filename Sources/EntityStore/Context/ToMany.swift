import Foundation

/// A to-many relationship of a ``Model`` subclass, read and written as an array of models (ordered by object ID).
///
/// ```swift
/// @ToMany(inverse: "author", deleteRule: .cascade) var books: [Book]
/// author.books.append(dune)          // read, change, write back: additions and removals are applied
/// author.add(dune, to: \.books)      // or one at a time
/// ```
/// Assigning an array adds the objects it has and the relationship did not, and removes the ones it no longer has;
/// inverses are kept consistent. The key is the property's name unless given.
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
                recorder.keys.append(key)
                return []
            }
            ModelObservation.access(owner, storageKeyPath)
            do {
                guard let context = owner.context else { return [] }
                return try owner.managedObject.objects(forKey: key).map { try context.model(Destination.self, for: $0) }
            } catch {
                owner.report(error, "reading", key: key, write: false)
                return []
            }
        }
        set {
            let key = ModelKeys.key(of: owner, storageKeyPath)
            ModelObservation.mutation(owner, storageKeyPath) {
                do {
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
