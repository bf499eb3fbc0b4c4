import EntityStore
import Foundation
import TestSupport
import Testing

func projectSchema() throws -> Schema { try Fixtures.projectSchema() }

/// A project store with named projects and tasks, and a controller over the tasks.
final class ProjectWorld {
    let temporary: TemporaryStore
    let context: ObjectContext
    var projects: [String: ManagedObject] = [:]
    var tasks: [String: ManagedObject] = [:]

    init() throws {
        temporary = try TemporaryStore(schema: try projectSchema())
        context = ObjectContext(store: temporary.store, name: "ui")
    }

    var store: PersistentStore { temporary.store }

    func project(_ name: String, archived: Bool = false) throws {
        let project = try context.insert("Project")
        try project.setValue(.string(name), forKey: "name")
        try project.setValue(.bool(archived), forKey: "archived")
        projects[name] = project
    }

    func task(_ title: String, in project: String, rank: Int64) throws {
        let task = try context.insert("Task")
        try task.setValue(.string(title), forKey: "title")
        try task.setValue(.int(rank), forKey: "rank")
        try task.setObject(projects[project], forKey: "project")
        tasks[title] = task
    }

    func controller(
        predicate: String? = nil, sectioned: Bool = true, delegate: RecordingDelegate
    ) throws -> FetchedResultsController {
        var request = FetchRequest(entity: "Task", sortKeys: [SortKey("rank")])
        request.predicate = try predicate.map { try FetchPredicate($0) }
        let controller = FetchedResultsController(
            fetchRequest: request, context: context, sectionNameKeyPath: sectioned ? "project.name" : nil)
        controller.delegate = delegate
        try controller.performFetch()
        for (title, task) in tasks { delegate.names[task.objectID] = title }
        return controller
    }

    /// "Alpha:a1,a2 Beta:b1".
    func layout(_ controller: FetchedResultsController) -> String {
        let titles = Dictionary(uniqueKeysWithValues: tasks.map { ($0.value.objectID, $0.key) })
        return controller.sections.map { section in
            section.name + ":" + section.objectIDs.map { titles[$0] ?? "?" }.joined(separator: ",")
        }.joined(separator: " ")
    }

    /// Alpha: a1 a2 a3; Beta: b1 b2; saved.
    static func standard() throws -> ProjectWorld {
        let world = try ProjectWorld()
        try world.project("Alpha")
        try world.project("Beta")
        for (i, title) in ["a1", "a2", "a3"].enumerated() { try world.task(title, in: "Alpha", rank: Int64(i)) }
        for (i, title) in ["b1", "b2"].enumerated() { try world.task(title, in: "Beta", rank: Int64(10 + i)) }
        try world.context.save()
        return world
    }
}

@Suite struct RelationshipContractTests {
    /// The first change of b1 (a tag added) records its state before its project is loaded; moving it to Alpha
    /// afterwards is still a change of "project", reported against the project it was loaded with.
    @Test func aToOneChangeLoadedAfterTheObjectsFirstChangeIsReportedAndMovesTheRow() throws {
        let world = try ProjectWorld.standard()
        defer { world.temporary.remove() }
        let hot = try world.context.insert("Tag")
        try hot.setValue(.string("hot"), forKey: "name")
        try world.context.save()

        let context = ObjectContext(store: world.store, name: "fresh")
        let request = FetchRequest(entity: "Task", sortKeys: [SortKey("rank")])
        let controller = FetchedResultsController(
            fetchRequest: request, context: context, sectionNameKeyPath: "project.name")
        let delegate = RecordingDelegate()
        controller.delegate = delegate
        try controller.performFetch()
        var records: [ChangeRecord] = []
        let token = context.addObserver { records.append($0) }
        defer { token.cancel() }

        let b1 = try context.existingObject(with: world.tasks["b1"]!.objectID)
        delegate.names[b1.objectID] = "b1"
        try b1.add(try context.existingObject(with: hot.objectID), toKey: "tags")
        try b1.setObject(try context.existingObject(with: world.projects["Alpha"]!.objectID), forKey: "project")
        context.processPendingChanges()

        let change = records.last?.changes.first { $0.objectID == b1.objectID }
        #expect(change?.changedKeys.sorted() == ["project", "tags"])
        #expect(change?.oldRelationships["project"] == [world.projects["Beta"]!.objectID])
        #expect(delegate.calls == ["will", "move b1 [1,0]->[0,3]", "did"])
        #expect(controller.sections.map(\.name) == ["Alpha", "Beta"])
        #expect(controller.sections.map(\.objectIDs.count) == [4, 1])
    }

