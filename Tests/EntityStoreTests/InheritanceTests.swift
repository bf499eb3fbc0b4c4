import EntityStore
import Foundation
import TestSupport
import Testing

/// Entity inheritance (Core Data's sub-entities): abstract entities, inherited properties, fetches and controllers
/// over a hierarchy, relationships to a superentity, uniqueness across a hierarchy, migrations.
@Suite struct InheritanceTests {
    static func zooSchema(version: Int = 1) throws -> Schema {
        try Schema(version: version) {
            Entity("Person") {
                Attribute("name", .string)
                Relationship("pets", to: "Animal", inverse: "owner", toMany: true, deleteRule: .cascade)
                Relationship("dogs", to: "Dog", inverse: "walker", toMany: true)
            }
            Entity("Animal", abstract: true) {
                Attribute("name", .string, indexed: true)
                Attribute("tag", .string, optional: true, unique: true)
                Attribute("legs", .int64, default: 4)
                Relationship("owner", to: "Person", inverse: "pets")
            }
            Entity("Dog", inherits: "Animal") {
                Attribute("breed", .string, optional: true)
                Relationship("walker", to: "Person", inverse: "dogs")
            }
            Entity("Cat", inherits: "Animal") {
                Attribute("indoor", .bool, default: true)
            }
            Entity("Puppy", inherits: "Dog") {
                Attribute("weeks", .int64, default: 8)
            }
        }
    }

    /// Inserts an animal of `entity` with a name, legs and an optional owner.
    @discardableResult
    static func animal(
        _ context: ObjectContext, _ entity: String, _ name: String, legs: Int64 = 4, owner: ManagedObject? = nil
    ) throws -> ManagedObject {
        let object = try context.insert(entity)
        try object.setValue(.string(name), forKey: "name")
        try object.setValue(.int(legs), forKey: "legs")
        if let owner { try object.setObject(owner, forKey: "owner") }
        return object
    }

    func names(_ objects: [ManagedObject]) throws -> [String] { try objects.map { try $0["name"].stringValue } }

    @Test func subEntitiesInheritTheirParentsPropertiesFirst() throws {
        let schema = try Self.zooSchema()
        #expect(schema.entity("Dog")?.attributes.map(\.name) == ["name", "tag", "legs", "breed"])
        #expect(schema.entity("Puppy")?.attributes.map(\.name) == ["name", "tag", "legs", "breed", "weeks"])
        #expect(schema.entity("Puppy")?.relationships.map(\.name) == ["owner", "walker"])
        #expect(schema.entity("Cat")?.superentity == "Animal" && schema.entity("Animal")?.isAbstract == true)
        #expect(schema.isKind("Puppy", of: "Animal") && schema.isKind("Dog", of: "Dog"))
        #expect(!schema.isKind("Cat", of: "Dog") && !schema.isKind("Animal", of: "Dog"))
        #expect(schema.subentities(of: "Animal").map(\.name) == ["Dog", "Cat"])
        // Resolving again (a schema made from another's entities) changes nothing; the coded form round-trips.
        #expect(try Schema(version: 1, entities: schema.entities) == schema)
        let decoded = try JSONDecoder().decode(Schema.self, from: try JSONEncoder().encode(schema))
        #expect(decoded == schema && decoded.fingerprint == schema.fingerprint)
    }

    @Test func badHierarchiesAreRefusedNamingEachProblem() throws {
        let error = entityStoreError {
            _ = try Schema(version: 1) {
                Entity("A", inherits: "B") {}
                Entity("B", inherits: "A") {}
                Entity("C", inherits: "Nowhere") {}
                Entity("Base") { Attribute("x", .string) }
                Entity("Sub", inherits: "Base") { Attribute("x", .int64) }
            }
        }
        #expect(error?.code == .invalidSchema)
        let messages = error?.failures.map(\.description).joined(separator: "\n") ?? ""
        #expect(messages.contains("inheritance cycle"))
        #expect(messages.contains("unknown superentity 'Nowhere'"))
        #expect(messages.contains("'x' is inherited from Base and cannot be declared again differently"))
    }

