import Foundation
import Testing

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
