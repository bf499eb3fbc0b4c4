/// Undo and redo of a context's unsaved changes (Foundation's `UndoManager` does not exist on Linux).
///
/// Each public mutation (a value set, an insert, a delete, a relationship change) is one undo group, unless the
/// app opens a group of its own with ``ObjectContext/beginUndoGrouping()``. A group remembers the state every
/// object it touched had before, so undo restores exactly that, inverses and all.
final class UndoStack {
    /// What one group restores: whole states of the objects whose first change in the group was not a plain
    /// attribute write, and the old values of plain attribute writes (cheap: no copy of the object's values, so
    /// the next write does not copy them either).
    ///
    /// Most groups are one value set or one insert: such a group is held inline (no allocation; an array per group
    /// was an allocation per value set), and only a group of several changes keeps them in a `Many` box. Groups are
    /// kept for every change until the next save, so their size is most of what an unsaved change holds.
    struct Group {
        private enum Storage {
            case empty
            case write(AttributeWrite)
            case state(ObjectID, ObjectState?)
            case many(Many)
        }

        /// The changes of a group of several (only ever mutated while the group is the open one).
        private final class Many {
            var states: [ObjectID: ObjectState?]
            var writes: [AttributeWrite]
            init(states: [ObjectID: ObjectState?] = [:], writes: [AttributeWrite] = []) {
                self.states = states
                self.writes = writes
            }
        }

        private var storage = Storage.empty

        /// The attribute writes, in the order made.
        var attributes: [AttributeWrite] {
            switch storage {
            case .write(let write): [write]
            case .many(let many): many.writes
            case .empty, .state: []
            }
        }
        var isEmpty: Bool {
            if case .empty = storage { return true }
            return false
        }
        /// The whole states, by object.
        var states: [ObjectID: ObjectState?] {
            switch storage {
            case .state(let id, let state): [id: state]
            case .many(let many): many.states
            case .empty, .write: [:]
            }
        }
        /// Every object the group touched.
        var ids: Set<ObjectID> { Set(states.keys).union(attributes.map(\.id)) }

        /// Whether the group has a whole state of `id`.
        func hasState(_ id: ObjectID) -> Bool {
            switch storage {
            case .state(let stateID, _): stateID == id
            // (An empty dictionary still hashes the key it is asked for.)
            case .many(let many): !many.states.isEmpty && many.states.keys.contains(id)
            case .empty, .write: false
            }
        }

        /// Records `id`'s whole state (the caller checked it has none yet).
        mutating func setState(_ id: ObjectID, _ state: ObjectState?) {
            switch storage {
            case .empty: storage = .state(id, state)
            case .write(let write): storage = .many(Many(states: [id: state], writes: [write]))
            case .state(let other, let otherState): storage = .many(Many(states: [other: otherState, id: state]))
            case .many(let many): many.states[id] = .some(state)
            }
        }

        /// Whether the group has an attribute write of `id`.
        func wrote(_ id: ObjectID) -> Bool {
            switch storage {
            case .write(let write): write.id == id
            case .many(let many): many.writes.contains { $0.id == id }
            case .empty, .state: false
            }
        }

        mutating func append(_ write: AttributeWrite) {
            switch storage {
            case .empty: storage = .write(write)
            case .write(let first): storage = .many(Many(writes: [first, write]))
            case .state(let id, let state): storage = .many(Many(states: [id: state], writes: [write]))
            case .many(let many): many.writes.append(write)
            }
        }
    }

    /// Attribute `index` of `id` had the value `old` before a write.
    struct AttributeWrite {
        let id: ObjectID
        let index: Int
        let old: Value
    }

