/// The objects a context has registered, one per ID (uniquing), kept in the order they were registered.
///
/// The objects live in an array in registration order, and a table maps each ID to its place. A dictionary of the
/// objects themselves released them in hash order when the context went away: a million objects freed in random
/// order cost 0.8-1.2 µs each (a cache miss on every object, its values and their strings, and the allocator
/// merging chunks far apart), a sixth of inserting them; freed in the order they were made, they cost 0.13 µs.
///
/// New objects (``append(new:)``) join the table only when an ID is next looked up: a context that inserts a
/// million objects and saves them never probes a table of a million random buckets (a cache miss per insert, and
/// the table grown twenty times), and the first lookup after them adds them all at once. A registry of a few
/// objects (a context made for one small fetch) has no table: a scan of its objects finds an ID for less than
/// making, filling and freeing a table costs.
///
/// Removing an object moves the last one into its place, so the array has no holes; the order is the registration
/// order except where objects were removed.
struct ObjectRegistry {
    private var places: [ObjectID: Int] = [:]
    private(set) var objects: [ManagedObject] = []
    /// Whether IDs are found through `places`: set once the registry holds more than ``scanned`` objects.
    private var usesTable = false
    /// With the table, the objects from this place on are not in `places` yet.
    private var indexed = 0

    /// Up to this many objects, an ID is found by a scan.
    private static let scanned = 16
    /// How many times an object left the registry (removed, or replaced by another under its ID): what the context
    /// keeps about registered objects (the last typed to-many read) is stale once this moves.
    private(set) var departures: UInt64 = 0

    init() {}

    /// Makes room in an empty registry for `capacity` objects at once: a table of the right size, made here
    /// (specialized) rather than grown. The count of ``departures`` goes on, so nothing kept against it turns
    /// current again.
    mutating func makeRoom(whileEmptyFor capacity: Int) {
        precondition(objects.isEmpty, "room is made in an empty registry")
        objects.reserveCapacity(capacity)
        if capacity > Self.scanned {
            places = Dictionary(minimumCapacity: capacity)
            usesTable = true
        }
    }

    var count: Int { objects.count }
    var isEmpty: Bool { objects.isEmpty }

    /// The object registered under `id`; setting one registers it (in place of any other under the ID), setting
    /// nil unregisters the ID.
    subscript(id: ObjectID) -> ManagedObject? {
        mutating get { place(of: id).map { objects[$0] } }
        set {
            if let newValue {
                if let place = place(of: id) {
                    if objects[place] !== newValue { departures &+= 1 }
                    objects[place] = newValue
                } else {
                    append(registered: newValue)
                }
            } else if let place = place(of: id) {
                remove(at: place)
            }
        }
    }

    /// Registers a new object, whose ID was just made: it joins the table at the next lookup.
    mutating func append(new object: ManagedObject) {
        if !usesTable && objects.count < Self.scanned, let place = scan(for: object.objectID) {
            // (See `index()`: an ID registered already gives way to the new object.)
            objects[place].context = nil
            remove(at: place)
        }
        objects.append(object)
    }

    /// The object registered under `id`, or the one `make` returns, registered, with one lookup of the ID.
    ///
    /// Inlined, so that `make` is too: called through a closure, its captures (a fetch's context and entity) took a
    /// reference each per object registered.
    @inline(__always)
    mutating func object(for id: ObjectID, orMake make: () throws -> ManagedObject) rethrows -> ManagedObject {
        guard usesTable || objects.count >= Self.scanned else {
            if let place = scan(for: id) { return objects[place] }
            let object = try make()
            objects.append(object)
            return object
        }
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
        if usesTable || capacity > Self.scanned {
            index()
            places.reserveCapacity(capacity)
        }
        objects.reserveCapacity(capacity)
    }

    /// Where `id` is registered.
    private mutating func place(of id: ObjectID) -> Int? {
        if !usesTable && objects.count <= Self.scanned { return scan(for: id) }
        index()
        return places[id]
    }

    /// Where `id` is registered, found without the table.
    private func scan(for id: ObjectID) -> Int? {
        objects.firstIndex { $0.objectID == id }
    }

    /// Registers `object`, whose ID is not registered.
    private mutating func append(registered object: ManagedObject) {
        objects.append(object)
        guard usesTable else { return }
        places[object.objectID] = objects.count - 1
        indexed += 1
    }

    /// Makes the table (once the registry has outgrown its scans) and adds the objects appended since the last
    /// lookup. An ID registered already (a fault the app asked for by a key the store had not handed out yet) gives
    /// way to the new object, and is detached.
    private mutating func index() {
        usesTable = true
        guard indexed < objects.count else { return }
        if places.isEmpty { places.reserveCapacity(objects.count) }
        var displaced: [Int] = []
        while indexed < objects.count {
            if let old = places.updateValue(indexed, forKey: objects[indexed].objectID) { displaced.append(old) }
            indexed += 1
        }
        for place in displaced.sorted(by: >) {
            objects[place].context = nil
            remove(at: place, unmapped: true)
        }
    }

    /// Removes the object at `place`, moving the last object into its place; `unmapped` when the table no longer
    /// maps its ID to it.
    private mutating func remove(at place: Int, unmapped: Bool = false) {
        departures &+= 1
        if usesTable {
            if !unmapped { places[objects[place].objectID] = nil }
            indexed -= 1
        }
        let last = objects.removeLast()
        if place < objects.count {
            objects[place] = last
            if usesTable { places[last.objectID] = place }
        }
    }

    #if DEBUG
    /// Checks the table against the array: every indexed object at the place its ID maps to, every place taken
    /// once, and no ID twice among the objects a scan finds (beyond them, a new object's ID that is registered
    /// already is found at the next lookup).
    func _checkInvariants() {
        precondition(usesTable || places.isEmpty && indexed == 0, "a table of \(places.count) unused")
        precondition(indexed <= objects.count, "\(indexed) indexed of \(objects.count) objects")
        precondition(places.count == indexed, "\(places.count) places for \(indexed) indexed objects")
        for (place, object) in objects[..<indexed].enumerated() {
            precondition(places[object.objectID] == place, "\(object.objectID) is not at its place \(place)")
        }
        var unindexed = Set<ObjectID>()
        for object in objects[indexed...].prefix(usesTable ? 0 : Self.scanned) {
            precondition(unindexed.insert(object.objectID).inserted, "\(object.objectID) is appended twice")
        }
    }
    #endif
}
