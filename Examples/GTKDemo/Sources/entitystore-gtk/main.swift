import CGtk
import EntityStore
import Foundation
import GtkSupport

// entitystore-gtk [--store PATH] [--books N]            the demo: a window on a store (made and filled if new)
// entitystore-gtk --check [--store PATH] [--saves N] [--screenshots DIR] [--drop-splice K]
//                                                        the scripted checks (run under Xvfb by `make gtk-test`)
// entitystore-gtk writer --store PATH (--saves N --seed S [--bulk N] | --every SECONDS)
//                                                        another process's saves: paced by its stdin, or timed
// entitystore-gtk seed --store PATH --books N            a store filled, for the benchmark
// entitystore-gtk --bench --store PATH --launched-at NS [--saves N]
//                                                        the benchmark: first frame, and batches of 1% (gtk-bench)

struct Options {
    var store = FileManager.default.temporaryDirectory.appendingPathComponent("entitystore-gtk-demo").path
    var books = 200
    var check = false
    var saves = 1_000
    var seed: UInt64 = 7
    var every: Double?
    var screenshots: String?
    var dropSplice: Int?
    var writer = false
    var seedOnly = false
    var bench = false
    var launchedAt: UInt64?
    var bulk: Int?

    init(_ arguments: [String]) throws {
        var rest = arguments[...]
        if rest.first == "writer" {
            writer = true
            rest = rest.dropFirst()
        } else if rest.first == "seed" {
            seedOnly = true
            rest = rest.dropFirst()
        }
        func value(_ flag: String) throws -> String {
            guard let next = rest.popFirst() else { throw UsageError("\(flag) needs a value") }
            return next
        }
        func number<N: LosslessStringConvertible>(_ flag: String) throws -> N {
            let text = try value(flag)
            guard let number = N(text) else { throw UsageError("\(flag) takes a number, not '\(text)'") }
            return number
        }
        while let flag = rest.popFirst() {
            switch flag {
            case "--store": store = try value(flag)
            case "--books": books = try number(flag)
            case "--check": check = true
            case "--saves": saves = try number(flag)
            case "--seed": seed = try number(flag)
            case "--every": every = try number(flag)
            case "--screenshots": screenshots = try value(flag)
            case "--drop-splice": dropSplice = try number(flag)
            case "--bench": bench = true
            case "--launched-at": launchedAt = try number(flag)
            case "--bulk": bulk = try number(flag)
            default: throw UsageError("unknown argument '\(flag)'")
            }
        }
    }
}

struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("entitystore-gtk: \(message)\n".utf8))
    exit(1)
}

let options: Options
do { options = try Options(Array(CommandLine.arguments.dropFirst())) } catch { fail("\(error)") }

if options.writer {
    do { try Writer(options).run() } catch { fail("writer: \(error)") }
    exit(0)
}
if options.seedOnly {
    do {
        try Library.seed(ObjectContext(store: try Library.open(options.store), name: "seed"), books: options.books)
    } catch {
        fail("seed: \(error)")
    }
    exit(0)
}

gtk_init()
es_attach_main_queue()
let store: PersistentStore
do {
    // The checks start from a new store.
    if options.check, FileManager.default.fileExists(atPath: options.store) {
        try FileManager.default.removeItem(atPath: options.store)
    }
    store = try Library.open(options.store)
    let seeding = ObjectContext(store: store, name: "seed")
    if options.check {
        try Library.seedOfRZCollectionList(seeding)
    } else if !options.bench {
        try Library.seed(seeding, books: options.books)
    }
} catch {
    fail("cannot open the store at \(options.store): \(error)")
}
let window: BookWindow
do {
    window = try BookWindow(store: store, path: options.store, height: options.check ? 1_500 : 720)
} catch {
    fail("\(error)")
}
window.adapter.dropSplice = options.dropSplice
let loop = g_main_loop_new(nil, 0)
es_connect(
    window.window, "close-request",
    unsafeBitCast(
        { (_: gpointer?, loop: gpointer?) -> gboolean in
            g_main_loop_quit(OpaquePointer(loop))
            return 0
        } as @convention(c) (gpointer?, gpointer?) -> gboolean, to: GCallback.self), UnsafeMutableRawPointer(loop))
window.show()
// (Kept here: the benchmark lives as long as the main loop.)
let bench = options.bench ? Bench(window: window, options: options) : nil
bench?.start()
if options.check {
    let checker = Checker(window: window, options: options)
    Task { @MainActor in
        do {
            try await checker.run()
            print("entitystore-gtk: every check passed (\(checker.summary))")
            exit(0)
        } catch {
            fail("check failed: \(error)")
        }
    }
}
g_main_loop_run(loop)
window.writer?.terminate()
