import EntityStore
import Foundation
import TestSupport
import Testing

/// A typed model with derived attributes.
final class Shelf: Model {
    @Stored var label: String
    @Stored(.derived("uppercase(label)")) var sign: String = ""
}

/// Derived attributes (Core Data's derived attributes): computed at every save, stored and indexable.
@Suite struct DerivedAttributeTests {
    func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Writer") {
                Attribute("name", .string)
                Attribute("bookCount", .int64, default: 0, indexed: true, derived: "books.@count")
                Attribute("totalPages", .int64, default: 0, derived: "books.@sum.pages")
                Attribute("longest", .int64, optional: true, derived: "books.@max.pages")
                Relationship("books", to: "Volume", inverse: "writer", toMany: true)
            }
            Entity("Volume") {
                Attribute("title", .string)
                Attribute("pages", .int64, default: 0)
                Attribute("sortTitle", .string, optional: true, derived: "lowercase(title)")
                Attribute("writerName", .string, optional: true, derived: "writer.name")
                Attribute("savedAt", .date, optional: true, derived: "now()")
                Relationship("writer", to: "Writer", inverse: "books")
            }
        }
    }

    @Test func derivedValuesFollowEverySaveThroughRelationshipsToo() throws {
        try withStore(schema: try schema()) { store, _ in
            let context = ObjectContext(store: store)
            let pratchett = try context.insert("Writer")
            try pratchett.setValue("Terry Pratchett", forKey: "name")
            let gaiman = try context.insert("Writer")
            try gaiman.setValue("Neil Gaiman", forKey: "name")
            var volumes: [ManagedObject] = []
            for (title, pages) in [("Mort", 243), ("Guards! Guards!", 288), ("Good Omens", 412)] {
                let volume = try context.insert("Volume")
                try volume.setValue(.string(title), forKey: "title")
                try volume.setValue(.int(Int64(pages)), forKey: "pages")
                try volume.setObject(title == "Good Omens" ? gaiman : pratchett, forKey: "writer")
                volumes.append(volume)
            }
            let before = Date()
            try context.save()
            #expect(try pratchett["bookCount"] == 2 && pratchett["totalPages"] == 531 && pratchett["longest"] == 288)
            #expect(try volumes[1]["sortTitle"] == "guards! guards!" && volumes[2]["writerName"] == "Neil Gaiman")
            if case .date(let saved) = try volumes[0]["savedAt"] { #expect(saved >= before) } else { Issue.record() }

            // A volume's pages change: its writer (not otherwise changed) is recomputed.
            try volumes[0].setValue(.int(300), forKey: "pages")
            try context.save()
            #expect(try pratchett["totalPages"] == 588 && pratchett["longest"] == 300)
            // A volume moves to another writer; a writer is renamed; a volume is deleted.
            try volumes[1].setObject(gaiman, forKey: "writer")
            try gaiman.setValue("N. Gaiman", forKey: "name")
            try context.delete(volumes[2])
            try context.save()
            #expect(try pratchett["bookCount"] == 1 && gaiman["bookCount"] == 1 && gaiman["totalPages"] == 288)
            #expect(try volumes[1]["writerName"] == "N. Gaiman")
            // Stored: another context reads them, and the index serves them.
            let reader = ObjectContext(store: store)
            let request = FetchRequest(entity: "Writer", predicate: try FetchPredicate("bookCount == 1"))
            #expect(try reader.fetch(request).count == 2)
            #expect(try reader.explain(request).description.contains("index Writer.bookCount"))
            // The app does not set them.
            let error = entityStoreError { try pratchett.setValue(.int(9), forKey: "bookCount") }
            #expect(error?.code == .invalidValue && error?.message.contains("derived") == true)
        }
    }

    /// A sum past what its attribute holds (integers beyond 64 bits, decimals beyond a decimal) refuses the save or
    /// the batch that would store it, naming the attribute and the object, and leaves the store as it was.
    @Test func aDerivedSumThatOverflowsIsRefusedAndNothingIsWritten() throws {
        var schema = try schema()
        let writer = schema.entities.firstIndex { $0.name == "Writer" }!
        let volume = schema.entities.firstIndex { $0.name == "Volume" }!
        schema.entities[volume].attributes.append(Attribute("price", .decimal, optional: true))
        schema.entities[writer].attributes.append(
            Attribute("totalPrice", .decimal, optional: true, derived: "books.@sum.price"))
        try withStore(schema: schema) { store, _ in
            let context = ObjectContext(store: store)
            let author = try context.insert("Writer")
            try author.setValue("Ann", forKey: "name")
            for title in ["a", "b"] {
                let book = try context.insert("Volume")
                try book.setValue(.string(title), forKey: "title")
                try book.setValue(.int(Int64.max / 2 + 1), forKey: "pages")
                try book.setObject(author, forKey: "writer")
            }
            let sum = entityStoreError { try context.save() }
            #expect(sum?.code == .validationFailed)
            #expect(sum?.key == "totalPages" && sum?.objectID == author.objectID, "\(String(describing: sum))")
            #expect(sum?.message.contains("'books.@sum.pages'") == true)
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Writer")) == 0)

            // Saved within range, then pushed past it by a batch update of the books.
            for book in try author.objects(forKey: "books") { try book.setValue(.int(1), forKey: "pages") }
            try context.save()
            let batch = entityStoreError {
                _ = try store.batchUpdate("Volume", where: nil, set: ["pages": .int(Int64.max)])
            }
            #expect(batch?.code == .validationFailed && batch?.key == "totalPages", "\(String(describing: batch))")
            let reader = ObjectContext(store: store)
            #expect(try reader.existingObject(with: author.objectID)["totalPages"] == 2)
            #expect(try store.checkIntegrity().findings.isEmpty)

            // Decimals: the sum of two of the greatest is no decimal.
            for book in try author.objects(forKey: "books") {
                try book.setValue(.decimal(Decimal.greatestFiniteMagnitude), forKey: "price")
            }
            let decimal = entityStoreError { try context.save() }
            #expect(decimal?.key == "totalPrice" && decimal?.message.contains("overflows") == true)
            context.rollback()
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func badDerivationsAreRefusedWithTheSchema() throws {
        let error = entityStoreError {
            _ = try Schema(version: 1) {
                Entity("A") {
                    Attribute("name", .string)
                    Attribute("n1", .string, derived: "bs.@count")
                    Attribute("n2", .int64, derived: "nothing")
                    Attribute("n3", .string, optional: true, derived: "bs.label")
                    Attribute("n4", .int64, derived: "lowercase(name)")
                    Attribute("n5", .int64, unique: true, derived: "bs.@count")
                    Attribute("n6", .int64, derived: "now()")
                    Relationship("bs", to: "B", inverse: "a", toMany: true)
                }
                Entity("B") {
                    Attribute("label", .string)
                    Relationship("a", to: "A", inverse: "bs")
                }
            }
        }
        #expect(error?.code == .invalidSchema)
        #expect(
            Set((error?.failures ?? []).compactMap(\.key)) == ["n1", "n2", "n3", "n4", "n5", "n6"],
            "\(error?.failures ?? [])")
    }

    @Test func batchesComputeAndRefuseDerivedAttributes() throws {
        try withStore(schema: try schema()) { store, _ in
            try store.batchInsert(into: "Volume", keys: ["title", "pages"], rows: [["Small Gods", 284]])
            let volume = try #require(try ObjectContext(store: store).fetch(FetchRequest(entity: "Volume")).first)
            #expect(try volume["sortTitle"] == "small gods" && volume["writerName"] == .null)
            #expect(
                entityStoreError { try store.batchInsert(into: "Writer", objects: [["name": "X", "bookCount": 3]]) }?
                    .code == .validationFailed)
            try store.batchUpdate("Volume", set: ["title": "Pyramids"])
            let reread = try #require(try ObjectContext(store: store).fetch(FetchRequest(entity: "Volume")).first)
            #expect(try reread["sortTitle"] == "pyramids")
            #expect(
                entityStoreError { try store.batchUpdate("Volume", set: ["sortTitle": "x"]) }?.code == .validationFailed
            )
        }
    }

    @Test func typedModelsDeclareDerivedAttributes() throws {
        let temporary = try TemporaryStore(schema: try Schema(version: 1, models: [Shelf.self]))
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let shelf = try context.insert(Shelf.self)
        shelf.label = "Fantasy"
        try context.save()
        #expect(shelf.sign == "FANTASY")
        shelf.sign = "nope"
        #expect(shelf.lastError?.code == .invalidValue)
        #expect(entityStoreError { try context.save() }?.code == .invalidValue)
    }
}

