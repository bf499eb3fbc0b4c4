import EntityStore
import Foundation

/// `store-demo add|move|delete ...`: a write from another process, seen live by the running demo.
func runWriter(_ command: String, _ arguments: [String], storePath: String) throws {
    let store = try DemoModel.open(storePath)
    let context = ObjectContext(store: store, name: "store-demo \(command)")
    switch (command, arguments.count) {
    case ("add", 2...3):
        try DemoModel.insert(
            arguments[0], group: arguments[1], rank: Int(arguments.count > 2 ? arguments[2] : "0") ?? 0, in: context)
    case ("move", 2):
        guard let item = try DemoModel.item(arguments[0], in: context) else {
            throw DemoError("no item '\(arguments[0])'")
        }
        item.group = arguments[1]
    case ("delete", 1):
        guard let item = try DemoModel.item(arguments[0], in: context) else {
            throw DemoError("no item '\(arguments[0])'")
        }
        try context.delete(item)
    default:
        throw DemoError("usage: store-demo add TITLE GROUP [RANK] | move TITLE GROUP | delete TITLE [--store PATH]")
    }
    try context.save()
    print("saved transaction \(try store.lastTransaction())")
}

struct DemoError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
