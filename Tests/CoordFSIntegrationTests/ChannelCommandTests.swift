import CoordinationClient
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `coordfs watch`, `status`, `coordinate` and `daemon`, as a user runs them.
@Suite struct ChannelCommands {
    let binary = Paths.binary.path

    /// A path in a live mount's backing directory is served by no mount: a hold or a watch
    /// there would reach the daemon, which sees nothing programs do through the mount.
    @Test func aPathInALiveMountsBackingDirectoryIsRefusedNamingTheMountsPath() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let behind = fx.backingPath("doc.txt")
        let through = fx.path("doc.txt")
        for command in [["watch", behind], ["coordinate", "--write", behind, "--", "true"], ["services", behind]] {
            let refused = try run(binary, command)
            #expect(
                refused.status != 0
                    && refused.errors.contains(
                        "is in the backing directory of the coordfs mount at '\(fx.mountPoint.path)'")
                    && refused.errors.contains("'\(through)'"), "coordfs \(command[0]): \(refused)")
        }
        #expect(
            try run(binary, ["coordinate", "--write", through, "--", "true"]).status == 0, "through the mount it holds")
        let status = try run(binary, ["status", fx.backing.path])
        #expect(
            status.status != 0 && status.errors.contains("is in the backing directory of the coordfs mount"),
            "\(status)")
    }

    /// `status` of a path that is not there, outside any mount, says so, rather than show a
    /// running daemon's empty table.
    @Test func statusOfAMissingPathSaysSoWhenADaemonRuns() throws {
        let (directory, socket) = try CrossProcessTests.daemonDirectory()
        defer { CrossProcessTests.stopDaemon(at: socket); try? FileManager.default.removeItem(atPath: directory) }
        let daemon = try Child(binary, ["daemon", "--socket", socket, "--versions-directory", directory + "/versions"])
        #expect(eventually { (try? ControlClient(socketPath: socket)) != nil }, "the daemon serves \(socket)")
        let missing = try run(
            binary, ["status", directory + "/nosuch"], environment: CrossProcessTests.environment(socket: socket))
        #expect(
            missing.status != 0 && missing.errors.contains("'\(directory)/nosuch': No such file or directory"),
            "\(missing)")
        let there = try run(binary, ["status", directory], environment: CrossProcessTests.environment(socket: socket))
        #expect(there.status == 0, "\(there)")
        _ = daemon
    }

    @Test func watchPrintsEventsAndAnswersAsTold() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "hello\n")
        // Names in either case, the errno's as the events'.
        let watcher = try Child(binary, ["watch", fx.path("doc.txt"), "--answer", "eacces", "--events", "save,CHANGED"])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        let cat = try run("/bin/cat", [fx.path("doc.txt")])
        #expect(cat.status != 0 && cat.errors.contains("Permission denied"))
        // docs/presenters.md: who made the access, after what inotifywait prints.
        let line = try #require(watcher.next())
        #expect(line.hasPrefix("\(fx.path("doc.txt")) SAVE,REQUEST cookie=1 pid="), "\(line)")
        #expect(line.hasSuffix(" command=cat via=mount"), "\(line)")
        let json = try Child(binary, ["watch", "--json", "--events", "CHANGED", fx.path("doc.txt")])
        #expect(eventually { (try? fx.state())?.components(separatedBy: "PRESENT").count == 3 })
        _ = try run("/bin/sh", ["-c", "echo more >> \(fx.path("doc.txt"))"])
        let changed = try #require(json.next())
        let record = try JSONSerialization.jsonObject(with: Data(changed.utf8)) as? [String: Any]
        #expect(record?["events"] as? [String] == ["CHANGED"] && record?["path"] as? String == fx.path("doc.txt"))
        #expect(record?["via"] as? String == "mount" && record?["command"] as? String == "sh", "\(changed)")
        #expect(record?["uid"] as? Int == Int(getuid()) && (record?["pid"] as? Int ?? 0) > 0, "\(changed)")
    }

    /// Events that reach a watcher together (a burst of creates: many lines to one read) are
    /// each printed once, whole. (Not necessarily in the order of the creates: a new file's
    /// appearance is told when its open is released, and the kernel sends RELEASE after close(2)
    /// has returned, so under load two files' releases may be served in either order. CI once
    /// saw f2371 before f2370.)
    @Test func watchPrintsEveryEventOfABurst() throws {
        let fx = try MountFixture()
        let watcher = try Child(binary, ["watch", fx.mountPoint.path, "--events", "SUBITEM_APPEARED"])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        let creates =
            "import os, sys\nfor n in range(3000): os.close(os.open(os.path.join(sys.argv[1], 'f%d' % n), os.O_CREAT | os.O_WRONLY))"
        #expect(try run("/usr/bin/python3", ["-c", creates, fx.mountPoint.path]).status == 0)
        var printed: [String] = []
        while printed.count < 3000, let line = withoutOrigin(watcher.next()) { printed.append(line) }
        let expected = (0..<3000).map { "\(fx.mountPoint.path) SUBITEM_APPEARED f\($0)" }
        #expect(
            printed.count == 3000 && Set(printed) == Set(expected),
            "\(printed.count) lines, \(Set(printed).count) different")
    }

    @Test func aWatchWhoseMountIsUnmountedSaysSoAndFails() throws {
        let fx = try MountFixture()
        let watcher = try Child("/bin/sh", ["-c", "exec '\(binary)' watch '\(fx.mountPoint.path)' 2>&1"])
        #expect(watcher.next() == "Watches established.")
        fx.daemonWillEnd()
        #expect(try run(binary, ["unmount", fx.mountPoint.path]).status == 0)
        #expect(
            watcher.next()
                == "Error: the coordfs mount at '\(fx.mountPoint.path)' closed the connection (it was unmounted, or its daemon ended)"
        )
        #expect(watcher.waitForExit() == 1)
    }

    @Test func watchRefusesWhatItCannotWatch() throws {
        // Kept to itself, a command finds no daemon to start outside a mount.
        let outside = try run(
            binary, ["watch", "/etc/hostname"],
            environment: ["PATH": "/usr/bin:/bin", "COORDFS_COORDINATION": "in-process"])
        #expect(outside.status != 0 && outside.errors.contains("not inside a coordfs mount"), "\(outside)")
        let fx = try MountFixture()
        let badAnswer = try run(binary, ["watch", fx.mountPoint.path, "--answer", "maybe"])
        #expect(
            badAnswer.status != 0
                && badAnswer.errors.contains("--answer must be ok, none or an errno name such as EACCES, not 'maybe'"),
            "\(badAnswer)")
        let badEvents = try run(binary, ["watch", fx.mountPoint.path, "--events", "SOMETIMES"])
        #expect(badEvents.status != 0 && badEvents.errors.contains("unknown event"))
    }

    @Test func statusShowsHoldersWaitersAndPresenters() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let holder = try Child.holder(), waiter = try Child.holder()
        #expect(holder.ask("open w \(fx.path("doc.txt"))") == "ok 1")
        waiter.send("open r \(fx.path("doc.txt"))")
        let watcher = try Child(binary, ["watch", fx.mountPoint.path])
        #expect(
            eventually { (try? fx.state())?.contains("WAIT") == true && (try? fx.state())?.contains("PRESENT") == true }
        )
        let status = try run(binary, ["status", "-v", fx.mountPoint.path])
        #expect(status.status == 0)
        let lines = status.output.split(separator: "\n").map(String.init)
        let queues = try fx.statistics()["ring_queues"] ?? 0
        #expect(
            lines.contains(
                queues > 0
                    ? "requests: FUSE over io_uring, \(queues) queues at nice -5"
                    : "requests: /dev/fuse, workers at nice -5"), "\(lines)")
        #expect(lines.contains { $0.hasPrefix("coordinated: ") && $0.contains("passed the quiet gates") }, "\(lines)")
        #expect(
            lines.contains {
                $0.hasPrefix("HOLD") && $0.contains(String(holder.pid)) && $0.contains("python3")
                    && $0.contains("write")
            })
        #expect(
            lines.contains {
                $0.hasPrefix("WAIT") && $0.contains(String(waiter.pid)) && $0.hasSuffix(" \(holder.pid)")
            }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("PRESENT") && $0.contains(String(watcher.pid)) })
        #expect(lines.contains { $0.hasPrefix("TYPE") && $0.hasSuffix("BLOCKER") }, "\(lines)")
        // Without -v, the table alone.
        let plain = try run(binary, ["status", fx.mountPoint.path]).output.split(separator: "\n").map(String.init)
        #expect(!plain.contains { $0.hasPrefix("coordinated: ") || $0.hasPrefix("requests: ") }, "\(plain)")
        // As lslocks: -p chooses a process, -o the columns, -n leaves out their names.
        let chosen = try run(binary, ["status", "-p", String(holder.pid), "-o", "PATH,MODE", "-n", fx.mountPoint.path])
        // The rows alone, no line naming the server: a pipeline (`| xargs`) takes every line.
        #expect(chosen.status == 0 && chosen.output == "\(fx.path("doc.txt"))  write(inPlace)\n", "\(chosen)")
        let waited = try run(
            binary, ["status", "-p", String(waiter.pid), "-o", "WAITED,BLOCKER", "-n", "-r", fx.mountPoint.path])
        let rows = waited.output.split(separator: "\n").map(String.init)
        #expect(rows.count == 1, "\(waited)")
        let row = rows.last ?? ""
        #expect(row.hasSuffix("s \(holder.pid)") && Double(row.prefix { $0 != "s" }) != nil, "\(waited)")
        let pids = try run(
            "/bin/sh", ["-c", "\"$1\" status -n -o PID \"$2\" | xargs", "sh", binary, fx.mountPoint.path])
        #expect(
            pids.output.split(separator: " ").allSatisfy {
                Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) != nil
            }
                && pids.output.contains(String(holder.pid)), "\(pids)")
        // A path inside the mount shows only what concerns it.
        try fx.seed("other.txt")
        let elsewhere = try run(binary, ["status", "-n", fx.path("other.txt")])
        #expect(!elsewhere.output.contains("doc.txt"), "\(elsewhere)")
        #expect(try run(binary, ["status", "-o", "SIZE", fx.mountPoint.path]).errors.contains("unknown column 'SIZE'"))
        let json = try run(binary, ["status", "--json", fx.path("doc.txt")])
        #expect(json.output.contains("\"holders\""))
        // As JSON, narrowed as the table is (docs/json.md), without the protocol's id and ok.
        let mine = try run(binary, ["status", "-J", "-p", String(holder.pid), fx.path("doc.txt")])
        let object = try JSONSerialization.jsonObject(with: Data(mine.output.utf8)) as? [String: Any]
        #expect(
            (object?["holders"] as? [Any])?.count == 1 && (object?["waiters"] as? [Any])?.isEmpty == true
                && (object?["presenters"] as? [Any])?.isEmpty == true, "\(mine)")
        #expect(
            object?["id"] == nil && object?["ok"] == nil && mine.output.contains("\"path\":\"\(fx.path("doc.txt"))\""),
            "\(mine)")
        let elsewhereJSON = try run(binary, ["status", "-J", fx.path("other.txt")])
        #expect(!elsewhereJSON.output.contains("doc.txt"), "\(elsewhereJSON)")
        #expect(holder.ask("close 1") == "ok")
        #expect(waiter.next() == "ok 1")
    }

    /// inotifywait's habits: -e with names in either case, --format with %w %f %e %c %T and
    /// --timefmt, -q, and -t SECONDS ending with status 2 when nothing came.
    @Test func watchTakesInotifywaitsOptions() throws {
        let fx = try MountFixture()
        try FileManager.default.createDirectory(atPath: fx.backingPath("dir"), withIntermediateDirectories: true)
        let dir = fx.path("dir")
        let watcher = try Child(
            binary,
            [
                "watch", "-q", "-e", "subitem_appeared,Changed", "--format", "%w|%f|%e|%T|100%%",
                "--timefmt", "%Y", dir
            ])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        #expect(try run("/bin/sh", ["-c", "echo x > \"$1\"/new.txt", "sh", dir]).status == 0)
        let year = Calendar.current.component(.year, from: Date())
        #expect(watcher.next() == "\(dir)/|new.txt|SUBITEM_APPEARED|\(year)|100%")
        let quiet = try run(binary, ["watch", "-q", "-t", "0.5", dir])
        #expect(quiet.status == 2 && quiet.errors.isEmpty && quiet.output.isEmpty, "\(quiet)")
        let both = try run(binary, ["watch", "--json", "--format", "%w", dir])
        #expect(both.status == 64, "\(both)")
    }

    /// More of inotifywait's: --csv (quoted where a field needs it), --include and --excludei
    /// (extended regular expressions on the full path), -m accepted.
    @Test func watchTakesInotifywaitsCsvAndFilters() throws {
        let fx = try MountFixture()
        try FileManager.default.createDirectory(atPath: fx.backingPath("dir"), withIntermediateDirectories: true)
        let dir = fx.path("dir")
        let csv = try Child(
            binary,
            ["watch", "-m", "-q", "--csv", "-e", "SUBITEM_APPEARED", "--include", "\\.txt$", "--excludei", "SKIP", dir])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        let make = #"for name in a.txt b.log skip.txt "c,d.txt"; do echo x > "$1/$name"; done"#
        #expect(try run("/bin/sh", ["-c", make, "sh", dir]).status == 0)
        var lines: [String] = []
        while let line = csv.next(timeout: .seconds(2)) { lines.append(line) }
        #expect(Set(lines) == ["\(dir)/,SUBITEM_APPEARED,a.txt", "\(dir)/,SUBITEM_APPEARED,\"c,d.txt\""], "\(lines)")
        let bad = try run(binary, ["watch", "--include", "(", dir])
        #expect(bad.status == 64 && bad.errors.contains("not a regular expression"), "\(bad)")
    }

    /// flock(1)'s habits: -s and -x for shared (read) and exclusive (write), -n, -w SECONDS, -E
    /// for a conflict's exit status, -c 'COMMAND'; a refusal names the item and its holder.
    @Test func coordinateTakesFlocksOptionsAndNamesTheHolder() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "text\n")
        let doc = fx.path("doc.txt")
        let holder = try Child.holder()
        #expect(holder.ask("open wt \(doc)") == "ok 1")
        let refused = try run(binary, ["coordinate", "-n", "-E", "75", "-x", doc, "--", "/bin/true"])
        #expect(refused.status == 75, "\(refused)")
        #expect(refused.errors.contains("'\(doc)' is held for write by pid \(holder.pid) (python3)"), "\(refused)")
        let timedOut = try run(binary, ["coordinate", "-w", "0.3", "-E", "76", "-s", doc, "-c", "true"])
        #expect(timedOut.status == 76, "\(timedOut)")
        let failing = try run(binary, ["coordinate", "-n", "-x", doc, "--", "/bin/true"])
        #expect(failing.status == 1, "without -E a conflict is 1, as flock's: \(failing)")
        #expect(holder.ask("close 1") == "ok")
        let ran = try run(binary, ["coordinate", "-s", doc, "-c", "echo ran; exit 3"])
        #expect(ran.status == 3 && ran.output == "ran\n", "\(ran)")
        let both = try run(binary, ["coordinate", "-s", doc, "-c", "true", "--", "/bin/true"])
        #expect(both.status == 64 && both.errors.contains("not both"), "\(both)")
    }

    /// flock's descriptor form: `exec 9>>FILE; coordfs coordinate -x 9` holds FILE for the shell
    /// and its children (their writes pass; another program's wait), until the shell closes 9.
    @Test func coordinateHoldsAShellsDescriptorForTheShellAndItsChildren() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "start\n")
        let doc = fx.path("doc.txt")
        let script = """
            exec 9>>"$2"
            "$1" coordinate -x 9 || exit 10
            /bin/sh -c 'echo "from a child" >> "$0"' "$2" || exit 11
            "$1" coordinate -n -E 75 -x "$2" -- true; echo "outsider $?"
            exec 9>&-
            for _ in $(seq 50); do "$1" coordinate -n -x "$2" -- true 2>/dev/null && { echo "free"; exit 0; }; sleep 0.1; done
            echo "still held"
            """
        let shell = try run("/bin/bash", ["-c", script, "bash", binary, doc])
        #expect(shell.status == 0 && shell.output == "outsider 75\nfree\n", "\(shell)")
        #expect(try String(contentsOfFile: fx.backingPath("doc.txt"), encoding: .utf8) == "start\nfrom a child\n")
        let unopened = try run("/bin/sh", ["-c", "exec \"$0\" coordinate -x 7", binary])
        #expect(unopened.status == 1 && unopened.errors.contains("descriptor 7 is not open"), "\(unopened)")
        // A hold for a process that is not the client's ancestor is refused.
        let stranger = try Child.holder()
        let ask = """
            import os, socket, sys, json
            s = socket.socket(socket.AF_UNIX); s.connect(os.getxattr(sys.argv[1], "user.coordfs.socket").decode())
            f = s.makefile("rwb", buffering=0)
            def ask(message):
                f.write(json.dumps(message).encode() + b"\\n"); return json.loads(f.readline())
            ask({"op": "hello", "id": 1, "version": 1})
            print(ask({"op": "hold", "id": 2, "intents": [{"path": sys.argv[2], "access": "write"}], "holder": int(sys.argv[3])}).get("error"))
            """
        let refused = try run("/usr/bin/python3", ["-c", ask, fx.mountPoint.path, doc, String(stranger.pid)])
        #expect(refused.output == "EPERM\n", "\(refused)")
    }

    /// A hold is no program's open, though the descriptor form takes it for the shell: it never
    /// settles, and the break time lets only another user's access past it. A reader waits
    /// until the shell closes the descriptor, long after the file went quiet (docs/mount.md,
    /// Files kept open).
    @Test("C1 a shell's descriptor hold keeps a reader out until the shell closes it, past the settle and break times")
    func aDescriptorHoldNeitherSettlesNorBreaks() throws {
        let fx = try MountFixture(["--break-time", "2"])
        try fx.seed("doc.txt", "text\n")
        let doc = fx.path("doc.txt")
        let shell = try Child(
            "/bin/bash",
            [
                "-c",
                """
                exec 9>>"$2"
                "$1" coordinate -x 9 || exit 10
                echo held
                read line
                exec 9>&-
                echo closed
                """, "bash", binary, doc
            ])
        #expect(shell.next() == "held")
        let reader = try Child("/bin/cat", [doc])
        // Three settle times (1 s), and past the break time: still waiting.
        #expect(reader.waitForExit(timeout: .seconds(3)) == nil, "the reader went past the hold")
        shell.send("close")
        #expect(shell.next() == "closed")
        #expect(reader.waitForExit() == 0)
        #expect(try fx.statistics()["lease_breaks"] == 0)
    }

    /// flock -o: the command does not act as the holder, so its own open of the held item waits
    /// for the hold like anyone else's (here until the wait timeout).
    @Test func coordinateWithCloseLeavesTheCommandOutOfTheHold() throws {
        let fx = try MountFixture(["--wait-timeout", "1"])
        try fx.seed("doc.txt", "start\n")
        let doc = fx.path("doc.txt")
        let inside = try run(binary, ["coordinate", "-x", doc, "-c", "echo mine >> '\(doc)'"])
        #expect(inside.status == 0, "\(inside)")
        let outside = try run(binary, ["coordinate", "-o", "-x", doc, "-c", "echo theirs >> '\(doc)'"])
        #expect(outside.status != 0 && outside.errors.contains("busy"), "\(outside)")
        #expect(try String(contentsOfFile: fx.backingPath("doc.txt"), encoding: .utf8) == "start\nmine\n")
    }

    /// A `cat` whose read waits for a presenter's answer has not begun: it is a waiter, waiting
    /// for the presenter's process, not a holder.
    @Test func anAccessAskingAPresenterIsShownWaitingForIt() throws {
        let fx = try MountFixture(["--presenter-timeout", "20"])
        try fx.seed("doc.txt", "text\n")
        let watcher = try Child(binary, ["watch", fx.path("doc.txt"), "--answer", "none"])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        let reader = try Child("/bin/cat", [fx.path("doc.txt")])
        #expect(eventually { watcher.next(timeout: .milliseconds(200))?.contains("REQUEST") == true })
        let status = try run(binary, ["status", fx.mountPoint.path])
        let lines = status.output.split(separator: "\n").map(String.init)
        #expect(
            lines.contains {
                $0.hasPrefix("WAIT") && $0.contains(String(reader.pid)) && $0.hasSuffix(" \(watcher.pid)")
            },
            "\(lines)")
        #expect(!lines.contains { $0.hasPrefix("HOLD") && $0.contains(String(reader.pid)) }, "\(lines)")
        let json = try run(binary, ["status", "--json", fx.mountPoint.path])
        #expect(json.output.contains("\"asking_presenters\":true"), "\(json.output)")
        watcher.signal(SIGKILL)  // its requests end with it: the read goes on
        #expect(reader.waitForExit() == 0)
    }

    /// Without a path: the current directory's mount, else every coordfs mount (and the daemon).
    @Test func statusWithoutAPathShowsTheMountHereElseEveryMount() throws {
        let first = try MountFixture(), second = try MountFixture()
        let here = try run("/bin/sh", ["-c", "cd '\(second.path("."))' && exec '\(binary)' status"])
        #expect(
            here.status == 0 && here.output.contains("\(second.mountPoint.path) — ")
                && !here.output.contains("\(first.mountPoint.path) — "), "\(here)")
        #expect(here.output.contains(" — backing \(second.backing.path)"), "\(here.output)")
        let everywhere = try run("/bin/sh", ["-c", "cd / && exec '\(binary)' status --json"])
        let roots = everywhere.output.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["root"] as? String
        }
        #expect(
            everywhere.status == 0 && roots.contains(first.mountPoint.path) && roots.contains(second.mountPoint.path),
            "\(everywhere)")
    }

    @Test func statusOfEveryServerNamesOneThatHasGoneAndShowsTheRest() throws {
        let fx = try MountFixture()
        // The socket a daemon killed with SIGKILL leaves: a socket file nobody listens on.
        let stale = fx.base.appendingPathComponent("daemon.sock").path
        let left = try run(
            "/usr/bin/python3", ["-c", "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", stale])
        try #require(left.status == 0, "\(left.errors)")
        var environment = ProcessInfo.processInfo.environment
        environment["COORDFS_SOCKET"] = stale
        let everywhere = try run("/bin/sh", ["-c", "cd / && exec '\(binary)' status"], environment: environment)
        #expect(everywhere.status == 0 && everywhere.output.contains("\(fx.mountPoint.path) — "), "\(everywhere)")
        #expect(
            everywhere.errors.contains("warning: cannot connect to \(stale): nobody serves it"), "\(everywhere.errors)")
        // Named alone, it is an error.
        let named = try run(binary, ["status", "--socket", stale])
        #expect(
            named.status != 0 && named.errors.contains("nobody serves it") && named.errors.contains("ECONNREFUSED"),
            "\(named)")
    }

    /// `status --mounts`: one line a mount, as findmnt lists mounts: where, the backing
    /// directory, the daemon, how many hold, wait, present and vend there, the files open, and
    /// the control socket; as JSON Lines with -J.
    @Test func statusMountsListsEachMountAsFindmntDoes() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let mnt = fx.mountPoint.path
        let holder = try Child.holder()
        #expect(holder.ask("open w \(fx.path("doc.txt"))") == "ok 1")
        let watcher = try Child(binary, ["watch", fx.path("doc.txt")])
        let provider = try Child(binary, ["vend", "org.example.mounts", mnt, "--", "cat"])
        defer { withExtendedLifetime((watcher, provider)) {} }
        #expect(eventually { (try? fx.state()).map { $0.contains("PRESENT") && $0.contains("SERVICE") } == true })
        let daemon = try #require(ControlClient.attribute("user.coordfs.pid", of: mnt))
        let socket = try #require(ControlClient.mountSocketPath(for: mnt))
        let table = try run(binary, ["status", "--mounts"])
        #expect(table.status == 0, "\(table)")
        let lines = table.output.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(
            lines.first == [
                "TARGET", "SOURCE", "PID", "HOLDERS", "WAITERS", "PRESENTERS", "SERVICES", "OPEN", "SOCKET"
            ], "\(table.output)")
        let row = lines.first { $0.first == mnt }
        #expect(row == [mnt, fx.backing.path, daemon, "1", "0", "1", "1", "1", socket], "\(table.output)")
        let raw = try run(binary, ["status", "--mounts", "-n", "-r"])
        #expect(
            raw.output.split(separator: "\n").contains { $0.hasPrefix(mnt + " ") } && !raw.output.contains("TARGET"),
            "\(raw)")
        let json = try run(binary, ["status", "--mounts", "-J"])
        let objects = json.output.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let mine = objects.first { $0["target"] as? String == mnt }
        #expect(
            mine?["holders"] as? Int == 1 && mine?["services"] as? Int == 1 && mine?["open_files"] as? Int == 1
                && mine?["pid"] as? Int == Int(daemon) && mine?["socket"] as? String == socket, "\(json)")
        let refused = try run(binary, ["status", "--mounts", mnt])
        #expect(refused.status == 64 && refused.errors.contains("--mounts lists every coordfs mount"), "\(refused)")
    }

    /// `coordfs coordinate -v`, as `flock --verbose`: whom it waits for once it has waited a
    /// second, then how long taking the hold took and what it runs.
    @Test func coordinateVerboseSaysWhomItWaitsFor() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let holder = try Child.holder()
        #expect(holder.ask("open w \(fx.path("doc.txt"))") == "ok 1")
        let waited = try run(binary, ["coordinate", "-v", "-w", "2", "-x", fx.path("doc.txt"), "--", "true"])
        #expect(waited.status == 1, "\(waited)")
        #expect(
            waited.errors.contains(
                "coordfs coordinate: waiting for pid \(holder.pid) (python3), which holds '\(fx.path("doc.txt"))' for write"
            ),
            "\(waited)")
        holder.signal(SIGKILL)
        #expect(holder.waitForExit() != nil)
        let taken = try run(binary, ["coordinate", "-v", "-x", fx.path("doc.txt"), "--", "true"])
        #expect(
            taken.status == 0 && taken.errors.contains("coordfs coordinate: taking the intents took ")
                && taken.errors.contains("coordfs coordinate: running true\n") && !taken.errors.contains("waiting for"),
            "\(taken)")
    }

    @Test func coordinateHoldsWhileTheCommandRunsAndPassesItsStatus() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "one\n")
        let doc = fx.path("doc.txt")
        // The command's own opens pass its hold; others' wait.
        let coordinate = try Child(
            binary,
            ["coordinate", "--write", doc, "--", "sh", "-c", "echo two >> \(doc); echo held; read line; cat \(doc)"])
        #expect(coordinate.next() == "held")
        let other = try Child.holder()
        #expect(other.ask("open rn \(doc)") == "err EAGAIN")
        let refused = try run(binary, ["coordinate", "-n", "--read", doc, "--", "true"])
        #expect(refused.status == 1 && refused.errors.contains("EAGAIN"))
        coordinate.send("go")
        #expect(coordinate.next() == "one")
        #expect(coordinate.next() == "two")
        #expect(coordinate.waitForExit() == 0)
        #expect(other.ask("open rn \(doc)")?.hasPrefix("ok") == true, "released when the command ended")
        #expect(try run(binary, ["coordinate", "--read", doc, "--", "sh", "-c", "exit 7"]).status == 7)
        #expect(
            try run(binary, ["coordinate", "--read", doc, "--", "sh", "-c", "kill -KILL $$"]).status == 128 + SIGKILL,
            "a command ended by a signal, as shells report it")
        let missing = try run(binary, ["coordinate", "--read", doc, "--", "no-such-command-here"])
        #expect(missing.status == 127 && missing.errors.contains("No such file"))
        let usage = try run(binary, ["coordinate", "--", "true"])
        #expect(usage.status != 0 && usage.errors.contains("--read or --write"))
    }

    /// As `flock FILE CMD` runs it: in the caller's process group, so a command that reads the
    /// terminal is not stopped for it (Foundation's Process gave it a group of its own).
    @Test func coordinateRunsTheCommandInTheForeground() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt")
        let shell = "\(binary) coordinate --write \(fx.path("doc.txt")) -- sh -c 'read answer; echo got $answer'"
        let terminal = try Child("/usr/bin/script", ["-qec", shell, "/dev/null"])
        terminal.send("typed")
        var lines: [String] = []
        while let line = terminal.next() {
            lines.append(line.trimmingCharacters(in: .whitespacesAndNewlines))
            if line.hasPrefix("got") { break }
        }
        #expect(lines.last == "got typed", "the command read its terminal: \(lines)")
        #expect(terminal.waitForExit() == 0)
    }

    /// SIGTERM and SIGHUP are the command's to act on, SIGINT and SIGQUIT the terminal's: the
    /// intents are held until the command has ended.
    @Test func coordinateHoldsUntilTheCommandEndsWhateverSignalsCome() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "one\n")
        let doc = fx.path("doc.txt")
        let script = "trap 'echo last >> \(doc); exit 3' TERM; echo $$; while :; do sleep 0.05; done"
        let coordinate = try Child(binary, ["coordinate", "--write", doc, "--", "sh", "-c", script])
        let command = try #require(coordinate.next().flatMap { Int32($0) })
        defer { kill(command, SIGKILL) }
        let other = try Child.holder()
        #expect(other.ask("open rn \(doc)") == "err EAGAIN")
        coordinate.signal(SIGINT)
        coordinate.signal(SIGTERM)
        #expect(
            coordinate.waitForExit() == 3 && coordinate.process.terminationReason == .exit,
            "SIGINT ignored, SIGTERM passed on, the command's status returned")
        #expect(try String(contentsOfFile: fx.backingPath("doc.txt"), encoding: .utf8) == "one\nlast\n")
        #expect(other.ask("open rn \(doc)")?.hasPrefix("ok") == true)
    }

    /// A spawner that leaves SIGTERM blocked and ignored (a test runner's thread, some service
    /// managers) does not make `coordfs watch` outlive it.
    @Test func watchEndsOnSIGTERMWhateverItsSpawnerLeftBlocked() throws {
        let fx = try MountFixture()
        let spawner = """
            import os, signal, sys
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.execv(sys.argv[1], sys.argv[1:])
            """
        let watcher = try Child("/usr/bin/python3", ["-c", spawner, binary, "watch", fx.mountPoint.path])
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        watcher.signal(SIGTERM)
        #expect(watcher.waitForExit() != nil && watcher.process.terminationReason == .uncaughtSignal)
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == false }, "its presenter is gone with it")
    }

    @Test func theDaemonCoordinatesOutsideAnyMount() throws {
        let dir = URL(fileURLWithPath: "/tmp/coordfs-daemon-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let socket = dir.appendingPathComponent("d.sock").path
        let file = dir.appendingPathComponent("shared.txt").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data("x\n".utf8)))
        // Started with a soft open-file limit of 1024, as many systems start programs.
        let daemon = try Child("/usr/bin/prlimit", ["--nofile=1024:", binary, "daemon", "--socket", socket])
        #expect(eventually { FileManager.default.fileExists(atPath: socket) })
        #expect(
            FileManager.default.fileExists(atPath: socket + ".lock"),
            "one daemon a socket: it holds the lock file beside it")
        // A second daemon on the same socket is refused: taking it over would split clients
        // between two engines that know nothing of each other.
        let second = try run(binary, ["daemon", "--socket", socket])
        #expect(
            second.status != 0 && second.errors.contains("another coordfs server listens there"), "\(second.errors)")
        let limits = try String(contentsOfFile: "/proc/\(daemon.pid)/limits", encoding: .utf8)
        let openFiles =
            limits.split(separator: "\n").first { $0.hasPrefix("Max open files") }?
            .split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).prefix(2).map(String.init) ?? []
        #expect(
            openFiles.count == 2 && openFiles[0] == openFiles[1],
            "the soft limit is raised to the hard one: \(openFiles)")
        let holding = try Child(
            binary, ["coordinate", "--socket", socket, "--write", file, "--", "sh", "-c", "echo held; read line"])
        #expect(holding.next() == "held")
        let refused = try run(binary, ["coordinate", "--socket", socket, "-n", "--write", file, "--", "true"])
        #expect(refused.status == 1 && refused.errors.contains("EAGAIN"))
        let status = try run(binary, ["status", "--socket", socket])
        #expect(status.output.contains("HOLD") && status.output.contains(file))
        holding.send("go")
        #expect(holding.waitForExit() == 0)
        #expect(try run(binary, ["coordinate", "--socket", socket, "-n", "--write", file, "--", "true"]).status == 0)
        daemon.signal(SIGTERM)
        #expect(daemon.waitForExit() != nil)
        #expect(!FileManager.default.fileExists(atPath: socket), "the socket is removed")
        #expect(!FileManager.default.fileExists(atPath: socket + ".lock"), "and its lock file (it was left behind)")
        // A daemon whose terminal closes (SIGHUP) ends as cleanly.
        let again = try Child(binary, ["daemon", "--socket", socket])
        #expect(eventually { FileManager.default.fileExists(atPath: socket) })
        again.signal(SIGHUP)
        #expect(again.waitForExit() == 0)
        #expect(!FileManager.default.fileExists(atPath: socket), "the socket is removed after SIGHUP too")
        #expect(!FileManager.default.fileExists(atPath: socket + ".lock"), "and its lock file")
    }

    @Test func aSocketDirectoryOthersMayWriteIsRefused() throws {
        // Without $XDG_RUNTIME_DIR a user's sockets go to /tmp/coordfs-UID, which anyone may
        // have made first: whoever can replace a socket file there takes the clients.
        let nobody: uid_t = 65534
        let directory = "/tmp/coordfs-\(nobody)"
        try? FileManager.default.removeItem(atPath: directory)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(mkdir(directory, 0o777) == 0 && chmod(directory, 0o777) == 0)  // root's, open to all
        let asNobody = [
            "--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups", "env", "-u", "XDG_RUNTIME_DIR", binary, "daemon"
        ]
        let refused = try run("/usr/bin/setpriv", asNobody)
        #expect(
            refused.status != 0
                && refused.errors.contains(
                    "the socket directory \(directory): it must be a directory owned by uid \(nobody) that nobody else may write"
                ),
            "\(refused.errors)")
        // Nor do the user's clients go to a daemon socket someone else put there.
        let foreign = try Child(binary, ["daemon", "--socket", directory + "/daemon.sock"])
        #expect(eventually { FileManager.default.fileExists(atPath: directory + "/daemon.sock") })
        let client = try run("/usr/bin/setpriv", Array(asNobody.dropLast()) + ["watch", "/tmp"])
        #expect(client.status != 0 && client.errors.contains("no coordfs daemon runs"), "\(client.errors)")
        foreign.signal(SIGTERM)
        #expect(foreign.waitForExit() == 0)
        // Made by the user itself, it serves.
        try FileManager.default.removeItem(atPath: directory)
        let daemon = try Child("/usr/bin/setpriv", asNobody)
        #expect(eventually { FileManager.default.fileExists(atPath: directory + "/daemon.sock") }, "served")
        var info = stat()
        #expect(lstat(directory, &info) == 0 && info.st_uid == nobody && info.st_mode & 0o022 == 0)
        daemon.signal(SIGTERM)
        #expect(daemon.waitForExit() == 0)
    }
}
