/// The objects a context changed since it last processed its changes, each with its state before its first change
/// (nil: it did not exist), and whether each was touched inside or outside a user-driven scope.
///
/// Membership and the touches are bits on each object (``ManagedObject/Tracking``): recording a change of an
/// object already recorded is a bit test, where a dictionary keyed by ID hashed the ID (and at a million new
/// objects missed the cache) on every first change, and two sets of IDs did again for the touches.
struct PendingChanges {
    /// One recorded object.
    struct Entry {
        let object: ManagedObject
        /// The state before the first change since the last processing; nil when the object did not exist then.
        var before: ObjectState?
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

    /// Records `object`'s state before its first change, unless it is recorded already, and the scope it is
    /// changed in.
    @inline(__always)
    mutating func record(_ object: ManagedObject, userDriven: Bool, before: () -> ObjectState?) {
        let touch: ManagedObject.Tracking = userDriven ? .touchedUserDriven : .touchedOther
        if object.tracking.contains(.pending) {
            object.tracking.insert(touch)
            return
        }
        object.tracking.insert([.pending, touch])
        entries.append(Entry(object: object, before: before(), place: entries.count))
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
    /// Checks the bits against the entries: every recorded object marked pending, and no object twice.
    func _checkInvariants() {
        var seen = Set<ObjectIdentifier>()
        for entry in entries {
            precondition(entry.object.tracking.contains(.pending), "\(entry.object.objectID) is recorded unmarked")
            precondition(seen.insert(ObjectIdentifier(entry.object)).inserted, "\(entry.object.objectID) twice")
        }
    }
    #endif
}
