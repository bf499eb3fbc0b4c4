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

let code = StoreInspect.run(
    Array(CommandLine.arguments.dropFirst()), stdoutIsTerminal: isatty(STDOUT_FILENO) == 1,
    environment: ProcessInfo.processInfo.environment,
    out: { FileHandle.standardOutput.write(Data($0.utf8)) },
    err: { FileHandle.standardError.write(Data($0.utf8)) })
exit(code)
