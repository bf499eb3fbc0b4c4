import EntityStore

/// A store's history replayed from its first entry and held against what the store holds: every save numbered once
/// with no gap, no object inserted twice and none updated or deleted while it is not there, exactly the objects
/// the store holds at the end, and the last value the history recorded of each attribute stored now.
///
/// The history keeps no values for an insert (they are its record's) nor for a batch update, but every other change
/// names its new values: the last change that recorded one holds the value stored now.
public struct HistoryReplay {
    /// What does not add up, each naming its transaction and object, followed by every change the history holds of
    /// the objects named (empty when all is well).
    public private(set) var problems: [String] = []
    /// How many stored values were held against the history.
    public private(set) var compared = 0
    /// The objects the store holds.
    public private(set) var objects = 0
    /// The store's last transaction.
    public let transactions: UInt64

    public init(_ store: PersistentStore) throws {
        let history = try store.history()
        transactions = try store.lastTransaction()
        let numbers = history.map { $0.transaction ?? 0 }
        if numbers != (transactions == 0 ? [] : Array(1...transactions)) {
            problems.append("the history numbers \(numbers.count) entries, not 1...\(transactions) once each")
        }
        var replayed: [ObjectID: [String: Value?]] = [:]
        var named = Set<ObjectID>()
        func problem(_ transaction: UInt64?, _ id: ObjectID, _ what: String) {
            problems.append("\(transaction.map(String.init) ?? "-"): \(what) \(id)")
            named.insert(id)
        }
        for record in history {
            for change in record.changes {
                let id = change.objectID
                switch change.kind {
                case .insert:
                    if replayed[id] != nil { problem(record.transaction, id, "inserts again") }
                    replayed[id] = Dictionary(uniqueKeysWithValues: change.changedKeys.map { ($0, nil) })
                case .update:
                    guard replayed[id] != nil else {
                        problem(record.transaction, id, "updates an object that is not there:")
                        continue
                    }
                    for key in change.changedKeys { replayed[id]![key] = .some(change.newValues[key]) }
                case .delete:
                    if replayed.removeValue(forKey: id) == nil {
                        problem(record.transaction, id, "deletes an object that is not there:")
                    }
                }
            }
        }
        let context = ObjectContext(store: store, name: "history replay")
        var stored: [ObjectID: ManagedObject] = [:]
        for entity in store.schema.entities {
            for object in try context.fetch(FetchRequest(entity: entity.name)) { stored[object.objectID] = object }
        }
        objects = stored.count
        for id in Set(stored.keys).subtracting(replayed.keys) { problem(nil, id, "the store holds, unreplayed,") }
        for id in Set(replayed.keys).subtracting(stored.keys) { problem(nil, id, "the store lacks, replayed,") }
        for (id, object) in stored {
            for (name, recorded) in replayed[id] ?? [:] {
                guard let value = recorded else { continue }
                compared += 1
                let now = try object[name]
                if now != value { problem(nil, id, "\(name): stored \(now), last recorded \(value), of") }
            }
        }
        problems.sort()
        for record in history where !named.isEmpty {
            for change in record.changes where named.contains(change.objectID) {
                problems.append(
                    "history of \(change.objectID): \(record.transaction ?? 0) \(record.author ?? "-"): \(change)")
            }
        }
    }
}
