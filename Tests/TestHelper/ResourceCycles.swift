import EntityStore
import Foundation
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

/// What a process holds: open descriptors, threads, and memory mappings of files under a directory.
struct ResourceCount: Equatable, CustomStringConvertible {
    var descriptors: Int
    var threads: Int
    var mappings: Int

    static func now(under directory: String) -> ResourceCount {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1
        let maps = (try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8)) ?? ""
        let mappings = maps.split(separator: "\n").filter { $0.contains(directory) }.count
        return ResourceCount(descriptors: fds, threads: threads, mappings: mappings)
    }

    /// Whether nothing is held beyond `other`.
    func isWithin(_ other: ResourceCount) -> Bool {
        descriptors <= other.descriptors && threads <= other.threads && mappings <= other.mappings
    }

    var description: String { "\(descriptors) descriptors, \(threads) threads, \(mappings) store mappings" }
}

/// One way an app uses a store; each cycle opens a new store, uses it so, and releases everything.
struct ResourcePath: Sendable {
    var name: String
    var use: @Sendable (PersistentStore, String) async throws -> Void
}

final class ResourceBook: Model {
    override class var entityName: String { "Book" }
    @Stored("title") var title: String
}

final class CountingDelegate: FetchedResultsControllerDelegate {
    var batches = 0
    func controller(_ controller: FetchedResultsController, didFailWith error: EntityStoreError) {
        fail("the controller failed: \(error)")
    }
    func controllerDidChangeContent(_ controller: FetchedResultsController) { batches += 1 }
}

func saveTag(_ store: PersistentStore, _ name: String) throws {
    let context = ObjectContext(store: store, name: "other")
    let tag = try context.insert("Tag")
    try tag.setValue(.string(name), forKey: "name")
    try context.save()
}

func controllerPath(_ name: String, limit: Int, sectioned: Bool, merge: Bool) -> ResourcePath {
    ResourcePath(name: name) { store, _ in
        let context = ObjectContext(store: store)
        var request = FetchRequest(entity: "Tag", sortKeys: [SortKey("name")])
        request.fetchLimit = limit
        let controller = FetchedResultsController(
            fetchRequest: request, context: context, sectionNameKeyPath: sectioned ? "name" : nil)
        let delegate = CountingDelegate()
        controller.delegate = delegate
        try controller.performFetch()
        if merge {
            try saveTag(store, "merged")
            for record in try store.history() { context.merge(record) }
        } else {
            let tag = try context.insert("Tag")
            try tag.setValue("local", forKey: "name")
            try context.save()
        }
        guard delegate.batches > 0 else { throw HelperFailure("\(name): the controller saw no batch") }
    }
}

struct HelperFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

