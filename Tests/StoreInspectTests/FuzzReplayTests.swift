import Foundation
import StoreInspectCore
import Testing

@testable import EntityStore

/// Replays the fuzz corpora and every crashing input the fuzzers ever found (Fuzz/corpus, Fuzz/crashers): each
/// must be answered (parsed, refused or thrown), never trap.
@Suite struct FuzzReplayTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz")

    func inputs(_ target: String) -> [Data] {
        ["corpus", "crashers"].flatMap { kind -> [Data] in
            let dir = Self.root.appendingPathComponent(kind).appendingPathComponent(target)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
            return names.filter { !$0.hasPrefix(".") }.compactMap {
                FileManager.default.contents(atPath: dir.appendingPathComponent($0).path)
            }
        }
    }

    @Test func theCorporaAndCrashersReplayWithoutTrapping() throws {
        let entity = try #require(
            try Schema(version: 1) { Entity("Fuzz") { Attribute("s", .string, optional: true) } }.entities.first)
        var replayed = 0
        for data in inputs("RecordDecoder") {
            _ = data.withUnsafeBytes { try? RecordCodec.decode($0, entity: entity) }
            replayed += 1
        }
        for data in inputs("HistoryDecoder") {
            _ = data.withUnsafeBytes { try? HistoryCodec.decode($0) }
            replayed += 1
        }
        for data in inputs("PredicateParser") {
            let text = String(decoding: data, as: UTF8.self)
            if let predicate = try? FetchPredicate(format: text, arguments: ["a", 1, 2.5, [1, 2]]) {
                #expect(try FetchPredicate(predicate.description) == predicate, "\(text)")
            }
            replayed += 1
        }
        for data in inputs("ArgumentParser") {
            let arguments = String(decoding: data, as: UTF8.self).split(
                separator: "\n", omittingEmptySubsequences: false
            ).map(String.init)
            _ = try? parseArguments(arguments)
            replayed += 1
        }
        #expect(replayed >= 20)
    }
}
