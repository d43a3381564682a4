import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// docs/contract.md is the coordination contract for unmodified programs on a mount, as one table:
/// what a program asks for, against what another party already has on the item. The
/// table is this suite's data: `Tests/Scripts/contract.py` reads it and runs every cell on a real
/// mount with real processes (another user's among them), judging each by the cell's words, so
/// the document and the mount cannot say different things. The mount's times are short here and
/// each verdict's bounds generous (contract.py): a cell "at once" takes under 0.35 s, one that
/// waits a time ends within 0.6 s after it, and the times lie far enough apart to be told apart.
@Suite struct CoordinationContract {
    /// Settle, lock, presenter and break times and wait timeout of the mount, in seconds; how long
    /// the saving presenter takes to save, and when a party lets go of what it has.
    static let settle = 0.5, lock = 1.0, save = 1.7, presenterTimeout = 2.4, breakTime = 3.1, release = 3.9,
        waitTimeout = 7.0

    static let document = Paths.repository.appendingPathComponent("docs/contract.md").path

    /// Every row, column and cell of the table is one the runner knows, "—" stands exactly where
    /// nothing can be held (a new name, a directory), and the presenter requests name a request
    /// for each row: an edit of the document that the runner cannot run fails here, without a mount.
    @Test func theTableIsOneTheRunnerCanRun() throws {
        let result = try run(
            "/usr/bin/python3", [Paths.scripts.appendingPathComponent("contract.py").path, "check", Self.document])
        let report = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any] ?? [:]
        #expect(
            result.status == 0 && (report["problems"] as? [String])?.isEmpty == true, "\(result.output)\(result.errors)"
        )
        #expect((report["run"] as? Int ?? 0) >= 250, "\(report)")
    }

    /// Every cell on a mount shared with another user (nobody): its errno, its time, whether a
    /// hold it went past was told and still holds, and what a presenter of the item was asked.
    /// Cells run side by side (about 40 s); one that fails is run once more alone, and its first
    /// try shows beside its verdict.
    @Test func everyCellHoldsOnAMount() throws {
        let fx = try MountFixture([
            "-o", "allow_other", "--settle-time", "\(Self.settle)", "--lock-time", "\(Self.lock)",
            "--presenter-timeout", "\(Self.presenterTimeout)", "--break-time", "\(Self.breakTime)",
            "--wait-timeout", "\(Self.waitTimeout)"
        ])
        // A copy another user can run (the repository may lie where it cannot).
        let script = fx.base.appendingPathComponent("contract.py").path
        try FileManager.default.copyItem(
            atPath: Paths.scripts.appendingPathComponent("contract.py").path, toPath: script)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: script)
        let times = [
            Self.settle, Self.lock, Self.save, Self.presenterTimeout, Self.breakTime, Self.release, Self.waitTimeout
        ]
        .map { "\($0)" }.joined(separator: ",")
        let result = try run(
            "/usr/bin/python3",
            [
                script, "run", Self.document, fx.mountPoint.path, "--coordfs", Paths.binary.path,
                "--times", times
            ])
        var cells = 0
        var summary: [String: Any] = [:]
        for line in result.output.split(separator: "\n") {
            guard let record = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                continue
            }
            guard let row = record["row label"] as? String, let column = record["column label"] as? String else {
                summary = record
                continue
            }
            cells += 1
            if record["ok"] as? Bool != true {
                let problems = (record["problems"] as? [String] ?? []).joined(separator: "; ")
                let first =
                    (record["first_try"] as? [String]).map { " (first try: \($0.joined(separator: "; ")))" } ?? ""
                Issue.record("'\(row)' beside '\(column)', expected '\(record["text"] ?? "?")': \(problems)\(first)")
            }
        }
        #expect(result.status == 0, "\(summary)\(summary.isEmpty ? result.output + result.errors : "")")
        #expect(cells >= 250 && summary["cells"] as? Int == cells, "\(cells) cells reported: \(summary)")
        #expect((summary["left held"] as? [Any])?.isEmpty == true, "held after every cell ended: \(summary)")
    }
}
