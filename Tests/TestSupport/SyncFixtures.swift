import EntityStore
import Foundation

extension Fixtures {
    /// Projects, tasks and tags that sync (each has a unique `syncID`), and drafts that stay local (no `syncID`).
    public static func syncSchema(version: Int = 1) throws -> Schema {
        try Schema(version: version) {
            Entity("Project") {
                Attribute("syncID", .uuid, optional: true, unique: true)
                Attribute("name", .string)
                Attribute("budget", .decimal, optional: true)
                Relationship("tasks", to: "Task", inverse: "project", toMany: true, deleteRule: .cascade)
            }
            Entity("Task") {
                Attribute("syncID", .uuid, optional: true, unique: true)
                Attribute("title", .string)
                Attribute("done", .bool, default: false)
                Attribute("priority", .int64, default: 0)
                Attribute("due", .date, optional: true)
                Attribute("estimate", .double, optional: true)
                Attribute("attachment", .binary, optional: true)
                Relationship("project", to: "Project", inverse: "tasks")
                Relationship("tags", to: "Tag", inverse: "tasks", toMany: true)
            }
            Entity("Tag") {
                Attribute("syncID", .uuid, optional: true, unique: true)
                Attribute("name", .string, unique: true, caseInsensitive: true)
                Relationship("tasks", to: "Task", inverse: "tags", toMany: true)
            }
            Entity("Draft") {
                Attribute("text", .string)
            }
            if version >= 2 {
                Entity("Milestone") {
                    Attribute("syncID", .uuid, optional: true, unique: true)
                    Attribute("title", .string)
                }
            }
        }
    }

    /// A store's synced contents as text, object by object in global-ID order, with relationships as global IDs:
    /// two stores that converged give the same text.
    ///
    /// `globalID` is the sync engine's ``globalID(of:)`` (TestSupport does not link the sync module).
    public static func syncedContents(
        of store: PersistentStore, globalID: (ManagedObject) throws -> UUID
    ) throws
        -> String
    {
        let context = ObjectContext(store: store)
        var lines: [String] = []
        // The entities with global IDs (of the sync fixture: Project, Task and Tag), by name.
        let entities = store.schema.entities.filter { !$0.isAbstract && $0.attribute("syncID") != nil }.map(\.name)
        for entity in entities.sorted() {
            var rows: [String] = []
            for object in try context.fetch(FetchRequest(entity: entity)) {
                let id = try globalID(object)
                var fields: [String] = []
                for attribute in object.entity.attributes where attribute.name != "syncID" {
                    fields.append("\(attribute.name)=\(try object.value(forKey: attribute.name))")
                }
                for relationship in object.entity.relationships {
                    var targets: [String] = []
                    for target in try relationship.isToMany
                        ? object.objects(forKey: relationship.name)
                        : [object.object(forKey: relationship.name)].compactMap({ $0 })
                    {
                        targets.append(try globalID(target).uuidString)
                    }
                    fields.append("\(relationship.name)=[\(targets.sorted().joined(separator: ","))]")
                }
                rows.append("\(entity) \(id.uuidString) " + fields.joined(separator: " "))
            }
            lines += rows.sorted()
        }
        return lines.joined(separator: "\n")
    }
}