    @Test func abstractEntitiesRefuseInsertsNamingTheirSubEntities() throws {
        try withStore(schema: try Self.zooSchema()) { store, _ in
            let context = ObjectContext(store: store)
            let error = entityStoreError { _ = try context.insert("Animal") }
            #expect(error?.code == .invalidObject)
            #expect(error?.message == "Animal is abstract: insert one of its sub-entities (Dog, Cat, Puppy)")
            #expect(context.insertedObjects.isEmpty)
            let batch = entityStoreError { _ = try store.batchInsert(into: "Animal", objects: [["name": "x"]]) }
            #expect(batch?.code == .invalidObject)
        }
    }

    @Test func relationshipsToASuperentityHoldEverySubEntity() throws {
        try withStore(schema: try Self.zooSchema()) { store, _ in
            let context = ObjectContext(store: store)
            let ann = try context.insert("Person")
            try ann.setValue("Ann", forKey: "name")
            let rex = try Self.animal(context, "Dog", "Rex", owner: ann)
            let tom = try Self.animal(context, "Cat", "Tom", owner: ann)
            let bit = try Self.animal(context, "Puppy", "Bit", owner: ann)
            // One key sequence for the hierarchy: no two animals share a key.
            #expect(Set([rex, tom, bit].map(\.objectID.primaryKey)).count == 3)
            // A relationship to Dog takes a Puppy, not a Cat.
            try bit.setObject(ann, forKey: "walker")
            let refused = entityStoreError { try tom.setObject(ann, forKey: "walker") }
            #expect(refused?.code == .unknownKey)
            let wrong = entityStoreError { try ann.add(tom, toKey: "dogs") }
            #expect(wrong?.code == .typeMismatch)
            #expect(wrong?.message == "Person.dogs holds Dog objects, not Cat")
            try context.save()

            // Read back in another context: each target with its own entity, inverses stored on each.
            let other = ObjectContext(store: store)
            let person = try other.existingObject(with: ann.objectID)
            #expect(Set(try person.objectIDs(forKey: "pets")) == Set([rex, tom, bit].map(\.objectID)))
            #expect(try person.objectIDs(forKey: "dogs") == [bit.objectID])
            #expect(try other.existingObject(with: tom.objectID).object(forKey: "owner")?.objectID == ann.objectID)
            let tomsOwner = FetchRequest(entity: "Person", predicate: try FetchPredicate("ANY pets.name == 'Tom'"))
            #expect(try other.fetch(tomsOwner).count == 1)
            #expect(try store.checkIntegrity().findings.isEmpty)

            // Deleting the person cascades to every kind of animal.
            try other.delete(person)
            try other.save()
            #expect(try other.count(for: FetchRequest(entity: "Animal")) == 0)
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func fetchesOfASuperentityMergeItsSubEntitiesInOrder() throws {
        try withStore(schema: try Self.zooSchema()) { store, _ in
            let context = ObjectContext(store: store)
            for (entity, name, legs) in [
                ("Dog", "Rex", 4), ("Cat", "Tom", 4), ("Puppy", "Bit", 3), ("Cat", "Ada", 3), ("Dog", "Max", 3),
            ] {
                try Self.animal(context, entity, name, legs: Int64(legs))
            }
            try context.save()
            let fresh = ObjectContext(store: store)
            var request = FetchRequest(entity: "Animal", sortKeys: [SortKey("name")])
            #expect(try names(fresh.fetch(request)) == ["Ada", "Bit", "Max", "Rex", "Tom"])
            #expect(try fresh.fetch(request).map(\.entity.name) == ["Cat", "Puppy", "Dog", "Dog", "Cat"])
            // A Puppy's own attributes are there when it comes from a fetch of Animal.
            #expect(try fresh.fetch(request)[1]["weeks"] == .int(8))
            // A window over the merged order; a predicate on an inherited attribute (indexed in each entity).
            request.fetchOffset = 1
            request.fetchLimit = 2
            #expect(try names(fresh.fetch(request)) == ["Bit", "Max"])
            request = FetchRequest(
                entity: "Animal", predicate: try FetchPredicate("legs == 3"), sortKeys: [SortKey("name")])
            #expect(try names(fresh.fetch(request)) == ["Ada", "Bit", "Max"])
            #expect(try fresh.count(for: request) == 3)
            #expect(try fresh.count(for: FetchRequest(entity: "Animal")) == 5)
            #expect(try fresh.count(for: FetchRequest(entity: "Dog")) == 3)
            var dogsOnly = FetchRequest(entity: "Dog", sortKeys: [SortKey("name")])
            dogsOnly.includesSubentities = false
            #expect(try names(fresh.fetch(dogsOnly)) == ["Max", "Rex"])
            #expect(try fresh.count(for: dogsOnly) == 2)
            var none = FetchRequest(entity: "Animal")
            none.includesSubentities = false
            #expect(try fresh.fetch(none).isEmpty)
            // A key only a sub-entity has is not a key of Animal.
            let error = entityStoreError {
                _ = try fresh.fetch(FetchRequest(entity: "Animal", predicate: try FetchPredicate("breed == nil")))
            }
            #expect(error?.code == .invalidPredicate)
            // explain shows each entity's plan.
            let plan = try fresh.explain(request)
            #expect(plan.parts.map(\.entity) == ["Dog", "Cat", "Puppy"])
            #expect(plan.description.contains("merge the results of Dog, Cat, Puppy in sort order"))
            // Unsaved objects of any sub-entity count; dictionaries and aggregates span the hierarchy.
            try Self.animal(fresh, "Cat", "Zed", legs: 3)
            #expect(try names(fresh.fetch(request)) == ["Ada", "Bit", "Max", "Zed"])
            var dictionaries = FetchRequest(entity: "Animal", sortKeys: [SortKey("name")])
            dictionaries.resultType = .dictionaries(["name", "legs"])
            guard case .dictionaries(let rows) = try fresh.execute(dictionaries) else {
                Issue.record("expected dictionaries")
                return
            }
            #expect(rows.first == ["name": .string("Ada"), "legs": .int(3)] && rows.count == 6)
            try fresh.save()
            var byLegs = AggregateRequest(entity: "Animal")
            byLegs.groupBy = ["legs"]
            byLegs.aggregates = [.count(), .minimum("name")]
            let groups = try fresh.aggregate(byLegs)
            #expect(
                groups == [
                    ["legs": .int(3), "count": .int(4), "minimum(name)": .string("Ada")],
                    ["legs": .int(4), "count": .int(2), "minimum(name)": .string("Rex")],
                ])
        }
    }

    @Test func uniquenessOfAnInheritedAttributeHoldsAcrossTheHierarchy() throws {
        try withStore(schema: try Self.zooSchema()) { store, _ in
            let context = ObjectContext(store: store)
            let rex = try Self.animal(context, "Dog", "Rex")
            try rex.setValue("A-1", forKey: "tag")
            try context.save()
            let tom = try Self.animal(context, "Cat", "Tom")
            try tom.setValue("A-1", forKey: "tag")
            let error = entityStoreError { try context.save() }
            #expect(error?.code == .validationFailed)
            #expect(
                error?.failures.first?.message == "the value \"A-1\" must be unique; \(rex.objectID) already has it")
            // Within one save too.
            try tom.setValue("B-2", forKey: "tag")
            let bit = try Self.animal(context, "Puppy", "Bit")
            try bit.setValue("B-2", forKey: "tag")
            #expect(entityStoreError { try context.save() }?.code == .validationFailed)
            try bit.setValue("C-3", forKey: "tag")
            try context.save()
            // A batch update of one object to a value another kind holds.
            let batch = entityStoreError {
                try store.batchUpdate("Puppy", set: ["tag": .string("A-1")])
            }
            #expect(batch?.message.contains("\(rex.objectID) already has it") == true)
        }
    }

