import EntityStore
import Foundation
import LMDB
import TestSupport
import Testing

/// A model whose attributes carry rules, declared through the typed API.
final class Review: Model {
    @Stored(.validated(.range(1, 5))) var stars: Int = 3
    @Stored(.validated(.length(3...40))) var headline: String
    @Stored(.validated(.pattern("[A-Z]{2}-[0-9]{4}"))) var code: String?
}

@Suite struct ValidationRuleTests {
    func gearSchema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Gear") {
                Attribute("name", .string, validation: .length(2...12))
                Attribute("weight", .double, optional: true, validation: .range(0.0, 50.0))
                Attribute("count", .int64, default: 1, validation: .range(1, nil))
                Attribute("price", .decimal, optional: true, validation: .range(.decimal(0), .decimal(1000)))
                Attribute(
                    "bought", .date, optional: true, validation: .range(.date(Date(timeIntervalSince1970: 0)), nil))
                Attribute("photo", .binary, optional: true, validation: .length(...4))
                Attribute("sku", .string, optional: true, validation: .pattern("[a-z]+-[0-9]+"))
            }
        }
    }

    func failures(_ body: () throws -> Void) -> [String] {
        (entityStoreError(body)?.failures ?? []).map(\.description).sorted()
    }

    @Test func attributeRulesRefuseEveryBadValueOfASaveTogether() throws {
        let temporary = try TemporaryStore(schema: try gearSchema())
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let good = try context.insert("Gear")
        try good.setValue("tent", forKey: "name")
        try good.setValue(.double(3.5), forKey: "weight")
        try good.setValue(.data([1, 2, 3, 4]), forKey: "photo")
        try good.setValue("abc-12", forKey: "sku")
        try good.setValue(.date(Date(timeIntervalSince1970: 10)), forKey: "bought")
        // "é" is one character: twelve characters fit.
        let bad = try context.insert("Gear")
        try bad.setValue("x", forKey: "name")
        try bad.setValue(.double(50.5), forKey: "weight")
        try bad.setValue(.int(0), forKey: "count")
        try bad.setValue(.decimal(Decimal(string: "1000.01")!), forKey: "price")
        try bad.setValue(.date(Date(timeIntervalSince1970: -1)), forKey: "bought")
        try bad.setValue(.data([1, 2, 3, 4, 5]), forKey: "photo")
        try bad.setValue("ABC-12", forKey: "sku")
        let error = entityStoreError { try context.save() }
        #expect(error?.code == .validationFailed)
        let messages = (error?.failures ?? []).map { "\($0.key ?? ""): \($0.message)" }
        #expect(error?.failures.count == 7, "\(messages)")
        #expect(error?.failures.allSatisfy { $0.objectID == bad.objectID } == true)
        #expect(messages.contains("name: 1 characters, fewer than the minimum 2"))
        #expect(messages.contains { $0.hasPrefix("weight: 50.5 is above the maximum") })
        #expect(messages.contains { $0.hasPrefix("count: 0 is below the minimum 1") })
        #expect(messages.contains { $0.hasPrefix("price:") && $0.contains("above the maximum") })
        #expect(messages.contains { $0.hasPrefix("bought:") && $0.contains("below the minimum") })
        #expect(messages.contains("photo: 5 bytes, more than the maximum 4"))
        #expect(messages.contains { $0.hasPrefix("sku:") && $0.contains("does not match the pattern '[a-z]+-[0-9]+'") })
        // Nothing was written; mended, the same save succeeds.
        #expect(try ObjectContext(store: temporary.store).count(for: FetchRequest(entity: "Gear")) == 0)
        try bad.setValue("sac à dos él", forKey: "name")
        for key in ["weight", "price", "bought", "photo", "sku"] { try bad.setValue(.null, forKey: key) }
        try bad.setValue(.int(2), forKey: "count")
        try context.save()
        #expect(try ObjectContext(store: temporary.store).count(for: FetchRequest(entity: "Gear")) == 2)
        // An update is checked as an insert is; nil is not checked against the rules.
        try good.setValue(.int(-3), forKey: "count")
        #expect(failures { try context.save() } == ["Gear.count (\(good.objectID)): -3 is below the minimum 1"])
    }

    @Test func aSchemaWithRulesThatDoNotFitItsAttributesIsRefused() throws {
        let error = entityStoreError {
            _ = try Schema(version: 1) {
                Entity("Bad") {
                    Attribute("a", .string, validation: .range(1, 2))
                    Attribute("b", .int64, validation: .range("x", nil))
                    Attribute("c", .int64, validation: .range(5, 1))
                    Attribute("d", .int64, validation: .length(1...2))
                    Attribute("e", .string, validation: AttributeValidation(minimumLength: -1))
                    Attribute("f", .int64, validation: .pattern("[0-9]+"))
                    Attribute("g", .string, validation: .pattern("(unclosed"))
                    Attribute("h", .int64, default: 9, validation: .range(1, 5))
                    Attribute("i", .string, validation: AttributeValidation(minimumLength: 3, maximumLength: 2))
                }
            }
        }
        #expect(error?.code == .invalidSchema)
        let keys = (error?.failures ?? []).compactMap(\.key)
        #expect(Set(keys) == ["a", "b", "c", "d", "e", "f", "g", "h", "i"], "\(error?.failures ?? [])")
        #expect(error?.failures.first { $0.key == "g" }?.message.contains("does not compile") == true)
        #expect(error?.failures.first { $0.key == "h" }?.message.contains("the default breaks its rules") == true)
    }

    @Test func changingRulesNeedsNoMigrationAndTheNewRulesApply() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("rules.store")
        func schema(_ rules: AttributeValidation?) throws -> Schema {
            try Schema(version: 1) { Entity("Note") { Attribute("text", .string, validation: rules) } }
        }
        do {
            let store = try PersistentStore.open(path: path, schema: try schema(nil), options: .init(sync: .noSync))
            let context = ObjectContext(store: store)
            try context.insert("Note").setValue("a long note", forKey: "text")
            try context.save()
        }
        // Same version, other rules: it opens; stored values stay; new saves follow the new rules.
        let store = try PersistentStore.open(
            path: path, schema: try schema(.length(...5)), options: .init(sync: .noSync))
        let context = ObjectContext(store: store)
        #expect(try context.fetch(FetchRequest(entity: "Note")).first?["text"] == "a long note")
        try context.insert("Note").setValue("too long", forKey: "text")
        #expect(entityStoreError { try context.save() }?.code == .validationFailed)
    }

    @Test func customRulesSeeInsertsUpdatesAndDeletesIncludingCascades() throws {
        try withStore { store, _ in
            let library = try Library(store)
            let seen = Locked<[String]>([])
            struct NoSequels: Error, CustomStringConvertible {
                var description: String { "sequels are not allowed" }
            }
            try store.addValidation(for: "Book") { book, event in
                let title = try book["title"].stringValue
                seen.withLock { $0.append("\(event.rawValue) \(title)") }
                if event == .insert && title.hasSuffix("II") { throw NoSequels() }
                if event == .delete && title == "Momo" {
                    throw EntityStoreError(.validationFailed, "Momo stays", key: "title")
                }
            }
            #expect(entityStoreError { try store.addValidation(for: "Nothing") { _, _ in } }?.code == .unknownEntity)
            let context = ObjectContext(store: store)
            let sequel = try context.insert("Book")
            try sequel.setValue("Momo II", forKey: "title")
            try context.existingObject(with: library.ids["La Peste"]!).setValue("La Peste (poche)", forKey: "title")
            // Deleting Ende cascades to his books (the fixture's delete rule): Momo's delete is refused.
            let momo = try context.existingObject(with: library.ids["Momo"]!)
            try context.delete(try #require(try momo.object(forKey: "author")))
            let error = entityStoreError { try context.save() }
            #expect(error?.code == .validationFailed)
            let described = (error?.failures ?? []).map(\.description)
            #expect(
                described.contains {
                    $0.contains(sequel.objectID.description) && $0.contains("sequels are not allowed")
                })
            #expect(described.contains { $0.hasPrefix("Book.title") && $0.contains("Momo stays") })
            let events = seen.withLock { $0 }
            #expect(events.contains("insert Momo II") && events.contains("update La Peste (poche)"))
            #expect(events.contains("delete Momo") && events.contains("delete Die unendliche Geschichte"))
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Book")) == 7)
        }
    }

    @Test func typedModelsDeclareRulesAndTypedRulesGetModels() throws {
        let temporary = try TemporaryStore(schema: try Schema(version: 1, models: [Review.self]))
        defer { temporary.remove() }
        let declared = try #require(temporary.store.schema.entity("Review"))
        #expect(declared.attribute("stars")?.validation == .range(1, 5))
        try temporary.store.addValidation(for: Review.self) { review, event in
            if event == .insert && review.headline.lowercased().contains("spam") {
                throw EntityStoreError(.validationFailed, "no spam", key: "headline")
            }
        }
        let context = ObjectContext(store: temporary.store)
        let review = try context.insert(Review.self)
        review.stars = 6
        review.headline = "Buy spam"
        review.code = "AB-123"
        let keys = (entityStoreError { try context.save() }?.failures ?? []).compactMap(\.key).sorted()
        #expect(keys == ["code", "headline", "stars"])
        review.stars = 5
        review.headline = "Lovely"
        review.code = "AB-1234"
        try context.save()
    }

    @Test func batchInsertsFollowTheRulesToo() throws {
        let temporary = try TemporaryStore(schema: try gearSchema())
        defer { temporary.remove() }
        let store = temporary.store
        let dictionaries = entityStoreError {
            try store.batchInsert(into: "Gear", objects: [["name": "ok"], ["name": "x", "count": 0]])
        }
        #expect(dictionaries?.code == .validationFailed && dictionaries?.failures.count == 2)
        let rows = entityStoreError {
            try store.batchInsert(into: "Gear", keys: ["name", "sku"], rows: [["fine", "a-1"], ["fine", "A-1"]])
        }
        #expect(rows?.failures.map(\.message) == ["object 1: sku: \"A-1\" does not match the pattern '[a-z]+-[0-9]+'"])
        #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Gear")) == 0)
        try store.batchInsert(into: "Gear", keys: ["name", "sku"], rows: [["fine", "a-1"]])
        #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Gear")) == 1)
    }
}