/// Derived attributes read through relationships are what the store holds after every write, however stale the
/// writing context's view, whatever its merge policy, and after batch updates and deletes: the integrity check
/// recomputes them.
@Suite struct DerivedAttributeRaceTests {
    /// A writer "w" with one volume (10 pages) saved by `other` after `stale` read w's volumes as none.
    private func staleWriter(
        _ store: PersistentStore, policy: MergePolicy
    ) throws -> (ObjectContext, ManagedObject, ObjectID) {
        let setup = ObjectContext(store: store)
        let writer = try setup.insert("Writer")
        try writer.setValue("w", forKey: "name")
        try setup.save()
        let stale = ObjectContext(store: store, name: "stale")
        stale.mergePolicy = policy
        let staleWriter = try stale.existingObject(with: writer.objectID)
        #expect(try staleWriter.objectIDs(forKey: "books").isEmpty)
        let other = ObjectContext(store: store, name: "other")
        let first = try other.insert("Volume")
        try first.setValue("v1", forKey: "title")
        try first.setValue(.int(10), forKey: "pages")
        try first.setObject(try other.existingObject(with: writer.objectID), forKey: "writer")
        try other.save()
        return (stale, staleWriter, writer.objectID)
    }

    private func expectHealthy(_ store: PersistentStore) throws {
        let (findings, _) = try store.checkIntegrity()
        #expect(findings.isEmpty, "\(findings)")
    }

