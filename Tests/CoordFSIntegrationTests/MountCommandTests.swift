import CoordFSCommands
import CoordFSMount
import Coordination
import CoordinationClient
import FileCoordination
import Foundation
import LinuxSystem
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs mount` and `coordfs unmount` as a user runs them.
@Suite struct MountCommand {
    let binary = Paths.binary.path

    func scratch() throws -> URL {
        let url = URL(fileURLWithPath: "/tmp/coordfs-cli-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(
            at: url.appendingPathComponent("backing"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(
            at: url.appendingPathComponent("mnt"), withIntermediateDirectories: true)
        return url
    }

    @Test func badArgumentsGetOneClearLineAndAFailure() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(at: dir) }
        let backing = dir.appendingPathComponent("backing").path, mnt = dir.appendingPathComponent("mnt").path
        try Data().write(to: dir.appendingPathComponent("file"))
        let badProfile = dir.appendingPathComponent("bad.profile").path
        try Data("kernel-passthrough = sometimes\n".utf8).write(to: URL(fileURLWithPath: badProfile))
        let badThreads = dir.appendingPathComponent("threads.profile").path
        try Data("threads = 0\n".utf8).write(to: URL(fileURLWithPath: badThreads))
        let badLanes = dir.appendingPathComponent("lanes.profile").path
        try Data("ring-lanes = sometimes\n".utf8).write(to: URL(fileURLWithPath: badLanes))
        let badNice = dir.appendingPathComponent("nice.profile").path
        try Data("serve-nice = -21\n".utf8).write(to: URL(fileURLWithPath: badNice))
        let cases: [([String], String)] = [
            (["mount", dir.appendingPathComponent("missing").path, mnt], "does not exist"),
            (["mount", dir.appendingPathComponent("file").path, mnt], "not a directory"),
            (["mount", backing, dir.appendingPathComponent("nope").path], "does not exist"),
            (["mount", mnt + "/inner", mnt], "does not exist"),
            (["mount", backing], "missing MOUNTPOINT"),
            (["mount", backing, mnt, "--coordination", "sometimes"], "sometimes"),
            (["mount", backing, mnt, "--profile", "no-such-profile"], "no profile"),
            (
                ["mount", backing, mnt, "--profile", badProfile],
                "'kernel-passthrough' must be on or off, not 'sometimes'"
            ),
            (["mount", backing, mnt, "--cache-timeout=-1"], "--cache-timeout must be between 0 and 86400 seconds"),
            (["mount", backing, mnt, "--cache-timeout", "soon"], "soon"),
            (["mount", backing, mnt, "--threads", "0"], "--threads must be from 1 to 256"),
            (["mount", backing, mnt, "--threads", "257"], "--threads must be from 1 to 256"),
            (["mount", backing, mnt, "--threads", "many"], "many"),
            (["mount", backing, mnt, "-s", "--threads", "4"], "-s is --threads 1; it cannot go with --threads 4"),
            (["mount", backing, mnt, "--profile", badThreads], "threads must be a whole number from 1 to 256, not '0'"),
            (["mount", backing, mnt, "--ring-lanes", "sometimes"], "sometimes"),
            (
                ["mount", backing, mnt, "--descriptor-budget", "100000000"],
                "--descriptor-budget 100000000 is more than the open-file limit allows"
            ),
            (
                ["mount", backing, mnt, "--profile", badLanes],
                "ring-lanes must be auto, all or blocking, not 'sometimes'"
            ),
            (["mount", backing, mnt, "--serve-nice=20"], "--serve-nice must be from -20 to 19"),
            (["mount", backing, mnt, "--serve-nice", "fast"], "fast"),
            (
                ["mount", backing, mnt, "--profile", badNice],
                "serve-nice must be a whole number from -20 to 19, not '-21'"
            )
        ]
        for (arguments, message) in cases {
            let result = try run(binary, arguments)
            #expect(result.status != 0, "\(arguments)")
            #expect(result.errors.contains(message), "\(arguments): \(result.errors)")
        }
        try FileManager.default.createDirectory(atPath: mnt + "/inner", withIntermediateDirectories: true)
        let inside = try run(binary, ["mount", mnt + "/inner", mnt])
        #expect(
            inside.status != 0 && inside.errors.contains("not empty")
                || inside.errors.contains("inside the mount point"))
        try FileManager.default.removeItem(atPath: mnt + "/inner")
        try Data().write(to: URL(fileURLWithPath: mnt + "/x"))
        let busy = try run(binary, ["mount", backing, mnt])
        #expect(busy.status != 0 && busy.errors.contains("not empty"))
        #expect(!MountFixture.isMounted(mnt))
    }

    @Test func anAlreadyMountedMountPointIsRefused() throws {
        let fx = try MountFixture()
        let again = try run(binary, ["mount", fx.backing.path, fx.mountPoint.path])
        #expect(again.status != 0)
        #expect(again.errors.contains("already a mount point"))
    }

    @Test func aSecondMountOfOneTreeIsRefusedUnlessAskedFor() throws {
        let fx = try MountFixture()
        let backing = fx.backing.resolvingSymlinksInPath().path
        let mountinfo = try String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)
        let line = mountinfo.split(separator: "\n").last {
            $0.split(separator: " ").dropFirst(4).first == Substring(fx.mountPoint.path)
        }
        let source = line?.components(separatedBy: " - fuse.coordfs ").last?.split(separator: " ").first.map(
            String.init)
        #expect(source == backing, "mount, df and findmnt show the backing directory")
        try FileManager.default.createDirectory(atPath: backing + "/sub", withIntermediateDirectories: true)
        let other = fx.base.appendingPathComponent("other").path
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        let uncoordinated =
            "of the coordfs mount at '\(fx.mountPoint.path)': two mounts of one tree do not coordinate with each other"
        let same = try run(binary, ["mount", backing, other])
        #expect(
            same.status != 0 && same.errors.contains("'\(backing)' is already the backing \(uncoordinated)"),
            "\(same.errors)")
        let inside = try run(binary, ["mount", backing + "/sub", other])
        #expect(
            inside.status != 0
                && inside.errors.contains("'\(backing)/sub' lies inside '\(backing)', the backing \(uncoordinated)"),
            "\(inside.errors)")
        #expect(!MountFixture.isMounted(other))
        let allowed = try run(binary, ["mount", "--allow-overlap", backing + "/sub", other])
        #expect(allowed.status == 0, "\(allowed.errors)")
        defer { _ = try? run(binary, ["unmount", other]) }
        #expect(MountFixture.isMounted(other))
        // From fstab, where mount.fuse3 passes options with -o.
        let third = fx.base.appendingPathComponent("third").path
        try FileManager.default.createDirectory(atPath: third, withIntermediateDirectories: true)
        let fromFstab = try run(binary, [backing, third, "-o", "rw,allow_overlap"])
        #expect(fromFstab.status == 0, "\(fromFstab.errors)")
        defer { _ = try? run(binary, ["unmount", third]) }
        #expect(MountFixture.isMounted(third))
        // A tree that holds a mount's backing.
        let outside = "/tmp/coordfs-holds-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: outside) }
        let base = fx.base.resolvingSymlinksInPath().path
        let holds = try run(binary, ["mount", base, outside])
        #expect(
            holds.status != 0 && holds.errors.contains("'\(base)' holds '\(backing)', the backing \(uncoordinated)"),
            "\(holds.errors)")
        #expect(!MountFixture.isMounted(outside))
    }

    /// `-o fsname=` and `-o subtype=` change what mountinfo shows of a mount, not the tree it
    /// serves: a second mount of that tree is still refused, naming the first.
    @Test func aSecondMountOfOneTreeIsRefusedWhateverTheFirstIsCalled() throws {
        for options in ["fsname=elsewhere", "subtype=other", "fsname=elsewhere,subtype=other"] {
            let fx = try MountFixture(["-o", options])
            let backing = fx.backing.resolvingSymlinksInPath().path
            let other = fx.base.appendingPathComponent("other").path
            try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
            // Before, it was mounted: a hold through the first mount kept nobody out of the second.
            let again = try run(binary, ["mount", backing, other])
            if again.status == 0 { _ = try? run(binary, ["unmount", other]) }
            #expect(
                again.status != 0
                    && again.errors.contains(
                        "'\(backing)' is already the backing of the coordfs mount at '\(fx.mountPoint.path)'"),
                "-o \(options): \(again.errors)")
        }
    }

    /// One tree reached by another path is still that tree: through a symbolic link, through a
    /// bind mount of the backing directory or of the directory holding it, and inside such a bind.
    @Test func aTreeReachedByAnotherPathIsOneTree() throws {
        let fx = try MountFixture()
        let backing = fx.backing.resolvingSymlinksInPath().path, base = fx.base.resolvingSymlinksInPath().path
        try FileManager.default.createDirectory(atPath: backing + "/sub", withIntermediateDirectories: true)
        let link = base + "/link", bound = base + "/bound", other = base + "/other"
        let boundBase = "/tmp/coordfs-bound-\(UUID().uuidString.prefix(8))"
        for directory in [bound, boundBase, other] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        defer { try? FileManager.default.removeItem(atPath: boundBase) }
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: backing)
        defer { for directory in [bound, boundBase] { _ = umount2(directory, Int32(MNT_DETACH)) } }
        for (target, directory) in [(backing, bound), (base, boundBase)] {
            let bind = try run("/usr/bin/mount", ["--bind", target, directory])
            try #require(bind.status == 0, "\(bind.errors)")
        }
        let uncoordinated =
            "the backing of the coordfs mount at '\(fx.mountPoint.path)': two mounts of one tree do not coordinate with each other"
        let cases: [(String, String)] = [
            (link, "'\(backing)' is already \(uncoordinated)"),
            (bound, "'\(bound)' is '\(backing)', \(uncoordinated)"),
            (bound + "/sub", "'\(bound)/sub' lies inside '\(backing)', \(uncoordinated)"),
            (boundBase, "'\(boundBase)' holds '\(backing)', \(uncoordinated)")
        ]
        for (given, message) in cases {
            // Before, a bind mount was taken for another tree, and mounted.
            let result = try run(binary, ["mount", given, other])
            if result.status == 0 { _ = try? run(binary, ["unmount", other]) }
            #expect(result.status != 0 && result.errors.contains(message), "\(given): \(result.errors)")
        }
    }

    /// A mount renamed with `-o fsname=` and `-o subtype=` is found by asking it: `coordfs
    /// status`, `-o remount` and `coordfs unmount` take it as any coordfs mount.
    @Test func aRenamedMountIsStillShownRemountedAndUnmounted() throws {
        let fx = try MountFixture(["-o", "fsname=elsewhere,subtype=other"])
        let mnt = fx.mountPoint.path
        let mountinfo = try String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)
        let line = mountinfo.split(separator: "\n").last {
            $0.split(separator: " ").dropFirst(4).first == Substring(mnt)
        }
        try #require(line?.contains(" - fuse.other elsewhere ") == true, "mountinfo shows what -o says: \(line ?? "")")
        let listed = try run(binary, ["status"])
        #expect(listed.output.contains("\(mnt) — control socket"), "\(listed)")
        let remounted = try run(binary, ["mount", "-o", "remount,uid=4242", fx.backing.path, mnt])
        #expect(remounted.status == 0, "\(remounted.errors)")
        var info = stat()
        #expect(stat(mnt, &info) == 0 && info.st_uid == 4242)
        fx.daemonWillEnd()
        // Before, refused: "is a fuse.other mount, not coordfs".
        let unmounted = try run(binary, ["unmount", mnt])
        #expect(unmounted.status == 0, "\(unmounted.errors)")
        #expect(eventually { !MountFixture.isMounted(mnt) })
    }

    @Test func unmountUnmountsAndRefusesWhatIsNotACoordfsMount() throws {
        let fx = try MountFixture()
        #expect(MountFixture.isMounted(fx.mountPoint.path))
        fx.daemonWillEnd()
        #expect(try run(binary, ["unmount", fx.mountPoint.path]).status == 0)
        #expect(eventually { !MountFixture.isMounted(fx.mountPoint.path) })
        let notMounted = try run(binary, ["unmount", fx.mountPoint.path])
        #expect(notMounted.status != 0 && notMounted.errors.contains("not a mount point"))
        let proc = try run(binary, ["unmount", "/proc"])
        #expect(proc.status != 0 && proc.errors.contains("not coordfs"))
    }

    @Test func aMountWhoseDaemonDiedIsNamedWithTheCommandThatClearsIt() throws {
        let fx = try MountFixture()
        let mnt = fx.mountPoint.path
        let socket = try #require(attribute("user.coordfs.socket", of: mnt))
        let daemon = try #require(daemonPID(for: mnt))
        try #require(daemon != getpid() && daemon > 1, "a daemon of its own")
        fx.daemonWillEnd()
        kill(daemon, SIGKILL)
        #expect(
            eventually {
                var info = statvfs(); return statvfs(mnt, &info) != 0 && errno == ENOTCONN
            })
        // Before, these said "does not exist" or "not inside a coordfs mount", or went to the
        // standalone daemon's socket instead.
        let clears = "whose daemon has gone (transport endpoint is not connected): `coordfs unmount \(mnt)` clears it"
        let elsewhere = fx.base.appendingPathComponent("elsewhere")
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
        let cases: [([String], String)] = [
            (["mount", fx.backing.path, mnt], "'\(mnt)' is a coordfs mount \(clears)"),
            (["mount", mnt + "/sub", elsewhere.path], "'\(mnt)/sub' is on the coordfs mount at '\(mnt)', \(clears)"),
            (["status", mnt + "/x"], "'\(mnt)/x' is on the coordfs mount at '\(mnt)', \(clears)"),
            (["watch", mnt], "'\(mnt)' is a coordfs mount \(clears)"),
            (["coordinate", "--read", mnt + "/a", "--", "true"], "'\(mnt)/a' is on the coordfs mount"),
            (["services", mnt + "/a"], "'\(mnt)/a' is on the coordfs mount")
        ]
        for (arguments, message) in cases {
            let result = try run(binary, arguments)
            #expect(result.status != 0 && result.errors.contains(message), "\(arguments): \(result.errors)")
        }
        // Every server: the dead mount is named, as an error when nothing else runs here, as a
        // warning beside the live ones when something does (another test run's mounts, say).
        let everything = try run(binary, ["status"])
        #expect(everything.errors.contains(clears), "\(everything.errors)")
        // A client library looking for the server of such a path does not go on to the daemon.
        setenv("COORDFS_SOCKET", fx.base.appendingPathComponent("daemon.sock").path, 1)
        defer { unsetenv("COORDFS_SOCKET") }
        #expect(ControlClient.socketPath(for: mnt + "/a") == nil)
        #expect(ControlClient.socketPath(for: fx.base.path) == fx.base.appendingPathComponent("daemon.sock").path)
        #expect(FileManager.default.fileExists(atPath: socket), "SIGKILL left the socket file")
        #expect(try run(binary, ["unmount", mnt]).status == 0)
        #expect(!MountFixture.isMounted(mnt))
        // The next mount removes it: its process has ended and nobody listens on it.
        let next = try MountFixture()
        #expect(!FileManager.default.fileExists(atPath: socket))
        #expect(attribute("user.coordfs.socket", of: next.mountPoint.path) != socket)
    }

    /// A daemon killed while its notice of an outside change waits for a directory's lock, which
    /// a rename it was still to answer holds, cannot finish dying: /dev/fuse stays open, the
    /// kernel never ends the connection, and the rename, the daemon's last thread and anything
    /// that touches the mount (`coordfs unmount` included) waited for ever, past SIGKILL.
    /// `coordfs unmount` now sees from /proc alone that nobody living serves the mount, and
    /// ends its connection.
    @Test func aDaemonKilledWhileTheKernelWaitsForItIsUnmountedAndItsProgramsFreed() throws {
        let fx = try MountFixture(["--lock-time", "60", "--wait-timeout", "60"])
        let mnt = fx.mountPoint.path
        try fx.seed("d/a", "a\n")
        try fx.seed("d/c", "c\n")
        var info = stat()
        try #require(stat(fx.path("d/c"), &info) == 0, "the kernel knows d/c: its removal outside is told to it")
        let daemon = try #require(daemonPID(for: mnt))
        let hold = Process()
        hold.executableURL = Paths.binary
        hold.arguments = ["coordinate", "--read", fx.path("d/a"), "--", "sh", "-c", "echo held; exec sleep 60"]
        let said = Pipe()
        hold.standardOutput = said
        try hold.run()
        defer { if hold.isRunning { kill(hold.processIdentifier, SIGKILL) } }
        try #require(said.fileHandleForReading.availableData.starts(with: Data("held".utf8)))
        // The rename waits for the hold, with d locked by the kernel; the notice of d/c's
        // removal then waits for that lock.
        let rename = Process()
        rename.executableURL = URL(fileURLWithPath: "/bin/mv")
        rename.arguments = [fx.path("d/a"), fx.path("d/b")]
        try rename.run()
        defer { if rename.isRunning { kill(rename.processIdentifier, SIGKILL) } }
        let renameWaits = eventually(.seconds(10)) {
            ProcFile.read("/proc/\(rename.processIdentifier)/wchan") == "request_wait_answer"
        }
        try #require(renameWaits, "the rename waits for the hold")
        try FileManager.default.removeItem(atPath: fx.backingPath("d/c"))
        let noticeWaits = eventually(.seconds(10)) {
            let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(daemon)/task")) ?? []
            return threads.contains { ProcFile.read("/proc/\(daemon)/task/\($0)/wchan") == "fuse_reverse_inval_entry" }
        }
        try #require(noticeWaits, "the daemon's notice of the outside removal waits for d's lock")
        fx.daemonWillEnd()
        kill(daemon, SIGKILL)
        usleep(500_000)
        #expect(kill(daemon, 0) == 0 && rename.isRunning, "killed, the daemon cannot finish dying and the rename waits")

        let unmount = Process()
        unmount.executableURL = Paths.binary
        unmount.arguments = ["unmount", mnt]
        let errors = Pipe()
        unmount.standardError = errors
        try unmount.run()
        let ended = eventually(.seconds(20)) { !unmount.isRunning }
        if !ended {
            // Free what this test wedged, so that the run goes on: the mount's connection ended.
            let abort = """
                mountpoint -q /sys/fs/fuse/connections || mount -t fusectl none /sys/fs/fuse/connections
                c=$(awk -v m="$1" '$5 == m { split($3, d, ":"); print d[2] }' /proc/self/mountinfo)
                echo 1 > /sys/fs/fuse/connections/$c/abort
                """
            _ = try? run("/bin/sh", ["-c", abort, "sh", mnt])
        }
        #expect(ended, "coordfs unmount waited with the mount's programs")
        unmount.waitUntilExit()
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(unmount.terminationStatus == 0 && message.contains("had gone; its connection is ended"), "\(message)")
        #expect(eventually(.seconds(5)) { !rename.isRunning }, "the rename still waits")
        #expect(rename.terminationStatus != 0)
        #expect(eventually(.seconds(5)) { kill(daemon, 0) != 0 }, "the daemon finished dying")
        #expect(!MountFixture.isMounted(fx.mountPoint.path))
        #expect(FileManager.default.fileExists(atPath: fx.backingPath("d/a")), "the rename never happened")
    }

    @Test func unmountOfABusyMountSaysWhyAndLazyDetachesItAtOnce() throws {
        let fx = try MountFixture()
        let mnt = fx.mountPoint.path
        try fx.seed("held.txt", "still readable\n")
        let daemon = try #require(daemonPID(for: mnt))
        let held = open(fx.path("held.txt"), O_RDONLY)
        try #require(held >= 0)
        let busy = try run(binary, ["unmount", mnt])
        #expect(
            busy.status != 0 && busy.errors.contains("it is busy: 1 file is open through it")
                && busy.errors.contains("`coordfs status \(mnt)`") && busy.errors.contains("--lazy"), "\(busy.errors)")
        #expect(MountFixture.isMounted(mnt))

        fx.daemonWillEnd()
        #expect(try run(binary, ["unmount", "--lazy", mnt]).status == 0)
        #expect(!MountFixture.isMounted(mnt), "detached at once")
        var bytes = [UInt8](repeating: 0, count: 64)
        let count = read(held, &bytes, bytes.count)
        #expect(
            count > 0 && String(decoding: bytes[0..<max(count, 0)], as: UTF8.self) == "still readable\n",
            "the open file is still served")
        #expect(!hasEnded(daemon), "the daemon serves it")
        close(held)
        #expect(eventually { hasEnded(daemon) }, "the daemon ends after the last close")
    }

    /// Whether process `pid` has ended (gone, or a zombie nobody reaped).
    func hasEnded(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return true }
        return stat[stat.index(end, offsetBy: 2)] == "Z"
    }

    @Test func aUserWhoCannotOpenDevFuseIsToldWhyAndHowToOpenIt() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(at: dir) }
        let nobody: uid_t = 65534
        for path in [dir.path, dir.appendingPathComponent("backing").path, dir.appendingPathComponent("mnt").path] {
            #expect(chown(path, nobody, gid_t(nobody)) == 0)
        }
        let asNobody = ["--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups", "env", "XDG_RUNTIME_DIR=", binary]
        let mnt = dir.appendingPathComponent("mnt").path
        let result = try run("/usr/bin/setpriv", asNobody + ["mount", dir.appendingPathComponent("backing").path, mnt])
        var device = stat()
        try #require(stat("/dev/fuse", &device) == 0)
        if device.st_mode & 0o006 != 0o006 {
            // As on this project's machines (0600): libfuse's own line said "failed to open".
            #expect(
                result.status != 0
                    && result.errors.contains("cannot open /dev/fuse (Permission denied): a user mounts through it")
                    && result.errors.contains("chmod 0666 /dev/fuse"), "\(result.errors)")
        } else {
            // Open to all, as most systems leave it: the user mounts, and unmounts through fusermount3.
            #expect(result.status == 0, "\(result.errors)")
            let unmounted = try run("/usr/bin/setpriv", asNobody + ["unmount", mnt])
            #expect(unmounted.status == 0, "\(unmounted.errors)")
            if unmounted.status != 0 { _ = umount2(mnt, Int32(MNT_DETACH)) }
        }
    }

    @Test func aMountThatCannotServeItsControlSocketIsNotMade() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(at: dir) }
        var configuration = MountConfiguration(
            backing: dir.appendingPathComponent("backing").path,
            mountPoint: dir.appendingPathComponent("mnt").path)
        configuration.socketPath = dir.appendingPathComponent("no-such-directory/s.sock").path
        let session = try MountSession(configuration: configuration, domain: CoordinationDomain())
        session.startControlSocket = { try MountControlServer.start(for: $0) }
        do {
            try session.mount(handlingSignals: false)
            session.stop()
            Issue.record("mounted without its control socket")
        } catch {
            // Before, it mounted, logged the failure, and told clients (user.coordfs.socket) of a
            // socket nobody served: presenters and Swift programs could not coordinate with it.
            #expect("\(error)".contains("cannot serve the control socket"), "\(error)")
        }
        #expect(!MountFixture.isMounted(configuration.mountPoint))
    }

    @Test func sigtermUnmountsCleanly() throws {
        let fx = try MountFixture()
        try fx.seed("a.txt", "data\n")
        let daemon = try #require(daemonPID(for: fx.mountPoint.path))
        try #require(daemon != getpid() && daemon > 1, "a daemon of its own")
        fx.daemonWillEnd()
        kill(daemon, SIGTERM)
        #expect(eventually { !MountFixture.isMounted(fx.mountPoint.path) })
        #expect(eventually { kill(daemon, 0) != 0 }, "the daemon exits")
        #expect(try String(contentsOfFile: fx.backingPath("a.txt"), encoding: .utf8) == "data\n")
    }

    @Test func everyCommandHasHelp() throws {
        for command in [[], ["mount"], ["unmount"], ["demo"], ["watch"], ["status"], ["coordinate"], ["daemon"]] {
            let result = try run(binary, command + ["--help"])
            #expect(result.status == 0 && result.output.contains("USAGE"), "\(command)")
        }
    }

    /// Every page states its exit statuses (generate-manual makes the pages from the same text).
    @Test func everyCommandStatesItsExitStatus() throws {
        for command in [
            [], ["mount"], ["unmount"], ["watch"], ["status"], ["coordinate"], ["services"], ["vend"], ["versions"],
            ["daemon"], ["demo"]
        ] {
            let help = try run(binary, command + ["--help"])
            // As read, whatever the width the help is wrapped at.
            let text = help.output.split(whereSeparator: \.isWhitespace).joined(separator: " ")
            #expect(
                help.status == 0 && text.contains("Exit status") && text.contains("64 for a command line"),
                "coordfs \(command.joined()) --help: \(help.output)")
        }
    }

    /// A mistyped subcommand is named with the nearest one, as swift-argument-parser names the
    /// nearest option of a mistyped one; a word near none lists them. A usage error: status 64.
    @Test func aMistypedSubcommandOrOptionNamesTheNearest() throws {
        let cases: [([String], String)] = [
            (["stats"], "Unknown subcommand 'stats'. Did you mean 'status'?"),
            (["wtach", "/tmp"], "Unknown subcommand 'wtach'. Did you mean 'watch'?"),
            (["umount", "/mnt"], "Unknown subcommand 'umount'. Did you mean 'unmount'?"),
            (["coord"], "Unknown subcommand 'coord'. Did you mean 'coordinate'?"),
            (
                ["frobnicate"],
                "Unknown subcommand 'frobnicate'. The subcommands: mount, unmount, watch, status, coordinate, services"
            ),
            (["status", "--josn"], "Unknown option '--josn'. Did you mean '--json'?")
        ]
        for (arguments, message) in cases {
            let result = try run(binary, arguments)
            #expect(result.status == 64 && result.errors.contains(message), "\(arguments): \(result)")
        }
    }

    /// `coordfs demo` narrates what a user would see (`coordfs status`'s rows), not the
    /// engine's records, and ends with what to try next, not a developer's `make test`.
    @Test func theDemoShowsWhatAUserSees() throws {
        let demo = try run(binary, ["demo"])
        #expect(demo.status == 0, "\(demo)")
        #expect(
            demo.output.contains("HOLD  write  notes.txt") && demo.output.contains("WAIT  read   notes.txt"),
            "\(demo.output)")
        #expect(
            !demo.output.contains("object:") && !demo.output.contains("grant#") && !demo.output.contains("make test"),
            "\(demo.output)")
        #expect(demo.output.contains("`coordfs help` lists the commands"), "\(demo.output)")
    }

    @Test func theDemoProfileMounts() throws {
        let profile = Paths.repository.appendingPathComponent("Mounts/demo.profile")
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(at: dir) }
        let mnt = dir.appendingPathComponent("mnt").path
        // (--allow-overlap: `make run` may have mounted the demo already.)
        let result = try run(
            binary,
            [
                "mount", "--profile", profile.path, "--allow-overlap",
                Paths.repository.appendingPathComponent("Mounts/demo").path, mnt
            ])
        #expect(result.status == 0, "\(result.errors)")
        defer { _ = try? run(binary, ["unmount", mnt]) }
        #expect(FileManager.default.fileExists(atPath: mnt + "/README.txt"))
    }

    @Test func cacheTimeoutDecidesHowSoonChangesBehindTheMountShow() throws {
        func sizes(_ fx: MountFixture) throws -> (Int, Int) {
            try fx.seed("f", "a")
            var info = stat()
            guard stat(fx.path("f"), &info) == 0 else { throw FixtureError("stat: \(errno)") }
            let before = Int(info.st_size)
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: fx.backingPath("f")))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data("bb".utf8))
            try handle.close()
            guard stat(fx.path("f"), &info) == 0 else { throw FixtureError("stat: \(errno)") }
            return (before, Int(info.st_size))
        }
        // Nothing kept, from the command line or a profile: the change shows at once.
        let uncached = try MountFixture(["--cache-timeout", "0"])
        #expect(try sizes(uncached) == (1, 3))
        let profile = uncached.base.appendingPathComponent("uncached.profile")
        try Data("cache-timeout = 0\n".utf8).write(to: profile)
        let uncachedByProfile = try MountFixture(["--profile", profile.path])
        #expect(try sizes(uncachedByProfile) == (1, 3))
        // Kept for a minute, and not watching the backing directory: the kernel still answers
        // with what it was told. (Watching it, it forgets: ChangesBehindTheMount.)
        let cached = try MountFixture(["--cache-timeout", "60", "--no-backing-watch"])
        #expect(try sizes(cached) == (1, 1))
    }

    /// The daemon serving `mountPoint`, as the mount root's `user.coordfs.pid` says.
    func daemonPID(for mountPoint: String) -> pid_t? {
        attribute("user.coordfs.pid", of: mountPoint).flatMap { pid_t($0) }
    }

    /// An extended attribute of `path` as text, read by another process.
    func attribute(_ name: String, of path: String) -> String? {
        let result = try? run(
            "/usr/bin/python3",
            ["-c", "import os,sys; print(os.getxattr(sys.argv[1], sys.argv[2]).decode())", path, name])
        return result.flatMap { $0.status == 0 ? $0.output.trimmingCharacters(in: .whitespacesAndNewlines) : nil }
    }
}

