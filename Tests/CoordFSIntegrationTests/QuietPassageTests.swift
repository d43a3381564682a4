import Foundation
import Synchronization
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Requests held only for their call (mkdir, rename, setattr, unlink, rmdir; not a truncation)
/// pass the engine's quiet gate while it holds nothing, and beside files held open by other
/// names; otherwise they are coordinated in full.
@Suite(.serialized) struct QuietPassage {
    /// The start of a Python script about the mount at `sys.argv[1]` (`root`): its counters
    /// (`stats`, `delta` since a `stats()`), and `attempt`, which returns "ok" or the errno's name.
    static let pythonPrelude = """
        import errno, json, os, sys
        root = sys.argv[1]
        def stats(): return json.loads(os.getxattr(root, "user.coordfs.stats"))
        def delta(before):
            after = stats()
            return {k: after[k] - before[k] for k in ("coordinated", "passed_quietly", "passed_beside_open_files")}
        def attempt(call, *arguments):
            try:
                call(*arguments)
                return "ok"
            except OSError as error:
                return errno.errorcode[error.errno]
        """

    /// Runs namespace changes in the mount's root from one Python process, holding
    /// `held` open (for reading) meanwhile when given; returns the change of the mount's
    /// counters across them, read by the same process while it still holds the file.
    static func changes(_ fx: MountFixture, held: String?) throws -> [String: Int] {
        let script = """
            \(Self.pythonPrelude)
            held = sys.argv[2]
            fd = os.open(os.path.join(root, held), os.O_RDONLY) if held else None
            before = stats()
            d = os.path.join(root, "d")
            os.mkdir(d)                                  # MKDIR
            os.rename(d, d + "2")                        # RENAME
            os.chmod(d + "2", 0o700)                     # SETATTR
            os.rmdir(d + "2")                            # RMDIR
            os.truncate(os.path.join(root, "t.txt"), 1)  # SETATTR of the size: never passes
            report = delta(before)
            if fd is not None: os.close(fd)
            print(json.dumps(report))
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path, held ?? ""])
        #expect(result.status == 0, "\(result.errors)")
        return try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Int] ?? [:]
    }

    @Test func requestsForTheCallPassQuietlyWhileTheEngineHoldsNothingOrBesideOpenFiles() throws {
        let fx = try MountFixture()
        try fx.seed("held.txt")
        try fx.seed("t.txt")
        let idle = try Self.changes(fx, held: nil)
        #expect(idle["passed_quietly"] == 4, "\(idle)")
        #expect(idle["coordinated"] == 5, "passing quietly still counts as coordinated: \(idle)")

        // An open file holds its item for the open's life: nothing passes the gate of an idle
        // engine meanwhile. The mkdir and the chmod lock other names and pass beside it; the
        // rename and rmdir of a directory cover a subtree and are coordinated in full.
        let busy = try Self.changes(fx, held: "held.txt")
        #expect(busy["passed_quietly"] == 2 && busy["passed_beside_open_files"] == 2, "\(busy)")
        #expect(busy["coordinated"] == 5, "\(busy)")

        // Closed again, the engine holds nothing and the gate is open again.
        #expect(try fx.state().contains("(idle)"))
        #expect(try Self.changes(fx, held: nil)["passed_quietly"] == 4)
        #expect(FileManager.default.fileExists(atPath: fx.backingPath("held.txt")))
        #expect(!FileManager.default.fileExists(atPath: fx.backingPath("d2")))
    }

    @Test func aPresenterAnywhereClosesTheGate() throws {
        let fx = try MountFixture()
        try fx.seed("elsewhere/x.txt")
        try fx.seed("t.txt")
        // `coordfs watch` registers a presenter on a directory the changes do not touch.
        let watch = try Child(Paths.binary.path, ["watch", fx.path("elsewhere")])
        #expect(eventually { (try? fx.state())?.contains("PRESENT ") == true }, "the watch registers its presenter")
        let watched = try Self.changes(fx, held: nil)
        #expect(watched["passed_quietly"] == 0, "\(watched)")
        #expect(watched["coordinated"] == 5, "\(watched)")
        watch.signal(SIGKILL)
        #expect(watch.waitForExit() != nil)
        // Its presenter ends with its connection: the gate opens again.
        #expect(eventually { (try? fx.state())?.contains("(idle)") == true })
        #expect(try Self.changes(fx, held: nil)["passed_quietly"] == 4)
    }

    /// With files held open, and nothing else held, requests pass beside them when they lock
    /// other names (`NameGates`), in the held file's directory too; requests about a held file
    /// itself, or over a subtree that holds it, still wait for it.
    @Test func requestsPassBesideFilesHeldOpenByOtherNames() throws {
        let fx = try MountFixture(["--wait-timeout", "1", "--settle-time", "0"])
        try fx.seed("held/h.txt", "kept\n")
        try fx.seed("held/other.txt")
        try fx.seed("work/f.txt")
        try fx.seed("work/g.txt")
        try fx.seed("t.txt")
        let holder = try Child.holder()
        #expect(holder.ask("open w \(fx.path("held/h.txt"))") == "ok 1")
        #expect(holder.ask("open r \(fx.path("t.txt"))") == "ok 2", "a second held file, in another directory")
        let script = """
            \(Self.pythonPrelude)
            w = lambda name: os.path.join(root, "work", name)
            h = lambda name: os.path.join(root, "held", name)
            report = {"coordinated in full": []}
            before = stats()
            def each(name, call, *arguments):             # which requests did not pass, if any
                was = stats()["passed_quietly"]
                call(*arguments)
                if stats()["passed_quietly"] == was: report["coordinated in full"].append(name)
            each("mkdir", os.mkdir, w("d"))                             # passes
            each("symlink", os.symlink, "f.txt", w("s"))                # passes
            each("rename", os.rename, w("s"), w("s2"))                  # of a symlink: passes
            each("chmod", os.chmod, w("f.txt"), 0o600)                  # SETATTR: passes
            each("setxattr", os.setxattr, w("f.txt"), "user.k", b"v")   # passes
            each("link", os.link, w("f.txt"), w("f2.txt"))              # passes
            each("unlink", os.unlink, w("f2.txt"))                      # passes
            each("unlink symlink", os.unlink, w("s2"))                  # passes
            each("rename directory", os.rename, w("d"), w("d2"))        # coordinated
            each("rmdir", os.rmdir, w("d2"))                            # coordinated
            report["work"] = delta(before)
            before = stats()
            report["other"] = attempt(os.unlink, h("other.txt"))       # beside h.txt: passes
            report["into held"] = attempt(os.rename, w("f.txt"), h("f.txt"))   # passes
            report["in held"] = delta(before)
            report["unlink"] = attempt(os.unlink, h("h.txt"))
            report["chmod"] = attempt(os.chmod, h("h.txt"), 0o600)
            report["rename"] = attempt(os.rename, h("h.txt"), w("h.txt"))
            report["rename dir"] = attempt(os.rename, h(""), os.path.join(root, "held2"))
            report["replace"] = attempt(os.rename, w("g.txt"), h("h.txt"))   # its first name passes, not its second
            print(json.dumps(report))
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path])
        #expect(result.status == 0, "\(result.errors)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
        let work = report["work"] as? [String: Int] ?? [:]
        #expect(work["coordinated"] == 10, "\(report)")
        #expect(work["passed_quietly"] == 8 && work["passed_beside_open_files"] == 8, "\(report)")
        #expect(report["coordinated in full"] as? [String] == ["rename directory", "rmdir"], "\(report)")
        let held = report["in held"] as? [String: Int] ?? [:]
        #expect(report["other"] as? String == "ok" && report["into held"] as? String == "ok", "\(report)")
        #expect(
            held["coordinated"] == 2 && held["passed_beside_open_files"] == 2,
            "other names than the held one: \(report)")
        for conflicting in ["unlink", "chmod", "rename", "rename dir", "replace"] {
            #expect(report[conflicting] as? String == "EBUSY", "\(conflicting) waits for the held file: \(report)")
        }
        #expect(try fx.statistics()["timed_out"] == 5)
        #expect(holder.ask("write 1 more") == "ok")
        #expect(holder.ask("close all") == "ok")
        #expect(try String(contentsOfFile: fx.backingPath("held/h.txt"), encoding: .utf8) == "kept\nmore\n")
        #expect(FileManager.default.fileExists(atPath: fx.backingPath("held/f.txt")))
        #expect(!FileManager.default.fileExists(atPath: fx.backingPath("held/other.txt")))
        #expect(eventually { (try? fx.state())?.contains("(idle)") == true })
        #expect(try Self.changes(fx, held: nil)["passed_quietly"] == 4, "closed, the engine holds nothing")
    }

    /// A process that holds a file open for writing changes its attributes as part of that
    /// access (tar's fchown, fchmod and futimens; touch's futimens of the file it made): not as
    /// writes of their own, so a watcher hears of the new file first and of no change before
    /// it. Another process's change of them still waits for the open.
    @Test func setattrsOfAWritersOwnOpenAreCoveredByIt() throws {
        let fx = try MountFixture(["--wait-timeout", "1", "--settle-time", "0"])
        let watcher = try Child(Paths.binary.path, ["watch", fx.mountPoint.path])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        #expect(try run("/usr/bin/touch", [fx.path("made.txt")]).status == 0)
        try FileManager.default.createDirectory(atPath: fx.path("marker"), withIntermediateDirectories: false)
        #expect(withoutOrigin(watcher.next()) == "\(fx.mountPoint.path) SUBITEM_APPEARED made.txt")
        #expect(withoutOrigin(watcher.next()) == "\(fx.mountPoint.path) SUBITEM_APPEARED marker")
        let script = """
            \(Self.pythonPrelude)
            path = os.path.join(root, "own.txt")
            before = stats()["covered_by_own_open"]
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            os.fchmod(fd, 0o600)
            os.utime(fd, (1, 1))
            os.chmod(path, 0o640)
            print(json.dumps({"covered": stats()["covered_by_own_open"] - before}))
            os.close(fd)
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path])
        #expect(result.status == 0, "\(result.errors)")
        #expect(result.output == "{\"covered\": 3}\n", "fchmod, futimens and chmod by the file's writer")
        let holder = try Child.holder()
        #expect(holder.ask("open w \(fx.path("own.txt"))") == "ok 1")
        let other = try run(
            "/usr/bin/python3",
            [
                "-c", "\(Self.pythonPrelude)\nprint(attempt(os.chmod, sys.argv[2], 0o600))",
                fx.mountPoint.path, fx.path("own.txt")
            ])
        #expect(other.output == "EBUSY\n", "another process's chmod waits for the writer: \(other)")
        #expect(holder.ask("close all") == "ok")
        #expect(try fx.statistics()["covered_by_own_open"] == 4, "touch's futimens and the three above")
    }

    /// Past the engine's short list (`ShortList.capacity` grants), open files' grants come from
    /// the tables, gated all the same: with 40 files held open, requests about other names
    /// still pass beside them, and those about a held file still wait for it, wherever its
    /// grant was filed. Names share a table of gates by hash (`NameGates`), so a name may
    /// share one with a held file's (about 40 times in 4096, node ids varying with inode
    /// numbers): a request about it is then coordinated in full, and the step tries the next
    /// of three names.
    @Test func requestsPassBesideMoreOpenFilesThanTheShortListHolds() throws {
        let fx = try MountFixture(["--wait-timeout", "1", "--settle-time", "0"])
        let held = 40
        for index in 0..<held { try fx.seed("many/f\(index).txt") }
        for index in 1...3 {
            try fx.seed("many/other\(index).txt")
            try fx.seed("work/f\(index).txt")
        }
        let holder = try Child.holder()
        // Open for writing: an unlink or a rename does not wait for a reader's open.
        for index in 0..<held {
            #expect(holder.ask("open w \(fx.path("many/f\(index).txt"))") == "ok \(index + 1)")
        }
        let script = """
            \(Self.pythonPrelude)
            last = int(sys.argv[2]) - 1
            path = lambda name: os.path.join(root, name)
            full, retried = [], []
            before = stats()
            def each(step, *tries):          # the first try that passes quietly ends the step
                for call, *arguments in tries:
                    was = stats()["passed_quietly"]
                    call(*arguments)
                    if stats()["passed_quietly"] > was: return arguments[0]
                    retried.append(step)
                full.append(step)
            made = each("mkdir", *[(os.mkdir, path("work/d%d" % n)) for n in (1, 2, 3)])       # passes
            each("chmod", *[(os.chmod, path("work/f%d.txt" % n), 0o600) for n in (1, 2, 3)])   # passes
            each("unlink", *[(os.unlink, path("many/other%d.txt" % n)) for n in (1, 2, 3)])    # beside 40 held names: passes
            each("rename", *[(os.rename, path("work/f%d.txt" % n), path("many/g%d.txt" % n)) for n in (1, 2, 3)])
            each("rmdir", (os.rmdir, made or path("work/d1")))                                  # covers a subtree: coordinated
            retried = [step for step in retried if step != "rmdir"]
            report = delta(before)
            report["coordinated in full"] = full
            report["tries again"] = len(retried)
            report["first"] = attempt(os.unlink, path("many/f0.txt"))            # its grant is listed
            report["last"] = attempt(os.unlink, path("many/f%d.txt" % last))     # from the tables
            report["last rename"] = attempt(os.rename, path("many/f%d.txt" % last), path("many/moved.txt"))
            print(json.dumps(report))
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path, "\(held)"])
        #expect(result.status == 0, "\(result.errors)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
        let triesAgain = try #require(report["tries again"] as? Int)
        #expect(report["coordinated"] as? Int == 5 + triesAgain, "\(report)")
        #expect(report["passed_beside_open_files"] as? Int == 4 && report["passed_quietly"] as? Int == 4, "\(report)")
        #expect(report["coordinated in full"] as? [String] == ["rmdir"], "\(report)")
        for conflicting in ["first", "last", "last rename"] {
            #expect(report[conflicting] as? String == "EBUSY", "\(conflicting) waits for the held file: \(report)")
        }
        #expect(holder.ask("close all") == "ok")
        for index in 0..<held { #expect(FileManager.default.fileExists(atPath: fx.backingPath("many/f\(index).txt"))) }
        #expect(FileManager.default.fileExists(atPath: fx.backingPath("many/g1.txt")))
        #expect(!FileManager.default.fileExists(atPath: fx.backingPath("many/other1.txt")))
        #expect(eventually { (try? fx.state())?.contains("(idle)") == true })
    }

    /// An unlink passing the gate while the engine holds nothing keeps an open of another name
    /// from nobody: the open's grant waits only for requests passing its own name's gate. An
    /// rmdir passing it (it covers a subtree) is waited for by every open, as it conflicts with
    /// files held anywhere below it.
    @Test(arguments: [false, true]) func anOpenWaitsOnlyForRequestsPassingItsOwnName(passerIsRmdir: Bool) throws {
        let pause = RequestPause()
        // Served through /dev/fuse by several threads: the paused request holds one of them.
        let fx = try MountFixture(inProcess: {
            $0.ioUring = false
            $0.whilePassingQuietly = { pause.pauseIfArmed() }
        })
        try fx.seed("one/x.txt")
        try fx.seed("two/kept.txt")
        try FileManager.default.createDirectory(
            at: fx.backing.appendingPathComponent("one/empty"), withIntermediateDirectories: true)
        pause.arm()
        let passed = Atomic<Int32>(-2)
        let passerPath = passerIsRmdir ? fx.path("one/empty") : fx.path("one/x.txt")
        Thread {
            passed.store(passerIsRmdir ? rmdir(passerPath) : unlink(passerPath), ordering: .sequentiallyConsistent)
        }.start()
        #expect(pause.reached.wait(timeout: .now() + 10) == .success, "the request passes the gate")
        let opened = Atomic<Int32>(-2)
        let path = fx.path("two/new.txt")
        Thread { opened.store(open(path, O_CREAT | O_WRONLY, 0o644), ordering: .sequentiallyConsistent) }.start()
        let openedWhilePassing = eventually(.seconds(3)) { opened.load(ordering: .sequentiallyConsistent) != -2 }
        pause.proceed.signal()
        #expect(openedWhilePassing != passerIsRmdir, "the open went ahead while the request passed, or waited for it")
        #expect(eventually { opened.load(ordering: .sequentiallyConsistent) >= 0 })
        #expect(eventually { passed.load(ordering: .sequentiallyConsistent) == 0 })
        let fd = opened.load(ordering: .sequentiallyConsistent)
        if fd >= 0 { close(fd) }
        #expect(eventually { (try? fx.state())?.contains("(idle)") == true })
    }

    /// Stops the first request that reaches its hook after it is armed (once it has named its
    /// targets, or as it passes a quiet gate), until told to go on.
    final class RequestPause: Sendable {
        private let armed = Atomic<Bool>(false)
        let reached = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        func arm() { armed.store(true, ordering: .sequentiallyConsistent) }
        func pauseIfArmed() {
            guard armed.exchange(false, ordering: .sequentiallyConsistent) else { return }
            reached.signal()
            proceed.wait()
        }
    }

    /// A rename that passes the quiet gate holds nothing and reports no move. One that runs
    /// after an open has named its file and before the open is granted must not leave the open
    /// holding the name the file has left: the open names its file again and holds the new name.
    /// So too when the rename holds a grant (a presenter is registered elsewhere), begun and
    /// ended in that moment, as when the open's thread is preempted there.
    @Test(arguments: [false, true]) func anOpenHoldsTheNameItsFileHasOnceHeld(renameHoldsAGrant: Bool) throws {
        let pause = RequestPause()
        // Served through /dev/fuse by several threads: the paused open holds one of them.
        let fx = try MountFixture(inProcess: {
            $0.ioUring = false
            $0.afterNamingTargets = { pause.pauseIfArmed() }
        })
        try fx.seed("a.txt", "kept\n")
        try fx.seed("elsewhere/x.txt")
        var watch: Child?
        if renameHoldsAGrant {
            watch = try Child(Paths.binary.path, ["watch", fx.path("elsewhere")])
            #expect(eventually { (try? fx.state())?.contains("PRESENT ") == true }, "the watch registers its presenter")
        }
        pause.arm()
        let opened = Atomic<Int32>(-2)
        let path = fx.path("a.txt")
        Thread { opened.store(open(path, O_RDWR), ordering: .sequentiallyConsistent) }.start()
        #expect(pause.reached.wait(timeout: .now() + 10) == .success, "the open names a.txt")
        let moved = try run("/bin/mv", [fx.path("a.txt"), fx.path("b.txt")])
        #expect(moved.status == 0, "\(moved.errors)")
        #expect(try fx.statistics()["passed_quietly"] == (renameHoldsAGrant ? 0 : 1), "the rename passed, or not")
        pause.proceed.signal()
        #expect(eventually { opened.load(ordering: .sequentiallyConsistent) != -2 })
        let fd = opened.load(ordering: .sequentiallyConsistent)
        #expect(fd >= 0)
        let state = try fx.state()
        #expect(state.contains(fx.path("b.txt")) && !state.contains(fx.path("a.txt")), "held by its new name: \(state)")
        #expect(try fx.statistics()["taken_again"] == 1)
        if fd >= 0 { close(fd) }
        if let watch {
            watch.signal(SIGKILL)
            #expect(watch.waitForExit() != nil)
        }
        #expect(eventually { (try? fx.state())?.contains("(idle)") == true })
    }

    /// The gates close and open many times a second (opens, `coordfs watch` coming and going)
    /// while namespace changes pass them or not: nothing is lost, nothing hangs, nothing happens
    /// to a name while its file is held, and the engine ends idle.
    ///
    /// With 40 files held open throughout, the churn's own opens find the engine's short list
    /// full and are gated in its tables.
    @Test(arguments: [0, 40]) func churnThroughTheGateLosesNothing(held: Int) throws {
        let fx = try MountFixture()
        let script = Paths.scripts.appendingPathComponent("gate_churn.py").path
        let result = try run(
            "/usr/bin/python3", [script, Paths.binary.path, fx.mountPoint.path, fx.backing.path, "3", "\(held)"])
        #expect(result.status == 0, "\(result.errors)")
        let reports = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [[String: Any]] ?? []
        #expect(reports.count == 7, "\(result.output)")
        for report in reports {
            #expect((report["rounds"] as? Int ?? 0) > 0, "\(report)")
            #expect(
                (report["wrong"] as? [Int])?.isEmpty == true,
                "read back what was written, kept what was held: \(report)")
        }
        let statistics = try fx.statistics()
        #expect((statistics["passed_quietly"] ?? 0) > 0, "\(statistics)")
        #expect((statistics["passed_beside_open_files"] ?? 0) > 0, "\(statistics)")
        #expect((statistics["coordinated"] ?? 0) > (statistics["passed_quietly"] ?? 0), "\(statistics)")
        #expect(statistics["timed_out"] == 0 && statistics["deadlocks"] == 0, "\(statistics)")
        #expect(eventually { (try? fx.state())?.contains("(idle)") == true }, "the engine ends idle")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: fx.backing.path).filter {
                !$0.hasPrefix("o") && $0 != "k" && $0 != "h" && $0 != ".coordfs-versions"
            }.isEmpty)
    }
}
