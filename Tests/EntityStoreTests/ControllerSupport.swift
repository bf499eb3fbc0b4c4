import EntityStore
import Foundation
import TestSupport

/// The controller tests' schema: items with a group (the section), a rank (the sort) and an owner.
func controllerSchema() throws -> Schema {
    try Schema(version: 1) {
        Entity("Item") {
            Attribute("title", .string)
            Attribute("group", .string, optional: true, indexed: true)
            Attribute("rank", .int64, default: 0)
            Attribute("position", .double, default: 0.0)
            Relationship("owner", to: "Owner", inverse: "items")
        }
        Entity("Owner") {
            Attribute("name", .string)
            Relationship("items", to: "Item", inverse: "owner", toMany: true)
        }
    }
}

/// Records a controller's delegate calls as short strings: "will", "did", "del [0,1]", "sdel 0", "sins 2",
/// "ins [0,0]", "move [0,1]->[2,1]", "upd [2,0]->[2,0]".
final class RecordingDelegate: FetchedResultsControllerDelegate {
    var calls: [String] = []
    var changeSets: [ChangeSet<Value, ObjectID>] = []
    var snapshots: [ResultsSnapshot] = []
    var differences: [CollectionDifference<ObjectID>] = []
    var userDrivenFlags: [Bool] = []
    var deliversUserDrivenChanges = false
    var deliversWholeBatches = false
    var names: [ObjectID: String] = [:]

    func label(_ id: ObjectID) -> String { names[id].map { " " + $0 } ?? "" }

    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        calls.append("failed: \(error.message)")
    }

    func controllerWillChangeContent(_ controller: FetchedResultsController) {
        calls.append("will")
        userDrivenFlags.append(controller.isUserDrivenBatch)
    }
    func controller(
        _ controller: FetchedResultsController, didChange objectID: ObjectID, at indexPath: ItemPath?,
        for type: ResultsChangeType, newIndexPath: ItemPath?
    ) {
        switch type {
        case .delete: calls.append("del\(label(objectID)) \(indexPath!)")
        case .insert: calls.append("ins\(label(objectID)) \(newIndexPath!)")
        case .move: calls.append("move\(label(objectID)) \(indexPath!)->\(newIndexPath!)")
        case .update: calls.append("upd\(label(objectID)) \(indexPath!)->\(newIndexPath!)")
        }
    }
    func controller(
        _ controller: FetchedResultsController, didChange section: SectionInfo, atSectionIndex index: Int,
        for type: ResultsChangeType
    ) {
        calls.append(type == .insert ? "sins \(index)" : "sdel \(index)")
    }
    func controllerDidChangeContent(_ controller: FetchedResultsController) { calls.append("did") }
    func controller(_ controller: FetchedResultsController, didChangeContentWith changes: ChangeSet<Value, ObjectID>) {
        changeSets.append(changes)
    }
    func controller(_ controller: FetchedResultsController, didChangeContentWith snapshot: ResultsSnapshot) {
        snapshots.append(snapshot)
    }
    func controller(
        _ controller: FetchedResultsController, didChangeContentWith difference: CollectionDifference<ObjectID>
    ) {
        differences.append(difference)
    }

    /// The calls since the last time, without the will/did brackets.
    func take() -> [String] {
        defer { calls = [] }
        return calls.filter { $0 != "will" && $0 != "did" }
    }
}

/// A store of items for controller tests, with helpers to add and look up items by title.
final class ItemWorld {
    let temporary: TemporaryStore
    let context: ObjectContext
    var items: [String: ManagedObject] = [:]

    init() throws {
        temporary = try TemporaryStore(schema: try controllerSchema())
        context = ObjectContext(store: temporary.store, name: "ui")
    }

    var store: PersistentStore { temporary.store }

    /// Inserts an item into the world's context, or into `other` (another context on the store).
    @discardableResult
    func add(
        _ title: String, group: String?, rank: Int64 = 0, position: Double = 0, in other: ObjectContext? = nil
    ) throws -> ManagedObject {
        let item = try (other ?? context).insert("Item")
        try item.setValue(.string(title), forKey: "title")
        try item.setValue(group.map(Value.string) ?? .null, forKey: "group")
        try item.setValue(.int(rank), forKey: "rank")
        try item.setValue(.double(position), forKey: "position")
        items[title] = item
        return item
    }

    /// Inserts owners with these names into the world's context.
    func addOwners(_ names: [String]) throws -> [ManagedObject] {
        try names.map { name in
            let owner = try context.insert("Owner")
            try owner.setValue(.string(name), forKey: "name")
            return owner
        }
    }

    func controller(
        sectioned: Bool = true, sort: [SortKey] = [SortKey("rank")], predicate: String? = nil,
        delegate: RecordingDelegate
    ) throws -> FetchedResultsController {
        var request = FetchRequest(entity: "Item", sortKeys: sort)
        request.predicate = try predicate.map { try FetchPredicate($0) }
        let controller = FetchedResultsController(
            fetchRequest: request, context: context, sectionNameKeyPath: sectioned ? "group" : nil)
        controller.delegate = delegate
        try controller.performFetch()
        for (title, item) in items { delegate.names[item.objectID] = title }
        return controller
    }

    /// The controller's sections as "K:a,b L:c" with titles.
    func layout(_ controller: FetchedResultsController) -> String {
        let titles = Dictionary(uniqueKeysWithValues: items.map { ($0.value.objectID, $0.key) })
        return controller.sections.map { section in
            section.name + ":" + section.objectIDs.map { titles[$0] ?? "?" }.joined(separator: ",")
        }.joined(separator: " ")
    }

    func remove() { temporary.remove() }
}

/// A controller's sections ("name:[ids]") and a fresh fetch's of the same request in the same context, when they
/// differ: what a live controller must never show.
func differenceFromAFreshFetch(_ controller: FetchedResultsController) throws -> (shown: [String], fetched: [String])? {
    let fresh = FetchedResultsController(
        fetchRequest: controller.fetchRequest, context: controller.context,
        sectionNameKeyPath: controller.sectionNameKeyPath)
    try fresh.performFetch()
    let shown = controller.sections.map { "\($0.name):\($0.objectIDs)" }
    let fetched = fresh.sections.map { "\($0.name):\($0.objectIDs)" }
    return shown == fetched ? nil : (shown, fetched)
}
