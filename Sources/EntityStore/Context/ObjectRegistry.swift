/// The objects a context has registered, one per ID (uniquing), kept in the order they were registered.
///
/// The objects live in an array in registration order, and a table maps each ID to its place. A dictionary of the
/// objects themselves released them in hash order when the context went away: a million objects freed in random
/// order cost 0.8-1.2 µs each (a cache miss on every object, its values and their strings, and the allocator
/// merging chunks far apart), a sixth of inserting them; freed in the order they were made, they cost 0.13 µs.
///
/// New objects (``append(new:)``) join the table only when an ID is next looked up: a context that inserts a
/// million objects and saves them never probes a table of a million random buckets (a cache miss per insert, and
/// the table grown twenty times), and the first lookup after them adds them all at once.
///
/// Removing an object moves the last one into its place, so the array has no holes; the order is the registration
/// order except where objects were removed.
struct ObjectRegistry {
    private var places: [ObjectID: Int] = [:]
    private(set) var objects: [ManagedObject] = []
    /// The objects from this place on are not in `places` yet.
    private var indexed = 0

    init() {}

    init(minimumCapacity: Int) {
        places = Dictionary(minimumCapacity: minimumCapacity)
        objects.reserveCapacity(minimumCapacity)
    }

    var count: Int { objects.count }
    var isEmpty: Bool { objects.isEmpty }

    /// The object registered under `id`; setting one registers it (in place of any other under the ID), setting
    /// nil unregisters the ID.
    subscript(id: ObjectID) -> ManagedObject? {
        mutating get {
            index()
            return places[id].map { objects[$0] }
        }
        set {
            index()
            if let newValue {
                let next = objects.count
                let place: Int = { (place: inout Int?) in
                    if let place { return place }
                    place = next
                    return next
                }(&places[id])
                if place == next {
                    objects.append(newValue)
                    indexed += 1
                } else {
                    objects[place] = newValue
                }
            } else if let place = places.removeValue(forKey: id) {
                remove(at: place)
            }
        }
    }

    /// Registers a new object, whose ID was just made: it joins the table at the next lookup.
    mutating func append(new object: ManagedObject) {
        objects.append(object)
    }

    /// The object registered under `id`, or the one `make` returns, registered, with one lookup of the ID.
    mutating func object(for id: ObjectID, orMake make: () throws -> ManagedObject) rethrows -> ManagedObject {
        index()
        let next = objects.count
        var isNew = false
        let place: Int = { (place: inout Int?) in
            if let place { return place }
            place = next
            isNew = true
            return next
        }(&places[id])
        guard isNew else { return objects[place] }
        do {
            let object = try make()
            objects.append(object)
            indexed += 1
            return object
        } catch {
            places[id] = nil
            throw error
        }
    }

    mutating func reserveCapacity(_ capacity: Int) {
        places.reserveCapacity(capacity)
        objects.reserveCapacity(capacity)
    }

    /// Adds the objects appended since the last lookup to the table. An ID registered already (a fault the app
    /// asked for by a key the store had not handed out yet) gives way to the new object, and is detached.
    private mutating func index() {
        guard indexed < objects.count else { return }
        if places.isEmpty { places.reserveCapacity(objects.count) }
        var displaced: [Int] = []
        while indexed < objects.count {
            if let old = places.updateValue(indexed, forKey: objects[indexed].objectID) { displaced.append(old) }
            indexed += 1
        }
        for place in displaced.sorted(by: >) {
            objects[place].context = nil
            remove(at: place)
        }
    }

    /// Removes the object at `place`, no longer in the table, moving the last object into its place.
    private mutating func remove(at place: Int) {
        let last = objects.removeLast()
        indexed -= 1
        if place < objects.count {
            objects[place] = last
            places[last.objectID] = place
        }
    }

    #if DEBUG
    /// Checks the table against the array: every indexed object at the place its ID maps to, every place taken
    /// once, and no ID twice among the objects not indexed yet.
    func _checkInvariants() {
        precondition(indexed <= objects.count, "\(indexed) indexed of \(objects.count) objects")
        precondition(places.count == indexed, "\(places.count) places for \(indexed) indexed objects")
        for (place, object) in objects[..<indexed].enumerated() {
            precondition(places[object.objectID] == place, "\(object.objectID) is not at its place \(place)")
        }
        var unindexed = Set<ObjectID>()
        for object in objects[indexed...] {
            precondition(unindexed.insert(object.objectID).inserted, "\(object.objectID) is appended twice")
        }
    }
    #endif
}
