import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// FUSE over io_uring: requests come through one queue per CPU, served by a thread on that CPU.
/// (`make test` turns the fuse module's `enable_uring` on, so every other mount test runs over
/// the rings too: coordination, presenters, interrupts, fio, programs.)
@Suite(.serialized) struct RingTransport {
    static let switchPath = "/sys/module/fuse/parameters/enable_uring"

    /// Whether this kernel has the transport; turns it on when it is off (root only).
    static func kernelOffersRings() -> Bool {
        guard FileManager.default.fileExists(atPath: switchPath) else { return false }
        if (try? String(contentsOfFile: switchPath, encoding: .utf8))?.hasPrefix("Y") != true {
            try? "Y".write(toFile: switchPath, atomically: false, encoding: .utf8)
        }
        return (try? String(contentsOfFile: switchPath, encoding: .utf8))?.hasPrefix("Y") == true
    }

    static let cpus = Int(sysconf(Int32(_SC_NPROCESSORS_CONF)))

    /// Creates, writes, renames, reads and removes files and a directory through the mount.
    static func exercise(_ fx: MountFixture) throws {
        let script = """
        import os, sys
        root = sys.argv[1]
        os.mkdir(root + "/d")
        for i in range(50):
            with open(root + "/d/f%d" % i, "w") as f: f.write("x" * i)
        os.rename(root + "/d/f7", root + "/d/seven")
        assert open(root + "/d/seven").read() == "x" * 7
        for name in os.listdir(root + "/d"): os.unlink(root + "/d/" + name)
        os.rmdir(root + "/d")
        print("done")
        """
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path])
        #expect(result.output == "done\n", "\(result.errors)")
    }

    @Test func requestsComeThroughOneQueuePerCPUWhenTheKernelOffersThem() throws {
        let offered = Self.kernelOffersRings()
        let fx = try MountFixture()
        try Self.exercise(fx)
        let counters = try fx.statistics()
        if offered {
            #expect(counters["ring_queues"] == Self.cpus, "\(counters)")
            #expect((counters["ring_requests"] ?? 0) >= 150, "creates, writes, renames and unlinks: \(counters)")
        } else {
            // No transport in this kernel: /dev/fuse serves everything.
            #expect(counters["ring_queues"] == 0, "\(counters)")
        }
    }

    @Test func withoutIoUringRequestsComeThroughTheDevice() throws {
        _ = Self.kernelOffersRings()
        let fx = try MountFixture(["--no-io-uring"])
        try Self.exercise(fx)
        let counters = try fx.statistics()
        #expect(counters["ring_queues"] == 0, "\(counters)")
        #expect(counters["ring_requests"] == 0, "\(counters)")
    }

    /// A queue starts with eight entries, and a request that waits for coordination keeps its
    /// entry until answered. Twelve readers on one CPU wait for a writer on that CPU: its close
    /// must still get through, so the queue registers more entries.
    @Test func waitingRequestsOnOneCPUDoNotHoldUpTheHoldersClose() throws {
        guard Self.kernelOffersRings() else { return }
        let fx = try MountFixture(["--wait-timeout", "60"])
        try fx.seed("shared.txt")
        func pinned() throws -> Child {
            try Child("/usr/bin/taskset", ["-c", "0", "/usr/bin/python3", Paths.scripts.appendingPathComponent("hold.py").path])
        }
        let writer = try pinned()
        #expect(writer.ask("open w \(fx.path("shared.txt"))") == "ok 1")
        let readers = try (0..<12).map { _ in try pinned() }
        for reader in readers { reader.send("open r \(fx.path("shared.txt"))") }
        #expect(eventually(.seconds(10)) { ((try? fx.statistics())?["waited"] ?? 0) >= 12 }, "the readers wait for the writer")
        #expect(writer.ask("close all", timeout: .seconds(15)) == "ok", "the writer's close got through")
        for reader in readers { #expect(reader.next(timeout: .seconds(15)) == "ok 1") }
    }
}