    @Test func aControllerOverASuperentityFollowsEverySubEntity() throws {
        try withStore(schema: try Self.zooSchema()) { store, _ in
            let context = ObjectContext(store: store)
            let rex = try Self.animal(context, "Dog", "Rex", legs: 4)
            try Self.animal(context, "Cat", "Tom", legs: 4)
            try context.save()
            let screen = ObjectContext(store: store)
            let request = FetchRequest(entity: "Animal", sortKeys: [SortKey("legs"), SortKey("name")])
            let controller = FetchedResultsController(
                fetchRequest: request, context: screen, sectionNameKeyPath: "legs")
            let delegate = RecordingDelegate()
            controller.delegate = delegate
            try controller.performFetch()
            #expect(controller.fetchedObjectIDs.map(\.entityName) == ["Dog", "Cat"])

            let writer = ObjectContext(store: store)
            try Self.animal(writer, "Puppy", "Bit", legs: 3)
            try writer.existingObject(with: rex.objectID).setValue("Zed", forKey: "name")
            try writer.save()
            screen.merge(try #require(try store.history().last))
            #expect(try names(controller.fetchedObjects) == ["Bit", "Tom", "Zed"])
            #expect(controller.fetchedObjectIDs.map(\.entityName) == ["Puppy", "Cat", "Dog"])
            #expect(controller.sections.map { $0.objectIDs.map(\.entityName) } == [["Puppy"], ["Cat", "Dog"]])
            // One batch: Bit's section inserted (its row with it), Rex (now Zed) moved after Tom.
            #expect(delegate.calls.filter { $0 == "will" }.count == 1)
            #expect(delegate.take() == ["sins 0", "move [0,0]->[1,1]"])
            // A fresh fetch agrees.
            #expect(controller.fetchedObjectIDs == (try screen.fetchObjectIDs(request)))

            // A batch delete of the superentity reaches every kind; the controller follows.
            let deleted = try store.batchDelete("Animal", where: try FetchPredicate("legs == 4"))
            #expect(Set(deleted.objectIDs.map(\.entityName)) == ["Cat", "Dog"])
            screen.merge(try #require(try store.history().last))
            #expect(try names(controller.fetchedObjects) == ["Bit"])
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    /// Objects of different sub-entities that tie on every sort key are in one order in a fetch, a fetch through a
    /// child context and a controller: by primary key, which the hierarchy shares (the fetch put every cat before
    /// every dog, the controller by primary key, so that they disagreed on each tie).
    @Test func tiesAcrossSubEntitiesAreInOneOrderInFetchesAndControllers() throws {
        try withStore(schema: try Self.zooSchema()) { store, _ in
            let context = ObjectContext(store: store)
            for (entity, name) in [("Dog", "Rex"), ("Cat", "Rex"), ("Puppy", "Rex"), ("Dog", "Rex"), ("Cat", "Ada")] {
                try Self.animal(context, entity, name)
            }
            try context.save()
            let request = FetchRequest(entity: "Animal", sortKeys: [SortKey("name")])
            let fetched = try ObjectContext(store: store).fetchObjectIDs(request)
            #expect(fetched.map(\.entityName) == ["Cat", "Dog", "Cat", "Puppy", "Dog"])
            #expect(fetched.dropFirst().map(\.primaryKey) == fetched.dropFirst().map(\.primaryKey).sorted())
            let screen = ObjectContext(store: store)
            let controller = FetchedResultsController(fetchRequest: request, context: screen)
            try controller.performFetch()
            #expect(controller.fetchedObjectIDs == fetched)
            #expect(try ObjectContext(parent: screen).fetchObjectIDs(request) == fetched)
            // A new tie joins in its place: after the others, as the newest key.
            try Self.animal(screen, "Cat", "Rex")
            screen.processPendingChanges()
            #expect(controller.fetchedObjectIDs == (try screen.fetchObjectIDs(request)))
            #expect(controller.fetchedObjectIDs.last?.entityName == "Cat")
        }
    }

    @Test func aBatchUpdateOfASuperentityUpdatesEachKind() throws {
        try withStore(schema: try Self.zooSchema()) { store, _ in
            let context = ObjectContext(store: store)
            for (entity, name) in [("Dog", "Rex"), ("Cat", "Tom"), ("Puppy", "Bit")] {
                try Self.animal(context, entity, name)
            }
            try context.save()
            let result = try store.batchUpdate("Animal", where: try FetchPredicate("name != 'Tom'"), set: ["legs": 3])
            #expect(result.count == 2)
            let fresh = ObjectContext(store: store)
            let three = FetchRequest(
                entity: "Animal", predicate: try FetchPredicate("legs == 3"), sortKeys: [SortKey("name")])
            #expect(try names(fresh.fetch(three)) == ["Bit", "Rex"])
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func aChildContextSeesItsOwnSubEntityObjects() throws {
        try withStore(schema: try Self.zooSchema()) { store, _ in
            let parent = ObjectContext(store: store)
            try Self.animal(parent, "Dog", "Rex")
            let child = ObjectContext(parent: parent)
            try Self.animal(child, "Cat", "Tom")
            let request = FetchRequest(entity: "Animal", sortKeys: [SortKey("name")])
            #expect(try names(child.fetch(request)) == ["Rex", "Tom"])
            try child.save()
            try parent.save()
            #expect(try names(ObjectContext(store: store).fetch(request)) == ["Rex", "Tom"])
        }
    }

    @Test func migrationsRefuseWhatInheritanceCannotDoByItself() throws {
        // Dogs and cats stored as unrelated entities (each with its own key sequence: both have p1).
        let separate = try Schema(version: 1) {
            Entity("Dog") { Attribute("name", .string) }
            Entity("Cat") { Attribute("name", .string) }
        }
        let joined = try Schema(version: 2) {
            Entity("Animal", abstract: true) { Attribute("name", .string) }
            Entity("Dog", inherits: "Animal") {}
            Entity("Cat", inherits: "Animal") {}
        }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("zoo")
        do {
            let store = try PersistentStore.open(path: path, schema: separate)
            let context = ObjectContext(store: store)
            try context.insert("Dog").setValue("Rex", forKey: "name")
            try context.insert("Cat").setValue("Tom", forKey: "name")
            try context.save()
        }
        let error = entityStoreError { _ = try PersistentStore.open(path: path, schema: joined) }
        #expect(error?.code == .migrationRefused)
        #expect(error?.message.contains("Cat/p1 and Dog/p1 would share a primary key") == true)

        // With objects of one kind only, the hierarchy forms; new keys come after every stored one.
        let onlyDogs = directory.path("dogs")
        do {
            let store = try PersistentStore.open(path: onlyDogs, schema: separate)
            let context = ObjectContext(store: store)
            for name in ["Rex", "Max"] { try context.insert("Dog").setValue(.string(name), forKey: "name") }
            try context.save()
        }
        let store = try PersistentStore.open(path: onlyDogs, schema: joined)
        let context = ObjectContext(store: store)
        let cat = try context.insert("Cat")
        try cat.setValue("Tom", forKey: "name")
        try context.save()
        #expect(cat.objectID.primaryKey > 2)
        #expect(try context.count(for: FetchRequest(entity: "Animal")) == 3)

        // An entity holding objects cannot become abstract.
        let abstractDogs = try Schema(version: 3) {
            Entity("Animal", abstract: true) { Attribute("name", .string) }
            Entity("Dog", inherits: "Animal", abstract: true) {}
            Entity("Cat", inherits: "Animal") {}
        }
        let abstractError = entityStoreError { _ = try PersistentStore.open(path: path, schema: abstractDogs) }
        #expect(abstractError?.code == .migrationRefused)
        let problems = abstractError?.failures.map(\.message) ?? []
        #expect(problems.contains("Dog became abstract but holds 1 object(s)"))
        #expect(problems.contains { $0.contains("would share a primary key in the hierarchy of Animal") })
    }

    @Test func aRenamedEntityKeepsGivingFreshKeys() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("renamed")
        do {
            let store = try PersistentStore.open(
                path: path, schema: try Schema(version: 1) { Entity("Note") { Attribute("text", .string) } })
            let context = ObjectContext(store: store)
            for text in ["a", "b"] { try context.insert("Note").setValue(.string(text), forKey: "text") }
            try context.save()
        }
        let store = try PersistentStore.open(
            path: path,
            schema: try Schema(version: 2) { Entity("Memo", renamedFrom: "Note") { Attribute("text", .string) } })
        let context = ObjectContext(store: store)
        let memo = try context.insert("Memo")
        try memo.setValue("c", forKey: "text")
        try context.save()
        #expect(try context.count(for: FetchRequest(entity: "Memo")) == 3)
        #expect(memo.objectID.primaryKey > 2)
    }
}

// Typed models with inheritance: a model class that subclasses another is its sub-entity.

class Pet: Model {
    override class var isAbstractEntity: Bool { true }
    @Stored(.indexed) var name: String
    @Stored var legs: Int = 4
    @ToOne var keeper: Keeper?
}

final class Hound: Pet {
    @Stored var breed: String?
}

final class Kitty: Pet {
    @Stored var indoor: Bool = true
}

final class Keeper: Model {
    @Stored var name: String
    @ToMany var pets: [Pet]
}

@Suite struct TypedInheritanceTests {
    @Test func modelSubclassesAreSubEntitiesAndFetchesWrapEachInItsClass() throws {
        let schema = try Schema(version: 1, models: [Keeper.self, Pet.self, Hound.self, Kitty.self])
        #expect(schema.entity("Pet")?.isAbstract == true)
        #expect(schema.entity("Hound")?.superentity == "Pet" && schema.entity("Hound")?.isAbstract == false)
        #expect(schema.entity("Hound")?.attributes.map(\.name) == ["name", "legs", "breed"])
        #expect(schema.entity("Kitty")?.relationship("keeper")?.inverse == "pets")
        try withStore(schema: schema) { store, _ in
            let context = ObjectContext(store: store)
            let ann = try context.insert(Keeper.self)
            ann.name = "Ann"
            let rex = try context.insert(Hound.self)
            rex.name = "Rex"
            rex.breed = "Collie"
            let tom = try context.insert(Kitty.self)
            tom.name = "Tom"
            tom.legs = 3
            ann.pets = [rex, tom]
            #expect(entityStoreError { _ = try context.insert(Pet.self) }?.code == .invalidObject)
            try context.save()

            let fresh = ObjectContext(store: store)
            let pets = try fresh.fetch(Pet.self, sortedBy: [SortKey(\Pet.name)])
            #expect(pets.map(\.name) == ["Rex", "Tom"])
            #expect((pets[0] as? Hound)?.breed == "Collie")
            #expect((pets[1] as? Kitty)?.indoor == true)
            #expect(try fresh.fetch(Pet.self, where: \Pet.legs == 3).map(\.name) == ["Tom"])
            #expect(try fresh.count(Hound.self) == 1)
            let keeper = try #require(try fresh.fetch(Keeper.self).first)
            #expect(Set(keeper.pets.map(\.objectID)) == [rex.objectID, tom.objectID])
            #expect(keeper.pets.contains { $0 is Kitty })
            #expect(try fresh.existingObject(Pet.self, with: tom.objectID) is Kitty)
            #expect(
                entityStoreError { _ = try fresh.existingObject(Hound.self, with: tom.objectID) }?.code == .typeMismatch
            )
        }
    }
}

@Suite struct InheritanceMigrationTests {
    @Test func anAttributeAddedToASuperentityReachesEverySubEntitysRecords() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("zoo")
        do {
            let store = try PersistentStore.open(path: path, schema: try InheritanceTests.zooSchema())
            let context = ObjectContext(store: store)
            try InheritanceTests.animal(context, "Puppy", "Bit", legs: 3).setValue("Pug", forKey: "breed")
            try InheritanceTests.animal(context, "Cat", "Tom")
            try context.save()
        }
        // Version 2: Animal gains "born" (inherited first, so every sub-entity's later attributes move along).
        var entities = try InheritanceTests.zooSchema().entities
        let index = try #require(entities.firstIndex { $0.name == "Animal" })
        entities[index].attributes.insert(Attribute("born", .int64, default: 2020), at: 1)
        for i in entities.indices where entities[i].superentity != nil {
            entities[i].attributes.removeAll { ["name", "tag", "legs"].contains($0.name) }
        }
        let store = try PersistentStore.open(path: path, schema: try Schema(version: 2, entities: entities))
        #expect(
            store.schema.entity("Puppy")?.attributes.map(\.name) == ["name", "born", "tag", "legs", "breed", "weeks"])
        let context = ObjectContext(store: store)
        let animals = try context.fetch(FetchRequest(entity: "Animal", sortKeys: [SortKey("name")]))
        #expect(try animals.map { try $0["born"] } == [.int(2020), .int(2020)])
        #expect(try animals[0]["breed"] == .string("Pug") && animals[0]["legs"] == .int(3))
        #expect(try store.checkIntegrity().findings.isEmpty)
    }
}
