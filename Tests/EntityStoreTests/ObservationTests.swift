import EntityStore
import Foundation
import TestSupport
import Testing

/// Collects the records a context delivers.
final class Recorder {
    var records: [ChangeRecord] = []
    var token: ObservationToken?

    init(_ context: ObjectContext) {
        token = context.addObserver { [unowned self] in records.append($0) }
    }

    var changes: [ChangeRecord] { records.filter { $0.kind != .didSave } }
    var saves: [ChangeRecord] { records.filter { $0.kind == .didSave } }
}

@Suite struct ObservationTests {
    @Test func processingDeliversOneEventForEveryKindOfChange() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store, name: "editor")
            let recorder = Recorder(context)
            let author = try context.insert("Author")
            try author.setValue("A", forKey: "name")
            try author.setValue("B", forKey: "name")  // coalesced with the insert
            context.processPendingChanges()
            #expect(recorder.changes.count == 1)
            #expect(recorder.changes[0].insertedIDs == [author.objectID])
            #expect(recorder.changes[0].changes[0].newValues["name"] == "B")
            #expect(recorder.changes[0].author == "editor")
            #expect(recorder.changes[0].transaction == nil)
            try context.save()

            try author.setValue(4, forKey: "rating")
            let book = try context.insert("Book")
            try book.setValue("T", forKey: "title")
            try book.setObject(author, forKey: "author")
            context.processPendingChanges()
            let update = try #require(recorder.changes.last?.changes.first { $0.objectID == author.objectID })
            #expect(update.kind == .update)
            #expect(update.changedKeys == ["rating", "books"])
            #expect(update.oldValues == ["rating": 0])
            #expect(update.newValues == ["rating": 4])
            #expect(update.oldRelationships == ["books": []])
            try context.save()

            try context.delete(author)
            context.processPendingChanges()
            #expect(recorder.changes.last?.deletedIDs == [author.objectID])
            #expect(recorder.changes.last?.changes.first?.oldValues["name"] == "B")
        }
    }

    @Test func writesOfEqualValuesAndRolledBackChangesDeliverNothing() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let tag = try context.insert("Tag")
            try tag.setValue("x", forKey: "name")
            try context.save()
            let recorder = Recorder(context)
            try tag.setValue("x", forKey: "name")
            context.processPendingChanges()
            try tag.setValue("y", forKey: "name")
            try tag.setValue("x", forKey: "name")
            context.processPendingChanges()
            try tag.setValue("z", forKey: "name")
            let scratch = try context.insert("Tag")
            try context.delete(scratch)
            context.rollback()
            context.processPendingChanges()
            try context.save()
            #expect(recorder.records.isEmpty)
        }
    }

    @Test func aRollbackAfterProcessingDeliversTheInverse() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let tag = try context.insert("Tag")
            try tag.setValue("x", forKey: "name")
            try context.save()
            let recorder = Recorder(context)
            try tag.setValue("y", forKey: "name")
            context.processPendingChanges()
            context.rollback()
            #expect(recorder.changes.count == 2)
            #expect(recorder.changes[1].changes[0].oldValues == ["name": "y"])
            #expect(recorder.changes[1].changes[0].newValues == ["name": "x"])
        }
    }

    @Test func aSaveDeliversItsTransactionAndRecordsItInTheHistory() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store, name: "saver")
            let recorder = Recorder(context)
            let tag = try context.insert("Tag")
            try tag.setValue("first", forKey: "name")
            try context.save()
            try tag.setValue("second", forKey: "name")
            try context.save()
            #expect(recorder.saves.map(\.transaction) == [1, 2])
            #expect(try store.lastTransaction() == 2)
            let history = try store.history()
            #expect(history.count == 2)
            #expect(history[0].insertedIDs == [tag.objectID])
            #expect(history[1].changes[0].changedKeys == ["name"])
            #expect(history[1].changes[0].oldValues == ["name": "first"])
            #expect(history[1].changes[0].newValues == ["name": "second"])
            #expect(history[1].author == "saver")
            #expect(history[1].contextID == context.contextID)
            // The stored entries are the delivered records, but for an insert's new values (its record holds them).
            let delivered = recorder.saves.map { record in
                var copy = record
                copy.changes = record.changes.map { change in
                    var change = change
                    if change.kind == .insert { change.newValues = [:] }
                    return change
                }
                return copy
            }
            #expect(history == delivered)
            #expect(try store.history(since: 1).map(\.transaction) == [2])
        }
    }

    /// A delete's change holds every old value, also for objects the deleting context never read (a cascade's
    /// targets, a fault deleted as it is) and for a batch delete: a history reader (a sync engine naming the object
    /// by an attribute) has nothing else of the object.
    @Test func deletesOfObjectsNeverReadRecordTheirValuesInTheHistory() throws {
        try withStore { store, _ in
            let writer = ObjectContext(store: store)
            var books: [ObjectID] = []
            for name in ["Ann", "Bo", "Cy"] {
                let author = try writer.insert("Author")
                try author.setValue(.string(name), forKey: "name")
                try author.setValue(.string("\(name.lowercased())@example.com"), forKey: "email")
                let book = try writer.insert("Book")
                try book.setValue(.string(name), forKey: "title")
                try book.setValue(.int(100), forKey: "pages")
                try book.setObject(author, forKey: "author")
                books.append(book.objectID)
            }
            try writer.save()
            /// The old values of the deletes recorded since `transaction`, by entity and name or title.
            func deletes(since transaction: UInt64) throws -> [String: [String: Value]] {
                var found: [String: [String: Value]] = [:]
                for entry in try store.history(since: transaction) {
                    for change in entry.changes where change.kind == .delete {
                        guard case .string(let label)? = change.oldValues["name"] ?? change.oldValues["title"] else {
                            Issue.record("the delete of \(change.objectID) holds no name: \(change.oldValues)")
                            continue
                        }
                        found["\(change.objectID.entityName) \(label)"] = change.oldValues
                    }
                }
                return found
            }

            // The author read by a fetch, its book a fault the cascade deletes.
            let context = ObjectContext(store: store)
            let ann = try #require(
                try context.fetch(FetchRequest(entity: "Author", predicate: FetchPredicate("name == 'Ann'"))).first)
            try context.delete(ann)
            var last = try store.lastTransaction()
            try context.save()
            let cascaded = try deletes(since: last)
            #expect(cascaded["Author Ann"]?["email"] == .string("ann@example.com"))
            #expect(cascaded["Book Ann"]?["pages"] == .int(100))
            #expect(cascaded["Book Ann"]?["inPrint"] == .bool(true))

            // A fault deleted as it is.
            last = try store.lastTransaction()
            try context.delete(try context.object(with: books[2]))
            try context.save()
            #expect(try deletes(since: last)["Book Cy"]?["pages"] == .int(100))

            // A batch delete: every value of every object, cascades included.
            last = try store.lastTransaction()
            try store.batchDelete("Author", where: FetchPredicate("name == 'Bo'"))
            let batch = try deletes(since: last)
            #expect(batch["Author Bo"]?["email"] == .string("bo@example.com"))
            #expect(batch["Author Bo"]?["rating"] == .int(0))
            #expect(batch["Book Bo"]?["pages"] == .int(100))
            #expect(batch["Book Bo"]?.count == 7)
        }
    }

    @Test func historyIsPrunedBeforeANumberOrADate() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            for i in 0..<5 {
                let tag = try context.insert("Tag")
                try tag.setValue(.string("t\(i)"), forKey: "name")
                try context.save()
            }
            // A limit takes the oldest that many; below 1 it is refused (0 gave one entry).
            #expect(try store.history(since: 1, limit: 2).map(\.transaction) == [2, 3])
            for limit in [0, -1] {
                #expect(entityStoreError { _ = try store.history(limit: limit) }?.code == .invalidValue)
            }
            #expect(try store.pruneHistory(before: 3) == 2)
            #expect(try store.history().map(\.transaction) == [3, 4, 5])
            #expect(try store.pruneHistory(before: Date.distantPast) == 0)
            #expect(try store.pruneHistory(before: Date().addingTimeInterval(60)) == 3)
            #expect(try store.history().isEmpty)
            #expect(try store.lastTransaction() == 5)  // numbering goes on
            try context.insert("Tag").setValue("after", forKey: "name")
            try context.save()
            #expect(try store.history().map(\.transaction) == [6])
            #expect(try store.checkIntegrity().findings.isEmpty)
        }
    }

    @Test func userDrivenChangesAreFlaggedInEventsAndHistory() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let recorder = Recorder(context)
            let a = try context.insert("Tag")
            try a.setValue("a", forKey: "name")
            try context.save()
            let b = try context.insert("Tag")
            try context.performUserDrivenChanges {
                try a.setValue("moved", forKey: "name")
                try b.setValue("b", forKey: "name")
            }
            let event = try #require(recorder.changes.last)
            #expect(event.changes.first { $0.objectID == a.objectID }?.isUserDriven == true)
            #expect(event.changes.first { $0.objectID == b.objectID }?.isUserDriven == false)  // inserted outside
            try context.save()
            let saved = try #require(try store.history().last)
            #expect(saved.changes.first { $0.objectID == a.objectID }?.isUserDriven == true)
            #expect(saved.changes.first { $0.objectID == b.objectID }?.isUserDriven == false)
        }
    }

    /// A token is `Sendable`: apps cancel it from other threads (a deinit elsewhere, a task ending) while the context
    /// delivers its saves. The observers' tables were edited without a lock then, and the process crashed (under
    /// ThreadSanitizer, `make tsan`, the race is reported at once).
    @Test func tokensCancelledOnOtherThreadsWhileSavesDeliverLeaveTheOthersObserving() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let kept = Recorder(context)
            let rounds = TestScale.size(500, stress: 5000)
            for round in 0..<rounds {
                let tokens = (0..<20).map { _ in context.addObserver { _ in } }
                let cancelled = DispatchGroup()
                for half in [tokens[..<10], tokens[10...]] {
                    let half = Array(half)
                    DispatchQueue.global().async(group: cancelled) { for token in half { token.cancel() } }
                }
                let author = try context.insert("Author")
                try author.setValue(.string("a\(round)"), forKey: "name")
                try context.save()
                cancelled.wait()
            }
            #expect(kept.changes.count == rounds)
            #expect(kept.saves.count == rounds)

            // Cancelled on another thread before a save begins, an observer is not called by it.
            let called = NotificationCounter()
            let token = context.addObserver { _ in called.add() }
            let cancelled = DispatchGroup()
            DispatchQueue.global().async(group: cancelled) { token.cancel() }
            cancelled.wait()
            try context.insert("Author").setValue(.string("last"), forKey: "name")
            try context.save()
            #expect(called.value == 0)
            #expect(kept.saves.count == rounds + 1)
        }
    }

    #if DEBUG
    /// A context used outside the actor it was made on (here through an `@unchecked Sendable` wrapper, which the
    /// compiler cannot see through) traps at the call in a debug build, naming the actor it expected, instead of
    /// corrupting its state for a later crash far away.
    @Test func aContextUsedOutsideItsActorTrapsAtTheCallInADebugBuild() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let output = try ChildProcess.helper(["misuse-context", directory.path("misuse.store")])
        #expect(output.terminationReason == .uncaughtSignal, "\(output.stdout) \(output.stderr)")
        #expect(output.stdout.contains("saving outside the actor"))
        #expect(!output.stdout.contains("not trapped"))
        #expect(output.stderr.contains("expected 'es_test_helper.MisuseHome' executor"), "\(output.stderr)")
    }
    #endif

    @Test func streamsAndNotificationsCarryTheRecords() async throws {
        let temporary = try TemporaryStore()
        defer { temporary.remove() }
        let context = ObjectContext(store: temporary.store)
        let stream = context.changes
        let received = NotificationCounter()
        let observer = NotificationCenter.default.addObserver(
            forName: .entityStoreDidSave, object: context, queue: nil
        ) { _ in received.add() }
        defer { NotificationCenter.default.removeObserver(observer) }
        let tag = try context.insert("Tag")
        try tag.setValue("n", forKey: "name")
        try context.save()
        var iterator = stream.makeAsyncIterator()
        let first = await iterator.next()
        let second = await iterator.next()
        #expect(first?.kind == .objectsDidChange)
        #expect(second?.kind == .didSave)
        #expect(received.value == 1)
    }
}

final class NotificationCounter: @unchecked Sendable {
    // @unchecked Sendable: `count` is only touched while `lock` is held.
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
