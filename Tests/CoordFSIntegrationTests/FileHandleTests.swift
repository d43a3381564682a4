import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A file handle of an item in the mount opens it again as long as the item lives, even after
/// the kernel has dropped its inodes (drop_caches) and whoever names the item first after that,
/// after the item's directory was renamed, after the name it was known by was unlinked while a
/// hard link keeps it (fstests generic/426, 467, 756) and after a remount: as on a kernel
/// filesystem. (NFS re-export and backup tools keep handles.)
@Suite(.serialized) struct FileHandleTests {
    @Test func handlesOpenAgainAfterTheKernelDroppedItsInodes() throws {
        let fx = try MountFixture()
        let script = Paths.scripts.appendingPathComponent("file_handles.py").path
        let native = try run("/usr/bin/python3", [script, fx.base.appendingPathComponent("native").path])
        let mounted = try run("/usr/bin/python3", [script, fx.path("run")])
        #expect(native.status == 0 && mounted.status == 0, "\(native.errors) \(mounted.errors)")
        #expect(
            native.output.split(separator: "\n").count == 18 && !native.output.contains("error"), "\(native.output)")
        #expect(mounted.output == native.output, "through the mount:\n\(mounted.output)\nnatively:\n\(native.output)")
    }

    /// `mount -o remount,ro` and `remount,rw` of a live mount keep its node ids, so handles taken
    /// before open the items again after (compared with tmpfs remounted the same way).
    @Test func handlesOpenAgainAfterARemount() throws {
        let fx = try MountFixture()
        let native = fx.base.appendingPathComponent("native").path
        try FileManager.default.createDirectory(atPath: native, withIntermediateDirectories: true)
        let mounted = try run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "coordfs-handles", native])
        try #require(mounted.status == 0, "tmpfs: \(mounted.errors)")
        defer { _ = try? run("/bin/umount", [native]) }
        let script = Paths.scripts.appendingPathComponent("file_handles.py").path
        let onTmpfs = try run("/usr/bin/python3", [script, native, "mount -o remount,{} \(native)"])
        let onMount = try run(
            "/usr/bin/python3",
            [
                script, fx.path("run"),
                "\(Paths.binary.path) mount -o remount,{} \(fx.mountPoint.path)"
            ])
        #expect(onTmpfs.status == 0 && onMount.status == 0, "\(onTmpfs.errors) \(onMount.errors)")
        #expect(
            onTmpfs.output.split(separator: "\n").count == 24 && !onTmpfs.output.contains("error"), "\(onTmpfs.output)")
        #expect(onMount.output == onTmpfs.output, "through the mount:\n\(onMount.output)\non tmpfs:\n\(onTmpfs.output)")
    }

    /// On a backing filesystem whose handles are 8 bytes (ext4, where the tests run), items keep
    /// their node ids across the daemon's lives (`StableNodeIDs`): a handle taken before an
    /// unmount opens the same file and directory after the mount is mounted again, also after
    /// the directory was renamed through the mount, as on a kernel filesystem (fstests
    /// generic/477); a removed file's handle is stale.
    @Test func handlesOpenTheSameItemsAfterTheMountIsMountedAgain() throws {
        let fx = try MountFixture()
        let kind = try run("/usr/bin/stat", ["-f", "-c", "%T", fx.backing.path])
        try #require(kind.output == "ext2/ext3\n", "the backing is not ext4: \(kind.output)")
        let script = Paths.scripts.appendingPathComponent("file_handles.py").path
        try FileManager.default.createDirectory(atPath: fx.path("dir"), withIntermediateDirectories: false)
        try "file\n".write(toFile: fx.path("dir/file"), atomically: false, encoding: .utf8)
        try "gone\n".write(toFile: fx.path("gone"), atomically: false, encoding: .utf8)
        func saved(_ name: String) -> String { fx.base.appendingPathComponent("\(name).handle").path }
        for (name, path) in [("file", "dir/file"), ("dir", "dir"), ("gone", "gone")] {
            let took = try run("/usr/bin/python3", [script, "save", saved(name), fx.path(path)])
            try #require(took.status == 0, "\(took.errors)")
        }
        try FileManager.default.removeItem(atPath: fx.path("gone"))
        func opened(_ name: String) throws -> String {
            let result = try run("/usr/bin/python3", [script, "open", saved(name), fx.mountPoint.path])
            return result.status == 0 ? result.output : "failed: \(result.errors)"
        }
        try fx.mountAgain()
        #expect(try opened("file") == "file\n")
        #expect(try opened("dir") == "directory of file\n")
        #expect(try opened("gone") == "ESTALE\n")
        try FileManager.default.moveItem(atPath: fx.path("dir"), toPath: fx.path("renamed"))
        try fx.mountAgain()
        #expect(try opened("dir") == "directory of file\n", "after a rename of the directory")
        #expect(try opened("file") == "file\n", "after a rename of its directory")
        // Not known to the new daemon until its handle was opened: now found by name too.
        #expect(try String(contentsOfFile: fx.path("renamed/file"), encoding: .utf8) == "file\n")
    }

    /// After the mount is mounted again and the system's caches are dropped, the system knows a
    /// file by its handle only, not by its name: where BACKING is its filesystem's root the
    /// file is surely in the mount, and opens; where BACKING is a directory below that root it
    /// might not be, and its handle is stale. A directory's name the system always knows.
    @Test func aFileWhoseNameTheSystemForgotOpensWhereBackingIsItsFilesystemsRoot() throws {
        let scratch = "/tmp/coordfs-it-fsroot-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: scratch + "/fs", withIntermediateDirectories: true)
        let made = try run("/bin/sh", ["-c", "truncate -s 32M \(scratch)/image && mkfs.ext4 -q -F \(scratch)/image"])
        try #require(made.status == 0, "\(made.errors)")
        let mounted = try run("/bin/mount", ["-o", "loop", scratch + "/image", scratch + "/fs"])
        try #require(mounted.status == 0, "\(mounted.errors)")
        defer {
            // A daemon just unmounted may hold its backing a moment longer while it exits.
            var unmounted = false
            for _ in 0..<100 where !unmounted {
                unmounted = (try? run("/bin/umount", [scratch + "/fs"]))?.status == 0
                if !unmounted { usleep(100_000) }
            }
            if !unmounted { Issue.record("the image stayed busy: \(scratch)/fs") }
            if !unmounted { _ = try? run("/bin/umount", ["-l", scratch + "/fs"]) }
            try? FileManager.default.removeItem(atPath: scratch)
        }
        try FileManager.default.createDirectory(atPath: scratch + "/fs/below", withIntermediateDirectories: false)
        let script = Paths.scripts.appendingPathComponent("file_handles.py").path

        /// What the handles of dir/file and dir, taken through a mount of `backing`, open after
        /// the mount was mounted again and the caches dropped.
        func reopened(backing: String) throws -> [String] {
            let fx = try MountFixture(backing: URL(fileURLWithPath: backing))
            try FileManager.default.createDirectory(atPath: fx.path("dir"), withIntermediateDirectories: false)
            try "file\n".write(toFile: fx.path("dir/file"), atomically: false, encoding: .utf8)
            let saved = { (name: String) in "\(scratch)/\(name)-\(backing.hasSuffix("below") ? "below" : "root")" }
            for (name, path) in [("file", "dir/file"), ("dir", "dir")] {
                let took = try run("/usr/bin/python3", [script, "save", saved(name), fx.path(path)])
                try #require(took.status == 0, "\(took.errors)")
            }
            try fx.mountAgain()
            let dropped = try run("/bin/sh", ["-c", "sync; echo 3 > /proc/sys/vm/drop_caches"])
            try #require(dropped.status == 0, "\(dropped.errors)")
            return try ["file", "dir"].map { name in
                let result = try run("/usr/bin/python3", [script, "open", saved(name), fx.mountPoint.path])
                return result.status == 0 ? result.output : "failed: \(result.errors)"
            }
        }
        #expect(try reopened(backing: scratch + "/fs") == ["file\n", "directory of file\n"])
        #expect(try reopened(backing: scratch + "/fs/below") == ["ESTALE\n", "directory of file\n"])
    }

    /// A handle kept across an unmount names a node id that the next daemon, counting from the
    /// start again, may have given to another item: opening it must never open that item (the
    /// kernel checks the generation beside the id). Where ids do not last across a daemon's
    /// lives, it is stale.
    @Test func aHandleFromAnEarlierMountNeverOpensAnotherItem() throws {
        let fx = try MountFixture()
        let script = Paths.scripts.appendingPathComponent("file_handles.py").path
        let saved = fx.base.appendingPathComponent("handle").path
        try "kept\n".write(toFile: fx.path("kept"), atomically: false, encoding: .utf8)
        let took = try run("/usr/bin/python3", [script, "save", saved, fx.path("kept")])
        try #require(took.status == 0, "\(took.errors)")
        try fx.mountAgain()
        // The new daemon gives its first ids to the first items it looks up: these.
        for number in 0..<20 {
            try "other \(number)\n".write(toFile: fx.path("other-\(number)"), atomically: false, encoding: .utf8)
        }
        let opened = try run("/usr/bin/python3", [script, "open", saved, fx.mountPoint.path])
        #expect(opened.status == 0, "\(opened.errors)")
        #expect(!opened.output.hasPrefix("other"), "the old handle opened another file: \(opened.output)")
        #expect(["ESTALE\n", "kept\n"].contains(opened.output), "\(opened.output)")
    }
}

