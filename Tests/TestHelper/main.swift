import EntityStore
// The test helper: a real second process for the multi-process, crash and file-mode tests.
//
// Usage: es-test-helper COMMAND ARGS...   (exit 0 on success, 1 with a message on stderr on failure)
import Foundation
import LMDB
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    exit(1)
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else { fail("usage: es-test-helper COMMAND ARGS...") }

func uint64Bytes(_ value: UInt64) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }

do {
    switch command {
    case "lmdb-counter-writer":
        // lmdb-counter-writer PATH COUNT: COUNT transactions, each writing key i and setting "counter" to i + 1, each
        // acknowledged with "wrote N" once committed.
        guard arguments.count == 3, let count = Int(arguments[2]) else { fail("usage: lmdb-counter-writer PATH N") }
        let env = try Environment.open(path: arguments[1])
        let db = try env.openDatabase("numbers")
        print("ready")
        fflush(nil)
        for i in 0..<count {
            try env.write { txn in
                try txn.put(uint64Bytes(UInt64(i)), Array("value \(i)".utf8), in: db)
                try txn.put(Array("counter".utf8), uint64Bytes(UInt64(i + 1)), in: db)
            }
            print("wrote \(i + 1)")
            fflush(nil)
        }
        print("done \(count)")

    case "lmdb-bulk-writer":
        // lmdb-bulk-writer PATH TAG MEGABYTES: writes MEGABYTES of 4 KiB values under keys "TAG-i".
        guard arguments.count == 4, let megabytes = Int(arguments[3]) else {
            fail("usage: lmdb-bulk-writer PATH TAG MEGABYTES")
        }
        let env = try Environment.open(path: arguments[1], options: .init(mapSize: 1 << 20))
        let db = try env.openDatabase("bulk")
        let value = [UInt8](repeating: UInt8(truncatingIfNeeded: arguments[2].utf8.first ?? 0), count: 4096)
        let total = megabytes * 256
        var written = 0
        while written < total {
            let batch = min(64, total - written)
            try env.write { txn in
                for i in written..<(written + batch) {
                    try txn.put(Array("\(arguments[2])-\(i)".utf8), value, in: db)
                }
            }
            written += batch
        }
        print("done \(written)")

    case "create-store-umask0":
        // create-store-umask0 PATH: creates a store under umask 000 and writes one key.
        guard arguments.count == 2 else { fail("usage: create-store-umask0 PATH") }
        umask(0)
        let env = try Environment.open(path: arguments[1])
        let db = try env.openDatabase("things")
        try env.write { txn in try txn.put(Array("k".utf8), Array("v".utf8), in: db) }
        print("created")

    case "lmdb-open":
        // lmdb-open PATH [readonly]: opens the environment, reads every database's entry count, prints them.
        guard arguments.count >= 2 else { fail("usage: lmdb-open PATH [readonly]") }
        let readOnly = arguments.count > 2 && arguments[2] == "readonly"
        let env = try Environment.open(path: arguments[1], options: .init(readOnly: readOnly))
        let names = try env.read { try $0.databaseNames() }
        for name in names {
            let db = try env.openDatabase(name, create: false)
            let stats = try env.read { try $0.statistics(db) }
            print("\(name) \(stats.entries)")
        }

    case "hold-read":
        // hold-read PATH: opens the environment read-only, begins a read transaction, prints "holding", and keeps
        // it until killed (a reader in the reader table).
        guard arguments.count == 2 else { fail("usage: hold-read PATH") }
        let env = try Environment.open(path: arguments[1], options: .init(readOnly: true))
        try env.read { _ in
            print("holding")
            fflush(nil)
            while true { sleep(60) }
        }

    case "lmdb-fork":
        // lmdb-fork PATH: opens an environment, forks; the child must refuse the inherited environment and open its
        // own; the parent checks that no reader slot of the child is left behind.
        guard arguments.count == 2 else { fail("usage: lmdb-fork PATH") }
        let env = try Environment.open(path: arguments[1])
        let db = try env.openDatabase("things")
        try env.write { txn in try txn.put(Array("k".utf8), Array("parent-value".utf8), in: db) }
        fflush(nil)
        let child = fork()
        if child == 0 {
            do {
                _ = try env.read { txn in try txn.get(Array("k".utf8), in: db) }
                print("child used the parent's environment")
                exit(2)
            } catch let error as LMDBError where error.code == .misuse {
                print("child refused the parent's environment")
            }
            let own = try Environment.open(path: arguments[1])
            guard own !== env else { fail("the child got the parent's environment from the registry") }
            let things = try own.openDatabase("things", create: false)
            let value = try own.read { txn in try txn.get(Array("k".utf8), in: things).map { Array($0) } }
            print("child read \(String(decoding: value ?? [], as: UTF8.self))")
            fflush(nil)
            exit(0)
        }
        var status: Int32 = 0
        waitpid(child, &status, 0)
        guard status == 0 else { fail("the child failed with status \(status)") }
        let readers = env.readerTable().dropFirst()
        if readers.contains(where: { $0.contains(" \(child) ") }) { fail("a reader slot of the child remains") }
        print("parent has no reader of the child")

    case "resource-cycles":
        // resource-cycles DIRECTORY CYCLES: opens, uses and releases CYCLES stores for every public path; fails when
        // descriptors, threads or mappings are left behind.
        guard arguments.count == 3, let cycles = Int(arguments[2]) else { fail("usage: resource-cycles DIR N") }
        let done = DispatchSemaphore(value: 0)
        let failure = LockedText()
        Task.detached {
            do { try await resourceCycles(directory: arguments[1], cycles: cycles) } catch { failure.set("\(error)") }
            done.signal()
        }
        done.wait()
        if let message = failure.value { fail(message) }

    case "ledger-create":
        // ledger-create PATH: a ledger of Ledger.accounts accounts.
        guard arguments.count == 2 else { fail("usage: ledger-create PATH") }
        try Ledger.create(at: arguments[1])
        print("created")

    case "ledger-writer":
        // ledger-writer PATH OPERATIONS SEED: OPERATIONS ledger operations, each acknowledged with "op N".
        guard arguments.count == 4, let operations = Int(arguments[2]), let seed = UInt64(arguments[3]) else {
            fail("usage: ledger-writer PATH OPERATIONS SEED")
        }
        try Ledger.write(path: arguments[1], operations: operations, seed: seed)

    case "ledger-reader":
        // ledger-reader PATH: checks the total in one snapshot, again and again, until standard input ends.
        guard arguments.count == 2 else { fail("usage: ledger-reader PATH") }
        try Ledger.read(path: arguments[1])

    case "library-worker":
        // library-worker PATH STEPS CHECKS SEED [auto]: the multi-process library workload (LibraryWorkload) until
        // standard input ends and at least STEPS steps and CHECKS checks are done; with `auto`, merging the others'
        // saves as the store delivers them.
        guard arguments.count == 5 || (arguments.count == 6 && arguments[5] == "auto"),
            let steps = Int(arguments[2]), let checks = Int(arguments[3]), let seed = UInt64(arguments[4])
        else {
            fail("usage: library-worker PATH STEPS CHECKS SEED [auto]")
        }
        try LibraryWorkload.run(
            path: arguments[1], steps: steps, checks: checks, seed: seed, mergesAutomatically: arguments.count == 6)

    case "open-library":
        // open-library PATH VARIANT: opens (or creates) the library store with the plain schema (a) or the one with
        // Tag.color at the same version (b); prints "opening" first, then "opened" or fails naming the error's code.
        guard arguments.count == 3 else { fail("usage: open-library PATH a|b") }
        print("opening")
        fflush(nil)
        let schema =
            arguments[2] == "b" ? try Fixtures.librarySchemaWithTagColor(version: 1) : try Fixtures.librarySchema()
        do {
            _ = try PersistentStore.open(path: arguments[1], schema: schema)
            print("opened")
        } catch let error as EntityStoreError {
            fail("error \(error.code.rawValue): \(error.message)")
        }

    case "tag-saver-until-error":
        // tag-saver-until-error PATH: saves tags on the plain library schema until a save fails; prints the error's
        // code on stdout.
        guard arguments.count == 2 else { fail("usage: tag-saver-until-error PATH") }
        let store = try PersistentStore.open(path: arguments[1], schema: try Fixtures.librarySchema())
        var saved = 0
        while true {
            do {
                let context = ObjectContext(store: store, name: "old schema")
                let tag = try context.insert("Tag")
                try tag.setValue(.string("old-\(getpid())-\(saved)"), forKey: "name")
                try context.save()
                saved += 1
                if saved == 20 {
                    print("ready")
                    fflush(nil)
                }
            } catch let error as EntityStoreError {
                print("stopped after \(saved): \(error.code.rawValue)")
                break
            }
        }

    case "project-saver":
        // project-saver PATH SEED: one save on a project store: renames a project and adds a task to it.
        guard arguments.count == 3, let seed = UInt64(arguments[2]) else { fail("usage: project-saver PATH SEED") }
        let store = try PersistentStore.open(path: arguments[1], schema: try Fixtures.projectSchema())
        let context = ObjectContext(store: store, name: "project-saver")
        var g = SeededGenerator(seed: seed)
        let projects = try context.fetch(FetchRequest(entity: "Project", sortKeys: [SortKey("name")]))
        guard let project = projects.randomElement(using: &g) else { fail("no project") }
        try project.setValue(.string("P\(Int.random(in: 0..<6, using: &g))"), forKey: "name")
        let task = try context.insert("Task")
        try task.setValue(.string("x\(seed)"), forKey: "title")
        try task.setValue(.int(Int64.random(in: 0..<50, using: &g)), forKey: "rank")
        try task.setObject(project, forKey: "project")
        try context.save()
        print("saved")

    case "library-store":
        // library-store PATH [BOOKS]: creates a library fixture store with a few authors, books and tags, and BOOKS
        // more books with every attribute type set (for store-inspect's streaming measurements).
        guard arguments.count == 2 || (arguments.count == 3 && Int(arguments[2]) != nil) else {
            fail("usage: library-store PATH [BOOKS]")
        }
        let store = try PersistentStore.open(path: arguments[1], schema: try Fixtures.librarySchema())
        let context = ObjectContext(store: store, name: "fixture")
        var authors: [ManagedObject] = []
        for (name, email) in [
            ("Ursula Le Guin", "ursula@example.org"), ("Michael Ende", nil), ("Albert Camus", "albert@example.fr"),
        ] {
            let author = try context.insert("Author")
            try author.setValue(.string(name), forKey: "name")
            try author.setValue(email.map(Value.string) ?? .null, forKey: "email")
            authors.append(author)
        }
        let tag = try context.insert("Tag")
        try tag.setValue("classic", forKey: "name")
        for (i, title) in ["The Dispossessed", "Momo", "L'Étranger", "La Peste", "Die unendliche Geschichte"]
            .enumerated()
        {
            let book = try context.insert("Book")
            try book.setValue(.string(title), forKey: "title")
            try book.setValue(.int(Int64(100 + 50 * i)), forKey: "pages")
            try book.setObject(authors[[0, 1, 2, 2, 1][i]], forKey: "author")
            if i % 2 == 0 { try book.add(tag, toKey: "tags") }
        }
        try context.save()
        let more = arguments.count == 3 ? Int(arguments[2])! : 0
        for start in stride(from: 0, to: more, by: 10_000) {
            var rows: [[Value]] = []
            for i in start..<min(more, start + 10_000) {
                let title: Value = .string("Book number \(i), a title of some length")
                let price: Value = .decimal(Decimal(i) / 100)
                let cover: Value = .data([UInt8](repeating: UInt8(i & 0xFF), count: 32))
                let score: Value = .double(Double(i) / 7)
                rows.append([title, .int(Int64(i % 1000)), price, .uuid(UUID()), cover, score, .bool(i % 3 == 0)])
            }
            try store.batchInsert(
                into: "Book", keys: ["title", "pages", "price", "isbn", "cover", "score", "inPrint"], rows: rows)
        }
        print("created")

    case "bank-saver":
        // bank-saver PATH FIRST-SERIAL: prints "ready" once the store is open, then transfers in a loop, printing
        // "acked N" after each committed save, until killed.
        guard arguments.count == 3, var serial = Int64(arguments[2]) else { fail("usage: bank-saver PATH SERIAL") }
        let store = try PersistentStore.open(path: arguments[1], schema: try Fixtures.bankSchema())
        let context = ObjectContext(store: store, name: "bank-saver")
        print("ready")
        fflush(nil)
        var generator = SystemRandomNumberGenerator()
        while true {
            try Fixtures.transfer(context, serial: serial, using: &generator)
            print("acked \(serial)")
            fflush(nil)
            serial += 1
        }

    case "bank-reader":
        // bank-reader PATH: reads the bank's snapshot in a loop, checking that balances keep their total, printing
        // "read N" after every tenth read, until standard input ends.
        guard arguments.count == 2 else { fail("usage: bank-reader PATH") }
        let store = try PersistentStore.open(path: arguments[1], schema: try Fixtures.bankSchema())
        let stop = StopRequest()
        var reads = 0
        repeat {
            let (total, _) = try Fixtures.bankState(store)
            if total != Fixtures.bankTotal { fail("violation: total \(total)") }
            reads += 1
            if reads % 10 == 0 {
                print("read \(reads)")
                fflush(nil)
            }
        } while !stop.isRequested
        print("reads \(reads)")

    case "migrate-library":
        // migrate-library PATH: opens a library store with the migrated schema (Fixtures.librarySchemaMigrated).
        guard arguments.count == 2 else { fail("usage: migrate-library PATH") }
        print("opening")
        fflush(nil)
        _ = try PersistentStore.open(path: arguments[1], schema: try Fixtures.librarySchemaMigrated())
        print("migrated")

    case "note-saver", "note-saver-retrying":
        // note-saver PATH COUNT [WORKLOAD]: COUNT steps of a NoteWorkload (saves by default) on a note store, printing
        // "ack i" once step i returned (the crash-consistency tests record the writes under it).
        //
        // note-saver-retrying PATH COUNT [WORKLOAD]: the same under an injected I/O fault. A step that fails prints
        // "failed i: <error>" and is made again (its context saved again while it holds the changes) up to twice
        // ("failed i again: <error>"); if it still fails, the store is opened afresh ("reopened i", then "intact i"
        // when it holds exactly what the steps before left) and the step made there. An open that fails is tried
        // again the same way ("failed open: <error>").
        guard arguments.count == 3 || arguments.count == 4, let count = Int(arguments[2]),
            let workload = arguments.count == 4 ? NoteWorkload(rawValue: arguments[3]) : .saves
        else { fail("usage: \(command) PATH COUNT [\(NoteWorkload.allCases.map(\.rawValue).joined(separator: "|"))]") }
        let retrying = command == "note-saver-retrying"
        // Written with write(2) itself (stdio's own writes bypass an LD_PRELOAD shim's write).
        func say(_ text: String) {
            let line = Array((text + "\n").utf8)
            guard line.withUnsafeBytes({ write(1, $0.baseAddress, $0.count) }) == line.count else {
                fail("could not write '\(text)'")
            }
        }
        func open() throws -> PersistentStore {
            for _ in 0..<(retrying ? 2 : 0) {
                do {
                    return try PersistentStore.open(
                        path: arguments[1], schema: try NoteFixture.schema(), options: workload.options)
                } catch {
                    say("failed open: \(error)")
                }
            }
            return try PersistentStore.open(
                path: arguments[1], schema: try NoteFixture.schema(), options: workload.options)
        }
        var context = ObjectContext(store: try open())
        // One part of step i, made again as the usage says when it fails; `before` is what the store holds before it.
        func make(_ i: Int, before: Int, _ part: (ObjectContext) throws -> Void) throws {
            guard retrying else { return try part(context) }
            do {
                return try part(context)
            } catch {
                say("failed \(i): \(error)")
            }
            for _ in 0..<2 {
                do {
                    return try context.hasChanges ? context.save() : part(context)
                } catch {
                    say("failed \(i) again: \(error)")
                }
            }
            context = ObjectContext(store: try open())
            say("reopened \(i)")
            if try NoteFixture.notes(context.store) == workload.expected(after: before) { say("intact \(i)") }
            try part(context)
        }
        for i in 1...count {
            try make(i, before: i - 1) { try workload.step(i, store: $0.store, context: $0) }
            try make(i, before: i) { try workload.finish(i, store: $0.store) }
            say("ack \(i)")
        }

    case "people-store":
        // people-store PATH COUNT: a version-1 store of COUNT people (PeopleFixture).
        guard arguments.count == 3, let count = Int(arguments[2]) else { fail("usage: people-store PATH COUNT") }
        try PeopleFixture.make(at: arguments[1], count: count)
        print("made")

    case "migrate-people":
        // migrate-people PATH CHUNK: opens a people store with PeopleFixture's plan in chunks of CHUNK objects,
        // printing "progress N" for each report (N objects rewritten), then "ack 1" and "migrated".
        guard arguments.count == 3, let chunk = Int(arguments[2]) else { fail("usage: migrate-people PATH CHUNK") }
        print("opening")
        fflush(nil)
        let plan = try PeopleFixture.plan(chunkSize: chunk) { report in
            print("progress \(report.completed)")
            fflush(nil)
        }
        _ = try PersistentStore.open(path: arguments[1], plan: plan)
        // The acknowledgement the crash-consistency test records, by write(2) itself (stdio bypasses its shim).
        let ack = Array("ack 1\n".utf8)
        guard ack.withUnsafeBytes({ write(1, $0.baseAddress, $0.count) }) == ack.count else {
            fail("could not write the acknowledgement")
        }
        print("migrated")

    case "open-mismatched":
        // open-mismatched PATH: opens a library store with a schema whose Book.pages changed type.
        guard arguments.count == 2 else { fail("usage: open-mismatched PATH") }
        var schema = try Fixtures.librarySchema(version: 2)
        if let book = schema.entities.firstIndex(where: { $0.name == "Book" }),
            let pages = schema.entities[book].attributes.firstIndex(where: { $0.name == "pages" })
        {
            schema.entities[book].attributes[pages] = Attribute("pages", .string, optional: true)
        }
        _ = try PersistentStore.open(path: arguments[1], schema: schema)
        print("opened")

    case "tag-saver":
        // tag-saver PATH COUNT [prune]: COUNT saves on the fixture library store, each inserting one Tag "t<i>";
        // with `prune`, each then prunes the history up to its own entry (an app that keeps no history).
        guard arguments.count == 3 || (arguments.count == 4 && arguments[3] == "prune"), let count = Int(arguments[2])
        else { fail("usage: tag-saver PATH N [prune]") }
        let store = try PersistentStore.open(path: arguments[1], schema: try Fixtures.librarySchema())
        let context = ObjectContext(store: store, name: "helper")
        for i in 0..<count {
            let tag = try context.insert("Tag")
            try tag.setValue(.string("t\(getpid())-\(i)"), forKey: "name")
            try context.save()
            if arguments.count == 4 { try store.pruneHistory(before: try store.lastTransaction() + 1) }
        }
        print("saved \(count)")

    case "author-upserter":
        // author-upserter PATH ROUNDS TAG: ROUNDS batch upserts on the fixture library store, each of the ten
        // authors "shared-K@example.com" (the case varied by round), named "TAG-ROUND".
        guard arguments.count == 4, let rounds = Int(arguments[2]) else { fail("usage: author-upserter PATH N TAG") }
        let store = try PersistentStore.open(path: arguments[1], schema: try Fixtures.librarySchema())
        for round in 0..<rounds {
            let objects: [[String: Value]] = (0..<10).map { k in
                let email = "shared-\(k)@example.com"
                return [
                    "email": .string(round % 2 == 0 ? email : email.uppercased()),
                    "name": .string("\(arguments[3])-\(round)"), "rating": .int(Int64(round)),
                ]
            }
            try store.batchInsert(into: "Author", objects: objects, onConflict: .update)
        }
        print("upserted \(rounds)")

    case "misuse-context":
        // misuse-context PATH: makes a context on an actor, then saves with it from the main thread (as an
        // `@unchecked Sendable` wrapper lets an app do): a debug build traps at the first use, naming the context.
        guard arguments.count == 2 else { fail("usage: misuse-context PATH") }
        let store = try PersistentStore.open(path: arguments[1], schema: try Fixtures.librarySchema())
        let made = DispatchSemaphore(value: 0)
        let box = Locked<UncheckedBox<ObjectContext>?>(nil)
        let home = MisuseHome()
        Task.detached {
            let context = await home.makeContext(store)
            box.withLock { $0 = context }
            made.signal()
        }
        made.wait()
        guard let context = box.withLock({ $0 }) else { fail("no context made") }
        print("saving outside the actor")
        fflush(nil)
        try context.value.insert("Author").setValue(.string("Ann"), forKey: "name")
        try context.value.save()
        print("not trapped")

    case "key-path-memory":
        // key-path-memory DIRECTORY N: see `keyPathMemory(directory:count:)`.
        guard arguments.count == 3, let count = Int(arguments[2]) else { fail("usage: key-path-memory DIR N") }
        try keyPathMemory(directory: arguments[1], count: count)

    default:
        fail("unknown command \(command)")
    }
} catch {
    fail("\(command) failed: \(error)")
}

/// The actor `misuse-context` makes its context on.
actor MisuseHome {
    func makeContext(_ store: PersistentStore) -> UncheckedBox<ObjectContext> {
        UncheckedBox(ObjectContext(store: store, name: "screen"))
    }
}

/// A value handed across isolation as an app's `@unchecked Sendable` wrapper would (for `misuse-context`).
final class UncheckedBox<Value>: @unchecked Sendable {
    // @unchecked Sendable: deliberately unsafe, to show the debug check that catches the misuse.
    let value: Value
    init(_ value: Value) { self.value = value }
}
