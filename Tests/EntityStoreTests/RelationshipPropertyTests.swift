import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// The change contract at random where relationships take part: controllers sectioned and sorted by to-one key
/// paths, predicates through relationships and to-many `ANY`, fetch windows; related objects renamed, re-parented,
/// deleted with cascade and nullify; changes arriving as unsaved processed changes, saves, rollbacks, merges from a
/// second context and another process's commits. Every batch is checked by the strict validator and a
/// callback-only replica, each controller equals a fresh fetch after every step, each step is at most one batch, and
/// the incremental twins deliver exactly what the whole-list computation delivers.
@Suite struct RelationshipPropertyTests {
    static var rounds: Int { TestScale.size(1_000, stress: 10_000) }

    @Test func randomWorkloadsThroughRelationshipsKeepTheContract() throws {
        try randomWorkloadsThroughRelationships(seed: 0x5EED)
    }

    /// The test's workload from `seed` (other seeds: a scratch harness's sweeps).
    func randomWorkloadsThroughRelationships(seed: UInt64) throws {
        let temporary = try TemporaryStore(schema: try Fixtures.projectSchema())
        defer { temporary.remove() }
        let store = temporary.store
        let context = ObjectContext(store: store, name: "ui")
        var g = SeededGenerator(seed: seed)
        let projectNames = ["P0", "P1", "P2", "P3", "P4", "P5"]
        let tagNames = ["hot", "cold", "new"]
        for name in projectNames.prefix(4) {
            let project = try context.insert("Project")
            try project.setValue(.string(name), forKey: "name")
        }
        for name in tagNames {
            let tag = try context.insert("Tag")
            try tag.setValue(.string(name), forKey: "name")
        }
        try context.save()
        var serial = 0
        func fetch(_ entity: String) throws -> [ManagedObject] {
            try context.fetch(FetchRequest(entity: entity, sortKeys: [SortKey("name")]))
        }
        func addTask() throws {
            let task = try context.insert("Task")
            serial += 1
            try task.setValue(.string("t\(serial)"), forKey: "title")
            try task.setValue(.int(Int64.random(in: 0..<50, using: &g)), forKey: "rank")
            if let project = try fetch("Project").randomElement(using: &g), Int.random(in: 0..<6, using: &g) > 0 {
                try task.setObject(project, forKey: "project")
            }
            if let tag = try fetch("Tag").randomElement(using: &g), Bool.random(using: &g) {
                try task.add(tag, toKey: "tags")
            }
        }
        for _ in 0..<30 { try addTask() }
        try context.save()

        func makeController(
            _ entity: String = "Task", sort: [SortKey], predicate: String? = nil, section: String? = nil,
            offset: Int = 0, limit: Int = 0, pending: Bool = true
        ) throws -> FetchedResultsController {
            var request = FetchRequest(entity: entity, sortKeys: sort)
            request.predicate = try predicate.map { try FetchPredicate($0) }
            request.fetchOffset = offset
            request.fetchLimit = limit
            request.includesPendingChanges = pending
            let controller = FetchedResultsController(
                fetchRequest: request, context: context, sectionNameKeyPath: section)
            try controller.performFetch()
            return controller
        }
        let byProject = [SortKey("rank"), SortKey("title")]
        let controllers = [
            try makeController(sort: byProject, section: "project.name"),
            try makeController(
                sort: [SortKey("project.name", ascending: false), SortKey("rank")], predicate: "project.archived == NO"),
            try makeController(sort: [SortKey("rank")], predicate: "ANY tags.name == 'hot'", offset: 2, limit: 6),
            try makeController(sort: byProject, section: "project.name", pending: false),
            try makeController("Project", sort: [SortKey("name")], predicate: "tasks.@count > 3"),
        ]
        // Incremental twins of the unwindowed controllers: they must deliver what the whole-list computation does.
        let twins = [
            try makeController(sort: byProject, section: "project.name"),
            try makeController(
                sort: [SortKey("project.name", ascending: false), SortKey("rank")], predicate: "project.archived == NO"),
        ]
        twins[1].mergeThreshold = 0
        let delegates = controllers.map { ReplicaDelegate($0) }
        let twinDelegates = twins.map { ReplicaDelegate($0, wholeBatches: false) }
        for (controller, delegate) in zip(controllers + twins, delegates + twinDelegates) {
            controller.delegate = delegate
        }

        let other = ObjectContext(store: store, name: "other")
        var records: [String] = []
        let recorder = context.addObserver { record in
            let changes = record.changes.map { change in "\(change.kind) \(change.objectID) \(change.changedKeys)" }
            records.append("\(record.kind): \(changes.joined(separator: "; "))")
        }
        defer { recorder.cancel() }
        var totalBatches = 0
        var steps: [String: Int] = [:]
        // The history position merged so far (each run's own: a run after another in one process starts over).
        var lastMerged: UInt64 = 0
        for round in 0..<Self.rounds {
            func mutate(_ target: ObjectContext) throws {
                let tasks = try target.fetch(FetchRequest(entity: "Task"))
                let projects = try target.fetch(FetchRequest(entity: "Project"))
                let tags = try target.fetch(FetchRequest(entity: "Tag"))
                for _ in 0..<Int.random(in: 1...3, using: &g) {
                    switch Int.random(in: 0..<14, using: &g) {
                    case 0, 1:
                        if target === context { try addTask() }
                    case 2:
                        if let task = tasks.randomElement(using: &g), !task.isDeleted { try target.delete(task) }
                    case 3, 4:
                        if let task = tasks.randomElement(using: &g), !task.isDeleted {
                            try task.setValue(.int(Int64.random(in: 0..<50, using: &g)), forKey: "rank")
                        }
                    case 5:
                        // A key no controller reads.
                        if let task = tasks.randomElement(using: &g), !task.isDeleted {
                            try task.setValue(.string("n\(round)"), forKey: "notes")
                        }
                    case 6, 7:
                        if let task = tasks.randomElement(using: &g), !task.isDeleted {
                            try task.setObject(
                                projects.filter { !$0.isDeleted }.randomElement(using: &g), forKey: "project")
                        }
                    case 8:
                        if let project = projects.randomElement(using: &g), !project.isDeleted {
                            try project.setValue(.string(projectNames.randomElement(using: &g)!), forKey: "name")
                        }
                    case 9:
                        if let project = projects.randomElement(using: &g), !project.isDeleted {
                            try project.setValue(.bool(Bool.random(using: &g)), forKey: "archived")
                        }
                    case 10:
                        if projects.count < 6 {
                            let project = try target.insert("Project")
                            try project.setValue(.string(projectNames.randomElement(using: &g)!), forKey: "name")
                        } else if let project = projects.randomElement(using: &g), !project.isDeleted,
                            Int.random(in: 0..<3, using: &g) == 0
                        {
                            try target.delete(project)  // its tasks cascade
                        }
                    case 11:
                        if let task = tasks.randomElement(using: &g), let tag = tags.randomElement(using: &g),
                            !task.isDeleted, !tag.isDeleted
                        {
                            if try task.objectIDs(forKey: "tags").contains(tag.objectID) {
                                try task.remove(tag, fromKey: "tags")
                            } else {
                                try task.add(tag, toKey: "tags")
                            }
                        }
                    case 12:
                        if let tag = tags.randomElement(using: &g), !tag.isDeleted {
                            try tag.setValue(.string(tagNames.randomElement(using: &g)!), forKey: "name")
                        }
                    default:
                        if let tag = tags.randomElement(using: &g), !tag.isDeleted, tags.count > 2 {
                            try target.delete(tag)  // nullify: its tasks lose it
                        } else {
                            let tag = try target.insert("Tag")
                            try tag.setValue(.string(tagNames.randomElement(using: &g)!), forKey: "name")
                        }
                    }
                }
            }
            // Steps that begin with a save of the context (a batch of its own) make it before counting batches.
            let kind = Int.random(in: 0..<20, using: &g)
            if kind >= 13 {
                try saveOrRollBack(context)
                for delegate in delegates + twinDelegates { delegate.log = [] }
            }
            records = []
            let before = delegates.map(\.batches) + twinDelegates.map(\.batches)
            let step: String
            switch kind {
            case 0..<6:
                step = "process"
                try mutate(context)
                context.processPendingChanges()
            case 6..<11:
                step = "save"
                try mutate(context)
                try saveOrRollBack(context)
            case 11..<13:
                step = "rollback"
                try mutate(context)
                context.rollback()
            case 13..<19:
                step = "merge"
                try mutate(other)
                try saveOrRollBack(other)
                for record in try store.history(since: lastMerged) where record.contextID != context.contextID {
                    context.merge(record)
                }
            default:
                step = "process commit"
                let output = try ChildProcess.helper(["project-saver", temporary.path, "\(round)"])
                #expect(output.status == 0, "\(output.stderr)")
                for record in try store.history(since: lastMerged) where record.contextID != context.contextID {
                    context.merge(record)
                }
            }
            lastMerged = try store.lastTransaction()
            // Both contexts' bookkeeping (unsaved objects, pending changes) agrees with their objects after each step.
            context._checkInvariants()
            other._checkInvariants()
            other.reset()
            steps[step, default: 0] += 1
            let after = delegates.map(\.batches) + twinDelegates.map(\.batches)
            for (i, (b, a)) in zip(before, after).enumerated() where a - b > 1 {
                Issue.record("round \(round) \(step): controller \(i) delivered \(a - b) batches for one step")
            }
            totalBatches += zip(before, after).map { $1 - $0 }.reduce(0, +)

            for (twin, original) in [(0, 0), (1, 1)] {
                #expect(twinDelegates[twin].log == delegates[original].log, "round \(round) \(step) twin \(twin)")
                twinDelegates[twin].log = []
                delegates[original].log = []
            }
            for (index, (controller, delegate)) in zip(controllers + twins, delegates + twinDelegates).enumerated() {
                defer { delegate.log = [] }
                let fresh = FetchedResultsController(
                    fetchRequest: controller.fetchRequest, context: context,
                    sectionNameKeyPath: controller.sectionNameKeyPath)
                try fresh.performFetch()
                let shown = controller.sections.map(\.objectIDs)
                if shown != fresh.sections.map(\.objectIDs)
                    || controller.sections.map(\.name) != fresh.sections.map(\.name)
                {
                    let mine = controller.sections.map { section in "\(section.name):\(section.objectIDs)" }
                    let theirs = fresh.sections.map { section in "\(section.name):\(section.objectIDs)" }
                    let message = "round \(round) \(step): controller \(index) differs from a fresh fetch: \(mine)"
                    var stale: [String] = []
                    for project in try context.fetch(FetchRequest(entity: "Project")) {
                        let cached = project.related["tasks"]
                        let stored = try context.storedTargets(
                            of: project.objectID, project.entity.relationship("tasks")!)
                        if let cached, cached != stored, !project.hasChanges {
                            stale.append("\(project.objectID) cached \(cached.sorted()) stored \(stored.sorted())")
                        }
                    }
                    Issue.record("\(message) vs \(theirs); records \(records); stale \(stale)")
                }
                if delegate.replica.sections != shown {
                    Issue.record(
                        "round \(round) \(step): controller \(index)'s replica differs: \(delegate.replica.sections) vs \(shown); log \(delegate.log)"
                    )
                }
            }
            if (delegates + twinDelegates).contains(where: { !$0.problems.isEmpty }) { break }
        }
        for delegate in delegates + twinDelegates {
            #expect(delegate.problems.isEmpty, "\(delegate.problems.prefix(5))")
        }
        let replay = try HistoryReplay(store)
        #expect(replay.problems.isEmpty, "seed \(seed): \(replay.problems.prefix(40))")
        #expect(totalBatches >= 2_000, "only \(totalBatches) batches")
        print("relationship property test: \(Self.rounds) rounds, \(totalBatches) batches checked, steps \(steps)")
    }
}

/// Saves, or rolls back when the save is refused (a conflict with the other context's save).
private func saveOrRollBack(_ context: ObjectContext) throws {
    do {
        try context.save()
    } catch let error as EntityStoreError where error.code == .conflict || error.code == .validationFailed {
        context.rollback()
    }
}
