/// A fetched-results controller of a model type: the same controller and contract, with models out.
///
/// <!-- snippet
/// final class Project: Model {
///     @Stored var name: String
///     @ToMany var tasks: [Task]
/// }
/// final class Task: Model {
///     @Stored var title: String
///     @Stored var rank: Int = 0
///     @ToOne var project: Project?
/// }
/// final class Screen: FetchedResultsControllerDelegate {
///     func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {}
/// }
/// let screen = Screen()
/// let context = ObjectContext(
///     store: try PersistentStore.open(path: "tasks.store", schema: Schema(version: 1, models: [Project.self, Task.self])))
/// -->
/// ```swift
/// let controller = ModelResultsController(
///     ModelFetchRequest<Task>(sortedBy: [SortKey(\Task.rank)]), context: context, sectionedBy: \Task.project?.name)
/// controller.delegate = screen
/// try controller.performFetch()
/// let first: Task = try controller.object(at: ItemPath(section: 0, item: 0))
/// ```
public final class ModelResultsController<M: Model> {
    /// The untyped controller underneath (its delegate, sections and lookups are this controller's).
    public let controller: FetchedResultsController
    /// The context it reads and observes.
    public var context: ObjectContext { controller.context }

    /// A controller of `request`'s results, in sections by `sectionKeyPath` when one is given.
    public init<V: ValueConvertible>(
        _ request: ModelFetchRequest<M>, context: ObjectContext, sectionedBy sectionKeyPath: KeyPath<M, V>
    ) {
        controller = FetchedResultsController(
            fetchRequest: request.fetchRequest, context: context, sectionNameKeyPath: ModelKeys.text(sectionKeyPath))
    }

    /// A controller of `request`'s results, in one section.
    public init(_ request: ModelFetchRequest<M>, context: ObjectContext) {
        controller = FetchedResultsController(fetchRequest: request.fetchRequest, context: context)
    }

    /// Who is told about changes.
    public var delegate: (any FetchedResultsControllerDelegate)? {
        get { controller.delegate }
        set { controller.delegate = newValue }
    }

    /// Fetches and starts following changes (see ``FetchedResultsController/performFetch()``).
    ///
    /// - Throws: What the untyped controller throws, and a mismatch of the model class with the schema.
    public func performFetch() throws {
        try context.checkModel(M.self)
        try controller.performFetch()
    }

    /// The sections.
    public var sections: [SectionInfo] { controller.sections }

    /// The current results as identifiers.
    public var snapshot: ResultsSnapshot { controller.snapshot }

    /// Every batch from now on as `Sendable` values (see ``FetchedResultsController/batches(includingUserDriven:)``).
    public func batches(includingUserDriven: Bool = false) -> AsyncThrowingStream<ResultsBatch, any Error> {
        controller.batches(includingUserDriven: includingUserDriven)
    }

    /// The models in order, every section.
    public var fetchedObjects: [M] { context.wrapAll(controller.fetchedObjects, as: M.self) }

    /// The model at a path.
    ///
    /// - Throws: ``EntityStoreError/Code/invalidFetchRequest`` for a path outside the results.
    public func object(at path: ItemPath) throws -> M { context.wrap(try controller.object(at: path), as: M.self) }

    /// The path of a model, or `nil` when it is not in the results.
    public func indexPath(for model: M) -> ItemPath? { controller.indexPath(for: model.objectID) }

    /// Why the controller stopped following changes, if it did.
    public var failure: EntityStoreError? { controller.failure }
}
