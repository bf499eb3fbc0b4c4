// libFuzzer target: the predicate parser must throw on any text, never trap or hang.
import EntityStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let predicate = try? FetchPredicate(format: text, arguments: ["a", 1, 2.5, [1, 2]]) {
        // What parses prints back to text that parses to the same predicate.
        if (try? FetchPredicate(predicate.description)) != predicate { fatalError("round trip failed for \(text)") }
    }
    return 0
}
