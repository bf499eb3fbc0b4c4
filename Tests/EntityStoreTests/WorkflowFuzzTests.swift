import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// The change contract at random through the ways an app changes its objects besides plain edits: undo and redo,
/// child contexts saving into the screen's context, the store's batch updates, deletes and inserts merged
/// automatically, another context's saves, refreshes, rollbacks and saves that conflict; hostile sort keys (NaN, both
/// zeros, infinities, canonically equivalent and case-variant strings) included. After every step each
/// controller equals a fresh fetch, its callback replica equals it, and every batch passes the strict validator.
@Suite struct WorkflowFuzzTests {
    static var rounds: Int { TestScale.size(250, stress: 2_000) }

    @Test(arguments: [0xA11CE as UInt64, 0xB0B])
    func randomWorkflowsKeepEveryControllerEqualToAFreshFetch(seed: UInt64) throws {
        let world = try ItemWorld()
        defer { world.remove() }
        let ui = world.context
        var g = SeededGenerator(seed: seed)
        let groups: [String?] = ["A", "B", "C", nil]
        let ownerNames = ["o1", "o2", "o3"]
        for name in ownerNames {
            let owner = try ui.insert("Owner")
            try owner.setValue(.string(name), forKey: "name")
        }
        var serial = 0
        func add(in context: ObjectContext) throws {
            serial += 1
            let item = try world.add(
                "i\(serial)", group: groups.randomElement(using: &g)!, rank: Int64.random(in: 0..<40, using: &g),
                in: context)
            if Bool.random(using: &g),
                let owner = try context.fetch(FetchRequest(entity: "Owner")).randomElement(using: &g)
            {
                try item.setObject(owner, forKey: "owner")
            }
        }
        for _ in 0..<20 { try add(in: ui) }
        try ui.save()
        ui.automaticallyMergesChangesFromStore = true

        func makeController(
            sort: [SortKey], predicate: String? = nil, section: String? = nil, offset: Int = 0, limit: Int = 0,
            threshold: Int? = nil, arguments: [PredicateArgument] = []
        ) throws -> FetchedResultsController {
            var request = FetchRequest(entity: "Item", sortKeys: sort)
            request.predicate = try predicate.map { try FetchPredicate(format: $0, arguments: arguments) }
            request.fetchOffset = offset
            request.fetchLimit = limit
            let controller = FetchedResultsController(fetchRequest: request, context: ui, sectionNameKeyPath: section)
            if let threshold { controller.mergeThreshold = threshold }
            try controller.performFetch()
            return controller
        }
        // Objects named in predicates: some items (later deleted, or not) and two owners.
        let named = try ui.fetch(FetchRequest(entity: "Item")).prefix(12).map(\.objectID)
        let someOwners = try ui.fetch(FetchRequest(entity: "Owner")).prefix(2).map(\.objectID)
        let controllers = [
            try makeController(sort: [SortKey("group"), SortKey("rank"), SortKey("title")], section: "group"),
            try makeController(
                sort: [SortKey("rank"), SortKey("title")], predicate: "SELF IN %@", arguments: [.objects(named)]),
            try makeController(
                sort: [SortKey("owner.name"), SortKey("title")], predicate: "owner IN %@ OR NOT (SELF IN %@)",
                section: "owner.name", arguments: [.objects(someOwners), .objects(named)]),
            try makeController(
                sort: [SortKey("group"), SortKey("rank"), SortKey("title")], section: "group", threshold: 0),
            try makeController(sort: [SortKey("rank", ascending: false), SortKey("title")], predicate: "rank >= 10"),
            try makeController(sort: [SortKey("rank"), SortKey("title")], offset: 2, limit: 7),
            try makeController(
                sort: [SortKey("owner.name"), SortKey("title")], predicate: "owner != nil", section: "owner.name"),
            try makeController(sort: [SortKey("position"), SortKey("rank")], predicate: "position > -1"),
            try makeController(sort: [SortKey("title"), SortKey("rank")], section: "title"),
            try makeController(
                sort: [SortKey("title", ascending: false), SortKey("position")], section: "title", threshold: 0),
        ]
        let delegates = controllers.map { ReplicaDelegate($0) }
        for (controller, delegate) in zip(controllers, delegates) { controller.delegate = delegate }

        func mutate(_ context: ObjectContext) throws {
            let items = try context.fetch(FetchRequest(entity: "Item"))
            let owners = try context.fetch(FetchRequest(entity: "Owner"))
            for _ in 0..<Int.random(in: 1...4, using: &g) {
                switch Int.random(in: 0..<11, using: &g) {
                case 9:
                    if let item = items.randomElement(using: &g), !item.isDeleted {
                        let values: [Double] = [.nan, -0.0, 0.0, .infinity, -.infinity, 1.5, -1, 2]
                        try item.setValue(.double(values.randomElement(using: &g)!), forKey: "position")
                    }
                case 10:
                    if let item = items.randomElement(using: &g), !item.isDeleted {
                        let values = [
                            "café", "cafe\u{301}", "Zeta", "zeta", "", "a", "A", "\u{1F600}", "e\u{301}\u{301}",
                        ]
                        try item.setValue(.string(values.randomElement(using: &g)!), forKey: "title")
                    }
                case 0, 1: try add(in: context)
                case 2:
                    if let item = items.randomElement(using: &g), !item.isDeleted { try context.delete(item) }
                case 3, 4:
                    if let item = items.randomElement(using: &g), !item.isDeleted {
                        try item.setValue(.int(Int64.random(in: 0..<40, using: &g)), forKey: "rank")
                    }
                case 5:
                    if let item = items.randomElement(using: &g), !item.isDeleted {
                        try item.setValue(groups.randomElement(using: &g)!.map(Value.string) ?? .null, forKey: "group")
                    }
                case 6:
                    if let item = items.randomElement(using: &g), !item.isDeleted {
                        try item.setObject(
                            owners.filter { !$0.isDeleted }.randomElement(using: &g), forKey: "owner")
                    }
                case 7:
                    if let owner = owners.randomElement(using: &g), !owner.isDeleted {
                        try owner.setValue(.string(ownerNames.randomElement(using: &g)!), forKey: "name")
                    }
                default:
                    if let item = items.randomElement(using: &g), !item.isDeleted {
                        try item.setValue(.string("t\(serial)-\(Int.random(in: 0..<9, using: &g))"), forKey: "title")
                    }
                }
            }
        }
        var trace: [String] = []
        func save(_ context: ObjectContext) throws {
            do {
                try context.save()
            } catch let error as EntityStoreError where error.code == .conflict {
                trace.append("\(context.name ?? "")'s save refused")
                context.rollback()
            } catch let error as EntityStoreError
                where error.code == .validationFailed
                && !error.failures.isEmpty
                && error.failures.allSatisfy({ failure in
                    // Undo takes changes back one at a time: an item whose title was undone before its insert has
                    // none, and no save may store it.
                    guard failure.key == "title", let id = failure.objectID, let item = context.registered[id] else {
                        return false
                    }
                    let title = item.entity.attributeIndex("title")!
                    return item.isInserted && item.values.map { $0[title] == .null } ?? false
                })
            {
                trace.append("\(context.name ?? "")'s save refused an item without a title")
                context.rollback()
            }
        }

        let other = ObjectContext(store: world.store, name: "other")
        var steps: [String: Int] = [:]
        for round in 0..<Self.rounds {
            let step: String
            switch Int.random(in: 0..<16, using: &g) {
            case 0, 1:
                step = "edit"
                ui.beginUndoGrouping()
                try mutate(ui)
                ui.endUndoGrouping()
            case 2:
                step = "undo"
                if ui.canUndo { try ui.undoLastChange() }
            case 3:
                step = "redo"
                if ui.canRedo { try ui.redoLastChange() }
            case 4:
                step = "child save"
                let child = ObjectContext(parent: ui, name: "child")
                try mutate(child)
                if Int.random(in: 0..<4, using: &g) > 0 { try save(child) }
            case 5:
                step = "batch update"
                let low = Int64.random(in: 0..<40, using: &g)
                var values: [String: Value] = ["rank": .int(Int64.random(in: 0..<40, using: &g))]
                if Bool.random(using: &g) {
                    values["group"] = groups.randomElement(using: &g)!.map(Value.string) ?? .null
                }
                try world.store.batchUpdate(
                    "Item", where: try FetchPredicate("rank >= \(low) AND rank < \(low + 3)"), set: values)
            case 6:
                step = "batch delete"
                let rank = Int64.random(in: 0..<40, using: &g)
                try world.store.batchDelete("Item", where: try FetchPredicate("rank == \(rank)"))
            case 7:
                step = "batch insert"
                let objects = (0..<Int.random(in: 1...20, using: &g)).map { _ -> [String: Value] in
                    serial += 1
                    return [
                        "title": .string("b\(serial)"), "rank": .int(Int64.random(in: 0..<40, using: &g)),
                        "group": groups.randomElement(using: &g)!.map(Value.string) ?? .null,
                    ]
                }
                try world.store.batchInsert(into: "Item", objects: objects)
            case 8, 9:
                step = "other save"
                try mutate(other)
                try save(other)
                other.reset()
            case 10:
                step = "refresh"
                if let item = try ui.fetch(FetchRequest(entity: "Item")).randomElement(using: &g) {
                    try ui.refresh(item, mergeChanges: Bool.random(using: &g))
                }
            case 11:
                step = "rollback"
                ui.rollback()
            case 12, 13:
                step = "save"
                try save(ui)
            default:
                step = "process"
                try mutate(ui)
            }
            trace.append("round \(round) \(step)")
            ui.processPendingChanges()
            ui._checkInvariants()
            steps[step, default: 0] += 1
            let failed = try checkStep(
                controllers, delegates, world.store, round: round,
                after: "seed \(seed), after \(trace.suffix(12).joined(separator: ", "))")
            if failed || delegates.contains(where: { !$0.problems.isEmpty }) { break }
        }
        for (index, delegate) in delegates.enumerated() {
            #expect(delegate.problems.isEmpty, "controller \(index): \(delegate.problems.prefix(5))")
        }
        print("workflow fuzz seed \(seed): \(steps)")
    }