func makeResourcePaths() -> [ResourcePath] {
    [
        ResourcePath(name: "context and save") { store, _ in
            try saveTag(store, "t")
        },
        ResourcePath(name: "fetch") { store, _ in
            try saveTag(store, "t")
            _ = try ObjectContext(store: store).fetch(
                FetchRequest(entity: "Tag", predicate: try FetchPredicate("name == 't'")))
        },
        controllerPath("controller", limit: 0, sectioned: false, merge: false),
        controllerPath("sectioned controller merging by hand", limit: 0, sectioned: true, merge: true),
        controllerPath("windowed controller merging by hand", limit: 5, sectioned: false, merge: true),
        ResourcePath(name: "automatic merging with a controller") { store, _ in
            let context = ObjectContext(store: store)
            context.automaticallyMergesChangesFromStore = true
            let controller = FetchedResultsController(
                fetchRequest: FetchRequest(entity: "Tag", sortKeys: [SortKey("name")]), context: context)
            try controller.performFetch()
            try saveTag(store, "auto")
            context.processPendingChanges()
            guard controller.fetchedObjectIDs.count == 1 else { throw HelperFailure("the merge did not arrive") }
        },
        ResourcePath(name: "store.changes() finished") { store, _ in
            let stream = store.changes()
            try saveTag(store, "s")
            for try await _ in stream { break }
        },
        ResourcePath(name: "store.changes() cancelled") { store, _ in
            let task = Task {
                for try await _ in store.changes() {}
            }
            try saveTag(store, "s")
            task.cancel()
            _ = await task.result
        },
        ResourcePath(name: "context.changes finished and cancelled") { store, _ in
            let context = ObjectContext(store: store)
            let stream = context.changes
            let tag = try context.insert("Tag")
            try tag.setValue("c", forKey: "name")
            context.processPendingChanges()
            for await _ in stream { break }
            _ = context.changes  // never iterated: ends with the context
        },
        ResourcePath(name: "observeCommits") { store, _ in
            let token = try store.observeCommits(onError: { _ in }) { _ in }
            try saveTag(store, "o")
            token.cancel()
            _ = try store.observeCommits(onError: { _ in }) { _ in }  // released at once
        },
        ResourcePath(name: "typed models") { store, _ in
            let context = ObjectContext(store: store)
            let book = try context.insert(ResourceBook.self)
            book.title = "Dune"
            try context.save()
            _ = try context.existingObject(ResourceBook.self, with: book.objectID).title
        },
        ResourcePath(name: "context actor and performBackgroundTask") { store, _ in
            let importer = TagImporter(store: store)
            let count = try await importer.add("i")
            let seen = try await store.performBackgroundTask { context in
                try context.count(for: FetchRequest(entity: "Tag"))
            }
            guard count == 1, seen == 1 else { throw HelperFailure("the importer saw \(count), the task \(seen)") }
        },
        ResourcePath(name: "controller batches stream") { store, _ in
            let context = ObjectContext(store: store)
            let controller = FetchedResultsController(
                fetchRequest: FetchRequest(entity: "Tag", sortKeys: [SortKey("name")]), context: context)
            try controller.performFetch()
            let batches = controller.batches()
            let tag = try context.insert("Tag")
            try tag.setValue("b", forKey: "name")
            try context.save()
            for try await _ in batches { break }
            _ = controller.batches()  // never iterated: ends with the controller
        },
        ResourcePath(name: "read-only open beside the app") { store, path in
            try saveTag(store, "r")
            let reader = try PersistentStore.openReadOnly(path: path)
            _ = try ObjectContext(store: reader).count(for: FetchRequest(entity: "Tag"))
        },
    ]
}

/// An actor owning a context: its thread must end with it.
actor TagImporter: ContextActor {
    nonisolated let contextExecutor: ContextExecutor
    init(store: PersistentStore) { contextExecutor = ContextExecutor(store: store, name: "importer") }

    func add(_ name: String) throws -> Int {
        let tag = try context.insert("Tag")
        try tag.setValue(.string(name), forKey: "name")
        try context.save()
        return try context.count(for: FetchRequest(entity: "Tag"))
    }
}

/// Opens, uses and releases `cycles` stores per path and checks that descriptors, threads and mappings come back to
/// where they were; prints one line per path.
func resourceCycles(directory: String, cycles: Int) async throws {
    let schema = try Fixtures.librarySchema()
    var serial = 0
    func cycle(_ path: ResourcePath) async throws {
        let storePath = directory + "/s\(serial).store"
        serial += 1
        do {
            let store = try PersistentStore.open(path: storePath, schema: schema, options: .init(sync: .noSync))
            try await path.use(store, storePath)
        }
        try FileManager.default.removeItem(atPath: storePath)
    }
    for path in makeResourcePaths() {
        // Warm-up: the first cycles start the process's shared threads (dispatch, the cooperative pool).
        for _ in 0..<3 { try await cycle(path) }
        let before = ResourceCount.now(under: directory)
        for _ in 0..<cycles { try await cycle(path) }
        // Watcher threads end as soon as they wake; give them a moment.
        var after = ResourceCount.now(under: directory)
        let deadline = Date().addingTimeInterval(60)
        while !after.isWithin(before) && Date() < deadline {
            usleep(10_000)
            after = ResourceCount.now(under: directory)
        }
        guard after.isWithin(before) else {
            throw HelperFailure("\(path.name): before \(before), after \(cycles) stores \(after)")
        }
        print("\(path.name): \(cycles) stores, \(after)")
        fflush(nil)
    }
}

/// Text handed from a task; guarded by a lock.
final class LockedText: @unchecked Sendable {
    // @unchecked Sendable: `text` is only touched while `lock` is held.
    private let lock = NSLock()
    private var text: String?
    func set(_ value: String) { lock.withLock { text = value } }
    var value: String? { lock.withLock { text } }
}
