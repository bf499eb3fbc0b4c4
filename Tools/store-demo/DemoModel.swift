import EntityStore
import Foundation

/// An item of the demo's list: a title, the group (the section) and a rank (the order within it).
final class DemoItem: Model {
    override class var entityName: String { "Item" }
    @Stored(.unique) var title: String
    @Stored(.indexed) var group: String
    @Stored var rank: Int = 0
}

/// The demo's schema and data: items in numbered groups (seed 002's RZCollectionList contents).
enum DemoModel {
    static func schema() throws -> Schema { try Schema(version: 1, models: [DemoItem.self]) }

    /// Seed 002's contents before its batch: "Jill [0]", "Jack [0]", "Garfunkel [1]", ...
    static let seed: [(String, String, Int)] = [
        ("Jill", "0", 1), ("Jack", "0", 2), ("Garfunkel", "1", 1), ("Simon", "1", 2), ("Clyde", "2", 1),
        ("Bonnie", "2", 2), ("Jerry", "2", 3), ("Ben", "2", 4), ("Nu:Tone", "4", 1), ("Technicolour", "4", 2),
    ]

    static func open(_ path: String) throws -> PersistentStore {
        try PersistentStore.open(path: path, schema: schema())
    }

    /// The item with a title, if any.
    static func item(_ title: String, in context: ObjectContext) throws -> DemoItem? {
        try context.first(DemoItem.self, where: \DemoItem.title == title)
    }

    static func insert(_ title: String, group: String, rank: Int, in context: ObjectContext) throws {
        let item = try context.insert(DemoItem.self)
        item.title = title
        item.group = group
        item.rank = rank
    }

    static func controller(_ context: ObjectContext) -> ModelResultsController<DemoItem> {
        ModelResultsController(
            ModelFetchRequest<DemoItem>(sortedBy: [SortKey(\DemoItem.rank), SortKey(\DemoItem.title)]),
            context: context, sectionedBy: \DemoItem.group)
    }
}

/// Prints every batch a controller delivers, in the contract's order, with titles: a delegate conformance isolated
/// to the main actor, where the screen and its context live.
@MainActor
final class BatchPrinter: @MainActor FetchedResultsControllerDelegate {
    let context: ObjectContext
    var lines: [String] = []
    var batches = 0
    let output: (String) -> Void

    init(context: ObjectContext, output: @escaping (String) -> Void) {
        self.context = context
        self.output = output
    }

    func title(_ id: ObjectID) -> String { titleOf(id, in: context) }

    func controllerWillChangeContent(_ controller: FetchedResultsController) {
        lines = []
        batches += 1
    }

    func controller(
        _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
        for type: ResultsChangeType, newIndexPath: ItemPath?
    ) {
        let name = title(objectID)
        switch type {
        case .delete: lines.append("  delete \(name) at \(indexPath!)")
        case .insert: lines.append("  insert \(name) at \(newIndexPath!)")
        case .move: lines.append("  move \(name) \(indexPath!) -> \(newIndexPath!)")
        case .update: lines.append("  update \(name) \(indexPath!) -> \(newIndexPath!)")
        }
    }

    func controller(
        _ controller: FetchedResultsController, didChange section: SectionInfo, atSectionIndex index: Int,
        for type: ResultsChangeType
    ) {
        lines.append("  \(type == .insert ? "insert" : "delete") section \(index) [\(section.name)]")
    }

    func controllerDidChangeContent(_ controller: FetchedResultsController) {
        output(lines.joined(separator: "\n"))
    }

    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        output("  the list stopped following changes: \(error)")
    }
}

/// An object's title for display; a deleted or unreadable object shows its ID and why.
func titleOf(_ id: ObjectID, in context: ObjectContext) -> String {
    do {
        if case .string(let title) = try context.object(with: id).value(forKey: "title") { return title }
        return id.description
    } catch {
        return "\(id) (\(error))"
    }
}

/// The sections as one line: `[0] Jill Jack | [1] Garfunkel Simon`.
func layout(_ controller: FetchedResultsController, _ context: ObjectContext) -> String {
    controller.sections.map { section in
        "[\(section.name)] "
            + section.objectIDs.map { titleOf($0, in: context) }.joined(separator: " ")
    }.joined(separator: " | ")
}
