import Dispatch

extension PersistentStore {
    /// Runs `body` with a new context on a background thread, saves what it left unsaved, and returns its result.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// let titles = ["Dune", "Momo"]
    /// -->
    /// ```swift
    /// let count = try await store.performBackgroundTask { context in
    ///     for title in titles { try context.insert(Book.self).title = title }
    ///     return try context.count(Book.self)
    /// }   // saved
    /// ```
    ///
    /// Like Core Data's `performBackgroundTask`, each call gets its own context on its own serial queue (not
    /// Swift's cooperative pool, so a durable save blocks no other task). Like GRDB's `write` and Realm's `write`,
    /// the work is saved when `body` returns: nothing is lost because a `save()` was forgotten. When `body` or
    /// the save throws, the changes are discarded and the error is thrown here. The context, its objects and
    /// models stay inside `body`; what comes out is `Sendable` (IDs, ``ModelSnapshot`` values, counts).
    ///
    /// Other contexts that merge automatically see the save as soon as it commits.
    ///
    /// - Parameters:
    ///   - name: The context's name, recorded as the author of its save.
    ///   - body: The work; it runs once, unless the calling task is already cancelled (then nothing runs and
    ///     `CancellationError` is thrown).
    public func performBackgroundTask<T: Sendable>(
        name: String? = nil, _ body: @escaping @Sendable (ObjectContext) throws -> T
    ) async throws -> T {
        try Task.checkCancellation()
        let label = "EntityStore.performBackgroundTask \(name ?? "")"
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue(label: label).async {
                continuation.resume(
                    with: Result {
                        let context = ObjectContext(store: self, name: name, isolation: nil)
                        do {
                            let result = try body(context)
                            try context.save()
                            return result
                        } catch {
                            context.rollback()
                            throw error
                        }
                    })
            }
        }
    }
}
