import EntityStore
import EntityStoreSync
import Foundation
import TestSupport
import Testing

/// Three stores in one process edit at random (inserts, renames, moves between projects, tags, deletes with their
/// cascades, batch updates and deletes, names that collide across stores) and sync in a random order through one
/// server, under both delete policies; or sync in the background while the edits go on. Every store then holds the
/// same objects, its integrity check finds nothing, and a merging controller equals a fresh fetch after every sync.
///
/// Random workloads like this one found a store making a second copy of its own object (a cascade of a pulled page,
/// undone by a later page), deletes of objects never read reaching the server under another global ID, cascades
/// that left objects alive on the server under `newestWins`, pulls failing on a local save in between, a store
/// keeping the loser of a uniqueness conflict it had decided itself (the server knew no origin for it), and a page
/// copying in again an object the app deleted while the page was being applied.
@Suite(
    "Sync: random edits converge",
    .enabled(if: ScratchPostgres.isAvailable, "PostgreSQL is not installed (apt-get install postgresql libpq-dev)"))
struct SyncFuzzTests {
    static let tagNames = ["urgent", "later", "home", "Work", "work", "idea"]

    /// One store of the run, with a merging screen context and a controller sectioned through a relationship.
    struct Replica {
        let store: PersistentStore
        let engine: SyncEngine
        let screen: ObjectContext
        let controller: FetchedResultsController
    }

    @Test("syncs in a random order converge", arguments: TestScale.seeds(2, stress: 12))
    func syncsInARandomOrder(seed: UInt64) throws {
        try run(seed: seed, background: false)
    }

    @Test("syncs in the background while the stores change converge", arguments: TestScale.seeds(2, stress: 8))
    func syncsInTheBackground(seed: UInt64) throws {
        try run(seed: seed, background: true)
    }

