import Foundation
import LMDB
import Observation

/// A typed model class over a ``ManagedObject``: the API apps use first.
///
/// <!-- snippet
/// final class Author: Model {
///     @Stored var name: String
///     @ToMany var books: [Book]
/// }
/// final class Tag: Model {
///     @Stored var name: String
///     @ToMany var books: [Book]
/// }
/// -->
/// ```swift
/// final class Book: Model {
///     @Stored var title: String
///     @Stored(.indexed) var pages: Int = 0
///     @ToOne(inverse: "books") var author: Author?
///     @ToMany var tags: [Tag]
/// }
/// let schema = try Schema(version: 1, models: [Author.self, Book.self, Tag.self])
/// let context = ObjectContext(store: try PersistentStore.open(path: "library.store", schema: schema))
/// let dune = try context.insert(Book.self)
/// dune.title = "Dune"
/// let long = try context.fetch(Book.self, where: \Book.pages > 300, sortedBy: [SortKey(\Book.title)])
/// ```
///
/// Keys come from the property names (or the key given to the wrapper); a property's initial value is the
/// attribute's default, unless it is made anew for each instance (`@Stored var id = UUID()`, `= Date()`): then each
/// object gets its own, as in SwiftData. A UUID or a date becomes a ``GeneratedDefault`` (made for each object
/// however it is inserted, and for each object a migration adds the attribute to); another type's value is set by
/// each typed insert, and the attribute has no default. The class is checked against the
/// store's schema the first time it is used with a store, so a typo fails at once with a clear error rather than on
/// some later access.
///
/// Property accessors cannot throw: when the object's record cannot be read (it was deleted elsewhere) a getter
/// returns the type's fallback and ``lastError`` says why; a setter that cannot write (a deleted object,
/// `Decimal.nan`) writes nothing, sets ``lastError``, and makes the context's next ``ObjectContext/save()`` throw
/// that error, so a lost write cannot go unnoticed. The dynamic API (``ManagedObject/value(forKey:)``) throws
/// instead.
open class Model {
    // @exclusivity(unchecked) on the mutable state below: a model is touched only from its context's isolation domain, one access at a time
    // (the compiler keeps a context in one isolation domain; a debug build checks its entry points), so no two
    // accesses overlap; the run-time checks cost more than the work of a typed read or write itself.
    /// The managed object the model wraps.
    public let managedObject: ManagedObject
    /// The last error of a property accessor (which cannot throw).
    public internal(set) var lastError: EntityStoreError? {
        get { failure?.error }
        set { failure = newValue.map(FailureBox.init) }
    }
    /// ``lastError``, boxed: a model that never fails (nearly all) carries one empty reference, not an error.
    @exclusivity(unchecked) private var failure: FailureBox?
    private final class FailureBox {
        let error: EntityStoreError
        init(_ error: EntityStoreError) { self.error = error }
    }
    /// Who observes the model's properties (Swift's Observation), made by the first read: before any read nothing
    /// can be observing the model, so writes need not announce anything (and a model only written costs nothing).
    ///
    /// Held as an owned (+1) reference that the model manages itself, as is ``registrarPool``: a typed read then
    /// retains and releases nothing to reach it, and the deinit hands it to the pool as it is (a model is made and
    /// released by every typed lookup, where each retain and release is an atomic operation).
    @usableFromInline @exclusivity(unchecked) var registrarIfAny: Unmanaged<RegistrarBox>?
    @inlinable var observationRegistrar: Unmanaged<RegistrarBox> {
        if let registrarIfAny { return registrarIfAny }
        return makeRegistrar()
    }

    /// Where registrars are taken from and returned to: the context's pool, taken with the first registrar (owned
    /// by the model, so that the deinit does not go through the object's context). A model never read takes
    /// neither: a typed fetch whose models are counted or passed on makes no pool and retains none per model.
    @exclusivity(unchecked) var registrarPool: Unmanaged<RegistrarPool>?

    @usableFromInline
    func makeRegistrar() -> Unmanaged<RegistrarBox> {
        if registrarPool == nil, let context = managedObject.context {
            registrarPool = .passRetained(context.registrarPool)
        }
        let registrar =
            registrarPool?._withUnsafeGuaranteedRef { $0.take() } ?? Unmanaged.passRetained(RegistrarBox())
        registrarIfAny = registrar
        return registrar
    }

    /// Wraps a managed object (of the model's entity).
    ///
    /// Every live model of an object is told of each change made without its own setters (a merge, an undo, the
    /// dynamic API, another model's setter), however many the app holds and of whatever classes.
    public required init(managedObject: ManagedObject) {
        self.managedObject = managedObject
        managedObject.adopt(self)
    }

