import SectionedDiff

/// The objects a context has touched since its last save or rollback (some may have been changed back), in the
/// order first touched.
///
/// Membership is a bit on each object (``ManagedObject/Tracking/unsaved``), so marking an object, testing it and
/// dropping it cost a bit operation, not a hash of its ID: a context of a million new objects hashed each ID into
/// this set, and again for every lookup of an ID it yielded, a cache miss each. Dropped objects stay in the list
/// until it is next compacted (``ManagedObject/Tracking/unsavedListed`` keeps each object in it once); iteration
/// skips them.
///
/// The order is the order of first touch, which for new objects is the order of their keys, so that sorting by ID
/// (``sortedByID()``) usually only has to confirm the order.
struct UnsavedObjects: Sequence {
    private var list: [ManagedObject] = []
    /// How many objects are unsaved.
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// Adds `object`; returns whether it was not a member yet.
    @discardableResult
    mutating func insert(_ object: ManagedObject) -> Bool {
        if object.tracking.contains(.unsaved) { return false }
        object.tracking.insert(.unsaved)
        count += 1
        if !object.tracking.contains(.unsavedListed) {
            object.tracking.insert(.unsavedListed)
            list.append(object)
        }
        return true
    }

    /// Drops `object`, if it is a member.
    mutating func remove(_ object: ManagedObject) {
        guard object.tracking.contains(.unsaved) else { return }
        object.tracking.remove(.unsaved)
        count -= 1
        // Compacted when most of the list is dropped objects, so that iteration stays proportional to the members.
        if list.count > 2 * count + 32 { compact() }
    }

    /// Whether `object` is a member.
    func contains(_ object: ManagedObject) -> Bool { object.tracking.contains(.unsaved) }

    /// Drops every object.
    mutating func removeAll() {
        for object in list { object.tracking.subtract([.unsaved, .unsavedListed]) }
        list = []
        count = 0
    }

    private mutating func compact() {
        list.removeAll { object in
            if object.tracking.contains(.unsaved) { return false }
            object.tracking.remove(.unsavedListed)
            return true
        }
    }

    /// The members, in the order first touched.
    func makeIterator() -> Iterator { Iterator(base: list.makeIterator()) }

    struct Iterator: IteratorProtocol {
        var base: IndexingIterator<[ManagedObject]>
        mutating func next() -> ManagedObject? {
            while let object = base.next() {
                if object.tracking.contains(.unsaved) { return object }
            }
            return nil
        }
    }

    /// The members ordered by ID.
    func sortedByID() -> [ManagedObject] {
        var objects = count == list.count ? list : Array(self)
        objects.sortByID()
        return objects
    }

    #if DEBUG
    /// Checks the list against the bits: every member listed once, the count right, every listed object marked.
    func _checkInvariants() {
        var members = 0
        var seen = Set<ObjectIdentifier>()
        for object in list {
            precondition(seen.insert(ObjectIdentifier(object)).inserted, "\(object.objectID) is listed twice")
            precondition(object.tracking.contains(.unsavedListed), "\(object.objectID) is listed unmarked")
            if object.tracking.contains(.unsaved) { members += 1 }
        }
        precondition(members == count, "\(members) members counted \(count)")
    }
    #endif
}

extension Array {
    /// Sorts the elements, unless one pass finds them in order already: the context's lists of new objects are in
    /// the order of their keys, and sorting a million of them cost a twentieth of their save.
    mutating func sortUnlessSorted(by areInIncreasingOrder: (Element, Element) -> Bool) {
        var index = 1
        while index < count, !areInIncreasingOrder(self[index], self[index - 1]) { index += 1 }
        if index < count { sort(by: areInIncreasingOrder) }
    }

    /// Sorts the elements by an integer key, ties in their current order. The keys are read once and sorted as
    /// plain pairs of integers with the elements' places, and the elements then put in that order: sorting the
    /// elements themselves read each key through the element's references at every comparison and moved
    /// reference-counted values (a fifth of a controller's batch went to such sorts). One pass returns early when
    /// the elements are in order already.
    mutating func sortByKey(_ key: (Element) -> UInt64) {
        guard count > 1 else { return }
        var keyed: [(key: UInt64, place: Int)] = []
        keyed.reserveCapacity(count)
        var ordered = true
        for index in indices {
            let value = key(self[index])
            if ordered && index > 0 && value < keyed[index - 1].key { ordered = false }
            keyed.append((value, index))
        }
        guard !ordered else { return }
        // Key and place in one word when both fit (keys are positions and primary keys, small numbers): a sort of
        // plain words compares without a closure.
        let placeBits = UInt64.bitWidth - (count - 1).leadingZeroBitCount
        let largest = keyed.lazy.map(\.key).max() ?? 0
        if largest.leadingZeroBitCount >= placeBits {
            var words = keyed.map { $0.key << placeBits | UInt64($0.place) }
            sortWords(&words)
            let mask = (1 << placeBits) - 1 as UInt64
            permute { Int(words[$0] & mask) }
        } else {
            keyed.sort { $0.key != $1.key ? $0.key < $1.key : $0.place < $1.place }
            permute { keyed[$0].place }
        }
    }

    /// Puts the element at `source(i)` at `i` for every `i` (`source` a permutation of the indices), in place by
    /// following its cycles with swaps: elements are moved, not copied, so that reference-counted ones are not
    /// retained and released again (mapping to a new array did both for every element, a miss each on cold objects).
    mutating func permute(_ source: (Int) -> Int) {
        var placed = Array<Bool>(repeating: false, count: count)
        withUnsafeMutableBufferPointer { elements in
            for start in elements.indices where !placed[start] {
                var current = start
                while true {
                    placed[current] = true
                    let next = source(current)
                    if next == start { break }
                    elements.swapAt(current, next)
                    current = next
                }
            }
        }
    }
}

extension Array where Element == ManagedObject {
    /// Sorts the objects by ID (see ``sortUnlessSorted(by:)``).
    mutating func sortByID() { sortUnlessSorted { $0.objectID < $1.objectID } }
}
