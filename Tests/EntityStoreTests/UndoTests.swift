import TestSupport
import Testing

@testable import EntityStore

@Suite struct UndoTests {
    @Test func undoAndRedoAValueChange() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let tag = try context.insert("Tag")
            try tag.setValue("a", forKey: "name")
            try context.save()
            #expect(!context.canUndo)  // a save clears the undo history

            try tag.setValue("b", forKey: "name")
            try tag.setValue("c", forKey: "name")
            try context.undoLastChange()
            #expect(try tag["name"] == "b")
            try context.undoLastChange()
            #expect(try tag["name"] == "a")
            #expect(!context.hasChanges)
            try context.redoLastChange()
            #expect(try tag["name"] == "b")
            #expect(
                entityStoreError {
                    try context.redoLastChange(); try context.redoLastChange()
                }?.code == .nothingToUndo)
        }
    }

    @Test func undoCanBeTurnedOffAndLimited() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            context.isUndoEnabled = false
            let tag = try context.insert("Tag")
            try tag.setValue("a", forKey: "name")
            #expect(!context.canUndo)
            #expect(entityStoreError { try context.undoLastChange() }?.code == .nothingToUndo)
            // Saving and rolling back do not depend on undo.
            try context.save()
            try tag.setValue("b", forKey: "name")
            context.rollback()
            #expect(try tag["name"] == "a")

            context.isUndoEnabled = true
            context.undoLimit = 2
            for name in ["b", "c", "d", "e"] { try tag.setValue(.string(name), forKey: "name") }
            try context.undoLastChange()
            try context.undoLastChange()
            #expect(try tag["name"] == "c")
            #expect(!context.canUndo)  // the two oldest groups were dropped
            // Turning undo off forgets what was recorded.
            try tag.setValue("f", forKey: "name")
            #expect(context.canUndo)
            context.isUndoEnabled = false
            #expect(!context.canUndo)
            try context.save()
            #expect(try ObjectContext(store: store).fetch(FetchRequest(entity: "Tag")).map { try $0["name"] } == ["f"])
        }
    }

    @Test func undoAnInsertAndADeleteWithTheirRelationships() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let author = try context.insert("Author")
            try author.setValue("A", forKey: "name")
            try context.save()

            let book = try context.insert("Book")
            try book.setValue("B", forKey: "title")
            try book.setObject(author, forKey: "author")
            #expect(try author.objectIDs(forKey: "books") == [book.objectID])
            try context.undoLastChange()  // the link
            #expect(try author.objectIDs(forKey: "books").isEmpty)
            try context.undoLastChange()  // the title
            try context.undoLastChange()  // the insert
            #expect(book.context == nil)
            #expect(!context.hasChanges)

            try context.delete(author)
            #expect(author.isDeleted)
            try context.undoLastChange()
            #expect(!author.isDeleted)
        }
    }

    @Test func aGroupUndoesTogether() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            context.beginUndoGrouping()
            let first = try context.insert("Tag")
            try first.setValue("1", forKey: "name")
            let second = try context.insert("Tag")
            try second.setValue("2", forKey: "name")
            context.endUndoGrouping()
            #expect(context.insertedObjects.count == 2)
            try context.undoLastChange()
            #expect(context.insertedObjects.isEmpty)
            #expect(!context.canUndo)
            try context.redoLastChange()
            #expect(context.insertedObjects.count == 2)
            try context.save()
        }
    }

    /// Attribute writes are recorded as old values; a later change in the same group that needs the whole state
    /// folds them back in, so undo restores exactly the state before the group.
    @Test func attributeWritesAndARelationshipChangeInOneGroupUndoTogether() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let author = try context.insert("Author")
            try author.setValue("A", forKey: "name")
            let book = try context.insert("Book")
            try book.setValue("B", forKey: "title")
            try context.save()

            context.beginUndoGrouping()
            try book.setValue("B2", forKey: "title")
            try book.setValue("B3", forKey: "title")
            try book.setObject(author, forKey: "author")
            try book.setValue("B4", forKey: "title")
            try author.setValue("A2", forKey: "name")
            context.endUndoGrouping()
            try author.setValue("A3", forKey: "name")

            try context.undoLastChange()
            #expect(try author["name"] == "A2")
            try context.undoLastChange()
            #expect(try book["title"] == "B" && author["name"] == "A")
            #expect(try book.object(forKey: "author") == nil)
            #expect(try author.objectIDs(forKey: "books").isEmpty)
            #expect(!context.hasChanges)
            try context.redoLastChange()
            #expect(try book["title"] == "B4" && author["name"] == "A2")
            #expect(try book.object(forKey: "author")?.objectID == author.objectID)
        }
    }

    /// A group of plain attribute writes only (the group keeps its first write inline, the rest in a list): undo
    /// restores every object's value from before the group, the value written twice included.
    @Test func aGroupOfPlainWritesUndoesEveryWriteInReverse() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let tags = try (0..<3).map { i in
                let tag = try context.insert("Tag")
                try tag.setValue(.string("t\(i)"), forKey: "name")
                return tag
            }
            try context.save()
            context.beginUndoGrouping()
            try tags[0].setValue("x", forKey: "name")
            try tags[1].setValue("y", forKey: "name")
            try tags[0].setValue("z", forKey: "name")
            try tags[2].setValue("w", forKey: "name")
            context.endUndoGrouping()
            try context.undoLastChange()
            #expect(try tags.map { try $0["name"] } == ["t0", "t1", "t2"])
            #expect(!context.hasChanges)
            try context.redoLastChange()
            #expect(try tags.map { try $0["name"] } == ["z", "y", "w"])
        }
    }

    /// The limit drops the oldest groups as new ones close (their entries leave the undo log in batches): after
    /// hundreds of changes the newest groups still undo and redo exactly, also when the limit is lowered while a
    /// group is open.
    @Test func aLimitKeepsExactlyTheNewestGroupsThroughHundredsOfChanges() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let tag = try context.insert("Tag")
            try tag.setValue("start", forKey: "name")
            let other = try context.insert("Tag")
            try other.setValue("other", forKey: "name")
            try context.save()
            context.undoLimit = 3
            for i in 0..<500 { try tag.setValue(.string("\(i)"), forKey: "name") }
            for _ in 0..<3 { try context.undoLastChange() }
            #expect(try tag["name"] == "496")
            #expect(!context.canUndo)
            for _ in 0..<3 { try context.redoLastChange() }
            #expect(try tag["name"] == "499")
            #expect(!context.canRedo)

            context.undoLimit = 100
            try other.setValue("before", forKey: "name")
            context.beginUndoGrouping()
            try tag.setValue("in the group", forKey: "name")
            try other.setValue("in the group too", forKey: "name")
            context.undoLimit = 1
            try tag.setValue("still in the group", forKey: "name")
            context.endUndoGrouping()
            try context.undoLastChange()
            #expect(try tag["name"] == "499" && other["name"] == "before")
            #expect(!context.canUndo)

            // Inserts (whole states) between the value sets: the limit drops both kinds of group in their order.
            context.undoLimit = 3
            let inserted = try (0..<100).map { i in
                let new = try context.insert("Tag")
                try new.setValue(.string("new \(i)"), forKey: "name")
                return new
            }
            try context.undoLastChange()
            try context.undoLastChange()
            #expect(inserted[99].context == nil)
            #expect(try inserted[98]["name"] == "new 98")
            try context.undoLastChange()
            #expect(try inserted[98]["name"] == .null)
            #expect(!context.canUndo)
            #expect(context.insertedObjects.count == 99)
        }
    }

    /// A group with many whole states (inserts, relationship changes after plain writes): undo removes and restores
    /// every object at once, each from its state before the group, and redo brings the group back.
    @Test func aLargeGroupOfInsertsAndRelationshipChangesUndoesAtOnce() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let author = try context.insert("Author")
            try author.setValue("A", forKey: "name")
            let books = try (0..<20).map { i in
                let book = try context.insert("Book")
                try book.setValue(.string("b\(i)"), forKey: "title")
                return book
            }
            try context.save()

            context.beginUndoGrouping()
            let tags = try (0..<30).map { i in
                let tag = try context.insert("Tag")
                try tag.setValue(.string("t\(i)"), forKey: "name")
                return tag
            }
            for (i, book) in books.enumerated() {
                try book.setValue(.string("changed \(i)"), forKey: "title")
                try book.setObject(author, forKey: "author")
                try book.setValue(.string("changed again \(i)"), forKey: "title")
            }
            context.endUndoGrouping()
            #expect(try author.objectIDs(forKey: "books").count == 20)

            try context.undoLastChange()
            #expect(tags.allSatisfy { $0.context == nil })
            #expect(try books.map { try $0["title"] } == (0..<20).map { .string("b\($0)") })
            #expect(try author.objectIDs(forKey: "books").isEmpty)
            #expect(!context.hasChanges)
            #expect(!context.canUndo)

            try context.redoLastChange()
            #expect(context.insertedObjects.count == 30)
            #expect(try books.map { try $0["title"] } == (0..<20).map { .string("changed again \($0)") })
            #expect(try author.objectIDs(forKey: "books").count == 20)
            try context.undoLastChange()
            #expect(context.insertedObjects.isEmpty)
            #expect(try author.objectIDs(forKey: "books").isEmpty)
        }
    }
}

