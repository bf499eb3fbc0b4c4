// libFuzzer target: the record decoder and the scan's record filters (numbers and text) must throw (or decline) on bad
// bytes, never trap.
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

/// The filter's text paths: a constant of other scripts (the starters' rule, the canonical check after the shared
/// bytes), a prefix, and lists short and long.
let textFilters = [
    "s == %@", "s != %@", "s BEGINSWITH %@", "s IN %@", "s IN %@",
].enumerated().map { position, format in
    let constant = "ab\u{E9}\u{65E5}\u{C0C1}x"
    let argument: PredicateArgument =
        switch position {
        case 3: .values([.string(constant), .string("ab"), .string("\u{439}")])
        case 4: .values((0..<20).map { .string("w\($0)") } + [.string(constant)])
        default: .value(.string(constant))
        }
    return RecordFilter(try! FetchPredicate(format: format, arguments: [argument]), entity: fixtureEntity)!
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    _ = try? RecordCodec.decode(bytes, entity: fixtureEntity)
    let needed = [true, false, true, false, true, false, true, false]
    _ = try? RecordCodec.decode(bytes, entity: fixtureEntity, needed: needed)
    _ = try? RecordCodec.validate(bytes, entity: fixtureEntity)
    _ = try? RecordCodec.rowVersion(bytes, entity: "Fuzz")
    _ = fixtureFilter.matches(bytes)
    for filter in textFilters { _ = filter.matches(bytes) }
    return 0
}