/// A program that gives up with EBUSY leaves a line in the mount's log naming who held the
/// item: what its user asks next.
@Suite struct GivingUpIsLogged {
    @Test func anEBUSYNamesTheHolderInTheLog() throws {
        let logPath = "/tmp/coordfs-log-\(UUID().uuidString.prefix(8)).log"
        defer { try? FileManager.default.removeItem(atPath: logPath) }
        let fx = try MountFixture(["--wait-timeout", "1", "--log", logPath])
        try fx.seed("doc.txt", "text\n")
        let holder = try Child.holder()
        #expect(holder.ask("open wt \(fx.path("doc.txt"))") == "ok 1")
        let writer = try run("/bin/sh", ["-c", "echo new > \"$1\"", "sh", fx.path("doc.txt")])
        #expect(writer.status != 0 && writer.errors.contains("busy"), "\(writer)")
        // Logged after the reply: the writer may have ended first.
        func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
        #expect(
            eventually {
                log().contains("gave up (EBUSY)") && log().contains("held for write by pid \(holder.pid) (python3)")
            },
            "\(log())")
    }
}

/// What a mount logs, and where: a line for each refusal, presenter timeout and access that
/// went ahead past others, naming the item and the processes by pid and command; to the system
/// log by default, or to the file `--log`, `-o log=` or a profile's `log` names.
@Suite struct MountLog {
    let binary = Paths.binary.path

