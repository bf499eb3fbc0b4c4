import CGtk
import EntityStore
import Foundation
import GtkSupport

struct CheckFailure: Error, CustomStringConvertible {
    let description: String
}

/// The scripted checks: the seeds' batches, a user's reorder, a shelf deleted with its books, a search refined and
/// cleared, and another process's saves; after each, the rows GTK shows (read back from the list view's bound
/// rows, and from the model through the list view's selection model) must be a fresh fetch's, flattened.
@MainActor
final class Checker {
    let window: BookWindow
    let options: Options
    var adapter: ListAdapter { window.adapter }
    var context: ObjectContext { window.context }
    private var batches = 0
    private var batchWaiter: CheckedContinuation<Void, any Error>?
    private var failures: [String] = []
    private var checks = 0

    init(window: BookWindow, options: Options) {
        self.window = window
        self.options = options
        let shown = adapter.onBatch
        adapter.onBatch = { [unowned self] in
            shown?()
            batches += 1
            batchWaiter?.resume()
            batchWaiter = nil
        }
        adapter.onFailure = { [unowned self] message in failures.append(message) }
    }

    var summary: String { "\(checks) checks, \(batches) batches, \(adapter.splices) splices" }

    func run() async throws {
        try await verify("the first fetch")
        try screenshot("1-first-fetch")
        try await seed002()
        try await seed004()
        try Library.addBooks(context, 24)
        try await verify("24 books added on five new shelves")
        try await mixedBatch()
        try screenshot("2-mixed-batch")
        try await sectionChangeAtAnUnchangedPath()
        try await userDrivenReorder()
        try await buttons()
        try await cascadeDeleteOfAShelf()
        try await search()
        try await otherProcessSaves()
        try screenshot("4-after-other-process")
    }

    // MARK: Scenarios

    private func books(on shelf: String) throws -> [Book] {
        try context.fetch(Book.self, where: \Book.shelf?.name == shelf, sortedBy: [SortKey(\Book.position)])
    }

    private func shelf(_ name: String) throws -> Shelf {
        guard let shelf = try context.first(Shelf.self, where: \Shelf.name == name) else {
            throw CheckFailure(description: "no shelf \(name)")
        }
        return shelf
    }

    private func book(_ title: String) throws -> Book {
        guard let book = try context.first(Book.self, where: \Book.title == title) else {
            throw CheckFailure(description: "no book '\(title)'")
        }
        return book
    }

    /// Seed 002, RZCollectionList's batch on its contents: four deletes (two whole shelves), two inserts on a new
    /// shelf, two moves, an update.
    private func seed002() async throws {
        for title in ["Jill", "Jack", "Garfunkel", "Simon"] { try context.delete(try book(title)) }
        let shelf = try context.insert(Shelf.self)
        shelf.name = "420"
        for (title, position) in [("Cheech", 1.0), ("Chong", 2.0)] {
            let book = try context.insert(Book.self)
            book.title = title
            book.position = position
            book.shelf = shelf
        }
        try book("Jerry").position = -2
        try book("Ben").position = -1
        try book("Technicolour").position = 3  // keeps its place: an update
        try context.save()
        try await verify("seed 002's batch")
    }

    /// Seed 004: Nu:Tone moves to shelf 420 while shelf 2 empties: its path is [1, 0] before and after.
    private func seed004() async throws {
        for title in ["Jerry", "Ben", "Clyde", "Bonnie"] { try context.delete(try book(title)) }
        let nuTone = try book("Nu:Tone")
        let before = adapter.controller.indexPath(for: nuTone.objectID)
        nuTone.shelf = try shelf("420")
        nuTone.position = 0
        try context.save()
        let after = adapter.controller.indexPath(for: nuTone.objectID)
        guard before == ItemPath(section: 1, item: 0), after == before else {
            throw CheckFailure(
                description: "seed 004's path moved: \(String(describing: before)) → \(String(describing: after))")
        }
        try await verify("seed 004's section change at an unchanged path")
    }

