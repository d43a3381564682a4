import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Kernel passthrough: the kernel serves reads, writes and mmap of open files from the backing
/// files; opens and releases still reach the mount and hold their intents. (Passthrough is the
/// default, so every other mount test runs with it: coordination, presenters, fio, programs.)
@Suite struct KernelPassthrough {
    /// Writes at offsets, appends, and writes through a shared mapping, then reads all of it back
    /// through the mount and compares with the backing file.
    static let exercise = """
        import mmap, os, random, sys
        path = sys.argv[1]
        rng = random.Random(7)
        data = bytearray(rng.randbytes(4 << 20))
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, data)
        for _ in range(200):
            offset = rng.randrange(0, len(data) - 4096)
            block = rng.randbytes(rng.randrange(1, 4096))
            os.pwrite(fd, block, offset)
            data[offset:offset + len(block)] = block
        os.fsync(fd)
        with mmap.mmap(fd, len(data)) as mapping:
            mapping[100:200] = b"m" * 100
            data[100:200] = b"m" * 100
            mapping.flush()
        os.close(fd)
        with open(path, "ab") as appending:
            appending.write(b"tail")
        data += b"tail"
        assert open(path, "rb").read() == bytes(data), "read back through the mount"
        print(len(data))
        """

    @Test func readsWritesAndMappingsOfOpenFilesReachTheBackingFile() throws {
        let fx = try MountFixture()
        let result = try run("/usr/bin/python3", ["-c", Self.exercise, fx.path("data.bin")])
        #expect(result.status == 0, "\(result.errors)")
        #expect(result.output == "\((4 << 20) + 4)\n")
        #expect(try run("/usr/bin/cmp", [fx.path("data.bin"), fx.backingPath("data.bin")]).status == 0)
        let counters = try fx.statistics()
        #expect(counters["kernel_passthrough"] == 1, "root on Linux 6.9+ gets passthrough: \(counters)")
        #expect((counters["passthrough_opens"] ?? 0) >= 3, "\(counters)")
    }

    /// Opens FILE read-write, asks for its attributes (as xfs_io does after its open), writes
    /// through a shared mapping of it, msyncs, and closes it.
    static let writeThroughAMapping = """
        import mmap, os, sys
        fd = os.open(sys.argv[1], os.O_RDWR)
        os.fstat(fd)
        with mmap.mmap(fd, 4096) as mapping:
            mapping[0:4] = b"mmap"
            mapping.flush()
        os.close(fd)
        """

    /// Writes through a shared writable mapping reach the backing file alone: the kernel's FUSE
    /// inode hears nothing of them (after a write(2) it forgets size and times by itself, not
    /// after a mapping's writes or its msync). The kernel keeps no attributes of a file open for
    /// writing, and forgets those it had at the open, so the new times show at once, as
    /// fstests' generic/080 and generic/215 check (`stat -c %Y` after `xfs_io -c "mmap 0 4k"
    /// -c "mwrite 0 4k"`); and with a long `--cache-timeout`, past a second too. (The kernel
    /// showed the times it was given after the open until its attribute timeout: a second, or
    /// the whole `--cache-timeout`.)
    @Test func timesChangedThroughASharedMappingShowAtOnce() throws {
        for (options, pause) in [([String](), 0.0), (["--cache-timeout", "30"], 1.1)] {
            let fx = try MountFixture(options)
            try fx.seed("mapped.bin", String(repeating: ".", count: 4096))
            // Times as stat(1) asks for them: only those, so the kernel answers from what it keeps.
            func times(_ path: String) throws -> String {
                try run("/usr/bin/stat", ["-c", "%.9Y %.9Z", path]).output
            }
            let before = try times(fx.path("mapped.bin"))
            Thread.sleep(forTimeInterval: 1.1)  // a second later: different at a second's resolution
            let wrote = try run("/usr/bin/python3", ["-c", Self.writeThroughAMapping, fx.path("mapped.bin")])
            #expect(wrote.status == 0, "\(options): \(wrote.errors)")
            Thread.sleep(forTimeInterval: pause)
            let after = try times(fx.path("mapped.bin")), behind = try times(fx.backingPath("mapped.bin"))
            #expect(after != before && !after.isEmpty, "\(options): the times did not change: \(before)")
            #expect(after == behind, "\(options): the mount shows \(after), the backing file has \(behind)")
            let opens = try fx.statistics()["passthrough_opens"] ?? 0
            #expect(opens >= 1, "\(options): served by kernel passthrough")
        }
    }