    /// Derived attributes (counts and sums over to-many relationships, values through a to-one) in controllers'
    /// sorts, sections and predicates: they change at saves, merges and batch updates, and the controllers follow.
    @Test(arguments: [1 as UInt64, 2])
    func derivedAttributesKeepEveryControllerEqualToAFreshFetch(seed: UInt64) throws {
        let schema = try Schema(version: 1) {
            Entity("Writer") {
                Attribute("name", .string)
                Attribute("bookCount", .int64, default: 0, indexed: true, derived: "books.@count")
                Attribute("totalPages", .int64, default: 0, derived: "books.@sum.pages")
                Relationship("books", to: "Volume", inverse: "writer", toMany: true)
            }
            Entity("Volume") {
                Attribute("title", .string)
                Attribute("pages", .int64, default: 0, indexed: true)
                Attribute("sortTitle", .string, optional: true, derived: "lowercase(title)")
                Attribute("writerName", .string, optional: true, derived: "writer.name")
                Relationship("writer", to: "Writer", inverse: "books")
            }
        }
        let temporary = try TemporaryStore(schema: schema)
        defer { temporary.remove() }
        let store = temporary.store
        let ui = ObjectContext(store: store, name: "ui")
        var g = SeededGenerator(seed: seed)
        let names = ["Ann", "Bob", "Cy"]
        let titles = ["A", "b", "C", "d", "e"]
        for name in names {
            try ui.insert("Writer").setValue(.string(name), forKey: "name")
        }
        try ui.save()
        ui.automaticallyMergesChangesFromStore = true
        func controller(
            _ entity: String, _ sort: [SortKey], _ predicate: String? = nil, section: String? = nil
        ) throws -> FetchedResultsController {
            var request = FetchRequest(entity: entity, sortKeys: sort)
            request.predicate = try predicate.map { try FetchPredicate($0) }
            let c = FetchedResultsController(fetchRequest: request, context: ui, sectionNameKeyPath: section)
            try c.performFetch()
            return c
        }
        let controllers = [
            try controller("Writer", [SortKey("bookCount", ascending: false), SortKey("name")]),
            try controller("Writer", [SortKey("totalPages"), SortKey("name")], "bookCount > 1"),
            try controller(
                "Volume", [SortKey("writerName"), SortKey("sortTitle"), SortKey("pages")], section: "writerName"),
            try controller("Volume", [SortKey("sortTitle"), SortKey("pages")], "writerName == 'Bob' OR pages > 50"),
        ]
        let delegates = controllers.map { ReplicaDelegate($0) }
        for (c, d) in zip(controllers, delegates) { c.delegate = d }
        let other = ObjectContext(store: store, name: "other")
        var trace: [String] = []
        func mutate(_ context: ObjectContext) throws {
            let writers = try context.fetch(FetchRequest(entity: "Writer"))
            let volumes = try context.fetch(FetchRequest(entity: "Volume"))
            for _ in 0..<Int.random(in: 1...3, using: &g) {
                switch Int.random(in: 0..<7, using: &g) {
                case 0, 1:
                    let v = try context.insert("Volume")
                    try v.setValue(.string(titles.randomElement(using: &g)!), forKey: "title")
                    try v.setValue(.int(Int64.random(in: 0..<100, using: &g)), forKey: "pages")
                    if Bool.random(using: &g) { try v.setObject(writers.randomElement(using: &g), forKey: "writer") }
                case 2:
                    if let v = volumes.randomElement(using: &g), !v.isDeleted { try context.delete(v) }
                case 3:
                    if let v = volumes.randomElement(using: &g), !v.isDeleted {
                        try v.setObject(writers.randomElement(using: &g), forKey: "writer")
                    }
                case 4:
                    if let v = volumes.randomElement(using: &g), !v.isDeleted {
                        try v.setValue(.int(Int64.random(in: 0..<100, using: &g)), forKey: "pages")
                    }
                case 5:
                    if let w = writers.randomElement(using: &g) {
                        try w.setValue(
                            .string(names.randomElement(using: &g)! + "\(Int.random(in: 0..<2, using: &g))"),
                            forKey: "name")
                    }
                default:
                    if let v = volumes.randomElement(using: &g), !v.isDeleted {
                        try v.setValue(.string(titles.randomElement(using: &g)!), forKey: "title")
                    }
                }
            }
        }
        for round in 0..<400 {
            let steps = ["edit", "edit", "edit", "undo", "rollback", "save", "save", "batch update", "other save"]
            let step = steps.randomElement(using: &g)!
            do {
                switch step {
                case "edit": try mutate(ui)
                case "undo": if ui.canUndo { try ui.undoLastChange() }
                case "rollback": ui.rollback()
                case "save":
                    do {
                        try ui.save()
                    } catch let error as EntityStoreError where error.code == .validationFailed {
                        // An undo of a new volume's title (each write is a group of its own) leaves it without one.
                        ui.rollback()
                    }
                case "batch update":
                    try store.batchUpdate(
                        "Volume", where: try FetchPredicate("pages < \(Int.random(in: 0..<100, using: &g))"),
                        set: ["pages": .int(Int64.random(in: 0..<100, using: &g))])
                default:
                    try mutate(other)
                    try other.save()
                    other.reset()
                }
            } catch {
                Issue.record("seed \(seed), round \(round) \(step) threw \(error) after \(trace.suffix(8))")
                break
            }
            trace.append("\(round) \(step)")
            ui.processPendingChanges()
            let failed = try checkStep(
                controllers, delegates, store, round: round,
                after: "seed \(seed), after \(trace.suffix(8).joined(separator: ", "))")
            if failed || delegates.contains(where: { !$0.problems.isEmpty }) { break }
        }
        for d in delegates { #expect(d.problems.isEmpty, "\(d.problems.prefix(3))") }
        let replay = try HistoryReplay(store)
        #expect(replay.problems.isEmpty, "seed \(seed): \(replay.problems.prefix(40))")
    }
}

/// One step's checks for the fuzz tests: every controller equals a fresh fetch (sections and names) and its
/// callback replica, and every 50 rounds the store passes its integrity check. Records what differs, `after` naming
/// the steps that led there; returns whether anything did.
private func checkStep(
    _ controllers: [FetchedResultsController], _ delegates: [ReplicaDelegate], _ store: PersistentStore, round: Int,
    after: String
) throws -> Bool {
    var failed = false
    for (index, (controller, delegate)) in zip(controllers, delegates).enumerated() {
        if let (shown, fetched) = try differenceFromAFreshFetch(controller) {
            failed = true
            Issue.record("controller \(index) shows \(shown), a fetch \(fetched); \(after)")
        }
        if delegate.replica.sections != controller.sections.map(\.objectIDs) {
            failed = true
            Issue.record("controller \(index)'s replica differs; \(after); log \(delegate.log)")
        }
        delegate.log = []
    }
    if round % 50 == 49 {
        let (findings, _) = try store.checkIntegrity()
        if !findings.isEmpty {
            failed = true
            Issue.record("round \(round): \(findings); \(after)")
        }
    }
    return failed
}