    /// A mixed batch on the books added (as seed 002's): deletes, inserts, moves within and across sections, an edit in
    /// place, a section that goes and one that comes, all in one save.
    private func mixedBatch() async throws {
        let fantasy = try books(on: "Fantasy"), history = try books(on: "History"), poetry = try books(on: "Poetry")
        try context.delete(fantasy[0])
        try context.delete(history[1])
        for title in ["Inserted first", "Inserted second"] {
            let book = try context.insert(Book.self)
            book.title = title
            book.position = 1.5
            book.shelf = try shelf("Science")
        }
        poetry[0].position = 1_000  // to the end of its shelf
        history[0].shelf = try shelf("Travel")  // across sections
        poetry[1].title = "Renamed in place"
        let annex = try context.insert(Shelf.self)
        annex.name = "Annex"
        fantasy[1].shelf = annex  // a section comes
        for book in try books(on: "Science") where book.title.hasPrefix("Inserted") == false {
            book.shelf = try shelf("Poetry")  // Science keeps only the inserted books
        }
        try context.save()
        try await verify("the mixed batch")
    }

    /// Seed 004: a book changes section while its path stays the same (the section before it goes).
    private func sectionChangeAtAnUnchangedPath() async throws {
        let sections = adapter.controller.sections.map(\.name)
        guard sections.count >= 3 else { throw CheckFailure(description: "too few shelves: \(sections)") }
        let first = try books(on: sections[0]), second = try books(on: sections[1])
        for book in first { book.shelf = try shelf(sections[1]) }
        // The second shelf's first book goes to the third, before its books: [1, 0] before and after.
        second[0].shelf = try shelf(sections[2])
        second[0].position = -1
        let before = adapter.controller.indexPath(for: second[0].objectID)
        try context.save()
        let after = adapter.controller.indexPath(for: second[0].objectID)
        guard before == ItemPath(section: 1, item: 0), after == before else {
            throw CheckFailure(
                description:
                    "the section change's path moved: \(String(describing: before)) → \(String(describing: after))")
        }
        try await verify("a section change at an unchanged path")
    }

    /// A user's reorder (Alt+Down on the first book of a shelf): user-driven, and GTK's list moves the row.
    private func userDrivenReorder() async throws {
        guard let position = adapter.list.position(of: ItemPath(section: 0, item: 0)),
            let id = adapter.objectID(at: position)
        else { throw CheckFailure(description: "no first book") }
        gtk_single_selection_set_selected(window.selection, guint(position))
        try window.moveSelected(by: 1)
        guard adapter.controller.indexPath(for: id) == ItemPath(section: 0, item: 1) else {
            throw CheckFailure(
                description: "the reorder left \(id) at \(String(describing: adapter.controller.indexPath(for: id)))")
        }
        try await verify("a user's reorder")
        try screenshot("3-user-reorder")
        // The same with the keyboard: Alt+Up on the list, typed into the X server (xdotool's XTEST events, as a
        // keyboard types them), moves the book back.
        guard let now = adapter.list.position(of: ItemPath(section: 0, item: 1)) else {
            throw CheckFailure(description: "no second book")
        }
        gtk_single_selection_set_selected(window.selection, guint(now))
        gtk_widget_grab_focus(window.listView)
        let title = String(cString: gtk_window_get_title(cast(window.window)))
        try await nextBatch(
            after: {
                do {
                    try runTool(
                        "/usr/bin/xdotool",
                        [
                            "search", "--sync", "--name", title, "windowfocus", "--sync", "key", "--clearmodifiers",
                            "alt+Up",
                        ])
                } catch {
                    failures.append("\(error)")
                }
            }, watchdog: "Alt+Up")
        guard adapter.controller.indexPath(for: id) == ItemPath(section: 0, item: 0) else {
            throw CheckFailure(
                description: "Alt+Up left \(id) at \(String(describing: adapter.controller.indexPath(for: id)))")
        }
        try await verify("a user's reorder with the keyboard")
    }

