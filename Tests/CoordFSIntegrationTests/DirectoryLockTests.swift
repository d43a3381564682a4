import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// While a request about a name waits in the mount, the kernel keeps its directory locked:
/// nobody can list the directory, look a new name up in it or create in it. A name
/// change does not wait for open files it leaves as they were (readers; appenders of a moved
/// item), nor a log's rotation for its readers and appenders (docs/mount.md, the kernel's
/// locks). Each of these failed on the build before: the break time given, or EAGAIN.
@Suite struct NameChangesBesideOpenFiles {
    /// logrotate's default: `mv app.log app.log.1`, then a new app.log, while `tail -f` follows
    /// the log and the program that writes it keeps it open for appending. Both keep their
    /// descriptors: the program's next line lands in app.log.1 and tail reads it there, as on
    /// any filesystem, until the program is told to reopen. Their holds went with the file:
    /// the new app.log is made at once, even with O_NONBLOCK (touch).
    @Test func logrotatesMoveBesideTailAndTheLogsWriterTakesNoTime() throws {
        let fx = try MountFixture(["--break-time", "2"])
        try fx.seed("logs/app.log", "line 0\n")
        let log = fx.path("logs/app.log")
        let app = try Child.holder()
        #expect(app.ask("open a \(log)") == "ok 1")
        let tail = try Child("/usr/bin/tail", ["-s", "0.1", "-f", log])
        #expect(tail.next() == "line 0")
        #expect(eventually { (try? fx.state())?.contains("pid:\(tail.pid):") == true }, "tail -f has the log open")
        let started = ContinuousClock.now
        let moved = try run("/bin/mv", [log, log + ".1"])
        #expect(moved.status == 0, "\(moved)")
        let made = try run("/usr/bin/touch", [log])
        #expect(made.status == 0, "\(made)")
        let took = ContinuousClock.now - started
        #expect(took < .seconds(1), "mv and the new log took \(took)")
        #expect(app.ask("write 1 after the move") == "ok")
        #expect(tail.next(timeout: .seconds(5)) == "after the move", "tail -f reads on what it opened")
        #expect(
            try String(contentsOfFile: fx.backingPath("logs/app.log.1"), encoding: .utf8) == "line 0\nafter the move\n")
        #expect(try String(contentsOfFile: fx.backingPath("logs/app.log"), encoding: .utf8) == "")
        // The open files' holds are the moved file's, at its new name.
        #expect(try fx.state().contains("logs/app.log.1"), "held at the new name")
        let statistics = try fx.statistics()
        #expect(
            statistics["lease_breaks"] == 0 && statistics["lock_time_breaks"] == 0
                && statistics["kernel_lock_breaks"] == 0,
            "nothing was waited for: \(statistics)")
    }

    /// Another user reads `d/x1`; root removes it. The removal does not wait for the reader,
    /// who reads on what it opened, so `ls d`, `cat d/x2` and a create in `d` meanwhile are not
    /// held up either. (The rm waited the break time, and the directory with it.)
    @Test func rmOfAFileAnotherUserReadsLeavesItsDirectoryFree() throws {
        let fx = try MountFixture(["-o", "allow_other", "--break-time", "2"])
        try fx.seed("d/x1", "one\n")
        try fx.seed("d/x2", "two\n")
        for file in ["d/x1", "d/x2"] { chmod(fx.backingPath(file), 0o644) }
        chmod(fx.backingPath("d"), 0o755)
        let reader = try Child(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", Paths.scripts.appendingPathComponent("hold.py").path])
        )
        #expect(reader.ask("open r \(fx.path("d/x1"))") == "ok 1")
        let started = ContinuousClock.now
        let rm = try Child("/bin/rm", [fx.path("d/x1")])
        Thread.sleep(forTimeInterval: 0.2)
        let listed = try run(Nobody.program, Nobody.arguments(["/bin/ls", fx.path("d")]))
        let cat = try run("/bin/cat", [fx.path("d/x2")])
        #expect(FileManager.default.createFile(atPath: fx.path("d/x3"), contents: Data("three\n".utf8)))
        let meanwhile = ContinuousClock.now - started
        #expect(rm.waitForExit(timeout: .seconds(10)) == 0)
        let removed = ContinuousClock.now - started
        #expect(listed.status == 0 && !listed.output.contains("x1"), "\(listed)")
        #expect(cat.output == "two\n", "\(cat)")
        #expect(meanwhile < .seconds(1), "ls, cat and a create in d took \(meanwhile)")
        #expect(removed < .seconds(1), "rm took \(removed)")
        #expect(!FileManager.default.fileExists(atPath: fx.backingPath("d/x1")))
        #expect(reader.ask("read 1") == "data one|", "the reader reads on what it opened")
        // A new d/x1 is not the reader's: made and written at once.
        let making = ContinuousClock.now
        let again = try run("/bin/sh", ["-c", "echo new > \"$1\"", "sh", fx.path("d/x1")])
        #expect(again.status == 0 && ContinuousClock.now - making < .milliseconds(500), "\(again)")
        let statistics = try fx.statistics()
        #expect(statistics["lease_breaks"] == 0 && statistics["lock_time_breaks"] == 0, "\(statistics)")
    }

    /// logrotate's copytruncate beside the program appending to the log and `tail -f`: the log
    /// is truncated by `truncate -s 0` (an open for writing with O_NONBLOCK, then ftruncate),
    /// by path (truncate(2)) and as logrotate does it (opened read-write, copied, truncated
    /// through that open) without waiting for either, and the appender is never stuck: it sat
    /// in uninterruptible sleep on the file's lock for the break time, and
    /// `truncate -s 0` failed with EAGAIN beside tail's open.
    @Test func copytruncateBesideAnAppenderAndTailTakesNoTime() throws {
        let fx = try MountFixture(["--break-time", "2"])
        try fx.seed("logs/app.log", "")
        let log = fx.path("logs/app.log")
        // Appends a line every 20 ms; at the end, prints the longest time between two lines.
        let appender = try Child(
            "/usr/bin/python3",
            [
                "-u", "-c",
                """
                import os, sys, threading, time
                fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
                longest, count, stop = 0.0, 0, False
                def run():
                    global longest, count
                    last = time.monotonic()
                    while not stop:
                        os.write(fd, b"line %d\\n" % count)
                        count += 1
                        now = time.monotonic()
                        longest, last = max(longest, now - last), now
                        time.sleep(0.02)
                worker = threading.Thread(target=run)
                worker.start()
                print("appending", flush=True)
                sys.stdin.readline()
                stop = True
                worker.join()
                print("%.3f %d" % (longest, count), flush=True)
                """, log
            ])
        #expect(appender.next() == "appending")
        let tail = try Child("/usr/bin/tail", ["-s", "0.1", "-f", log])
        #expect(eventually { (try? fx.state())?.contains("pid:\(tail.pid):") == true }, "tail -f has the log open")
        Thread.sleep(forTimeInterval: 0.3)
        var started = ContinuousClock.now
        let truncated = try run("/usr/bin/truncate", ["-s", "0", log])
        #expect(truncated.status == 0, "\(truncated)")
        #expect(ContinuousClock.now - started < .seconds(1), "truncate -s 0 beside the appender and tail -f")
        Thread.sleep(forTimeInterval: 0.3)
        started = ContinuousClock.now
        let byPath = try run("/usr/bin/python3", ["-c", "import os, sys; os.truncate(sys.argv[1], 0)", log])
        #expect(byPath.status == 0, "\(byPath)")
        #expect(ContinuousClock.now - started < .seconds(1), "truncate(2) beside the appender and tail -f")
        Thread.sleep(forTimeInterval: 0.3)
        started = ContinuousClock.now
        let copied = try run(
            "/usr/bin/python3",
            [
                "-c",
                """
                import os, sys
                log = sys.argv[1]
                fd = os.open(log, os.O_RDWR | os.O_NOFOLLOW)
                with open(log + ".1", "wb") as out:
                    while True:
                        chunk = os.read(fd, 65536)
                        if not chunk:
                            break
                        out.write(chunk)
                os.ftruncate(fd, 0)
                os.close(fd)
                """, log
            ])
        #expect(copied.status == 0, "\(copied)")
        #expect(ContinuousClock.now - started < .seconds(1), "copytruncate beside the appender and tail -f")
        #expect(try String(contentsOfFile: fx.backingPath("logs/app.log.1"), encoding: .utf8).hasPrefix("line "))
        appender.send("end")
        let report = appender.next()?.split(separator: " ").compactMap { Double($0) } ?? []
        #expect(report.count == 2 && report[0] < 0.5, "the appender's longest pause between lines: \(report)")
        #expect(tail.process.isRunning)
        let statistics = try fx.statistics()
        #expect(
            statistics["lease_breaks"] == 0 && statistics["lock_time_breaks"] == 0,
            "nothing was waited for: \(statistics)")
        // `> log` (O_TRUNC) is no rotation: it still waits for tail's read, the settle time
        // aside (a reader changes nothing), up to the break time.
        #expect(appender.waitForExit() == 0)
        started = ContinuousClock.now
        let rewritten = try run("/bin/sh", ["-c", ": > \"$1\"", "sh", log])
        #expect(rewritten.status == 0 && ContinuousClock.now - started >= .milliseconds(1500), "\(rewritten)")
    }
}

