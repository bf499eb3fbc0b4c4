import EntityStore
import Foundation
import Observation
import TestSupport
import Testing

/// How typed models announce changes to Swift's Observation, and what their wrappers keep.
@Suite struct ModelObservationTests {
    /// The pets of `TypedInheritanceTests`: a superclass, two subclasses and a keeper.
    func petSchema() throws -> Schema {
        try Schema(version: 1, models: [Keeper.self, Pet.self, Hound.self, Kitty.self])
    }

    /// Tracks `read` and says whether a change fired.
    func tracking(_ read: () -> Void) -> Flag {
        let fired = Flag()
        withObservationTracking(read) { fired.set() }
        return fired
    }

    @Test func externalChangesReachObserversOfInheritedAndRelationshipProperties() throws {
        try withStore(schema: try petSchema()) { store, _ in
            let context = ObjectContext(store: store)
            let ann = try context.insert(Keeper.self)
            ann.name = "Ann"
            let rex = try context.insert(Hound.self)
            rex.name = "Rex"
            rex.breed = "Collie"
            try context.save()

            // A merge of another context's save changes the inherited name, the subclass's breed and the to-one.
            let inherited = tracking { _ = rex.name }
            let own = tracking { _ = rex.breed }
            let toOne = tracking { _ = rex.keeper }
            let toMany = tracking { _ = ann.pets }
            let other = ObjectContext(store: store)
            let otherRex = try other.existingObject(Hound.self, with: rex.objectID)
            otherRex.name = "Rex II"
            otherRex.keeper = try other.existingObject(Keeper.self, with: ann.objectID)
            try other.save()
            #expect(!inherited.value && !own.value && !toOne.value, "nothing fires before the merge")
            for record in try store.history() { context.merge(record) }
            #expect(inherited.value, "a property declared by the superclass fires")
            #expect(own.value, "every property of a changed model fires")
            #expect(toOne.value, "a to-one fires")
            #expect(toMany.value, "the inverse to-many of the other object fires")
            #expect(rex.name == "Rex II" && rex.keeper?.objectID == ann.objectID)

            // The dynamic API announces to the model too.
            let dynamic = tracking { _ = rex.breed }
            try rex.managedObject.setValue("Beagle", forKey: "breed")
            #expect(dynamic.value && rex.breed == "Beagle")

            // A setter fires its own property's observers.
            let legs = tracking { _ = rex.legs }
            rex.legs = 3
            #expect(legs.value)
        }
    }

    @Test func anObserverOfAReleasedModelIsNeverLeftUnheard() throws {
        try withStore(schema: try petSchema()) { store, _ in
            let context = ObjectContext(store: store)
            let rex = try context.insert(Hound.self)
            rex.name = "Rex"
            try context.save()
            let id = rex.objectID
            // Models come and go (their registrars are reused); the one observed now still hears its change.
            for _ in 0..<300 { _ = try context.existingObject(Hound.self, with: id).name }
            let model = try context.existingObject(Hound.self, with: id)
            let fired = tracking { _ = model.name }
            model.name = "Max"
            #expect(fired.value)
        }
    }

    @Test func everyLiveModelOfAnObjectHearsEveryChangeWhateverItsClass() throws {
        try withStore(schema: try petSchema()) { store, _ in
            let context = ObjectContext(store: store)
            let ann = try context.insert(Keeper.self)
            ann.name = "Ann"
            let rex = try context.insert(Hound.self)
            rex.name = "Rex"
            try context.save()
            // A second class of the entity, the superclass made by the app, and many instances of the class.
            let card = try context.existingObject(KeeperCard.self, with: ann.objectID)
            #expect(try context.existingObject(Keeper.self, with: ann.objectID) === ann, "one instance per class")
            #expect(try context.existingObject(KeeperCard.self, with: ann.objectID) === card)
            let pet = Pet(managedObject: rex.managedObject)
            var hounds = (0..<20).map { _ in Hound(managedObject: rex.managedObject) }
            #expect(try context.existingObject(Hound.self, with: rex.objectID) === rex)

            /// Tracks the name of every model of the two objects, however many and of whatever classes.
            func watched() -> [Flag] {
                ([{ _ = ann.name }, { _ = card.name }, { _ = rex.name }, { _ = pet.name }]
                    + hounds.map { hound in { _ = hound.name } }).map(tracking)
            }
            // A merge of another context's save.
            var fired = watched()
            let before = try store.lastTransaction()
            let other = ObjectContext(store: store)
            try other.existingObject(Keeper.self, with: ann.objectID).name = "Ann II"
            try other.existingObject(Hound.self, with: rex.objectID).name = "Rex II"
            try other.save()
            for record in try store.history(since: before) { context.merge(record) }
            #expect(!fired.map(\.value).contains(false), "every model fires: \(fired.map(\.value))")
            #expect(card.name == "Ann II" && pet.name == "Rex II" && !hounds.map(\.name).contains { $0 != "Rex II" })

            // One model's setter: the others of its object hear it.
            fired = watched()
            card.name = "Ann III"
            pet.name = "Rex III"
            #expect(!fired.map(\.value).contains(false), "every model fires: \(fired.map(\.value))")
            #expect(ann.name == "Ann III" && rex.name == "Rex III")

            // Models released meanwhile leave the others hearing (and nothing points to the released).
            hounds.removeLast(15)
            fired = watched()
            try context.undoLastChange()  // each setter is a group of its own: the pet's name, then the card's
            try context.undoLastChange()
            #expect(!fired.map(\.value).contains(false), "every model fires: \(fired.map(\.value))")
            #expect(rex.name == "Rex II", "the setters undone")
            #expect(card.name == "Ann II" && pet.name == "Rex II" && ann.name == "Ann II")
        }
    }
}

