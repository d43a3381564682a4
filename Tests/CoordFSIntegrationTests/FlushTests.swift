import Foundation
import TestSupport
import Testing

/// close(2) through the mount: a FLUSH round trip only where the backing filesystem can report
/// something at close (a network or FUSE filesystem), none on a local one.
@Suite struct Flush {
    /// Creates, rewrites and appends files, closing duplicated descriptors too; prints the bytes.
    static let closes = """
        import os, sys
        directory = sys.argv[1]
        for i in range(5):
            path = os.path.join(directory, "f%d" % i)
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, b"x" * (i + 1))
            os.close(os.dup(fd))
            os.close(fd)
            with open(path, "r+b") as rewrite:
                rewrite.write(b"y")
            with open(path, "ab") as append:
                append.write(b"z")
        print(b"".join(open(os.path.join(directory, "f%d" % i), "rb").read() for i in range(5)).decode())
        """
    static let expected = "yz\nyxz\nyxxz\nyxxxz\nyxxxxz\n".replacingOccurrences(of: "\n", with: "") + "\n"

    @Test(arguments: [[], ["--no-kernel-passthrough"]])
    func closesOnALocalBackingSendNoFlush(arguments: [String]) throws {
        let fx = try MountFixture(arguments)
        let result = try run("/usr/bin/python3", ["-c", Self.closes, fx.mountPoint.path])
        #expect(result.status == 0, "\(result.errors)")
        #expect(result.output == Self.expected)
        for i in 0..<5 {
            #expect(try run("/usr/bin/cmp", [fx.path("f\(i)"), fx.backingPath("f\(i)")]).status == 0)
        }
        let counters = try fx.statistics()
        #expect(counters["flushes"] == 0, "\(counters)")
    }

    @Test func aBackingThatReportsAtCloseKeepsItsFlush() throws {
        // A FUSE filesystem as the backing: its close(2) can fail, so every close is passed on.
        let inner = try MountFixture()
        let outer = try MountFixture(backing: inner.mountPoint)
        let result = try run("/usr/bin/python3", ["-c", Self.closes, outer.mountPoint.path])
        #expect(result.status == 0, "\(result.errors)")
        #expect(result.output == Self.expected)
        #expect(try run("/usr/bin/cmp", [outer.path("f4"), inner.backingPath("f4")]).status == 0)
        let counters = try outer.statistics()
        #expect((counters["flushes"] ?? 0) >= 15, "three closes of each of five files: \(counters)")
        #expect(try inner.statistics()["flushes"] == 0)
        outer.unmount()
    }
}
