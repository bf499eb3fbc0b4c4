import Foundation
import LMDB

#if canImport(Glibc)
import Glibc
#endif

/// Turns a crash of LMDB reading a damaged store into exit 65 with what was damaged.
///
/// LMDB trusts its pages: a damaged branch can send it to a page past the end of the file (SIGBUS), to memory
/// outside the map (SIGSEGV) or into one of its assertions (SIGABRT). `check`, `export` and `ls` must still say
/// what is wrong rather than die by a signal, so the executable installs handlers that write one line naming the
/// signal and the page of the data file the fault touched, and exit 65. The handlers run only on a fatal fault:
/// they use memory prepared beforehand and `write` and `_exit`, nothing else.
public enum CrashGuard {
    /// What the handler reads, laid out before any fault can happen.
    struct State {
        var prefix: UnsafeMutableBufferPointer<UInt8>
        var buffer: UnsafeMutableBufferPointer<UInt8>
        var mapStart: UInt = 0
        var mapEnd: UInt = 0
        var pageSize: UInt = 4096
        var lastPage: UInt = 0
        /// Database names by handle number, each NUL-terminated in a slot of `nameSlot` bytes.
        var names: UnsafeMutableBufferPointer<UInt8>
    }

    static let nameSlots = 256
    static let nameSlot = 96

    nonisolated(unsafe) static var state: UnsafeMutablePointer<State>?