    deinit {
        managedObject.release(self)
        // Registrars are reused within a context: making and destroying one costs more than the rest of a typed
        // read. An observer of this (now gone) model that is still waiting may hear one change of the next
        // model's property of the same name: more often than needed, never less.
        if let registrar = registrarIfAny {
            if let registrarPool {
                registrarPool._withUnsafeGuaranteedRef { $0.put(registrar) }
            } else {
                registrar.release()
            }
        }
        registrarPool?.release()
    }

    /// The entity the class maps to; the class's name by default.
    open class var entityName: String { String(describing: self) }

    /// Whether the class's entity is abstract (only its subclasses' entities have objects); false by default.
    ///
    /// Subclasses inherit the override: in a schema made from models, a subclass that no other model class
    /// subclasses is concrete all the same (an abstract entity without sub-entities could hold nothing), and an
    /// intermediate class that should be concrete overrides it back to `false`.
    ///
    /// A model class that subclasses another model class of the same schema is its sub-entity:
    ///
    /// ```swift
    /// class Animal: Model {
    ///     override class var isAbstractEntity: Bool { true }
    ///     @Stored var name: String
    /// }
    /// final class Dog: Animal {
    ///     @Stored var breed: String?
    /// }
    /// let schema = try Schema(version: 1, models: [Animal.self, Dog.self])
    /// let context = ObjectContext(store: try PersistentStore.open(path: "pets.store", schema: schema))
    /// let animals = try context.fetch(Animal.self)  // Dogs among them, as Dog instances
    /// ```
    open class var isAbstractEntity: Bool { false }

    /// The model class this one subclasses, if it is not `Model` itself.
    static var superclassModel: Model.Type? {
        guard let superclass = Mirror(reflecting: recordingInstance(KeyRecorder())).superclassMirror?.subjectType,
            superclass != Model.self
        else { return nil }
        return superclass as? Model.Type
    }

    /// The object's ID.
    public var objectID: ObjectID { managedObject.objectID }

    /// The context the object is registered in.
    public var context: ObjectContext? { managedObject.context }

    /// Whether this instance records the keys read through it (for key paths and schemas), instead of reading.
    var isRecording: Bool { managedObject.recorder != nil }

    /// An instance that records the keys read through it instead of reading them.
    static func recordingInstance(_ recorder: KeyRecorder) -> Self {
        Self(managedObject: ManagedObject(recordingFor: entityName, recorder: recorder))
    }

    /// Keeps a failure of an accessor that cannot throw: in ``lastError``, and for a write, for the next save.
    @usableFromInline
    func report(_ error: any Error, _ what: String, key: String, write: Bool) {
        var failure: EntityStoreError
        if let known = error as? EntityStoreError {
            failure = known
            if failure.key == nil {
                // Name the property the app touched (the error named the object alone).
                failure.key = key
                failure.message = "\(what) \(key): \(failure.message)"
            }
        } else {
            failure = EntityStoreError.wrapping(error, "\(what) \(objectID).\(key)")
            failure.key = key
        }
        lastError = failure
        if write { managedObject.context?.accessorFailures.append(failure) }
    }
}

/// ``Model/checkedProperties()`` by class.
private let propertyCache = Locked<[ObjectIdentifier: [(key: String, property: any ModelProperty)]]>([:])
/// ``Model/perObjectInitialValues()`` by class.
private let perObjectCache = Locked<[ObjectIdentifier: [(key: String, index: Int)]]>([:])

/// A typed property whose initial value is kept while a schema is made (`@Stored`).
protocol InitialValueProperty {
    /// Where the wrapper's initial value was kept (see `DefaultCapture`); 0 for none.
    var initialValuePosition: UInt32 { get }
}

extension Stored: InitialValueProperty {}

/// The typed properties of a model: what `Mirror` finds in a model's storage.
@usableFromInline
protocol ModelProperty {
    /// The key given to the wrapper, if any (else the property's name).
    var explicitKey: String? { get }
    /// The schema declaration of the property named `key`.
    func declaration(key: String) -> Property
    /// The ways the property does not match `entity`'s declaration of `key`.
    func mismatches(key: String, in entity: Entity, model: String) -> [EntityStoreError.Failure]
}