    /// A presenter that refuses every request about `path` (`coordfs watch --answer EACCES`),
    /// registered once the mount's state shows it.
    func refusingPresenter(_ fx: MountFixture, _ path: String) throws -> Child {
        let watcher = try Child(binary, ["watch", path, "--answer", "EACCES"])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        return watcher
    }

    @Test func aRefusalATimeoutAndABreakAreEachALineNamingWho() throws {
        let logPath = "/tmp/coordfs-log-\(UUID().uuidString.prefix(8)).log"
        defer { try? FileManager.default.removeItem(atPath: logPath) }
        let fx = try MountFixture(["--log", logPath, "--presenter-timeout", "0.5", "--break-time", "1"])
        func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
        // A refusal: before, nothing anywhere named who refused the cat.
        try fx.seed("refused.txt")
        let refusing = try refusingPresenter(fx, fx.path("refused.txt"))
        let cat = try run("/bin/cat", [fx.path("refused.txt")])
        #expect(cat.status != 0 && cat.errors.contains("Permission denied"), "\(cat)")
        #expect(
            eventually {
                log().contains("presenter of \(fx.path("refused.txt")), pid \(refusing.pid) (coordfs), refused ")
            },
            "\(log())")
        #expect(log().contains(" (cat): the access fails with EACCES"), "\(log())")
        refusing.signal(SIGTERM)
        #expect(refusing.waitForExit() != nil)
        // A presenter that does not answer: seconds to a tenth, and who (before: nine decimals, no pid).
        try fx.seed("slow.txt")
        let silent = try Child(binary, ["watch", fx.path("slow.txt"), "--answer", "none"])
        #expect(eventually { (try? fx.state())?.contains("slow.txt") == true })
        #expect(try run("/bin/cat", [fx.path("slow.txt")]).status == 0)
        let timedOut = try Regex(
            #"presenter of \S*slow\.txt, pid \d+ \(coordfs\), did not answer \S+ \(\w+\) for pid \d+ \(cat\) within \d+\.\d s; access proceeded"#
        )
        #expect(eventually { log().contains(timedOut) }, "\(log())")
        withExtendedLifetime(silent) {}
        // A writer that went ahead of a file held open, at the break time: who, on what, past whom.
        try fx.seed("held.txt")
        let holder = try Child.holder()
        #expect(holder.ask("open w \(fx.path("held.txt"))") == "ok 1")
        #expect(try run("/bin/sh", ["-c", "echo new > \"$1\"", "sh", fx.path("held.txt")]).status == 0)
        #expect(
            eventually {
                log().contains(
                    " (sh) went ahead on write of \(fx.path("held.txt")) (the break time), past pid \(holder.pid) (python3)"
                )
            },
            "\(log())")
    }

    /// A mount that returns logs to the system log: each line as syslog(3) sends it, to the
    /// socket the journal and syslog listen on (here one the test listens on instead of /dev/log).
    @Test func aMountThatReturnsLogsToTheSystemLog() throws {
        let dir = "/tmp/coordfs-syslog-\(UUID().uuidString.prefix(8))"
        for directory in ["backing", "mnt"] {
            try FileManager.default.createDirectory(atPath: dir + "/" + directory, withIntermediateDirectories: true)
        }
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let socket = dir + "/log.sock"
        let listener = try Child(
            "/usr/bin/python3",
            [
                "-c",
                """
                import socket, sys
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                s.bind(sys.argv[1])
                print("ready", flush=True)
                while True:
                    print(s.recv(65536).decode(errors="replace").replace("\\n", " "), flush=True)
                """, socket
            ])
        #expect(listener.next() == "ready")
        var environment = ProcessInfo.processInfo.environment
        environment["COORDFS_SYSLOG_SOCKET"] = socket
        let mnt = dir + "/mnt"
        let mounted = try run(binary, ["mount", dir + "/backing", mnt], environment: environment)
        try #require(mounted.status == 0, "\(mounted)")
        defer {
            _ = try? run(binary, ["unmount", mnt])
            _ = eventually { !MountFixture.isMounted(mnt) }
        }
        try Data("text\n".utf8).write(to: URL(fileURLWithPath: dir + "/backing/doc.txt"))
        let refusing = try Child(binary, ["watch", mnt + "/doc.txt", "--answer", "EACCES"])
        defer { withExtendedLifetime(refusing) {} }
        #expect(
            eventually {
                (try? run(
                    "/usr/bin/python3",
                    ["-c", "import os,sys; print(os.getxattr(sys.argv[1], 'user.coordfs.state').decode())", mnt]))?
                    .output.contains("PRESENT") == true
            })
        #expect(try run("/bin/cat", [mnt + "/doc.txt"]).status != 0)
        var heard: [String] = []
        while let line = listener.next(timeout: .seconds(5)) {
            heard.append(line)
            if line.contains("refused") { break }
        }
        // <29>: the daemon facility (3 << 3) at notice (5).
        let refusal = heard.first { $0.contains("refused") }
        #expect(
            refusal?.hasPrefix("<29>") == true && refusal?.contains(" coordfs[") == true
                && refusal?.contains("]: \(mnt): presenter of \(mnt)/doc.txt, pid \(refusing.pid) (coordfs), refused ")
                    == true
                && refusal?.hasSuffix(" (cat): the access fails with EACCES") == true, "\(heard)")
    }

    /// From fstab or a systemd unit, where no --log can be given: `-o log=FILE`; and a profile's
    /// `log` key. Neither reaches FUSE; a log that cannot be written is refused before mounting.
    @Test func aLogFileFromMountOptionsOrAProfile() throws {
        let base = "/tmp/coordfs-logs-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        let profile = base + "/logged.profile"
        try Data("log = profile.log\n".utf8).write(to: URL(fileURLWithPath: profile))
        for (arguments, logPath) in [
            (["-o", "allow_other,log=\(base)/option.log"], base + "/option.log"),
            (["--profile", profile], base + "/profile.log")
        ] {
            let fx = try MountFixture(arguments)
            try fx.seed("doc.txt")
            let refusing = try refusingPresenter(fx, fx.path("doc.txt"))
            defer { withExtendedLifetime(refusing) {} }
            #expect(try run("/bin/cat", [fx.path("doc.txt")]).status != 0)
            #expect(
                eventually {
                    ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").contains(
                        " (cat): the access fails with EACCES")
                },
                "\(arguments): nothing in \(logPath)")
        }
        for directory in ["b", "m"] {
            try FileManager.default.createDirectory(atPath: base + "/" + directory, withIntermediateDirectories: true)
        }
        let unwritable = try run(
            binary, ["mount", base + "/b", base + "/m", "--log", base + "/no/such/directory/x.log"])
        if MountFixture.isMounted(base + "/m") { _ = try? run(binary, ["unmount", base + "/m"]) }
        #expect(
            unwritable.status == 1
                && unwritable.errors.contains(
                    "cannot write the log '\(base)/no/such/directory/x.log': No such file or directory"),
            "\(unwritable)")
    }
}

