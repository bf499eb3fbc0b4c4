/// Undo and redo of a context's unsaved changes (Foundation's `UndoManager` does not exist on Linux).
///
/// Each public mutation (a value set, an insert, a delete, a relationship change) is one undo group, unless the
/// app opens a group of its own with ``ObjectContext/beginUndoGrouping()``. A group remembers the state every
/// object it touched had before, so undo restores exactly that, inverses and all.
final class UndoStack {
    typealias Group = [ObjectID: ObjectState?]

    var undoGroups: [Group] = []
    var redoGroups: [Group] = []
    private var current: Group?
    private var depth = 0
    /// While suspended (during a save), changes are not recorded.
    var isSuspended = false

    func open() {
        depth += 1
        if depth == 1 { current = [:] }
    }

    func close() {
        guard depth > 0 else { return }
        depth -= 1
        guard depth == 0, let group = current else { return }
        current = nil
        if !group.isEmpty {
            undoGroups.append(group)
            redoGroups = []
        }
    }

    func record(_ id: ObjectID, _ state: ObjectState?) {
        guard !isSuspended, current != nil, current?.keys.contains(id) == false else { return }
        current?[id] = .some(state)
    }

    func clear() {
        undoGroups = []
        redoGroups = []
    }

    var isGroupOpen: Bool { depth > 0 }
}

extension ObjectContext {
    /// Whether there is a change to undo.
    public var canUndo: Bool { !undo.undoGroups.isEmpty }
    /// Whether there is an undone change to redo.
    public var canRedo: Bool { !undo.redoGroups.isEmpty }

    /// Opens an undo group: the changes until ``endUndoGrouping()`` undo together. Groups nest.
    public func beginUndoGrouping() { undo.open() }

    /// Closes the undo group opened by ``beginUndoGrouping()``.
    public func endUndoGrouping() { undo.close() }

    /// Undoes the last group of unsaved changes.
    /// - Throws: ``EntityStoreError/Code/nothingToUndo`` when there is none, or while a group is open.
    public func undoLastChange() throws {
        guard !undo.isGroupOpen, let group = undo.undoGroups.popLast() else {
            throw EntityStoreError(.nothingToUndo, "there is no change to undo")
        }
        undo.redoGroups.append(currentStates(of: group))
        restore(group)
    }

    /// Redoes the last undone group.
    /// - Throws: ``EntityStoreError/Code/nothingToUndo`` when there is none.
    public func redoLastChange() throws {
        guard !undo.isGroupOpen, let group = undo.redoGroups.popLast() else {
            throw EntityStoreError(.nothingToUndo, "there is no undone change to redo")
        }
        undo.undoGroups.append(currentStates(of: group))
        restore(group)
    }

    private func currentStates(of group: UndoStack.Group) -> UndoStack.Group {
        var states: UndoStack.Group = [:]
        for id in group.keys { states[id] = .some(registered[id].map(ObjectState.init)) }
        return states
    }
}
