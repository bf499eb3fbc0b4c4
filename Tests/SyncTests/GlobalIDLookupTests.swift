import EntityStore
import Foundation
import TestSupport
import Testing

@Suite("Global ID lookups")
struct GlobalIDLookupTests {
    @Test("an IN fetch on the unique uuid attribute finds every object, in a fresh context and after changes")
    func inFetchFindsEveryObject() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try PersistentStore.open(path: directory.path("a.store"), schema: Fixtures.syncSchema())
        let context = ObjectContext(store: store)
        var ids: [UUID] = []
        for i in 0..<300 {
            let task = try context.insert("Task")
            let id = UUID()
            ids.append(id)
            try task.setValue(.uuid(id), forKey: "syncID")
            try task.setValue(.string("t\(i)"), forKey: "title")
            if i % 50 == 49 { try context.save() }
        }
        for count in [1, 2, 10, 60, 200, 300] {
            let wanted = Array(ids.shuffled().prefix(count))
            let fresh = ObjectContext(store: store)
            let request = FetchRequest(
                entity: "Task",
                predicate: .comparison(
                    .init(keyPath: ["syncID"], op: .in, operand: .list(wanted.map(Value.uuid)))))
            #expect(try fresh.fetch(request).count == count, "\(count)")
            #expect(try context.fetch(request).count == count, "\(count) in the inserting context")
        }
    }
}