/// A wait timeout of 0 means what it means everywhere else in coordfs (and flock -w 0): fail at
/// once. It used to mean "wait forever", the opposite of `coordinate -w 0`; that is `infinity`.
@Suite struct WaitTimeoutZero {
    @Test func zeroFailsAtOnceAndInfinityIsAccepted() throws {
        let fx = try MountFixture(["--wait-timeout", "0"])
        try fx.seed("doc.txt", "text\n")
        let holder = try Child.holder()
        #expect(holder.ask("open wt \(fx.path("doc.txt"))") == "ok 1")
        let start = ContinuousClock.now
        let writer = try run("/bin/sh", ["-c", "echo new > \"$1\"", "sh", fx.path("doc.txt")])
        #expect(writer.status != 0 && writer.errors.contains("busy"), "\(writer)")
        #expect(ContinuousClock.now - start < .seconds(5))
        let bad = try run(Paths.binary.path, ["mount", "--wait-timeout", "-1", fx.backingPath(""), fx.mountPoint.path])
        #expect(bad.status != 0 && bad.errors.contains("--wait-timeout"), "\(bad)")
    }
}

/// sshfs's and bindfs's `-o uid=,gid=,umask=`: every item shows that owner, group and mode,
/// and the backing files keep their own.
@Suite struct OwnershipOptions {
    @Test func itemsShowTheOwnerGroupAndMaskGiven() throws {
        let fx = try MountFixture(["-o", "uid=4242,gid=daemon,umask=027"])
        try fx.seed("doc.txt", "text\n")
        chmod(fx.backingPath("doc.txt"), 0o666)
        var info = stat()
        #expect(stat(fx.path("doc.txt"), &info) == 0)
        #expect(
            info.st_uid == 4242 && info.st_gid == getgrnam("daemon").pointee.gr_gid && info.st_mode & 0o7777 == 0o640,
            "\(info.st_uid) \(info.st_gid) \(String(info.st_mode, radix: 8))")
        #expect(
            stat(fx.mountPoint.path, &info) == 0 && info.st_uid == 4242 && info.st_mode & 0o077 == info.st_mode & 0o050)
        // Through an open file and readdir's entries too; the backing file is as it was.
        let listed = try run("/bin/ls", ["-ln", fx.mountPoint.path])
        #expect(listed.output.contains("-rw-r----- 1 4242 "), "\(listed)")
        #expect(
            stat(fx.backingPath("doc.txt"), &info) == 0 && info.st_uid == getuid() && info.st_mode & 0o7777 == 0o666)
        for (option, message) in [("uid=nosuchuser", "no such user"), ("umask=99", "not an octal mask")] {
            let bad = try run(Paths.binary.path, ["mount", "-o", option, fx.backingPath(""), fx.mountPoint.path])
            #expect(bad.status != 0 && bad.errors.contains(message), "\(bad)")
        }
    }
}

