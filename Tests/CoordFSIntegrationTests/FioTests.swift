import Foundation
import TestSupport
import Testing

/// fio writes through the mount and verifies every block it wrote (crc32c): by kernel passthrough,
/// and served by the daemon itself (the writeback cache turns passthrough off).
@Suite struct Fio {
    @Test(arguments: [[], ["--writeback-cache"], ["--no-kernel-passthrough"]])
    func sequentialAndRandomWritesVerify(mountOptions: [String]) throws {
        let fio = ["/usr/bin/fio", "/usr/local/bin/fio"].first { FileManager.default.isExecutableFile(atPath: $0) }
        let path = try #require(fio, "fio is installed by `make setup`")
        let fx = try MountFixture(mountOptions)
        try FileManager.default.createDirectory(atPath: fx.path("fio"), withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        environment["FIO_DIR"] = fx.path("fio")
        let result = try run(
            path, [Paths.fio.appendingPathComponent("verify-basic.fio").path, "--output-format=json"],
            environment: environment)
        #expect(result.status == 0, "\(result.errors)")
        let report = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any]
        let jobs = report?["jobs"] as? [[String: Any]] ?? []
        #expect(jobs.count == 4)
        for job in jobs {
            #expect(job["error"] as? Int == 0, "\(job["jobname"] ?? "?")")
            let written = (job["write"] as? [String: Any])?["io_bytes"] as? Int ?? 0
            let read = (job["read"] as? [String: Any])?["io_bytes"] as? Int ?? 0
            #expect(written + read > 0, "\(job["jobname"] ?? "?") moved data")
        }
        // What fio wrote through the mount is what the backing directory holds.
        let mounted = try run(
            "/usr/bin/cmp", [fx.path("fio/sequential-1m.0.0"), fx.backingPath("fio/sequential-1m.0.0")])
        #expect(mounted.status == 0)
    }
}