    @exclusivity(unchecked) var undoGroups: [Group] = []
    @exclusivity(unchecked) var redoGroups: [Group] = []
    /// The open group, while ``isRecording``; empty otherwise. Not an optional: unwrapping one per write copied and
    /// destroyed the group around every change (a tenth of a value set's instructions).
    @exclusivity(unchecked) private var current = Group()
    /// Whether the open group records (a group is open and undo is enabled).
    @exclusivity(unchecked) private var isRecording = false
    @exclusivity(unchecked) private var depth = 0
    /// While suspended (during a save), changes are not recorded.
    var isSuspended = false
    /// Whether groups are recorded at all (``ObjectContext/isUndoEnabled``).
    var isEnabled = true {
        didSet {
            guard !isEnabled else { return }
            // A group open now records nothing more.
            isRecording = false
            current = Group()
            clear()
        }
    }
    /// How many groups are kept, the oldest dropped first; 0 keeps every group (``ObjectContext/undoLimit``).
    var limit = 0 {
        didSet { trim() }
    }

    func open() {
        depth += 1
        if depth == 1 && isEnabled { isRecording = true }
    }

    func close() {
        guard depth > 0 else { return }
        depth -= 1
        guard depth == 0, isRecording else { return }
        isRecording = false
        if !current.isEmpty {
            // Moved out, not copied: a copy of the group is a retain and a release of everything in it.
            var group = Group()
            swap(&group, &current)
            undoGroups.append(group)
            // (Assigning an empty array over an empty one still releases it.)
            if !redoGroups.isEmpty { redoGroups = [] }
            if limit > 0 { trim() }
        }
    }

    private func trim() {
        if limit > 0 && undoGroups.count > limit { undoGroups.removeFirst(undoGroups.count - limit) }
    }

    /// Records the state `id` had before the group (the first record wins; attribute writes recorded before it
    /// are folded back into it). The state is made only when it is recorded.
    func record(_ id: ObjectID, _ state: @autoclosure () -> ObjectState?) {
        guard !isSuspended, isRecording, !current.hasState(id) else { return }
        let state = state()
        var before = state
        if let state, var values = state.values, current.wrote(id) {
            for write in current.attributes.reversed() where write.id == id { values[write.index] = write.old }
            before = state.with(values: values)
        }
        current.setState(id, before)
    }

    /// Records that attribute `index` of `id` had the value `old` before a write.
    func recordAttribute(_ id: ObjectID, _ index: Int, _ old: Value) {
        guard !isSuspended, isRecording else { return }
        if current.hasState(id) { return }
        current.append(AttributeWrite(id: id, index: index, old: old))
    }

    func clear() {
        undoGroups = []
        redoGroups = []
    }

    var isGroupOpen: Bool { depth > 0 }
}

extension ObjectContext {
    /// Whether the context records its changes for undo (on by default).
    ///
    /// Recording costs memory for every change until the next save: an import of many objects through a context
    /// should turn it off (as Core Data imports set `undoManager = nil`). Turning it off forgets the recorded
    /// groups; turning it back on records from then on.
    public var isUndoEnabled: Bool {
        get { undo.isEnabled }
        set { undo.isEnabled = newValue }
    }

    /// How many undo groups are kept, the oldest dropped first; 0 (the default) keeps every group until the next
    /// save (`UndoManager.levelsOfUndo`).
    ///
    /// - Precondition: not negative.
    public var undoLimit: Int {
        get { undo.limit }
        set {
            precondition(newValue >= 0, "undoLimit must not be negative (got \(newValue))")
            undo.limit = newValue
        }
    }

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
        let states = group.states
        restore(states)
        // Attribute writes in reverse order, for the objects without a whole state in the group.
        for write in group.attributes.reversed() where states[write.id] == nil {
            guard let object = registered[write.id], object.values != nil else { continue }
            recordPending(object)
            object.values?[write.index] = write.old
            dirty.insert(object)
        }
    }

    /// Redoes the last undone group.
    /// - Throws: ``EntityStoreError/Code/nothingToUndo`` when there is none.
    public func redoLastChange() throws {
        guard !undo.isGroupOpen, let group = undo.redoGroups.popLast() else {
            throw EntityStoreError(.nothingToUndo, "there is no undone change to redo")
        }
        undo.undoGroups.append(currentStates(of: group))
        restore(group.states)
    }

    private func currentStates(of group: UndoStack.Group) -> UndoStack.Group {
        var states = UndoStack.Group()
        for id in group.ids { states.setState(id, registered[id].map(ObjectState.init)) }
        return states
    }
}
