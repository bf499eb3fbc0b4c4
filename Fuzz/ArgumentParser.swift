// libFuzzer target: store-inspect's argument parser must answer any argument list, never trap.
import StoreInspectCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let arguments = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    _ = try? parseArguments(arguments)
    return 0
}
