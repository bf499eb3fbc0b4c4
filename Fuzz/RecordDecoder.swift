// libFuzzer target: the record decoder must throw on bad bytes, never trap.
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

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    _ = try? RecordCodec.decode(bytes, entity: fixtureEntity)
    let needed = [true, false, true, false, true, false, true, false]
    _ = try? RecordCodec.decode(bytes, entity: fixtureEntity, needed: needed)
    return 0
}
