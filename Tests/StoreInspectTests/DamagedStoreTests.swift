import Foundation
import TestSupport
import Testing

/// store-inspect on damaged copies of a store: whatever the damage, an exit code (0, 1 for findings, 65 for a
/// damaged store), never a death by a signal. LMDB itself faults on some of these (a branch pointing past the end of
/// the file): the CLI reports the page instead.
@Suite struct DamagedStoreTests {
    @Test func randomByteFlipsNeverKillTheCLIByASignal() throws {
        let store = try InspectedStore()
        defer { store.remove() }
        let original = try #require(FileManager.default.contents(atPath: store.path + "/data.mdb"))
        let copies = TestScale.size(100, stress: 2_000)
        var generator = SeededGenerator(seed: 2026)
        var codes: [Int32: Int] = [:]
        var pageReports = 0
        for copy in 0..<copies {
            let path = store.directory.path("damaged-\(copy)")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            var data = original
            // Past the two meta pages (damage there is the preflight's, tested elsewhere).
            for _ in 0..<Int.random(in: 1...8, using: &generator) {
                data[Int.random(in: 8192..<data.count, using: &generator)] = UInt8.random(
                    in: 0...255, using: &generator)
            }
            try data.write(to: URL(fileURLWithPath: path + "/data.mdb"))
            for command in [["check", path], ["export", path, "--all", "--format", "ndjson"], ["ls", path, "Book"]] {
                let output = try inspect(command)
                #expect(output.terminationReason == .exit, "copy \(copy) \(command[0]): \(output.stderr.suffix(300))")
                #expect([0, 1, 65].contains(output.status), "copy \(copy) \(command[0]): \(output.stderr)")
                codes[output.status, default: 0] += 1
                if output.stderr.contains("faulted") {
                    pageReports += 1
                    #expect(output.stderr.hasPrefix("store-inspect \(command[0]): the store at \(path) is damaged"))
                    #expect(output.stderr.split(separator: "\n").count == 1)
                    // The database the read was in when LMDB faulted (or that it was opening the store).
                    #expect(
                        output.stderr.contains(", reading the database ")
                            || output.stderr.contains(", before any database was read"), "\(output.stderr)")
                }
            }
            try FileManager.default.removeItem(atPath: path)
        }
        print(
            "damaged copies: \(copies), exit codes \(codes.sorted { $0.key < $1.key }), faults reported \(pageReports)")
        #expect(codes[65, default: 0] > 0)
    }
}
