import EntityStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The tour: the situations of the seed documents, each printed as the batch the controller delivered.
@MainActor
func runTour(storePath: String, script: Bool, live: Bool) async throws {
    let terminal = !script && isatty(STDOUT_FILENO) == 1
    func say(_ text: String) {
        print(text)
        fflush(nil)
    }
    // A fresh store each run: the tour starts from seed 002's contents.
    if FileManager.default.fileExists(atPath: storePath) { try FileManager.default.removeItem(atPath: storePath) }
    let store = try DemoModel.open(storePath)
    // The screen's context lives on the main actor; it merges other contexts' and processes' saves there by itself.
    let context = ObjectContext(store: store, name: "demo")
    context.automaticallyMergesChangesFromStore = true
    for (title, group, rank) in DemoModel.seed { try DemoModel.insert(title, group: group, rank: rank, in: context) }
    try context.save()

    let controller = DemoModel.controller(context)
    var step = 0
    let printer = BatchPrinter(context: context) { lines in
        say(lines)
        say("  now: " + layout(controller.controller, context))
    }
    controller.delegate = printer
    try controller.performFetch()
    say("EntityStore demo: a FetchedResultsController over \(storePath), sectioned by group")
    say("  now: " + layout(controller.controller, context))

    func scene(_ title: String, _ body: () throws -> Void) rethrows {
        step += 1
        if terminal { usleep(1_200_000) }
        say("\n\(step). \(title)")
        let before = printer.batches
        try body()
        if printer.batches == before { say("  (no callbacks)") }
    }

    try scene("Seed 002, the RZCollectionList batch: four deletes, two inserts in a new group, two moves, an update") {
        for title in ["Jill", "Jack", "Garfunkel", "Simon"] { try context.delete(DemoModel.item(title, in: context)!) }
        try DemoModel.insert("Cheech", group: "420", rank: 1, in: context)
        try DemoModel.insert("Chong", group: "420", rank: 2, in: context)
        try DemoModel.item("Jerry", in: context)!.rank = -2
        try DemoModel.item("Ben", in: context)!.rank = -1
        // An equal write is no change; a new rank that keeps its place is an update.
        try DemoModel.item("Technicolour", in: context)!.title = "Technicolour"
        try DemoModel.item("Technicolour", in: context)!.rank = 3
        try context.save()
    }
    try scene("Seed 004: Nu:Tone moves to group 420 while group 2 empties: its path is [1,0] before and after") {
        for title in ["Jerry", "Ben", "Clyde", "Bonnie"] { try context.delete(DemoModel.item(title, in: context)!) }
        let nuTone = try DemoModel.item("Nu:Tone", in: context)!
        nuTone.group = "420"
        nuTone.rank = 0
        try context.save()
    }
    try scene(
        "A user-driven reorder: the user drags Chong to the top of group 420; the UI shows it already, so nothing is delivered"
    ) {
        let from = controller.indexPath(for: try DemoModel.item("Chong", in: context)!)!
        try controller.controller.moveObject(from: from, to: ItemPath(section: from.section, item: 0), orderKey: "rank")
        try context.save()
        say("  now: " + layout(controller.controller, context))
    }
    // From here on, changes come from elsewhere: the screen waits for each batch on the controller's stream.
    let batches = controller.batches()
    var iterator = batches.makeAsyncIterator()
    func nextBatch() async throws {
        guard try await iterator.next(isolation: #isolation) != nil else {
            throw DemoError("the list stopped following changes")
        }
    }

    step += 1
    say("\n\(step). Another process writes (store-demo add Moby 4 0 --store ...); the change arrives live")
    try runOtherProcess(["add", "Moby", "4", "0", "--store", storePath])
    try await nextBatch()

    step += 1
    say(
        "\n\(step). A background importer (an actor owning its context) adds two items; the list follows on the main actor"
    )
    let importer = DemoImporter(store: store)
    try await importer.importItems([("Moss", "4", 5), ("Lichen", "420", 9)])
    try await nextBatch()

    step += 1
    say("\n\(step). performBackgroundTask: Sendable snapshots of group 420, read on a background thread")
    let group = try await store.performBackgroundTask { context in
        try context.snapshots(DemoItem.self, where: \DemoItem.group == "420", sortedBy: [SortKey(\DemoItem.rank)])
    }
    say("  " + group.map { "\($0.title) (rank \($0.rank))" }.joined(separator: ", "))

    guard live || (!script && isatty(STDIN_FILENO) == 1) else {
        say("\ndone: \(try store.lastTransaction()) transactions saved")
        return
    }
    say("\nLive: run `swift run store-demo add TITLE GROUP` (or move TITLE GROUP, delete TITLE) in another terminal.")
    say("Ctrl-C to quit.")
    while true {
        try await nextBatch()
        if terminal { print("\u{1B}[2J\u{1B}[H", terminator: "") }
    }
}

/// Runs `store-demo ARGUMENTS` as another process and waits for it.
func runOtherProcess(_ arguments: [String]) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    process.arguments = arguments
    process.standardOutput = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw DemoError("store-demo \(arguments[0]) failed") }
}

/// A long-lived background importer: an actor with its own context, on its own thread.
actor DemoImporter: ContextActor {
    nonisolated let contextExecutor: ContextExecutor
    init(store: PersistentStore) { contextExecutor = ContextExecutor(store: store, name: "importer") }

    func importItems(_ items: [(title: String, group: String, rank: Int)]) throws {
        for item in items { try DemoModel.insert(item.title, group: item.group, rank: item.rank, in: context) }
        try context.save()
    }
}
