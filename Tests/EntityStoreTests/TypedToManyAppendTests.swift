import EntityStore
import Foundation
import TestSupport
import Testing

// A typed to-many read answers from what the previous read returned while nothing it depends on changed, and an
// assignment that only appends to that answer adds only the appended objects. Each test changes one thing the
// answer depends on between two reads and checks the second read against the relationship.

@Suite struct TypedToManyAppendTests {
    let temporary: TemporaryStore
    let context: ObjectContext

    init() throws {
        temporary = try TemporaryStore(schema: try typedSchema())
        context = ObjectContext(store: temporary.store, name: "append")
    }

    func ticket(_ title: String) throws -> Ticket {
        let ticket = try context.insert(Ticket.self)
        ticket.title = title
        return ticket
    }

    func project(_ name: String = "Alpha") throws -> Project {
        let project = try context.insert(Project.self)
        project.name = name
        return project
    }

    /// The project's tickets as the relationship holds them, read without the typed property.
    func stored(_ project: Project) throws -> [ObjectID] {
        try project.managedObject.objectIDs(forKey: "tickets")
    }

    @Test func appendingInALoopLinksEachObjectOnceInIDOrder() throws {
        let alpha = try project()
        var made: [Ticket] = []
        for i in 0..<40 {
            let ticket = try ticket("t\(i)")
            alpha.tickets.append(ticket)
            made.append(ticket)
            #expect(alpha.tickets.map(\.objectID) == made.map(\.objectID))
        }
        #expect(try stored(alpha) == made.map(\.objectID))
        #expect(made.allSatisfy { $0.project === alpha })
        try context.save()

        let fresh = ObjectContext(store: temporary.store)
        let read = try fresh.existingObject(Project.self, with: alpha.objectID)
        #expect(read.tickets.map(\.objectID) == made.map(\.objectID))
    }

    @Test func appendingSeveralAtOnceAddsThemAll() throws {
        let alpha = try project()
        let first = try ticket("first")
        alpha.tickets.append(first)
        let more = try (0..<3).map { try ticket("more \($0)") }
        alpha.tickets += more
        #expect(alpha.tickets.map(\.objectID) == ([first] + more).map(\.objectID))
        #expect(try stored(alpha) == ([first] + more).map(\.objectID))
    }

    @Test func appendingAMemberAgainAddsNothing() throws {
        let alpha = try project()
        let one = try ticket("one")
        let two = try ticket("two")
        alpha.tickets.append(one)
        alpha.tickets.append(two)
        alpha.tickets.append(one)
        #expect(alpha.tickets.map(\.objectID) == [one.objectID, two.objectID])
        #expect(try stored(alpha) == [one.objectID, two.objectID])
        // Twice in one assignment: linked once.
        let three = try ticket("three")
        alpha.tickets += [three, three]
        #expect(alpha.tickets.map(\.objectID) == [one.objectID, two.objectID, three.objectID])
    }

    @Test func anArrayAReadReturnedIsTheAppsOwn() throws {
        let alpha = try project()
        let one = try ticket("one")
        let two = try ticket("two")
        alpha.tickets.append(one)
        // The read after an append hands over the array the append assigned: changing it changes nothing stored.
        var mine = alpha.tickets
        mine.append(two)
        #expect(alpha.tickets.map(\.objectID) == [one.objectID])
        #expect(two.project == nil)
        mine[0] = two
        mine.removeLast()
        #expect(alpha.tickets.map(\.objectID) == [one.objectID])
        // Assigned, it is compared with the relationship as any array is.
        alpha.tickets = mine
        #expect(alpha.tickets.map(\.objectID) == [two.objectID])
        #expect(one.project == nil)
        var kept = alpha.tickets
        alpha.tickets.append(one)
        #expect(alpha.tickets.map(\.objectID) == [one.objectID, two.objectID])
        kept.removeAll()
        #expect(alpha.tickets.count == 2)
        #expect(try stored(alpha) == [one.objectID, two.objectID])
    }

