/// A fetch of a model type (as SwiftData's `FetchDescriptor`): a typed predicate, sorts by key paths, a window.
///
/// <!-- snippet
/// uses: library
/// let store = try openLibrary()
/// let context = ObjectContext(store: store)
/// -->
/// ```swift
/// var request = ModelFetchRequest<Book>(where: \Book.pages > 300, sortedBy: [SortKey(\Book.title)])
/// request.fetchLimit = 20
/// let books: [Book] = try context.fetch(request)
/// ```
public struct ModelFetchRequest<M: Model>: Sendable {
    /// The condition objects must meet; `nil` for all.
    public var predicate: ModelPredicate<M>?
    /// The order; ties are broken by primary key (unique across an entity and its sub-entities).
    public var sortKeys: [SortKey]
    /// At most this many results; 0 for no limit.
    public var fetchLimit = 0
    /// Skip this many results first.
    public var fetchOffset = 0
    /// When above 0, objects beyond the first batch load this many at a time.
    public var fetchBatchSize = 0
    /// Reflect the context's unsaved changes (the default).
    public var includesPendingChanges = true
    /// Relationship key paths whose objects are loaded with the results.
    public var relationshipKeyPathsForPrefetching: [String] = []

    /// A request for objects of the model type.
    public init(where predicate: ModelPredicate<M>? = nil, sortedBy sortKeys: [SortKey] = []) {
        self.predicate = predicate
        self.sortKeys = sortKeys
    }

    /// The untyped request it stands for.
    public var fetchRequest: FetchRequest {
        var request = FetchRequest(
            entity: ModelKeys.entityName(of: M.self), predicate: predicate?.predicate, sortKeys: sortKeys)
        request.fetchLimit = fetchLimit
        request.fetchOffset = fetchOffset
        request.fetchBatchSize = fetchBatchSize
        request.includesPendingChanges = includesPendingChanges
        request.relationshipKeyPathsForPrefetching = relationshipKeyPathsForPrefetching
        return request
    }
}

extension ObjectContext {
    /// Fetches the models a typed request asks for.
    ///
    /// - Throws: What the untyped fetch throws, and a mismatch of the model class with the schema.
    public func fetch<M: Model>(_ request: ModelFetchRequest<M>) throws -> [M] {
        try checkModel(M.self)
        return wrapAll(try fetch(request.fetchRequest), as: M.self)
    }

    /// Fetches models of a type.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// -->
    /// ```swift
    /// let long = try context.fetch(Book.self, where: \Book.pages > 300, sortedBy: [SortKey(\Book.title)])
    /// ```
    public func fetch<M: Model>(
        _ type: M.Type, where predicate: ModelPredicate<M>? = nil, sortedBy sortKeys: [SortKey] = [],
        limit: Int = 0, offset: Int = 0
    ) throws -> [M] {
        // The untyped request made here, not through a `ModelFetchRequest` (a generic value whose conversion copies
        // the request): a typed fetch in a loop pays little more than the untyped one.
        var request = FetchRequest(entity: try checkModel(M.self), predicate: predicate?.predicate, sortKeys: sortKeys)
        request.fetchLimit = limit
        request.fetchOffset = offset
        return wrapAll(try fetch(request), as: M.self)
    }

    /// The first model in the order (`nil` when none matches).
    public func first<M: Model>(
        _ type: M.Type, where predicate: ModelPredicate<M>? = nil, sortedBy sortKeys: [SortKey] = []
    ) throws -> M? {
        try fetch(type, where: predicate, sortedBy: sortKeys, limit: 1).first
    }

    /// The number of models that match.
    public func count<M: Model>(_ type: M.Type, where predicate: ModelPredicate<M>? = nil) throws -> Int {
        try count(for: FetchRequest(entity: ModelKeys.entityName(of: M.self), predicate: predicate?.predicate))
    }

    /// The number of models a typed request matches (within its window).
    public func count<M: Model>(for request: ModelFetchRequest<M>) throws -> Int {
        try count(for: request.fetchRequest)
    }
}
