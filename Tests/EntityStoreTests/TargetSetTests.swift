import TestSupport
import Testing

@testable import EntityStore

/// `TargetSet`, the relationship targets' set, against the standard library's `Set` at random: versions copied and
/// changed apart (so that they share some chunks and not others), every answer compared with the model's, and the
/// chunks' order and sizes checked after every step.
@Suite struct TargetSetTests {
    /// Two entities, so that the order is by name and then by key, and keys that repeat across them.
    static func id(_ n: Int) -> ObjectID {
        ObjectID(entityName: n % 7 == 0 ? "Comic" : "Book", primaryKey: UInt64(n / 7 * 3 + n % 7 + 1))
    }

    func expectWellFormed(_ set: TargetSet, _ model: Set<ObjectID>, _ context: String) {
        #expect(set.count == model.count, "\(context)")
        #expect(set.ordered == model.sorted(), "\(context)")
        #expect(Array(set) == set.ordered, "\(context)")
        #expect(set.chunks.allSatisfy { !$0.isEmpty && $0.count <= TargetSet.chunkLimit }, "\(context)")
        #expect(set.chunks.map(\.count).reduce(0, +) == set.count, "\(context)")
        let all = set.ordered
        #expect(zip(all, all.dropFirst()).allSatisfy { $0 < $1 }, "\(context): not in order, or repeated")
    }

    @Test(arguments: [1, 2, 3, 4])
    func versionsChangedApartAnswerAsTheStandardLibrarysSets(seed: UInt64) {
        var g = SeededGenerator(seed: seed)
        var versions: [(set: TargetSet, model: Set<ObjectID>)] = [([], [])]
        // Sizes from a handful to a few thousand: one chunk, and many.
        let range = [12, 300, 1_500][Int(seed) % 3]
        for step in 0..<1_000 {
            var v = Int.random(in: 0..<versions.count, using: &g)
            var (set, model) = versions[v]
            switch Int.random(in: 0..<100, using: &g) {
            case 0..<45:
                let id = Self.id(Int.random(in: 0..<range, using: &g))
                let result = set.insert(id)
                #expect(result.inserted == model.insert(id).inserted)
                #expect(result.memberAfterInsert == id)
            case 45..<75:
                let id =
                    model.randomElement(using: &g).flatMap { Bool.random(using: &g) ? $0 : nil }
                    ?? Self.id(Int.random(in: 0..<range, using: &g))
                #expect(set.remove(id) == model.remove(id))
            case 75..<80:
                let ids = (0..<Int.random(in: 0..<200, using: &g)).map { _ in
                    Self.id(Int.random(in: 0..<range, using: &g))
                }
                set.formUnion(ids)
                model.formUnion(ids)
            case 80..<85:
                let ids = model.filter { _ in Int.random(in: 0..<3, using: &g) == 0 }
                set.subtract(ids)
                model.subtract(ids)
            case 85..<90:
                // A set built from scratch from the same IDs (shares no chunk with the others).
                set = TargetSet(model.shuffled(using: &g) + model.shuffled(using: &g).prefix(3))
            case 90..<95:
                versions.append((set, model))
                v = versions.count - 1
            default:
                if versions.count > 1 {
                    versions.remove(at: v)
                    continue
                }
            }
            versions[v] = (set, model)
            expectWellFormed(set, model, "seed \(seed) step \(step)")
            // Against another version: the one-pass comparisons.
            let (other, otherModel) = versions.randomElement(using: &g)!
            #expect((set == other) == (model == otherModel), "seed \(seed) step \(step)")
            let changes = set.changes(since: other)
            #expect(changes.added == model.subtracting(otherModel).sorted(), "seed \(seed) step \(step)")
            #expect(changes.removed == otherModel.subtracting(model).sorted(), "seed \(seed) step \(step)")
            #expect(set.subtracting(other).ordered == model.subtracting(otherModel).sorted())
            #expect(set.subtracting(otherModel).ordered == model.subtracting(otherModel).sorted())
            #expect(set.intersection(other).ordered == model.intersection(otherModel).sorted())
            #expect(set.intersection(otherModel).ordered == model.intersection(otherModel).sorted())
            #expect(set.isSubset(of: other) == model.isSubset(of: otherModel))
            #expect(set.isDisjoint(with: other) == model.isDisjoint(with: otherModel))
            #expect(set.isDisjoint(with: otherModel) == model.isDisjoint(with: otherModel))
            #expect(set.union(other).ordered == model.union(otherModel).sorted())
            let probe = Self.id(Int.random(in: 0..<range, using: &g))
            #expect(set.contains(probe) == model.contains(probe))
        }
        // Every version kept its own contents whatever was done to the others.
        for (set, model) in versions { expectWellFormed(set, model, "seed \(seed) at the end") }
    }

    @Test func aCopyChangedInOneChunkSharesTheOthers() {
        let ids = (0..<5_000).map { ObjectID(entityName: "Book", primaryKey: UInt64($0 + 1)) }
        let original = TargetSet(ids)
        var copy = original
        copy.insert(ObjectID(entityName: "Book", primaryKey: 100_000))
        copy.remove(ids[2_500])
        func storage(_ chunk: TargetSet.Chunk) -> UnsafeRawPointer? {
            chunk.withUnsafeBufferPointer { UnsafeRawPointer($0.baseAddress) }
        }
        let shared = Set(original.chunks.map(storage)).intersection(copy.chunks.map(storage))
        // Two chunks changed (the last, and the one that lost an ID); every other is the same storage.
        #expect(shared.count == original.chunks.count - 2)
        #expect(original.count == 5_000)
        #expect(copy.count == 5_000)
        let changes = copy.changes(since: original)
        #expect(changes.added == [ObjectID(entityName: "Book", primaryKey: 100_000)])
        #expect(changes.removed == [ids[2_500]])
        #expect(copy != original)
    }

    @Test func removalsJoinSmallChunks() {
        var set = TargetSet((0..<2_000).map { ObjectID(entityName: "Book", primaryKey: UInt64($0 + 1)) })
        for key in 1...2_000 where key % 50 != 0 { set.remove(ObjectID(entityName: "Book", primaryKey: UInt64(key))) }
        #expect(set.count == 40)
        // 40 IDs left from 32 chunks: joined as they shrank, not one chunk per survivor.
        #expect(set.chunks.count <= 2)
        #expect(set.ordered.map(\.primaryKey) == (1...40).map { UInt64($0 * 50) })
    }
}
