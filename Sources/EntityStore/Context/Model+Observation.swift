import LMDB
import Observation

/// Typed models take part in Swift's Observation: reading a property inside `withObservationTracking` (or a UI
/// framework's equivalent) tracks it, and a change of it fires, whether it came from a setter, a merge of another
/// context's save, a refresh, a rollback or an undo.
///
/// A setter announces its own property. A change made any other way is announced as a change of every typed
/// property of the model: observers of a model hear of every external change to it, a little more often than
/// strictly needed, and never less. (A read records its own property alone: one access per read.)
///
/// Observation knows a property by its wrapper's storage key path (`\Book._title`): the one key path a typed
/// access needs anyway (to find the property's slot), so that a read makes no other key path.
extension Model: Observable {}

@usableFromInline
enum ModelObservation {
    /// Records that `owner`'s `keyPath` was read, for Observation.
    @inlinable
    static func access<Owner: Model, T>(_ owner: Owner, _ keyPath: KeyPath<Owner, T>) {
        owner.observationRegistrar._withUnsafeGuaranteedRef { $0.access(owner, keyPath) }
    }

    /// Runs a write of `owner`'s `keyPath` as an observed mutation.
    @inlinable
    static func mutation<Owner: Model, T>(_ owner: Owner, _ keyPath: KeyPath<Owner, T>, _ body: () -> Void) {
        if let box = owner.registrarIfAny {
            // The model (alive for the call) owns the registrar.
            box._withUnsafeGuaranteedRef { $0.registrar.withMutation(of: owner, keyPath: keyPath, body) }
        } else {
            body()
        }
        // Other models of the object (another class of its entity, another instance) hear it as an external change.
        if !owner.managedObject.otherModels.isEmpty { owner.managedObject.announceChange(madeBy: owner) }
    }
}

/// Registrars of released models, for the next models of the context to read (see `Model.deinit`): a list linked
/// through the registrars themselves, each held as an owned (+1) reference handed over from model to pool and back
/// without retaining. Touched only from the context's isolation, like its models.
final class RegistrarPool {
    // @exclusivity(unchecked) on the mutable state below: the pool is touched only from its context's isolation domain, one access at a time
    // (the compiler keeps a context in one isolation domain; a debug build checks its entry points), so no two
    // accesses overlap; the run-time checks cost more than the work of a typed read or write itself.
    @exclusivity(unchecked) private var head: Unmanaged<RegistrarBox>?
    @exclusivity(unchecked) private var count = 0

    /// A registrar, owned by the caller.
    func take() -> Unmanaged<RegistrarBox>? {
        guard let first = head else { return nil }
        head = first._withUnsafeGuaranteedRef { box in
            defer { box.next = nil }
            return box.next
        }
        count -= 1
        return first
    }

    /// Takes over `registrar` (owned by the caller until now).
    func put(_ registrar: Unmanaged<RegistrarBox>) {
        guard count < 256 else { return registrar.release() }
        registrar._withUnsafeGuaranteedRef { $0.next = head }
        head = registrar
        count += 1
    }

    deinit {
        while let registrar = take() { registrar.release() }
    }
}

/// A model's Observation registrar, boxed: one reference to pass around and to reuse (see `Model.deinit`).
@usableFromInline
final class RegistrarBox {
    @usableFromInline let registrar = ObservationRegistrar()
    /// The next registrar of the pool this one waits in (owned by the pool).
    @exclusivity(unchecked) var next: Unmanaged<RegistrarBox>?
    @usableFromInline init() {}

    /// Records a read (a method, so that the registrar is used in place rather than copied out of the box).
    @inlinable
    func access<Owner: Model, T>(_ owner: Owner, _ keyPath: KeyPath<Owner, T>) {
        registrar.access(owner, keyPath: keyPath)
    }
}

extension Model {
    /// Tells the model's observers that it changed without its setters.
    func announceExternalChange() {
        guard let box = registrarIfAny else { return }
        box._withUnsafeGuaranteedRef { ModelKeys.announceExternalChange(of: self, $0.registrar) }
    }
}

extension ManagedObject {
    /// Tells the models wrapping this object (those alive) that it changed without their setters (a merge, a
    /// refresh, a rollback, an undo, the dynamic API).
    func announceChange() {
        model?.announceExternalChange()
        for other in otherModels { other.takeUnretainedValue().announceExternalChange() }
    }

    /// Tells the models of this object other than `setter` of a change `setter` made through its own setter.
    @usableFromInline
    func announceChange(madeBy setter: Model) {
        let mine = Unmanaged.passUnretained(setter).toOpaque()
        if let first = modelReference, first.toOpaque() != mine { first.takeUnretainedValue().announceExternalChange() }
        for other in otherModels where other.toOpaque() != mine { other.takeUnretainedValue().announceExternalChange() }
    }

    /// Registers a model made of this object (see ``Model/init(managedObject:)``).
    func adopt(_ model: Model) {
        if modelReference == nil {
            modelReference = Unmanaged.passUnretained(model)
        } else {
            otherModels.append(Unmanaged.passUnretained(model))
        }
    }

    /// Forgets a model going away (from its deinit).
    func release(_ model: Model) {
        let gone = Unmanaged.passUnretained(model).toOpaque()
        if modelReference?.toOpaque() == gone {
            modelReference = nil
        } else if let index = otherModels.firstIndex(where: { $0.toOpaque() == gone }) {
            otherModels.remove(at: index)
        }
    }
}
