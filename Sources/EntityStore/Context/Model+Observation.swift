import LMDB
import Observation

/// Typed models take part in Swift's Observation: reading a property inside `withObservationTracking` (or a UI
/// framework's equivalent) tracks it, and a change of it fires, whether it came from a setter, a merge of another
/// context's save, a refresh, a rollback or an undo.
///
/// A setter announces its own property. A change made any other way is announced as a change of the model as a
/// whole (every read of one of its properties also tracks ``Model/changeToken``): observers of a model hear of
/// every external change to it, a little more often than strictly needed, and never less.
extension Model: Observable {}

@usableFromInline
enum ModelObservation {
    /// Records that `owner`'s `keyPath` was read, for Observation.
    @inlinable
    static func access<Owner: Model, T>(_ owner: Owner, _ keyPath: KeyPath<Owner, T>) {
        let box = owner.observationRegistrar
        box.registrar.access(owner, keyPath: keyPath)
        box.registrar.access(owner as Model, keyPath: Model.changeTokenPath)
    }

    /// Runs a write of `owner`'s `keyPath` as an observed mutation.
    @inlinable
    static func mutation<Owner: Model, T>(_ owner: Owner, _ keyPath: KeyPath<Owner, T>, _ body: () -> Void) {
        guard let box = owner.registrarIfAny else { return body() }
        box.registrar.withMutation(of: owner, keyPath: keyPath, body)
    }
}

/// Registrars of released models, for the next models of the context to read (see `Model.deinit`). Touched only
/// from the context's isolation, like its models.
final class RegistrarPool {
    @exclusivity(unchecked) private var registrars: [RegistrarBox] = []

    func take() -> RegistrarBox? { registrars.popLast() }

    func put(_ registrar: RegistrarBox) {
        if registrars.count < 256 { registrars.append(registrar) }
    }
}

/// A model's Observation registrar, boxed: one reference to pass around and to reuse (see `Model.deinit`).
@usableFromInline
final class RegistrarBox {
    @usableFromInline let registrar = ObservationRegistrar()
    @usableFromInline init() {}
}

extension Model {
    /// Stands for "some stored property of this model": changes made without the model's setters are announced
    /// on it.
    @usableFromInline var changeToken: Int { 0 }
    /// The key path of ``changeToken``, made once.
    @usableFromInline static let changeTokenPath = \Model.changeToken

    /// Tells the model's observers that it changed without its setters.
    func announceExternalChange() {
        registrarIfAny?.registrar.withMutation(of: self as Model, keyPath: \Model.changeToken) {}
    }
}

extension ManagedObject {
    /// Tells the model wrapping this object (if one is alive) that it changed without the model's setters (a
    /// merge, a refresh, a rollback, an undo, the dynamic API).
    func announceChange() {
        model?.announceExternalChange()
    }
}
