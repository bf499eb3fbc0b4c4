/// The objects a context changed since it last processed its changes, each with its state before its first change
/// (nil: it did not exist), and whether each was touched inside or outside a user-driven scope.
///
/// Membership and the touches are bits on each object (``ManagedObject/Tracking``): recording a change of an
/// object already recorded is a bit test, where a dictionary keyed by ID hashed the ID (and at a million new
/// objects missed the cache) on every first change, and two sets of IDs did again for the touches.
struct PendingChanges {
    /// What an object was before its first change since the last processing.
    enum Before {
        /// It did not exist.
        case absent
        /// Its whole state.
        case state(ObjectState)
        /// Its attribute values, when only they have changed since: everything else is as the object has it now.
        /// An attribute write (the usual change) records no whole state: the state, an allocation and a reference
        /// on each of the object's arrays, was most of what processing an update cost. A later change of anything
        /// else completes it into a whole state (``record(_:userDriven:before:)``).
        case values([Value])

        /// The whole state, or nil when the object did not exist (`object` completes values alone).
        func state(of object: ManagedObject) -> ObjectState? {
            switch self {
            case .absent: nil
            case .state(let state): state
            case .values(let values): ObjectState(object).with(values: values)
            }
        }
    }

    /// One recorded object.
    struct Entry {
        let object: ManagedObject
        /// The state before the first change since the last processing.
        var before: Before
        /// Its place in the order recorded: entries of one ID keep it when sorted.
        let place: Int
        /// Set by ``take(registered:)``: the scopes the object was changed in.
        var touches: ManagedObject.Tracking = []

        /// Whether every change was made inside a user-driven scope.
        var isUserDriven: Bool { touches.contains(.touchedUserDriven) && !touches.contains(.touchedOther) }
    }

    private var entries: [Entry] = []

    var isEmpty: Bool { entries.isEmpty }

    private static let marks: ManagedObject.Tracking = [.pending, .touchedUserDriven, .touchedOther]

    /// Records `object`'s state before its first change, unless it is recorded already (a record of its values
    /// alone is completed into a whole state), and the scope it is changed in.
    @inline(__always)
    mutating func record(_ object: ManagedObject, userDriven: Bool, before: () -> ObjectState?) {
        let touch: ManagedObject.Tracking = userDriven ? .touchedUserDriven : .touchedOther
        if object.tracking.contains(.pending) {
            object.tracking.insert(touch)
            let index = Int(object.pendingIndex)
            if case .values(let values) = entries[index].before {
                entries[index].before = .state(ObjectState(object).with(values: values))
            }
            return
        }
        object.tracking.insert([.pending, touch])
        object.pendingIndex = UInt32(entries.count)
        entries.append(Entry(object: object, before: before().map(Before.state) ?? .absent, place: entries.count))
    }

    /// Records `object`'s values before a write of one of them, unless a state of it is recorded already, and the
    /// scope it is changed in. An object whose values are not loaded gets its whole state recorded.
    @inline(__always)
    mutating func recordValues(_ object: ManagedObject, userDriven: Bool) {
        let touch: ManagedObject.Tracking = userDriven ? .touchedUserDriven : .touchedOther
        if object.tracking.contains(.pending) {
            object.tracking.insert(touch)
            return
        }
        object.tracking.insert([.pending, touch])
        object.pendingIndex = UInt32(entries.count)
        let before: Before = object.values.map(Before.values) ?? .state(ObjectState(object))
        entries.append(Entry(object: object, before: before, place: entries.count))
    }

    /// The recorded objects ordered by ID, each ID once, with their scopes; the record is emptied.
    ///
    /// An ID recorded for two objects (one detached by `reset()`, another registered under the same ID and changed
    /// before processing) is one entry: the state first recorded, the object registered now (`registered`), as when
    /// the record was keyed by ID.
    mutating func take(registered: (ObjectID) -> ManagedObject?) -> [Entry] {
        var taken: [Entry] = []
        swap(&taken, &entries)
        Self.sortByID(&taken)
        // In place: each entry takes its object's touches, which the object gives up.
        var repeatsID = false
        taken.withUnsafeMutableBufferPointer { entries in
            for index in entries.indices {
                let object = entries[index].object
                entries[index].touches = object.tracking.intersection(Self.marks)
                object.tracking.subtract(Self.marks)
                if index > 0 && entries[index - 1].object.objectID == object.objectID { repeatsID = true }
            }
        }
        return repeatsID ? Self.joiningRepeatedIDs(taken, registered: registered) : taken
    }

    /// Entries of one ID (sorted, adjacent) as one: the first one's state, the object registered now, every touch.
    private static func joiningRepeatedIDs(
        _ taken: [Entry], registered: (ObjectID) -> ManagedObject?
    ) -> [Entry] {
        var result: [Entry] = []
        for entry in taken {
            guard let last = result.last, last.object.objectID == entry.object.objectID else {
                result.append(entry)
                continue
            }
            let current = registered(entry.object.objectID) === entry.object ? entry.object : last.object
            var joined = Entry(object: current, before: last.before, place: last.place)
            joined.touches = last.touches.union(entry.touches)
            result[result.count - 1] = joined
        }
        return result
    }

    /// Forgets every recorded change.
    mutating func removeAll() {
        for entry in entries { entry.object.tracking.subtract(Self.marks) }
        entries = []
    }

    /// Entries by ID, in the order recorded among equal IDs, sorted in place; one pass when they are in order
    /// already (new objects are recorded in the order of their keys).
    private static func sortByID(_ entries: inout [Entry]) {
        guard let entity = entries.first?.object.objectID.entityName else { return }
        if entries.allSatisfy({ $0.object.objectID.entityName == entity }) {
            // One entity (the usual case): by key, without comparing names; entries are in the order recorded, so
            // ties keep it.
            entries.sortByKey { $0.object.objectID.primaryKey }
        } else {
            entries.sortUnlessSorted { a, b in
                let (left, right) = (a.object.objectID, b.object.objectID)
                return left == right ? a.place < b.place : left < right
            }
        }
    }

    #if DEBUG
    /// Checks the bits against the entries: every recorded object marked pending, at its index, and no object twice.
    func _checkInvariants() {
        var seen = Set<ObjectIdentifier>()
        for (index, entry) in entries.enumerated() {
            precondition(entry.object.tracking.contains(.pending), "\(entry.object.objectID) is recorded unmarked")
            precondition(seen.insert(ObjectIdentifier(entry.object)).inserted, "\(entry.object.objectID) twice")
            precondition(entry.object.pendingIndex == index, "\(entry.object.objectID) points at another entry")
        }
    }
    #endif
}