    /// The window's buttons clicked as a user would (their `clicked` signal): a book
    /// added, renamed, moved down and deleted, each a save of the window's context.
    private func buttons() async throws {
        func click(_ label: String) throws {
            guard let button = window.buttons[label] else { throw CheckFailure(description: "no \(label) button") }
            es_click(button)
        }
        func select(_ title: String) throws {
            guard let id = try context.first(Book.self, where: \Book.title == title)?.objectID,
                let path = adapter.controller.indexPath(for: id), let position = adapter.list.position(of: path)
            else { throw CheckFailure(description: "no row of '\(title)'") }
            gtk_single_selection_set_selected(window.selection, guint(position))
        }
        gtk_editable_set_text(OpaquePointer(window.titleEntry), "Typed by a user")
        try select("Renamed in place")
        try click("Add")
        try await verify("a book added with the Add button")
        gtk_editable_set_text(OpaquePointer(window.titleEntry), "Renamed by a user")
        try select("Typed by a user")
        try click("Rename")
        try await verify("a book renamed with the Rename button")
        try click("Up")
        try await verify("a book moved up with the Up button")
        try click("Delete")
        try await verify("a book deleted with the Delete button")
        guard try context.first(Book.self, where: \Book.title == "Renamed by a user") == nil else {
            throw CheckFailure(description: "the Delete button left the book")
        }
    }

    /// A shelf deleted: its books go with it (the cascade), and with them its section.
    private func cascadeDeleteOfAShelf() async throws {
        let name = adapter.controller.sections[0].name
        let sections = adapter.controller.sections.count
        try context.delete(try shelf(name))
        try context.save()
        guard adapter.controller.sections.count == sections - 1 else {
            throw CheckFailure(description: "the shelf's section stayed")
        }
        try await verify("a shelf deleted with its books")
    }

    /// A search typed, refined and cleared.
    private func search() async throws {
        for text in ["a", "ar", "arb", "", "zzz-no-match", ""] {
            gtk_editable_set_text(OpaquePointer(window.searchEntry), text)
            // The field's search-changed comes after its delay: set the request now, as it will.
            try adapter.search(text)
            try await verify("the search '\(text)'")
        }
    }

    /// Another process's saves, each a batch of its own: the writer saves when told and waits; the list must
    /// follow each one.
    private func otherProcessSaves() async throws {
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        writer.arguments = [
            "writer", "--store", options.store, "--saves", "\(options.saves)", "--seed", "\(options.seed)",
        ]
        let input = Pipe(), output = Pipe()
        writer.standardInput = input
        writer.standardOutput = output
        try writer.run()
        defer { if writer.isRunning { writer.terminate() } }
        for index in 0..<options.saves {
            let before = batches
            try await nextBatch(
                after: { input.fileHandleForWriting.write(Data("go\n".utf8)) }, watchdog: "save \(index)")
            guard batches == before + 1 else {
                throw CheckFailure(description: "save \(index) came as \(batches - before) batches")
            }
            try await verify("the other process's save \(index)")
        }
        input.fileHandleForWriting.closeFile()
        writer.waitUntilExit()
        guard writer.terminationStatus == 0 else {
            throw CheckFailure(description: "the writer exited with \(writer.terminationStatus)")
        }
    }

    // MARK: Waiting

    /// Runs `start`, then waits for the next batch (failing if none comes in 60 s: the watchdog of a hang).
    private func nextBatch(after start: () -> Void, watchdog: String) async throws {
        let timer = g_timeout_add_seconds_full(
            G_PRIORITY_DEFAULT, 60,
            { data in
                MainActor.assumeIsolated {
                    let checker = Unmanaged<Checker>.fromOpaque(data!).takeUnretainedValue()
                    checker.batchWaiter?.resume(throwing: CheckFailure(description: "no batch came in 60 s"))
                    checker.batchWaiter = nil
                }
                return 0
            }, Unmanaged.passUnretained(self).toOpaque(), nil)
        defer { g_source_remove(timer) }
        try await withCheckedThrowingContinuation { continuation in
            batchWaiter = continuation
            start()
        }
    }

