import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Another user's presenter, asked to relinquish root's file, may open the file as its own work
/// first (C21: its work goes ahead of the access that asked) and keep it open. Root's access
/// then waits for that work, as it waits for open files: at most the break time, counted from
/// its start, and then goes past it, revokes it and tells the presenter (docs/sharing.md). (It
/// waited for as long as the presenter kept the file open: the break time ended only a wait in
/// the engine's queue, and the wait timeout's timer stopped at the grant.)
@Suite struct PresentersOwnWorkAcrossUsers {
    /// Presents its path; at the first request, opens the path for reading through the mount
    /// (its own work), prints "working", answers, and keeps the file open for the seconds given;
    /// answers later requests at once. Prints "broken" for each BROKEN event.
    static let workingPresenter = """
        import json, os, socket, sys, threading
        path, keep = sys.argv[1], float(sys.argv[2])
        s = socket.socket(socket.AF_UNIX); s.connect(os.getxattr(path, "user.coordfs.socket").decode())
        f = s.makefile("rwb", buffering=0)
        def send(m): f.write(json.dumps(m).encode() + b"\\n")
        send({"op": "hello", "id": 1, "version": 1}); f.readline()
        send({"op": "watch", "id": 2, "path": path}); f.readline()
        print("watching", flush=True)
        opened = None
        for line in f:
            record = json.loads(line)
            events = record.get("events", [])
            if "BROKEN" in events:
                print("broken", flush=True)
            if "REQUEST" in events:
                if opened is None:
                    opened = os.open(path, os.O_RDONLY)
                    threading.Timer(keep, os.close, [opened]).start()
                    print("working", flush=True)
                send({"op": "answer", "cookie": record["cookie"], "errno": 0})
        """

    /// Rewrites a file with `O_TRUNC` (as `> f` does) with the text given.
    static let rewrite =
        "import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC); os.write(fd, sys.argv[2].encode()); os.close(fd)"

    @Test func anotherUsersPresenterWorkingOnRootsFileKeepsRootsOpenTheBreakTimeAtMost() throws {
        let fx = try MountFixture([
            "-o", "allow_other", "--break-time", "2", "--presenter-timeout", "1", "--wait-timeout", "infinity"
        ])
        try fx.seed("root.txt", "root's\n")
        chmod(fx.backingPath("root.txt"), 0o644)
        // Keeps its work open 8 s: past the break time and its margin, and the test still ends.
        let presenter = try Child(
            Nobody.program,
            Nobody.arguments([
                "/usr/bin/python3", "-c", Self.workingPresenter,
                fx.path("root.txt"), "8"
            ]))
        #expect(presenter.next() == "watching")
        var started = ContinuousClock.now
        let first = try run("/usr/bin/python3", ["-c", Self.rewrite, fx.path("root.txt"), "one\n"])
        let took = ContinuousClock.now - started
        #expect(first.status == 0, "\(first)")
        #expect(presenter.next() == "working", "the presenter opened root's file as its own work")
        #expect(
            took >= .milliseconds(1500) && took < .seconds(4),
            "root's open waited for that work the break time: \(took)")
        #expect(presenter.next(timeout: .seconds(3)) == "broken", "the presenter is told")
        // Revoked: root's next open waits for that work no more (the presenter answers at once).
        started = ContinuousClock.now
        let second = try run("/usr/bin/python3", ["-c", Self.rewrite, fx.path("root.txt"), "two\n"])
        let again = ContinuousClock.now - started
        #expect(second.status == 0 && again < .seconds(1), "the revoked work held root up again: \(again), \(second)")
        #expect(try String(contentsOfFile: fx.backingPath("root.txt"), encoding: .utf8) == "two\n")
        let statistics = try fx.statistics()
        #expect(statistics["lease_breaks"] == 1 && statistics["holds_revoked"] == 1, "\(statistics)")
    }
}
