import CoordFSMount
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `-o noatime` reaches the backing files, whose times the mount shows: a read through the
/// mount, by kernel passthrough or by the daemon, and a listing leave them as they were.
@Suite struct AccessTimeOptions {
    /// Makes `d/f` (10 000 bytes) in the backing directory with both access times in 2000,
    /// before their modification times, so that the backing's relatime updates them at the next
    /// read; then reads the file and lists the directory through the mount. Prints the bytes
    /// read, the names listed, and whether each access time was kept.
    static let readAndList = """
        import os, sys
        backing, mount = sys.argv[1], sys.argv[2]
        directory, file = os.path.join(backing, "d"), os.path.join(backing, "d", "f")
        os.makedirs(directory, exist_ok=True)
        with open(file, "wb") as out:
            out.write(b"x" * 10000)
        old = 946684800
        for path in (file, directory):
            os.utime(path, (old, os.stat(path).st_mtime))
        with open(os.path.join(mount, "d", "f"), "rb") as read:
            count = len(read.read())
        names = os.listdir(os.path.join(mount, "d"))
        kept = lambda path: "kept" if int(os.stat(path).st_atime) == old else "touched"
        print(count, names, "file", kept(file), "directory", kept(directory))
        """

    static func readAndList(_ fx: MountFixture, in relative: String = "") throws -> String {
        let result = try run("/usr/bin/python3", ["-c", readAndList, fx.backingPath(relative), fx.path(relative)])
        #expect(result.status == 0, "\(result.errors)")
        return result.output
    }

    @Test(arguments: [[], ["--no-kernel-passthrough"]])
    func noatimeLeavesTheBackingFilesAndDirectoriesAsTheyWere(path: [String]) throws {
        let fx = try MountFixture(["-o", "noatime"] + path)
        #expect(try Self.readAndList(fx) == "10000 ['f'] file kept directory kept\n")
    }

    /// Without it the same reads touch both, as the backing's relatime says: the check above can fail.
    @Test(arguments: [[], ["--no-kernel-passthrough"]])
    func withoutItReadsTouchThemAsTheBackingSays(path: [String]) throws {
        let fx = try MountFixture(path)
        #expect(try Self.readAndList(fx) == "10000 ['f'] file touched directory touched\n")
    }

    /// Where no private noatime copy of the backing's mounts can be made, the daemon, which
    /// then serves the data itself (without CAP_SYS_ADMIN it has no kernel passthrough either),
    /// opens what it reads O_NOATIME.
    @Test func withoutAPrivateCopyTheDaemonsOpensCarryO_NOATIME() throws {
        let fx = try MountFixture(inProcess: {
            $0.fuseOptions = ["noatime"]
            $0.noatimeThroughPrivateMounts = false
            $0.kernelPassthrough = false
        })
        #expect(try Self.readAndList(fx) == "10000 ['f'] file kept directory kept\n")
    }

    /// The private copy takes the mounts below the backing directory too.
    @Test func aFilesystemMountedInsideTheBackingIsSeenAndKeptToo() throws {
        let base = URL(fileURLWithPath: "/tmp/coordfs-it-atime-\(UUID().uuidString.prefix(8))")
        let inner = base.appendingPathComponent("inner")
        try FileManager.default.createDirectory(at: inner, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: base) }
        guard try run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", inner.path]).status == 0 else {
            Issue.record("cannot mount a tmpfs at \(inner.path)")
            return
        }
        defer { _ = try? run("/usr/bin/umount", [inner.path]) }
        let fx = try MountFixture(["-o", "noatime"], backing: base)
        #expect(try Self.readAndList(fx, in: "inner") == "10000 ['f'] file kept directory kept\n")
        fx.unmount()
    }

    /// The backing's own mount is held as before while a noatime mount reads a private copy
    /// of it: umount still says it is busy, rather than leave the filesystem alive unseen.
    @Test func theBackingsOwnMountStaysBusy() throws {
        let base = URL(fileURLWithPath: "/tmp/coordfs-it-atime-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: base) }
        guard try run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", base.path]).status == 0 else {
            Issue.record("cannot mount a tmpfs at \(base.path)")
            return
        }
        var mounted = true
        defer { if mounted { _ = try? run("/usr/bin/umount", [base.path]) } }
        let fx = try MountFixture(["-o", "noatime"], backing: base)
        let busy = try run("/usr/bin/umount", [base.path])
        mounted = busy.status != 0
        #expect(busy.status != 0 && busy.errors.contains("busy"), "\(busy.errors)")
        fx.unmount()
        // The daemon exits just after its mount goes.
        if mounted { mounted = !eventually(.seconds(5)) { (try? run("/usr/bin/umount", [base.path]))?.status == 0 } }
        #expect(!mounted, "the backing's mount is free once the coordfs mount is gone")
    }

    /// tar --atime-preserve=system's and rsync --open-noatime's reads: the kernel opens a
    /// passthrough backing file with the program's flags, the daemon its own descriptor.
    @Test(arguments: [[], ["--no-kernel-passthrough"]])
    func aProgramsOwnNoatimeOpenLeavesTheBackingFileAsItWas(path: [String]) throws {
        let fx = try MountFixture(path)
        let script = """
            import os, sys
            backing, mount = sys.argv[1], sys.argv[2]
            with open(os.path.join(backing, "f"), "wb") as out:
                out.write(b"x" * 10000)
            old = 946684800
            os.utime(os.path.join(backing, "f"), (old, os.stat(os.path.join(backing, "f")).st_mtime))
            def read(flags):
                fd = os.open(os.path.join(mount, "f"), os.O_RDONLY | flags)
                # Nothing from the mount's page cache: the read reaches the backing file.
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                count = len(os.read(fd, 20000))
                os.close(fd)
                return count
            count = read(os.O_NOATIME)
            kept = int(os.stat(os.path.join(backing, "f")).st_atime) == old
            read(0)
            touched = int(os.stat(os.path.join(backing, "f")).st_atime) != old
            print(count, "kept" if kept else "touched", "then touched" if touched else "then kept")
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.backing.path, fx.mountPoint.path])
        #expect(result.status == 0, "\(result.errors)")
        // The plain read after it shows that a read there does touch it.
        #expect(result.output == "10000 kept then touched\n")
    }

    /// As the kernel reads a mount's flags: the last of noatime and atime wins.
    @Test func noatimeReadsAsTheKernelReadsIt() {
        func isNoatime(_ options: [String]) -> Bool {
            var configuration = MountConfiguration(backing: "/b", mountPoint: "/m")
            configuration.fuseOptions = options
            return configuration.isNoatime
        }
        #expect(!isNoatime([]))
        #expect(isNoatime(["allow_other", "noatime"]))
        #expect(!isNoatime(["noatime", "atime"]))
        #expect(isNoatime(["atime", "noatime", "default_permissions"]))
    }
}