    /// Installs the handlers (the executable does, once; tests that run the CLI in-process do not).
    public static func install() {
        guard state == nil else { return }
        let prefix = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: 512)
        prefix.initialize(repeating: 0)
        let buffer = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: 1024)
        buffer.initialize(repeating: 0)
        let names = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: nameSlots * nameSlot)
        names.initialize(repeating: 0)
        let pointer = UnsafeMutablePointer<State>.allocate(capacity: 1)
        pointer.initialize(to: State(prefix: prefix, buffer: buffer, names: names))
        state = pointer
        setPrefix("store-inspect: ")
        // An alternate stack, so that a fault from a stack overflow can be reported too.
        var stack = stack_t()
        stack.ss_sp = UnsafeMutableRawPointer.allocate(byteCount: 1 << 16, alignment: 16)
        stack.ss_size = 1 << 16
        stack.ss_flags = 0
        sigaltstack(&stack, nil)
        for signal in [SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL] {
            var action = sigaction()
            action.__sigaction_handler.sa_sigaction = handler
            action.sa_flags = SA_SIGINFO | SA_ONSTACK | Int32(bitPattern: UInt32(SA_RESETHAND))
            sigemptyset(&action.sa_mask)
            sigaction(signal, &action, nil)
        }
    }

    /// The start of the message: `store-inspect COMMAND: the store at PATH is damaged: `.
    static func setPrefix(_ text: String) {
        guard let state else { return }
        let bytes = Array(text.utf8.prefix(state.pointee.prefix.count - 1))
        for (i, byte) in bytes.enumerated() { state.pointee.prefix[i] = byte }
        state.pointee.prefix[bytes.count] = 0
    }

    /// Notes the store being read: the command and path for the message, and where its data file is mapped (from
    /// `/proc/self/maps`) to name the page a fault touched.
    static func watch(command: String, store: String, pageSize: Int, lastPage: Int) {
        guard let state else { return }
        setPrefix("store-inspect \(command): the store at \(store) is damaged: ")
        state.pointee.pageSize = UInt(max(1, pageSize))
        state.pointee.lastPage = UInt(max(0, lastPage))
        let dataFile = URL(fileURLWithPath: store).standardizedFileURL.resolvingSymlinksInPath().path + "/data.mdb"
        let maps: String
        do {
            maps = try String(contentsOfFile: "/proc/self/maps", encoding: .utf8)
        } catch {
            // The map's place stays unknown: a fault is still reported, with no page named (said in the message).
            return
        }
        // From here on reads note their database: the store's opening reads the catalog (the main database, handle
        // 1) and its own databases before they are named (``nameDatabases(_:)``).
        nameDatabases([(1, "(main)")])
        for line in maps.split(separator: "\n") where line.hasSuffix(dataFile) {
            let range = line.split(separator: " ")[0].split(separator: "-")
            guard range.count == 2, let start = UInt(range[0], radix: 16), let end = UInt(range[1], radix: 16)
            else { continue }
            if state.pointee.mapStart == 0 || start < state.pointee.mapStart { state.pointee.mapStart = start }
            state.pointee.mapEnd = max(state.pointee.mapEnd, end)
        }
    }

    /// Prepares the database names a fault can name (the store's databases, opened when the store was) and has
    /// every read note its database (``FaultDiagnostics``).
    static func nameDatabases(_ numbers: [(number: UInt32, name: String)]) {
        guard let state else { return }
        for (number, name) in numbers where Int(number) < nameSlots {
            let bytes = Array(name.utf8.prefix(nameSlot - 1))
            let start = Int(number) * nameSlot
            for (i, byte) in bytes.enumerated() { state.pointee.names[start + i] = byte }
            state.pointee.names[start + bytes.count] = 0
        }
        FaultDiagnostics.isEnabled = true
    }

    private static let handler:
        @convention(c) (Int32, UnsafeMutablePointer<siginfo_t>?, UnsafeMutableRawPointer?) ->
            Void = { signal, info, _ in
                guard let state = CrashGuard.state else { _exit(65) }
                var out = Writer(buffer: state.pointee.buffer)
                out.append(UnsafePointer(state.pointee.prefix.baseAddress!))
                switch signal {
                case SIGABRT: out.append("LMDB stopped on a failed internal check (SIGABRT)")
                case SIGBUS: out.append("reading it faulted (SIGBUS)")
                case SIGSEGV: out.append("reading it faulted (SIGSEGV)")
                default: out.append("reading it faulted (signal ")
                }
                if signal != SIGABRT && signal != SIGBUS && signal != SIGSEGV {
                    out.append(UInt(signal))
                    out.append(")")
                }
                if signal != SIGABRT, let info {
                    let address = UInt(bitPattern: info.pointee._sifields._sigfault.si_addr)
                    let start = state.pointee.mapStart
                    if start == 0 {
                        out.append(" (where the data file is mapped is unknown: no page can be named)")
                    } else if address >= start && address < state.pointee.mapEnd {
                        out.append(" at page ")
                        out.append((address - start) / state.pointee.pageSize)
                        out.append(" of the data file (the last page in use is ")
                        out.append(state.pointee.lastPage)
                        out.append(")")
                    } else {
                        out.append(" outside the data file's map: a damaged page points there")
                    }
                }
                let database = FaultDiagnostics.lastDatabase
                if Int(database) < nameSlots && state.pointee.names[Int(database) * nameSlot] != 0 {
                    out.append(", reading the database ")
                    out.append(UnsafePointer(state.pointee.names.baseAddress! + Int(database) * nameSlot))
                } else if database != UInt32.max {
                    // A database the store opened before the guard could name it.
                    out.append(", reading the database with handle ")
                    out.append(UInt(database))
                } else {
                    out.append(", before any database was read (opening the store)")
                }
                out.append("; run `store-inspect check` on a backup, or restore one\n")
                _ = write(STDERR_FILENO, state.pointee.buffer.baseAddress, out.count)
                _exit(65)
            }

    /// Appends to a fixed buffer without allocating.
    struct Writer {
        let buffer: UnsafeMutableBufferPointer<UInt8>
        var count = 0

        init(buffer: UnsafeMutableBufferPointer<UInt8>) { self.buffer = buffer }

        mutating func append(_ text: UnsafePointer<UInt8>) {
            var i = 0
            while text[i] != 0 && count < buffer.count {
                buffer[count] = text[i]
                count += 1
                i += 1
            }
        }

        mutating func append(_ text: StaticString) {
            text.withUTF8Buffer { bytes in
                for byte in bytes where count < buffer.count {
                    buffer[count] = byte
                    count += 1
                }
            }
        }

        mutating func append(_ number: UInt) {
            var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0
            )
            var value = number
            var n = 0
            withUnsafeMutableBytes(of: &digits) { raw in
                repeat {
                    raw[n] = UInt8(48 + value % 10)
                    value /= 10
                    n += 1
                } while value > 0 && n < 10
                while n > 0 && count < buffer.count {
                    n -= 1
                    buffer[count] = raw[n]
                    count += 1
                }
            }
        }
    }
}
