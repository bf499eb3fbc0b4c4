import EntityStore
import Foundation

/// Another process writing the store: one random change a save (an insert, a delete, a rename, a reorder, a move to
/// another shelf, sometimes a new one), each visible in the window's list. Paced by its stdin (one save per line
/// read, "saved N" printed after it) for the checks, or timed (`--every`) for the demo.
struct Writer {
    let options: Options

    init(_ options: Options) { self.options = options }

    func run() throws {
        let store = try Library.open(options.store)
        var generator = SplitMix(seed: options.seed)
        if let every = options.every {
            for index in 0... {
                Thread.sleep(forTimeInterval: every)
                try change(store, index, &generator)
            }
        }
        for index in 0..<options.saves {
            guard readLine() != nil else { return }
            // The wall clock as the save began (the bulk's changes made, not yet written).
            let began: UInt64
            if let bulk = options.bulk {
                began = try changeMany(store, bulk, index, &generator)
            } else {
                began = wallClockNanoseconds()
                try change(store, index, &generator)
            }
            FileHandle.standardOutput.write(Data("saved \(index) \(began)\n".utf8))
        }
    }

    private func change(_ store: PersistentStore, _ index: Int, _ g: inout SplitMix) throws {
        let context = ObjectContext(store: store, name: "writer")
        let books = try context.fetch(Book.self)
        let shelves = try context.fetch(Shelf.self, sortedBy: [SortKey(\Shelf.name)])
        let words = ["amber", "brook", "cedar", "delta", "ember", "fjord", "grove", "haven", "islet", "juniper"]
        func title() -> String {
            "\(words[Int(g.next() % 10)].capitalized) \(words[Int(g.next() % 10)]) w\(index)"
        }
        var choice = Int(g.next() % 5)
        if books.count < 12 { choice = 0 } else if books.count > 40, choice == 0 { choice = 1 }
        switch choice {
        case 0:
            let book = try context.insert(Book.self)
            book.title = title()
            book.position = Double(g.next() % 10_000) / 100
            book.shelf = shelves[Int(g.next() % UInt64(shelves.count))]
        case 1: try context.delete(books[Int(g.next() % UInt64(books.count))])
        case 2: books[Int(g.next() % UInt64(books.count))].title = title()
        case 3: books[Int(g.next() % UInt64(books.count))].position = Double(g.next() % 10_000) / 100 + 0.001
        default:
            let book = books[Int(g.next() % UInt64(books.count))]
            if shelves.count < 8, g.next() % 4 == 0 {
                let shelf = try context.insert(Shelf.self)
                shelf.name = "Shelf \(index)"
                book.shelf = shelf
            } else {
                let others = shelves.filter { $0.objectID != book.shelf?.objectID }
                book.shelf = others[Int(g.next() % UInt64(others.count))]
            }
        }
        try context.save()
    }
}

extension Writer {
    /// One save of `count` changes over the store's books: half renamed (in place), a third moved on their shelf,
    /// the rest split between new books and deleted ones.
    /// Returns the wall clock as the save began.
    fileprivate func changeMany(
        _ store: PersistentStore, _ count: Int, _ round: Int, _ g: inout SplitMix
    ) throws -> UInt64 {
        let context = ObjectContext(store: store, name: "writer")
        let shelves = try context.fetch(Shelf.self)
        let total = try context.count(Book.self)
        var picked = Set<Int>()
        while picked.count < count - count / 10 { picked.insert(Int(g.next() % UInt64(total))) }
        let books = try context.fetch(Book.self)
        for (n, index) in picked.enumerated() {
            let book = books[index]
            switch n % 9 {
            case 0...4: book.title = "\(book.title.split(separator: " ").prefix(2).joined(separator: " ")) r\(round)"
            case 5...7: book.position = Double(g.next() % 10_000_000) / 100
            default: try context.delete(book)
            }
        }
        for n in 0..<(count - picked.count) {
            let book = try context.insert(Book.self)
            book.title = "Bulk \(round) \(n)"
            book.position = Double(g.next() % 10_000_000) / 100
            book.shelf = shelves[n % shelves.count]
        }
        let began = wallClockNanoseconds()
        try context.save()
        return began
    }
}

/// Nanoseconds of the wall clock (CLOCK_REALTIME), comparable across processes.
func wallClockNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// A small seeded generator (the same saves for one seed, run after run).
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