/// `-o max_read=N` mounts and serves (libfuse fails INIT unless it asks for the same size: the
/// mount was made, then went away, and `coordfs mount` had exited 0).
@Suite struct MaxReadOption {
    @Test func aMountWithMaxReadServesReads() throws {
        let fx = try MountFixture(["-o", "max_read=4096"])
        let content = Data((0..<100_000).map { UInt8($0 % 251) })
        try content.write(to: URL(fileURLWithPath: fx.backingPath("big")))
        #expect(try Data(contentsOf: URL(fileURLWithPath: fx.path("big"))) == content)
        #expect((try? fx.statistics()) != nil, "the mount is up")
    }
}

/// A mount whose items are held through its control socket is busy: its holders are at work
/// inside it, though they keep no file open.
@Suite struct UnmountWithSocketHolds {
    @Test func unmountRefusesWhileACoordinateHoldsAnItemAndLazyDetaches() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "text\n")
        let holder = try Child(
            Paths.binary.path, ["coordinate", "--write", fx.path("doc.txt"), "--", "/bin/sleep", "30"])
        #expect(eventually { (try? fx.statistics())?["socket_holds"] == 1 })
        let refused = try run(Paths.binary.path, ["unmount", fx.mountPoint.path])
        #expect(
            refused.status != 0 && refused.errors.contains("1 hold is taken through its control socket"), "\(refused)")
        #expect(
            ((try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)) ?? "").contains(
                " \(fx.mountPoint.path) "))
        holder.signal(SIGTERM)
        #expect(holder.waitForExit() != nil)
        #expect(eventually { (try? fx.statistics())?["socket_holds"] == 0 })
        fx.daemonWillEnd()
        #expect(try run(Paths.binary.path, ["unmount", fx.mountPoint.path]).status == 0)
    }
}

