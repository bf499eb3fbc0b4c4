import CGtk
import EntityStore
import Foundation
import GtkSupport

/// The demo's window: a search field, buttons to add, rename, delete and reorder books (Alt+Up / Alt+Down too),
/// one to start a writer process, and the list of books by shelf.
@MainActor
final class BookWindow {
    let store: PersistentStore
    let storePath: String
    let context: ObjectContext
    let adapter: ListAdapter
    let window: UnsafeMutablePointer<GtkWidget>
    let listView: UnsafeMutablePointer<GtkWidget>
    let selection: OpaquePointer
    let searchEntry: UnsafeMutablePointer<GtkWidget>
    let titleEntry: UnsafeMutablePointer<GtkWidget>
    let status: UnsafeMutablePointer<GtkWidget>
    private var handlers: [() -> Void] = []
    /// The buttons, by label (the checks click them).
    private(set) var buttons: [String: UnsafeMutablePointer<GtkWidget>] = [:]
    private var added = 0
    var writer: Process?

    init(store: PersistentStore, path: String, width: Int32 = 480, height: Int32 = 720) throws {
        self.store = store
        storePath = path
        context = ObjectContext(store: store, name: "window")
        context.automaticallyMergesChangesFromStore = true
        adapter = try ListAdapter(context: context)

        window = gtk_window_new()
        gtk_window_set_title(cast(window), "EntityStore: books by shelf")
        gtk_window_set_default_size(cast(window), width, height)
        let column = gtk_box_new(GTK_ORIENTATION_VERTICAL, 6)!
        gtk_widget_set_margin_start(column, 8)
        gtk_widget_set_margin_end(column, 8)
        gtk_widget_set_margin_top(column, 8)
        gtk_widget_set_margin_bottom(column, 8)
        gtk_window_set_child(cast(window), column)

        searchEntry = gtk_search_entry_new()
        gtk_box_append(cast(column), searchEntry)
        titleEntry = gtk_entry_new()
        gtk_entry_set_placeholder_text(cast(titleEntry), "Title of a new or renamed book")
        gtk_box_append(cast(column), titleEntry)
        let bar = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 4)!
        gtk_box_set_homogeneous(cast(bar), 1)
        gtk_box_append(cast(column), bar)

        selection = gtk_single_selection_new(OpaquePointer(g_object_ref(UnsafeMutableRawPointer(adapter.model))))
        gtk_single_selection_set_autoselect(selection, 0)
        gtk_single_selection_set_can_unselect(selection, 1)
        gtk_single_selection_set_selected(selection, GTK_INVALID_LIST_POSITION)
        listView = gtk_list_view_new(selection, es_row_factory_new())
        let scroller = gtk_scrolled_window_new()!
        gtk_scrolled_window_set_child(cast(scroller), listView)
        gtk_widget_set_vexpand(scroller, 1)
        gtk_box_append(cast(column), scroller)
        status = gtk_label_new("")
        gtk_label_set_xalign(cast(status), 0)
        gtk_box_append(cast(column), status)

