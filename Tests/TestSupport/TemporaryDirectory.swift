import Foundation

/// A fresh directory under the system's temporary directory, removed with everything in it by ``remove()``.
///
/// ```swift
/// let dir = try TemporaryDirectory()
/// defer { dir.remove() }
/// let env = try Environment.open(path: dir.path("test.store"))
/// ```
public struct TemporaryDirectory: Sendable {
    /// The directory's absolute path.
    public let path: String

    /// Creates a new, empty directory whose name starts with `prefix`.
    ///
    /// With `inMemory`, the directory is on `/dev/shm` (a tmpfs, where a sync costs nothing) when there is one: for
    /// tests that make thousands of stores and whose subject is not the disk (the I/O calls themselves, say).
    public init(prefix: String = "entitystore-test", inMemory: Bool = false) throws {
        var base = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
        if inMemory && access("/dev/shm", W_OK) == 0 { base = "/dev/shm" }
        var template = Array("\(base)/\(prefix)-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard made != nil else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: "\(base)/\(prefix)-XXXXXX"])
        }
        path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// A path inside the directory.
    public func path(_ name: String) -> String { path + "/" + name }

    /// Removes the directory and everything in it.
    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