    /// A stale context moves w's one volume out and a new one in: its own count stays 1 (as it read it), so the save
    /// writes only w's relationships, but the store held 0 (the volume was moved out elsewhere), and the values
    /// derived again in the save's transaction go from 0 to 1 and 10. The history records that change from the
    /// stored values: told from the context's stale ones, it named no change of the count, and a reader replaying
    /// the history kept 0 (found by the racing contexts' history replay).
    @Test(arguments: [MergePolicy.error, .propertyLevel, .contextWins, .storeWins])
    func aDerivedValueRewrittenFromTheStoreIsRecordedFromTheStoredValue(policy: MergePolicy) throws {
        try withStore(schema: try DerivedAttributeTests().schema()) { store, _ in
            let setup = ObjectContext(store: store)
            let writer = try setup.insert("Writer")
            try writer.setValue("w", forKey: "name")
            let first = try setup.insert("Volume")
            try first.setValue("v1", forKey: "title")
            try first.setValue(.int(10), forKey: "pages")
            try first.setObject(writer, forKey: "writer")
            try setup.save()
            let stale = ObjectContext(store: store, name: "stale")
            stale.mergePolicy = policy
            let staleWriter = try stale.existingObject(with: writer.objectID)
            #expect(try staleWriter.value(forKey: "bookCount") == .int(1))
            let staleFirst = try #require(try staleWriter.objects(forKey: "books").first)
            try first.setObject(nil, forKey: "writer")
            try setup.save()

            let before = try store.lastTransaction()
            try staleWriter.remove(staleFirst, fromKey: "books")
            let second = try stale.insert("Volume")
            try second.setValue("v2", forKey: "title")
            try second.setValue(.int(10), forKey: "pages")
            try second.setObject(staleWriter, forKey: "writer")
            try stale.save()
            let check = try ObjectContext(store: store).existingObject(with: writer.objectID)
            #expect(try check.value(forKey: "bookCount") == .int(1))
            #expect(try check.value(forKey: "totalPages") == .int(10))
            let change = try #require(
                try store.history(since: before).flatMap(\.changes).first { $0.objectID == writer.objectID })
            #expect(change.oldValues["bookCount"] == .int(0))
            #expect(change.newValues["bookCount"] == .int(1))
            #expect(change.oldValues["totalPages"] == .int(0))
            #expect(change.newValues["totalPages"] == .int(10))
            #expect(try HistoryReplay(store).problems.isEmpty)
            try expectHealthy(store)
        }
    }

    @Test(arguments: [MergePolicy.propertyLevel, .contextWins, .storeWins])
    func aCountFromAStaleViewIsRecomputedFromTheStore(policy: MergePolicy) throws {
        try withStore(schema: try DerivedAttributeTests().schema()) { store, _ in
            let (stale, writer, id) = try staleWriter(store, policy: policy)
            let second = try stale.insert("Volume")
            try second.setValue("v2", forKey: "title")
            try second.setValue(.int(5), forKey: "pages")
            try second.setObject(writer, forKey: "writer")
            try stale.save()
            let check = try ObjectContext(store: store).existingObject(with: id)
            #expect(try check.value(forKey: "bookCount") == .int(2))
            #expect(try check.value(forKey: "totalPages") == .int(15))
            // The saving context holds what it wrote.
            #expect(try writer.value(forKey: "bookCount") == .int(2))
            try expectHealthy(store)
        }
    }

    /// A context that has not merged another's deletes saves changes to the other ends of the deleted objects'
    /// relationships: a rename of a writer whose volume was deleted elsewhere (the volume's `writerName` reads
    /// it; another volume, a fault, is read in the save's transaction and derives the new name), and a new volume of a writer deleted elsewhere (its `bookCount` reads the volumes). The objects deleted
    /// elsewhere have nothing to derive: the rename is saved, the volume's link to the deleted writer is refused
    /// as such, and the store stays whole (found by the racing contexts' seed 797, where the save threw
    /// `objectNotFound` for the deleted volume).
    @Test(arguments: [MergePolicy.error, .propertyLevel, .contextWins, .storeWins])
    func objectsDeletedElsewhereAreNotDerivedAgain(policy: MergePolicy) throws {
        try withStore(schema: try DerivedAttributeTests().schema()) { store, _ in
            let (stale, writer, id) = try staleWriter(store, policy: policy)
            let second = try stale.insert("Writer")
            try second.setValue("x", forKey: "name")
            try stale.save()
            let other = ObjectContext(store: store, name: "other")
            let kept = try other.insert("Volume")
            try kept.setValue("kept", forKey: "title")
            try kept.setObject(try other.existingObject(with: id), forKey: "writer")
            try other.save()
            // The stale context sees w's volumes (faults it never loaded) and x.
            #expect(try writer.objectIDs(forKey: "books").count == 0)
            try stale.refresh(writer, mergeChanges: false)
            let volumeIDs = try writer.objectIDs(forKey: "books")
            #expect(volumeIDs.count == 2)
            let volumeID = try #require(volumeIDs.first { $0 != kept.objectID })
            #expect(try stale.object(with: kept.objectID).isFault)
            try other.delete(try other.existingObject(with: volumeID))
            try other.delete(try other.existingObject(with: second.objectID))
            try other.save()

            try writer.setValue("w2", forKey: "name")
            try stale.save()
            let check = ObjectContext(store: store)
            #expect(try check.existingObject(with: id).value(forKey: "name") == "w2")
            #expect(try check.existingObject(with: id).value(forKey: "bookCount") == .int(1))
            // The volume still stored, a fault until the save read it, derives the new name.
            #expect(try check.existingObject(with: kept.objectID).value(forKey: "writerName") == "w2")
            #expect(try stale.object(with: kept.objectID).value(forKey: "writerName") == "w2")
            try expectHealthy(store)

            let volume = try stale.insert("Volume")
            try volume.setValue("v3", forKey: "title")
            try volume.setObject(second, forKey: "writer")
            let error = entityStoreError { try stale.save() }
            let description = error.map { "\($0)" } ?? ""
            #expect(description.contains("links to \(second.objectID), which was deleted elsewhere"))
            try expectHealthy(store)
        }
    }

    @Test func aBatchUpdateRecomputesWhatReadsItThroughARelationship() throws {
        try withStore(schema: try DerivedAttributeTests().schema()) { store, _ in
            let (_, _, id) = try staleWriter(store, policy: .error)
            let since = try store.lastTransaction()
            try store.batchUpdate("Volume", where: nil, set: ["pages": .int(40)])
            let check = try ObjectContext(store: store).existingObject(with: id)
            #expect(try check.value(forKey: "totalPages") == .int(40))
            #expect(try check.value(forKey: "longest") == .int(40))
            let changes = try store.history(since: since).flatMap(\.changes)
            #expect(changes.contains { $0.objectID == id && $0.changedKeys.contains("totalPages") })
            try expectHealthy(store)
        }
    }

    @Test func aBatchDeleteRecomputesTheObjectsThatLostLinks() throws {
        try withStore(schema: try DerivedAttributeTests().schema()) { store, _ in
            let (_, _, id) = try staleWriter(store, policy: .error)
            try store.batchDelete("Volume", where: nil)
            let check = try ObjectContext(store: store).existingObject(with: id)
            #expect(try check.value(forKey: "bookCount") == .int(0))
            #expect(try check.value(forKey: "totalPages") == .int(0))
            try expectHealthy(store)
        }
    }
}