        for (label, action) in [
            ("Add", { [unowned self] in self.run { try self.add() } }),
            ("Rename", { [unowned self] in self.run { try self.rename() } }),
            ("Delete", { [unowned self] in self.run { try self.deleteSelected() } }),
            ("Up", { [unowned self] in self.run { try self.moveSelected(by: -1) } }),
            ("Down", { [unowned self] in self.run { try self.moveSelected(by: 1) } }),
            ("Writer", { [unowned self] in self.run { try self.toggleWriter() } }),
        ] as [(String, () -> Void)] {
            let button = gtk_button_new_with_label(label)!
            gtk_box_append(cast(bar), button)
            connect(button, "clicked", action)
            buttons[label] = button
        }
        connect(searchEntry, "search-changed") { [unowned self] in
            self.run {
                try self.adapter.search(String(cString: gtk_editable_get_text(OpaquePointer(self.searchEntry))))
            }
        }
        let keys = gtk_event_controller_key_new()!
        es_connect(
            UnsafeMutableRawPointer(keys), "key-pressed", unsafeBitCast(keyPressed, to: GCallback.self),
            Unmanaged.passUnretained(self).toOpaque())
        gtk_widget_add_controller(listView, keys)
        adapter.onFailure = { [unowned self] message in self.report(message) }
        adapter.onBatch = { [unowned self] in self.showCount() }
        showCount()
    }

    func show() { gtk_window_present(cast(window)) }

    private func showCount() {
        let books = adapter.controller.sections.reduce(0) { $0 + $1.numberOfObjects }
        gtk_label_set_text(cast(status), "\(books) books on \(adapter.controller.sections.count) shelves")
    }

    /// Shows what went wrong in the window and on stderr.
    func report(_ message: String) {
        FileHandle.standardError.write(Data("entitystore-gtk: \(message)\n".utf8))
        gtk_label_set_text(cast(status), message)
    }

    fileprivate func run(_ body: () throws -> Void) {
        do { try body() } catch { report("\(error)") }
    }

    private var selectedPosition: Int? {
        let position = gtk_single_selection_get_selected(selection)
        return position == GTK_INVALID_LIST_POSITION ? nil : Int(position)
    }

    private var enteredTitle: String? {
        let text = String(cString: gtk_editable_get_text(OpaquePointer(titleEntry)))
        return text.trimmingCharacters(in: .whitespaces).isEmpty ? nil : text
    }

    /// Adds a book on the selected book's shelf (the first shelf when none is selected).
    func add() throws {
        added += 1
        let book = try context.insert(Book.self)
        book.title = enteredTitle ?? "New book \(added)"
        var shelf: Shelf?
        if let position = selectedPosition, let path = adapter.list.itemPath(at: position) {
            let first = adapter.controller.sections[path.section].objectIDs.first
            shelf = try first.map { try context.existingObject(Book.self, with: $0) }?.shelf
        }
        book.shelf = try shelf ?? context.first(Shelf.self, sortedBy: [SortKey(\Shelf.name)])
        book.position =
            (try context.fetch(Book.self, sortedBy: [SortKey(\Book.position, ascending: false)], limit: 1)
                .first?.position ?? 0) + 1
        try context.save()
    }

    func rename() throws {
        guard let id = selectedPosition.flatMap(adapter.objectID(at:)), let title = enteredTitle else {
            report("select a book and type its new title")
            return
        }
        try context.existingObject(Book.self, with: id).title = title
        try context.save()
    }

    func deleteSelected() throws {
        guard let id = selectedPosition.flatMap(adapter.objectID(at:)) else { return report("select a book to delete") }
        try context.delete(try context.object(with: id))
        try context.save()
    }

    func moveSelected(by offset: Int) throws {
        guard let position = selectedPosition, let id = adapter.objectID(at: position) else { return }
        try adapter.move(at: position, by: offset)
        if let path = adapter.controller.indexPath(for: id),
            let now = adapter.list.position(of: path)
        {
            gtk_single_selection_set_selected(selection, guint(now))
        }
    }

    /// Starts (or stops) another process that saves a change every half second: its saves arrive live.
    func toggleWriter() throws {
        if let writer {
            writer.terminate()
            writer.waitUntilExit()
            self.writer = nil
            return
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = ["writer", "--store", storePath, "--every", "0.5"]
        try process.run()
        writer = process
    }

    private func connect(_ instance: UnsafeMutableRawPointer, _ signal: String, _ action: @escaping () -> Void) {
        handlers.append(action)
        let box = Unmanaged.passRetained(ActionBox(action)).toOpaque()
        es_connect(
            instance, signal,
            unsafeBitCast(
                { (_: gpointer?, data: gpointer?) in
                    MainActor.assumeIsolated { Unmanaged<ActionBox>.fromOpaque(data!).takeUnretainedValue().action() }
                } as @convention(c) (gpointer?, gpointer?) -> Void, to: GCallback.self), box)
    }
}

private final class ActionBox {
    let action: () -> Void
    init(_ action: @escaping () -> Void) { self.action = action }
}

/// A GTK pointer as the type a call wants (GTK's C casts, unchecked as in C).
func cast<T, U>(_ pointer: UnsafeMutablePointer<T>) -> UnsafeMutablePointer<U> {
    UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: U.self)
}

/// A GTK pointer as an opaque type's pointer (GTK 4's widgets are mostly opaque structs).
func cast<T>(_ pointer: UnsafeMutablePointer<T>) -> OpaquePointer { OpaquePointer(pointer) }

/// GTK's `key-pressed` of a key controller: (controller, key, key code, modifiers, user data) -> handled.
private typealias KeyPressed = @convention(c) (OpaquePointer?, guint, guint, GdkModifierType, gpointer?) -> gboolean

/// Alt+Up and Alt+Down on the list: the selected book moves one place on its shelf.
private let keyPressed: KeyPressed = { _, key, _, modifiers, data in
    guard modifiers.rawValue & GDK_ALT_MASK.rawValue != 0, key == GDK_KEY_Up || key == GDK_KEY_Down else { return 0 }
    let address = UInt(bitPattern: data)  // (a pointer is not Sendable: it enters the isolated closure as its bits)
    MainActor.assumeIsolated {
        let window = Unmanaged<BookWindow>.fromOpaque(UnsafeRawPointer(bitPattern: address)!).takeUnretainedValue()
        window.run { try window.moveSelected(by: key == GDK_KEY_Up ? -1 : 1) }
    }
    return 1
}