/// A second model class of the keepers' entity (a narrower view of it).
final class KeeperCard: Model {
    override class var entityName: String { "Keeper" }
    @Stored var name: String
}

/// A model whose defaults are of every kind a wrapper keeps.
final class Gadget: Model {
    @Stored var label: String = "untitled"
    @Stored var rating: Int = 3
    @Stored var blob: Data = Data([1, 2, 3])
    @Stored var price: Decimal = Decimal(string: "9.99")!
    @Stored(.renamedFrom("stars"), .validated(.range(1, 5)), .indexed) var stars: Int = 1
    @Stored var note: String?
}

@Suite struct ModelWrapperTests {
    @Test func schemasFromModelsKeepEveryDefaultEvenWhileOtherThreadsMakeModels() async throws {
        let expected: [String: Value] = [
            "label": "untitled", "rating": 3, "blob": .data([1, 2, 3]),
            "price": .decimal(Decimal(string: "9.99")!), "stars": 1, "note": .null,
        ]
        let schema = try Schema(version: 1, models: [Gadget.self])
        let temporary = try TemporaryStore(schema: schema)
        defer { temporary.remove() }
        let store = temporary.store
        do {
            await withTaskGroup(of: [String].self) { group in
                for worker in 0..<4 {
                    group.addTask {
                        var problems: [String] = []
                        for _ in 0..<100 {
                            if worker % 2 == 0 {
                                let entity = Entity(model: Gadget.self)
                                let defaults = Dictionary(
                                    uniqueKeysWithValues: entity.attributes.map { ($0.name, $0.defaultValue) })
                                if defaults != expected { problems.append("\(defaults)") }
                            } else {
                                // Instances made meanwhile keep nothing of the schema's capture.
                                let context = ObjectContext(store: store)
                                do {
                                    let gadget = try context.insert(Gadget.self)
                                    if gadget.label != "untitled" { problems.append("label \(gadget.label)") }
                                } catch {
                                    problems.append("\(error)")
                                }
                            }
                        }
                        return problems
                    }
                }
                for await problems in group { #expect(problems.isEmpty) }
            }
        }
        let stars = try #require(schema.entity("Gadget")?.attribute("stars"))
        #expect(stars.renamedFrom == "stars" && stars.validation == .range(1, 5) && stars.isIndexed)
    }

    @Test func aWrappersOptionsReadBackAsGiven() {
        let stored = Stored<Int>(.renamedFrom("stars"), .validated(.range(1, 5)), .derived("1 + 1"), .unique)
        #expect(stored.options == [.unique, .renamedFrom("stars"), .validated(.range(1, 5)), .derived("1 + 1")])
        #expect(Stored<Int>(.indexed).options == [.indexed])
        #expect(Stored<String>().options.isEmpty)
    }
}

@Suite struct ModelCheckTests {
    @Test func aClassCheckedAgainstOneStoreIsCheckedAgainstEachNewOne() throws {
        // Memo matches the first store; the second store's Memo has no "body": the class's properties are found once
        // per process, and the second store's check must still refuse it, naming the key.
        let good = try Schema(version: 1, models: [Memo.self])
        try withStore(schema: good) { store, _ in
            let context = ObjectContext(store: store)
            let memo = try context.insert(Memo.self)
            memo.title = "Note"
            memo.text = "kept"
            try context.save()
            #expect(memo.text == "kept" && memo.lastError == nil)
        }
        let other = try Schema(version: 1) {
            Entity("Memo") {
                Attribute("title", .string)
                Attribute("rating", .int64, default: 0)
            }
        }
        try withStore(schema: other) { store, _ in
            let context = ObjectContext(store: store)
            let error = entityStoreError { _ = try context.insert(Memo.self) }
            #expect(error?.code == .unknownKey)
            #expect(error?.message == "Memo maps 'body', which Memo does not have")
            #expect(context.insertedObjects.isEmpty)
        }
    }
}
