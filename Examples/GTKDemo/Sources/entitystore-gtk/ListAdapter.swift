import CGtk
import EntityStore
import Foundation
import GtkSupport

/// The `GListModel` of a fetched-results controller: the controller's results flattened (each shelf a header row
/// before its books) by a `FlatResultsList`, each batch told to GTK as the `items-changed` splices the list gives,
/// each after the list took it. Rows are made when GTK asks for them (a 100,000-book list makes only the rows on
/// screen), and one `EsRow` is kept per row while GTK holds it, so that a moved book comes back as the same object
/// (GTK keeps its widget) and an edited one changes in place (its `text` notifies; no splice).
@MainActor
final class ListAdapter {
    let context: ObjectContext
    private(set) var controller: FetchedResultsController
    private(set) var list: FlatResultsList
    private(set) var model: OpaquePointer!
    /// The rows GTK holds now, by the row they show (removed when GTK lets go: a weak reference).
    private var alive: [FlatResultsList.Row: OpaquePointer] = [:]
    private var rowOfObject: [UnsafeMutableRawPointer: FlatResultsList.Row] = [:]
    private var collector: ResultsBatchCollector?
    /// Splices told to GTK since launch (a test drops one of them on purpose to show that the checks see it).
    private(set) var splices = 0
    var dropSplice: Int?
    /// Called when a batch arrives, and after it has been told to GTK.
    var onBatchStart: (() -> Void)?
    var onBatch: (() -> Void)?
    /// Failures: a controller that stopped following, a row that could not be read.
    var onFailure: ((String) -> Void)?

    init(context: ObjectContext, search: String = "") throws {
        self.context = context
        controller = FetchedResultsController(
            fetchRequest: try Library.request(search: search), context: context, sectionNameKeyPath: Library.sectionKey)
        try controller.performFetch()
        list = FlatResultsList(sections: controller.sections)
        let me = Unmanaged.passUnretained(self).toOpaque()
        model = es_flat_model_new(
            { context in
                MainActor.assumeIsolated {
                    guint(Unmanaged<ListAdapter>.fromOpaque(context!).takeUnretainedValue().list.count)
                }
            },
            { context, position in
                // (A pointer is not Sendable: it leaves the isolated closure as its bits.)
                let bits = MainActor.assumeIsolated {
                    UInt(
                        bitPattern: Unmanaged<ListAdapter>.fromOpaque(context!).takeUnretainedValue().item(
                            at: Int(position)))
                }
                return OpaquePointer(bitPattern: bits)
            }, me)
        follow()
    }

    private func follow() {
        let collector = ResultsBatchCollector { [unowned self] changes, _ in
            self.apply(changes)
        } failure: { [unowned self] error in
            self.onFailure?("the list stopped following the store: \(error.message)")
        }
        self.collector = collector
        controller.delegate = collector
    }

    /// The text of a book's row.
    func text(of id: ObjectID) -> String {
        do {
            let book = try context.object(with: id)
            guard case .string(let title) = try book.value(forKey: "title") else { return "(untitled)" }
            return title
        } catch {
            onFailure?("\(id) could not be read: \(error)")
            return "(unreadable)"
        }
    }

    private func text(of row: FlatResultsList.Row) -> String {
        switch row {
        case .header(let name): name.isEmpty ? "(no shelf)" : name
        case .object(let id): text(of: id)
        }
    }

    /// GTK's `get_item`: the row kept for `position` while GTK holds it, else a new one.
    private func item(at position: Int) -> OpaquePointer? {
        let row = list[position]
        if let kept = alive[row] { return OpaquePointer(g_object_ref(UnsafeMutableRawPointer(kept))) }
        let made: OpaquePointer = es_row_new(row.isHeader ? 1 : 0, text(of: row))!
        alive[row] = made
        rowOfObject[UnsafeMutableRawPointer(made)] = row
        g_object_weak_ref(
            UnsafeMutableRawPointer(made).assumingMemoryBound(to: GObject.self),
            { context, gone in
                MainActor.assumeIsolated {
                    Unmanaged<ListAdapter>.fromOpaque(context!).takeUnretainedValue().forget(gone)
                }
            }, Unmanaged.passUnretained(self).toOpaque())
        return made
    }

    private func forget(_ gone: UnsafeMutableRawPointer?) {
        guard let gone, let row = rowOfObject.removeValue(forKey: gone) else { return }
        alive[row] = nil
    }

    /// One batch: the kept rows of books that move take their new text first (a move is the book's one change in
    /// the batch), then the splices, then the books changed in place.
    private func apply(_ changes: [ResultsBatch.Change]) {
        onBatchStart?()
        for change in changes {
            if case .moveItem(let id, _, _) = change, let kept = alive[FlatResultsList.Row.object(id)] {
                es_row_set_text(kept, text(of: id))
            }
        }
        do {
            try list.apply(changes) { position, removed, added in
                splices += 1
                if splices == dropSplice { return }
                es_flat_model_items_changed(model, guint(position), guint(removed), guint(added))
            } update: { _, id in
                if let kept = alive[FlatResultsList.Row.object(id)] { es_row_set_text(kept, text(of: id)) }
            }
        } catch {
            onFailure?("a batch did not fit the list (\(error)); the list was rebuilt")
            rebuild()
        }
        onBatch?()
    }

    /// A new request (the search field): the controller fetches again and GTK hears the whole list replaced.
    func search(_ text: String) throws {
        var request = controller.fetchRequest
        request.predicate = try Library.request(search: text).predicate
        controller.delegate = nil
        controller = FetchedResultsController(
            fetchRequest: request, context: context, sectionNameKeyPath: Library.sectionKey)
        try controller.performFetch()
        follow()
        rebuild()
    }

    private func rebuild() {
        let old = list.count
        list = FlatResultsList(sections: controller.sections)
        es_flat_model_items_changed(model, 0, guint(old), guint(list.count))
    }

    /// A user's reorder: the book at flat `position` moves one place up or down on its shelf, written as a
    /// user-driven change; the controller's batch moves the row.
    func move(at position: Int, by offset: Int) throws {
        guard let path = list.itemPath(at: position), path.item >= 0 else { return }
        let target = path.item + offset
        guard target >= 0, target < controller.numberOfObjects(inSection: path.section) else { return }
        try context.performUserDrivenChanges {
            try controller.moveObject(
                from: path, to: ItemPath(section: path.section, item: target), orderKey: "position")
        }
        try context.save()
    }

    /// The object at flat `position`, if that row is a book.
    func objectID(at position: Int) -> ObjectID? {
        guard position >= 0, position < list.count, case .object(let id) = list[position] else { return nil }
        return id
    }

    /// What the list should show: a fresh fetch of the same request, flattened, as (text, is a header).
    func freshRows() throws -> [(text: String, header: Bool)] {
        let fresh = FetchedResultsController(
            fetchRequest: controller.fetchRequest, context: ObjectContext(store: context.store),
            sectionNameKeyPath: Library.sectionKey)
        try fresh.performFetch()
        var rows: [(String, Bool)] = []
        for section in fresh.sections {
            rows.append((section.name.isEmpty ? "(no shelf)" : section.name, true))
            for id in section.objectIDs {
                guard case .string(let title) = try fresh.context.object(with: id).value(forKey: "title") else {
                    rows.append(("(untitled)", false))
                    continue
                }
                rows.append((title, false))
            }
        }
        return rows
    }
}

extension FlatResultsList.Row {
    var isHeader: Bool {
        if case .header = self { return true }
        return false
    }
}
