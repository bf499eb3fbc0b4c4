import EntityStore
import EntityStoreSync
import Foundation
import TestSupport
import Testing

/// Deletes that reach a store by a cascade: of objects the deleting context never read, and of a pulled page.
@Suite(
    "Sync: cascaded deletes",
    .enabled(if: ScratchPostgres.isAvailable, "PostgreSQL is not installed (apt-get install postgresql libpq-dev)"))
struct SyncDeleteTests {
    /// Saves a project named `name` with tasks titled `titles`, in a new context of `store`.
    func project(_ name: String, tasks titles: [String], in store: PersistentStore) throws {
        let context = ObjectContext(store: store)
        let project = try context.insert("Project")
        try project.setValue(.string(name), forKey: "name")
        for title in titles {
            let task = try context.insert("Task")
            try task.setValue(.string(title), forKey: "title")
            try task.setObject(project, forKey: "project")
        }
        try context.save()
    }

    func fetchOne(
        _ entity: String, _ predicate: String, in store: PersistentStore, _ context: ObjectContext? = nil
    )
        throws -> (ManagedObject, ObjectContext)
    {
        let context = context ?? ObjectContext(store: store)
        let found = try context.fetch(FetchRequest(entity: entity, predicate: FetchPredicate(predicate)))
        return (try #require(found.first, "no \(entity) where \(predicate)"), context)
    }

    /// C deletes a project without knowing A's task in it, then pulls the task (alive, in no project). B pulls
    /// the delete, and its cascade takes its copy of the task, never read: that delete must reach C under the
    /// task's global ID.
    @Test("a pulled delete's cascade through copies never read deletes them on the other stores")
    func cascadeOfCopiesNeverRead() throws {
        let zone = try SyncZone()
        defer { zone.remove() }
        for name in ["a", "b", "c"] { _ = try zone.open(name) }
        try deleteAProjectWithATaskCNeverSaw(zone)
        #expect(try zone.count("Task", in: "c") == 1, "C pulled the task")

        try zone.sync("b")  // pulls the delete; the cascade takes the task
        #expect(try zone.count("Task", in: "b") == 0)
        try zone.sync("b", "c")  // B pushes its cascade, C pulls it
        #expect(try zone.count("Task", in: "c") == 0, "B's cascade did not reach C")
        #expect(try zone.contents("b") == zone.contents("c"))
    }

    /// A makes a project that C pulls, then a task in it that B pulls and C does not; C deletes the project and
    /// syncs (pushing the delete, then pulling the task, now in no project).
    func deleteAProjectWithATaskCNeverSaw(_ zone: SyncZone) throws {
        let (a, c) = (zone.store("a"), zone.store("c"))
        try project("Home", tasks: [], in: a)
        try zone.sync("a", "c")
        let (home, adding) = try fetchOne("Project", "name == 'Home'", in: a)
        let task = try adding.insert("Task")
        try task.setValue("Dishes", forKey: "title")
        try task.setObject(home, forKey: "project")
        try adding.save()
        try zone.sync("a", "b")
        let (stale, deleting) = try fetchOne("Project", "name == 'Home'", in: c)
        try deleting.delete(stale)
        try deleting.save()
        try zone.sync("c")
    }

    @Test("a batch delete of copies deletes them on every store")
    func batchDeleteOfCopies() throws {
        let zone = try SyncZone()
        defer { zone.remove() }
        let a = try zone.open("a")
        let b = try zone.open("b")
        try project("Home", tasks: ["Dishes", "Laundry"], in: a)
        try zone.sync("a", "b")
        try b.batchDelete("Project", where: FetchPredicate("name == 'Home'"))
        try zone.sync("b", "a")
        #expect(try zone.count("Task", in: "a") == 0)
        #expect(try zone.count("Project", in: "a") == 0)
        #expect(try zone.contents("a") == zone.contents("b"))
    }

    /// A's first page deletes a project that A still sees holding a task (C deleted the project without knowing the
    /// task), so A's cascade deletes the task; its second page holds B's later rename of the task, which the
    /// server still has alive. A must not make the task again (it would keep that copy after its own cascade, now
    /// pushed, deletes the task on the server), and every store ends without it.
    @Test("a later page does not make again the object an earlier page's cascade deleted")
    func laterPageAfterACascade() throws {
        let zone = try SyncZone()
        defer { zone.remove() }
        _ = try zone.open("a", pageSize: 1)
        let b = try zone.open("b")
        _ = try zone.open("c")
        // C, which never saw the task, deletes the project: the server's log says so first.
        try deleteAProjectWithATaskCNeverSaw(zone)
        // B renames the task and pushes it before it pulls the delete (which cascades on B too).
        let (copy, renaming) = try fetchOne("Task", "title == 'Dishes'", in: b)
        try copy.setValue("Dishes, rinsed", forKey: "title")
        try renaming.save()
        try zone.sync("b")

        // A pulls one entry per page: the project's delete (its cascade takes the task), then the rename.
        try zone.sync("a")
        #expect(try zone.count("Task", in: "a") == 0, "A made the task again from the later page")
        for _ in 0..<2 { try zone.sync("a", "b", "c") }
        for name in ["a", "b", "c"] {
            #expect(try zone.count("Task", in: name) == 0, "store \(name)")
            #expect(try zone.count("Project", in: name) == 0, "store \(name)")
        }
        #expect(try zone.contents("a") == zone.contents("b"))
        #expect(try zone.contents("a") == zone.contents("c"))
    }
}

/// Under `newestWins`, an object deleted on one store and changed later on another lives again everywhere.
@Suite(
    "Sync: objects that live again",
    .enabled(if: ScratchPostgres.isAvailable, "PostgreSQL is not installed (apt-get install postgresql libpq-dev)"))
struct SyncRevivalTests {
    /// B deletes a tag without knowing A linked a task to it; A renames the tag later, so it lives again. B makes
    /// it again: with the task's link, as A has it.
    @Test("a store that makes again an object it deleted links it as the other stores do")
    func revivedObjectKeepsItsLinks() throws {
        let zone = try SyncZone()
        defer { zone.remove() }
        let a = try zone.open("a", deletePolicy: .newestWins)
        let b = try zone.open("b", deletePolicy: .newestWins)
        let (syncA, syncB) = (zone.engine("a"), zone.engine("b"))
        let making = ObjectContext(store: a)
        let tag = try making.insert("Tag")
        try tag.setValue("idea", forKey: "name")
        try making.save()
        try syncA.syncNow()
        try syncB.syncNow()

        let task = try making.insert("Task")
        try task.setValue("Sketch", forKey: "title")
        try task.add(tag, toKey: "tags")
        try making.save()
        try syncA.syncNow()

        // B deletes the tag before it pulls the link; A renames it after, before it pulls the delete.
        let deleting = ObjectContext(store: b)
        try deleting.delete(try #require(try deleting.fetch(FetchRequest(entity: "Tag")).first))
        try deleting.save()
        try syncB.syncNow()
        try tag.setValue("idea!", forKey: "name")
        try making.save()
        try syncA.syncNow()
        try syncB.syncNow()

        let reading = ObjectContext(store: b)
        let revived = try #require(try reading.fetch(FetchRequest(entity: "Tag")).first, "the tag lives again on B")
        #expect(try revived.value(forKey: "name") == .string("idea!"))
        #expect(try revived.objects(forKey: "tasks").count == 1, "B's tag lost the task's link")
        #expect(try zone.contents("a") == zone.contents("b"))
    }
}