    @Test func anAppendThatIsRefusedChangesNothingAndTheSaveReportsIt() throws {
        let alpha = try project()
        let one = try ticket("one")
        alpha.tickets.append(one)
        // A ticket of another context cannot be linked: the setter cannot throw, the next save does.
        let elsewhere = ObjectContext(store: temporary.store)
        let foreign = try elsewhere.insert(Ticket.self)
        foreign.title = "foreign"
        alpha.tickets.append(foreign)
        #expect(alpha.tickets.map(\.objectID) == [one.objectID])
        #expect(try stored(alpha) == [one.objectID])
        #expect(throws: EntityStoreError.self) { try context.save() }
        // The read after it is still the relationship's, and appends go on.
        let two = try ticket("two")
        alpha.tickets.append(two)
        #expect(alpha.tickets.map(\.objectID) == [one.objectID, two.objectID])
        try context.save()
        #expect(try stored(alpha) == [one.objectID, two.objectID])
    }

    @Test func anObjectAppendedOutOfIDOrderIsReadInIDOrder() throws {
        let alpha = try project()
        let older = try ticket("older")
        let newer = try ticket("newer")
        alpha.tickets.append(newer)
        alpha.tickets.append(older)
        #expect(alpha.tickets.map(\.objectID) == [older.objectID, newer.objectID])
        #expect(try stored(alpha) == [older.objectID, newer.objectID])
    }

    @Test func aChangeThroughTheInverseIsReadNext() throws {
        let alpha = try project()
        let beta = try project("Beta")
        let one = try ticket("one")
        let two = try ticket("two")
        alpha.tickets.append(one)
        alpha.tickets.append(two)
        #expect(alpha.tickets.count == 2)
        two.project = beta
        #expect(alpha.tickets.map(\.objectID) == [one.objectID])
        #expect(beta.tickets.map(\.objectID) == [two.objectID])
        one.project = nil
        #expect(alpha.tickets.isEmpty)
        // An append after a change elsewhere is a plain assignment again.
        alpha.tickets.append(two)
        #expect(alpha.tickets.map(\.objectID) == [two.objectID])
        #expect(beta.tickets.isEmpty)
    }

    @Test func anAssignmentThatIsNotAnAppendRemovesWhatItDrops() throws {
        let alpha = try project()
        let tickets = try (0..<3).map { try ticket("t\($0)") }
        for ticket in tickets { alpha.tickets.append(ticket) }
        alpha.tickets.removeFirst()
        #expect(alpha.tickets.map(\.objectID) == tickets.dropFirst().map(\.objectID))
        #expect(tickets[0].project == nil)
        alpha.tickets = [tickets[0]]
        #expect(alpha.tickets.map(\.objectID) == [tickets[0].objectID])
        #expect(try stored(alpha) == [tickets[0].objectID])
    }

    @Test func takingObjectsOutOfWhatAReadReturnedUnlinksJustThose() throws {
        let alpha = try project()
        var tickets = try (0..<6).map { try ticket("t\($0)") }
        for ticket in tickets { alpha.tickets.append(ticket) }
        func check(_ step: String) throws {
            #expect(alpha.tickets.map(\.objectID) == tickets.map(\.objectID), "\(step)")
            #expect(try stored(alpha) == tickets.map(\.objectID), "\(step)")
        }
        let first = alpha.tickets.removeFirst()
        tickets.removeFirst()
        try check("removeFirst")
        #expect(first.project == nil)
        let last = alpha.tickets.removeLast()
        tickets.removeLast()
        try check("removeLast")
        #expect(last.project == nil)
        alpha.tickets.remove(at: 1)
        let middle = tickets.remove(at: 1)
        try check("remove(at:)")
        #expect(middle.project == nil)
        // Taken out and put back in another order: a plain assignment.
        alpha.tickets = [tickets[2], tickets[0]]
        tickets = [tickets[0], tickets[2]]
        try check("reordered")
        // Undone: the object is back, in its place.
        try context.undoLastChange()
        #expect(alpha.tickets.count == 3)
        #expect(try stored(alpha) == alpha.tickets.map(\.objectID))
        alpha.tickets.removeAll()
        #expect(alpha.tickets.isEmpty)
        #expect(try stored(alpha).isEmpty)
        #expect(first.project == nil && middle.project == nil)
    }

    @Test func undoAndRedoOfAnAppendAreReadNext() throws {
        let alpha = try project()
        let one = try ticket("one")
        alpha.tickets.append(one)
        #expect(alpha.tickets.count == 1)
        try context.undoLastChange()
        #expect(alpha.tickets.isEmpty)
        #expect(one.project == nil)
        try context.redoLastChange()
        #expect(alpha.tickets.map(\.objectID) == [one.objectID])
    }

