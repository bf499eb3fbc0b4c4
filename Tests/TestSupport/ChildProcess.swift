import Foundation

#if canImport(Glibc)
import Glibc
#endif

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

    /// Runs `executable` to completion, its standard input empty, and returns its exit status and output.
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil
    ) throws -> Output {
        let child = try RunningProcess(executable, arguments, environment: environment)
        child.stop()
        return child.finish()
    }

    /// Runs the package's test helper with a subcommand.
    public static func helper(_ arguments: [String], environment: [String: String]? = nil) throws -> Output {
        try run(executable("es-test-helper"), arguments, environment: environment)
    }
}

/// A child process whose output is read line by line while it runs, so that a test waits for what the child says
/// (an acknowledged save, a finished step) instead of sleeping and hoping. Both pipes are drained on threads of their
/// own, so a chatty child never blocks on a full pipe; its standard input is a pipe that ``stop()`` closes, the
/// signal for children that run until told to end.
public final class RunningProcess: @unchecked Sendable {
    // @unchecked Sendable: `lines`, `partial`, `stderr` and the end flags are only touched while `condition` is held;
    // `process` and the pipes are set once in `init`.
    public let process: Process
    private let input: FileHandle
    private let condition = NSCondition()
    private var lines: [String] = []
    private var partial = Data()
    private var errorOutput = Data()
    private var outputEnded = false
    private var errorEnded = false
    private var inputClosed = false
    /// How long a wait lasts before the test is failed as hung: generous, since it only ends a hang (a busy or
    /// single-core machine may be many times slower than a quiet one).
    public static let hangDeadline: TimeInterval = 600

