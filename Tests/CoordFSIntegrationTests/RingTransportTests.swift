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

    /// Whether this kernel has the transport switched on (`make test` switches it on where it
    /// can, before the tests: none of them writes to /sys).
    static func kernelOffersRings() -> Bool {
        (try? String(contentsOfFile: switchPath, encoding: .utf8))?.hasPrefix("Y") == true
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

    /// Makes and removes `count` files through the mount, then waits (up to 5 s) until the
    /// kernel has forgotten as many items; returns the mount's counters.
    static func forgetMany(_ fx: MountFixture, count: Int) throws -> [String: Int] {
        let script = """
            import os, sys
            root, count = sys.argv[1] + "/many", int(sys.argv[2])
            os.mkdir(root)
            for i in range(count): os.close(os.open("%s/f%d" % (root, i), os.O_CREAT | os.O_WRONLY))
            for i in range(count): os.unlink("%s/f%d" % (root, i))
            print("done")
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path, String(count)])
        #expect(result.output == "done\n", "\(result.errors)")
        let deadline = Date().addingTimeInterval(5)
        var counters = try fx.statistics()
        while (counters["forgotten"] ?? 0) < count && Date() < deadline {
            usleep(20_000)
            counters = try fx.statistics()
        }
        return counters
    }

    /// With the queues serving every other request, `/dev/fuse` carries the forgets, and its
    /// reader pauses after each (`Filesystem.forgetRequestServed`): the kernel then hands over
    /// many items per BATCH_FORGET instead of waking a thread for each removed file.
    @Test(.needsRings) func forgetsComeInBatchesBesideTheRings() throws {
        let fx = try MountFixture()
        let counters = try Self.forgetMany(fx, count: 400)
        let requests = counters["forget_requests"] ?? 0, forgotten = counters["forgotten"] ?? 0
        #expect(forgotten >= 400, "every removed file forgotten: \(counters)")
        #expect(requests >= 1 && requests * 4 <= forgotten, "several items per forget request: \(counters)")
        // The mount still serves while its device readers pause: an item made now is there.
        try Self.exercise(fx)
    }

    /// Through `/dev/fuse` alone every request comes that way, so forgets are not paced; they
    /// are all served all the same.
    @Test func forgetsAreServedThroughTheDeviceAlone() throws {
        let fx = try MountFixture(["--no-io-uring"])
        let counters = try Self.forgetMany(fx, count: 200)
        #expect(counters["ring_queues"] == 0, "\(counters)")
        #expect((counters["forgotten"] ?? 0) >= 200, "every removed file forgotten: \(counters)")
    }

    /// Without kernel passthrough the daemon serves reads. Over the rings each is read straight
    /// into the entry that carries its request (`cfs_ring_reply_read`): large and small, at any
    /// offset, short at the end of a file that shrank behind the mount's back, and what comes
    /// back is the file.
    @Test(.needsRings) func readsWithoutPassthroughGoStraightIntoTheirEntry() throws {
        let fx = try MountFixture(["--no-kernel-passthrough"])
        let script = """
            import os, random, sys
            backing, mount = sys.argv[1], sys.argv[2]
            data = random.Random(7).randbytes(3 * 1024 * 1024 + 12345)
            with open(backing + "/big", "wb") as f: f.write(data)
            with open(mount + "/big", "rb") as f: whole = f.read()
            assert whole == data, "whole file"
            fd = os.open(mount + "/big", os.O_RDONLY)
            for offset, size in [(1, 1), (4095, 4097), (1000003, 300000), (len(data) - 10, 100), (len(data), 10)]:
                got = os.pread(fd, size, offset)
                assert got == data[offset:offset + size], "pread %d at %d" % (size, offset)
            os.close(fd)
            # Shrunk behind the mount's back while open: the kernel still knows the old size and
            # asks for more than there is; the read comes back short, with the bytes that are left.
            with open(backing + "/small", "wb") as f: f.write(data[:200000])
            fd = os.open(mount + "/small", os.O_RDONLY)
            os.truncate(backing + "/small", 70000)
            got = os.pread(fd, 200000, 0)
            assert data[:70000].startswith(got) and len(got) <= 70000, "short read: %d bytes" % len(got)
            os.close(fd)
            print("done")
            """
        let before = try fx.statistics()
        #expect(before["kernel_passthrough"] == 0, "\(before)")
        let result = try run("/usr/bin/python3", ["-c", script, fx.backing.path, fx.mountPoint.path])
        #expect(result.output == "done\n", "\(result.errors)")
        let after = try fx.statistics()
        let direct = (after["ring_direct_reads"] ?? 0) - (before["ring_direct_reads"] ?? 0)
        #expect(direct >= 4, "reads answered straight into their entry: \(after)")
    }

    /// `--ring-lanes all` on a local backing: lane threads serve every request, and the same
    /// work gets done.
    @Test(.needsRings) func ringLanesAllSendsEveryRequestToALane() throws {
        let fx = try MountFixture(["--ring-lanes", "all"])
        try Self.exercise(fx)
        let counters = try fx.statistics()
        #expect(counters["ring_lanes_all"] == 1, "\(counters)")
        let served = counters["ring_requests"] ?? 0, laned = counters["ring_lane_requests"] ?? 0
        #expect(served >= 150 && laned == served, "\(counters)")
    }

    /// The queue threads run a few nice steps ahead of the programs they serve (ring.c,
    /// `cfs_take_nice`): -5 unless told otherwise, from the command line or a profile.
    @Test(.needsRings) func queueThreadsRunAtTheServeNiceValue() throws {
        let profile = URL(fileURLWithPath: "/tmp/coordfs-it-nice-\(UUID().uuidString.prefix(8)).profile")
        defer { try? FileManager.default.removeItem(at: profile) }
        try Data("serve-nice = 2\n".utf8).write(to: profile)
        for (arguments, expected) in [
            ([], -5), (["--serve-nice=0"], 0), (["--serve-nice", "3"], 3), (["--profile", profile.path], 2)
        ] {
            let fx = try MountFixture(arguments)
            try Self.exercise(fx)
            // An fsync goes to a lane thread, which its queue thread starts: it keeps the value.
            let synced = try run(
                "/usr/bin/python3",
                [
                    "-c",
                    "import os,sys; fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY); os.write(fd, b'x'); os.fsync(fd); os.close(fd)",
                    fx.path("synced")
                ])
            #expect(synced.status == 0, "\(synced.errors)")
            let nices = try Self.niceValues(ofThreadsNamed: "coordfs-ring", in: fx)
            #expect(nices.count == Self.cpus, "\(arguments): \(nices)")
            #expect(nices.allSatisfy { $0 == expected }, "\(arguments): \(nices)")
            let lanes = try Self.niceValues(ofThreadsNamed: "coordfs-lane", in: fx)
            #expect(!lanes.isEmpty && lanes.allSatisfy { $0 == expected }, "\(arguments): lanes \(lanes)")
            #expect(try fx.statistics()["serve_nice"] == expected, "\(arguments)")
        }
    }

    /// Through /dev/fuse, libfuse's workers start from the thread that runs the session's loop,
    /// and keep the value it takes.
    @Test func workersOnTheDeviceRunAtTheServeNiceValue() throws {
        for (arguments, expected) in [(["--no-io-uring"], -5), (["--no-io-uring", "--serve-nice=0"], 0)] {
            let fx = try MountFixture(arguments)
            try Self.exercise(fx)
            #expect(try fx.statistics()["serve_nice"] == expected, "\(arguments)")
            // The loop's thread and its workers keep the process's name; the control socket's
            // threads (started before the loop) too, at the daemon's value.
            let named = try Self.niceValues(ofThreadsNamed: "coordfs", in: fx, exactly: true)
            #expect(
                named.filter { $0 == -5 }.count >= (expected == -5 ? 2 : 0) && (expected == -5 || !named.contains(-5)),
                "\(arguments): \(named)")
        }
    }

    /// The nice values of the mount daemon's threads whose names start with `prefix` (or are
    /// `prefix`, `exactly`).
    static func niceValues(ofThreadsNamed prefix: String, in fx: MountFixture, exactly: Bool = false) throws -> [Int] {
        let pid = try run(
            "/usr/bin/python3",
            [
                "-c", "import os,sys; sys.stdout.write(os.getxattr(sys.argv[1], 'user.coordfs.pid').decode())",
                fx.mountPoint.path
            ]
        ).output
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")
        return tasks.compactMap { task -> Int? in
            guard let comm = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8),
                exactly ? comm == prefix + "\n" : comm.hasPrefix(prefix),
                let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
                let end = stat.lastIndex(of: ")")
            else { return nil }
            // After the name: state is field 3, nice field 19.
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            return fields.count > 16 ? Int(fields[16]) : nil
        }
    }

    /// A kernel that has the transport switched off gets a mount through /dev/fuse, and one line
    /// on stderr that says so and how to switch it on; `--no-io-uring` asked for that: no line.
    /// (The switch is a file of the test's, named to the command in COORDFS_IO_URING_SWITCH: the
    /// kernel keeps serving through its rings.)
    @Test func aKernelWithTheTransportSwitchedOffGetsANote() throws {
        let fakeSwitch = "/tmp/coordfs-it-switch-\(UUID().uuidString.prefix(8))"
        try "N\n".write(toFile: fakeSwitch, atomically: false, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: fakeSwitch) }
        var environment = ProcessInfo.processInfo.environment
        environment["COORDFS_IO_URING_SWITCH"] = fakeSwitch
        for (arguments, noted) in [([String](), true), (["--no-io-uring"], false)] {
            let dir = URL(fileURLWithPath: "/tmp/coordfs-it-note-\(UUID().uuidString.prefix(8))")
            defer { try? FileManager.default.removeItem(at: dir) }
            let backing = dir.appendingPathComponent("backing").path, mnt = dir.appendingPathComponent("mnt").path
            try FileManager.default.createDirectory(atPath: backing, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: mnt, withIntermediateDirectories: true)
            let mounted = try run(Paths.binary.path, ["mount", backing, mnt] + arguments, environment: environment)
            #expect(mounted.status == 0, "\(mounted.errors)")
            defer { _ = try? run(Paths.binary.path, ["unmount", mnt]) }
            #expect(
                mounted.errors.contains("FUSE over io_uring switched off") == noted, "\(arguments): \(mounted.errors)")
            #expect(mounted.errors.contains("echo Y > \(fakeSwitch)") == noted, "\(arguments): \(mounted.errors)")
        }
    }

    @Test func withoutIoUringRequestsComeThroughTheDevice() throws {
        let fx = try MountFixture(["--no-io-uring"])
        try Self.exercise(fx)
        let counters = try fx.statistics()
        #expect(counters["ring_queues"] == 0, "\(counters)")
        #expect(counters["ring_requests"] == 0, "\(counters)")
    }

    /// A queue starts with eight entries, and a request that waits for coordination keeps its
    /// entry until answered. Twelve readers on one CPU wait for a writer on that CPU: its close
    /// must still get through, so the queue registers more entries.
    @Test(.needsRings) func waitingRequestsOnOneCPUDoNotHoldUpTheHoldersClose() throws {
        let fx = try MountFixture(["--wait-timeout", "60"])
        try fx.seed("shared.txt")
        func pinned() throws -> Child {
            try Child(
                "/usr/bin/taskset",
                ["-c", "0", "/usr/bin/python3", Paths.scripts.appendingPathComponent("hold.py").path])
        }
        let writer = try pinned()
        #expect(writer.ask("open w \(fx.path("shared.txt"))") == "ok 1")
        let readers = try (0..<12).map { _ in try pinned() }
        for reader in readers { reader.send("open r \(fx.path("shared.txt"))") }
        #expect(
            eventually(.seconds(10)) { ((try? fx.statistics())?["waited"] ?? 0) >= 12 },
            "the readers wait for the writer")
        #expect(writer.ask("close all", timeout: .seconds(15)) == "ok", "the writer's close got through")
        for reader in readers { #expect(reader.next(timeout: .seconds(15)) == "ok 1") }
    }

    /// Both programs on CPU 0: one makes a file with many cached pages and then `operation`s it
    /// (a long fsync, a truncating open), the other times setattrs (each reaches the daemon:
    /// the kernel caches no utime) until it ends. Returns (the operation's seconds, the worst
    /// setattr's), after a longer try where the disk was too quick to tell.
    static func setattrStallDuring(_ operation: String, on fx: MountFixture) throws -> (took: Double, worst: Double) {
        let script = """
            import os, sys, time
            root, megabytes, operation = sys.argv[1], int(sys.argv[2]), sys.argv[3]
            os.sched_setaffinity(0, {0})
            probe = root + "/probe"
            open(probe, "w").close()
            fd = os.open(root + "/big", os.O_CREAT | os.O_WRONLY, 0o644)
            block = b"x" * (1 << 20)
            for _ in range(megabytes): os.write(fd, block)
            if operation == "truncate": os.fsync(fd)
            stop_r, stop_w = os.pipe()
            out_r, out_w = os.pipe()
            if os.fork() == 0:
                os.close(stop_w)
                os.set_blocking(stop_r, False)
                worst = 0.0
                while True:
                    began = time.perf_counter(); os.utime(probe); worst = max(worst, time.perf_counter() - began)
                    try:
                        if os.read(stop_r, 1) == b"": break
                    except BlockingIOError:
                        pass
                os.write(out_w, b"%f" % worst)
                os._exit(0)
            time.sleep(0.2)
            began = time.perf_counter()
            if operation == "fsync": os.fsync(fd)
            else: os.close(os.open(root + "/big", os.O_WRONLY | os.O_TRUNC))
            took = time.perf_counter() - began
            os.close(stop_w)
            worst = float(os.read(out_r, 64))
            os.wait()
            os.close(fd)
            os.unlink(root + "/big")
            print("%f %f" % (took, worst))
            """
        var times: [Double] = []
        for megabytes in [400, 1600] {
            let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path, String(megabytes), operation])
            times = result.output.split(separator: " ").compactMap {
                Double($0.trimmingCharacters(in: .whitespacesAndNewlines))
            }
            try #require(times.count == 2, "\(result.output) \(result.errors)")
            if times[0] >= 0.15 { break }
        }
        return (times[0], times[1])
    }

    /// A request that waits on the disk is served off its queue's thread: the same CPU's next
    /// requests, from another program, go on meanwhile. Served on the queue thread, a 0.8 s
    /// fsync held up a setattr on that CPU for 0.8 s; a truncating open drops the file's cached
    /// pages, 0.4 s for 2 GiB here.
    @Test(.needsRings, arguments: ["fsync", "truncate"])
    func aRequestWaitingOnTheDiskDoesNotHoldUpItsCPUsOtherRequests(operation: String) throws {
        let fx = try MountFixture()
        let (took, worst) = try Self.setattrStallDuring(operation, on: fx)
        #expect(took >= 0.15, "the \(operation) was too quick to tell (\(took) s)")
        #expect(worst < took / 2, "a setattr on the same CPU waited \(worst) s during a \(took) s \(operation)")
        #expect((try fx.statistics()["ring_lane_requests"] ?? 0) >= 1, "the \(operation) went to a lane thread")
    }

    /// A mount with `arguments` whose backing is another coordfs mount holding `held` and
    /// `other` (without kernel passthrough, which does not stack on a FUSE backing). The caller
    /// unmounts the outer one first.
    static func mountOverAnotherMount(_ arguments: [String]) throws -> (inner: MountFixture, outer: MountFixture) {
        // The inner open waits for the writer until it closes: no settle time.
        let inner = try MountFixture(["--settle-time", "0"])
        try inner.seed("held")
        try inner.seed("other")
        return (inner, try MountFixture(["--no-kernel-passthrough"] + arguments, backing: inner.mountPoint))
    }

    /// A backing directory on a filesystem that is not local (here another coordfs mount, whose
    /// open of a file held for writing waits there): every request goes to a lane thread, and a
    /// request that waits on the backing holds up no other on its CPU. On the queue thread, an
    /// open that waited on the backing held up every later setattr and readdir of its CPU until
    /// it was answered. A local backing keeps metadata requests on the queue threads.
    @Test(.needsRings) func aBackingThatIsNotLocalHoldsUpNoQueue() throws {
        let (inner, outer) = try Self.mountOverAnotherMount([])
        // The outer one first; the inner one lives until then.
        defer { outer.unmount(); withExtendedLifetime(inner) {} }
        let (innerCounters, outerCounters) = (try inner.statistics(), try outer.statistics())
        #expect(innerCounters["ring_lanes_all"] == 0, "a local backing: \(innerCounters)")
        #expect(outerCounters["ring_lanes_all"] == 1, "a FUSE backing: \(outerCounters)")
        try Self.expectNoQueueHeldUp(
            writing: inner.path("held"), opening: outer.path("held"),
            touching: outer.path("other"), listing: outer.mountPoint.path)
    }

    /// The same with a local backing directory that has a FUSE mount inside it (as a home
    /// directory may have an NFS or sshfs mount): once a lookup meets that mount, the requests
    /// about its items and about the directory it is mounted in go to the lanes, and requests
    /// about local items stay on the queue threads (handed over, a local stat took half as long
    /// again).
    @Test(.needsRings) func aFilesystemThatIsNotLocalInsideTheBackingHoldsUpNoQueue() throws {
        let inner = try MountFixture(["--settle-time", "0"])
        try inner.seed("held")
        try inner.seed("other")
        // The outer backing holds the inner mount point, `mnt`, and the inner backing, local
        // (which the two mounts do not coordinate: --allow-overlap).
        let outer = try MountFixture(["--allow-overlap"], backing: inner.base)
        defer { outer.unmount(); withExtendedLifetime(inner) {} }
        let before = try outer.statistics()
        #expect(before["ring_lanes_all"] == 0 && before["ring_lane_nodes"] == 0, "a local backing: \(before)")
        _ = try FileManager.default.contentsOfDirectory(atPath: outer.path("mnt"))
        let after = try outer.statistics()
        #expect(after["ring_lanes_all"] == 0, "\(after)")
        #expect((after["ring_lane_nodes"] ?? 0) >= 2, "the mount and the directory it is in: \(after)")
        try Self.expectNoQueueHeldUp(
            writing: inner.path("held"), opening: outer.path("mnt/held"),
            touching: outer.path("mnt/other"), listing: outer.path("mnt"))

        // Local items: served by the queue threads.
        try FileManager.default.createDirectory(atPath: outer.path("backing/local"), withIntermediateDirectories: false)
        let start = try outer.statistics()
        let script = """
            import os, sys
            for i in range(100):
                name = sys.argv[1] + "/f%d" % i
                os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644))
                os.utime(name)
            """
        let result = try run("/usr/bin/python3", ["-c", script, outer.path("backing/local")])
        #expect(result.status == 0, "\(result.errors)")
        let end = try outer.statistics()
        let served = (end["ring_requests"] ?? 0) - (start["ring_requests"] ?? 0)
        let laned = (end["ring_lane_requests"] ?? 0) - (start["ring_lane_requests"] ?? 0)
        #expect(served >= 200 && laned <= 10, "\(laned) of \(served) local requests went to the lanes")
    }

    /// While `writing` is held open for writing, an open of `opening` (the same file, seen
    /// through a mount over its own) waits; setattrs of `touching` and listings of `listing`
    /// made meanwhile on the same CPU must not wait behind it.
    static func expectNoQueueHeldUp(writing: String, opening: String, touching: String, listing: String) throws {
        let writer = try Child.holder()
        #expect(writer.ask("open w \(writing)") == "ok 1")
        let script = """
            import os, sys, threading, time
            held, other, directory = sys.argv[1:4]
            os.sched_setaffinity(0, {0})
            def opener():
                os.close(os.open(held, os.O_RDONLY))
                print("opened", flush=True)
            threading.Thread(target=opener).start()
            time.sleep(0.3)
            worst, end = 0.0, time.time() + 1.0
            while time.time() < end:
                began = time.perf_counter()
                os.utime(other)
                os.listdir(directory)
                worst = max(worst, time.perf_counter() - began)
                time.sleep(0.01)
            print("worst %f" % worst, flush=True)
            """
        let prober = try Child("/usr/bin/python3", ["-c", script, opening, touching, listing])
        // Held up, the prober answers only once the writer lets go: a late answer is the failure.
        let report = prober.next(timeout: .seconds(5))
        #expect(writer.ask("close all") == "ok")
        let lines = [report, prober.next(timeout: .seconds(15))].compactMap { $0 }
        #expect(report?.hasPrefix("worst ") == true, "the prober was held up while the open waited: \(lines)")
        let worst = lines.first { $0.hasPrefix("worst ") }.flatMap { Double($0.dropFirst(6)) }
        #expect(
            (worst ?? .infinity) < 0.25, "a setattr and a readdir on the open's CPU waited \(worst ?? -1) s: \(lines)")
        #expect(lines.contains("opened"), "the open went on once the writer let go: \(lines)")
    }

    /// With `--ring-lanes blocking` a queue thread serves an open on a FUSE backing itself, and
    /// waits there for a writer. Requests that come for its queue meanwhile must not interrupt
    /// that wait: the kernel's completions were task work signalled to the thread, and the
    /// open failed with EINTR, which a C program sees as it is (Python retries EINTR: the
    /// script calls open(2) through ctypes).
    @Test(.needsRings) func aQueueThreadWaitingOnTheBackingIsNotInterruptedByNewRequests() throws {
        let (inner, outer) = try Self.mountOverAnotherMount(["--ring-lanes", "blocking"])
        // The outer one first; the inner one lives until then.
        defer { outer.unmount(); withExtendedLifetime(inner) {} }
        let counters = try outer.statistics()
        #expect(counters["ring_lanes_all"] == 0, "\(counters)")

        let writer = try Child.holder()
        #expect(writer.ask("open w \(inner.path("held"))") == "ok 1")
        let script = """
            import ctypes, os, sys, threading, time
            held, other = sys.argv[1:3]
            libc = ctypes.CDLL(None, use_errno=True)
            os.sched_setaffinity(0, {0})
            result = []
            def opener():
                fd = libc.open(held.encode(), os.O_RDONLY)
                result.append("open %d errno %d" % (fd, ctypes.get_errno()))
                if fd >= 0: os.close(fd)
            thread = threading.Thread(target=opener)
            thread.start()
            time.sleep(0.3)
            for _ in range(3): os.utime(other)
            thread.join()
            print(result[0], flush=True)
            """
        let prober = try Child("/usr/bin/python3", ["-c", script, outer.path("held"), outer.path("other")])
        // The open waits for the writer, and the setattrs come in behind it on its CPU.
        Thread.sleep(forTimeInterval: 1.0)
        #expect(writer.ask("close all") == "ok")
        let line = prober.next(timeout: .seconds(15))
        #expect(
            line?.hasPrefix("open ") == true && line?.hasPrefix("open -1") == false,
            "the open through the outer mount: \(line ?? "no answer")")
    }
}

extension Trait where Self == ConditionTrait {
    /// A test of FUSE over io_uring: skipped, and said so, where the kernel does not offer it.
    static var needsRings: Self {
        .enabled(
            if: RingTransport.kernelOffersRings(),
            "this kernel has no FUSE over io_uring switched on (Linux 6.14+, fuse enable_uring=Y)")
    }
}
