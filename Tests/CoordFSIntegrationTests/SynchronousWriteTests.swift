import Foundation
import TestSupport
import Testing

/// Writes that ask to be synchronous (RWF_DSYNC, RWF_SYNC, a `sync` mount) where the daemon
/// serves the data and the kernel sends their open's writes as direct_io (an O_DIRECT open
/// without kernel passthrough): the kernel sends no FSYNC after them, as it does after buffered
/// writes, so the mount syncs each before it answers, and only where the backing descriptor
/// does not already.
@Suite struct SynchronousWrites {
    /// Opens `f` with the flags named by argv[2], writes three 4 KiB blocks with the per-write
    /// flags named by argv[3] (comma-separated: dsync, sync or none), and prints the mount's
    /// `synced_writes`; the file is compared with the backing afterwards.
    static let writes = """
        import json, mmap, os, sys
        mount, opening, each = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
        flags = {"direct": os.O_DIRECT, "direct,dsync": os.O_DIRECT | os.O_DSYNC, "buffered": 0}[opening]
        per_write = {"dsync": os.RWF_DSYNC, "sync": os.RWF_SYNC, "none": 0}
        block = mmap.mmap(-1, 4096)
        fd = os.open(os.path.join(mount, "f"), os.O_CREAT | os.O_WRONLY | flags, 0o644)
        for index, name in enumerate(each):
            block.seek(0)
            block.write(bytes([65 + index]) * 4096)
            assert os.pwritev(fd, [block], index * 4096, per_write[name]) == 4096
        os.close(fd)
        print(json.loads(os.getxattr(mount, "user.coordfs.stats"))["synced_writes"])
        """

    func syncedWrites(_ options: [String], opening: String, each: String) throws -> String {
        let fx = try MountFixture(["--no-kernel-passthrough"] + options)
        let result = try run("/usr/bin/python3", ["-c", Self.writes, fx.mountPoint.path, opening, each])
        #expect(result.status == 0, "\(result.errors)")
        #expect(try run("/usr/bin/cmp", [fx.path("f"), fx.backingPath("f")]).status == 0)
        let blocks = try Data(contentsOf: URL(fileURLWithPath: fx.backingPath("f")))
        #expect(
            blocks
                == Data(
                    (0..<each.split(separator: ",").count).flatMap { Array(repeating: UInt8(65 + $0), count: 4096) }))
        return result.output
    }

    @Test func directWritesThatAskAreSynced() throws {
        #expect(try syncedWrites([], opening: "direct", each: "dsync,none,sync") == "2\n")
    }

    /// O_DSYNC on the open reaches the backing descriptor, whose writes then sync by
    /// themselves: only RWF_SYNC's metadata is left to the mount.
    @Test func aDescriptorThatSyncsItselfIsNotSyncedAgain() throws {
        #expect(try syncedWrites([], opening: "direct,dsync", each: "dsync,none,sync") == "1\n")
    }

    /// After buffered writes the kernel sends FSYNC itself.
    @Test func bufferedWritesAreLeftToTheKernelsFsync() throws {
        #expect(try syncedWrites([], opening: "buffered", each: "dsync,none,sync") == "0\n")
    }

    /// On a `sync` mount every write asks.
    @Test func aSyncMountSyncsEveryDirectWrite() throws {
        #expect(try syncedWrites(["-o", "sync"], opening: "direct", each: "none,none,none") == "3\n")
    }

    /// What else changes a file's data through the mount without a write: a fallocate, a
    /// copy_file_range, an open's O_TRUNC. Each is synced under `sync` (with kernel passthrough
    /// too: none of them passes through), and none otherwise.
    static let others = """
        import json, os, sys
        mount = sys.argv[1]
        with open(os.path.join(mount, "a"), "wb") as out:
            out.write(b"a" * 8192)
        source = os.open(os.path.join(mount, "a"), os.O_RDONLY)
        target = os.open(os.path.join(mount, "b"), os.O_CREAT | os.O_RDWR, 0o644)
        os.posix_fallocate(target, 0, 16384)
        assert os.copy_file_range(source, target, 8192, 0, 0) == 8192
        os.close(source); os.close(target)
        os.close(os.open(os.path.join(mount, "a"), os.O_WRONLY | os.O_TRUNC))
        sizes = [os.stat(os.path.join(mount, name)).st_size for name in ("a", "b")]
        print(json.loads(os.getxattr(mount, "user.coordfs.stats"))["synced_writes"], sizes)
        """

    @Test(arguments: [["-o", "sync"], ["-o", "sync", "--no-kernel-passthrough"], [], ["-o", "dirsync"]])
    func underSyncFallocatesCopiesAndTruncatingOpensAreSynced(options: [String]) throws {
        let fx = try MountFixture(options)
        let result = try run("/usr/bin/python3", ["-c", Self.others, fx.mountPoint.path])
        #expect(result.status == 0, "\(result.errors)")
        #expect(result.output == "\(options.contains("sync") ? 3 : 0) [0, 16384]\n")
        #expect(
            try Data(contentsOf: URL(fileURLWithPath: fx.backingPath("b"))) == Data(repeating: 97, count: 8192)
                + Data(count: 8192))
    }
}