    func run(seed: UInt64, background: Bool) throws {
        let server = try ScratchPostgres()
        defer { server.remove() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var random = SeededGenerator(seed: seed + 1000)
        let policy: SyncConfiguration.DeletePolicy = seed % 2 == 1 ? .newestWins : .deleteWins
        let replicas = try (0..<3).map { i -> Replica in
            let store = try PersistentStore.open(path: directory.path("s\(i).store"), schema: Fixtures.syncSchema())
            let engine = try SyncEngine(
                store: store,
                configuration: .init(connection: server.connection, deletePolicy: policy, batchSize: 7))
            let screen = ObjectContext(store: store)
            screen.automaticallyMergesChangesFromStore = true
            let controller = FetchedResultsController(
                fetchRequest: Self.tasks, context: screen, sectionNameKeyPath: "project.name")
            try controller.performFetch()
            return Replica(store: store, engine: engine, screen: screen, controller: controller)
        }
        let syncs = try BackgroundSyncs(background ? replicas.map(\.engine) : [], interval: 0.05)
        for step in 0..<300 {
            let replica = replicas.randomElement(using: &random)!
            // The screen context (merging), or a fresh one.
            let context = Bool.random(using: &random) ? replica.screen : ObjectContext(store: replica.store)
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                do {
                    try edit(context, replica.store, "\(seed)-\(step)", &random)
                } catch let error as EntityStoreError where background && error.code == .invalidObject {
                    // An object a merged save deleted meanwhile (a fetch merges): the app's to handle.
                }
            }
            if context.hasChanges {
                do {
                    try context.save()
                } catch let error as EntityStoreError where error.code == .conflict || error.code == .validationFailed {
                    // A stale context (a sync saved in between) or a tag name taken: the app's to handle.
                    context.rollback()
                }
            }
            if !background, Int.random(in: 0..<3, using: &random) == 0 {
                let synced = replicas.randomElement(using: &random)!
                try synced.engine.syncNow()
                synced.screen.processPendingChanges()
                try expectFresh(synced, "seed \(seed), step \(step)")
            }
        }
        syncs.stop()

        #expect(
            try syncUntilQuiet(replicas.map(\.engine)),
            "seed \(seed): the stores still exchange changes after 10 passes")
        let contents = try replicas.map {
            try Fixtures.syncedContents(of: $0.store, globalID: $0.engine.globalID(of:))
        }
        for (i, replica) in replicas.enumerated() {
            #expect(contents[i] == contents[0], "seed \(seed): store \(i) differs from store 0")
            #expect(try replica.store.checkIntegrity().findings.isEmpty, "seed \(seed): store \(i)")
            replica.screen.processPendingChanges()
            try expectFresh(replica, "seed \(seed), store \(i) at the end")
        }
    }

    /// One random change in `context`, or a batch delete in its store.
    func edit(
        _ context: ObjectContext, _ store: PersistentStore, _ label: String, _ random: inout SeededGenerator
    ) throws {
        let tasks = try context.fetch(FetchRequest(entity: "Task"))
        let projects = try context.fetch(FetchRequest(entity: "Project"))
        let tags = try context.fetch(FetchRequest(entity: "Tag"))
        let task = tasks.randomElement(using: &random)
        let project = projects.randomElement(using: &random)
        let tag = tags.randomElement(using: &random)
        switch Int.random(in: 0..<13, using: &random) {
        case 0:
            let made = try context.insert("Project")
            try made.setValue(.string("p\(Int.random(in: 0..<4, using: &random))"), forKey: "name")
        case 1:
            let made = try context.insert("Tag")
            try made.setValue(.string(Self.tagNames.randomElement(using: &random)!), forKey: "name")
        case 2, 3:
            let made = try context.insert("Task")
            try made.setValue(.string("t\(label)"), forKey: "title")
            try made.setValue(.int(Int64.random(in: 0..<5, using: &random)), forKey: "priority")
            if let project { try made.setObject(project, forKey: "project") }
        case 4:
            try task?.setValue(.string("r\(label)"), forKey: "title")
        case 5:
            try task?.setValue(.int(Int64.random(in: 0..<5, using: &random)), forKey: "priority")
        case 6:
            try task?.setObject(project, forKey: "project")
        case 7:
            guard let task, let tag else { return }
            if try task.objectIDs(forKey: "tags").contains(tag.objectID) {
                try task.remove(tag, fromKey: "tags")
            } else {
                try task.add(tag, toKey: "tags")
            }
        case 8:
            if let task { try context.delete(task) }
        case 9:
            try project?.setValue(.string("p\(Int.random(in: 0..<4, using: &random))"), forKey: "name")
        case 10:
            // Cascades to the project's tasks, which this context may never have read.
            if Int.random(in: 0..<3, using: &random) == 0, let project { try context.delete(project) }
        case 11:
            guard let tag else { return }
            if Bool.random(using: &random) {
                try context.delete(tag)
            } else {
                try tag.setValue(.string(Self.tagNames.randomElement(using: &random)!), forKey: "name")
            }
        default:
            guard Int.random(in: 0..<4, using: &random) == 0 else { return }
            switch Int.random(in: 0..<4, using: &random) {
            case 0: try store.batchDelete("Task", where: FetchPredicate("priority == 4"))
            case 3:
                try store.batchUpdate(
                    "Task", where: FetchPredicate("priority == 3"), set: ["priority": 1, "done": true])
            case 1: try store.batchDelete("Project", where: FetchPredicate("name == 'p1'"))
            default: try store.batchDelete("Tag", where: FetchPredicate("name == 'home'"))
            }
        }
    }

    /// The replica's controller holds what a fresh fetch of its store finds.
    func expectFresh(_ replica: Replica, _ label: String) throws {
        let fresh = FetchedResultsController(
            fetchRequest: Self.tasks, context: ObjectContext(store: replica.store), sectionNameKeyPath: "project.name")
        try fresh.performFetch()
        #expect(replica.controller.sections.map(\.name) == fresh.sections.map(\.name), "\(label)")
        #expect(replica.controller.sections.map(\.objectIDs) == fresh.sections.map(\.objectIDs), "\(label)")
    }

    static var tasks: FetchRequest {
        FetchRequest(entity: "Task", sortKeys: [SortKey("priority"), SortKey("title")])
    }
}
