// libFuzzer target: the record decoder and the scan's record filter must throw (or decline) on bad bytes, never
// trap.
import Foundation

@testable import EntityStore

let fixtureEntity = try! Schema(version: 1) {
    Entity("Fuzz") {
        Attribute("b", .bool, optional: true)
        Attribute("i", .int64, optional: true)
        Attribute("d", .double, optional: true)
        Attribute("s", .string, optional: true)
        Attribute("t", .date, optional: true)
        Attribute("x", .binary, optional: true)
        Attribute("u", .uuid, optional: true)
        Attribute("m", .decimal, optional: true)
    }
}.entities[0]

let fixtureFilter = RecordFilter(
    try! FetchPredicate(
        format: "b == YES AND i > 2 AND d < 1.5 AND t >= %@ AND i IN {1, 3, 9}",
        arguments: [.value(.date(Date(timeIntervalSinceReferenceDate: 0)))]),
    entity: fixtureEntity)!

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    _ = try? RecordCodec.decode(bytes, entity: fixtureEntity)
    let needed = [true, false, true, false, true, false, true, false]
    _ = try? RecordCodec.decode(bytes, entity: fixtureEntity, needed: needed)
    _ = try? RecordCodec.validate(bytes, entity: fixtureEntity)
    _ = try? RecordCodec.rowVersion(bytes, entity: "Fuzz")
    _ = fixtureFilter.matches(bytes)
    return 0
}
