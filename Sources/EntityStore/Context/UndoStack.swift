/// Undo and redo of a context's unsaved changes (Foundation's `UndoManager` does not exist on Linux).
///
/// Each public mutation (a value set, an insert, a delete, a relationship change) is one undo group, unless the
/// app opens a group of its own with ``ObjectContext/beginUndoGrouping()``. A group remembers the state every
/// object it touched had before, so undo restores exactly that, inverses and all.
final class UndoStack {
    // @exclusivity(unchecked) on the mutable state below: the stack is touched only from its context's isolation domain, one access at a time
    // (the compiler keeps a context in one isolation domain; a debug build checks its entry points), so no two
    // accesses overlap; the run-time checks cost more than the work of a typed read or write itself.
    /// Attribute `index` of `object` had the value `old` before a write.
    struct AttributeWrite {
        /// The object (8 bytes where its ID took 24: the writes are most of what an unsaved change holds).
        let object: ManagedObject
        let index: Int32
        /// Whether the write is a group of its own: most groups are one value set, kept as nothing more than it.
        var isGroup = false
        let old: Value

        var id: ObjectID { object.objectID }
    }

    /// `target` was added to (or removed from) the to-many relationship `relationship` of `object`, which had no
    /// whole state in the group: the one target, where a whole state would copy every target the relationship
    /// holds, for each change (linking n objects to one, a group each, copied the relationship n times).
    struct LinkWrite {
        let object: ManagedObject
        let relationship: String
        let target: ObjectID
        let added: Bool
        /// Whether the store held the link when it changed (the object's committed targets then).
        let wasStored: Bool

        var id: ObjectID { object.objectID }
    }

    /// The state an object had before a group changed it (nil: it did not exist).
    typealias Before = (id: ObjectID, state: ObjectState?)

    /// A group taken off the stack: what an undo restores.
    struct Group {
        /// Whole states, by object: the objects whose first change in the group was not a plain attribute write.
        var states: [ObjectID: ObjectState?] = [:]
        /// The attribute writes, in the order made.
        var writes: [AttributeWrite] = []
        /// The to-many link changes, in the order made.
        var links: [LinkWrite] = []

        /// Every object the group touched.
        var ids: Set<ObjectID> { Set(states.keys).union(writes.map(\.id)).union(links.map(\.id)) }
    }

    /// An attribute write as the log keeps it, in 16 bytes: most writes are to new objects, whose old value is the
    /// attribute's default, and those keep no value (a write with its value took 40 bytes, a third of what an
    /// unsaved insert held).
    private struct LoggedWrite {
        let object: ManagedObject
        /// The attribute's place; the top bit marks a write that is a group of its own.
        private var indexAndMark: UInt32
        /// Where the old value is in ``UndoStack/olds``, or -1: the attribute's default value.
        var oldSlot: Int32

        init(object: ManagedObject, index: Int, oldSlot: Int32) {
            self.object = object
            indexAndMark = UInt32(index)
            self.oldSlot = oldSlot
        }

        var index: Int { Int(indexAndMark & ~Self.mark) }
        var isGroup: Bool {
            get { indexAndMark & Self.mark != 0 }
            set { indexAndMark = newValue ? indexAndMark | Self.mark : indexAndMark & ~Self.mark }
        }
        private static let mark: UInt32 = 1 << 31
    }

    /// Where a group of more than one write keeps its changes in the logs.
    private struct Span {
        var writes: Range<Int>
        var states: Range<Int>
        var links: Range<Int>
    }

