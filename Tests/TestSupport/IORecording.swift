import Foundation

/// The crash-consistency tests' I/O recorder (`Tests/IORecorder/iorecorder.c`, an `LD_PRELOAD` shim): building it,
/// reading its log, and applying a recorded write to a file's image.
public enum IORecording {
    /// One recorded event.
    public enum Event: Sendable {
        case write(file: Int, offset: Int, bytes: [UInt8])
        case sync(file: Int)
        case ack(Int)
        case truncate(file: Int, size: Int)
        /// A new name for an existing file (`link`), or a name removed (`unlink`).
        case link(from: String, to: String)
        case unlink(String)
    }

    /// Builds the recorder from its C source with the system's compiler.
    public static func buildRecorder(into directory: String) throws -> String {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("IORecorder/iorecorder.c").path
        let library = directory + "/libiorecorder.so"
        // The system's compiler, or the Swift toolchain's clang (on the PATH wherever `swift` is).
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"
        for name in ["cc", "gcc", "clang"] {
            for directory in path.split(separator: ":") {
                let compiler = "\(directory)/\(name)"
                guard FileManager.default.isExecutableFile(atPath: compiler) else { continue }
                let built = try ChildProcess.run(compiler, ["-shared", "-fPIC", "-O2", "-o", library, source, "-ldl"])
                guard built.status == 0 else { throw RecorderFailure("\(compiler) failed: \(built.stderr)") }
                return library
            }
        }
        throw RecorderFailure("no C compiler (cc, gcc or clang) on the PATH to build the I/O recorder")
    }

    /// Reads the recorder's log: the events and the recorded files' paths by index.
    public static func readLog(_ path: String) throws -> (events: [Event], files: [String]) {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        var events: [Event] = []
        var files: [String] = []
        var at = 0
        func integer(_ offset: Int, _ size: Int) -> Int {
            var value = 0
            for i in (0..<size).reversed() { value = value << 8 | Int(bytes[at + offset + i]) }
            return value
        }
        while at + 21 <= bytes.count {
            let kind = bytes[at]
            let (file, offset, length) = (integer(1, 4), integer(5, 8), integer(13, 8))
            at += 21
            switch kind {
            case 1:
                events.append(.write(file: file, offset: offset, bytes: Array(bytes[at..<(at + length)])))
                at += length
            case 2: events.append(.sync(file: file))
            case 3: events.append(.ack(offset))
            case 4: events.append(.truncate(file: file, size: offset))
            case 5:
                files.append(String(decoding: bytes[at..<(at + length)], as: UTF8.self))
                at += length
            case 6:
                let paths = bytes[at..<(at + length)].split(separator: 0, omittingEmptySubsequences: false)
                guard paths.count == 2 else { throw RecorderFailure("a link record without two paths at \(at)") }
                events.append(
                    .link(
                        from: String(decoding: paths[0], as: UTF8.self), to: String(decoding: paths[1], as: UTF8.self)))
                at += length
            case 7:
                events.append(.unlink(String(decoding: bytes[at..<(at + length)], as: UTF8.self)))
                at += length
            default: throw RecorderFailure("the I/O log has a record of kind \(kind) at byte \(at - 21)")
            }
        }
        guard at == bytes.count else { throw RecorderFailure("the I/O log ends inside a record") }
        return (events, files)
    }

    /// Applies `write` (or the sectors of it that `sectors` keeps) to `image`.
    public static func apply(_ write: (offset: Int, bytes: [UInt8]), to image: inout [UInt8], sectors: Set<Int>? = nil)
    {
        let end = write.offset + write.bytes.count
        if image.count < end { image += [UInt8](repeating: 0, count: end - image.count) }
        guard let sectors else {
            image.replaceSubrange(write.offset..<end, with: write.bytes)
            return
        }
        for (index, start) in stride(from: 0, to: write.bytes.count, by: 512).enumerated() where sectors.contains(index)
        {
            let stop = min(start + 512, write.bytes.count)
            image.replaceSubrange((write.offset + start)..<(write.offset + stop), with: write.bytes[start..<stop])
        }
    }

    /// The images a power loss may leave of one epoch's `writes` (those between two barriers) over `synced` (the
    /// file as everything before the epoch left it): the writes in every subset (for up to four writes; else
    /// `subsets` random ones and all of them), each subset in a random order; and torn states, where one write
    /// keeps a random part of its 512-byte sectors and the others are all there or not (every write of more than a
    /// sector once, then random ones, up to `torn`).
    public static func crashImages(
        of writes: [(offset: Int, bytes: [UInt8])], over synced: [UInt8], subsets: Int, torn: Int,
        using random: inout some RandomNumberGenerator
    ) -> [[UInt8]] {
        var images: [[UInt8]] = []
        let count = writes.count
        let chosen: [[Int]] =
            count <= 4
            ? (0..<(1 << count)).map { mask in (0..<count).filter { mask & (1 << $0) != 0 } }
            : (0..<subsets).map { _ in (0..<count).filter { _ in Bool.random(using: &random) } } + [Array(0..<count)]
        for subset in chosen {
            var image = synced
            for write in subset.shuffled(using: &random) { apply(writes[write], to: &image) }
            images.append(image)
        }
        let tearable = writes.indices.filter { writes[$0].bytes.count > 512 }
        guard !tearable.isEmpty else { return images }
        let tornWrites =
            tearable + (tearable.count..<max(tearable.count, torn)).map { _ in tearable.randomElement(using: &random)! }
        for write in tornWrites {
            var image = synced
            for other in writes.indices where other != write && Bool.random(using: &random) {
                apply(writes[other], to: &image)
            }
            let sectors = (writes[write].bytes.count + 511) / 512
            apply(writes[write], to: &image, sectors: Set((0..<sectors).filter { _ in Bool.random(using: &random) }))
            images.append(image)
        }
        return images
    }

    /// The environment of a process whose I/O on the files of `directory` the recorder at `library` logs to `log`.
    public static func environment(library: String, watching directory: String, log: String) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = library
        environment["IOREC_DIR"] = directory
        environment["IOREC_LOG"] = log
        return environment
    }

    /// Makes `path` a store directory whose data file is `image` (and nothing else: a lock file of the state before
    /// goes too).
    public static func writeStore(_ image: [UInt8], at path: String) throws {
        if FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(atPath: path) }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try Data(image).write(to: URL(fileURLWithPath: path + "/data.mdb"))
    }

    /// Whether `image` is one not met before (its hash not in `seen`, which it joins): a state built twice (writes
    /// that do not overlap, in another order, say) is checked once.
    public static func isNew(_ image: [UInt8], seen: inout Set<Int>) -> Bool {
        var hasher = Hasher()
        image.withUnsafeBytes { hasher.combine(bytes: $0) }
        return seen.insert(hasher.finalize()).inserted
    }
}

/// The recorder could not be built, or its log does not read.
public struct RecorderFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
