import SectionedDiff
import TestSupport
import Testing

@Suite struct ChangeSetTests {
    /// DESIGN.md's worked examples, delivered exactly.
    static let worked: [(String, String, [String: Set<String>], [String])] = [
        ("K:k1,k2 L:l1", "K:k1 L:l1 M:k2", ["k2": ["section"]], ["del k2 [0,1]", "sins 2"]),
        ("K:k1 L:l1,l2", "L:k1,l1,l2", ["k1": ["section"]], ["sdel 0", "ins k1 [0,0]"]),
        ("K:p,q,r,s", "K:p,r,s,q", ["q": ["rank"]], ["move q [0,1]->[0,3]"]),
        ("K:p,q L:r", "K:r,p,q", ["r": ["section"]], ["sdel 1", "ins r [0,0]"]),
        (
            "K:p,q L:r M:t", "K:p L:r M:t,q", ["q": ["section"], "t": ["title"]],
            ["move q [0,1]->[2,1]", "upd t [2,0]->[2,0]"]
        ),
        ("K:p", "K:p", [:], []),
    ]

    @Test(arguments: worked)
    func theWorkedExamplesOfTheContract(
        old: String, new: String, changed: [String: Set<String>], expected: [String]
    )
        throws
    {
        let changes = try ChangeSet(from: lists(old), to: lists(new), changedKeys: changed)
        #expect(describe(changes) == expected)
        #expect(try changes.apply(to: lists(old)) == lists(new))
        #expect(BatchValidator.problems(changes).isEmpty)
    }

    @Test func anEqualValueWriteIsNoChangeAtAll() throws {
        let changes = try ChangeSet(from: lists("K:p"), to: lists("K:p"), changedKeys: ["p": []])
        #expect(changes.isEmpty)
        #expect(changes.batch.isEmpty)
        #expect(changes.batch.callbacks.isEmpty)
    }

    @Test func aSectionChangeIsAMoveEvenWithTheSameIndexPath() throws {
        // Seed 004: the object keeps [0,0] but its section changed (A disappears, B appears at index 0).
        let changes = try ChangeSet(from: lists("A:x B:y"), to: lists("B:x,y"), changedKeys: ["x": ["group"]])
        #expect(changes.movedItems.map(\.item) == ["x"])
        #expect(changes.updatedItems.isEmpty)
        // Seed 004 exactly: A is emptied and x moves from B to C, so x's path is [1,0] before and after; it is
        // delivered as a move, never as an update with a stale path.
        let same = try ChangeSet(from: lists("A:a B:x,b C:c"), to: lists("B:b C:x,c"), changedKeys: ["x": ["group"]])
        #expect(describe(same) == ["sdel 0", "move x [1,0]->[1,0]"])
        #expect(BatchValidator.problems(same).isEmpty)
        #expect(try same.apply(to: lists("A:a B:x,b C:c")) == lists("B:b C:x,c"))
    }

    @Test func seed002TheRZCollectionListBatch() throws {
        // Contents before: sections 0, 1, 2, 4 (by the number in brackets); after: 2, 4, 420.
        let old = lists("0:Jill,Jack 1:Garfunkel,Simon 2:Clyde,Bonnie,Jerry,Ben 4:NuTone,Technicolour")
        let new = lists("2:Jerry,Ben,Clyde,Bonnie 4:NuTone,Technicolour 420:Cheech,Chong")
        let changes = try ChangeSet(
            from: old, to: new, changedKeys: ["Jerry": ["rank"], "Ben": ["rank"], "Technicolour": ["title"]])
        #expect(
            describe(changes) == [
                "sdel 1", "sdel 0", "sins 2", "move Jerry [2,2]->[0,0]", "move Ben [2,3]->[0,1]",
                "upd Technicolour [3,1]->[1,1]",
            ])
        #expect(changes.deletedItems.map(\.item) == ["Jill", "Jack", "Garfunkel", "Simon"])
        #expect(changes.insertedItems.map(\.item) == ["Cheech", "Chong"])
        #expect(BatchValidator.problems(changes).isEmpty)
        #expect(try changes.apply(to: old) == new)
    }

    @Test func duplicatesAreAnErrorNotACrash() {
        #expect(throws: SectionedDiffError.self) { _ = try ChangeSet(from: lists("K:a,a"), to: lists("K:a")) }
        #expect(throws: SectionedDiffError.self) { _ = try ChangeSet(from: lists("K:a"), to: lists("K:a K:b")) }
    }

    @Test func shiftedItemsAreNotMovedAndChangedOnesArePreferredForMoves() throws {
        // Swapping two adjacent items: one move is minimal; the one whose key changed moves.
        let changes = try ChangeSet(from: lists("K:a,b"), to: lists("K:b,a"), changedKeys: ["a": ["rank"]])
        #expect(changes.movedItems.map(\.item) == ["a"])
        let other = try ChangeSet(from: lists("K:a,b"), to: lists("K:b,a"), changedKeys: ["b": ["rank"]])
        #expect(other.movedItems.map(\.item) == ["b"])
        let shifted = try ChangeSet(from: lists("K:a,b,c"), to: lists("K:x,a,c,y"))
        #expect(shifted.movedItems.isEmpty)
        #expect(describe(shifted) == ["del b [0,1]", "ins x [0,0]", "ins y [0,3]"])
    }

    @Test func sectionsWhoseOrderFlipsAreDeletedAndInserted() throws {
        let changes = try ChangeSet(from: lists("A:a B:b C:c"), to: lists("C:c B:b A:a"))
        #expect(BatchValidator.problems(changes).isEmpty)
        #expect(try changes.apply(to: lists("A:a B:b C:c")) == lists("C:c B:b A:a"))
        #expect(changes.deletedSections.count == 2)
    }

    @Test func flatSplicesAndTheCollectionDifferenceRebuildTheNewList() throws {
        let old = lists("K:a,b,c,d,e")
        let new = lists("K:x,b,d,c,e,y")
        let changes = try ChangeSet(from: old, to: new, changedKeys: ["c": ["rank"]])
        var flat = old.sections.flatMap(\.items)
        for splice in changes.splices {
            flat.replaceSubrange(splice.offset..<(splice.offset + splice.removed), with: splice.inserted)
        }
        #expect(flat == new.sections.flatMap(\.items))
        let difference = try #require(changes.flatDifference)
        #expect(old.sections.flatMap(\.items).applying(difference) == new.sections.flatMap(\.items))
        #expect(difference.insertions.count == 3)  // x, y and the moved c
    }
}
