import Foundation
import LMDB

/// What a save is about to do to an object, for custom validation rules.
public enum ValidationEvent: String, Sendable, Hashable {
    /// The object is new.
    case insert
    /// The object's values or relationships changed.
    case update
    /// The object is being deleted (by the app or a delete rule).
    case delete
}

/// A custom rule: throws to refuse what a save would store.
typealias ValidationRule = @Sendable (ManagedObject, ValidationEvent) throws -> Void

extension PersistentStore {
    /// Adds a custom validation rule for objects of `entityName`: Core Data's `validateForInsert`,
    /// `validateForUpdate` and `validateForDelete`.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// -->
    /// ```swift
    /// try store.addValidation(for: "Loan") { loan, event in
    ///     guard event != .delete else { return }
    ///     if case .date(let returned) = try loan["returned"], case .date(let lent) = try loan["lent"], returned < lent {
    ///         throw EntityStoreError(.validationFailed, "a loan cannot be returned before it is lent", key: "returned")
    ///     }
    /// }
    /// ```
    ///
    /// Every save of any context on this store runs the entity's rules for each object it inserts, updates or
    /// deletes (deletes made by delete rules included), after the attribute rules and required values, before
    /// anything is written. What a rule throws becomes a failure of the save's ``EntityStoreError/Code/validationFailed``
    /// error, listed with every other failure of the save (an ``EntityStoreError``'s own failures are kept; its
    /// entity and object are filled in when it names none); nothing is written. Rules run on the saving context's
    /// isolation and may read other objects; they must not change any.
    ///
    /// - Throws: ``EntityStoreError/Code/unknownEntity`` for an entity the schema does not have.
    public func addValidation(
        for entityName: String, _ rule: @escaping @Sendable (ManagedObject, ValidationEvent) throws -> Void
    ) throws {
        _ = try storage(for: entityName)
        validationRules.withLock { $0[entityName, default: []].append(rule) }
    }

    /// Adds a custom validation rule for a model class's objects, handed to the rule as models (see
    /// ``addValidation(for:_:)-(String,_)``).
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let context = ObjectContext(store: store)
    /// extension Book {
    ///     var isClassic: Bool { pages > 500 }
    /// }
    /// -->
    /// ```swift
    /// try store.addValidation(for: Book.self) { book, event in
    ///     if event == .delete && book.isClassic { throw EntityStoreError(.validationFailed, "classics stay") }
    /// }
    /// ```
    ///
    /// - Throws: ``EntityStoreError/Code/unknownEntity``; a mismatch of the class with the schema.
    public func addValidation<M: Model>(
        for type: M.Type, _ rule: @escaping @Sendable (M, ValidationEvent) throws -> Void
    ) throws {
        let entity = try storage(for: type.entityName).entity
        try type.check(against: entity)
        try addValidation(for: type.entityName) { object, event in
            guard let context = object.context else { return }
            try rule(try context.model(type, for: object), event)
        }
    }
}

extension ObjectContext {
    /// Runs the store's custom rules on every object the save will insert, update or delete.
    func runValidationRules(_ objects: [ManagedObject]) -> [EntityStoreError.Failure] {
        let rules = store.validationRules.withLock { $0 }
        guard !rules.isEmpty else { return [] }
        var failures: [EntityStoreError.Failure] = []
        for object in objects {
            guard let entityRules = rules[object.entity.name] else { continue }
            let event: ValidationEvent
            if object.isInserted {
                if object.isDeleted { continue }
                event = .insert
            } else if object.isDeleted {
                event = .delete
            } else if object.hasChanges {
                event = .update
            } else {
                continue
            }
            for rule in entityRules {
                do {
                    try rule(object, event)
                } catch let error as EntityStoreError {
                    let named =
                        error.failures.isEmpty ? [EntityStoreError.Failure(message: error.message)] : error.failures
                    for var failure in named {
                        failure.entity = failure.entity ?? object.entity.name
                        failure.objectID = failure.objectID ?? object.objectID
                        failure.key = failure.key ?? error.key
                        failures.append(failure)
                    }
                } catch {
                    let message = (error as? LocalizedError)?.errorDescription ?? String(describing: error)
                    failures.append(.init(entity: object.entity.name, objectID: object.objectID, message: message))
                }
            }
        }
        return failures
    }
}