extension Model {
    /// The typed properties of the class: each with its key (from the property's name unless given).
    static func modelProperties() -> [(key: String, property: any ModelProperty)] {
        let instance = recordingInstance(KeyRecorder())
        var result: [(String, any ModelProperty)] = []
        var mirror: Mirror? = Mirror(reflecting: instance)
        var levels: [[(String, any ModelProperty)]] = []
        while let current = mirror {
            var level: [(String, any ModelProperty)] = []
            for child in current.children {
                guard let property = child.value as? any ModelProperty else { continue }
                let label = child.label.map { $0.hasPrefix("_") ? String($0.dropFirst()) : $0 } ?? ""
                level.append((property.explicitKey ?? label, property))
            }
            levels.append(level)
            mirror = current.superclassMirror
        }
        // Superclasses' properties first: the order of declaration.
        for level in levels.reversed() { result += level }
        return result
    }

    /// The attributes whose initial value is made anew for each instance (`@Stored var id = UUID()`,
    /// `@Stored var created = Date()`): each with its value's place among the initial values an instance's wrappers
    /// keep. Found once per class and process, by making two instances and comparing their initial values.
    ///
    /// Such a value is no schema default (the schema would differ at every launch, and every object would share one
    /// UUID): a typed insert sets each object's own, as SwiftData does.
    static func perObjectInitialValues() -> [(key: String, index: Int)] {
        let id = ObjectIdentifier(self)
        if let found = perObjectCache.withLock({ $0[id] }) { return found }
        func instance() -> (properties: [(key: String, property: any ModelProperty)], values: [Value], before: Int) {
            var properties: [(key: String, property: any ModelProperty)] = []
            let (values, before) = DefaultCapture.values { properties = modelProperties() }
            return (properties, values, before)
        }
        let (first, second) = (instance(), instance())
        var found: [(key: String, index: Int)] = []
        for (a, b) in zip(first.properties, second.properties) {
            guard let x = a.property as? any InitialValueProperty, let y = b.property as? any InitialValueProperty,
                x.initialValuePosition != 0, y.initialValuePosition != 0,
                case .attribute(let attribute) = a.property.declaration(key: a.key), attribute.derivation == nil
            else { continue }
            let i = Int(x.initialValuePosition) - 1 - first.before
            let j = Int(y.initialValuePosition) - 1 - second.before
            guard first.values.indices.contains(i), second.values.indices.contains(j) else { continue }
            if ValueSemantics.uniquenessKey(first.values[i], caseInsensitive: false)
                != ValueSemantics.uniquenessKey(second.values[j], caseInsensitive: false)
            {
                found.append((a.key, i))
            }
        }
        perObjectCache.withLock { $0[id] = found }
        return found
    }

    /// The class's typed properties for checks, found once per class and process: `Mirror` over a recording
    /// instance costs more than a thousand typed lookups, and a class is checked against every store it is used
    /// with. (Not for schemas: those read the wrappers' initial values, kept only while a schema is made.)
    static func checkedProperties() -> [(key: String, property: any ModelProperty)] {
        let id = ObjectIdentifier(self)
        if let properties = propertyCache.withLock({ $0[id] }) { return properties }
        let properties = modelProperties()
        propertyCache.withLock { $0[id] = properties }
        return properties
    }

    /// Checks the class's typed properties against `entity`.
    static func check(against entity: Entity) throws {
        var failures: [EntityStoreError.Failure] = []
        let model = String(describing: self)
        for (key, property) in checkedProperties() {
            failures += property.mismatches(key: key, in: entity, model: model)
        }
        guard !failures.isEmpty else { return }
        let unknown = failures.allSatisfy { $0.message.contains("which \(entity.name) does not have") }
        throw EntityStoreError(
            unknown ? .unknownKey : .typeMismatch,
            failures.count == 1 ? failures[0].message : "\(self) does not match \(entity.name)",
            entity: entity.name, key: failures[0].key, failures: failures)
    }
}

extension ObjectContext {
    /// Inserts a new object of a model class's entity and wraps it.
    ///
    /// - Throws: When the class's properties do not match the schema, or the entity is unknown; nothing is
    ///   inserted then.
    public func insert<M: Model>(_ type: M.Type) throws -> M {
        try wrapInserted(try insert(try checkModel(type)), as: type)
    }

