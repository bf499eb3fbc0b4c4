import Foundation

/// A to-one relationship of a ``Model`` subclass, read and written as a model.
///
/// <!-- snippet
/// final class Book: Model {
/// <snippet>
/// }
/// final class Author: Model {
///     @ToMany var books: [Book]
/// }
/// final class Shelf: Model {
///     @ToMany var books: [Book]
/// }
/// -->
/// ```swift
/// @ToOne(inverse: "books") var author: Author?     // the inverse is found when there is only one candidate
/// @ToOne(deleteRule: .deny, required: true) var shelf: Shelf?
/// ```
/// Setting it keeps the inverse consistent in the same context. The key is the property's name unless given.
@propertyWrapper
public struct ToOne<Destination: Model>: ModelProperty {
    /// The key given explicitly, if any; the property's name otherwise.
    public let explicitKey: String?
    /// The inverse relationship's key on the destination; `nil` to find the only candidate.
    public let inverse: String?
    /// What deleting the object does to the destination.
    public let deleteRule: DeleteRule
    /// Whether a save refuses the object without a destination.
    public let isRequired: Bool

    /// A to-one relationship.
    ///
    /// - Parameters:
    ///   - key: The key, when it is not the property's name.
    ///   - inverse: The inverse's key on the destination (found by itself when only one relationship of the
    ///     destination points back).
    ///   - deleteRule: What deleting the object does to the destination (`.nullify` by default).
    ///   - required: Whether a save refuses the object without a destination.
    public init(_ key: String? = nil, inverse: String? = nil, deleteRule: DeleteRule = .nullify, required: Bool = false)
    {
        explicitKey = key
        self.inverse = inverse
        self.deleteRule = deleteRule
        isRequired = required
    }

    /// A to-one relationship keyed by the property's name, its inverse found by the schema.
    public init() {
        self.init(nil)
    }

    @available(*, unavailable, message: "@ToOne is only available on Model subclasses")
    public var wrappedValue: Destination? {
        get { fatalError("unreachable: @ToOne outside a Model") }
        set { fatalError("unreachable: @ToOne outside a Model") }
    }

    public static subscript<Owner: Model>(
        _enclosingInstance owner: Owner, wrapped wrappedKeyPath: ReferenceWritableKeyPath<Owner, Destination?>,
        storage storageKeyPath: ReferenceWritableKeyPath<Owner, ToOne<Destination>>
    ) -> Destination? {
        get {
            let key = ModelKeys.key(of: owner, storageKeyPath)
            if let recorder = owner.managedObject.recorder {
                let destination = Destination.recordingInstance(recorder)
                recorder.readRelationship(key, on: owner.managedObject, giving: destination.managedObject)
                return destination
            }
            ModelObservation.access(owner, storageKeyPath)
            do {
                guard let context = owner.context, let target = try owner.managedObject.object(forKey: key) else {
                    return nil
                }
                return try context.model(Destination.self, for: target)
            } catch {
                owner.report(error, "reading", key: key, write: false)
                return nil
            }
        }
        set {
            let key = ModelKeys.key(of: owner, storageKeyPath)
            ModelObservation.mutation(owner, storageKeyPath) {
                do {
                    try owner.managedObject.setObject(newValue?.managedObject, forKey: key)
                } catch {
                    owner.report(error, "setting", key: key, write: true)
                }
            }
        }
    }

    @usableFromInline
    func declaration(key: String) -> Property {
        .relationship(
            Relationship(
                key, to: Destination.entityName, inverse: inverse ?? "", deleteRule: deleteRule,
                optional: !isRequired))
    }

    @usableFromInline
    func mismatches(key: String, in entity: Entity, model: String) -> [EntityStoreError.Failure] {
        relationshipMismatches(
            key: key, in: entity, model: model, destination: Destination.entityName, toMany: false)
    }
}

/// The ways a typed relationship does not match `entity`'s declaration of `key`.
func relationshipMismatches(
    key: String, in entity: Entity, model: String, destination: String, toMany: Bool
) -> [EntityStoreError.Failure] {
    guard let relationship = entity.relationship(key) else {
        let hint = entity.attribute(key) != nil ? " as a relationship (it is an attribute)" : ""
        return [
            .init(
                entity: entity.name, key: key,
                message: "\(model) maps '\(key)', which \(entity.name) does not have\(hint)")
        ]
    }
    var failures: [EntityStoreError.Failure] = []
    if relationship.destination != destination {
        failures.append(
            .init(
                entity: entity.name, key: key,
                message: "\(model) maps '\(key)' to \(destination); it leads to \(relationship.destination)"))
    }
    if relationship.isToMany != toMany {
        failures.append(
            .init(
                entity: entity.name, key: key,
                message: "\(model) maps '\(key)' as to-\(toMany ? "many" : "one"); it is"
                    + " to-\(relationship.isToMany ? "many" : "one")"))
    }
    return failures
}
