import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Unmodified programs, as separate processes, coordinated through a real mount.
@Suite struct MountCoordination {
    @Test func aReaderWaitsForAWriterAndProceedsAfterItsClose() throws {
        let fx = try MountFixture()
        try fx.seed("a.txt", "one\n")
        let writer = try Child.holder(), reader = try Child.holder()
        #expect(writer.ask("open w \(fx.path("a.txt"))") == "ok 1")
        reader.send("open r \(fx.path("a.txt"))")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true }, "the reader waits")
        #expect(writer.ask("write 1 two") == "ok")
        #expect(writer.ask("close 1") == "ok")
        #expect(reader.next() == "ok 1")
        #expect(reader.ask("read 1") == "data one|two|", "the reader sees what the writer wrote before closing")
    }

    @Test func oneServingThreadIsNotHeldByAWaitingOpen() throws {
        // With -s one thread serves every request: a waiting open must not hold it, or the
        // writer could never close and nobody else could get in.
        let fx = try MountFixture(["-s"])
        #expect(try fx.statistics()["max_threads"] == 1)
        try fx.seed("a.txt", "one\n")
        try fx.seed("b.txt")
        let writer = try Child.holder(), reader = try Child.holder(), bystander = try Child.holder()
        #expect(writer.ask("open w \(fx.path("a.txt"))") == "ok 1")
        reader.send("open r \(fx.path("a.txt"))")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true }, "the reader waits")
        #expect(bystander.ask("open w \(fx.path("b.txt"))") == "ok 1", "other items are served meanwhile")
        #expect(bystander.ask("write 1 other") == "ok")
        #expect(bystander.ask("close 1") == "ok")
        #expect(writer.ask("write 1 two") == "ok")
        #expect(writer.ask("close 1") == "ok")
        #expect(reader.next() == "ok 1")
        #expect(reader.ask("read 1") == "data one|two|")
    }

    @Test func theDefaultServesWithSixteenThreadsAndThreadsChangesIt() throws {
        #expect(try MountFixture().statistics()["max_threads"] == 16)
        #expect(try MountFixture(["--threads", "3"]).statistics()["max_threads"] == 3)
    }

    @Test func deepItemsAreNamedByTheirWholePath() throws {
        // Deeper than the walk's buffer on the stack (32): the rest of the names come from a second walk.
        let fx = try MountFixture()
        for depth in [1, 31, 32, 33, 70] {
            let directories = (0..<depth).map { "d\($0)" }.joined(separator: "/")
            try FileManager.default.createDirectory(
                atPath: fx.path("deep\(depth)/" + directories), withIntermediateDirectories: true)
            let file = "deep\(depth)/" + directories + "/leaf.txt"
            #expect(FileManager.default.createFile(atPath: fx.path(file), contents: nil))
            let holder = try Child.holder()
            #expect(holder.ask("open wt \(fx.path(file))") == "ok 1")
            let held = try fx.state()
            #expect(
                held.contains("write(0) \(fx.path(file))\n") || held.hasSuffix("write(0) \(fx.path(file))"),
                "depth \(depth): \(held)")
            #expect(holder.ask("close 1") == "ok")
        }
    }

    @Test func readersShare() throws {
        let fx = try MountFixture()
        try fx.seed("a.txt")
        let first = try Child.holder(), second = try Child.holder()
        #expect(first.ask("open r \(fx.path("a.txt"))") == "ok 1")
        #expect(second.ask("open rn \(fx.path("a.txt"))") == "ok 1", "granted at once, even non-blocking")
    }

    @Test func aWriterWaitsForReaders() throws {
        let fx = try MountFixture()
        try fx.seed("a.txt")
        let reader = try Child.holder(), writer = try Child.holder()
        #expect(reader.ask("open r \(fx.path("a.txt"))") == "ok 1")
        writer.send("open w \(fx.path("a.txt"))")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true })
        #expect(reader.ask("close 1") == "ok")
        #expect(writer.next() == "ok 1")
    }

    /// An unlink or a rename waits for a writer of the item, whose work it would lose or show
    /// half-done; a reader's open file does not hold it up: its descriptor reads on what it
    /// opened, as on any Linux filesystem (docs/mount.md, the kernel's locks).
    @Test func unlinkAndRenameWaitForAWriterAndNotForAReader() throws {
        let fx = try MountFixture()
        try fx.seed("a.txt")
        try fx.seed("b.txt")
        try fx.seed("r.txt", "read\n")
        let holder = try Child.holder(), other = try Child.holder()
        #expect(holder.ask("open r \(fx.path("r.txt"))") == "ok 1")
        #expect(other.ask("rename \(fx.path("r.txt")) \(fx.path("r2.txt"))", timeout: .seconds(2)) == "ok")
        #expect(other.ask("unlink \(fx.path("r2.txt"))", timeout: .seconds(2)) == "ok")
        #expect(holder.ask("read 1") == "data read|")
        #expect(holder.ask("open w \(fx.path("a.txt"))") == "ok 2")
        #expect(holder.ask("open w \(fx.path("b.txt"))") == "ok 3")
        other.send("unlink \(fx.path("a.txt"))")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true })
        #expect(holder.ask("close 2") == "ok")
        #expect(other.next() == "ok")
        #expect(!FileManager.default.fileExists(atPath: fx.backingPath("a.txt")))
        other.send("rename \(fx.path("b.txt")) \(fx.path("c.txt"))")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true })
        #expect(holder.ask("close 3") == "ok")
        #expect(other.next() == "ok")
        #expect(FileManager.default.fileExists(atPath: fx.backingPath("c.txt")))
        #expect(try fx.statistics()["lease_breaks"] == 0)
    }

    /// `--coordination strict`: no open file lets a change past it, a reader's neither.
    @Test func strictModeKeepsUnlinkAndRenameWaitingForAReader() throws {
        let fx = try MountFixture(["--coordination", "strict"])
        try fx.seed("r.txt", "read\n")
        let holder = try Child.holder(), other = try Child.holder()
        #expect(holder.ask("open r \(fx.path("r.txt"))") == "ok 1")
        other.send("rename \(fx.path("r.txt")) \(fx.path("r2.txt"))")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true })
        #expect(holder.ask("close 1") == "ok")
        #expect(other.next() == "ok")
        #expect(FileManager.default.fileExists(atPath: fx.backingPath("r2.txt")))
    }

    @Test func nonBlockingOpensGetEAGAINAtOnce() throws {
        // No settle time: the writer's file, quiet since it was seeded, would let a reader in,
        // blocking or not.
        let fx = try MountFixture(["--settle-time", "0"])
        try fx.seed("a.txt")
        let writer = try Child.holder(), other = try Child.holder()
        #expect(writer.ask("open w \(fx.path("a.txt"))") == "ok 1")
        let start = ContinuousClock.now
        #expect(other.ask("open rn \(fx.path("a.txt"))") == "err EAGAIN")
        #expect(other.ask("open wtn \(fx.path("a.txt"))") == "err EAGAIN", "a truncating writer excludes every writer")
        #expect(ContinuousClock.now - start < .seconds(2))
        #expect(try fx.state().contains("WAIT") == false)
    }

    /// A file with two names is one item: an open by one name conflicts with a hold taken by
    /// the other, whichever name the kernel looked up last. (Each lookup moved the path the
    /// file was coordinated by, and a reader that had just looked up the other name opened the
    /// file while a writer held it.)
    @Test func opensOfAFileByEitherOfItsNamesConflict() throws {
        let fx = try MountFixture(["--cache-timeout", "0.2", "--settle-time", "0"])
        try FileManager.default.createDirectory(atPath: fx.path("a"), withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: fx.path("b"), withIntermediateDirectories: false)
        #expect(FileManager.default.createFile(atPath: fx.path("a/first"), contents: Data("linked".utf8)))
        try #require(link(fx.path("a/first"), fx.path("b/second")) == 0)
        let writer = try Child.holder(), reader = try Child.holder()
        // Each name looked up afresh (past the cache timeout) just before it is opened.
        Thread.sleep(forTimeInterval: 0.3)
        #expect(writer.ask("open w \(fx.path("a/first"))") == "ok 1")
        Thread.sleep(forTimeInterval: 0.3)
        #expect(reader.ask("open rn \(fx.path("b/second"))") == "err EAGAIN")
        Thread.sleep(forTimeInterval: 0.3)
        #expect(reader.ask("open wtn \(fx.path("a/first"))") == "err EAGAIN")
        #expect(writer.ask("close all") == "ok")
        #expect(reader.ask("open rn \(fx.path("b/second"))") == "ok 1")
    }

    /// The name a file with hard links is coordinated by is removed through the mount: the file
    /// is coordinated by another of its names from then on. (The path stayed the removed name,
    /// so status showed it, and a new file made under it conflicted with the linked one.)
    @Test func aFileWithHardLinksIsCoordinatedByANameItStillHas() throws {
        let fx = try MountFixture(["--settle-time", "0"])
        try FileManager.default.createDirectory(atPath: fx.path("a"), withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: fx.path("b"), withIntermediateDirectories: false)
        #expect(FileManager.default.createFile(atPath: fx.path("a/first"), contents: Data("linked".utf8)))
        try #require(link(fx.path("a/first"), fx.path("b/second")) == 0)
        try FileManager.default.removeItem(atPath: fx.path("a/first"))
        let writer = try Child.holder(), other = try Child.holder()
        #expect(writer.ask("open w \(fx.path("b/second"))") == "ok 1")
        let state = try fx.state()
        #expect(state.contains("/b/second") && !state.contains("/a/first"), "\(state)")
        #expect(FileManager.default.createFile(atPath: fx.path("a/first"), contents: Data("new".utf8)))
        #expect(other.ask("open wn \(fx.path("a/first"))") == "ok 1", "another file now")
        #expect(other.ask("open rn \(fx.path("b/second"))") == "err EAGAIN")
    }

    @Test func aWaitingCatKilledBySignalLeavesNothingHeld() throws {
        let fx = try MountFixture()
        try fx.seed("a.txt", "content\n")
        let writer = try Child.holder()
        #expect(writer.ask("open w \(fx.path("a.txt"))") == "ok 1")
        let cat = try Child("/bin/cat", [fx.path("a.txt")])
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true })
        cat.signal(SIGKILL)
        #expect(cat.waitForExit() != nil, "the killed cat does not hang")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == false }, "its wait is gone")
        #expect(writer.ask("close 1") == "ok")
        #expect(eventually { (try? fx.state())?.contains("HOLD") == false }, "nothing held")
        let next = try Child.holder()
        #expect(next.ask("open wn \(fx.path("a.txt"))") == "ok 1")
    }

    @Test func aCycleOfTwoProcessesGetsEDEADLK() throws {
        let fx = try MountFixture()
        try fx.seed("x")
        try fx.seed("y")
        let first = try Child.holder(), second = try Child.holder()
        // Truncating writers: each excludes every other open.
        #expect(first.ask("open wt \(fx.path("x"))") == "ok 1")
        #expect(second.ask("open wt \(fx.path("y"))") == "ok 1")
        first.send("open wt \(fx.path("y"))")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true })
        #expect(second.ask("open wt \(fx.path("x"))") == "err EDEADLK", "the newest waiter is refused")
        #expect(second.ask("close 1") == "ok")
        #expect(first.next() == "ok 2", "the other proceeds")
    }

    @Test func theWaitTimeoutGivesEBUSY() throws {
        let fx = try MountFixture(["--wait-timeout", "1", "--settle-time", "0"])
        try fx.seed("a.txt")
        let writer = try Child.holder(), reader = try Child.holder()
        #expect(writer.ask("open w \(fx.path("a.txt"))") == "ok 1")
        let start = ContinuousClock.now
        #expect(reader.ask("open r \(fx.path("a.txt"))", timeout: .seconds(10)) == "err EBUSY")
        let waited = ContinuousClock.now - start
        #expect(waited >= .milliseconds(900) && waited < .seconds(5))
    }

    @Test func aProcessNeverWaitsForItself() throws {
        let fx = try MountFixture()
        try fx.seed("a.txt")
        let process = try Child.holder()
        #expect(process.ask("open w \(fx.path("a.txt"))") == "ok 1")
        #expect(process.ask("open rn \(fx.path("a.txt"))") == "ok 2")
        #expect(process.ask("open w \(fx.path("a.txt"))") == "ok 3")
        #expect(process.ask("unlink \(fx.path("a.txt"))") == "ok")
    }

    /// Every thread of a process is the process: its first thread is told without /proc, the
    /// others from it (`ProcessInfoCache`). Another process still waits.
    @Test func aProcessNeverWaitsForItselfOnAnyOfItsThreads() throws {
        let fx = try MountFixture(["--settle-time", "0"])
        try fx.seed("a.txt")
        let path = fx.path("a.txt")
        let script = """
            import os, subprocess, sys, threading
            held = os.open("\(path)", os.O_WRONLY)
            def attempt():
                try:
                    os.close(os.open("\(path)", os.O_RDONLY | os.O_NONBLOCK))
                    return "ok"
                except BlockingIOError:
                    return "EAGAIN"
            seen = []
            worker = threading.Thread(target=lambda: seen.append(attempt()))
            worker.start(); worker.join()
            other = subprocess.run([sys.executable, "-c", "import os\\n" + \
                "try: os.open('\(path)', os.O_RDONLY | os.O_NONBLOCK); print('ok')\\n" + \
                "except BlockingIOError: print('EAGAIN')"], capture_output=True, text=True).stdout.strip()
            print(seen[0], attempt(), other)
            """
        let result = try run("/usr/bin/python3", ["-c", script])
        #expect(result.output.trimmingCharacters(in: .whitespacesAndNewlines) == "ok ok EAGAIN", "\(result.errors)")
    }

    @Test func coordinationOffNeverWaits() throws {
        let fx = try MountFixture(["--coordination", "off"])
        try fx.seed("a.txt")
        let writer = try Child.holder(), other = try Child.holder()
        #expect(writer.ask("open w \(fx.path("a.txt"))") == "ok 1")
        #expect(other.ask("open wn \(fx.path("a.txt"))") == "ok 1")
        #expect(other.ask("open r \(fx.path("a.txt"))", timeout: .seconds(2)) == "ok 2")
        #expect(other.ask("unlink \(fx.path("a.txt"))", timeout: .seconds(2)) == "ok")
    }

    @Test func aShellPipelineThatReadsAndTruncatesTheSameFileEndsWithinTheTimeout() throws {
        // `cat f | sort > f`: two processes of one pipeline, one reading and one truncating.
        // Whichever opens second waits; the pipeline's own data flow cannot release the first,
        // so it ends with EBUSY after the wait timeout rather than hanging.
        let fx = try MountFixture(["--wait-timeout", "1", "--settle-time", "0"])
        try fx.seed("f", "b\na\n")
        let start = ContinuousClock.now
        _ = try run("/bin/sh", ["-c", "cat \(fx.path("f")) | sort > \(fx.path("f"))"])
        #expect(ContinuousClock.now - start < .seconds(8))
        #expect(eventually { (try? fx.state())?.contains("HOLD") == false })
    }

    @Test func aSignalEndsAWaitWithEINTRAndLeavesNothingWaiting() throws {
        // (No settle time: the idle writer holds the reader until the signal.)
        let fx = try MountFixture(["--settle-time", "0"])
        try fx.seed("a.txt")
        let writer = try Child.holder()
        #expect(writer.ask("open w \(fx.path("a.txt"))") == "ok 1")
        // A handler that raises: Python does not retry the open, and shows the errno it got.
        let script = """
            import os, signal, errno
            def interrupted(signum, frame): raise InterruptedError(errno.EINTR, "interrupted")
            signal.signal(signal.SIGALRM, interrupted)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])  # the test runner's threads block it
            signal.alarm(1)
            try:
                os.open("\(fx.path("a.txt"))", os.O_RDONLY)
                print("opened")
            except InterruptedError:
                print("EINTR")
            """
        let result = try run("/usr/bin/python3", ["-c", script])
        #expect(result.output.trimmingCharacters(in: .whitespacesAndNewlines) == "EINTR")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == false })
        #expect(writer.ask("close 1") == "ok")
    }

    @Test func modesFollowPathGlobs() throws {
        let fx = try MountFixture(inProcess: { configuration in
            configuration.modeRules = [(pattern: "*.log", mode: .off), (pattern: "scratch/*", mode: .notify)]
        })
        try fx.seed("app.log")
        try fx.seed("scratch/tmp")
        try fx.seed("doc.txt")
        let holder = try Child.holder(), other = try Child.holder()
        for name in ["app.log", "scratch/tmp", "doc.txt"] {
            #expect(holder.ask("open w \(fx.path(name))")?.hasPrefix("ok") == true)
        }
        #expect(other.ask("open wn \(fx.path("app.log"))")?.hasPrefix("ok") == true, "off: never waits")
        #expect(other.ask("open wn \(fx.path("scratch/tmp"))")?.hasPrefix("ok") == true, "notify: never waits")
        #expect(other.ask("open wtn \(fx.path("doc.txt"))") == "err EAGAIN", "exclusive elsewhere")
    }

    /// C17 through the mount: once a directory holds the package marker, an open of anything in
    /// it is an access to the whole package. Markers made and removed through the mount count at once.
    @Test func C17_insideAMarkedPackageOpensConflictAsTheWholePackage() throws {
        let fx = try MountFixture()
        try fx.seed("doc.pkg/a.txt")
        try fx.seed("doc.pkg/b.txt")
        let holder = try Child.holder(), other = try Child.holder()
        #expect(holder.ask("open w \(fx.path("doc.pkg/a.txt"))") == "ok 1")
        #expect(other.ask("open wn \(fx.path("doc.pkg/b.txt"))") == "ok 1", "a plain directory: separate items")
        #expect(other.ask("close all") == "ok" && holder.ask("close all") == "ok")

        #expect(try run("/usr/bin/touch", [fx.path("doc.pkg/.coordfs-package")]).status == 0)
        #expect(holder.ask("open w \(fx.path("doc.pkg/a.txt"))") == "ok 2")
        #expect(other.ask("open wtn \(fx.path("doc.pkg/b.txt"))") == "err EAGAIN", "a package: one item")
        #expect(holder.ask("close all") == "ok")

        #expect(try run("/bin/rm", [fx.path("doc.pkg/.coordfs-package")]).status == 0)
        #expect(holder.ask("open w \(fx.path("doc.pkg/a.txt"))") == "ok 3")
        #expect(other.ask("open wn \(fx.path("doc.pkg/b.txt"))") == "ok 2", "a plain directory again")
    }
}