    @Test func aFileRootCannotOpenForWritingIsServedReadOnly() throws {
        let fx = try MountFixture()
        try fx.seed("frozen.txt", "frozen\n")
        // Immutable: even root opens it read-only, so its backing file is read-only.
        guard try run("/usr/bin/chattr", ["+i", fx.backingPath("frozen.txt")]).status == 0 else {
            Issue.record("chattr +i is not supported under /tmp here")
            return
        }
        defer { _ = try? run("/usr/bin/chattr", ["-i", fx.backingPath("frozen.txt")]) }
        let first = try Child.holder(), second = try Child.holder()
        #expect(first.ask("open r \(fx.path("frozen.txt"))") == "ok 1")
        #expect(second.ask("open r \(fx.path("frozen.txt"))") == "ok 1", "a second open shares the backing file")
        #expect(second.ask("read 1") == "data frozen|")
        #expect(first.ask("close 1") == "ok")
        #expect(second.ask("open w \(fx.path("frozen.txt"))") == "err EPERM", "writing fails as it would directly")
        #expect(second.ask("close all") == "ok")
        #expect(try run("/bin/cat", [fx.path("frozen.txt")]).output == "frozen\n")
    }

    @Test func aRunningProgramsWritersGetETXTBSYUntilItEnds() throws {
        let fx = try MountFixture()
        try FileManager.default.copyItem(atPath: "/bin/sleep", toPath: fx.backingPath("sleeper"))
        // Running from the backing directory: nobody may open it for writing, root included.
        let running = Process()
        running.executableURL = URL(fileURLWithPath: fx.backingPath("sleeper"))
        running.arguments = ["30"]
        try running.run()
        var stopped = false
        defer { if !stopped { kill(running.processIdentifier, SIGKILL); running.waitUntilExit() } }
        // One process, so that coordination lets its writers past its own reader (C4).
        let holder = try Child.holder()
        #expect(holder.ask("open r \(fx.path("sleeper"))") == "ok 1", "served from a read-only backing file")
        #expect(holder.ask("open w \(fx.path("sleeper"))") == "err ETXTBSY", "as opening it directly fails")
        kill(running.processIdentifier, SIGKILL)
        running.waitUntilExit()
        stopped = true
        // Writable again at once, as directly: served through the reader's registration.
        #expect(holder.ask("open w \(fx.path("sleeper"))") == "ok 2")
        #expect(holder.ask("close all") == "ok")
        #expect(try run("/usr/bin/cmp", ["/bin/sleep", fx.path("sleeper")]).status == 0)
    }

    /// The first open's own descriptor is the file registered with the kernel, a reader's
    /// read-only one too: the kernel serves each open from a file of its own, opened with that
    /// open's flags where the registered one lies, so a writer beside the reader writes, and
    /// an appender appends, through the same registration.
    @Test func aReadersDescriptorServesTheWritersBesideIt() throws {
        let fx = try MountFixture()
        try fx.seed("shared.txt", "first\n")
        // One process, so that coordination lets its writers past its own reader (C4).
        let holder = try Child.holder()
        #expect(holder.ask("open r \(fx.path("shared.txt"))") == "ok 1")
        #expect(holder.ask("open w \(fx.path("shared.txt"))") == "ok 2")
        #expect(holder.ask("open a \(fx.path("shared.txt"))") == "ok 3")
        #expect(holder.ask("write 3 second") == "ok")
        #expect(holder.ask("read 1") == "data first|second|")
        let counters = try fx.statistics()
        try #require(counters["kernel_passthrough"] == 1, "root on Linux 6.9+ gets passthrough: \(counters)")
        #expect((counters["passthrough_opens"] ?? 0) >= 3, "all three served by the kernel: \(counters)")
        #expect(holder.ask("close all") == "ok")
        #expect(try String(contentsOfFile: fx.backingPath("shared.txt"), encoding: .utf8) == "first\nsecond\n")
    }

