import EntityStore
import TestSupport
import Testing

/// A consumer of a flat list model as GTK's list view is one: it holds its own copy of the rows, changed only by
/// the splices it hears, reading the count and the added rows from the model inside each (as
/// `gtk_list_item_manager_model_items_changed_cb` does). After each splice its copy must be the model's rows
/// (GTK's list model validator: rows outside a splice unchanged, the count right at every signal).
private final class SpliceConsumer {
    var rows: [FlatResultsList.Row]
    var splices = 0
    var updates = 0
    var problems: [String] = []

    init(_ list: FlatResultsList) { rows = list.allRows }

    func splice(_ list: FlatResultsList, _ position: Int, _ removed: Int, _ added: Int) {
        splices += 1
        guard position >= 0, position + removed <= rows.count else {
            problems.append("splice (\(position), \(removed), \(added)) past the \(rows.count) rows held")
            return
        }
        rows.replaceSubrange(position..<(position + removed), with: (position..<(position + added)).map { list[$0] })
        if rows.count != list.count { problems.append("\(rows.count) rows held, the model has \(list.count)") }
        if rows != list.allRows { problems.append("rows outside splice (\(position), \(removed), \(added)) changed") }
    }
}

/// The rows a fresh fetch gives, flattened.
private func flattened(_ controller: FetchedResultsController, headers: Bool) throws -> [FlatResultsList.Row] {
    let fresh = FetchedResultsController(
        fetchRequest: controller.fetchRequest, context: controller.context,
        sectionNameKeyPath: controller.sectionNameKeyPath)
    try fresh.performFetch()
    return fresh.sections.flatMap { (headers ? [.header($0.name)] : []) + $0.objectIDs.map(FlatResultsList.Row.object) }
}

@Suite struct FlatResultsListTests {
    @Test(arguments: [true, false])
    func randomBatchesSpliceTheFlatListIntoAFreshFetch(sectioned: Bool) throws {
        let world = try ItemWorld()
        defer { world.remove() }
        var g = SeededGenerator(seed: sectioned ? 0xF1A7 : 0xF1A8)
        let groups: [String?] = ["A", "B", "C", "D", nil]
        for i in 0..<20 {
            try world.add("i\(i)", group: groups.randomElement(using: &g)!, rank: Int64.random(in: 0..<50, using: &g))
        }
        try world.context.save()
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(
                entity: "Item", sortKeys: sectioned ? [SortKey("group"), SortKey("rank")] : [SortKey("rank")]),
            context: world.context, sectionNameKeyPath: sectioned ? "group" : nil)
        try controller.performFetch()
        let list = FlatResultsList(sections: controller.sections, headers: sectioned)
        let consumer = SpliceConsumer(list)
        var failures: [String] = []
        var userDrivenBatches = 0
        let collector = ResultsBatchCollector { changes, userDriven in
            if userDriven { userDrivenBatches += 1 }
            do {
                try list.apply(changes) {
                    consumer.splice(list, $0, $1, $2)
                } update: { position, id in
                    consumer.updates += 1
                    if list[position] != .object(id) { failures.append("update of \(id) at \(position)") }
                }
            } catch {
                failures.append("\(error)")
            }
        } failure: {
            failures.append($0.message)
        }
        controller.delegate = collector

        var next = 20
        for round in 0..<TestScale.size(300, stress: 3_000) {
            let live = try world.context.fetch(FetchRequest(entity: "Item"))
            func mutate() throws {
                for _ in 0..<Int.random(in: 1...5, using: &g) {
                    let object = live.randomElement(using: &g).flatMap { $0.isDeleted ? nil : $0 }
                    switch Int.random(in: 0..<9, using: &g) {
                    case 0, 1:
                        try world.add(
                            "i\(next)", group: groups.randomElement(using: &g)!,
                            rank: Int64.random(in: 0..<50, using: &g))
                        next += 1
                    case 2: if let object { try world.context.delete(object) }
                    case 3, 4:
                        try object?.setValue(.int(Int64.random(in: 0..<50, using: &g)), forKey: "rank")
                    case 5, 6:
                        try object?.setValue(
                            groups.randomElement(using: &g)!.map(Value.string) ?? .null, forKey: "group")
                    default: try object?.setValue(.string("t\(round)"), forKey: "title")
                    }
                }
            }
            if Int.random(in: 0..<6, using: &g) == 0 {
                try world.context.performUserDrivenChanges(mutate)
            } else {
                try mutate()
                world.context.processPendingChanges()
            }
            #expect(failures.isEmpty, "round \(round): \(failures.prefix(3))")
            #expect(consumer.problems.isEmpty, "round \(round): \(consumer.problems.prefix(3))")
            let fresh = try flattened(controller, headers: sectioned)
            #expect(list.allRows == fresh, "round \(round)")
            #expect(consumer.rows == fresh, "round \(round)")
            failures = []
            consumer.problems = []
        }
        #expect(consumer.splices > 100 && consumer.updates > 10 && userDrivenBatches > 10)
    }

    @Test func positionsAndPathsMapBothWays() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        for (title, group) in [("a", "A"), ("b", "A"), ("c", "B")] { try world.add(title, group: group) }
        try world.context.save()
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Item", sortKeys: [SortKey("group"), SortKey("title")]),
            context: world.context, sectionNameKeyPath: "group")
        try controller.performFetch()
        let list = FlatResultsList(sections: controller.sections)
        #expect(list.count == 5 && list.numberOfSections == 2)
        #expect(list[0] == .header("A") && list[3] == .header("B"))
        #expect(list.itemPath(at: 0) == ItemPath(section: 0, item: -1))
        #expect(list.itemPath(at: 4) == ItemPath(section: 1, item: 0))
        #expect(list.itemPath(at: 5) == nil)
        #expect(list.position(of: ItemPath(section: 1, item: 0)) == 4)
        #expect(list.position(of: ItemPath(section: 1, item: -1)) == 3)
        #expect(list.position(of: ItemPath(section: 1, item: 1)) == nil)
        #expect(list[4] == .object(world.items["c"]!.objectID))
    }

    @Test func aBatchThatDoesNotFitIsRefusedBeforeAnythingChanges() throws {
        let world = try ItemWorld()
        defer { world.remove() }
        try world.add("a", group: "A")
        try world.context.save()
        let controller = FetchedResultsController(
            fetchRequest: FetchRequest(entity: "Item", sortKeys: [SortKey("group")]), context: world.context,
            sectionNameKeyPath: "group")
        try controller.performFetch()
        let list = FlatResultsList(sections: controller.sections)
        let before = list.allRows
        let id = world.items["a"]!.objectID
        var splices = 0
        let error = #expect(throws: EntityStoreError.self) {
            try list.apply(
                [
                    .deleteItem(id, at: ItemPath(section: 0, item: 0)),
                    .deleteItem(id, at: ItemPath(section: 0, item: 3)),
                ]
            ) { _, _, _ in splices += 1 }
        }
        #expect(error?.code == .invalidValue)
        #expect(error?.message.contains("no row at [0,3]") == true, "\(error?.message ?? "")")
        #expect(splices == 0 && list.allRows == before)
    }
}