/// A read-only bind mount inside the backing directory stays read-only through the mount: its
/// files are opened through it by name (a file handle would open them through the backing's own
/// mount, writable).
@Suite struct BindMountsInsideTheBacking {
    @Test func aReadOnlyBindMountInsideTheBackingStaysReadOnly() throws {
        try #require(getuid() == 0, "bind-mounts a directory inside the backing: needs root")
        let outside = URL(fileURLWithPath: "/tmp/coordfs-bind-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: outside) }
        try Data("original\n".utf8).write(to: outside.appendingPathComponent("kept.txt"))
        let fx = try MountFixture()
        try withExtendedLifetime(fx) {
            let inside = fx.backingPath("shared")
            try FileManager.default.createDirectory(atPath: inside, withIntermediateDirectories: false)
            try #require(mount(outside.path, inside, nil, UInt(MS_BIND), nil) == 0)
            // Gone before the fixture removes the backing directory.
            defer { _ = umount2(inside, Int32(MNT_DETACH)) }
            try #require(mount(nil, inside, nil, UInt(MS_BIND | MS_REMOUNT | MS_RDONLY), nil) == 0)
            let write = "echo changed > \"$0\""
            let direct = try run("/bin/sh", ["-c", write, inside + "/kept.txt"])
            #expect(direct.status != 0, "read-only directly")
            #expect(try run("/bin/cat", [fx.path("shared/kept.txt")]).output == "original\n")
            let through = try run("/bin/sh", ["-c", write, fx.path("shared/kept.txt")])
            #expect(through.status != 0 && through.errors.contains("Read-only file system"), "\(through)")
            let kept = try String(contentsOf: outside.appendingPathComponent("kept.txt"), encoding: .utf8)
            #expect(kept == "original\n")
        }
    }
}
