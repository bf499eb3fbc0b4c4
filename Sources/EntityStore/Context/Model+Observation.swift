import LMDB
import Observation

/// Typed models take part in Swift's Observation: reading a property inside `withObservationTracking` (or a UI
/// framework's equivalent) tracks it, and a change of it fires, whether it came from a setter, a merge of another
/// context's save, a refresh, a rollback or an undo.
extension Model: Observable {}

/// Per model class and key: how to announce a change of that key to a model's observers (made on the first read of
/// the key, which is when an observer can have started tracking it).
enum ModelNotifiers {
    static let table = Locked<[ObjectIdentifier: [String: (Model) -> Void]]>([:])

    static func register(_ type: Model.Type, key: String, _ notify: @escaping (Model) -> Void) {
        let id = ObjectIdentifier(type)
        table.withLock { table in
            if table[id]?[key] == nil { table[id, default: [:]][key] = notify }
        }
    }

    /// Tells `model`'s observers that `keys` changed (nil: every key).
    static func announce(_ model: Model, keys: [String]?) {
        let notifiers = table.withLock { $0[ObjectIdentifier(type(of: model))] ?? [:] }
        for (key, notify) in notifiers where keys?.contains(key) ?? true { notify(model) }
    }
}

enum ModelObservation {
    /// Records that `owner`'s `keyPath` (the property of `key`) was read, for Observation.
    static func access<Owner: Model, T>(_ owner: Owner, _ keyPath: KeyPath<Owner, T>, key: String) {
        owner.observationRegistrar.access(owner, keyPath: keyPath)
        ModelNotifiers.register(Owner.self, key: key) { model in
            guard let owner = model as? Owner else { return }
            owner.observationRegistrar.withMutation(of: owner, keyPath: keyPath) {}
        }
    }

    /// Runs a write of `owner`'s `keyPath` as an observed mutation.
    static func mutation<Owner: Model, T>(_ owner: Owner, _ keyPath: KeyPath<Owner, T>, _ body: () -> Void) {
        owner.observationRegistrar.withMutation(of: owner, keyPath: keyPath, body)
    }
}

extension ManagedObject {
    /// Tells the model wrapping this object (if one is alive) that `keys` changed without its setters (a merge, a
    /// refresh, a rollback, an undo); `nil` for every key.
    func announceChange(of keys: [String]?) {
        guard let model else { return }
        ModelNotifiers.announce(model, keys: keys)
    }
}