    /// Waits until GTK has drawn `count` frames (its list view lays out and binds its rows in a frame).
    private func frames(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let waiter = FrameWaiter(count: count, continuation)
            gtk_widget_add_tick_callback(
                window.listView,
                { _, _, data in
                    let waiter = Unmanaged<FrameWaiter>.fromOpaque(data!).takeUnretainedValue()
                    waiter.left -= 1
                    if waiter.left > 0 { return 1 }
                    waiter.continuation.resume()
                    return 0
                }, Unmanaged.passRetained(waiter).toOpaque(),
                { data in Unmanaged<FrameWaiter>.fromOpaque(data!).release() })
        }
    }

    // MARK: Checking

    /// The rows GTK shows against a fresh fetch: every row of the model as GTK's selection model gives it, and
    /// every row the list view has bound to a widget (its position as GTK holds it, its label's text).
    private func verify(_ step: String) async throws {
        await frames(2)
        checks += 1
        if !failures.isEmpty { throw CheckFailure(description: "\(step): \(failures.joined(separator: "; "))") }
        let expected = try adapter.freshRows()
        let model = window.selection
        let count = Int(g_list_model_get_n_items(model))
        guard count == expected.count else {
            throw CheckFailure(description: "\(step): GTK's model has \(count) rows, a fresh fetch \(expected.count)")
        }
        for position in 0..<count {
            let item = g_list_model_get_item(model, guint(position))
            defer { g_object_unref(item) }
            let row = OpaquePointer(item)
            let text = String(cString: es_row_get_text(row)), header = es_row_is_header(row) != 0
            guard text == expected[position].text, header == expected[position].header else {
                throw CheckFailure(
                    description:
                        "\(step): GTK's model has '\(text)' at \(position), a fresh fetch '\(expected[position].text)'")
            }
        }
        var shown: [(position: Int, text: String, header: Bool)] = []
        withUnsafeMutablePointer(to: &shown) { pointer in
            es_visit_shown_rows(
                { context, position, text, header in
                    let shown = context!.assumingMemoryBound(to: [(position: Int, text: String, header: Bool)].self)
                    shown.pointee.append((Int(position), String(cString: text!), header != 0))
                }, pointer)
        }
        guard shown.count >= min(expected.count, 10) else {
            throw CheckFailure(description: "\(step): GTK shows \(shown.count) rows of \(expected.count)")
        }
        guard Set(shown.map(\.position)).count == shown.count else {
            throw CheckFailure(description: "\(step): GTK shows two rows at one position")
        }
        for row in shown.sorted(by: { $0.position < $1.position }) {
            guard row.position < expected.count else {
                throw CheckFailure(
                    description: "\(step): the rows shown differ: GTK shows '\(row.text)' at \(row.position), past the "
                        + "\(expected.count) rows of a fresh fetch")
            }
            guard row.text == expected[row.position].text, row.header == expected[row.position].header else {
                throw CheckFailure(
                    description: "\(step): the rows shown differ: GTK shows '\(row.text)' at \(row.position), a fresh "
                        + "fetch has '\(expected[row.position].text)'")
            }
        }
    }

    /// Saves a picture of the window (`xwd` of its X window, made a PNG by ImageMagick's `convert`).
    private func screenshot(_ name: String) throws {
        guard let directory = options.screenshots else { return }
        let xwd = "\(directory)/\(name).xwd", png = "\(directory)/\(name).png"
        let title = String(cString: gtk_window_get_title(cast(window.window)))
        try runTool("/usr/bin/xwd", ["-name", title, "-silent", "-out", xwd])
        try runTool("/usr/bin/convert", [xwd, png])
        try FileManager.default.removeItem(atPath: xwd)
    }

    /// Runs a tool to its end; one that fails is a failed check.
    private func runTool(_ tool: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw CheckFailure(
                description: "\(tool) \(arguments.joined(separator: " ")) exited with \(process.terminationStatus)")
        }
    }
}

private final class FrameWaiter {
    var left: Int
    let continuation: CheckedContinuation<Void, Never>
    init(count: Int, _ continuation: CheckedContinuation<Void, Never>) {
        left = count
        self.continuation = continuation
    }
}
