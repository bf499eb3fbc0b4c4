import LMDB

/// Processing at the end of each turn of the actor a context lives on, as Core Data's main-queue context processes
/// its pending changes at the end of each pass of the run loop: edits made in one turn (a typed setter, an insert,
/// an undo) reach the context's controllers, observers and streams as one batch once the code that made them
/// returns or awaits, with no call from the app.
extension ObjectContext {
    /// Whether the context processes its pending changes by itself at the end of each turn of the actor it was
    /// made on (the main actor, a ``ContextActor``): all the edits of a turn become one batch, delivered to its
    /// fetched-results controllers, observers and ``changes`` stream once the code that made them returns or
    /// suspends at an `await`.
    ///
    /// On by default for a context made on an actor; a context made outside any actor has no turns and processes
    /// its changes at its processing points (``processPendingChanges()``, a fetch, a save) only. Turn it off to
    /// decide yourself when changes are processed: ``processPendingChanges()`` and saves work as before either way,
    /// and a turn whose changes were processed already delivers nothing more.
    ///
    /// <!-- snippet
    /// uses: library
    /// let store = try openLibrary()
    /// -->
    /// ```swift
    /// @MainActor func rename(_ book: Book) {
    ///     book.title = "Dune Messiah"  // the screen's list shows it once this function returns
    /// }
    /// @MainActor func manual() {
    ///     let context = ObjectContext(store: store)
    ///     context.processesPendingChangesAtEndOfTurn = false  // only processPendingChanges() delivers
    /// }
    /// ```
    public var processesPendingChangesAtEndOfTurn: Bool {
        get { turn != .off }
        set {
            if !newValue {
                turn = .off
            } else if turn == .off, home != nil || turnQueue != nil {
                turn = .armed
                if !pending.isEmpty { scheduleEndOfTurn() }
            }
        }
    }

    /// Notes a change recorded for processing: the first of a turn schedules the processing at its end.
    @inline(__always)
    func noteChangeForEndOfTurn() {
        if turn == .armed { scheduleEndOfTurn() }
    }

    /// Enqueues the processing on the context's actor: it runs after the job running now (the turn) ends.
    private func scheduleEndOfTurn() {
        let reference = ContextReference(self)
        if let turnQueue {
            // A ``ContextActor``'s context: its executor runs jobs one after the other, in order.
            turn = .scheduled
            turnQueue { ObjectContext.endTurn(reference) }
            return
        }
        guard let home else {
            turn = .off
            return
        }
        turn = .scheduled
        // The task is isolated to the actor (it captures the isolated parameter), so it is enqueued there at once,
        // before any job the turn enqueues after this change, rather than after a hop from another executor.
        home.assumeIsolated { actor in
            _ = Task {
                _ = actor
                ObjectContext.endTurn(reference)
            }
        }
    }

    static func endTurn(_ reference: ContextReference) {
        guard let context = reference.context, context.turn == .scheduled else { return }
        context.turn = .armed
        context.processPendingChanges()
    }
}

/// Where a context stands with processing at the end of its actor's turn.
enum EndOfTurn: UInt8 {
    /// No processing at the end of turns (no actor, or turned off).
    case off
    /// The next change schedules the processing.
    case armed
    /// The processing is enqueued on the actor.
    case scheduled
}
