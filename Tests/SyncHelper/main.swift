import EntityStore
import EntityStoreSync
import Foundation
import TestSupport

// es-sync-helper work STORE CONNECTION SEED ROUNDS
//
// One replica of the sync tests: rounds of one random local edit (inserts, updates of the same attributes as the
// other replicas, deletes, relationship changes), each saved and followed by a sync, at least ROUNDS of them and
// until standard input ends. Each round is acknowledged with "round N online" or "round N offline": a sync that
// cannot reach PostgreSQL is expected (the tests stop the server midway), and the replica goes on offline. Any other
// failure ends the process with status 1, naming it.

// es-sync-helper sync STORE CONNECTION
//
// Syncs until a whole sync moves nothing (in batches of 20, so a kill lands inside a push or a pull), printing
// "batch ..." after each batch pushed or page pulled, then prints "synced".

// es-sync-helper add STORE TITLE...
//
// Saves one task of each title, in one save each (without syncing), then prints "added".

let arguments = CommandLine.arguments
if arguments.count >= 3, arguments[1] == "add" {
    do {
        let store = try PersistentStore.open(path: arguments[2], schema: Fixtures.syncSchema())
        for title in arguments.dropFirst(3) {
            let context = ObjectContext(store: store)
            try context.insert("Task").setValue(.string(title), forKey: "title")
            try context.save()
        }
        print("added")
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("es-sync-helper: \(error)\n".utf8))
        exit(1)
    }
}
if arguments.count == 4, arguments[1] == "sync" {
    do {
        let store = try PersistentStore.open(path: arguments[2], schema: Fixtures.syncSchema())
        let engine = try SyncEngine(store: store, configuration: .init(connection: arguments[3], batchSize: 20))
        while true {
            // Each batch pushed or page pulled is acknowledged: a test kills the process after a chosen number.
            let report = try engine.syncNow { progress in
                print("batch pushed=\(progress.pushedEntries) pulled=\(progress.pulledEntries)")
                fflush(nil)
            }
            if report.pushedChanges == 0 && report.pulledObjects == 0 { break }
        }
        print("synced")
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("es-sync-helper: \(error)\n".utf8))
        exit(1)
    }
}
guard arguments.count == 6, arguments[1] == "work", let seed = UInt64(arguments[4]), let rounds = Int(arguments[5])
else {
    FileHandle.standardError.write(
        Data("usage: es-sync-helper work STORE CONNECTION SEED ROUNDS | sync STORE CONNECTION\n".utf8))
    exit(2)
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("es-sync-helper: \(message)\n".utf8))
    exit(1)
}

do {
    let store = try PersistentStore.open(path: arguments[2], schema: Fixtures.syncSchema())
    let engine = try SyncEngine(store: store, configuration: .init(connection: arguments[3], batchSize: 50))
    var random = SeededGenerator(seed: seed)
    let tagNames = ["urgent", "later", "home", "work", "errand", "idea"]
    var offline = 0
    let stop = StopRequest()
    var round = 0
    while round < rounds || !stop.isRequested {
        defer { round += 1 }
        let context = ObjectContext(store: store)
        let tasks = try context.fetch(FetchRequest(entity: "Task"))
        let projects = try context.fetch(FetchRequest(entity: "Project"))
        let tags = try context.fetch(FetchRequest(entity: "Tag"))
        switch Int.random(in: 0..<10, using: &random) {
        case 0:
            let project = try context.insert("Project")
            try project.setValue(.string("project \(seed)-\(round)"), forKey: "name")
        case 1:
            let name = tagNames.randomElement(using: &random)!
            if try !tags.contains(where: { try $0.value(forKey: "name") == .string(name) }) {
                let tag = try context.insert("Tag")
                try tag.setValue(.string(name), forKey: "name")
            }
        case 2, 3:
            let task = try context.insert("Task")
            try task.setValue(.string("task \(seed)-\(round)"), forKey: "title")
            try task.setValue(.int(Int64.random(in: 0..<5, using: &random)), forKey: "priority")
            if let project = projects.randomElement(using: &random) { try task.setObject(project, forKey: "project") }
        case 4, 5:
            if let task = tasks.randomElement(using: &random) {
                try task.setValue(.string("renamed by \(seed) in \(round)"), forKey: "title")
                try task.setValue(.bool(Bool.random(using: &random)), forKey: "done")
            }
        case 6:
            if let task = tasks.randomElement(using: &random) {
                try task.setValue(.int(Int64.random(in: 0..<5, using: &random)), forKey: "priority")
                try task.setObject(projects.randomElement(using: &random), forKey: "project")
            }
        case 7:
            if let task = tasks.randomElement(using: &random), let tag = tags.randomElement(using: &random) {
                if try task.objectIDs(forKey: "tags").contains(tag.objectID) {
                    try task.remove(tag, fromKey: "tags")
                } else {
                    try task.add(tag, toKey: "tags")
                }
            }
        case 8:
            if let task = tasks.randomElement(using: &random) { try context.delete(task) }
        default:
            if Int.random(in: 0..<3, using: &random) == 0, let project = projects.randomElement(using: &random) {
                try context.delete(project)
            }
        }
        if context.hasChanges { try context.save() }
        do {
            try engine.syncNow()
            print("round \(round) online")
        } catch let error as SyncError where error.code == .serverUnavailable {
            offline += 1
            print("round \(round) offline")
        }
        fflush(nil)
        usleep(UInt32.random(in: 5_000..<25_000, using: &random))
    }
    print("done offline=\(offline)")
} catch {
    fail("\(error)")
}
