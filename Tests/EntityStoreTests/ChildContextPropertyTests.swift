import Foundation
import TestSupport
import Testing

@testable import EntityStore

/// Child contexts at random, against a twin: every change made in a child is also made, on a second store with the
/// same contents, in a plain context. A child's save must leave its parent as the twin's save leaves its store, a
/// child's rollback or release must leave the parent as the twin's rollback leaves it, and the parent's save must
/// write what the twin wrote; undo and redo take back and put back the same changes on both; all along, the child
/// sees what the twin sees (its fetches, counts, windows and controllers through the parent, with its own changes on
/// top). Objects are named uniquely, so that the two stores are compared by names (their IDs may differ).
@Suite struct ChildContextPropertyTests {
    static var rounds: Int { TestScale.size(700, stress: 20_000) }

    @Test func childContextsDoWhatTheSameChangesDoInAPlainContext() throws {
        try childContextsAgainstATwin(seed: 0xC41D)
    }

    /// The test's workload from `seed` (other seeds: a scratch harness's sweeps).
    func childContextsAgainstATwin(seed: UInt64) throws {
        let first = try TemporaryStore(schema: try Fixtures.projectSchema())
        defer { first.remove() }
        let second = try TemporaryStore(schema: try Fixtures.projectSchema())
        defer { second.remove() }
        let parent = ObjectContext(store: first.store, name: "parent")
        let twin = ObjectContext(store: second.store, name: "twin")
        var child: ObjectContext?
        var g = SeededGenerator(seed: seed)
        var serial = 0
        func name(_ prefix: String) -> String {
            serial += 1
            return "\(prefix)\(serial)"
        }

        /// The same objects in two contexts, in name order (equal snapshots make positions name the same objects).
        func pairs(
            _ entity: String, _ mine: ObjectContext, _ theirs: ObjectContext
        ) throws -> [(
            ManagedObject, ManagedObject
        )] {
            let key = entity == "Task" ? "title" : "name"
            let request = FetchRequest(entity: entity, sortKeys: [SortKey(key)])
            let left = try mine.fetch(request)
            let right = try theirs.fetch(request)
            let leftNames = try left.map { try $0[key] }
            let rightNames = try right.map { try $0[key] }
            try #require(leftNames == rightNames, "\(entity): \(leftNames) against \(rightNames)")
            return Array(zip(left, right))
        }

        /// One random change, made alike in `mine` and `theirs` (the same objects by name).
        func change(_ mine: ObjectContext, _ theirs: ObjectContext) throws -> String {
            let tasks = try pairs("Task", mine, theirs)
            let projects = try pairs("Project", mine, theirs)
            let tags = try pairs("Tag", mine, theirs)
            func both(_ body: (ObjectContext, Int) throws -> Void) rethrows {
                try body(mine, 0)
                try body(theirs, 1)
            }
            func pick<T>(_ list: [(T, T)], _ side: Int, _ index: Int) -> T { side == 0 ? list[index].0 : list[index].1 }
            /// Adds `members[j]` to `owners[i]`'s to-many `key` on both sides, or removes it where it is there;
            /// whether it removed.
            func toggle(
                _ owners: [(ManagedObject, ManagedObject)], _ i: Int, _ key: String,
                _ members: [(ManagedObject, ManagedObject)], _ j: Int
            ) throws -> Bool {
                let linked = try owners[i].0.objectIDs(forKey: key).contains(members[j].0.objectID)
                try both { _, side in
                    if linked {
                        try pick(owners, side, i).remove(pick(members, side, j), fromKey: key)
                    } else {
                        try pick(owners, side, i).add(pick(members, side, j), toKey: key)
                    }
                }
                return linked
            }
            switch Int.random(in: 0..<16, using: &g) {
            case 0, 1, 2:
                let title = name("t")
                let rank = Int64.random(in: 0..<20, using: &g)
                let project =
                    projects.isEmpty || Int.random(in: 0..<4, using: &g) == 0
                    ? nil : projects.indices.randomElement(using: &g)
                let tag = tags.isEmpty || Bool.random(using: &g) ? nil : tags.indices.randomElement(using: &g)
                try both { context, side in
                    let task = try context.insert("Task")
                    try task.setValue(.string(title), forKey: "title")
                    try task.setValue(.int(rank), forKey: "rank")
                    if let project { try task.setObject(pick(projects, side, project), forKey: "project") }
                    if let tag { try task.add(pick(tags, side, tag), toKey: "tags") }
                }
                return "insert task \(title)"
            case 3:
                guard let i = tasks.indices.randomElement(using: &g) else { return "none" }
                try both { context, side in try context.delete(pick(tasks, side, i)) }
                return "delete task \(try tasks[i].0["title"])"
            case 4, 5:
                guard let i = tasks.indices.randomElement(using: &g) else { return "none" }
                let rank = Int64.random(in: 0..<20, using: &g)
                try both { _, side in try pick(tasks, side, i).setValue(.int(rank), forKey: "rank") }
                return "rank \(try tasks[i].0["title"]) \(rank)"
            case 6:
                guard let i = tasks.indices.randomElement(using: &g) else { return "none" }
                let notes: Value = Bool.random(using: &g) ? .null : .string(name("n"))
                try both { _, side in try pick(tasks, side, i).setValue(notes, forKey: "notes") }
                return "notes \(try tasks[i].0["title"]) \(notes)"
            case 7, 8:
                guard let i = tasks.indices.randomElement(using: &g) else { return "none" }
                let project =
                    projects.isEmpty || Int.random(in: 0..<5, using: &g) == 0
                    ? nil : projects.indices.randomElement(using: &g)
                try both { _, side in
                    try pick(tasks, side, i).setObject(project.map { pick(projects, side, $0) }, forKey: "project")
                }
                return "move \(try tasks[i].0["title"]) to \(try project.map { try projects[$0].0["name"] } ?? .null)"
            case 9:
                guard let i = projects.indices.randomElement(using: &g), let j = tasks.indices.randomElement(using: &g)
                else { return "none" }
                let removed = try toggle(projects, i, "tasks", tasks, j)
                return "\(removed ? "remove" : "add") \(try tasks[j].0["title"]) in \(try projects[i].0["name"])"
            case 10:
                guard let i = tasks.indices.randomElement(using: &g), let j = tags.indices.randomElement(using: &g)
                else { return "none" }
                let removed = try toggle(tasks, i, "tags", tags, j)
                return "\(removed ? "untag" : "tag") \(try tasks[i].0["title"]) \(try tags[j].0["name"])"
            case 11:
                if projects.count < 5 || Bool.random(using: &g) {
                    let project = name("p")
                    try both { context, _ in
                        try context.insert("Project").setValue(.string(project), forKey: "name")
                    }
                    return "insert project \(project)"
                }
                let i = projects.indices.randomElement(using: &g)!
                try both { context, side in try context.delete(pick(projects, side, i)) }  // its tasks cascade
                return "delete project \(try projects[i].0["name"])"
            case 12:
                guard let i = projects.indices.randomElement(using: &g) else { return "none" }
                let renamed = name("p")
                let archived = Bool.random(using: &g)
                try both { _, side in
                    let project = pick(projects, side, i)
                    try project.setValue(.string(renamed), forKey: "name")
                    try project.setValue(.bool(archived), forKey: "archived")
                }
                return "rename \(try projects[i].0["name"]) \(renamed) archived \(archived)"
            case 13:
                if tags.count < 3 || Bool.random(using: &g) {
                    let tag = name("g")
                    try both { context, _ in try context.insert("Tag").setValue(.string(tag), forKey: "name") }
                    return "insert tag \(tag)"
                }
                let i = tags.indices.randomElement(using: &g)!
                try both { context, side in try context.delete(pick(tags, side, i)) }  // nullified
                return "delete tag \(try tags[i].0["name"])"
            case 14:
                // Inserted and deleted before any save: nothing of it may reach the parent.
                let title = name("t")
                let project = projects.indices.randomElement(using: &g)
                try both { context, side in
                    let task = try context.insert("Task")
                    try task.setValue(.string(title), forKey: "title")
                    if let project { try task.setObject(pick(projects, side, project), forKey: "project") }
                    try context.delete(task)
                }
                return "insert and delete \(title)"
            default:
                // A value set and set back.
                guard let i = tasks.indices.randomElement(using: &g) else { return "none" }
                try both { _, side in
                    let task = pick(tasks, side, i)
                    let rank = try task["rank"]
                    try task.setValue(.int(99), forKey: "rank")
                    try task.setValue(rank, forKey: "rank")
                }
                return "rank \(try tasks[i].0["title"]) set back"
            }
        }

        let sortings = [
            [SortKey("rank"), SortKey("title")],
            [SortKey("project.name", ascending: false), SortKey("title")],
        ]
        let predicates = [
            "TRUEPREDICATE", "rank >= 10", "project.archived == NO AND rank < 15", "ANY tags.name != 'x'",
            "project == nil", "notes != nil",
        ]
        /// The names of what a request finds in `context`: the whole list, a window of it, its count.
        func answers(_ context: ObjectContext, _ predicate: String, _ sorting: [SortKey]) throws -> String {
            var request = FetchRequest(entity: "Task", predicate: try FetchPredicate(predicate), sortKeys: sorting)
            let all = try context.fetch(request).map { try $0["title"].stringValue }
            request.fetchOffset = 1
            request.fetchLimit = 3
            let window = try context.fetch(request).map { try $0["title"].stringValue }
            let count = try context.count(for: FetchRequest(entity: "Task", predicate: try FetchPredicate(predicate)))
            return "\(all) window \(window) count \(count)"
        }

        // The same start in both stores.
        for context in [parent, twin] {
            for p in 0..<3 { try context.insert("Project").setValue(.string("p0\(p)"), forKey: "name") }
            for t in 0..<3 { try context.insert("Tag").setValue(.string("g0\(t)"), forKey: "name") }
            try context.save()
        }
        for _ in 0..<12 { _ = try change(parent, twin) }
        try parent.save()
        try twin.save()

        var steps: [String] = []
        var counts: [String: Int] = [:]
        var childController: (FetchedResultsController, FetchedResultsController, ReplicaDelegate)?
        for round in 0..<Self.rounds {
            let step: String
            switch Int.random(in: 0..<27, using: &g) {
            case 0..<12:
                if child == nil {
                    child = ObjectContext(parent: parent, name: "child")
                    if Int.random(in: 0..<3, using: &g) == 0 {
                        // A controller on the child, and its twin's: the same rows in the same order all along.
                        let sorting = sortings.randomElement(using: &g)!
                        let predicate = try FetchPredicate(predicates.randomElement(using: &g)!)
                        let mine = FetchedResultsController(
                            fetchRequest: FetchRequest(entity: "Task", predicate: predicate, sortKeys: sorting),
                            context: child!, sectionNameKeyPath: Bool.random(using: &g) ? "project.name" : nil)
                        let theirs = FetchedResultsController(
                            fetchRequest: mine.fetchRequest, context: twin,
                            sectionNameKeyPath: mine.sectionNameKeyPath)
                        try mine.performFetch()
                        try theirs.performFetch()
                        let delegate = ReplicaDelegate(mine)
                        mine.delegate = delegate
                        childController = (mine, theirs, delegate)
                    }
                }
                // One undo group a change, on both sides.
                child!.beginUndoGrouping()
                twin.beginUndoGrouping()
                step = "child: " + (try change(child!, twin))
                child!.endUndoGrouping()
                twin.endUndoGrouping()
            case 12..<15:
                step = "child save"
                try child?.save()
                try twin.save()
            case 15:
                step = "child rollback"
                child?.rollback()
                twin.rollback()
            case 16:
                step = "child released"
                child = nil
                childController = nil
                twin.rollback()
            case 17, 18:
                step = "parent save"
                try parent.save()
            case 19:
                // The parent changes only when no child holds changes (a child's objects are its own copies).
                if child?.hasChanges == true {
                    step = "none"
                    break
                }
                child = nil
                childController = nil
                step = "parent: " + (try change(parent, twin))
                try twin.save()
                // The next child starts without undo groups; so does the twin (a save with nothing to write keeps
                // them: a change set back, an object inserted and deleted).
                twin.rollback()
                // A plain context runs its delete rules when it saves: the parent's deletes are saved at once, so
                // that it holds what the twin's store holds (a child's save runs them before it hands over).
                if !parent.deletedObjects.isEmpty { try parent.save() }
            case 24, 25:
                // Undo and redo take back and put back the same changes on both sides.
                let redoes = Int.random(in: 0..<2, using: &g) == 1
                step = redoes ? "child redo" : "child undo"
                guard let child else { break }
                let can = redoes ? (child.canRedo, twin.canRedo) : (child.canUndo, twin.canUndo)
                #expect(
                    can.0 == can.1,
                    "round \(round) \(step) after \(steps.suffix(8)): the child can \(can.0), the twin \(can.1)")
                guard can.0 && can.1 else { break }
                if redoes {
                    try child.redoLastChange()
                    try twin.redoLastChange()
                } else {
                    try child.undoLastChange()
                    try twin.undoLastChange()
                }
            default:
                step = "fetch"
                if let child {
                    let predicate = predicates.randomElement(using: &g)!
                    let sorting = sortings.randomElement(using: &g)!
                    let mine = try answers(child, predicate, sorting)
                    let theirs = try answers(twin, predicate, sorting)
                    #expect(mine == theirs, "round \(round) \(predicate): the child found \(mine), the twin \(theirs)")
                }
            }
            steps.append(step)
            counts[String(step.prefix { $0 != ":" }), default: 0] += 1
            let trail = "round \(round) \(step), after \(steps.suffix(8))"

            // The child sees what the twin sees; the parent holds what the twin's store holds.
            if let child {
                let mine = try snapshot(child)
                let theirs = try snapshot(twin)
                if mine != theirs {
                    Issue.record("\(trail): the child differs from the twin: \(difference(mine, theirs))")
                    break
                }
                child._checkInvariants()
            }
            if child?.hasChanges != true {
                let mine = try snapshot(parent)
                let theirs = try snapshot(ObjectContext(store: second.store))
                if mine != theirs {
                    Issue.record("\(trail): the parent differs from the twin's store: \(difference(mine, theirs))")
                    break
                }
            }
            if step == "parent save" {
                let mine = try snapshot(ObjectContext(store: first.store))
                let theirs = try snapshot(ObjectContext(store: second.store))
                if mine != theirs {
                    Issue.record("\(trail): the stores differ: \(difference(mine, theirs))")
                    break
                }
            }
            parent._checkInvariants()
            twin._checkInvariants()
            if let (mine, theirs, delegate) = childController {
                // Controllers show processed changes.
                child!.processPendingChanges()
                twin.processPendingChanges()
                let left = try mine.sections.map { section in
                    try section.objectIDs.map { try child!.existingObject(with: $0)["title"].stringValue }
                }
                let right = try theirs.sections.map { section in
                    try section.objectIDs.map { try twin.existingObject(with: $0)["title"].stringValue }
                }
                if left != right || mine.sections.map(\.name) != theirs.sections.map(\.name) {
                    Issue.record("\(trail): the child's controller shows \(left), the twin's \(right)")
                    break
                }
                if delegate.replica.sections != mine.sections.map(\.objectIDs) || !delegate.problems.isEmpty {
                    Issue.record("\(trail): the child's controller's batches: \(delegate.problems.prefix(3))")
                    break
                }
            }
        }
        try child?.save()
        try twin.save()
        try parent.save()
        let mine = try snapshot(ObjectContext(store: first.store))
        let theirs = try snapshot(ObjectContext(store: second.store))
        #expect(mine == theirs, "at the end: \(difference(mine, theirs))")
        #expect(try first.store.checkIntegrity().findings.isEmpty)
        #expect(try second.store.checkIntegrity().findings.isEmpty)
        for store in [first.store, second.store] {
            let replay = try HistoryReplay(store)
            #expect(replay.problems.isEmpty, "\(replay.problems.prefix(40))")
        }
        #expect((counts["child save"] ?? 0) > Self.rounds / 20, "steps \(counts)")
        print("child context property test: \(Self.rounds) rounds, steps \(counts)")
    }

    /// Every object of the project schema, by name, with its values and the names of what it links to.
    func snapshot(_ context: ObjectContext) throws -> [String] {
        var lines: [String] = []
        func names(_ objects: [ManagedObject], _ key: String) throws -> [String] {
            try objects.map { try $0[key].stringValue }.sorted()
        }
        for project in try context.fetch(FetchRequest(entity: "Project", sortKeys: [SortKey("name")])) {
            lines.append(
                "project \(try project["name"]) archived \(try project["archived"]) tasks \(try names(project.objects(forKey: "tasks"), "title"))"
            )
        }
        for task in try context.fetch(FetchRequest(entity: "Task", sortKeys: [SortKey("title")])) {
            let project = try task.object(forKey: "project").map { try $0["name"] } ?? .null
            lines.append(
                "task \(try task["title"]) rank \(try task["rank"]) notes \(try task["notes"]) project \(project) tags \(try names(task.objects(forKey: "tags"), "name"))"
            )
        }
        for tag in try context.fetch(FetchRequest(entity: "Tag", sortKeys: [SortKey("name")])) {
            lines.append("tag \(try tag["name"]) tasks \(try names(tag.objects(forKey: "tasks"), "title"))")
        }
        return lines
    }

    /// The lines only one side has.
    func difference(_ mine: [String], _ theirs: [String]) -> String {
        "only here \(mine.filter { !theirs.contains($0) }), only there \(theirs.filter { !mine.contains($0) })"
    }
}
