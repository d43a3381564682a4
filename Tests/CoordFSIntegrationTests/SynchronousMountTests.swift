import Foundation
import TestSupport
import Testing

/// `-o dirsync`, and `-o sync`, which the kernel takes as dirsync too: a change of names is on
/// disk before it is answered. Through FUSE nothing follows the change to ask for that, so the
/// mount fsyncs each directory it changed (`synced_directories`).
@Suite struct Dirsync {
    /// Every kind of change of names, each named with how many directories it changes; prints
    /// the mount's `synced_directories` and what is left.
    static let changes = """
        import json, os, sys
        mount = sys.argv[1]
        at = lambda *names: os.path.join(mount, *names)
        os.mkdir(at("d1")); os.mkdir(at("d2"))                             # 2
        os.close(os.open(at("d1", "f"), os.O_CREAT | os.O_WRONLY, 0o644))  # 1
        os.symlink("f", at("d1", "s")); os.link(at("d1", "f"), at("d1", "h")); os.mkfifo(at("d1", "p"))  # 3
        os.rename(at("d1", "f"), at("d1", "g"))                           # 1: one directory
        os.rename(at("d1", "g"), at("d2", "g"))                           # 2
        for name in ("h", "s", "p"): os.unlink(at("d1", name))            # 3
        os.unlink(at("d2", "g")); os.rmdir(at("d1")); os.rmdir(at("d2"))  # 3
        print(json.loads(os.getxattr(mount, "user.coordfs.stats"))["synced_directories"], os.listdir(mount))
        """

    func syncedDirectories(_ options: [String]) throws -> String {
        let fx = try MountFixture(options)
        let result = try run("/usr/bin/python3", ["-c", Self.changes, fx.mountPoint.path])
        #expect(result.status == 0, "\(result.errors)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: fx.backing.path).isEmpty)
        return result.output
    }

    @Test(arguments: [["-o", "dirsync"], ["-o", "sync"], ["-o", "sync", "--no-kernel-passthrough"]])
    func everyChangedDirectoryIsSynced(options: [String]) throws {
        #expect(try syncedDirectories(options) == "15 []\n")
    }

    /// Without either (or with `sync` taken back by a later `async`), none is.
    @Test(arguments: [[], ["-o", "sync,async"]])
    func otherwiseNone(options: [String]) throws {
        #expect(try syncedDirectories(options) == "0 []\n")
    }
}

/// `-o sync`: a change of a file's or directory's attributes is on disk before it is answered.
@Suite struct SyncAttributes {
    /// Each change is named with how many items the mount syncs for it; prints the mount's
    /// `synced_attributes` and what the file ended as.
    static let changes = """
        import json, os, sys
        mount = sys.argv[1]
        at = lambda *names: os.path.join(mount, *names)
        os.mkdir(at("d"))
        with open(at("d", "f"), "wb") as out:
            out.write(b"x" * 100)
        os.mkfifo(at("d", "p"))
        os.chmod(at("d", "f"), 0o600); os.utime(at("d", "f"), (1, 2)); os.truncate(at("d", "f"), 10)  # 3
        os.setxattr(at("d", "f"), "user.k", b"v"); os.removexattr(at("d", "f"), "user.k")            # 2
        os.chmod(at("d"), 0o700)                                                                      # 1
        os.chmod(at("d", "p"), 0o600)                        # 0: a FIFO is not opened to be synced
        fd = os.open(at("d", "f"), os.O_WRONLY)
        os.ftruncate(fd, 5)                                  # 1, through the open file
        os.close(fd)
        info = os.stat(at("d", "f"))
        print(json.loads(os.getxattr(mount, "user.coordfs.stats"))["synced_attributes"], info.st_size,
              oct(info.st_mode & 0o777))
        """

    @Test(arguments: [["-o", "sync"], ["-o", "sync", "--no-kernel-passthrough"], [], ["-o", "dirsync"]])
    func changesOfAttributesAreSyncedOnlyUnderSync(options: [String]) throws {
        let fx = try MountFixture(options)
        let result = try run("/usr/bin/python3", ["-c", Self.changes, fx.mountPoint.path])
        #expect(result.status == 0, "\(result.errors)")
        let synced = options.contains("sync") ? 7 : 0
        #expect(result.output == "\(synced) 5 0o600\n")
    }
}