/// Another user's holds: a request the kernel holds a lock for waits for them at most the lock
/// time; a hold passed at the break time is revoked; a name change revokes the holds it passed
/// on the names it took away (docs/sharing.md).
@Suite struct LockTimeAndRevokedHolds {
    /// Holds each argument for reading (`--write` first: for writing) through the control socket,
    /// as one client, one hold an argument (`a+b`: one hold of both), prints "held N..." and then
    /// "broken N" for each BROKEN event.
    static let holder = """
        import json, os, socket, sys
        arguments = sys.argv[1:]
        access = "read"
        if arguments[0] == "--write":
            access, arguments = "write", arguments[1:]
        groups = [argument.split("+") for argument in arguments]
        s = socket.socket(socket.AF_UNIX); s.connect(os.getxattr(groups[0][0], "user.coordfs.socket").decode())
        f = s.makefile("rwb", buffering=0)
        def send(m): f.write(json.dumps(m).encode() + b"\\n")
        send({"op": "hello", "id": 1, "version": 1}); f.readline()
        holds = []
        for number, group in enumerate(groups):
            send({"op": "hold", "id": 2 + number, "intents": [{"path": path, "access": access} for path in group]})
            holds.append(str(json.loads(f.readline()).get("hold")))
        print("held " + " ".join(holds), flush=True)
        for line in f:
            record = json.loads(line)
            if "BROKEN" in record.get("events", []):
                print("broken %s" % record["cookie"], flush=True)
        """