/// `mount.coordfs` (mount(8)'s helper name) and `coordfs SOURCE DIR -o …` (what mount.fuse3 runs
/// for `-t fuse.coordfs` and fstab) both mount.
@Suite struct MountHelper {
    static func isMountPoint(_ path: String) -> Bool {
        ((try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)) ?? "").contains(" \(path) ")
    }

    @Test func mountHelperNamesMount() throws {
        let dir = URL(fileURLWithPath: "/tmp/coordfs-helper-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("b"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("m"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("m2"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("b2"), withIntermediateDirectories: true)
        try Data("x\n".utf8).write(to: dir.appendingPathComponent("b/f"))
        try Data("x\n".utf8).write(to: dir.appendingPathComponent("b2/f"))
        let helper = dir.appendingPathComponent("mount.coordfs")
        try FileManager.default.createSymbolicLink(at: helper, withDestinationURL: Paths.binary)
        let mnt = dir.appendingPathComponent("m").path, mnt2 = dir.appendingPathComponent("m2").path
        let viaHelper = try run(helper.path, [dir.appendingPathComponent("b").path, mnt, "-o", "rw,noauto,allow_other"])
        defer { _ = try? run(Paths.binary.path, ["unmount", mnt]) }
        #expect(viaHelper.status == 0, "\(viaHelper.errors)")
        #expect(FileManager.default.fileExists(atPath: mnt + "/f"))
        // (Another backing: a second mount of one tree is refused.)
        let viaFuse = try run(Paths.binary.path, [dir.appendingPathComponent("b2").path, mnt2, "-o", "rw,nofail"])
        defer { _ = try? run(Paths.binary.path, ["unmount", mnt2]) }
        #expect(viaFuse.status == 0, "\(viaFuse.errors)")
        #expect(FileManager.default.fileExists(atPath: mnt2 + "/f"))
    }

    /// mount(8)'s flags mean for the helper what mount(8) means: `-f` fakes (nothing is mounted),
    /// `-v` says what it mounts, `-n` and `-s` change nothing (`-s` is not one thread).
    @Test func theHelperTakesMountsFlagsAsMountMeansThem() throws {
        let dir = URL(fileURLWithPath: "/tmp/coordfs-helper-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("b"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("m"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let helper = dir.appendingPathComponent("mount.coordfs")
        try FileManager.default.createSymbolicLink(at: helper, withDestinationURL: Paths.binary)
        let backing = dir.appendingPathComponent("b").path, mnt = dir.appendingPathComponent("m").path
        let faked = try run(helper.path, [backing, mnt, "-f", "-o", "rw"])
        #expect(faked.status == 0 && faked.output.contains("would mount \(backing) on \(mnt)"), "\(faked)")
        #expect(!Self.isMountPoint(mnt), "-f mounted")
        let mounted = try run(helper.path, [backing, mnt, "-snv", "-o", "rw,noauto", "-t", "fuse.coordfs"])
        defer { _ = try? run(Paths.binary.path, ["unmount", mnt]) }
        #expect(mounted.status == 0 && mounted.output.contains("mounting \(backing) on \(mnt)"), "\(mounted)")
        #expect(Self.isMountPoint(mnt))
        let stats = try run(
            "/usr/bin/python3",
            ["-c", "import os,sys; sys.stdout.write(os.getxattr(sys.argv[1], 'user.coordfs.stats').decode())", mnt])
        #expect(stats.output.contains("\"max_threads\":16"), "-s is sloppy, not one thread: \(stats.output)")
        // mount -o remount changes the live mount: ro and rw (the kernel's), uid= (the mount's),
        // with the options mount(8) reads back from the kernel's table; an option that cannot
        // change while mounted is refused, naming it, and the mount stays as it was.
        let kernelsOwn = "rw,nosuid,nodev,relatime,user_id=0,group_id=0"
        let readOnly = try run(helper.path, [backing, mnt, "-o", "remount,ro," + kernelsOwn.dropFirst(3)])
        #expect(readOnly.status == 0, "\(readOnly)")
        #expect(try run("/bin/sh", ["-c", "touch \"$0\"/refused", mnt]).errors.contains("Read-only file system"))
        let owned = try run(helper.path, [backing, mnt, "-o", "remount,uid=4242," + kernelsOwn])
        #expect(owned.status == 0, "\(owned)")
        var info = stat()
        #expect(stat(mnt, &info) == 0 && info.st_uid == 4242, "shown at once, not after the attribute timeout")
        #expect((try? run("/bin/sh", ["-c", "touch \"$0\"/writable-again", mnt]).status) == 0)
        let fixed = try run(helper.path, [backing, mnt, "-o", "remount,allow_other,max_read=4096"])
        #expect(
            fixed.status != 0 && fixed.errors.contains("allow_other,max_read=4096 cannot change while mounted"),
            "\(fixed)")
        #expect(Self.isMountPoint(mnt) && stat(mnt, &info) == 0 && info.st_uid == 4242)
        let notAMount = try run(helper.path, [backing, dir.path, "-o", "remount,ro"])
        #expect(notAMount.status != 0 && notAMount.errors.contains("is not a coordfs mount point"), "\(notAMount)")
    }

    /// Two words are a mount only where the first is a path or a directory: `help` asks for
    /// help, and a mistyped subcommand is refused, even beside directories of those names.
    @Test func versionSaysWhatTheMachineGivesAMount() throws {
        let version = try run(Paths.binary.path, ["--version"])
        let lines = version.output.split(separator: "\n").map(String.init)
        #expect(version.status == 0 && lines.first == "coordfs 0.1.0", "\(version)")
        #expect(lines.contains("control socket protocol 1"), "\(lines)")
        #expect(lines.contains { $0.hasPrefix("libfuse 3.") && $0.contains("FUSE over io_uring: ") }, "\(lines)")
    }

    @Test func helpAndMistypedSubcommandsNeverMount() throws {
        let dir = URL(fileURLWithPath: "/tmp/coordfs-words-\(UUID().uuidString.prefix(8))")
        for name in ["help", "watch", "stats"] {
            try FileManager.default.createDirectory(
                at: dir.appendingPathComponent(name), withIntermediateDirectories: true)
        }
        defer { try? FileManager.default.removeItem(at: dir) }
        let help = try run("/bin/sh", ["-c", "cd \"$1\" && \"$2\" help watch", "sh", dir.path, Paths.binary.path])
        #expect(help.status == 0 && help.output.contains("USAGE: coordfs watch"), "\(help)")
        let typo = try run("/bin/sh", ["-c", "cd \"$1\" && \"$2\" stats /tmp", "sh", dir.path, Paths.binary.path])
        #expect(typo.status != 0 && typo.errors.contains("stats"), "\(typo)")
        for name in ["help", "watch", "stats"] {
            #expect(!Self.isMountPoint(dir.appendingPathComponent(name).path), "\(name) was mounted on")
        }
    }

    @Test func mountFuse3RunsItForTypeFuseCoordfs() throws {
        // What `mount -t fuse.coordfs` and an fstab line end in: mount(8) runs mount.fuse3, which
        // runs `coordfs SOURCE DIR -o OPTIONS` from the PATH (mount(8) itself uses the standard
        // PATH, where `make install` puts coordfs).
        guard
            let helper = ["/sbin/mount.fuse3", "/usr/sbin/mount.fuse3"].first(
                where: FileManager.default.isExecutableFile)
        else {
            Issue.record("mount.fuse3 is not installed (fuse3)")
            return
        }
        let dir = URL(fileURLWithPath: "/tmp/coordfs-fstab-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("b"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("m"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try Data("x\n".utf8).write(to: dir.appendingPathComponent("b/f"))
        let mnt = dir.appendingPathComponent("m").path
        let path =
            Paths.binary.deletingLastPathComponent().path + ":"
            + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let mounted = try run(
            helper, [dir.appendingPathComponent("b").path, mnt, "-t", "coordfs", "-o", "rw,nofail,noauto"],
            environment: ["PATH": path])
        defer { _ = try? run(Paths.binary.path, ["unmount", mnt]) }
        #expect(mounted.status == 0, "\(mounted.errors)")
        #expect(
            ((try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)) ?? "").contains(
                " \(mnt) fuse.coordfs "))
        #expect((try? String(contentsOfFile: mnt + "/f", encoding: .utf8)) == "x\n")
    }
}
