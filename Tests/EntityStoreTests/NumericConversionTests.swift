import EntityStore
import Foundation
import TestSupport
import Testing

/// A number of the other numeric type is taken where it converts exactly (as Core Data's `NSNumber`): `4` for a
/// double attribute, `4.0` for an int64 one; anything inexact is refused with the attribute named.
@Suite struct NumericConversionTests {
    func schema() throws -> Schema {
        try Schema(version: 1) {
            Entity("Gauge") {
                Attribute("level", .double, default: 1, indexed: true, validation: .range(1, 10))
                Attribute("count", .int64, default: 2.0)
                Attribute("note", .string, optional: true)
                Attribute("boost", .double, default: 1, transient: true)
            }
        }
    }

    @Test func anIntegerLiteralDefaultAndRangeOfADoubleAttributeAreDoubles() throws {
        let gauge = try #require(try schema().entity("Gauge"))
        #expect(gauge.attributes[0].defaultValue == .double(1))
        #expect(gauge.attributes[0].validation?.minimum == .double(1))
        #expect(gauge.attributes[0].validation?.maximum == .double(10))
        #expect(gauge.attributes[1].defaultValue == .int(2))
        #expect(gauge.transientAttributes[0].defaultValue == .double(1))
        // An attribute changed after it was declared is given its types again by the schema.
        var changed = Attribute("rate", .double)
        changed.defaultValue = 3
        changed.validation = .range(0, 5)
        let later = try #require(try Schema(version: 1) { Entity("E") { changed } }.entity("E"))
        #expect(later.attributes[0].defaultValue == .double(3))
        #expect(later.attributes[0].validation?.maximum == .double(5))
        // One that does not convert is still refused, named.
        let refused = entityStoreError {
            _ = try Schema(version: 1) { Entity("E") { Attribute("n", .int64, default: 2.5) } }
        }
        #expect(refused?.code == .invalidSchema)
        #expect(refused?.failures.map(\.description).joined().contains("the default 2.5 is a double") == true)
    }

    /// `.int` takes an `Int` as well as the case's `Int64` (`.int(book.pages)`), while `.int(.max)` and literals still
    /// mean the case.
    @Test func anIntIsAnIntValue() {
        let pages: Int = 412
        #expect(Value.int(pages) == Value.int(Int64(412)))
        #expect(Value.int(.max) == Value.int(Int64.max))
        let values: [Value] = [.int(3), .int(pages), .int(Int.min)]
        #expect(values == [.int(Int64(3)), .int(Int64(412)), .int(Int64.min)])
    }

    @Test func setValueTakesExactNumbersOfTheOtherTypeAndRefusesTheRest() throws {
        try withStore(schema: try schema()) { store, _ in
            let context = ObjectContext(store: store)
            let gauge = try context.insert("Gauge")
            try gauge.setValue(4, forKey: "level")
            #expect(try gauge.value(forKey: "level") == .double(4))
            try gauge.setValue(7.0, forKey: "count")
            #expect(try gauge.value(forKey: "count") == .int(7))
            try gauge.setValue(3, forKey: "boost")
            #expect(try gauge.value(forKey: "boost") == .double(3))
            for (value, key) in [
                (Value.double(7.5), "count"), (.int(9_007_199_254_740_993), "level"), (.int(1), "note"),
            ] {
                let error = entityStoreError { try gauge.setValue(value, forKey: key) }
                #expect(error?.code == .typeMismatch && error?.key == key, "\(value) for \(key)")
            }
            #expect(entityStoreError { try gauge.setValue(.double(.nan), forKey: "count") }?.code == .typeMismatch)
            #expect(try gauge.value(forKey: "count") == .int(7), "a refused value changes nothing")
            try context.save()

            // Stored as doubles: the index finds them by a double and by an integer.
            let fresh = ObjectContext(store: store)
            let found = try fresh.fetch(FetchRequest(entity: "Gauge", predicate: try FetchPredicate("level == 4.0")))
            #expect(found.count == 1)
            #expect(try found.first?.value(forKey: "level") == .double(4))
            #expect(
                try fresh.count(for: FetchRequest(entity: "Gauge", predicate: try FetchPredicate("level == 4"))) == 1)
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func batchInsertsUpdatesAndCodableFormsConvertExactNumbers() throws {
        try withStore(schema: try schema()) { store, _ in
            // Rows naming every attribute in order are stored as given unless a number is converted.
            let rows = try store.batchInsert(
                into: "Gauge", keys: ["level", "count", "note"], rows: [[5, 3.0, "a"], [.double(6), 4, "b"]])
            let objects = try store.batchInsert(into: "Gauge", objects: [["level": 2, "count": 1.0]])
            let bad = entityStoreError {
                try store.batchInsert(into: "Gauge", keys: ["level", "count", "note"], rows: [[5, 3.5, "a"]])
            }
            #expect(bad?.code == .validationFailed)
            #expect(bad?.failures.first?.description.contains("Gauge.count is an int64; got 3.5") == true)

            let context = ObjectContext(store: store)
            func values(_ id: ObjectID) throws -> [Value] {
                let object = try context.existingObject(with: id)
                return [try object.value(forKey: "level"), try object.value(forKey: "count")]
            }
            #expect(try values(rows[0]) == [.double(5), .int(3)])
            #expect(try values(rows[1]) == [.double(6), .int(4)])
            #expect(try values(objects[0]) == [.double(2), .int(1)])
            // The range's bounds, given as integers, apply to the doubles.
            let outOfRange = entityStoreError { try store.batchInsert(into: "Gauge", objects: [["level": 11]]) }
            #expect(outOfRange?.code == .validationFailed)

            try store.batchUpdate("Gauge", where: try FetchPredicate("level < 3"), set: ["level": 8, "count": 9.0])
            let updated = ObjectContext(store: store)
            let object = try updated.existingObject(with: objects[0])
            #expect(try object.value(forKey: "level") == .double(8))
            #expect(try object.value(forKey: "count") == .int(9))

            struct Form: Codable {
                var level: Int
                var count: Double
            }
            let formed = try updated.insert("Gauge", from: Form(level: 3, count: 12))
            #expect(try formed.value(forKey: "level") == .double(3))
            #expect(try formed.value(forKey: "count") == .int(12))
            #expect(entityStoreError { try formed.update(from: Form(level: 4, count: 1.5)) }?.code == .typeMismatch)
            #expect(try formed.value(forKey: "level") == .double(3), "a refused form sets nothing")
            try updated.save()
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }
}
