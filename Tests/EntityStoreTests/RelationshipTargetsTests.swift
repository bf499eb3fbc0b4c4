import Testing

@testable import EntityStore

/// The table of an object's relationship targets by name (`ManagedObject.related`): it answers as the dictionary it
/// replaced did, names compared as strings (canonically equivalent spellings are one name).
@Suite struct RelationshipTargetsTests {
    let a = ObjectID(entityName: "Note", primaryKey: 1)
    let b = ObjectID(entityName: "Note", primaryKey: 2)

    @Test func entriesAreSetReadReplacedAndRemovedByName() {
        var table = RelationshipTargets()
        #expect(table.isEmpty)
        #expect(table["notes"] == nil)
        table["notes"] = [a]
        table["folder"] = []
        #expect(table["notes"] == [a])
        #expect(table["folder"] == [])
        #expect(table.keys.count == 2)
        table["notes"] = [b]
        #expect(table["notes"] == [b])
        #expect(table.keys.count == 2)
        table["notes"] = nil
        #expect(table["notes"] == nil)
        #expect(table.keys == ["folder"])
        table["missing"] = nil
        #expect(table.keys == ["folder"])
    }

    @Test func changesInPlaceLeaveNoEntryForAnAbsentName() {
        var table: RelationshipTargets = ["notes": [a]]
        table["notes"]?.insert(b)
        #expect(table["notes"] == [a, b])
        // Optional chaining on an absent entry changes nothing and adds nothing.
        table["tags"]?.insert(a)
        #expect(table["tags"] == nil)
        #expect(table.keys.count == 1)
        // Set to nil through an in-place access: the entry goes.
        fillIfAbsent(&table["tags"]) { [a] }
        #expect(table["tags"] == [a])
        func clear(_ entry: inout TargetSet?) { entry = nil }
        clear(&table["tags"])
        #expect(table["tags"] == nil)
        #expect(table.keys == ["notes"])
        table["tags", default: []].insert(b)
        #expect(table["tags"] == [b])
        table["notes", default: []].remove(a)
        #expect(table["notes"] == [b])
    }

    @Test func aCopyIsIndependent() {
        var table: RelationshipTargets = ["notes": [a]]
        let copy = table
        table["notes"]?.insert(b)
        table["folder"] = [a]
        #expect(copy["notes"] == [a])
        #expect(copy["folder"] == nil)
        #expect(table["notes"] == [a, b])
    }

    @Test func canonicallyEquivalentNamesAreOneName() {
        var table = RelationshipTargets()
        table["caf\u{E9}"] = [a]
        #expect(table["cafe\u{301}"] == [a])
        table["cafe\u{301}"]?.insert(b)
        #expect(table["caf\u{E9}"] == [a, b])
        #expect(table.keys.count == 1)
        #expect(table["cafe"] == nil)
        let shared = RelationshipTargets(["caf\u{E9}", "cafe\u{301}", "x"], each: [])
        #expect(shared.keys == ["caf\u{E9}", "x"])
    }

    @Test func iterationAndMappingGiveEveryEntry() {
        let table: RelationshipTargets = ["notes": [a, b], "folder": [a]]
        var seen: [String: TargetSet] = [:]
        for (name, targets) in table { seen[name] = targets }
        #expect(seen == ["notes": [a, b], "folder": [a]])
        #expect(table.mapValues { $0.count } == ["notes": 2, "folder": 1])
        #expect(table.values.map(\.ordered).sorted { $0.count < $1.count } == [[a], [a, b]])
        #expect(table.filter { $0.value.count == 2 }.map(\.key) == ["notes"])
    }
}