extension UndoTests {
    /// Random writes (to new objects, whose old values are their defaults and are not kept, and to saved ones),
    /// inserts, groups, limits, undo and redo, against a model of the states each group started from: every undo and
    /// redo restores exactly the model's state, bit for bit.
    @Test func randomWritesUndoAndRedoToExactlyTheStatesBeforeThem() throws {
        let schema = try Schema(version: 1) {
            Entity("Note") {
                Attribute("title", .string, optional: true, default: "café")
                Attribute("weight", .double, optional: true, default: -0.0)
                Attribute("rank", .int64, optional: true, default: 3)
                Attribute("body", .string, optional: true)
            }
        }
        try withStore(schema: schema) { store, _ in
            let context = ObjectContext(store: store)
            var notes = try (0..<4).map { _ in try context.insert("Note") }
            try context.save()
            let keys = ["title", "weight", "rank", "body"]
            let choices: [String: [Value]] = [
                "title": ["untitled", "café", "cafe\u{301}", .null],
                "body": ["untitled", "café", "cafe\u{301}", .null],
                "weight": [.double(0.0), .double(-0.0), .double(2.5), .null],
                "rank": [.int(3), .int(-7), .int(9), .null],
            ]
            typealias State = [ObjectIdentifier: [Value]]
            func state() throws -> State {
                var state: State = [:]
                for note in notes where note.context != nil {
                    state[ObjectIdentifier(note)] = try keys.map { try note[$0] }
                }
                return state
            }
            func exactly(_ a: State, _ b: State) -> Bool {
                a.keys == b.keys
                    && a.allSatisfy { id, values in
                        zip(values, b[id]!).allSatisfy { x, y in
                            if case .double(let p) = x, case .double(let q) = y { return p.bitPattern == q.bitPattern }
                            if case .string(let p) = x, case .string(let q) = y { return p.utf8.elementsEqual(q.utf8) }
                            return x == y
                        }
                    }
            }
            var undoable: [State] = []
            var redoable: [State] = []
            var limit = 0
            var g = SeededGenerator(seed: 41)
            func write() throws -> Bool {
                let note = notes.filter { $0.context != nil }.randomElement(using: &g)!
                let key = keys.randomElement(using: &g)!
                let value = choices[key]!.randomElement(using: &g)!
                guard try note[key] != value else { return false }
                try note.setValue(value, forKey: key)
                return true
            }
            for step in 0..<1_500 {
                let before = try state()
                var changed = false
                switch Int.random(in: 0..<12, using: &g) {
                case 0..<4:
                    changed = try write()
                case 4:
                    notes.append(try context.insert("Note"))
                    changed = true
                case 5, 6:
                    context.beginUndoGrouping()
                    for _ in 0..<Int.random(in: 1...4, using: &g) { changed = try write() || changed }
                    context.endUndoGrouping()
                case 7:
                    limit = [0, 2, 5, 40].randomElement(using: &g)!
                    context.undoLimit = limit
                    if limit > 0 && undoable.count > limit { undoable.removeFirst(undoable.count - limit) }
                case 8, 9:
                    guard let target = undoable.popLast() else {
                        #expect(!context.canUndo, "step \(step)")
                        break
                    }
                    try context.undoLastChange()
                    redoable.append(before)
                    #expect(exactly(try state(), target), "undo at step \(step)")
                case 10:
                    guard let target = redoable.popLast() else {
                        #expect(!context.canRedo, "step \(step)")
                        break
                    }
                    try context.redoLastChange()
                    undoable.append(before)
                    if limit > 0 && undoable.count > limit { undoable.removeFirst() }
                    #expect(exactly(try state(), target), "redo at step \(step)")
                default:
                    // A save with something to write clears the history; one with nothing leaves it.
                    if step % 5 == 0 {
                        let saves = context.hasChanges
                        try context.save()
                        if saves {
                            undoable = []
                            redoable = []
                        }
                    }
                }
                if changed {
                    undoable.append(before)
                    redoable = []
                    if limit > 0 && undoable.count > limit { undoable.removeFirst() }
                }
                context._checkInvariants()
                #expect(context.canUndo == !undoable.isEmpty, "step \(step)")
                #expect(context.canRedo == !redoable.isEmpty, "step \(step)")
            }
        }
    }
}

@Suite struct UndoWhileGroupedTests {
    @Test func undoAndRedoWhileAGroupIsOpenSayWhy() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let author = try context.insert("Author")
            try author.setValue("a", forKey: "name")
            context.beginUndoGrouping()
            #expect(context.canUndo)  // as NSUndoManager: a group to undo, once the open one is closed
            let error = entityStoreError { try context.undoLastChange() }
            #expect(error?.code == .nothingToUndo)
            #expect(error?.message.contains("call endUndoGrouping() first") == true)
            #expect(entityStoreError { try context.redoLastChange() }?.message.contains("undo group is open") == true)
            context.endUndoGrouping()
            try context.undoLastChange()
            #expect(try author.value(forKey: "name") == .null)
        }
    }
}