    @Test func deletingATaskAndSavingIsOneBatch() throws {
        let world = try ProjectWorld.standard()
        defer { world.temporary.remove() }
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        try world.context.delete(world.tasks["a2"]!)
        try world.context.save()
        #expect(delegate.calls == ["will", "del a2 [0,1]", "did"])
        #expect(world.layout(controller) == "Alpha:a1,a3 Beta:b1,b2")
    }

    @Test func addingATaskToAProjectUpdatesNoOtherTask() throws {
        let world = try ProjectWorld.standard()
        defer { world.temporary.remove() }
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        try world.task("a4", in: "Alpha", rank: 3)
        delegate.names[world.tasks["a4"]!.objectID] = "a4"
        world.context.processPendingChanges()
        #expect(delegate.take() == ["ins a4 [0,3]"])
        try world.context.save()
        #expect(delegate.calls.isEmpty, "the save repeats what was processed: \(delegate.calls)")
        #expect(world.layout(controller) == "Alpha:a1,a2,a3,a4 Beta:b1,b2")
    }

    @Test func renamingAProjectMovesItsTasksAsTheSectionGoes() throws {
        let world = try ProjectWorld.standard()
        defer { world.temporary.remove() }
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        // Alpha becomes Gamma: its section is deleted and inserted after Beta; the tasks go with it.
        try world.projects["Alpha"]!.setValue("Gamma", forKey: "name")
        try world.context.save()
        #expect(delegate.calls == ["will", "sdel 0", "sins 1", "did"])
        delegate.calls = []
        #expect(world.layout(controller) == "Beta:b1,b2 Gamma:a1,a2,a3")
        // Renaming a project without reordering sections: a section delete and insert at the same place.
        try world.projects["Beta"]!.setValue("Bravo", forKey: "name")
        try world.context.save()
        #expect(delegate.take() == ["sdel 0", "sins 0"])
    }

    @Test func movingATaskToAnotherProjectIsOneMove() throws {
        let world = try ProjectWorld.standard()
        defer { world.temporary.remove() }
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        try world.tasks["a2"]!.setObject(world.projects["Beta"], forKey: "project")
        try world.context.save()
        #expect(delegate.calls == ["will", "move a2 [0,1]->[1,0]", "did"])
        #expect(world.layout(controller) == "Alpha:a1,a3 Beta:a2,b1,b2")
    }

    @Test func deletingAProjectCascadesToItsTasksAndSectionInOneBatch() throws {
        let world = try ProjectWorld.standard()
        defer { world.temporary.remove() }
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        try world.context.delete(world.projects["Alpha"]!)
        try world.context.save()
        #expect(delegate.calls == ["will", "sdel 0", "did"])
        #expect(world.layout(controller) == "Beta:b1,b2")
        #expect(try world.context.count(for: FetchRequest(entity: "Task")) == 2)
    }

    @Test func aPredicateThroughARelationshipFollowsTheRelatedObject() throws {
        let world = try ProjectWorld.standard()
        defer { world.temporary.remove() }
        let delegate = RecordingDelegate()
        let controller = try world.controller(predicate: "project.archived == NO", sectioned: false, delegate: delegate)
        #expect(controller.fetchedObjectIDs.count == 5)
        try world.projects["Beta"]!.setValue(true, forKey: "archived")
        try world.context.save()
        #expect(delegate.take() == ["del b2 [0,4]", "del b1 [0,3]"])
        try world.projects["Beta"]!.setValue(false, forKey: "archived")
        world.context.processPendingChanges()
        #expect(delegate.take() == ["ins b1 [0,3]", "ins b2 [0,4]"])
        // A change of the project that the predicate does not read touches no task.
        try world.projects["Beta"]!.setValue("Beta 2", forKey: "name")
        world.context.processPendingChanges()
        #expect(delegate.take().isEmpty)
    }

    @Test func aChangeMergedFromAnotherContextIsOneBatch() throws {
        let world = try ProjectWorld.standard()
        defer { world.temporary.remove() }
        let delegate = RecordingDelegate()
        let controller = try world.controller(delegate: delegate)
        let other = ObjectContext(store: world.store)
        try other.delete(try other.existingObject(with: world.projects["Beta"]!.objectID))
        try other.existingObject(with: world.tasks["a1"]!.objectID).setValue(7, forKey: "rank")
        try other.save()
        world.context.merge(try world.store.history().last!)
        #expect(delegate.calls == ["will", "sdel 1", "move a1 [0,0]->[0,2]", "did"])
        #expect(world.layout(controller) == "Alpha:a2,a3,a1")
    }
}
