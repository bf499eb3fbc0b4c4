import EntityStore
import Foundation
import LMDB
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A full disk is a clear error that names the lack of space, never a crash, never lost data; the same save
/// succeeds once space is freed. On a real small tmpfs where the machine allows mounting one (root), with an
/// injected ENOSPC otherwise.
@Suite(.serialized) struct DiskFullTests {
    /// A 512 KiB tmpfs mounted on a temporary directory, or nil when this machine does not allow it.
    final class SmallDisk {
        let directory: TemporaryDirectory
        var path: String { directory.path }

        init?() throws {
            directory = try TemporaryDirectory(prefix: "disk-full")
            let mount = try ChildProcess.run("/bin/mount", ["-t", "tmpfs", "-o", "size=512k", "tmpfs", directory.path])
            guard mount.status == 0 else {
                print("disk full: no tmpfs can be mounted here (\(mount.stderr)); running the injected variant")
                directory.remove()
                return nil
            }
        }

        /// Fills the disk until `free` bytes are left.
        func fill(leaving free: Int) throws {
            try? FileManager.default.removeItem(atPath: path + "/filler")
            var info = statvfs()
            _ = statvfs(path, &info)
            let available = Int(info.f_bavail) * Int(info.f_bsize)
            let size = max(0, available - free)
            #expect(FileManager.default.createFile(atPath: path + "/filler", contents: Data(count: size)))
        }

        func free() throws { try FileManager.default.removeItem(atPath: path + "/filler") }

        deinit {
            _ = try? ChildProcess.run("/bin/umount", ["-l", directory.path])
            directory.remove()
        }
    }

    @Test func creatingAStoreOnAFullDiskIsAClearErrorNotACrash() throws {
        guard let disk = try SmallDisk() else {
            try injectedVariant()
            return
        }
        for free in [0, 4 << 10, 8 << 10, 16 << 10, 20 << 10, 28 << 10] {
            try disk.fill(leaving: free)
            let path = disk.path + "/s\(free).store"
            let output = try ChildProcess.helper(["open-library", path, "a"])
            #expect(output.terminationReason == .exit, "\(free) bytes free: killed by a signal")
            #expect(output.status == 1 || output.status == 0, "\(free) bytes free: \(output.stderr)")
            if output.status == 1 {
                #expect(output.stderr.contains("error diskFull"), "\(free) bytes free: \(output.stderr)")
                #expect(output.stderr.lowercased().contains("no space"), "\(output.stderr)")
            }
            try disk.free()
            // With space again the store opens (an empty data file left behind is initialised).
            let retry = try ChildProcess.helper(["open-library", path, "a"])
            #expect(retry.status == 0, "\(free) bytes free, then freed: \(retry.stderr)")
            try FileManager.default.removeItem(atPath: path)
        }
    }

    @Test func aSaveOnAFullDiskFailsClearlyAndSucceedsOnceSpaceIsFreed() throws {
        guard let disk = try SmallDisk() else {
            try injectedVariant()
            return
        }
        let store = try PersistentStore.open(path: disk.path + "/lib.store", schema: try Fixtures.librarySchema())
        let context = ObjectContext(store: store)
        let kept = try context.insert("Book")
        try kept.setValue("kept", forKey: "title")
        try context.save()
        try disk.fill(leaving: 8 << 10)
        let book = try context.insert("Book")
        try book.setValue("big", forKey: "title")
        try book.setValue(.data([UInt8](repeating: 7, count: 100 << 10)), forKey: "cover")
        let error = entityStoreError { try context.save() }
        #expect(error?.code == .diskFull, "\(String(describing: error))")
        #expect(error?.message.contains("no space left") == true)
        #expect(context.hasChanges && book.isInserted)
        #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Book")) == 1)
        try disk.free()
        try context.save()
        let titles = try ObjectContext(store: store).fetch(FetchRequest(entity: "Book", sortKeys: [SortKey("title")]))
            .map { try $0["title"] }
        #expect(titles == ["big", "kept"])
        #expect(try store.checkIntegrity().findings.isEmpty)
    }

    /// Where no tmpfs can be mounted: the commit fails with ENOSPC by injection; the error says so, nothing is
    /// written, and the same save succeeds afterwards.
    func injectedVariant() throws {
        try withStore { store, _ in
            let context = ObjectContext(store: store)
            let book = try context.insert("Book")
            try book.setValue("big", forKey: "title")
            store.environment.injectFault(afterCalls: 1, code: ENOSPC)
            let error = entityStoreError { try context.save() }
            #expect(error?.code == .diskFull)
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Book")) == 0)
            store.environment.clearInjectedFault()
            try context.save()
            #expect(try ObjectContext(store: store).count(for: FetchRequest(entity: "Book")) == 1)
        }
    }
}
