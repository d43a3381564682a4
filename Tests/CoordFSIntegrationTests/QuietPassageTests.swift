import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Requests held only for their call (mkdir, rename, setattr, unlink, rmdir; not a truncation)
/// pass the engine's quiet gate while it holds nothing, and are coordinated in full as soon as
/// it holds anything.
@Suite(.serialized) struct QuietPassage {
    /// Runs namespace changes in `directory` of the mount from one Python process, holding
    /// `held` open (for reading) meanwhile when given; returns the change of the mount's
    /// counters across them, read by the same process while it still holds the file.
    static func changes(_ fx: MountFixture, held: String?) throws -> [String: Int] {
        let script = """
            import json, os, sys
            root, held = sys.argv[1], sys.argv[2]
            def stats(): return json.loads(os.getxattr(root, "user.coordfs.stats"))
            fd = os.open(os.path.join(root, held), os.O_RDONLY) if held else None
            before = stats()
            d = os.path.join(root, "d")
            os.mkdir(d)                                  # MKDIR
            os.rename(d, d + "2")                        # RENAME
            os.chmod(d + "2", 0o700)                     # SETATTR
            os.rmdir(d + "2")                            # RMDIR
            os.truncate(os.path.join(root, "t.txt"), 1)  # SETATTR of the size: never passes
            after = stats()
            if fd is not None: os.close(fd)
            print(json.dumps({k: after[k] - before[k] for k in ("coordinated", "passed_quietly")}))
            """
        let result = try run("/usr/bin/python3", ["-c", script, fx.mountPoint.path, held ?? ""])
        #expect(result.status == 0, "\(result.errors)")
        return try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Int] ?? [:]
    }

    @Test func requestsForTheCallPassQuietlyOnlyWhileTheEngineHoldsNothing() throws {
        let fx = try MountFixture()
        try fx.seed("held.txt")
        try fx.seed("t.txt")
        let idle = try Self.changes(fx, held: nil)
        #expect(idle["passed_quietly"] == 4, "\(idle)")
        #expect(idle["coordinated"] == 5, "passing quietly still counts as coordinated: \(idle)")

        // An open file holds its item for the open's life: no request passes meanwhile, whatever
        // item it is about.
        let busy = try Self.changes(fx, held: "held.txt")
        #expect(busy["passed_quietly"] == 0, "\(busy)")
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

    /// The gate closes and opens many times a second (opens, `coordfs watch` coming and going)
    /// while namespace changes pass it or not: nothing is lost, nothing hangs, and the engine
    /// ends idle.
    @Test func churnThroughTheGateLosesNothing() throws {
        let fx = try MountFixture()
        let script = Paths.scripts.appendingPathComponent("gate_churn.py").path
        let result = try run("/usr/bin/python3", [script, Paths.binary.path, fx.mountPoint.path, "3"])
        #expect(result.status == 0, "\(result.errors)")
        let reports = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [[String: Any]] ?? []
        #expect(reports.count == 5, "\(result.output)")
        for report in reports {
            #expect((report["rounds"] as? Int ?? 0) > 0, "\(report)")
            #expect((report["wrong"] as? [Int])?.isEmpty == true, "read back what was written: \(report)")
        }
        let statistics = try fx.statistics()
        #expect((statistics["passed_quietly"] ?? 0) > 0, "\(statistics)")
        #expect((statistics["coordinated"] ?? 0) > (statistics["passed_quietly"] ?? 0), "\(statistics)")
        #expect(statistics["timed_out"] == 0 && statistics["deadlocks"] == 0, "\(statistics)")
        #expect(eventually { (try? fx.state())?.contains("(idle)") == true }, "the engine ends idle")
        #expect(try FileManager.default.contentsOfDirectory(atPath: fx.backing.path).filter { !$0.hasPrefix("o") }.isEmpty)
    }
}
