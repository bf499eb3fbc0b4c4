import EntityStore
import Foundation
import Observation
import Synchronization
import TestSupport
import Testing

// A realistic model written only with the typed API: projects, tickets, labels (many-to-many).

final class Project: Model {
    @Stored var name: String
    @Stored var archived: Bool = false
    @ToMany(deleteRule: .cascade) var tickets: [Ticket]
}

final class Ticket: Model {
    @Stored var title: String
    @Stored(.indexed) var rank: Int = 0
    @Stored var estimate: Double?
    @Stored var due: Date?
    @Stored var done: Bool = false
    @ToOne var project: Project?
    @ToMany var labels: [Label]
    /// A plain Swift property: not stored, and no key path of a predicate.
    var scratch = ""
}

final class Label: Model {
    @Stored(.unique, .caseInsensitive) var name: String
    @ToMany var tickets: [Ticket]
}

/// A class whose key does not exist: its check must fail and leave nothing behind.
final class Typo: Model {
    override class var entityName: String { "Ticket" }
    @Stored var titel: String
}

/// A model used with two stores whose schemas order its attributes differently.
final class Memo: Model {
    @Stored var title: String
    @Stored("body") var text: String
    @Stored(.renamedFrom("stars"), .indexed) var rating: Int = 0
}

/// A model with integers narrower than the int64 they are stored as.
final class Gauge: Model {
    @Stored var level: Int16 = 0
    @Stored var percent: UInt8?
    @Stored(.validated(.range(1, 10))) var step: Int8 = 1
    @Stored var total: Int = 0
}

/// A model whose initial values are made anew for each instance, as SwiftData users write them.
final class Stamp: Model {
    @Stored var id: UUID = UUID()
    @Stored var created: Date = Date()
    @Stored var note: String? = nil
    @Stored var name: String = "untitled"
}

/// The serial numbers `Serial` takes, one per instance made.
let serials = Atomic<Int>(0)

/// A model whose initial value is made anew for each instance but is neither a UUID nor a date.
final class Serial: Model {
    @Stored var number: Int = serials.add(1, ordering: .relaxed).newValue
}

struct StampForm: Codable {
    var name: String
    var id: UUID?
}

/// A model with a `Float`, stored as a double.
final class Reading: Model {
    @Stored var level: Float = 0
}

struct TicketForm: Codable, Equatable {
    var title: String
    var rank: Int
    var estimate: Double?
}

func typedSchema() throws -> Schema { try Schema(version: 1, models: [Project.self, Ticket.self, Label.self]) }

/// A store with two projects, five tickets and three labels, made with the typed API.
struct TypedWorld {
    let temporary: TemporaryStore
    let context: ObjectContext
    var store: PersistentStore { temporary.store }

    init() throws {
        temporary = try TemporaryStore(schema: try typedSchema())
        context = ObjectContext(store: temporary.store, name: "typed")
        let alpha = try context.insert(Project.self)
        alpha.name = "Alpha"
        let beta = try context.insert(Project.self)
        beta.name = "Beta"
        var labels: [String: Label] = [:]
        for name in ["urgent", "bug", "idea"] {
            let label = try context.insert(Label.self)
            label.name = name
            labels[name] = label
        }
        for (title, rank, project, tags) in [
            ("Fix the login bug", 1, alpha, ["urgent", "bug"]), ("Write docs", 5, alpha, ["idea"]),
            ("Crash on start", 2, beta, ["bug"]), ("Dark mode", 8, beta, []), ("Release notes", 3, alpha, []),
        ] {
            let ticket = try context.insert(Ticket.self)
            ticket.title = title
            ticket.rank = rank
            ticket.project = project
            ticket.labels = tags.map { labels[$0]! }
        }
        try context.save()
    }

    func titles(_ tickets: [Ticket]) -> [String] { tickets.map(\.title) }
}