    // The undo groups are three flat logs, their attribute writes, their to-many link changes and their whole
    // states, oldest first: a group is no value of its own. A group of one write (most are) is that write, marked;
    // any other group has a span of the logs. The open group is the tail of the logs. A group per value set, copied into a list of groups and
    // destroyed with it, was a tenth of an insert's instructions and 64 bytes each.
    @exclusivity(unchecked) private var writes: [LoggedWrite] = []
    /// The old values the writes keep (those that were not the attribute's default), in the writes' order.
    @exclusivity(unchecked) private var olds: [Value] = []
    @exclusivity(unchecked) private var states: [Before] = []
    @exclusivity(unchecked) private var links: [LinkWrite] = []
    @exclusivity(unchecked) private var spans: [Span] = []
    /// What the limit dropped: the entries before these are dead, removed from the logs in batches.
    @exclusivity(unchecked) private var dropped = (writes: 0, states: 0, links: 0, spans: 0)
    /// How many groups can be undone.
    @exclusivity(unchecked) private var groupCount = 0
    /// Where the open group starts in the logs.
    @exclusivity(unchecked) private var openStart = (writes: 0, states: 0, links: 0)
    /// The objects with a whole state in the open group, once it has more than a few (a scan finds them before).
    @exclusivity(unchecked) private var openStateIDs: Set<ObjectID> = []
    /// The undone groups: the states to restore on redo, the last undone last.
    @exclusivity(unchecked) private var redoGroups: [[Before]] = []
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
            clear()
        }
    }
    /// How many groups are kept, the oldest dropped first; 0 keeps every group (``ObjectContext/undoLimit``).
    var limit = 0 {
        didSet { trim() }
    }

    /// From this many whole states in the open group, whether it has one of an object is looked up in a set.
    private static let scannedStates = 8

    var canUndo: Bool { groupCount > 0 }
    var canRedo: Bool { !redoGroups.isEmpty }
    var isGroupOpen: Bool { depth > 0 }

    func open() {
        depth += 1
        guard depth == 1 else { return }
        if isEnabled { isRecording = true }
        openStart = (writes.count, states.count, links.count)
    }

    func close() {
        guard depth > 0 else { return }
        depth -= 1
        guard depth == 0, isRecording else { return }
        isRecording = false
        let newWrites = writes.count - openStart.writes
        let newStates = states.count - openStart.states
        let newLinks = links.count - openStart.links
        if newStates == 0 && newLinks == 0 && newWrites == 1 {
            writes[writes.count - 1].isGroup = true
        } else if newStates > 0 || newWrites > 0 || newLinks > 0 {
            spans.append(
                Span(
                    writes: openStart.writes..<writes.count, states: openStart.states..<states.count,
                    links: openStart.links..<links.count))
            if !openStateIDs.isEmpty { openStateIDs = [] }
        } else {
            return
        }
        groupCount += 1
        // (Assigning an empty array over an empty one still releases it.)
        if !redoGroups.isEmpty { redoGroups = [] }
        if limit > 0 { trim() }
    }

    /// Drops the oldest groups beyond the limit.
    private func trim() {
        guard limit > 0 else { return }
        while groupCount > limit {
            let span = dropped.spans < spans.count ? spans[dropped.spans] : nil
            if dropped.writes < writes.count, writes[dropped.writes].isGroup,
                span.map({ dropped.writes < $0.writes.lowerBound }) ?? true
            {
                dropped.writes += 1
            } else if let span {
                dropped = (span.writes.upperBound, span.states.upperBound, span.links.upperBound, dropped.spans + 1)
            } else {
                break
            }
            groupCount -= 1
        }
        if dropped.writes * 2 > writes.count || dropped.states * 2 > states.count || dropped.links * 2 > links.count {
            compact()
        }
    }

    /// Removes the dropped entries from the logs.
    private func compact() {
        let (w, s, l, g) = dropped
        let droppedOlds = writes[..<w].reduce(0) { $0 + ($1.oldSlot >= 0 ? 1 : 0) }
        writes.removeFirst(w)
        if droppedOlds > 0 {
            olds.removeFirst(droppedOlds)
            for i in writes.indices where writes[i].oldSlot >= 0 { writes[i].oldSlot -= Int32(droppedOlds) }
        }
        states.removeFirst(s)
        links.removeFirst(l)
        spans.removeFirst(g)
        for i in spans.indices {
            spans[i].writes = (spans[i].writes.lowerBound - w)..<(spans[i].writes.upperBound - w)
            spans[i].states = (spans[i].states.lowerBound - s)..<(spans[i].states.upperBound - s)
            spans[i].links = (spans[i].links.lowerBound - l)..<(spans[i].links.upperBound - l)
        }
        openStart = (openStart.writes - w, openStart.states - s, openStart.links - l)
        dropped = (0, 0, 0, 0)
    }

    /// Whether the open group has a whole state of `id`.
    private func hasState(_ id: ObjectID) -> Bool {
        let count = states.count - openStart.states
        if count == 0 { return false }
        if count > Self.scannedStates { return openStateIDs.contains(id) }
        return states[openStart.states...].contains { $0.id == id }
    }

    /// Records the state `object` had before the group (the first record wins; attribute writes and link changes
    /// recorded before it are folded back into it). The state is made only when it is recorded.
    func record(_ object: ManagedObject, _ state: @autoclosure () -> ObjectState?) {
        let id = object.objectID
        guard !isSuspended, isRecording, !hasState(id) else { return }
        let state = state()
        var before = state
        let openWrites = writes[openStart.writes...]
        if let state, var values = state.values, openWrites.contains(where: { $0.object === object }) {
            for write in openWrites.reversed() where write.object === object { values[write.index] = old(of: write) }
            before = state.with(values: values)
        }
        let openLinks = links[openStart.links...]
        if let state = before, openLinks.contains(where: { $0.object === object }) {
            var related = state.related
            for link in openLinks.reversed() where link.object === object {
                if link.added {
                    related[link.relationship]?.remove(link.target)
                } else {
                    related[link.relationship, default: []].insert(link.target)
                }
            }
            before = state.with(related: related)
        }
        states.append((id, before))
        let count = states.count - openStart.states
        if count > Self.scannedStates {
            if count == Self.scannedStates + 1 {
                openStateIDs = Set(states[openStart.states...].map(\.id))
            } else {
                openStateIDs.insert(id)
            }
        }
    }

    /// Records that attribute `index` of `object` had the value `old` before a write.
    func recordAttribute(_ object: ManagedObject, _ index: Int, _ old: Value) {
        guard !isSuspended, isRecording, !hasState(object.objectID) else { return }
        if Self.isIdentical(old, object.entityBox.defaultValues[index]) {
            writes.append(LoggedWrite(object: object, index: index, oldSlot: -1))
        } else {
            writes.append(LoggedWrite(object: object, index: index, oldSlot: Int32(olds.count)))
            olds.append(old)
        }
    }

    /// Records that `target` is about to be added to (or removed from) `object`'s to-many `relationship`, unless
    /// the group keeps the object's whole state or the change changes nothing (the target is there, or is not).
    func recordLink(_ object: ManagedObject, _ relationship: String, _ target: ObjectID, added: Bool) {
        guard !isSuspended, isRecording, !hasState(object.objectID),
            object.related[relationship]?.contains(target) ?? false != added
        else { return }
        let wasStored = object.committedRelated[relationship]?.contains(target) ?? false
        links.append(
            LinkWrite(object: object, relationship: relationship, target: target, added: added, wasStored: wasStored))
    }

    /// The value a write replaced.
    private func old(of write: LoggedWrite) -> Value {
        write.oldSlot >= 0 ? olds[Int(write.oldSlot)] : write.object.entityBox.defaultValues[write.index]
    }

    /// The write as an undo restores it.
    private func attributeWrite(_ write: LoggedWrite) -> AttributeWrite {
        AttributeWrite(object: write.object, index: Int32(write.index), isGroup: write.isGroup, old: old(of: write))
    }

    /// Whether `a` is `b` exactly (the same bits, not only equal: an undo must restore -0.0 and a string's own
    /// form), for the values a default can be; any other is kept.
    static func isIdentical(_ a: Value, _ b: Value) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.bool(let x), .bool(let y)): x == y
        case (.int(let x), .int(let y)): x == y
        case (.double(let x), .double(let y)): x.bitPattern == y.bitPattern
        case (.date(let x), .date(let y)):
            x.timeIntervalSinceReferenceDate.bitPattern
                == y.timeIntervalSinceReferenceDate.bitPattern
        case (.string(let x), .string(let y)): x.utf8.elementsEqual(y.utf8)
        default: false
        }
    }

    /// Takes the last undo group off the stack (none while a group is open).
    func popUndo() -> Group? {
        guard depth == 0, groupCount > 0 else { return nil }
        groupCount -= 1
        var group = Group()
        if let span = spans.last, span.writes.upperBound == writes.count, span.states.upperBound == states.count,
            span.links.upperBound == links.count
        {
            // (A span ends where the logs end unless a group of one write came after it.)
            spans.removeLast()
            for (id, state) in states[span.states] { group.states[id] = .some(state) }
            states.removeSubrange(span.states)
            group.links = Array(links[span.links])
            links.removeSubrange(span.links)
            group.writes = writes[span.writes].map(attributeWrite)
            // The span is the logs' tail, and so are the old values its writes keep.
            if let first = writes[span.writes].first(where: { $0.oldSlot >= 0 }) {
                olds.removeSubrange(Int(first.oldSlot)...)
            }
            writes.removeSubrange(span.writes)
        } else {
            let write = writes.removeLast()
            group.writes = [attributeWrite(write)]
            if write.oldSlot >= 0 { olds.removeLast() }
        }
        openStart = (writes.count, states.count, links.count)
        return group
    }

    /// Puts a group of whole states on the undo stack without touching the redo list (a redo's inverse).
    func pushUndo(_ before: [Before]) {
        guard !before.isEmpty, depth == 0 else { return }
        spans.append(
            Span(
                writes: writes.count..<writes.count, states: states.count..<(states.count + before.count),
                links: links.count..<links.count))
        states.append(contentsOf: before)
        openStart = (writes.count, states.count, links.count)
        groupCount += 1
        if limit > 0 { trim() }
    }

    /// Takes the last undone group's states (none while a group is open).
    func popRedo() -> [Before]? { depth == 0 ? redoGroups.popLast() : nil }

    /// Keeps the states a redo restores.
    func pushRedo(_ before: [Before]) { redoGroups.append(before) }

    #if DEBUG
    /// Checks the logs: the writes that keep an old value point at the old values in order, one each.
    func _checkInvariants() {
        var next: Int32 = 0
        for write in writes where write.oldSlot >= 0 {
            precondition(write.oldSlot == next, "a write keeps old value \(write.oldSlot) where \(next) is next")
            next += 1
        }
        precondition(Int(next) == olds.count, "\(olds.count) old values for \(next) writes that keep one")
    }
    #endif

    func clear() {
        writes = []
        olds = []
        states = []
        links = []
        spans = []
        dropped = (0, 0, 0, 0)
        groupCount = 0
        openStart = (0, 0, 0)
        openStateIDs = []
        redoGroups = []
    }
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
    public var canUndo: Bool { undo.canUndo }
    /// Whether there is an undone change to redo.
    public var canRedo: Bool { undo.canRedo }

    /// Opens an undo group: the changes until ``endUndoGrouping()`` undo together. Groups nest.
    public func beginUndoGrouping() { undo.open() }

    /// Closes the undo group opened by ``beginUndoGrouping()``.
    public func endUndoGrouping() { undo.close() }

    /// Undoes the last group of unsaved changes.
    /// - Throws: ``EntityStoreError/Code/nothingToUndo`` when there is none, or while a group is open.
    public func undoLastChange() throws {
        guard !undo.isGroupOpen else {
            throw EntityStoreError(
                .nothingToUndo, "cannot undo while an undo group is open: call endUndoGrouping() first")
        }
        guard let group = undo.popUndo() else {
            throw EntityStoreError(.nothingToUndo, "there is no change to undo")
        }
        undo.pushRedo(currentStates(of: group.ids))
        let states = group.states
        restore(try rebased(states))
        // Attribute writes in reverse order, for the objects without a whole state in the group.
        for write in group.writes.reversed() where states.isEmpty || states[write.id] == nil {
            guard let object = registered[write.id], object.values != nil else { continue }
            recordPending(object)
            object.announceChange()
            object.values?[Int(write.index)] = write.old
            dirty.insert(object)
        }
        // Link changes in reverse order, likewise.
        for link in group.links.reversed() where states.isEmpty || states[link.id] == nil {
            guard let object = registered[link.id] else { continue }
            try undo(link, of: object)
        }
    }

    /// Puts back whether `object`'s relationship holds the link's target as a whole state would (see
    /// `ObjectState.rebased(onto:)`): the context's changes from before the group on top of what is stored now,
    /// never a target deleted since. Before the group, the object held the target if the change removed it.
    private func undo(_ link: UndoStack.LinkWrite, of object: ManagedObject) throws {
        let name = link.relationship
        guard let relationship = object.entity.relationship(name) else { return }
        let storedNow = object.committedRelated[name]?.contains(link.target)
        let holds: Bool
        switch (link.added, link.wasStored) {
        case (true, true): holds = false  // the context had removed it before the group
        case (false, false): holds = true  // the context had added it before the group
        case (true, false): holds = storedNow ?? false  // not the context's change before: as stored now
        case (false, true): holds = storedNow ?? true
        }
        if holds, storedNow != true, try isGone(link.target) { return }
        guard try targets(of: object, relationship).contains(link.target) != holds else { return }
        recordPending(object)
        object.announceChange()
        if holds {
            object.related[name, default: []].insert(link.target)
        } else {
            object.related[name]?.remove(link.target)
        }
        dirty.insert(object)
    }

    /// Redoes the last undone group.
    /// - Throws: ``EntityStoreError/Code/nothingToUndo`` when there is none, or while a group is open.
    public func redoLastChange() throws {
        guard !undo.isGroupOpen else {
            throw EntityStoreError(
                .nothingToUndo, "cannot redo while an undo group is open: call endUndoGrouping() first")
        }
        guard let before = undo.popRedo() else {
            throw EntityStoreError(.nothingToUndo, "there is no undone change to redo")
        }
        undo.pushUndo(currentStates(of: Set(before.map(\.id))))
        var states: [ObjectID: ObjectState?] = [:]
        for (id, state) in before { states[id] = .some(state) }
        restore(try rebased(states))
    }

    /// Recorded states put on top of what is stored now: a merge or a refresh since the recording changed the
    /// objects' stored values and relationships, and an undo or redo reverts the context's own changes only, never
    /// what it merged. An object deleted in the store since (a merged delete) is not brought back, nor linked to.
    private func rebased(_ states: [ObjectID: ObjectState?]) throws -> [ObjectID: ObjectState?] {
        // The objects the restore brings back: a new object whose insert is redone (or whose delete is undone) is
        // registered again only by the restore, and a state that links to it keeps the link.
        var restored = Set<ObjectID>()
        for (id, recorded) in states {
            guard let state = recorded else { continue }
            if state.isInserted || registered[id].map({ !$0.isInserted }) == true { restored.insert(id) }
        }
        func isGoneHere(_ id: ObjectID) throws -> Bool { try !restored.contains(id) && isGone(id) }
        var result: [ObjectID: ObjectState?] = [:]
        result.reserveCapacity(states.count)
        for (id, recorded) in states {
            guard let state = recorded else {
                result[id] = recorded
                continue
            }
            if state.isInserted {
                result[id] = try state.dropping(addedTargets: isGoneHere)
                continue
            }
            guard let object = registered[id], !object.isInserted else {
                // Stored when recorded, gone now: a merge deleted it.
                continue
            }
            if object.values == nil, state.values != nil { try fault(in: object) }
            // A relationship the state had changed that is not loaded now: loaded, so that the state's links and
            // unlinks go on top of what is stored now (a merge or a save since may have linked others to it; put
            // on the targets recorded, those links were lost on this side only).
            for (name, recordedTargets) in state.related {
                guard object.related[name] == nil, let before = state.committedRelated[name], before != recordedTargets,
                    let relationship = object.entity.relationship(name)
                else { continue }
                _ = try targets(of: object, relationship)
            }
            result[id] = try state.rebased(onto: object).dropping(addedTargets: isGoneHere)
        }
        return result
    }

    /// Whether `id` names an object neither registered here (nor in a parent) nor stored: one a merge deleted.
    private func isGone(_ id: ObjectID) throws -> Bool {
        if registered[id] != nil { return false }
        if let parent { return try parent.isGone(id) }
        let storage = try store.storage(for: id.entityName)
        return try mappingStorageErrors("looking up \(id)") {
            try store.read { txn in try txn.get(id.primaryKey, in: storage.records) == nil }
        }
    }

    private func currentStates(of ids: Set<ObjectID>) -> [UndoStack.Before] {
        ids.map { ($0, registered[$0].map(ObjectState.init)) }
    }
}
