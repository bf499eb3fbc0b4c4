import Foundation
import LMDB
import TestSupport
import Testing

@testable import EntityStore

/// The engine's promises where threads, odd values and damaged metadata meet the public API.
@Suite struct EngineCorrectnessTests {
    @Test func threadsOpeningOneStoreReadOnlyAtOnceAllSucceed() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for round in 0..<100 {
            let path = dir.path("r\(round).store")
            _ = try PersistentStore.open(path: path, schema: Fixtures.librarySchema(), options: .init(sync: .noSync))
            let failures = Failures()
            let group = DispatchGroup()
            for _ in 0..<2 {
                group.enter()
                Thread {
                    defer { group.leave() }
                    do {
                        let store = try PersistentStore.openReadOnly(path: path)
                        _ = try ObjectContext(store: store).count(for: FetchRequest(entity: "Book"))
                    } catch {
                        failures.add("\(error)")
                    }
                }.start()
            }
            group.wait()
            #expect(failures.all.isEmpty, "round \(round): \(failures.all)")
        }
    }

    @Test func aWindowWithTheLargestLimitDoesNotOverflow() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            for i in 0..<5 {
                let tag = try context.insert("Tag")
                try tag.setValue(.string("t\(i)"), forKey: "name")
            }
            try context.save()
            var request = FetchRequest(entity: "Tag", sortKeys: [SortKey("name")])
            request.fetchOffset = 1
            request.fetchLimit = .max
            let names = try context.fetch(request).map { try $0["name"] }
            #expect(names == ["t1", "t2", "t3", "t4"].map(Value.string))
            let controller = FetchedResultsController(fetchRequest: request, context: context)
            try controller.performFetch()
            #expect(controller.fetchedObjectIDs.count == 4)
        }
    }

    @Test func aDamagedKeySequenceIsAClearError() throws {
        try withStore { store, _ in
            try store.environment.write { txn in
                try txn.put(Array("seq.Tag".utf8), [1, 2, 3], in: try txn.openDatabase("meta"))
            }
            let error = entityStoreError { _ = try ObjectContext(store: store).insert("Tag") }
            #expect(error?.code == .corruptData)
            #expect(error?.message.contains("sequence of Tag holds 3 bytes") == true)
        }
    }
}

/// Failures collected from test threads.
final class Failures: @unchecked Sendable {
    // @unchecked Sendable: `messages` is only touched while `lock` is held.
    private let lock = NSLock()
    private var messages: [String] = []

    func add(_ message: String) { lock.withLock { messages.append(message) } }
    var all: [String] { lock.withLock { messages } }
}