    /// Another user's hold of `d/x1`, and another user's presenter of `d/x2` that never answers:
    /// root's rm of each ends at the lock time, `ls d` meanwhile waits no longer, and the hold,
    /// told it was broken, holds a new `d/x1` up no more. (The rm of x1 took the break time and
    /// that of x2 the presenter timeout, with the directory locked.)
    @Test func anotherUsersHoldAndSilentPresenterKeepANameChangeTheLockTimeAtMost() throws {
        let fx = try MountFixture([
            "-o", "allow_other", "--lock-time", "0.5", "--break-time", "5", "--wait-timeout", "infinity"
        ])
        try fx.seed("d/x1", "one\n")
        try fx.seed("d/x2", "two\n")
        for file in ["d/x1", "d/x2"] { chmod(fx.backingPath(file), 0o644) }
        let holder = try Child(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", Self.holder, fx.path("d/x1")]))
        let held = try #require(holder.next()?.split(separator: " ").dropFirst().first.map(String.init))
        let presenter = try Child(
            Nobody.program, Nobody.arguments([Paths.binary.path, "watch", fx.path("d/x2"), "--answer", "none"]))
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        for name in ["x1", "x2"] {
            let started = ContinuousClock.now
            let rm = try Child("/bin/rm", [fx.path("d/\(name)")])
            Thread.sleep(forTimeInterval: 0.1)
            let listed = try run(Nobody.program, Nobody.arguments(["/bin/ls", fx.path("d")]))
            let listing = ContinuousClock.now - started
            #expect(rm.waitForExit(timeout: .seconds(10)) == 0)
            let removed = ContinuousClock.now - started
            #expect(listed.status == 0, "\(listed)")
            #expect(removed >= .milliseconds(400), "rm of \(name) waited the lock time: \(removed)")
            #expect(
                listing < .seconds(1.5) && removed < .seconds(1.5),
                "rm of \(name) took \(removed), ls meanwhile \(listing)")
        }
        #expect(holder.next() == "broken \(held)")
        let started = ContinuousClock.now
        #expect(try run("/bin/sh", ["-c", "echo new > \"$1\"", "sh", fx.path("d/x1")]).status == 0)
        #expect(ContinuousClock.now - started < .milliseconds(400), "the revoked hold held the new d/x1 up")
        let statistics = try fx.statistics()
        #expect(statistics["lock_time_breaks"] == 2 && statistics["holds_revoked"] == 1, "\(statistics)")
        withExtendedLifetime(presenter) {}
    }

