import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Presenters in other processes, speaking only the documented protocol (Tests/Scripts/presenter.py).
@Suite struct ControlSocket {
    static let presenter = Paths.scripts.appendingPathComponent("presenter.py").path

    /// Starts presenter.py on `path` and waits until its watch is established.
    func startPresenter(_ path: String, _ arguments: [String] = []) throws -> Child {
        let child = try Child("/usr/bin/python3", [Self.presenter, path] + arguments)
        #expect(child.next()?.contains("\"ok\": true") == true, "hello")
        #expect(child.next()?.contains("\"wd\"") == true, "watch")
        return child
    }

    @Test func aPresenterIsAskedToSaveBeforeCatReadsAndCatSeesTheSavedBytes() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "stale\n")
        let presenter = try startPresenter(fx.path("doc.txt"), ["--on-save", "saved by the presenter\n"])
        let cat = try run("/bin/cat", [fx.path("doc.txt")])
        #expect(cat.output == "saved by the presenter\n")
        let first = presenter.next(), second = presenter.next()
        #expect(first?.contains("RELINQUISH_READER") == true && second?.contains("SAVE") == true)
        #expect(presenter.next()?.contains("REACQUIRE") == true)
    }

    @Test func aPresentersErrnoFailsTheOpenWithThatErrno() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let presenter = try startPresenter(fx.path("doc.txt"), ["--answer", "EACCES", "--mask", "SAVE"])
        defer { withExtendedLifetime(presenter) {} }  // a released Child is killed
        let cat = try run("/bin/cat", [fx.path("doc.txt")])
        #expect(cat.status != 0 && cat.errors.contains("Permission denied"), "\(cat.errors)")
        let refused = try run(
            "/usr/bin/python3",
            [
                "-c", "import os,sys\ntry: os.open(sys.argv[1], os.O_RDONLY)\nexcept OSError as e: print(e.errno)",
                fx.path("doc.txt")
            ])
        #expect(refused.output.trimmingCharacters(in: .whitespacesAndNewlines) == String(EACCES))
    }

    @Test func aPresenterThatNeverAnswersDelaysByThePresenterTimeoutOnly() throws {
        let fx = try MountFixture(["--presenter-timeout", "1"])
        try fx.seed("doc.txt", "content\n")
        let presenter = try startPresenter(fx.path("doc.txt"), ["--answer", "never"])
        let start = ContinuousClock.now
        let cat = try run("/bin/cat", [fx.path("doc.txt")])
        let waited = ContinuousClock.now - start
        #expect(presenter.next()?.contains("RELINQUISH_READER") == true, "it was asked")
        #expect(cat.output == "content\n")
        #expect(waited >= .milliseconds(900) && waited < .seconds(4), "\(waited)")
    }

    /// X7: a presenter whose process is stopped (SIGSTOP) costs the accesses that ask it the
    /// presenter timeout three times in a row; then it is asked nothing, as one that is gone,
    /// until it answers again (its late answers, once it runs). It cost every access the
    /// presenter timeout for as long as it was stopped.
    @Test func aStoppedPresenterCostsThreeDeadlinesThenNothingUntilItAnswersAgain() throws {
        let fx = try MountFixture(["--presenter-timeout", "0.5"])
        try fx.seed("doc.txt", "content\n")
        let presenter = try startPresenter(fx.path("doc.txt"))
        func timedCat() throws -> Duration {
            let start = ContinuousClock.now
            let cat = try run("/bin/cat", [fx.path("doc.txt")])
            #expect(cat.output == "content\n")
            return ContinuousClock.now - start
        }
        presenter.signal(SIGSTOP)
        for n in 1...3 {
            let waited = try timedCat()
            #expect(waited >= .milliseconds(400), "deadline \(n): \(waited)")
        }
        for _ in 1...3 {
            let waited = try timedCat()
            #expect(waited < .milliseconds(300), "asked nothing: \(waited)")
        }
        #expect(try fx.statistics()["presenter_timeouts"] == 3)
        presenter.signal(SIGCONT)
        // It reads the three requests it missed and answers them, late: then it is asked again.
        var asked = 0
        func readRequests() {
            while let line = presenter.next(timeout: .milliseconds(200)) {
                if line.contains("RELINQUISH_READER") { asked += 1 }
            }
        }
        readRequests()
        #expect(asked == 3, "the requests it missed: \(asked)")
        let deadline = ContinuousClock.now + .seconds(10)
        while asked == 3 && ContinuousClock.now < deadline {
            _ = try timedCat()
            readRequests()
        }
        #expect(asked > 3, "asked again once it answered")
        let before = asked
        let waited = try timedCat()
        #expect(waited < .milliseconds(400), "it answers in time: \(waited)")
        readRequests()
        #expect(asked == before + 1, "asked at each access again")
        #expect(try fx.statistics()["presenter_timeouts"] == 3)
    }

    @Test func mvYieldsMovedFromAndMovedToWithOneCookieAndASwiftPresenterFollows() throws {
        let fx = try MountFixture(inProcess: { _ in })
        try fx.seed("dir/old.txt")
        let log = EventLog()
        let swiftPresenter = LoggingPresenter("S", fx.path("dir/old.txt"), log: log)
        fx.domain!.addFilePresenter(swiftPresenter)
        let watcher = try startPresenter(fx.path("dir"), ["--mask", "MOVED_FROM,MOVED_TO"])
        #expect(try run("/bin/mv", [fx.path("dir/old.txt"), fx.path("dir/new.txt")]).status == 0)
        let from = watcher.next() ?? "", to = watcher.next() ?? ""
        #expect(from.contains("MOVED_FROM") && from.contains("\"name\": \"old.txt\""), "\(from)")
        #expect(to.contains("MOVED_TO") && to.contains("\"name\": \"new.txt\""), "\(to)")
        let cookie = { (line: String) in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["cookie"] as? Int
        }
        #expect(cookie(from) != nil && cookie(from) == cookie(to), "one cookie pairs them")
        #expect(eventually { swiftPresenter.presentedItemURL?.path == fx.path("dir/new.txt") })
    }

    @Test func killingAPresenterMidRequestReleasesTheWaiterAtOnce() throws {
        let fx = try MountFixture(["--presenter-timeout", "30"])
        try fx.seed("doc.txt", "content\n")
        let presenter = try startPresenter(fx.path("doc.txt"), ["--answer", "never"])
        let reader = try Child("/bin/cat", [fx.path("doc.txt")])
        #expect(presenter.next()?.contains("REQUEST") == true, "the request is out")
        let start = ContinuousClock.now
        presenter.signal(SIGKILL)
        #expect(reader.waitForExit(timeout: .seconds(5)) == 0)
        #expect(ContinuousClock.now - start < .seconds(5), "not the 30 s presenter timeout")
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == false }, "its watch is gone")
    }

    @Test func malformedMessagesGetAnErrorAndACloseWhileOthersAreServed() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let script = """
            import os, socket, sys, json, random
            path = sys.argv[1]
            address = os.getxattr(path, "user.coordfs.socket").decode()
            good = socket.socket(socket.AF_UNIX); good.connect(address); goodf = good.makefile("rwb", buffering=0)
            goodf.write(b'{"op":"hello","id":1,"version":1}\\n'); assert json.loads(goodf.readline())["ok"]
            random.seed(7)
            bad_lines = [b"garbage\\n", b"{}\\n", b"[1]\\n", b"\\xff\\xfe\\n",
                         b'{"op":"hello","id":1,"version":99}\\n', b"x" * 70000 + b"\\n", b'{"op":"answer","cookie":123}\\n']
            bad_lines += [bytes(random.getrandbits(8) for _ in range(random.randint(1, 200))) + b"\\n" for _ in range(40)]
            closed = 0
            for line in bad_lines:
                s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(address); f = s.makefile("rwb", buffering=0)
                if not line.startswith(b'{"op":"hello"') and not line.startswith(b'{"op":"answer"'):
                    f.write(b'{"op":"hello","id":1,"version":1}\\n'); f.readline()
                try: f.write(line)
                except BrokenPipeError: pass
                replies = []
                try:
                    while True:
                        reply = f.readline()
                        if not reply: break
                        replies.append(reply)
                except socket.timeout:
                    replies.append(b"(still open)")
                if replies and all(b'"error"' in r for r in replies): closed += 1
                s.close()
            # A request the server can tell apart, malformed (a watch with no path): refused alone.
            goodf.write(b'{"op":"watch","id":7}\\n')
            refused = json.loads(goodf.readline())
            goodf.write(json.dumps({"op": "watch", "id": 2, "path": path}).encode() + b"\\n")
            print("closed", closed, "of", len(bad_lines), "good", "wd" in json.loads(goodf.readline()),
                  refused.get("id"), refused.get("error"))
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.path("doc.txt")])
        #expect(
            result.output.trimmingCharacters(in: .whitespacesAndNewlines) == "closed 47 of 47 good True 7 EINVAL",
            "\(result.output) \(result.errors)")
        #expect(try run("/bin/cat", [fx.path("doc.txt")]).status == 0, "the mount still serves")
    }

    /// Lines that arrive together (a client's answers or requests sent in bulk) are each
    /// handled once, in order, up to a malformed one, which ends the connection.
    @Test func linesSentTogetherAreEachAnsweredInOrder() throws {
        let fx = try MountFixture()
        let script = """
            import json, os, socket, sys
            address = os.getxattr(sys.argv[1], "user.coordfs.socket").decode()
            s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(address)
            lines = [b'{"op":"hello","id":0,"version":1}']
            lines += [json.dumps({"op": "unwatch", "id": n, "wd": 100000 + n}).encode() for n in range(1, 3001)]
            s.sendall(b"\\n".join(lines) + b"\\ngarbage\\n")
            replies = s.makefile("rb").read().splitlines()
            ids = [json.loads(reply).get("id") for reply in replies]
            print(len(replies), ids[:3001] == list(range(3001)), b'"EPROTO"' in replies[-1])
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path])
        #expect(result.output == "3002 True True\n", "\(result.output) \(result.errors)")
    }

    @Test func anotherUidCannotPresentOrHoldWhatItCannotRead() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try fx.seed("private/secret.txt", "secret\n")
        try fx.seed("public.txt", "public\n")
        chmod(fx.backingPath("private"), 0o700)
        chmod(fx.backingPath("public.txt"), 0o644)
        let script = """
            import os, socket, sys, json
            address = os.getxattr(sys.argv[1], "user.coordfs.socket").decode()
            os.setgroups([]); os.setgid(65534); os.setuid(65534)
            s = socket.socket(socket.AF_UNIX); s.connect(address); f = s.makefile("rwb", buffering=0)
            def ask(message):
                f.write(json.dumps(message).encode() + b"\\n"); return json.loads(f.readline())
            ask({"op": "hello", "id": 1, "version": 1})
            root = sys.argv[1]
            print(ask({"op": "watch", "id": 2, "path": root + "/private/secret.txt"}).get("error"))
            print(ask({"op": "hold", "id": 3, "intents": [{"path": root + "/private/secret.txt", "access": "read"}]}).get("error"))
            print(ask({"op": "hold", "id": 4, "intents": [{"path": root + "/public.txt", "access": "write"}]}).get("error"))
            print(ask({"op": "watch", "id": 5, "path": root + "/public.txt"}).get("ok"))
            print(ask({"op": "hold", "id": 6, "intents": [{"path": root + "/public.txt", "access": "read"}]}).get("ok"))
            print(ask({"op": "watch", "id": 7, "path": "/etc/shadow"}).get("error"))
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path])
        #expect(
            result.output.split(separator: "\n") == ["EACCES", "EACCES", "EACCES", "True", "True", "EXDEV"],
            "\(result.output) \(result.errors)")
    }

    @Test func anotherUidLearnsFromStatusOnlyThePathsItCouldList() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try fx.seed("private/secret.txt", "secret\n")
        try fx.seed("public.txt", "public\n")
        chmod(fx.backingPath("private"), 0o700)
        let binary = Paths.binary.path
        let holding = try Child(
            binary,
            [
                "coordinate", "--read", fx.path("private/secret.txt"), "--read", fx.path("public.txt"),
                "--", "sh", "-c", "echo held; read line"
            ])
        #expect(holding.next() == "held")
        let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", binary, "status", fx.mountPoint.path]
        let theirs = try run("/usr/bin/setpriv", asNobody)
        #expect(
            theirs.status == 0 && theirs.output.contains(fx.path("public.txt"))
                && theirs.output.contains("(in a directory you cannot read)") && !theirs.output.contains("secret"),
            "\(theirs)")
        let mine = try run(binary, ["status", fx.mountPoint.path])
        #expect(mine.output.contains(fx.path("private/secret.txt")), "\(mine.output)")
        // The engine's whole state, on the root's attribute, is the owner's and root's alone.
        let state =
            "import os,sys\ntry: os.getxattr(sys.argv[1], 'user.coordfs.state'); print('read')\nexcept OSError as e: print(e.errno)"
        let refused = try run(
            "/usr/bin/setpriv",
            ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", state, fx.mountPoint.path])
        #expect(refused.output.trimmingCharacters(in: .whitespacesAndNewlines) == String(EACCES), "\(refused)")
        #expect(try fx.state().contains("secret.txt"))
        holding.send("go")
        #expect(holding.waitForExit() == 0)
    }

    @Test func holdsFromTheSocketCoordinateWithOpensThroughTheMount() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let script = """
            import os, socket, sys, json, subprocess, time
            path = sys.argv[1]
            s = socket.socket(socket.AF_UNIX); s.connect(os.getxattr(path, "user.coordfs.socket").decode()); f = s.makefile("rwb", buffering=0)
            def ask(message):
                f.write(json.dumps(message).encode() + b"\\n"); return json.loads(f.readline())
            ask({"op": "hello", "id": 1, "version": 1})
            hold = ask({"op": "hold", "id": 2, "intents": [{"path": path, "access": "write"}]})["hold"]
            other = subprocess.run([sys.executable, "-c", "import os,sys\\ntry: os.open(sys.argv[1], os.O_RDONLY|os.O_NONBLOCK); print('opened')\\nexcept BlockingIOError: print('EAGAIN')", path], capture_output=True, text=True)
            print("other", other.stdout.strip())
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK); os.close(fd); print("self opened")
            print("again", ask({"op": "hold", "id": 3, "intents": [{"path": path, "access": "read"}], "wait": False}).get("error"))
            ask({"op": "release", "id": 4, "hold": hold})
            other = subprocess.run([sys.executable, "-c", "import os,sys\\nos.open(sys.argv[1], os.O_RDONLY|os.O_NONBLOCK); print('opened')", path], capture_output=True, text=True)
            print("after", other.stdout.strip())
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.path("doc.txt")])
        // The process's own opens are its accessor's (docs/presenters.md); a second hold is another
        // coordinator, which waits for the first like anyone's.
        #expect(
            result.output.split(separator: "\n") == ["other EAGAIN", "self opened", "again EAGAIN", "after opened"],
            "\(result.output) \(result.errors)")
    }

    @Test func theSocketsModeFollowsAllowOther() throws {
        let shared = try MountFixture(["-o", "allow_other"])
        let privateMount = try MountFixture()
        func mode(_ fx: MountFixture) throws -> Int? {
            let socket = try run(
                "/usr/bin/python3",
                [
                    "-c", "import os,sys; print(os.getxattr(sys.argv[1], 'user.coordfs.socket').decode())",
                    fx.mountPoint.path
                ])
            return try FileManager.default.attributesOfItem(
                atPath: socket.output.trimmingCharacters(in: .whitespacesAndNewlines))[.posixPermissions] as? Int
        }
        #expect(try mode(shared) == 0o666)
        #expect(try mode(privateMount) == 0o600)
    }

    @Test func aClientKilledWhileHoldingReleasesItsHold() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let script = """
            import os, socket, sys, json
            path = sys.argv[1]
            s = socket.socket(socket.AF_UNIX); s.connect(os.getxattr(path, "user.coordfs.socket").decode()); f = s.makefile("rwb", buffering=0)
            f.write(b'{"op":"hello","id":1,"version":1}\\n'); f.readline()
            f.write(json.dumps({"op": "hold", "id": 2, "intents": [{"path": path, "access": "write"}]}).encode() + b"\\n")
            print(json.loads(f.readline()).get("hold"), flush=True)
            sys.stdin.readline()
            """
        let holder = try Child("/usr/bin/python3", ["-c", script, fx.path("doc.txt")])
        #expect(holder.next() == "1")
        let other = try Child.holder()
        #expect(other.ask("open rn \(fx.path("doc.txt"))") == "err EAGAIN")
        holder.signal(SIGKILL)
        #expect(holder.waitForExit() != nil)
        #expect(eventually { other.ask("open rn \(fx.path("doc.txt"))")?.hasPrefix("ok") == true }, "released at once")
    }

    @Test func aDirectoryWatchLearnsNothingOfDirectoriesItCannotRead() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try fx.seed("shared/visible.txt")
        try fx.seed("shared/closed/hidden.txt")
        chmod(fx.backingPath("shared"), 0o755)
        chmod(fx.backingPath("shared/closed"), 0o700)
        let script = """
            import os, socket, sys, json
            path = sys.argv[1]
            address = os.getxattr(path, "user.coordfs.socket").decode()
            os.setgroups([]); os.setgid(65534); os.setuid(65534)
            s = socket.socket(socket.AF_UNIX); s.connect(address); f = s.makefile("rwb", buffering=0)
            f.write(b'{"op":"hello","id":1,"version":1}\\n'); f.readline()
            f.write(json.dumps({"op": "watch", "id": 2, "path": path, "mask": ["SUBITEM_CHANGED"]}).encode() + b"\\n")
            print(json.loads(f.readline()).get("wd"), flush=True)
            while True:
                line = f.readline()
                if not line: break
                print(json.loads(line)["name"], flush=True)
            """
        let watcher = try Child("/usr/bin/python3", ["-c", script, fx.path("shared")])
        #expect(watcher.next() == "1")
        _ = try run(
            "/bin/sh",
            ["-c", "echo x >> \(fx.path("shared/closed/hidden.txt")); echo y >> \(fx.path("shared/visible.txt"))"])
        #expect(watcher.next() == "visible.txt", "the first it hears of is the visible one")
        #expect(watcher.next(timeout: .milliseconds(300)) == nil, "nothing about hidden.txt")
    }

    @Test func aWatchIsAskedOnlyWhatItsMaskTakesAndHoldsNobodyUp() throws {
        let fx = try MountFixture()
        try fx.seed("dir/a.txt")
        try fx.seed("dir/b.txt")
        let quiet = try startPresenter(fx.path("dir"), ["--mask", "SUBITEM_DELETED"])
        let before = try fx.statistics()["waited"] ?? 0
        #expect(try run("/bin/rm", [fx.path("dir/a.txt")]).status == 0)
        #expect(quiet.next()?.contains("SUBITEM_DELETED") == true)
        #expect(try fx.statistics()["waited"] == before, "granted at once: nobody to ask")
        // A watch that takes ACCOMMODATE_SUBITEM_DELETION is asked, and the unlink waits for it.
        let asked = try startPresenter(fx.path("dir"), ["--mask", "ACCOMMODATE_SUBITEM_DELETION"])
        #expect(try run("/bin/rm", [fx.path("dir/b.txt")]).status == 0)
        #expect(asked.next()?.contains("ACCOMMODATE_SUBITEM_DELETION") == true)
        #expect(try fx.statistics()["waited"] == before + 1)
        withExtendedLifetime(quiet) {}
    }

    @Test func aWatchEndsWithPresenterRemovedWhenItsItemIsDeleted() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let watcher = try startPresenter(fx.path("doc.txt"), ["--mask", "PRESENTER_REMOVED"])
        #expect(try run("/bin/rm", [fx.path("doc.txt")]).status == 0)
        #expect(watcher.next()?.contains("PRESENTER_REMOVED") == true)
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == false }, "the watch is gone")
    }
}
