import EntityStore
import TestSupport
import Testing

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
}