    /// A hold broken at the break time is revoked: the next write of the item, by another
    /// process, does not wait for it again (each waited the break time).
    @Test func aHoldBrokenAtTheBreakTimeHoldsUpNoLaterWrite() throws {
        let fx = try MountFixture(["-o", "allow_other", "--break-time", "2", "--wait-timeout", "infinity"])
        try fx.seed("root.txt", "root's\n")
        chmod(fx.backingPath("root.txt"), 0o644)
        let holder = try Child(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", Self.holder, fx.path("root.txt")]))
        let held = try #require(holder.next()?.split(separator: " ").dropFirst().first.map(String.init))
        var started = ContinuousClock.now
        #expect(try run("/bin/sh", ["-c", "echo one > \"$1\"", "sh", fx.path("root.txt")]).status == 0)
        let first = ContinuousClock.now - started
        #expect(first >= .milliseconds(1500), "the first write waits the break time: \(first)")
        #expect(holder.next() == "broken \(held)")
        started = ContinuousClock.now
        #expect(try run("/bin/sh", ["-c", "echo two > \"$1\"", "sh", fx.path("root.txt")]).status == 0)
        let second = ContinuousClock.now - started
        #expect(second < .seconds(1), "the second write waited for the revoked hold: \(second)")
        #expect(try String(contentsOfFile: fx.backingPath("root.txt"), encoding: .utf8) == "two\n")
        let statistics = try fx.statistics()
        #expect(statistics["lease_breaks"] == 1 && statistics["holds_revoked"] == 1, "\(statistics)")
    }

    /// `rm -rf` of a tree in which another user holds five files waits the lock time once in
    /// all: its first unlink waits for the hold on its file, and its next calls go past that
    /// user's holds at once (a wait spent, `lock_time_waived`). Each unlink revokes the hold on
    /// its file once the file is gone, so the rmdirs wait for nothing, and each hold passed is
    /// told once. (It waited the lock time for each file, five lock times in all, and before
    /// that the break time for each file and again for each directory.)
    @Test func rmRfOfATreeAnotherUserHoldsFilesInWaitsTheLockTimeOnceInAll() throws {
        let fx = try MountFixture([
            "-o", "allow_other", "--lock-time", "1", "--break-time", "30", "--wait-timeout", "infinity"
        ])
        let files = ["tree/a", "tree/b", "tree/sub/c", "tree/sub/d", "tree/sub/deeper/e"]
        for file in files {
            try fx.seed(file, "\(file)\n")
            chmod(fx.backingPath(file), 0o644)
        }
        let holder = try Child(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", Self.holder] + files.map(fx.path)))
        let held = try #require(holder.next()?.split(separator: " ").dropFirst().map(String.init))
        #expect(held.count == 5)
        let started = ContinuousClock.now
        let removed = try run("/bin/rm", ["-rf", fx.path("tree")])
        let took = ContinuousClock.now - started
        #expect(removed.status == 0, "\(removed)")
        #expect(took >= .milliseconds(900), "the first unlink waited the lock time: \(took)")
        #expect(took < .seconds(3), "rm -rf took \(took), not less than three lock times")
        #expect(!FileManager.default.fileExists(atPath: fx.backingPath("tree")))
        var broken: [String] = []
        while broken.count < 5, let line = holder.next(timeout: .seconds(5)), line.hasPrefix("broken ") {
            broken.append(String(line.dropFirst("broken ".count)))
        }
        #expect(holder.next(timeout: .milliseconds(300)) == nil, "no hold is told twice")
        #expect(broken.sorted() == held.sorted(), "each hold passed is told once: \(broken)")
        let statistics = try fx.statistics()
        #expect(
            statistics["lock_time_breaks"] == 5 && statistics["lock_time_waived"] == 4
                && statistics["holds_revoked"] == 5,
            "one wait, then the others waived; the rmdirs waited for nothing: \(statistics)")
    }

    /// The wait spent is the process's, and for the other user's holders only: another process
    /// of root's waits the lock time again, and root's own hold is not gone past (one user's
    /// programs never go past each other): in a directory others may list, the unlink is
    /// refused with EBUSY at the lock time instead, and the file stays.
    @Test func aWaitSpentLetsNoOtherProcessAndNoHolderOfTheSameUserPast() throws {
        let fx = try MountFixture([
            "-o", "allow_other", "--lock-time", "0.5", "--break-time", "30", "--wait-timeout", "2"
        ])
        for file in ["d/theirs1", "d/theirs2", "d/theirs3", "d/roots"] {
            try fx.seed(file, "\(file)\n")
            chmod(fx.backingPath(file), 0o666)
        }
        let theirs = try Child(
            Nobody.program,
            Nobody.arguments([
                "/usr/bin/python3", "-c", Self.holder,
                fx.path("d/theirs1"), fx.path("d/theirs2"), fx.path("d/theirs3")
            ]))
        #expect(theirs.next()?.hasPrefix("held ") == true)
        let roots = try Child("/usr/bin/python3", ["-c", Self.holder, fx.path("d/roots")])
        #expect(roots.next()?.hasPrefix("held ") == true)
        // One process: unlinks theirs1 (the lock time), theirs2 (at once), then roots (its own
        // user's, in a directory others may list: EBUSY at the lock time), each timed.
        let unlinks = try run(
            "/usr/bin/python3",
            [
                "-c",
                """
                import os, sys, time
                for path in sys.argv[1:]:
                    started = time.monotonic()
                    try:
                        os.unlink(path)
                        outcome = "ok"
                    except OSError as error:
                        outcome = os.strerror(error.errno)
                    print("%s %.3f" % (outcome, time.monotonic() - started), flush=True)
                """, fx.path("d/theirs1"), fx.path("d/theirs2"), fx.path("d/roots")
            ])
        let lines = unlinks.output.split(separator: "\n").map { $0.split(separator: " ") }
        try #require(lines.count == 3, "\(unlinks)")
        func seconds(_ line: [Substring]) -> Double { Double(line.last ?? "") ?? -1 }
        #expect(lines[0].first == "ok" && seconds(lines[0]) >= 0.4 && seconds(lines[0]) < 1.5, "the first: \(lines[0])")
        #expect(lines[1].first == "ok" && seconds(lines[1]) < 0.3, "the second, a wait spent: \(lines[1])")
        #expect(
            lines[2].joined(separator: " ").hasPrefix("Device or resource busy") && seconds(lines[2]) >= 0.4
                && seconds(lines[2]) < 1.5,
            "root's own hold is not gone past, and refused at the lock time: \(lines[2])")
        #expect(FileManager.default.fileExists(atPath: fx.backingPath("d/roots")), "root's own held file stays")
        // Another process of root's, at once after: the lock time again.
        let started = ContinuousClock.now
        #expect(try run("/bin/rm", [fx.path("d/theirs3")]).status == 0)
        #expect(ContinuousClock.now - started >= .milliseconds(400), "another process spent no wait")
        let statistics = try fx.statistics()
        #expect(
            statistics["lock_time_breaks"] == 3 && statistics["lock_time_waived"] == 1
                && statistics["lock_time_refusals"] == 1, "\(statistics)")
    }

    /// `mv g f` over an item another user holds goes past the hold at the lock time, revokes it
    /// and tells its holder; a hold of both items is told once. (Only the holders of the first
    /// item, the one renamed, were told: the hold of `f` heard nothing.)
    @Test func aRenameOverAnotherUsersHoldTellsItsHolderOnce() throws {
        let fx = try MountFixture([
            "-o", "allow_other", "--lock-time", "0.5", "--break-time", "30", "--wait-timeout", "infinity"
        ])
        for file in ["d/f", "d/g", "d/f2", "d/g2"] {
            try fx.seed(file, "\(file)\n")
            chmod(fx.backingPath(file), 0o644)
        }
        let holder = try Child(
            Nobody.program,
            Nobody.arguments([
                "/usr/bin/python3", "-c", Self.holder,
                fx.path("d/f"), fx.path("d/g2") + "+" + fx.path("d/f2")
            ]))
        let held = try #require(holder.next()?.split(separator: " ").dropFirst().map(String.init))
        #expect(held.count == 2)
        for (from, to) in [("d/g", "d/f"), ("d/g2", "d/f2")] {
            let started = ContinuousClock.now
            let renamed = try run(
                "/usr/bin/python3",
                ["-c", "import os, sys; os.rename(sys.argv[1], sys.argv[2])", fx.path(from), fx.path(to)])
            let took = ContinuousClock.now - started
            #expect(renamed.status == 0, "\(renamed)")
            #expect(
                took >= .milliseconds(400) && took < .milliseconds(1500), "rename of \(from) over \(to) took \(took)")
        }
        var broken: [String] = []
        while let line = holder.next(timeout: .seconds(2)), line.hasPrefix("broken ") {
            broken.append(String(line.dropFirst("broken ".count)))
        }
        #expect(broken.sorted() == held.sorted(), "each hold the renames went past is told once: \(broken)")
        // Revoked: a write of the new d/f goes ahead at once.
        let started = ContinuousClock.now
        #expect(try run("/bin/sh", ["-c", "echo new > \"$1\"", "sh", fx.path("d/f")]).status == 0)
        #expect(ContinuousClock.now - started < .milliseconds(400), "the revoked hold held the new d/f up")
        let statistics = try fx.statistics()
        #expect(statistics["lock_time_breaks"] == 2 && statistics["holds_revoked"] == 2, "\(statistics)")
    }
}

