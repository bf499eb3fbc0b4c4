import EntityStore
import Foundation
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A generic model class: Swift makes its key paths anew at each access.
final class Labelled<Content>: Model {
    override class var entityName: String { "Labelled" }
    @Stored var label: String
    @ToOne var owner: Owner?
}

final class Owner: Model {
    @Stored var name: String
    @ToMany var items: [Labelled<Int>]
}

/// The process's resident memory, in bytes (`/proc/self/statm`).
func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return fields.count > 1 ? (Int(fields[1]) ?? 0) * Int(getpagesize()) : 0
}

/// key-path-memory DIRECTORY N: builds N key paths at run time (each a new object, as `appending` makes) and uses each
/// in a typed predicate, then reads a generic model's property N times; prints the resident memory before and after
/// as `resident BEFORE AFTER` (bytes).
func keyPathMemory(directory: String, count: Int) throws {
    let schema = try Schema(version: 1, models: [Labelled<Int>.self, Owner.self])
    let store = try PersistentStore.open(path: directory + "/labels.store", schema: schema)
    let context = ObjectContext(store: store)
    let item = try context.insert(Labelled<Int>.self)
    item.label = "first"
    item.owner = try context.insert(Owner.self)
    item.owner?.name = "someone"
    try context.save()
    // Warm up: the first of each shape costs what it costs once.
    for _ in 0..<100 {
        let path = (\Labelled<Int>.owner).appending(path: \Owner?.?.name)
        _ = try context.count(Labelled<Int>.self, where: path == "someone")
        _ = item.label
    }
    let before = residentBytes()
    var checksum = 0
    for _ in 0..<count {
        let path = (\Labelled<Int>.owner).appending(path: \Owner?.?.name)
        checksum &+= try context.count(Labelled<Int>.self, where: path == "someone")
        checksum &+= item.label.utf8.count
    }
    let after = residentBytes()
    guard checksum == count * 6 else { throw HelperFailure("the reads answered wrongly (checksum \(checksum))") }
    print("resident \(before) \(after)")
}
