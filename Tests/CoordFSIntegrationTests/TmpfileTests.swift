import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// open(2) with O_TMPFILE through the mount (FUSE_TMPFILE, which libfuse 3.14 does not know),
/// over the rings and through /dev/fuse:
/// a file with no name, that a link names, as on the backing filesystem. Before, the kernel
/// answered EOPNOTSUPP.
@Suite struct Tmpfile {
    /// Makes unnamed files in `dir`, links one, and prints what a program sees, one fact a line.
    static let steps = """
        import ctypes, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        def link(fd, path):
            # linkat through /proc/self/fd, following it (Python's os.link calls link(2), which does not).
            if libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100, path.encode(), 0x400) != 0:
                return os.strerror(ctypes.get_errno())
            return "linked"
        d, backing = sys.argv[1], sys.argv[2]
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o640)
        os.write(fd, b"written unnamed\\n")
        info = os.fstat(fd)
        print("links", info.st_nlink, "mode", oct(info.st_mode & 0o777))
        os.fchmod(fd, 0o604); os.utime(fd, (1, 2)); os.fsync(fd)
        print("set", oct(os.fstat(fd).st_mode & 0o777), os.fstat(fd).st_mtime)
        print("listed before", os.listdir(d), os.listdir(backing))
        print(link(fd, d + "/named.txt"))
        os.write(fd, b"written named\\n")
        os.close(fd)
        print("listed after", os.listdir(d), os.listdir(backing))
        print("reads", repr(open(d + "/named.txt").read()), repr(open(backing + "/named.txt").read()))
        print("backing mode", oct(os.stat(backing + "/named.txt").st_mode & 0o777))
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_EXCL, 0o600)
        print("excl", link(fd, d + "/excl.txt"))
        os.close(fd)
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
        print("onto a name", link(fd, d + "/named.txt"))
        os.close(fd)
        fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o600); os.write(fd, b"dropped"); os.close(fd)
        print("listed at the end", sorted(os.listdir(backing)))
        """

    static let expected = [
        "links 0 mode 0o640",
        "set 0o604 2.0",
        "listed before [] []",
        "linked",
        "listed after ['named.txt'] ['named.txt']",
        "reads 'written unnamed\\nwritten named\\n' 'written unnamed\\nwritten named\\n'",
        "backing mode 0o604",
        "excl No such file or directory",
        "onto a name File exists",
        "listed at the end ['named.txt']"
    ]

    @Test(arguments: [[], ["--no-kernel-passthrough"], ["--no-io-uring"]])
    func anUnnamedFileIsWrittenLinkedAndToldOfOnceWhenLinked(options: [String]) throws {
        let fx = try MountFixture(options)
        try FileManager.default.createDirectory(atPath: fx.backingPath("dir"), withIntermediateDirectories: true)
        let before = try fx.statistics()["inodes"] ?? 0
        let watcher = try Child(Paths.binary.path, ["watch", fx.path("dir")])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        let result = try run("/usr/bin/python3", ["-c", Self.steps, fx.path("dir"), fx.backingPath("dir")])
        #expect(
            result.output.split(separator: "\n").map(String.init) == Self.expected, "\(result.output) \(result.errors)")
        // The unnamed files are nobody's business: only the link is told, as an appearance.
        #expect(withoutOrigin(watcher.next()) == "\(fx.path("dir")) SUBITEM_APPEARED named.txt")
        #expect(watcher.next(timeout: .milliseconds(500)) == nil, "nothing else")
        // The dropped ones are forgotten: the mount knows the directory and named.txt more.
        #expect(
            eventually { (try? fx.statistics()["inodes"]) == before + 2 }, "\(String(describing: try? fx.statistics()))"
        )
        #expect(try fx.statistics()["open_files"] == 0)
    }

    @Test func anUnnamedFileOfAnotherUserIsTheirsAndNeedsTheirRightToTheDirectory() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try FileManager.default.createDirectory(atPath: fx.backingPath("open"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: fx.backingPath("closed"), withIntermediateDirectories: true)
        chmod(fx.backingPath("open"), 0o777)
        chmod(fx.backingPath("closed"), 0o755)
        let script = """
            import ctypes, os, sys
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(sys.argv[1] + "/open", os.O_TMPFILE | os.O_RDWR, 0o600)
            print(libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100, (sys.argv[1] + "/open/mine").encode(), 0x400))
            try:
                os.open(sys.argv[1] + "/closed", os.O_TMPFILE | os.O_RDWR, 0o600)
            except OSError as e:
                print(e.strerror)
            """
        let result = try run(
            "/usr/bin/setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script,
                fx.mountPoint.path
            ])
        #expect(result.output.split(separator: "\n") == ["0", "Permission denied"], "\(result.output) \(result.errors)")
        var info = stat()
        #expect(stat(fx.backingPath("open/mine"), &info) == 0 && info.st_uid == 65534 && info.st_gid == 65534)
    }
}
