import Foundation

/// What a store's sync has done, kept beside the store in `sync-state.json` (0600), replaced atomically (written to
/// a temporary file, flushed, renamed over the old one), so a kill at any moment leaves the old state or the new.
///
/// The cursors may lag what happened (a kill after PostgreSQL committed a push, before this file was written):
/// both directions are idempotent, so the next sync redoes that step and changes nothing twice.
public struct SyncState: Codable, Sendable, Equatable {
    /// The zone (one shared data set on the server) the store syncs with.
    public var zone: String
    /// The store's ID on the server (the store's own `PersistentStore.storeID`).
    public var storeID: UUID
    /// The last local history transaction pushed (or skipped as remote).
    public var pushedThrough: UInt64 = 0
    /// The last server log entry pulled.
    public var pulledThrough: Int64 = 0
    /// The hybrid logical clock's last stamp (see ``HybridLogicalClock``): the largest stamp assigned or pulled.
    public var clock: UInt64 = 0
    /// Objects whose pushed values the server refused (another store's were newer): their server state is pulled
    /// by the next pull.
    public var refetch: [UUID] = []
    /// Deletes decided by this store that its history does not hold (the losers of uniqueness conflicts), waiting to
    /// be pushed.
    public var pendingTombstones: [PendingTombstone] = []
    /// When a push last completed.
    public var lastPush: Date?
    /// When a pull last completed.
    public var lastPull: Date?
    /// The last sync's error, if it failed.
    public var lastError: String?

    /// A delete to push: the object's entity, global ID and stamp.
    public struct PendingTombstone: Codable, Sendable, Equatable {
        /// The object's entity.
        public var entity: String
        /// The object's global ID.
        public var globalID: UUID
        /// The delete's clock stamp.
        public var stamp: UInt64
        /// The object's key here when this store made it (its global ID derived from the key): the server records
        /// the origin of an object first heard of by its delete, so that this store finds it by its key.
        public var originKey: UInt64?
    }

    /// The state file of the store in `directory`.
    public static func url(inStore directory: String) -> URL {
        URL(fileURLWithPath: directory).appendingPathComponent("sync-state.json")
    }

    /// Reads the state file of the store in `directory`; `nil` when the store never synced.
    ///
    /// - Throws: ``SyncError/Code/state`` when the file exists but cannot be read or decoded.
    public static func read(storeDirectory directory: String) throws -> SyncState? {
        let url = url(inStore: directory)
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        do {
            return try JSONDecoder.sync.decode(SyncState.self, from: Data(contentsOf: url))
        } catch {
            throw SyncError(.state, "cannot read \(url.path): \(error)")
        }
    }

    /// Replaces the state file atomically.
    func write(storeDirectory directory: String) throws {
        let url = Self.url(inStore: directory)
        let temporary = url.deletingLastPathComponent().appendingPathComponent(".sync-state.json.tmp")
        do {
            let data = try JSONEncoder.sync.encode(self)
            let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            var failure: Int32 = 0
            data.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let written = Foundation.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                    if written < 0 {
                        if errno == EINTR { continue }
                        failure = errno
                        return
                    }
                    offset += written
                }
            }
            if failure == 0 && fsync(descriptor) != 0 { failure = errno }
            close(descriptor)
            if failure != 0 { throw POSIXError(POSIXErrorCode(rawValue: failure) ?? .EIO) }
            guard rename(temporary.path, url.path) == 0 else {
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
            }
            // The rename is durable once the directory is.
            let directoryDescriptor = open(url.deletingLastPathComponent().path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard directoryDescriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            defer { close(directoryDescriptor) }
            guard fsync(directoryDescriptor) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        } catch {
            throw SyncError(.state, "cannot write \(url.path): \(error)")
        }
    }
}

extension JSONEncoder {
    static var sync: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }
}

extension JSONDecoder {
    static var sync: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}

/// The lock that keeps one sync engine per store across processes: `sync.lock` beside the store, held with
/// `flock` for the engine's life (the kernel releases it when the process dies, however it dies).
final class SyncLock {
    private let descriptor: Int32

    init(storeDirectory directory: String) throws {
        let path = URL(fileURLWithPath: directory).appendingPathComponent("sync.lock").path
        descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw SyncError(.state, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno == EWOULDBLOCK ? "another sync engine holds it" : String(cString: strerror(errno))
            close(descriptor)
            throw SyncError(.busy, "cannot lock \(path): \(reason)")
        }
    }

    deinit { close(descriptor) }
}