    @Test func aSavedDeleteOfATargetIsReadNext() throws {
        let alpha = try project()
        let one = try ticket("one")
        let two = try ticket("two")
        alpha.tickets.append(one)
        alpha.tickets.append(two)
        try context.save()
        #expect(alpha.tickets.count == 2)
        try context.delete(one)
        try context.save()
        #expect(alpha.tickets.map(\.objectID) == [two.objectID])
        #expect(alpha.tickets.allSatisfy { $0.context === context })
    }

    @Test func aRollbackIsReadNext() throws {
        let alpha = try project()
        let one = try ticket("one")
        alpha.tickets.append(one)
        try context.save()
        let two = try ticket("two")
        alpha.tickets.append(two)
        #expect(alpha.tickets.count == 2)
        context.rollback()
        #expect(alpha.tickets.map(\.objectID) == [one.objectID])
    }

    @Test func aResetLeavesTheOldModelsNothingToRead() throws {
        let alpha = try project()
        let one = try ticket("one")
        alpha.tickets.append(one)
        try context.save()
        #expect(alpha.tickets.count == 1)
        context.reset()
        #expect(alpha.tickets.isEmpty)
        let again = try context.existingObject(Project.self, with: alpha.objectID)
        #expect(again !== alpha)
        let read = again.tickets
        #expect(read.map(\.objectID) == [one.objectID])
        #expect(read.allSatisfy { $0 !== one && $0.context === context })
    }

    @Test func aMergedSaveOfAnotherContextIsReadNext() throws {
        let alpha = try project()
        alpha.tickets.append(try ticket("one"))
        try context.save()
        #expect(alpha.tickets.count == 1)

        let other = ObjectContext(store: temporary.store, name: "other")
        let there = try other.existingObject(Project.self, with: alpha.objectID)
        let added = try other.insert(Ticket.self)
        added.title = "from elsewhere"
        there.tickets.append(added)
        let saves = Recorder(other)
        try other.save()
        context.merge(try #require(saves.saves.last))
        #expect(alpha.tickets.map(\.objectID).contains(added.objectID))
        #expect(alpha.tickets.count == 2)
    }

    @Test func readsOfTwoRelationshipsInTurnAnswerEachItsOwn() throws {
        let alpha = try project()
        let beta = try project("Beta")
        let one = try ticket("one")
        let two = try ticket("two")
        alpha.tickets.append(one)
        beta.tickets.append(two)
        for _ in 0..<3 {
            #expect(alpha.tickets.map(\.objectID) == [one.objectID])
            #expect(beta.tickets.map(\.objectID) == [two.objectID])
        }
        let label = try context.insert(Label.self)
        label.name = "bug"
        one.labels.append(label)
        #expect(label.tickets.map(\.objectID) == [one.objectID])
        #expect(one.labels.map(\.objectID) == [label.objectID])
        #expect(alpha.tickets.map(\.objectID) == [one.objectID])
    }
}

/// A to-many whose objects' deletes leave it as it is (`noAction` on the inverse): only the registry tells a
/// deleted object's departure.
final class Crate: Model {
    @Stored var label: String
    @ToMany(inverse: "crate") var bottles: [Bottle]
}

final class Bottle: Model {
    @Stored var vintage: Int = 2000
    @ToOne(inverse: "bottles", deleteRule: .noAction) var crate: Crate?
}

@Suite struct TypedToManyDepartureTests {
    @Test func aSavedDeleteThatLeavesTheRelationshipIsReadAsAFreshRead() throws {
        let temporary = try TemporaryStore(schema: try Schema(version: 1, models: [Crate.self, Bottle.self]))
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let crate = try context.insert(Crate.self)
        crate.label = "red"
        let bottle = try context.insert(Bottle.self)
        crate.bottles.append(bottle)
        try context.save()
        #expect(crate.bottles.map(\.objectID) == [bottle.objectID])
        try context.delete(bottle)
        try context.save()
        // The link stays (no action), and a read wraps what the context registers for it now, as a first read
        // would: not the model of the object the save unregistered.
        #expect(bottle.context == nil)
        let read = crate.bottles
        #expect(read.map(\.objectID) == [bottle.objectID])
        #expect(read.allSatisfy { $0 !== bottle && $0.context === context })
    }
}