    /// An overlay's files are one deep in the kernel's stacking: as the backing directory's own
    /// filesystem the mount declares a depth of 2 and they are served by the kernel; mounted
    /// inside a backing directory of ext4, the kernel refuses them (ELOOP), and the mount
    /// remembers their device and serves them itself without asking again.
    @Test func overlayFilesAreServedByTheKernelWhereTheMountIsDeepEnough() throws {
        try #require(getuid() == 0, "mounts an overlay: needs root")
        let base = URL(fileURLWithPath: "/tmp/coordfs-overlay-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: base) }
        func overlay(at merged: String) throws {
            for layer in ["lower", "upper", "work"] {
                try FileManager.default.createDirectory(
                    at: base.appendingPathComponent(layer), withIntermediateDirectories: true)
            }
            try Data("lower\n".utf8).write(to: base.appendingPathComponent("lower/one.txt"))
            try Data("lower\n".utf8).write(to: base.appendingPathComponent("lower/two.txt"))
            try FileManager.default.createDirectory(atPath: merged, withIntermediateDirectories: true)
            let layers = "lowerdir=\(base.path)/lower,upperdir=\(base.path)/upper,workdir=\(base.path)/work"
            try #require(mount("overlay", merged, "overlay", 0, layers) == 0, "overlay: errno \(errno)")
        }
        func readThrice(_ paths: [String]) throws {
            for _ in 0..<3 {
                for path in paths { #expect(try String(contentsOfFile: path, encoding: .utf8) == "lower\n") }
            }
        }

        // The overlay as the backing directory.
        let merged = base.appendingPathComponent("merged").path
        try overlay(at: merged)
        defer { _ = umount2(merged, Int32(MNT_DETACH)) }
        do {
            let fx = try MountFixture(backing: URL(fileURLWithPath: merged))
            try readThrice([fx.path("one.txt"), fx.path("two.txt")])
            let result = try run("/bin/sh", ["-c", "echo upper >> \"$0\"", fx.path("one.txt")])
            #expect(result.status == 0, "\(result.errors)")
            #expect(try String(contentsOfFile: merged + "/one.txt", encoding: .utf8) == "lower\nupper\n")
            let counters = try fx.statistics()
            try #require(counters["kernel_passthrough"] == 1, "root on Linux 6.9+ gets passthrough: \(counters)")
            #expect((counters["passthrough_opens"] ?? 0) >= 7, "\(counters)")
            #expect(counters["passthrough_refused"] == 0, "\(counters)")
        }

        // The same overlay inside a backing directory of the root's filesystem.
        let fx = try MountFixture()
        try withExtendedLifetime(fx) {
            let inside = fx.backingPath("overlay")
            try FileManager.default.createDirectory(atPath: inside, withIntermediateDirectories: false)
            try #require(mount(merged, inside, nil, UInt(MS_BIND), nil) == 0)
            defer { _ = umount2(inside, Int32(MNT_DETACH)) }
            try fx.seed("plain.txt", "lower\n")
            try readThrice([fx.path("overlay/two.txt"), fx.path("plain.txt")])
            let counters = try fx.statistics()
            try #require(counters["kernel_passthrough"] == 1, "root on Linux 6.9+ gets passthrough: \(counters)")
            #expect(counters["passthrough_refused"] == 1, "the overlay's device, once: \(counters)")
            #expect(counters["passthrough_opens"] == 3, "the plain file's three: \(counters)")
        }
    }

    @Test func withoutPassthroughTheMountServesTheData() throws {
        for options in [["--no-kernel-passthrough"], ["--writeback-cache"]] {
            let fx = try MountFixture(options)
            let result = try run("/usr/bin/python3", ["-c", Self.exercise, fx.path("data.bin")])
            #expect(result.status == 0, "\(options): \(result.errors)")
            #expect(try run("/usr/bin/cmp", [fx.path("data.bin"), fx.backingPath("data.bin")]).status == 0)
            let counters = try fx.statistics()
            #expect(
                counters["kernel_passthrough"] == 0 && counters["passthrough_opens"] == 0, "\(options): \(counters)")
        }
    }
}
