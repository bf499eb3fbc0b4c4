// store-demo: a live, sectioned list driven by a FetchedResultsController on an embedded store.
//
//   store-demo [--store PATH]            the tour, then live changes from other processes (Ctrl-C to quit)
//   store-demo --script [--store PATH]   the tour without a terminal, printing every batch (the tests use it)
//   store-demo --live [--store PATH]     the tour, then live changes, without a terminal (the tests use it)
//   store-demo add TITLE GROUP [RANK]    write from another process; also: move TITLE GROUP, delete TITLE
import EntityStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

var arguments = Array(CommandLine.arguments.dropFirst())
var storePath = FileManager.default.currentDirectoryPath + "/demo.store"
if let index = arguments.firstIndex(of: "--store"), index + 1 < arguments.count {
    storePath = arguments[index + 1]
    arguments.removeSubrange(index...(index + 1))
}
let scriptMode = arguments.contains("--script")
let liveMode = arguments.contains("--live")
arguments.removeAll { $0 == "--script" || $0 == "--live" }

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("store-demo: \(message)\n".utf8))
    exit(1)
}

do {
    if let command = arguments.first {
        try runWriter(command, Array(arguments.dropFirst()), storePath: storePath)
    } else {
        try await runTour(storePath: storePath, script: scriptMode, live: liveMode)
    }
} catch {
    fail("\(error)")
}
