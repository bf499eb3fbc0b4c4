import Foundation
import TestSupport

/// Runs the built `store-inspect` binary.
func inspect(_ arguments: [String], environment: [String: String]? = nil) throws -> ChildProcess.Output {
    try ChildProcess.run(ChildProcess.executable("store-inspect"), arguments, environment: environment)
}

/// A library fixture store made by a real process, in a temporary directory.
struct InspectedStore {
    let directory: TemporaryDirectory
    var path: String { directory.path("lib.store") }

    /// The fixture, with `books` more books (every attribute type set) when given.
    init(books: Int = 0) throws {
        directory = try TemporaryDirectory(prefix: "store-inspect-test")
        let made = try ChildProcess.helper(
            ["library-store", directory.path("lib.store")] + (books > 0 ? [String(books)] : []))
        guard made.status == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: made.stderr])
        }
    }

    /// A digest of the data file, to show it was not modified.
    func dataDigest() -> [UInt8] {
        let data = FileManager.default.contents(atPath: path + "/data.mdb") ?? Data()
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in data {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return withUnsafeBytes(of: hash) { Array($0) } + withUnsafeBytes(of: data.count) { Array($0) }
    }

    func remove() { directory.remove() }
}
