import Foundation
import TestSupport
import Testing

@Suite struct DemoScriptTests {
    @Test func theScriptedTourDeliversTheExpectedBatches() throws {
        let dir = try TemporaryDirectory(prefix: "store-demo-test")
        defer { dir.remove() }
        let output = try ChildProcess.run(
            ChildProcess.executable("store-demo"), ["--script", "--store", dir.path("demo.store")])
        #expect(output.status == 0, "\(output.stderr)")
        let lines = output.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let expected = [
            "  now: [0] Jill Jack | [1] Garfunkel Simon | [2] Clyde Bonnie Jerry Ben | [4] Nu:Tone Technicolour",
            "",
            "1. Seed 002, the RZCollectionList batch: four deletes, two inserts in a new group, two moves, an update",
            "  delete section 1 [1]",
            "  delete section 0 [0]",
            "  insert section 2 [420]",
            "  move Jerry [2,2] -> [0,0]",
            "  move Ben [2,3] -> [0,1]",
            "  update Technicolour [3,1] -> [1,1]",
            "  now: [2] Jerry Ben Clyde Bonnie | [4] Nu:Tone Technicolour | [420] Cheech Chong",
            "",
            "2. Seed 004: Nu:Tone moves to group 420 while group 2 empties: its path is [1,0] before and after",
            "  delete section 0 [2]",
            "  move Nu:Tone [1,0] -> [1,0]",
            "  now: [4] Technicolour | [420] Nu:Tone Cheech Chong",
            "",
            "3. A user-driven reorder: the user drags Chong to the top of group 420; the UI shows it already, so nothing"
                + " is delivered",
            "  now: [4] Technicolour | [420] Chong Nu:Tone Cheech",
            "  (no callbacks)",
            "",
            "4. Another process writes (store-demo add Moby 4 0 --store ...); the change arrives live",
            "  insert Moby at [0,0]",
            "  now: [4] Moby Technicolour | [420] Chong Nu:Tone Cheech",
            "",
            "5. A background importer (an actor owning its context) adds two items; the list follows on the main actor",
            "  insert Moss at [0,2]",
            "  insert Lichen at [1,3]",
            "  now: [4] Moby Technicolour Moss | [420] Chong Nu:Tone Cheech Lichen",
            "",
            "6. performBackgroundTask: Sendable snapshots of group 420, read on a background thread",
            "  Chong (rank -1), Nu:Tone (rank 0), Cheech (rank 1), Lichen (rank 9)",
            "",
            "done: 6 transactions saved",
            "",
        ]
        #expect(Array(lines.dropFirst()) == expected)
        #expect(lines.first?.hasPrefix("EntityStore demo: a FetchedResultsController over ") == true)
    }

    @Test func aWriterCommandWithBadArgumentsFailsClearly() throws {
        let dir = try TemporaryDirectory(prefix: "store-demo-test")
        defer { dir.remove() }
        let output = try ChildProcess.run(
            ChildProcess.executable("store-demo"), ["add", "--store", dir.path("s.store")])
        #expect(output.status == 1)
        #expect(output.stderr.hasPrefix("store-demo: usage: store-demo add TITLE GROUP"))
    }
}