/// A user's wait for its own holders freezes nobody else (docs/sharing.md). An rm, mv or create
/// waits with its directory locked by the kernel: in a directory other users may list or search
/// (as /tmp), on a mount shared with them, such a call that waits for its own user's holds,
/// open files or presenters fails with EBUSY at the lock time, having changed nothing, and every
/// other user's `ls` and create there meanwhile waits no longer. It never goes past its own
/// user's holders; once refused so, the user's processes are refused at once for the same
/// holders for a while, so neither `rm -rf` nor one `rm` after another compounds. In a directory nobody else may enter it waits as before.
@Suite struct OwnUserWaitsUnderASharedLock {
    /// Unlinks (or renames, `--rename`: each PATH to PATH.1) each argument in turn; prints the
    /// errno's name, or "ok", and the seconds each took.
    static let changes = """
        import errno, os, sys, time
        arguments = sys.argv[1:]
        rename = arguments[0] == "--rename"
        for path in arguments[1:] if rename else arguments:
            started = time.monotonic()
            try:
                os.rename(path, path + ".1") if rename else os.unlink(path)
                outcome = "ok"
            except OSError as error:
                outcome = errno.errorcode.get(error.errno, str(error.errno))
            print("%s %.3f" % (outcome, time.monotonic() - started), flush=True)
        """