    /// Wraps an object just inserted, giving it the class's initial values made anew for each instance that the store
    /// does not generate (`= Int.random(in:)`; a UUID or a date is a generated default) where it holds nil (no other
    /// value was given).
    func wrapInserted<M: Model>(_ object: ManagedObject, as type: M.Type) throws -> M {
        if lastInsertedModel != ObjectIdentifier(type) {
            // A UUID or a date the store generates is made by the insert already; the rest are taken from the
            // model's initializer.
            lastInsertedPerObject = type.perObjectInitialValues().filter {
                object.entity.attribute($0.key)?.generatedDefault == nil
            }
            lastInsertedModel = ObjectIdentifier(type)
        }
        // Read in place: most classes have none, and a typed insert in a loop takes no copy of the list.
        if lastInsertedPerObject.isEmpty { return wrap(object, as: type) }
        let own = lastInsertedPerObject
        var model: M?
        let (values, _) = DefaultCapture.values { model = wrap(object, as: type) }
        for (key, index) in own where values.indices.contains(index) {
            if try object.value(forKey: key).isNull { try object.setValue(values[index], forKey: key) }
        }
        return model!
    }

    /// The object for `id`, loaded and wrapped in a model class.
    public func existingObject<M: Model>(_ type: M.Type, with id: ObjectID) throws -> M {
        // The common case, an ID of the class's own entity looked up again, compares in place.
        if ObjectIdentifier(type) != lastCheckedModel || id.entityName != lastCheckedEntityName {
            let entityName = try checkModel(type)
            guard id.entityName == entityName || store.schema.isKind(id.entityName, of: entityName) else {
                throw EntityStoreError(
                    .typeMismatch, "\(id) is not a \(entityName)", entity: id.entityName, objectID: id)
            }
        }
        return wrap(try existingObject(with: id), as: type)
    }

    /// Marks a model's object deleted (see ``delete(_:)-(ManagedObject)``).
    public func delete(_ model: Model) throws { try delete(model.managedObject) }

    /// Wraps a managed object of the model's entity (the same model instance while one is alive).
    public func model<M: Model>(_ type: M.Type, for object: ManagedObject) throws -> M {
        let entityName = try checkModel(type)
        guard object.entity.name == entityName || store.schema.isKind(object.entity.name, of: entityName) else {
            throw EntityStoreError(
                .typeMismatch, "\(object.objectID) is not a \(entityName)", entity: object.entity.name,
                objectID: object.objectID)
        }
        return wrap(object, as: type)
    }

    /// The model instance of `object`: the one already made, if it is still alive. An object of a sub-entity is
    /// wrapped in its own entity's class when the store knows one that subclasses `M` (from the schema's models,
    /// or one used with the store before).
    func wrap<M: Model>(_ object: ManagedObject, as type: M.Type) -> M {
        if let model = object.model as? M { return model }
        for other in object.otherModels {
            if let model = other.takeUnretainedValue() as? M { return model }
        }
        var modelClass = type
        if object.entity.superentity != nil,
            let own = store.modelClasses.withLock({ $0[object.entity.name] }) as? M.Type
        {
            modelClass = own
        }
        // (The model registers itself with the object.)
        return modelClass.init(managedObject: object)
    }

    /// Wraps managed objects of the model's entity, in order (see ``wrap(_:as:)``). A loop over the concrete array
    /// rather than `map`, which a generic caller runs unspecialized, through the collection's witnesses per element.
    func wrapAll<M: Model>(_ objects: [ManagedObject], as type: M.Type) -> [M] {
        [M](unsafeUninitializedCapacity: objects.count) { buffer, count in
            for index in objects.indices {
                (buffer.baseAddress! + index).initialize(to: wrap(objects[index], as: type))
            }
            count = objects.count
        }
    }

    /// Checks a model class against the store's schema, once per store, and gives its entity's name.
    ///
    /// The context remembers the last class it checked, and the others in a table once it has used two, so that a
    /// typed access in a context of one model class takes no lock and fills no table (a context made for one typed
    /// fetch checks once); the entity's name comes from the process-wide cache of ``ModelKeys/entityName(of:)``
    /// (`entityName` describes the class by default, which costs more than the rest of a typed lookup).
    @discardableResult
    func checkModel<M: Model>(_ type: M.Type) throws -> String {
        let id = ObjectIdentifier(type)
        if id == lastCheckedModel { return lastCheckedEntityName }
        if let entityName = checkedModels[id] {
            lastCheckedModel = id
            lastCheckedEntityName = entityName
            return entityName
        }
        let entityName = ModelKeys.entityName(of: type)
        if !store.checkedModels.withLock({ $0.contains(id) }) {
            try type.check(against: try store.storage(for: entityName).entity)
            store.checkedModels.withLock { _ = $0.insert(id) }
            store.modelClasses.withLock { if $0[entityName] == nil { $0[entityName] = type } }
        }
        if let previous = lastCheckedModel {
            checkedModels[previous] = lastCheckedEntityName
            checkedModels[id] = entityName
        }
        lastCheckedModel = id
        lastCheckedEntityName = entityName
        return entityName
    }
}