    /// Starts `executable` with `arguments`.
    public init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var merged = ProcessInfo.processInfo.environment
        merged["SWIFT_BACKTRACE"] = "enable=no"
        for (key, value) in environment ?? [:] { merged[key] = value }
        process.environment = merged
        // Pipes made close-on-exec in one step: a process another test starts meanwhile inherits none of their
        // ends (a stray copy of the input's write end would keep the child from ever seeing it end). The child's
        // ends become its 0, 1 and 2, which are not close-on-exec.
        let (inputRead, inputWrite) = try Self.pipe()
        let (outRead, outWrite) = try Self.pipe()
        let (errRead, errWrite) = try Self.pipe()
        input = inputWrite
        process.standardInput = inputRead
        process.standardOutput = outWrite
        process.standardError = errWrite
        defer {
            for handle in [inputRead, outWrite, errWrite] { handle.closeFile() }
        }
        do {
            try process.run()
        } catch {
            for handle in [inputWrite, outRead, errRead] { handle.closeFile() }
            throw error
        }
        Thread.detachNewThread { [self] in drain(outRead, isError: false) }
        Thread.detachNewThread { [self] in drain(errRead, isError: true) }
    }

    private static func pipe() throws -> (read: FileHandle, write: FileHandle) {
        var fds: [Int32] = [0, 0]
        guard systemPipe2(&fds, O_CLOEXEC) == 0 else { throw ChildProcessError("pipe2 failed: errno \(errno)") }
        return (
            FileHandle(fileDescriptor: fds[0], closeOnDealloc: true),
            FileHandle(fileDescriptor: fds[1], closeOnDealloc: true)
        )
    }

    /// Starts the package's test helper with a subcommand.
    public static func helper(_ arguments: [String], environment: [String: String]? = nil) throws -> RunningProcess {
        try RunningProcess(ChildProcess.executable("es-test-helper"), arguments, environment: environment)
    }

    private func drain(_ handle: FileHandle, isError: Bool) {
        while true {
            let chunk = handle.availableData
            condition.lock()
            if chunk.isEmpty {
                handle.closeFile()
                if isError { errorEnded = true } else { outputEnded = true }
                condition.broadcast()
                condition.unlock()
                return
            }
            if isError {
                errorOutput.append(chunk)
            } else {
                partial.append(chunk)
                while let newline = partial.firstIndex(of: UInt8(ascii: "\n")) {
                    lines.append(String(decoding: partial[partial.startIndex..<newline], as: UTF8.self))
                    partial.removeSubrange(partial.startIndex...newline)
                }
            }
            condition.broadcast()
            condition.unlock()
        }
    }

    /// The complete lines the child has written to its standard output so far.
    public var outputLines: [String] { condition.withLock { lines } }

    /// What the child has written to its standard error so far.
    public var errorText: String { condition.withLock { String(decoding: errorOutput, as: UTF8.self) } }

    /// Waits until the child has written `count` lines that satisfy `predicate` (counting every line it wrote since
    /// it started) and returns how many it has written. Throws when the child's output ends first (it exited) or
    /// after ``hangDeadline``.
    @discardableResult
    public func waitForLines(
        _ count: Int = 1, _ what: String, where predicate: (String) -> Bool
    ) throws -> Int {
        let (found, ended) = try waitForLinesOrEnd(count, what, where: predicate)
        if ended && found < count {
            throw ChildProcessError(
                "the child ended after \(found) of \(count) lines of \(what); stderr: \(errorText.prefix(2000))")
        }
        return found
    }

    /// Waits until the child has written `count` lines that satisfy `predicate`, or its output ended (it exited):
    /// how many it wrote, and whether it ended first. Throws after ``hangDeadline``.
    public func waitForLinesOrEnd(
        _ count: Int, _ what: String, where predicate: (String) -> Bool
    ) throws -> (found: Int, ended: Bool) {
        let deadline = Date().addingTimeInterval(Self.hangDeadline)
        condition.lock()
        defer { condition.unlock() }
        var checked = 0
        var found = 0
        while true {
            while checked < lines.count {
                if predicate(lines[checked]) { found += 1 }
                checked += 1
            }
            if found >= count { return (found, false) }
            if outputEnded { return (found, true) }
            if !condition.wait(until: deadline) {
                throw ChildProcessError("no \(count) lines of \(what) after \(Int(Self.hangDeadline)) s (a hang)")
            }
        }
    }

    /// Waits until the child has written the line `line`.
    public func waitForLine(_ line: String) throws { try waitForLines(1, "'\(line)'") { $0 == line } }

    /// Kills the child with `signal` (SIGKILL by default) and waits for it to end.
    public func kill(_ signal: Int32 = SIGKILL) {
        _ = Glibc.kill(process.processIdentifier, signal)
        process.waitUntilExit()
    }

    /// Closes the child's standard input: the signal to end for children that run until told to.
    public func stop() {
        condition.withLock {
            guard !inputClosed else { return }
            inputClosed = true
            input.closeFile()
        }
    }

    /// Waits for the child to end and for both of its pipes to be read to their end; returns its status and output.
    public func finish() -> ChildProcess.Output {
        process.waitUntilExit()
        condition.lock()
        while !(outputEnded && errorEnded) { condition.wait() }
        if !partial.isEmpty {
            lines.append(String(decoding: partial, as: UTF8.self))
            partial.removeAll()
        }
        let output = ChildProcess.Output(
            status: process.terminationStatus, terminationReason: process.terminationReason,
            stdout: lines.map { $0 + "\n" }.joined(), stderr: String(decoding: errorOutput, as: UTF8.self))
        condition.unlock()
        return output
    }
}

/// glibc's `pipe2`, which the Glibc module does not export (it is declared for `_GNU_SOURCE` only).
@_silgen_name("pipe2")
private func systemPipe2(_ fds: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32

/// A child process did not say what a test waited for.
public struct ChildProcessError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// In a child process: whether the parent has asked it to stop by closing its standard input
/// (``RunningProcess/stop()``). A thread reads standard input to its end.
public final class StopRequest: @unchecked Sendable {
    // @unchecked Sendable: `stopped` is only touched while `lock` is held.
    private let lock = NSLock()
    private var stopped = false

    /// Starts watching standard input.
    public init() {
        Thread.detachNewThread { [self] in
            _ = FileHandle.standardInput.readDataToEndOfFile()
            lock.withLock { stopped = true }
        }
    }

    /// Whether standard input has ended.
    public var isRequested: Bool { lock.withLock { stopped } }
}
