/// A `Sendable` copy of one model object's values: what a fetch hands to another actor.
///
/// Models, managed objects and contexts are not `Sendable`: they are live views of one context's state, which
/// changes as it merges and saves, so they stay where their context lives. A snapshot is the object as it was
/// when taken (with the context's unsaved changes), read with the model's own key paths:
///
/// <!-- snippet
/// uses: library
/// let store = try openLibrary()
/// let context = ObjectContext(store: store)
/// -->
/// ```swift
/// let books = try await store.performBackgroundTask { context in
///     try context.snapshots(Book.self, where: \Book.pages > 300, sortedBy: [SortKey(\Book.title)])
/// }
/// for book in books { print(book.title, book.pages, book.id(\.author) as Any) }   // on the main actor
/// ```
///
/// It holds every attribute and the IDs of every relationship's objects. To change the object, look it up by
/// ``objectID`` in a context (``ObjectContext/existingObject(_:with:)``).
@dynamicMemberLookup
public struct ModelSnapshot<M: Model>: Sendable, Hashable, Identifiable {
    /// The object's ID.
    public let objectID: ObjectID
    /// The object's attribute values, by key.
    public let values: [String: Value]
    /// The IDs of each relationship's objects, by key, in ID order.
    public let relationships: [String: [ObjectID]]

    /// The object's ID, for `Identifiable`.
    public var id: ObjectID { objectID }

    /// A snapshot of the given values.
    public init(objectID: ObjectID, values: [String: Value], relationships: [String: [ObjectID]]) {
        self.objectID = objectID
        self.values = values
        self.relationships = relationships
    }

    /// A typed attribute, read with the model's key path (`snapshot.title`, `snapshot[dynamicMember: \.title]`).
    ///
    /// The key path must name one of the model's own `@Stored` properties: a snapshot holds no related objects'
    /// values (read the related object's ID with ``id(_:)`` and take its snapshot). Anything else is a programming
    /// error and stops the program with a message naming the key path.
    public subscript<T: ValueConvertible>(dynamicMember keyPath: KeyPath<M, T>) -> T {
        let key = Self.key(keyPath, "a @Stored property")
        guard let value = values[key] else {
            preconditionFailure("ModelSnapshot<\(M.self)> has no attribute \(key): \(keyPath) is not @Stored")
        }
        guard let typed = T(value: value) else {
            preconditionFailure("ModelSnapshot<\(M.self)>.\(key) holds \(value), not \(T.self)")
        }
        return typed
    }

    /// The ID of a to-one relationship's object (`nil` when it has none).
    public func id<D: Model>(_ keyPath: KeyPath<M, D?>) -> ObjectID? {
        ids(key: Self.key(keyPath, "a @ToOne property")).first
    }

    /// The IDs of a to-many relationship's objects, in ID order.
    public func ids<D: Model>(_ keyPath: KeyPath<M, [D]>) -> [ObjectID] {
        ids(key: Self.key(keyPath, "a @ToMany property"))
    }

    private func ids(key: String) -> [ObjectID] {
        guard let ids = relationships[key] else {
            preconditionFailure("ModelSnapshot<\(M.self)> has no relationship \(key)")
        }
        return ids
    }

    private static func key<V>(_ keyPath: KeyPath<M, V>, _ what: String) -> String {
        let path = ModelKeys.path(keyPath)
        guard path.count == 1 else {
            preconditionFailure(
                "ModelSnapshot<\(M.self)> reads \(what) of the model itself; \(keyPath) reads \(path.count) keys")
        }
        return path[0]
    }
}

extension ObjectContext {
    /// A `Sendable` snapshot of a model's object, with the context's unsaved changes.
    ///
    /// - Throws: When the object's record cannot be read (it was deleted elsewhere).
    public func snapshot<M: Model>(of model: M) throws -> ModelSnapshot<M> {
        let object = model.managedObject
        var values: [String: Value] = [:]
        for attribute in object.entity.attributes {
            values[attribute.name] = try object.value(forKey: attribute.name)
        }
        var relationships: [String: [ObjectID]] = [:]
        for relationship in object.entity.relationships {
            relationships[relationship.name] = try targets(of: object, relationship).sorted()
        }
        return ModelSnapshot(objectID: object.objectID, values: values, relationships: relationships)
    }

    /// Fetches `Sendable` snapshots of the models a typed request asks for.
    public func snapshots<M: Model>(_ request: ModelFetchRequest<M>) throws -> [ModelSnapshot<M>] {
        try fetch(request).map { try snapshot(of: $0) }
    }

    /// Fetches `Sendable` snapshots of models of a type.
    public func snapshots<M: Model>(
        _ type: M.Type, where predicate: ModelPredicate<M>? = nil, sortedBy sortKeys: [SortKey] = [],
        limit: Int = 0, offset: Int = 0
    ) throws -> [ModelSnapshot<M>] {
        try fetch(type, where: predicate, sortedBy: sortKeys, limit: limit, offset: offset).map {
            try snapshot(of: $0)
        }
    }
}
