import EntityStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What a store's sync has done: its cursors, its clock and its identity on the server, kept **inside the store**
/// (its metadata, `PersistentStore.metadata(forKey:)`) so that a backup, a restore or a copy of the store carries
/// the state of exactly the data it holds. A pull's changes and its cursor commit in one transaction; a push's cursor
/// is written once PostgreSQL has committed the push.
///
/// The push cursor may lag the server (a kill after PostgreSQL committed a push, before the store wrote its cursor):
/// pushes are idempotent and the next push recognises entries the server holds by their stamps. A store restored
/// from an older backup, or a directory copied to another place, becomes a new replica by itself (see
/// ``ownObjectsFrom``).
///
/// Stores of versions before this one kept the state in `sync-state.json` beside the store; the engine takes it
/// over once and removes the file.
public struct SyncState: Codable, Sendable, Equatable {
    /// The zone (one shared data set on the server) the store syncs with.
    public var zone: String
    /// The store's ID on the server as a replica: the store's own `PersistentStore.storeID` until a copy or a
    /// restore of its directory makes it a new replica.
    public var storeID: UUID
    /// The ID the global IDs of the store's own objects derive from (the store's `PersistentStore.storeID`, for
    /// good).
    public var originID: UUID
    /// The store's former replica IDs, newest last.
    public var formerStoreIDs: [UUID] = []
    /// Since it became a new replica, the first history entry of its own: objects inserted by this entry or a later
    /// one are given a global ID attribute of their own before they are pushed, so that no object another copy of
    /// the directory made under the same key is taken for them. `nil` for a store that never changed identity.
    public var ownObjectsFrom: UInt64?
    /// The last local history transaction pushed (or skipped as remote).
    public var pushedThrough: UInt64 = 0
    /// The last server log entry pulled.
    public var pulledThrough: Int64 = 0
    /// The hybrid logical clock as of ``pushedThrough`` (see ``HybridLogicalClock``): the largest stamp of the
    /// history entries up to it, this store's (as pushed) and the others' (as pulled). A change is stamped from the
    /// entries before it in the history, so a pull never moves the stamp of a change saved before it.
    public var clock: UInt64 = 0
    /// Pulls since the entry at ``pushedThrough`` that saved nothing here (the store held the pulled values
    /// already): when and with what largest stamp. A change saved after such a pull is stamped after it, as after a
    /// pull whose save is in the history.
    public var pullMarks: [PullMark] = []
    /// Objects whose pushed values the server refused (another store's were newer): their server state is pulled
    /// by the next pull.
    public var refetch: [UUID] = []
    /// Deletes decided by this store that its history does not hold (the losers of uniqueness conflicts), waiting to
    /// be pushed.
    public var pendingTombstones: [PendingTombstone] = []
    /// What merges of uniqueness clashes changed here (in pulls, which are not pushed): pushed from the objects'
    /// current values before the history's entries.
    public var pendingMerges: [PendingMerge] = []
    /// When a push last completed.
    public var lastPush: Date?
    /// When a pull last completed.
    public var lastPull: Date?
    /// The last sync's error, if it failed.
    public var lastError: String?
    /// The store's data file (device and inode) when the state was last written: a directory copied, or restored
    /// from a backup, has another one, and becomes a new replica by itself.
    public var dataFile: FileIdentity?

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

    /// What a merge changed that other stores must hear of: an object's keys, pushed from its current values.
    public struct PendingMerge: Codable, Sendable, Equatable {
        /// The object's entity.
        public var entity: String
        /// The object's key in this store.
        public var primaryKey: UInt64
        /// The keys the merge changed.
        public var keys: [String]
        /// The merge's clock stamp.
        public var stamp: UInt64
    }

    /// A pull that saved nothing: when, and the largest stamp it brought.
    public struct PullMark: Codable, Sendable, Equatable {
        /// When the pull ended.
        public var date: Date
        /// The largest stamp it brought.
        public var stamp: UInt64
    }

    /// A file's device and inode number.
    public struct FileIdentity: Codable, Sendable, Equatable {
        /// The device.
        public var device: UInt64
        /// The inode number.
        public var inode: UInt64

        /// The identity of the file at `path`, or `nil` when it cannot be read.
        static func of(_ path: String) -> FileIdentity? {
            var info = stat()
            guard stat(path, &info) == 0 else { return nil }
            return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        }
    }

    /// A state for a store that never synced with `zone`.
    init(zone: String, storeID: UUID) {
        self.zone = zone
        self.storeID = storeID
        originID = storeID
    }

    enum CodingKeys: String, CodingKey {
        case zone, storeID, originID, formerStoreIDs, ownObjectsFrom, pushedThrough, pulledThrough, clock, pullMarks
        case refetch, pendingTombstones, pendingMerges, lastPush, lastPull, lastError, dataFile
    }

