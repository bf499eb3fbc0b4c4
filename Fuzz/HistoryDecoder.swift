// libFuzzer target: the history decoder must throw on bad bytes, never trap.
@testable import EntityStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    _ = try? HistoryCodec.decode(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
