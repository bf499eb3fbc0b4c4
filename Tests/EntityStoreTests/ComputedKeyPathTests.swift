import EntityStore
import Foundation
import TestSupport
import Testing

/// A key path to a computed property is never taken for the stored property it reads: wherever key paths are
/// accepted, one that transforms a value, reads two, reads a value through a relationship and changes it, or reads
/// nothing is a clear error naming the key path and why. A computed property that returns a stored property (or a
/// path of them) unchanged gives the answers of that property.
@Suite struct ComputedKeyPathTests {
    final class Project: Model {
        @Stored var name: String
        @ToMany var tasks: [Task]
    }

    class Task: Model {
        @Stored var title: String
        @Stored var notes: String = ""
        @Stored var priority: Int = 0
        @Stored var done: Bool = false
        @ToOne var project: Project?
        var loudTitle: String { title.uppercased() }
        var sameTitle: String { title }
        var titleAndNotes: String { title + notes }
        var loudProject: String? { project?.name.uppercased() }
        var projectName: String? { project?.name }
        var isUrgent: Bool { priority > 3 }
        var notDone: Bool { !done }
        var nothing: String { "x" }
    }

    final class Chore: Task {
        var shortTitle: String { String(title.prefix(3)) }
    }

    final class Box<Content>: Model {
        override class var entityName: String { "Box" }
        @Stored var label: String
        var loudLabel: String { label.uppercased() }
    }

    static func world() throws -> (TemporaryStore, ObjectContext) {
        let schema = try Schema(version: 1, models: [Project.self, Task.self, Chore.self, Box<Int>.self])
        let temporary = try TemporaryStore(schema: schema)
        let context = ObjectContext(store: temporary.store)
        let project = try context.insert(Project.self)
        project.name = "Beta"
        for (i, title) in ["alpha", "beta0000", "BETA0000"].enumerated() {
            let task = try context.insert(i == 2 ? Chore.self : Task.self)
            task.title = title
            task.priority = i * 3
            task.project = project
        }
        try context.insert(Box<Int>.self).label = "box"
        try context.save()
        return (temporary, context)
    }

    /// The error a key path's use throws: invalidPredicate or invalidFetchRequest naming the key path (Swift prints
    /// a computed property's key path by its accessor's address, so by its model and what it reads) and why.
    func expectRefused(
        _ model: String, why: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
    ) {
        let keyPath = "a key path of \(model) that"
        do {
            try body()
            Issue.record(
                "a computed key path of \(model) was taken for a stored property", sourceLocation: sourceLocation)
        } catch let error as EntityStoreError {
            #expect(
                [.invalidPredicate, .invalidFetchRequest, .unknownKey, .validationFailed].contains(error.code),
                "\(error)",
                sourceLocation: sourceLocation)
            #expect(error.message.contains(keyPath), "\(error.message)", sourceLocation: sourceLocation)
            #expect(error.message.contains(why), "\(error.message)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(error)", sourceLocation: sourceLocation)
        }
    }

    @Test func aComputedPropertyInAPredicateIsRefusedNeverTakenForAnother() throws {
        let (temporary, context) = try Self.world()
        defer { temporary.remove() }
        expectRefused("Task", why: "it reads title and gives another value") {
            _ = try context.fetch(Task.self, where: \Task.loudTitle == "BETA0000")
        }
        expectRefused("Task", why: "it reads title, notes (title is no to-one relationship to go through)") {
            _ = try context.fetch(Task.self, where: \Task.titleAndNotes == "alpha")
        }
        expectRefused("Task", why: "it reads project, name and gives another value") {
            _ = try context.fetch(Task.self, where: \Task.loudProject == "BETA")
        }
        expectRefused("Task", why: "it reads priority and gives another value") {
            _ = try context.fetch(Task.self, where: \Task.isUrgent == true)
        }
        expectRefused("Task", why: "it reads done and gives another value") {
            _ = try context.fetch(Task.self, where: \Task.notDone == true)
        }
        expectRefused("Task", why: "reads no @Stored, @ToOne or @ToMany property") {
            _ = try context.fetch(Task.self, where: \Task.nothing == "x")
        }
        // Inherited and generic model classes alike.
        expectRefused("Chore", why: "it reads title and gives another value") {
            _ = try context.fetch(Chore.self, where: \Chore.shortTitle == "BET")
        }
        expectRefused("Box<Int>", why: "it reads label and gives another value") {
            _ = try context.fetch(Box<Int>.self, where: \Box<Int>.loudLabel == "BOX")
        }
        // Unchanged, a property (or a path) answers as what it returns.
        #expect(try context.fetch(Task.self, where: \Task.sameTitle == "alpha").map(\.title) == ["alpha"])
        #expect(try context.count(Task.self, where: \Task.projectName == "Beta") == 3)
        #expect(try context.count(Chore.self, where: \Chore.title == "BETA0000") == 1)
    }

    @Test func aComputedPropertyIsRefusedAsASortASectionAnAggregateAndABatchUpdate() throws {
        let (temporary, context) = try Self.world()
        defer { temporary.remove() }
        let store = temporary.store
        expectRefused("Task", why: "it reads title and gives another value") {
            _ = try context.fetch(Task.self, sortedBy: [SortKey(\Task.loudTitle)])
        }
        expectRefused("Task", why: "it reads project, name and gives another value") {
            let controller = ModelResultsController(
                ModelFetchRequest<Task>(sortedBy: [SortKey(\Task.title)]), context: context,
                sectionedBy: \Task.loudProject)
            try controller.performFetch()
        }
        expectRefused("Task", why: "it reads priority and gives another value") {
            var request = AggregateRequest(Task.self)
            request.group(by: \Task.isUrgent)
            _ = try context.aggregate(request)
        }
        expectRefused("Task", why: "it reads title, notes (title is no to-one relationship to go through)") {
            var request = AggregateRequest(Task.self)
            request.aggregates = [.maximum(\Task.titleAndNotes)]
            _ = try context.aggregate(request)
        }
        expectRefused("Task", why: "it reads title and gives another value") {
            try store.batchUpdate(Task.self, .set(\Task.loudTitle, "X"))
        }
        // Nothing was changed by the refused update.
        #expect(
            try ObjectContext(store: store).fetch(Task.self).map(\.title).sorted() == ["BETA0000", "alpha", "beta0000"])
    }
}