    public init(from decoder: Decoder) throws {
        let values = try decoder.container(keyedBy: CodingKeys.self)
        zone = try values.decode(String.self, forKey: .zone)
        storeID = try values.decode(UUID.self, forKey: .storeID)
        // A state of a version before replicas: the store was its own origin.
        originID = try values.decodeIfPresent(UUID.self, forKey: .originID) ?? storeID
        formerStoreIDs = try values.decodeIfPresent([UUID].self, forKey: .formerStoreIDs) ?? []
        ownObjectsFrom = try values.decodeIfPresent(UInt64.self, forKey: .ownObjectsFrom)
        pushedThrough = try values.decodeIfPresent(UInt64.self, forKey: .pushedThrough) ?? 0
        pulledThrough = try values.decodeIfPresent(Int64.self, forKey: .pulledThrough) ?? 0
        clock = try values.decodeIfPresent(UInt64.self, forKey: .clock) ?? 0
        pullMarks = try values.decodeIfPresent([PullMark].self, forKey: .pullMarks) ?? []
        refetch = try values.decodeIfPresent([UUID].self, forKey: .refetch) ?? []
        pendingTombstones = try values.decodeIfPresent([PendingTombstone].self, forKey: .pendingTombstones) ?? []
        pendingMerges = try values.decodeIfPresent([PendingMerge].self, forKey: .pendingMerges) ?? []
        lastPush = try values.decodeIfPresent(Date.self, forKey: .lastPush)
        lastPull = try values.decodeIfPresent(Date.self, forKey: .lastPull)
        lastError = try values.decodeIfPresent(String.self, forKey: .lastError)
        dataFile = try values.decodeIfPresent(FileIdentity.self, forKey: .dataFile)
    }

    /// The metadata key the state is kept under, in the store.
    public static let metadataKey = "entitystore.sync"

    /// The sync state kept in `store`; `nil` when the store never synced (or synced only with a version that kept
    /// the state in `sync-state.json`, see ``read(storeDirectory:)``).
    ///
    /// - Throws: ``SyncError/Code/state`` when the state cannot be read or decoded.
    public static func read(from store: PersistentStore) throws -> SyncState? {
        let bytes: [UInt8]?
        do {
            bytes = try store.metadata(forKey: metadataKey)
        } catch let error as EntityStoreError {
            throw SyncError(.state, "cannot read the sync state in the store: \(error.description)")
        }
        guard let bytes else { return nil }
        do {
            return try JSONDecoder.sync.decode(SyncState.self, from: Data(bytes))
        } catch {
            throw SyncError(.state, "the sync state in the store cannot be decoded: \(error)")
        }
    }

    /// The state as stored in the store's metadata.
    func encoded() throws -> [UInt8] {
        do {
            return Array(try JSONEncoder.sync.encode(self))
        } catch {
            throw SyncError(.state, "cannot encode the sync state: \(error)")
        }
    }

    /// The state file of versions that kept the state beside the store in `directory`.
    public static func url(inStore directory: String) -> URL {
        URL(fileURLWithPath: directory).appendingPathComponent("sync-state.json")
    }

    /// Reads the state file of a version that kept the state beside the store in `directory`; `nil` when there is
    /// none.
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
}

extension JSONEncoder {
    /// Dates as seconds since 1970 with their fraction: the state compares them with the history's dates (ISO 8601
    /// keeps whole seconds only).
    static var sync: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .secondsSince1970
        return encoder
    }
}

extension JSONDecoder {
    /// Dates as written by ``JSONEncoder/sync``, or as ISO 8601 text (the state files of earlier versions).
    static var sync: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            // Two formats are accepted: seconds first; when the value is not a number, ISO 8601 text, whose
            // failure to decode is thrown below (so no failure is swallowed).
            if let seconds = try? container.decode(Double.self) { return Date(timeIntervalSince1970: seconds) }
            let text = try container.decode(String.self)
            guard let date = ISO8601DateFormatter().date(from: text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a date: \(text)")
            }
            return date
        }
        return decoder
    }
}

/// The lock that keeps one sync engine per store: `sync.lock` beside the store, held for the engine's life with an
/// open-file-description lock (`F_OFD_SETLK`), which another descriptor of the file cannot take, in this process or
/// another. The kernel releases it when the process dies, however it dies; the engine releases it when it ends.
///
/// Not `flock`: a child the app forks shares the engine's open file until it calls `exec` (even with `O_CLOEXEC`),
/// so a `flock` dropped by closing the descriptor while another thread spawned a process stayed held for a moment,
/// and the next engine was refused as busy. The lock is released by an explicit unlock, which frees it whoever else
/// shares the description. Not a POSIX record lock either: closing any descriptor of the file drops those, so an app
/// that copies the store's directory (reading `sync.lock`) would free the store for a second engine.
final class SyncLock {
    private let descriptor: Int32
    /// `F_OFD_SETLK` (Linux 3.15; not exported by Swift's Glibc module).
    private static let setCommand: Int32 = 37

    init(storeDirectory directory: String) throws {
        let path = URL(fileURLWithPath: directory).appendingPathComponent("sync.lock").path
        descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw SyncError(.state, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        var lock = Self.request(F_WRLCK)
        guard fcntl(descriptor, Self.setCommand, &lock) == 0 else {
            let reason =
                errno == EAGAIN || errno == EACCES ? "another sync engine holds it" : String(cString: strerror(errno))
            close(descriptor)
            throw SyncError(.busy, "cannot lock \(path): \(reason)")
        }
    }

    deinit {
        // Released before the descriptor closes: a child spawned meanwhile may share the description until it execs.
        var unlock = Self.request(F_UNLCK)
        while fcntl(descriptor, Self.setCommand, &unlock) != 0 && errno == EINTR {}
        close(descriptor)
    }

    /// The whole file (`l_len` 0), `l_pid` 0 as an open-file-description lock requires.
    private static func request(_ type: Int32) -> flock {
        var request = flock()
        request.l_type = Int16(type)
        request.l_whence = Int16(SEEK_SET)
        request.l_start = 0
        request.l_len = 0
        request.l_pid = 0
        return request
    }
}