@Suite struct TypedAPITests {
    @Test func aSchemaComesFromTheModelClasses() throws {
        let schema = try typedSchema()
        let ticket = try #require(schema.entity("Ticket"))
        #expect(ticket.attributes.map(\.name) == ["title", "rank", "estimate", "due", "done"])
        #expect(ticket.attribute("rank")?.isIndexed == true && ticket.attribute("rank")?.defaultValue == 0)
        #expect(ticket.attribute("estimate")?.isOptional == true && ticket.attribute("title")?.isOptional == false)
        #expect(ticket.relationship("project")?.inverse == "tickets")
        #expect(ticket.relationship("labels")?.inverse == "tickets" && ticket.relationship("labels")?.isToMany == true)
        let label = try #require(schema.entity("Label"))
        #expect(label.attribute("name")?.isUnique == true && label.attribute("name")?.isCaseInsensitive == true)
        #expect(schema.entity("Project")?.relationship("tickets")?.deleteRule == .cascade)
        // Mixed with declared entities.
        let mixed = try Schema(version: 1, models: [Project.self, Ticket.self, Label.self]) {
            Entity("Note") { Attribute("text", .string) }
        }
        #expect(mixed.entities.map(\.name) == ["Project", "Ticket", "Label", "Note"])
    }

    @Test func modelsAreComparedByIdentityAndInLists() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let context = world.context
        let tickets = try context.fetch(Ticket.self, sortedBy: [SortKey(\Ticket.rank)])
        let picked = [tickets[0], tickets[2], tickets[0]]
        let byRank = [SortKey(\Ticket.rank)]
        #expect(
            try context.fetch(Ticket.self, where: picked.contains(\Ticket.self), sortedBy: byRank).map(\.title)
                == ["Fix the login bug", "Release notes"])
        #expect(try context.count(Ticket.self, where: !picked.contains(\Ticket.self)) == 3)
        let beta = try #require(try context.first(Project.self, where: \Project.name == "Beta"))
        #expect(
            try context.fetch(Ticket.self, where: [beta].contains(\Ticket.project), sortedBy: byRank).map(\.title)
                == ["Crash on start", "Dark mode"])
        #expect(
            try context.fetch(Ticket.self, where: [beta].contains(\Ticket.project) && \Ticket.rank > 2).map(\.title)
                == ["Dark mode"])
        #expect(try context.count(Ticket.self, where: [Project]().contains(\Ticket.project)) == 0)
    }

    /// A narrow integer property bounds its attribute to the type's range, so no writer can store a value the model
    /// could not read back; a value stored before (by a schema without the bounds) reads as a type mismatch.
    @Test func narrowIntegerPropertiesBoundWhatAnyWriterStores() throws {
        let schema = try Schema(version: 1, models: [Gauge.self])
        let gauge = try #require(schema.entity("Gauge"))
        #expect(gauge.attribute("level")?.validation == .range(.int(-32768), .int(32767)))
        #expect(gauge.attribute("percent")?.validation == .range(.int(0), .int(255)))
        #expect(gauge.attribute("step")?.validation == .range(.int(1), .int(10)))
        #expect(gauge.attribute("total")?.validation == nil)
        let temporary = try TemporaryStore(schema: schema)
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let made = try context.insert(Gauge.self)
        made.level = .max
        made.percent = 255
        made.total = .max
        try context.save()

        // Through the dynamic API, a batch update, and a batch insert: refused, naming the attribute and bound.
        try made.managedObject.setValue(.int(32768), forKey: "level")
        let saving = entityStoreError { try context.save() }
        #expect(saving?.code == .validationFailed)
        #expect(saving?.failures.first?.key == "level")
        #expect(saving?.failures.first?.message.contains("32768 is above the maximum 32767") == true)
        context.rollback()
        let updating = entityStoreError { try temporary.store.batchUpdate("Gauge", set: ["percent": .int(-1)]) }
        #expect(updating?.code == .validationFailed && updating?.failures.first?.key == "percent")
        let inserting = entityStoreError {
            try temporary.store.batchInsert(into: "Gauge", objects: [["level": .int(1), "step": .int(11)]])
        }
        #expect(inserting?.code == .validationFailed && inserting?.failures.first?.key == "step")
        let reader = ObjectContext(store: temporary.store)
        let read = try #require(try reader.fetch(Gauge.self).first)
        #expect(read.level == .max && read.percent == 255 && read.step == 1 && read.total == .max)
        #expect(read.lastError == nil)
    }

    /// `@Stored var id = UUID()` and `= Date()` give each inserted object its own value, as SwiftData does, also
    /// through the dynamic API and batch inserts (a generated default). Before, the value made when the schema was
    /// built was every object's default, so all objects shared one UUID and one date, and the schema differed at
    /// every launch: the store could not be opened again.
    @Test func initialValuesMadeForEachInstanceAreEachObjectsOwn() throws {
        let schema = try Schema(version: 1, models: [Stamp.self])
        let entity = try #require(schema.entity("Stamp"))
        #expect(entity.attributes.map(\.defaultValue) == [.null, .null, .null, .string("untitled")])
        #expect(entity.attributes.map(\.generatedDefault) == [.uuid, .now, nil, nil])
        #expect(try Schema(version: 1, models: [Stamp.self]).fingerprint == schema.fingerprint)
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("stamps.store")
        do {
            let store = try PersistentStore.open(path: path, schema: schema)
            let context = ObjectContext(store: store)
            Thread.sleep(forTimeInterval: 0.05)
            let start = Date()
            let first = try context.insert(Stamp.self)
            let second = try context.insert(Stamp.self)
            let third = try context.insert(Stamp.self, from: StampForm(name: "form", id: nil))
            let given = UUID()
            let fourth = try context.insert(Stamp.self, from: StampForm(name: "given", id: given))
            #expect(Set([first.id, second.id, third.id, fourth.id]).count == 4)
            #expect(fourth.id == given)
            #expect([first, second, third].allSatisfy { $0.created >= start && $0.created <= Date() })
            #expect(first.name == "untitled" && third.name == "form" && first.note == nil)
            try context.save()
            // A UUID or a date made anew is a generated default: the dynamic API and batch inserts make one too.
            let dynamic = try context.insert("Stamp")
            try dynamic.setValue(.string("dynamic"), forKey: "name")
            let batch = try store.batchInsert(into: "Stamp", objects: [["name": "a"], ["name": "b"]])
            let kept = UUID()
            let keptIDs = try store.batchInsert(into: "Stamp", objects: [["name": "given", "id": .uuid(kept)]])
            #expect(try context.existingObject(with: keptIDs[0])["id"] == .uuid(kept))
            let made = try [dynamic] + batch.map { try context.existingObject(with: $0) }
            let madeIDs = try made.map { try $0.value(forKey: "id") }
            #expect(Set(madeIDs).count == 3 && !madeIDs.contains(.null))
            #expect(
                try made.allSatisfy {
                    if case .date(let date) = try $0.value(forKey: "created") { date >= start } else { false }
                })
            #expect(
                !madeIDs.contains { $0 == .uuid(first.id) || $0 == .uuid(second.id) || $0 == .uuid(third.id) })
            _ = try [first, second, third, fourth].map {
                try context.insert(Stamp.self, from: StampForm(name: $0.name))
            }
            try context.save()
        }
        // A schema built again (in another launch) opens the store: the fingerprint does not change.
        let reopened = try PersistentStore.open(path: path, schema: try Schema(version: 1, models: [Stamp.self]))
        let stored = try ObjectContext(store: reopened).fetch(Stamp.self).map(\.id)
        #expect(Set(stored).count == 12)
    }

    /// An initial value made anew for each instance that is no UUID or date is set by each typed insert; the
    /// dynamic API cannot run the initializer, so there the attribute is required.
    @Test func otherInitialValuesMadeForEachInstanceAreSetByTypedInserts() throws {
        let schema = try Schema(version: 1, models: [Serial.self])
        let number = try #require(schema.entity("Serial")?.attribute("number"))
        #expect(number.defaultValue == .null && number.generatedDefault == nil)
        let temporary = try TemporaryStore(schema: schema)
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let numbers = try (0..<3).map { _ in try context.insert(Serial.self).number }
        #expect(Set(numbers).count == 3)
        try context.save()
        _ = try context.insert("Serial")
        let refused = entityStoreError { try context.save() }
        #expect(refused?.code == .validationFailed && refused?.failures.first?.key == "number")
    }

    /// A `Float` property rounds a stored double to the nearest `Float`; one beyond its range (written by another
    /// writer) is a type mismatch, not an infinity the app could save back.
    @Test func aFloatPropertyReportsADoubleBeyondItsRange() throws {
        let temporary = try TemporaryStore(schema: try Schema(version: 1, models: [Reading.self]))
        defer { temporary.remove() }
        let values: [Double] = [0.1, .infinity, -.infinity, 1e300, -1e39, 3.4e38]
        try temporary.store.batchInsert(into: "Reading", objects: values.map { ["level": .double($0)] })
        let context = ObjectContext(store: temporary.store)
        let readings = try context.fetch(Reading.self)
        var read: [Float] = []
        var mismatches: [Int] = []
        for (index, reading) in readings.enumerated() {
            read.append(reading.level)
            if reading.lastError?.code == .typeMismatch { mismatches.append(index) }
        }
        #expect(read == [Float(0.1), .infinity, -.infinity, 0, 0, Float(3.4e38)])
        #expect(mismatches == [3, 4])
    }

    @Test func aNarrowIntegerPropertyReportsAStoredValueItCannotHold() throws {
        // The store was made by a schema without the bounds (the same fingerprint: bounds are validation rules).
        let plain = try Schema(version: 1) {
            Entity("Gauge") {
                Attribute("level", .int64, default: 0)
                Attribute("percent", .int64, optional: true)
                Attribute("step", .int64, default: 1)
                Attribute("total", .int64, default: 0)
            }
        }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("g.store")
        do {
            let store = try PersistentStore.open(path: path, schema: plain)
            try store.batchInsert(into: "Gauge", objects: [["level": .int(70_000), "percent": .int(300)]])
        }
        let store = try PersistentStore.open(path: path, schema: try Schema(version: 1, models: [Gauge.self]))
        let context = ObjectContext(store: store)
        let read = try #require(try context.fetch(Gauge.self).first)
        #expect(read.percent == nil)
        #expect(read.lastError?.code == .typeMismatch && read.lastError?.key == "percent")
        #expect(read.level == 0)
        #expect(read.lastError?.message.contains("holds 70000, not Int16") == true)
    }

    @Test func aModelReadsAndWritesRightInStoresThatOrderItsAttributesDifferently() throws {
        // The typed accessors remember where each key was last found; a store laid out otherwise must not be read
        // at the other store's positions.
        let forward = try Schema(version: 1) {
            Entity("Memo") {
                Attribute("title", .string)
                Attribute("body", .string)
                Attribute("rating", .int64, default: 0)
            }
        }
        let backward = try Schema(version: 1) {
            Entity("Memo") {
                Attribute("rating", .int64, default: 0)
                Attribute("body", .string)
                Attribute("title", .string)
            }
        }
        let one = try TemporaryStore(schema: forward)
        let two = try TemporaryStore(schema: backward)
        defer {
            one.remove()
            two.remove()
        }
        let first = ObjectContext(store: one.store)
        let second = ObjectContext(store: two.store)
        for round in 0..<3 {
            for (context, name) in [(first, "one"), (second, "two")] {
                let memo = try context.insert(Memo.self)
                memo.title = "\(name) \(round)"
                memo.text = "text of \(name)"
                memo.rating = round
                #expect(memo.title == "\(name) \(round)" && memo.text == "text of \(name)" && memo.rating == round)
                #expect(try memo.managedObject.value(forKey: "title") == .string("\(name) \(round)"))
                #expect(try memo.managedObject.value(forKey: "rating") == .int(Int64(round)))
                #expect(memo.lastError == nil)
            }
        }
        try first.save()
        try second.save()
        let reread = try ObjectContext(store: two.store).fetch(Memo.self, sortedBy: [SortKey(\Memo.title)])
        #expect(reread.map(\.title) == ["two 0", "two 1", "two 2"] && reread.map(\.rating) == [0, 1, 2])
        // Options given to the wrapper reach the schema (a rename source is a string literal).
        let declared = try #require(try Schema(version: 1, models: [Memo.self]).entity("Memo"))
        #expect(declared.attributes.map(\.name) == ["title", "body", "rating"])
        #expect(declared.attribute("rating")?.renamedFrom == "stars" && declared.attribute("rating")?.isIndexed == true)
    }

    @Test func modelsReadAndWriteAttributesAndRelationships() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let other = ObjectContext(store: world.store)
        let alpha = try #require(try other.first(Project.self, where: \Project.name == "Alpha"))
        #expect(Set(world.titles(alpha.tickets)) == ["Fix the login bug", "Write docs", "Release notes"])
        let login = try #require(try other.first(Ticket.self, where: \Ticket.title == "Fix the login bug"))
        #expect(login.project?.name == "Alpha")
        #expect(Set(login.labels.map(\.name)) == ["urgent", "bug"])
        #expect(login.project === alpha, "one model instance per object while it is alive")
        // Move it to Beta, drop a label, add one, set optionals.
        let beta = try #require(try other.first(Project.self, where: \Project.name == "Beta"))
        login.project = beta
        login.labels = login.labels.filter { $0.name != "urgent" }
        let idea = try #require(try other.first(Label.self, where: \Label.name == "idea"))
        try login.add(idea, to: \.labels)
        login.estimate = 1.5
        login.due = Date(timeIntervalSinceReferenceDate: 1000)
        try other.save()
        #expect(!alpha.tickets.contains { $0 === login })
        #expect(beta.tickets.contains { $0 === login })
        #expect(idea.tickets.contains { $0 === login })
        let fresh = ObjectContext(store: world.store)
        let reread = try #require(try fresh.first(Ticket.self, where: \Ticket.title == "Fix the login bug"))
        #expect(reread.project?.name == "Beta" && reread.estimate == 1.5)
        #expect(Set(reread.labels.map(\.name)) == ["bug", "idea"])
        try reread.remove(idea, from: \.labels)
        login.estimate = nil
        #expect(login.estimate == nil)
        #expect(login.lastError == nil && reread.lastError == nil)
    }

    @Test func keyPathPredicatesAndSortsFetchModels() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let context = world.context
        #expect(
            world.titles(try context.fetch(Ticket.self, where: \Ticket.rank > 2, sortedBy: [SortKey(\Ticket.rank)]))
                == ["Release notes", "Write docs", "Dark mode"])
        #expect(
            world.titles(
                try context.fetch(
                    Ticket.self, where: (\Ticket.title).contains("BUG", .caseInsensitive) || \Ticket.rank >= 8,
                    sortedBy: [SortKey(\Ticket.title)])) == ["Dark mode", "Fix the login bug"])
        #expect(
            world.titles(
                try context.fetch(
                    Ticket.self, where: \Ticket.project?.name == "Beta",
                    sortedBy: [SortKey(\Ticket.rank, ascending: false)]))
                == ["Dark mode", "Crash on start"])
        #expect(
            Set(world.titles(try context.fetch(Ticket.self, where: (\Ticket.labels).any(\Label.name == "bug"))))
                == ["Fix the login bug", "Crash on start"])
        #expect(try context.count(Ticket.self, where: ["Dark mode", "Write docs"].contains(\Ticket.title)) == 2)
        #expect(try context.count(Ticket.self, where: (2...5).contains(\Ticket.rank)) == 3)
        #expect(try context.count(Ticket.self, where: \Ticket.estimate == nil) == 5)
        #expect(try context.count(Project.self, where: (\Project.tickets).count() > 2) == 1)
        #expect(try context.count(Ticket.self, where: !(\Ticket.done == true)) == 5)
        let beta = try #require(try context.first(Project.self, where: \Project.name == "Beta"))
        #expect(try context.count(Ticket.self, where: \Ticket.project == beta) == 2)
        #expect(
            world.titles(
                try context.fetch(
                    Ticket.self, sortedBy: [SortKey(\Ticket.project?.name), SortKey(\Ticket.rank)], limit: 2, offset: 1)
            )
                == ["Release notes", "Write docs"])
        // The same planner and explain as the format language.
        var request = ModelFetchRequest<Ticket>(where: \Ticket.rank == 5)
        request.fetchLimit = 1
        let parsed = FetchRequest(entity: "Ticket", predicate: try FetchPredicate("rank == 5"))
        #expect(try context.explain(request.fetchRequest).description == context.explain(parsed).description)
        #expect(try context.fetch(request).map(\.title) == ["Write docs"])
        // A key path that reads no typed property is a clear error at fetch.
        let unnamed = entityStoreError { _ = try context.fetch(Ticket.self, where: \Ticket.scratch == "x") }
        #expect(unnamed?.code == .invalidPredicate)
    }

    @Test func plainSwiftValuesArePredicateArguments() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let context = world.context
        let name = "Write docs"
        let minimum = 4
        let small: Int32 = 2
        #expect(
            try context.count(Ticket.self, where: try ModelPredicate("title == %@ AND rank > %d", name, minimum)) == 1)
        #expect(try context.count(Ticket.self, where: try ModelPredicate("rank <= %d", small)) == 2)
        #expect(try context.count(Ticket.self, where: try ModelPredicate("title IN %@", ["Dark mode", name])) == 2)
        #expect(try context.count(Ticket.self, where: try ModelPredicate("due == %@", Date?.none)) == 5)
        let beta = try #require(try context.first(Project.self, where: \Project.name == "Beta"))
        #expect(try context.count(Ticket.self, where: try ModelPredicate("project == %@", beta)) == 2)
        let built: FetchPredicate = .key("rank") > minimum
        #expect(try FetchPredicate("rank > %d", minimum) == built)
    }

    @Test func aTypedControllerDeliversModels() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let controller = ModelResultsController(
            ModelFetchRequest<Ticket>(sortedBy: [SortKey(\Ticket.rank)]), context: world.context,
            sectionedBy: \Ticket.project?.name)
        let delegate = RecordingDelegate()
        controller.delegate = delegate
        try controller.performFetch()
        #expect(controller.sections.map(\.name) == ["Alpha", "Beta"])
        let first: Ticket = try controller.object(at: ItemPath(section: 1, item: 0))
        #expect(first.title == "Crash on start")
        first.rank = 10
        world.context.processPendingChanges()
        #expect(delegate.calls == ["will", "move [1,0]->[1,1]", "did"])
        #expect(controller.indexPath(for: first) == ItemPath(section: 1, item: 1))
    }

    @Test func codableValuesGoInAndComeOut() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let context = world.context
        let ticket = try context.insert(Ticket.self, from: TicketForm(title: "From a form", rank: 4, estimate: 2))
        #expect(ticket.title == "From a form" && ticket.rank == 4 && ticket.estimate == 2)
        try ticket.update(from: TicketForm(title: "Renamed", rank: 6, estimate: nil))
        let decoded = try ticket.decode(TicketForm.self)
        #expect(decoded == TicketForm(title: "Renamed", rank: 6, estimate: nil), "\(decoded)")
        try context.save()
        var request = FetchRequest(entity: "Ticket", predicate: try FetchPredicate("rank == 6"))
        request.resultType = .dictionaries(["title", "rank", "estimate"])
        guard case .dictionaries(let rows) = try context.execute(request) else { throw CancellationError() }
        #expect(try ValueCoding.decode([TicketForm].self, from: rows) == [TicketForm(title: "Renamed", rank: 6)])

        struct Nested: Codable { var title: String; var form: TicketForm }
        let nested = entityStoreError {
            _ = try context.insert(Ticket.self, from: Nested(title: "x", form: .init(title: "", rank: 0)))
        }
        #expect(nested?.code == .typeMismatch && nested?.key == "form")
        struct Unknown: Codable { var colour: String }
        #expect(
            entityStoreError { _ = try context.insert(Ticket.self, from: Unknown(colour: "red")) }?.code == .unknownKey)
        struct Wrong: Codable { var rank: String }
        #expect(entityStoreError { try ticket.update(from: Wrong(rank: "high")) }?.code == .typeMismatch)
        #expect(!context.hasChanges, "refused inserts left nothing behind")
    }

    @Test func aModelThatFailsItsCheckLeavesNothingBehind() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let error = entityStoreError { _ = try world.context.insert(Typo.self) }
        #expect(error?.code == .unknownKey)
        #expect(error?.message == "Typo maps 'titel', which Ticket does not have")
        #expect(error?.description == "unknownKey: Typo maps 'titel', which Ticket does not have", "read once")
        #expect(!world.context.hasChanges)
        try world.context.save()
    }

    @Test func aSingleValidationFailureReadsOnce() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let label = try world.context.insert(Label.self)
        label.name = "BUG"  // the unique attribute is case-insensitive
        let error = try #require(entityStoreError { try world.context.save() })
        #expect(error.description.components(separatedBy: "must be unique").count == 2, "\(error.description)")
    }

    @Test func modelsTakePartInObservationAlsoThroughMerges() throws {
        let world = try TypedWorld()
        defer { world.temporary.remove() }
        let ticket = try #require(try world.context.first(Ticket.self, where: \Ticket.title == "Write docs"))
        let fired = Flag()
        withObservationTracking {
            _ = ticket.rank
        } onChange: {
            fired.set()
        }
        let other = ObjectContext(store: world.store)
        try #require(try other.first(Ticket.self, where: \Ticket.title == "Write docs")).rank = 42
        try other.save()
        #expect(!fired.value)
        world.context.merge(try world.store.history().last!)
        #expect(fired.value, "a merge fires the observers of the changed property")
        #expect(ticket.rank == 42)

        let again = Flag()
        withObservationTracking {
            _ = ticket.title
        } onChange: {
            again.set()
        }
        ticket.title = "Write the docs"
        #expect(again.value, "a setter fires too")
    }
}

final class Flag: @unchecked Sendable {
    // @unchecked Sendable: `fired` is only touched while `lock` is held.
    private let lock = NSLock()
    private var fired = false
    func set() { lock.withLock { fired = true } }
    var value: Bool { lock.withLock { fired } }
}
