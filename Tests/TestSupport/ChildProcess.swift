import Foundation

/// Runs the test helper executable (`es-test-helper`) or any program as a real child process.
public enum ChildProcess {
    /// The output of a finished process.
    public struct Output: Sendable {
        public var status: Int32
        public var terminationReason: Process.TerminationReason
        public var stdout: String
        public var stderr: String
    }

    /// The directory holding the built products (the test bundle's and the executables').
    public static var productsDirectory: URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
    }

    /// The path of a built executable of this package, such as `es-test-helper` or `store-inspect`.
    public static func executable(_ name: String) -> String {
        productsDirectory.appendingPathComponent(name).path
    }

    /// Starts `executable` with `arguments` and returns the running process with pipes on its output.
    public static func start(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil
    ) throws -> (Process, Pipe, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var merged = ProcessInfo.processInfo.environment
        merged["SWIFT_BACKTRACE"] = "enable=no"
        for (key, value) in environment ?? [:] { merged[key] = value }
        process.environment = merged
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return (process, out, err)
    }

    /// Runs `executable` to completion and returns its exit status and output.
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil
    ) throws -> Output {
        let (process, out, err) = try start(executable, arguments, environment: environment)
        // Read both pipes before waiting, so a chatty child cannot block on a full pipe.
        let errData = LockedData()
        let errReader = Thread { errData.set(err.fileHandleForReading.readDataToEndOfFile()) }
        errReader.start()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        while !errData.isSet { usleep(1000) }
        return Output(
            status: process.terminationStatus, terminationReason: process.terminationReason,
            stdout: String(decoding: outData, as: UTF8.self), stderr: String(decoding: errData.get(), as: UTF8.self))
    }

    /// Runs the package's test helper with a subcommand.
    public static func helper(_ arguments: [String], environment: [String: String]? = nil) throws -> Output {
        try run(executable("es-test-helper"), arguments, environment: environment)
    }
}

/// Data handed from a reader thread; guarded by a lock.
final class LockedData: @unchecked Sendable {
    // @unchecked Sendable: `data` and `done` are only touched while `lock` is held.
    private let lock = NSLock()
    private var data = Data()
    private var done = false

    func set(_ value: Data) {
        lock.withLock {
            data = value
            done = true
        }
    }

    var isSet: Bool { lock.withLock { done } }

    func get() -> Data { lock.withLock { data } }
}
