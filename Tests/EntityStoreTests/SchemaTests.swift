import EntityStore
import Foundation
import TestSupport
import Testing

@Suite struct SchemaTests {
    /// An attribute is found by name whichever spelling of the name: names of the key's length are compared first,
    /// then every name, so a canonically equivalent spelling of another length ("e" and a combining accent for
    /// "é") still finds it.
    @Test func anAttributeIsFoundByAnyCanonicallyEquivalentSpellingOfItsName() {
        let entity = Entity("Menu") {
            Attribute("title", .string)
            Attribute("caf\u{E9}", .string)
            Attribute("price", .double)
        }
        #expect(entity.attributeIndex("price") == 2)
        #expect(entity.attributeIndex("caf\u{E9}") == 1)
        #expect(entity.attributeIndex("cafe\u{301}") == 1)
        #expect(entity.attributeIndex("pric") == nil && entity.attributeIndex("prices") == nil)
    }

    @Test func theFixtureSchemaDeclaresEntitiesAttributesAndRelationships() throws {
        let schema = try Fixtures.librarySchema()
        #expect(schema.entities.map(\.name) == ["Author", "Book", "Chapter", "Note", "Tag", "Publisher"])
        let book = try #require(schema.entity("Book"))
        #expect(book.attributes.map(\.name) == ["title", "pages", "price", "isbn", "cover", "score", "inPrint"])
        #expect(book.relationship("tags")?.isToMany == true)
        #expect(schema.entity("Tag")?.attribute("name")?.isIndexed == true)  // unique implies indexed
        #expect(schema.fingerprint == (try Fixtures.librarySchema(version: 2)).fingerprint)
    }

    @Test func everyProblemInADeclarationIsReportedAtOnce() {
        let error = entityStoreError {
            _ = try Schema(version: 1) {
                Entity("A") {
                    Attribute("x", .int64, default: "text")
                    Attribute("x", .string)
                    Relationship("bs", to: "B", inverse: "nothing", toMany: true)
                    Relationship("cs", to: "C", inverse: "a")
                }
                Entity("B") {
                    Relationship("a", to: "A", inverse: "wrong")
                }
                Entity("A")
            }
        }
        #expect(error?.code == .invalidSchema)
        let messages = error?.failures.map(\.description) ?? []
        #expect(messages.contains("A.x: the default \"text\" is a string, not an int64"))
        #expect(messages.contains("A.x: duplicate property name 'x'"))
        #expect(messages.contains("A.bs: unknown inverse 'nothing' on 'B'"))
        #expect(messages.contains("A.cs: unknown destination entity 'C'"))
        #expect(messages.contains("B.a: unknown inverse 'wrong' on 'A'"))
        #expect(messages.contains("A: duplicate entity name 'A'"))
        #expect(messages.count == 6)
    }

    @Test func aGeneratedDefaultMustFitItsAttribute() throws {
        let error = entityStoreError {
            _ = try Schema(version: 1) {
                Entity("A") {
                    Attribute("code", .string, generated: .uuid)
                    Attribute("at", .date, default: .date(Date(timeIntervalSinceReferenceDate: 0)), generated: .now)
                    Attribute("id", .uuid, generated: .uuid)
                }
            }
        }
        #expect(
            error?.failures.map(\.description) == [
                "A.code: a generated uuid default is for a uuid attribute, not a string",
                "A.at: a generated default cannot go with a default value or a derivation",
            ])
        // Part of the fingerprint: adding one is a schema change.
        let plain = try Schema(version: 1) { Entity("A") { Attribute("id", .uuid, optional: true) } }
        let generated = try Schema(version: 1) {
            Entity("A") { Attribute("id", .uuid, optional: true, generated: .uuid) }
        }
        #expect(plain.fingerprint != generated.fingerprint)
    }

    /// `Schema.entities` is settable: a list changed after the schema was made is validated when a store opens with
    /// it (it was taken as it was: a duplicate attribute, a relationship to no entity, a default of the wrong type),
    /// and a sub-entity added to it inherits its superentity's properties.
    @Test func aSchemaChangedAfterItWasMadeIsValidatedWhenAStoreOpens() throws {
        let dir = try TemporaryDirectory(prefix: "changed-schema")
        defer { dir.remove() }
        var broken = try Fixtures.librarySchema()
        let book = broken.entities.firstIndex { $0.name == "Book" }!
        broken.entities[book].attributes.append(Attribute("pages", .string, default: .int(3)))
        broken.entities[book].relationships.append(Relationship("series", to: "Series", inverse: "books"))
        let error = entityStoreError { _ = try PersistentStore.open(path: dir.path("broken.store"), schema: broken) }
        #expect(error?.code == .invalidSchema)
        let messages = error?.failures.map(\.description).joined(separator: "; ") ?? ""
        #expect(messages.contains("pages"), "\(messages)")
        #expect(messages.contains("Series"), "\(messages)")
        #expect(!FileManager.default.fileExists(atPath: dir.path("broken.store") + "/data.mdb"))

        var extended = try Fixtures.librarySchema()
        extended.entities.append(Entity("Comic", inherits: "Book") { Attribute("artist", .string, optional: true) })
        let store = try PersistentStore.open(path: dir.path("extended.store"), schema: extended)
        #expect(store.schema.entity("Comic")?.attributes.map(\.name).contains("title") == true)
        let context = ObjectContext(store: store)
        let author = try context.insert("Author")
        try author.setValue("Hergé", forKey: "name")
        let comic = try context.insert("Comic")
        try comic.setValue("Tintin", forKey: "title")
        try comic.setObject(author, forKey: "author")
        try context.save()
        #expect(try ObjectContext(store: store).fetch(FetchRequest(entity: "Book")).count == 1)
    }

    @Test func anInverseThatPointsElsewhereIsRefused() {
        let error = entityStoreError {
            _ = try Schema(version: 1) {
                Entity("A") {
                    Relationship("b", to: "B", inverse: "a1")
                    Relationship("b2", to: "B", inverse: "a2")
                }
                Entity("B") {
                    Relationship("a1", to: "A", inverse: "b2")
                    Relationship("a2", to: "A", inverse: "b2")
                }
            }
        }
        #expect(error?.failures.contains { $0.message.contains("does not point back") } == true)
    }

    @Test func objectIDStringFormRoundTrips() throws {
        let id = ObjectID(entityName: "Book", primaryKey: 42)
        #expect(id.description == "Book/p42")
        #expect(ObjectID(string: "Book/p42") == id)
        for bad in ["Book", "Book/42", "/p1", "Book/p0", "Book/p-1", "Book/px", ""] {
            #expect(ObjectID(string: bad) == nil, "\(bad)")
        }
    }
}
