import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Nothing lost under contention, faults and bad timing: fio verifying every block while others
/// churn beside it and a presenter answers, real programs compared with the backing directory,
/// and kills at the worst moments.
@Suite struct DataIntegrity {
    let scripts = Paths.scripts

    @Test func fioVerifiesEveryEngineWhileNeighboursChurnAndAPresenterAnswers() throws {
        let fx = try MountFixture()
        let work = fx.path("work")
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let presenter = try Child("/usr/bin/python3", [scripts.appendingPathComponent("presenter.py").path, work])
        #expect(presenter.next()?.contains("\"ok\": true") == true && presenter.next()?.contains("\"wd\"") == true)
        let churn = try Child("/usr/bin/python3", [scripts.appendingPathComponent("churn.py").path, work + "/churn"])
        var environment = ProcessInfo.processInfo.environment
        environment["FIO_DIR"] = work
        environment["FIO_SIZE"] = "8m"
        let fio = try run(
            "/usr/bin/fio", [Paths.fio.appendingPathComponent("contention.fio").path, "--output-format=json"],
            environment: environment)
        churn.closeInput()
        let churnResult = churn.next(timeout: .seconds(10)) ?? ""
        #expect(fio.status == 0, "\(fio.errors)")
        let report = try JSONSerialization.jsonObject(with: Data(fio.output.utf8)) as? [String: Any]
        let jobs = report?["jobs"] as? [[String: Any]] ?? []
        #expect(jobs.count == 7)
        for job in jobs {
            #expect(job["error"] as? Int == 0, "\(job["jobname"] ?? "?") failed")
            let written = (job["write"] as? [String: Any])?["io_bytes"] as? Int ?? 0
            #expect(written >= 8 << 20, "\(job["jobname"] ?? "?") wrote its \(written) bytes")
        }
        let counts = churnResult.split(separator: " ")
        #expect(counts.count == 4 && Int(counts[1]) ?? 0 > 0 && counts[3] == "0", "churn: \(churnResult)")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == false }, "no waiter left")
    }

    @Test func realProgramsThroughTheMountMatchTheBackingDirectory() throws {
        let fx = try MountFixture()
        let scratch = fx.base.appendingPathComponent("scratch")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let result = try run(
            "/bin/sh",
            [scripts.appendingPathComponent("programs.sh").path, fx.mountPoint.path, fx.backing.path, scratch.path],
            environment: ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": scratch.path])
        #expect(result.status == 0, "\(result.output)\n\(result.errors)")
        #expect(result.output.hasSuffix("all ok\n"), "\(result.output)")
        #expect(result.output.split(separator: "\n").filter { $0.hasPrefix("ok ") }.count == 6)
    }

    @Test func killingAProgramThatHoldsAFileReleasesItAndKeepsWhatItWrote() throws {
        let fx = try MountFixture()
        try fx.seed("doc.txt", "")
        let holder = try Child.holder()
        #expect(holder.ask("open w \(fx.path("doc.txt"))") == "ok 1")
        #expect(holder.ask("write 1 kept") == "ok")
        let reader = try Child("/bin/cat", [fx.path("doc.txt")])
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true })
        holder.signal(SIGKILL)
        #expect(reader.waitForExit() == 0, "the waiting reader proceeds")
        #expect(try String(contentsOfFile: fx.backingPath("doc.txt"), encoding: .utf8) == "kept\n")
        #expect(eventually { (try? fx.state())?.contains("HOLD") == false })
    }

    @Test func sigtermOfTheMountWhileWritingLosesNothingThatWasFsynced() throws {
        let fx = try MountFixture()
        let ledger = fx.base.appendingPathComponent("ledger").path
        let file = fx.path("data.bin")
        let writer = try Child(
            "/usr/bin/python3", [scripts.appendingPathComponent("fsync_writer.py").path, "write", file, ledger])
        #expect(writer.next() == "started")
        #expect(
            eventually {
                (try? String(contentsOfFile: ledger, encoding: .utf8)).flatMap { Int($0) }.map { $0 >= 256 } == true
            },
            "it wrote and fsynced at least 1 MiB")
        let daemon = try #require(
            pid_t(
                (try run(
                    "/usr/bin/python3",
                    [
                        "-c", "import os,sys; print(os.getxattr(sys.argv[1], 'user.coordfs.pid').decode())",
                        fx.mountPoint.path
                    ])).output.trimmingCharacters(in: .whitespacesAndNewlines)))
        fx.daemonWillEnd()
        kill(daemon, SIGTERM)
        #expect(
            writer.next(timeout: .seconds(10))?.hasPrefix("stopped") == true, "the writer gets an error, not a hang")
        #expect(writer.waitForExit() != nil)
        #expect(eventually { !MountFixture.isMounted(fx.mountPoint.path) })
        // Whatever was fsynced is in the backing file and verifies.
        let verified = try run(
            "/usr/bin/python3",
            [scripts.appendingPathComponent("fsync_writer.py").path, "verify", fx.backingPath("data.bin"), ledger])
        let words = verified.output.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: " ")
        #expect(words.count == 4 && words[1] == words[3] && Int(words[1]) ?? 0 >= 256, "\(verified.output)")
        // And a fresh mount of the same backing directory works.
        let again = try run(Paths.binary.path, ["mount", fx.backing.path, fx.mountPoint.path])
        #expect(again.status == 0, "\(again.errors)")
        defer { _ = try? run(Paths.binary.path, ["unmount", fx.mountPoint.path]) }
        #expect(FileManager.default.fileExists(atPath: file))
        let sizes = try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int
        #expect(sizes == (try FileManager.default.attributesOfItem(atPath: fx.backingPath("data.bin"))[.size] as? Int))
    }
}
