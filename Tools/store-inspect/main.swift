// store-inspect: the read-only inspection CLI for any EntityStore store. See `store-inspect --help`.
import Foundation
import StoreInspectCore

#if canImport(Glibc)
import Glibc
#endif

// Arguments must be UTF-8: refuse others before anything else (Swift would silently repair them).
for index in 1..<Int(CommandLine.argc) {
    guard let pointer = CommandLine.unsafeArgv[index] else { continue }
    let bytes = UnsafeBufferPointer(start: pointer, count: strlen(pointer)).map { UInt8(bitPattern: $0) }
    if String(validating: bytes, as: UTF8.self) == nil {
        FileHandle.standardError.write(Data("store-inspect: argument \(index) is not valid UTF-8\n".utf8))
        exit(ExitCode.usage)
    }
}

/// Writes all of `text` to `descriptor`; false when the system refuses (a full disk, a closed descriptor, a pipe
/// whose reader left while SIGPIPE is ignored).
func writeAll(_ text: String, to descriptor: Int32) -> Bool {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        if written < 0 {
            if errno == EINTR { continue }
            return false
        }
        bytes = bytes.dropFirst(written)
    }
    return true
}

// A fault of LMDB on a damaged page becomes exit 65 naming the page, not a death by signal.
CrashGuard.install()

let code = StoreInspect.run(
    Array(CommandLine.arguments.dropFirst()), stdoutIsTerminal: isatty(STDOUT_FILENO) == 1,
    environment: ProcessInfo.processInfo.environment,
    out: { text in
        // Output that cannot be written is an I/O error (exit 74), said once on stderr; never a trap.
        guard writeAll(text, to: STDOUT_FILENO) else {
            let reason = String(cString: strerror(errno))
            _ = writeAll("store-inspect: cannot write the output: \(reason)\n", to: STDERR_FILENO)
            exit(ExitCode.ioError)
        }
    },
    err: { text in
        // Nowhere left to report a failure to write stderr itself: the exit code says it.
        if !writeAll(text, to: STDERR_FILENO) { exit(ExitCode.ioError) }
    })
exit(code)
