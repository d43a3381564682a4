import Foundation
import Testing

/// The kernel locks a directory before it sends a request that changes a name in it, and keeps
/// it while the request waits in the mount. A holder's atomic save (a temporary file beside the
/// item, renamed over it) needs that lock: an unmodified `rm` or `mv` waiting for the holder
/// must not keep it from finishing (docs/mount.md, the kernel's locks).
@Suite struct KernelLockTests {
    /// Runs `save_beside.py` with `arguments`; its report.
    func saveBeside(_ arguments: [String]) throws -> [String: Any] {
        let result = try run(
            "/usr/bin/python3", [Paths.scripts.appendingPathComponent("save_beside.py").path] + arguments)
        guard result.status == 0,
            let report = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any]
        else {
            Issue.record("save_beside.py: \(result)")
            return [:]
        }
        return report
    }

    @Test func anAtomicSaveOfAHeldItemFinishesWhileRmOfItWaitsBeside() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "old\n")
        let report = try saveBeside([fx.path("doc.txt"), "rm", fx.path("doc.txt")])
        // Not the wait timeout (60 s), nor the presenter timeout (5 s): about the 0.3 s the
        // holder waits before saving, and the moments it takes to see it stuck.
        #expect((report["saved_after"] as? Double ?? 99) < 3, "\(report)")
        #expect(report["status"] as? Int == 0 && report["errors"] as? String == "", "\(report)")
        // The rm went ahead when the save needed the directory: the save came after it.
        #expect(try String(contentsOfFile: fx.path("doc.txt"), encoding: .utf8) == "saved\n")
        #expect(try fx.statistics()["kernel_lock_breaks"] == 1)
    }

    @Test func anAtomicSaveOfAHeldItemFinishesWhileMvOverItWaitsBeside() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "old\n")
        try fx.seed("other.txt", "other\n")
        let report = try saveBeside([fx.path("doc.txt"), "mv", fx.path("other.txt"), fx.path("doc.txt")])
        #expect((report["saved_after"] as? Double ?? 99) < 3, "\(report)")
        #expect(report["status"] as? Int == 0 && report["errors"] as? String == "", "\(report)")
        #expect(try String(contentsOfFile: fx.path("doc.txt"), encoding: .utf8) == "saved\n")
        #expect(!FileManager.default.fileExists(atPath: fx.path("other.txt")))
    }

    @Test func rmWaitsForAHolderThatNeedsNoLockItHolds() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "old\n")
        let report = try saveBeside(["--no-save", "--hold-for", "1", fx.path("doc.txt"), "rm", fx.path("doc.txt")])
        // A holder that needs neither the directory nor the file's inode: rm waits for the
        // release, then deletes.
        #expect(report["running_while_held"] as? Bool == true, "\(report)")
        #expect(report["status"] as? Int == 0 && report["errors"] as? String == "", "\(report)")
        #expect(!FileManager.default.fileExists(atPath: fx.path("doc.txt")))
        #expect(try fx.statistics()["kernel_lock_breaks"] == 0)
    }
}
