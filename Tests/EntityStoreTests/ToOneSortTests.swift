import EntityStore
import Foundation
import TestSupport
import Testing

/// Sorting and sectioning by a key path through to-one relationships (`shelf.name`, `shelf.room.name`) reads, for
/// each object, the value the linked objects hold as the fetch sees them: their unsaved state when the fetch includes
/// pending changes (a renamed shelf, a room renamed two links away, a deleted shelf), the stored one otherwise, and
/// nil past a missing link.
@Suite struct ToOneSortTests {
    static func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Room") {
                Attribute("name", .string)
                Relationship("shelves", to: "Shelf", inverse: "room", toMany: true)
            }
            Entity("Shelf") {
                Attribute("name", .string)
                Relationship("room", to: "Room", inverse: "shelves")
                Relationship("books", to: "Book", inverse: "shelf", toMany: true)
            }
            Entity("Book") {
                Attribute("title", .string)
                Relationship("shelf", to: "Shelf", inverse: "books")
            }
        }
    }

    /// The value `path` (dot-separated to-one steps, then an attribute) reaches from `object` in its context.
    static func reached(_ path: String, from object: ManagedObject) throws -> String? {
        var current: ManagedObject? = object
        let keys = path.split(separator: ".").map(String.init)
        // A linked object deleted in the context unlinks its objects (as a save will): nil from there on.
        for key in keys.dropLast() { current = try current?.object(forKey: key).flatMap { $0.isDeleted ? nil : $0 } }
        guard let current, case .string(let name) = try current.value(forKey: keys.last!) else { return nil }
        return name
    }

    /// `objects` in the order of `path`'s value (nil first), then title, then ID: the order a fetch sorted by
    /// `[path, title]` must give.
    static func expectedOrder(_ objects: [ManagedObject], by path: String) throws -> [ObjectID] {
        let keyed: [(value: String?, title: String?, id: ObjectID)] = try objects.map {
            (try reached(path, from: $0), try reached("title", from: $0), $0.objectID)
        }
        return keyed.sorted { a, b in
            if a.value != b.value { return a.value == nil || (b.value != nil && a.value! < b.value!) }
            if a.title != b.title { return (a.title ?? "") < (b.title ?? "") }
            return a.id < b.id
        }.map(\.id)
    }

    @Test(arguments: [11, 12, 13])
    func sortsThroughToOnesSeeTheLinkedObjectsAsTheFetchDoes(seed: UInt64) throws {
        try withStore(schema: Self.schema()) { store, _ in
            var random = SeededGenerator(seed: seed)
            let context = ObjectContext(store: store)
            let rooms = try (0..<4).map { r in
                let room = try context.insert("Room")
                try room.setValue(.string("room \(r)"), forKey: "name")
                return room
            }
            let shelves = try (0..<12).map { s in
                let shelf = try context.insert("Shelf")
                try shelf.setValue(.string("shelf \(Int.random(in: 0..<6, using: &random))"), forKey: "name")
                // Some shelves in no room.
                if s % 5 != 4 { try shelf.setObject(rooms.randomElement(using: &random), forKey: "room") }
                return shelf
            }
            for b in 0..<300 {
                let book = try context.insert("Book")
                try book.setValue(.string("book \(Int.random(in: 0..<40, using: &random))"), forKey: "title")
                // Some books on no shelf.
                if b % 9 != 0 { try book.setObject(shelves.randomElement(using: &random), forKey: "shelf") }
            }
            try context.save()

            func check(_ label: String, _ context: ObjectContext, includesPending: Bool = true) throws {
                let books = try context.fetch(FetchRequest(entity: "Book"))
                for path in ["shelf.name", "shelf.room.name"] {
                    var request = FetchRequest(entity: "Book", sortKeys: [SortKey(path), SortKey("title")])
                    request.includesPendingChanges = includesPending
                    #expect(
                        try context.fetch(request).map(\.objectID) == (try Self.expectedOrder(books, by: path)),
                        "\(label): sorted by \(path)")
                    // A controller sectioned by the path shows the same order, in sections of its values.
                    let controller = FetchedResultsController(
                        fetchRequest: FetchRequest(entity: "Book", sortKeys: [SortKey("title")]), context: context,
                        sectionNameKeyPath: path)
                    try controller.performFetch()
                    #expect(
                        controller.sections.flatMap(\.objectIDs) == (try Self.expectedOrder(books, by: path)),
                        "\(label): sectioned by \(path)")
                }
            }
            try check("saved", ObjectContext(store: store))
            // Unsaved: a shelf renamed, a room renamed (two links away), a shelf deleted (its books unlinked).
            let editing = ObjectContext(store: store)
            let editedShelves = try editing.fetch(FetchRequest(entity: "Shelf", sortKeys: [SortKey("name")]))
            try editedShelves[3].setValue(.string("a renamed shelf"), forKey: "name")
            try editing.delete(editedShelves[7])
            let editedRooms = try editing.fetch(FetchRequest(entity: "Room"))
            try editedRooms[2].setValue(.string("zz renamed room"), forKey: "name")
            try check("unsaved", editing)
            // The stored state, from a context whose changes are not asked for, is the saved order.
            let storedContext = ObjectContext(store: store)
            let stored = try storedContext.fetch(FetchRequest(entity: "Book"))
            for path in ["shelf.name", "shelf.room.name"] {
                var request = FetchRequest(entity: "Book", sortKeys: [SortKey(path), SortKey("title")])
                request.includesPendingChanges = false
                #expect(
                    try editing.fetch(request).map(\.objectID) == (try Self.expectedOrder(stored, by: path)),
                    "stored order by \(path) from a context with unsaved changes")
            }
            try editing.save()
            try check("saved again", ObjectContext(store: store))
        }
    }
}
