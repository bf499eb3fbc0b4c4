import Foundation
import TestSupport
import Testing

/// The caches behind typed key paths stay bounded: key paths built at run time (new objects each time) and a
/// generic model class's (made anew at each access) are found by equality past a few kept by identity. Before, each
/// new object copied the whole lookup table, which was never freed, and a generic model's every access added one:
/// 20,000 of them took resident memory to 10 GB. Measured in a process of its own (other tests' memory would blur
/// it).
@Suite struct KeyPathMemoryTests {
    @Test func runTimeKeyPathsAndAGenericModelsReadsKeepMemoryBounded() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let output = try ChildProcess.helper(["key-path-memory", directory.path, "100000"])
        try #require(output.status == 0, "\(output.stderr)")
        let words = output.stdout.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        let (before, after) = (Int(words[1]) ?? 0, Int(words[2]) ?? 0)
        #expect(before > 0)
        #expect(after - before < 20 << 20, "resident memory grew by \((after - before) >> 20) MiB")
    }
}