    /// nobody holds three of its files in `shared/` (1777, as /tmp) through the control socket,
    /// and one in its own `private/` (0700); another of nobody's processes removes the three:
    /// the first fails with EBUSY at the lock time, the next two at once, and root lists and
    /// creates in `shared/` meanwhile without waiting longer. The files stay, the holds hold and
    /// hear nothing. A `mv` of a file another of nobody's programs keeps open for writing, and
    /// an `rm` of one nobody presents and never answers for, fail at the lock time too. The file
    /// in `private/` is waited for until the wait timeout, as before. Once the holds end, the
    /// removal goes ahead at once. (Each removal waited the wait timeout, and root's `ls` with
    /// it.)
    @Test func aUsersWaitForItsOwnHoldersFreezesNoOtherUsersDirectory() throws {
        let fx = try MountFixture([
            "-o", "allow_other", "--lock-time", "1", "--break-time", "30", "--presenter-timeout", "8",
            "--wait-timeout", "3"
        ])
        for name in ["mine1", "mine2", "mine3", "log", "presented"] { try fx.seed("shared/\(name)", "\(name)\n") }
        try fx.seed("private/mine", "mine\n")
        chmod(fx.backingPath("shared"), 0o1777)
        chown(fx.backingPath("private"), 65534, 65534)
        chmod(fx.backingPath("private"), 0o700)
        for name in ["shared/mine1", "shared/mine2", "shared/mine3", "shared/log", "shared/presented", "private/mine"] {
            chown(fx.backingPath(name), 65534, 65534)
            chmod(fx.backingPath(name), 0o644)
        }
        let held = ["shared/mine1", "shared/mine2", "shared/mine3", "private/mine"].map(fx.path)
        let holder = try Child(
            Nobody.program,
            Nobody.arguments(["/usr/bin/python3", "-c", LockTimeAndRevokedHolds.holder, "--write"] + held))
        #expect(holder.next()?.split(separator: " ").count == 5, "nobody holds its four files")

        let removals = try Child(
            Nobody.program,
            Nobody.arguments(["/usr/bin/python3", "-c", Self.changes] + held.prefix(3)))
        #expect(eventually(.seconds(5)) { (try? fx.state())?.contains("WAIT") == true }, "the first removal waits")
        let started = ContinuousClock.now
        let listed = try run("/bin/ls", [fx.path("shared")])
        #expect(FileManager.default.createFile(atPath: fx.path("shared/roots"), contents: Data("root's\n".utf8)))
        let meanwhile = ContinuousClock.now - started
        #expect(listed.status == 0 && listed.output.contains("mine1"), "\(listed)")
        #expect(meanwhile < .seconds(1.8), "root's ls and create in shared/ took \(meanwhile)")
        // What a change came to: its errno's name (or "ok"), and its seconds.
        func words(_ output: String) -> [Substring] { output.split(whereSeparator: { $0 == " " || $0 == "\n" }) }
        func seconds(_ outcome: [Substring]) -> Double { Double(outcome.last ?? "") ?? -1 }
        let outcomes = (0..<3).map { _ in words(removals.next(timeout: .seconds(15)) ?? "") }
        #expect(
            outcomes[0].first == "EBUSY" && seconds(outcomes[0]) >= 0.9 && seconds(outcomes[0]) < 2,
            "the first removal, refused at the lock time: \(outcomes[0])")
        for outcome in outcomes.dropFirst() {
            #expect(
                outcome.first == "EBUSY" && seconds(outcome) < 0.3,
                "the next, refused at once for the same holder: \(outcome)")
        }
        // A new process of nobody's (an `rm` each, as the next attempt would be) is refused at
        // once as well: the lock time is not given again to each process a user starts.
        let newProcess = try run(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", Self.changes, held[0]]))
        let anew = words(newProcess.output)
        #expect(anew.first == "EBUSY" && seconds(anew) < 0.3, "a new process, refused at once: \(newProcess)")
        for name in ["mine1", "mine2", "mine3"] {
            #expect(FileManager.default.fileExists(atPath: fx.backingPath("shared/\(name)")), "shared/\(name) stays")
        }

        // Another of nobody's programs keeps shared/log open for writing; nobody's mv of it.
        let writer = try Child(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", Paths.scripts.appendingPathComponent("hold.py").path])
        )
        #expect(writer.ask("open w \(fx.path("shared/log"))") == "ok 1")
        let moved = try run(
            Nobody.program,
            Nobody.arguments(["/usr/bin/python3", "-c", Self.changes, "--rename", fx.path("shared/log")]))
        let move = words(moved.output)
        #expect(
            move.first == "EBUSY" && seconds(move) >= 0.9 && seconds(move) < 2,
            "mv beside its own user's writer, refused at the lock time: \(moved)")
        #expect(
            FileManager.default.fileExists(atPath: fx.backingPath("shared/log"))
                && !FileManager.default.fileExists(atPath: fx.backingPath("shared/log.1")))

        // nobody presents shared/presented and never answers; nobody's rm of it.
        let presenter = try Child(
            Nobody.program,
            Nobody.arguments([Paths.binary.path, "watch", fx.path("shared/presented"), "--answer", "none"]))
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        let unpresented = try run(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", Self.changes, fx.path("shared/presented")]))
        let unlink = words(unpresented.output)
        #expect(
            unlink.first == "EBUSY" && seconds(unlink) >= 0.9 && seconds(unlink) < 2,
            "rm beside its own user's silent presenter, refused at the lock time: \(unpresented)")
        #expect(FileManager.default.fileExists(atPath: fx.backingPath("shared/presented")))

        // Nobody else may enter private/: its own hold is waited for until the wait timeout.
        let alone = try run(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", Self.changes, fx.path("private/mine")]))
        let privately = words(alone.output)
        #expect(
            privately.first == "EBUSY" && seconds(privately) >= 2.7, "in private/, the wait timeout: \(alone)")

        #expect(holder.next(timeout: .milliseconds(300)) == nil, "no hold was broken")
        let statistics = try fx.statistics()
        #expect(
            statistics["lock_time_refusals"] == 6 && statistics["lock_time_breaks"] == 0
                && statistics["lease_breaks"] == 0 && statistics["holds_revoked"] == 0, "\(statistics)")

        // The holds ended, the removal goes ahead at once.
        holder.signal(SIGKILL)
        #expect(holder.waitForExit() != nil)
        #expect(
            eventually { (try? fx.state())?.contains("shared/mine1") == false }, "the holds ended with their client")
        let again = try run(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", Self.changes, fx.path("shared/mine1")]))
        let retried = words(again.output)
        #expect(retried.first == "ok" && seconds(retried) < 0.3, "tried again once the hold ended: \(again)")
        withExtendedLifetime((writer, presenter)) {}
    }
}
