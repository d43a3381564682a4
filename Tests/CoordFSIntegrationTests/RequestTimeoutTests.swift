@testable import CoordFSMount
import Foundation
import Testing

/// The kernel's FUSE request timeout (Linux 6.15+): a request that outlives it aborts the whole
/// mount, so every coordinated wait ends before it.
@Suite(.serialized) struct RequestTimeoutTests {
    @Test func theTimeoutInForceIsTheKernels() throws {
        let directory = "/tmp/coordfs-sysctl-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func set(_ fallback: Int, _ maximum: Int) throws {
            try "\(fallback)\n".write(toFile: directory + "/default_request_timeout", atomically: true, encoding: .utf8)
            try "\(maximum)\n".write(toFile: directory + "/max_request_timeout", atomically: true, encoding: .utf8)
        }
        try set(0, 0)
        #expect(KernelRequestTimeout.inForce(directory: directory) == nil)
        try set(0, 30)
        #expect(KernelRequestTimeout.inForce(directory: directory)?.seconds == 30)
        try set(60, 30)
        #expect(KernelRequestTimeout.inForce(directory: directory)?.seconds == 30, "the maximum caps the default")
        try set(20, 0)
        #expect(KernelRequestTimeout.inForce(directory: directory)?.seconds == 20)
        try set(0, 5)
        #expect(
            KernelRequestTimeout.inForce(directory: directory)?.seconds == 15, "never below the kernel's check interval"
        )
        var configuration = MountConfiguration(backing: "/", mountPoint: "/")
        configuration.waitTimeout = nil
        let note = configuration.fitWaits(within: KernelRequestTimeout(seconds: 15))
        let budget = Duration.seconds(12)
        #expect(note?.contains("15 s") == true)
        #expect(configuration.waitTimeout! + configuration.presenterTimeout <= budget)
        #expect(configuration.breakTime! < configuration.waitTimeout!)
    }

    /// Acceptance: with max_request_timeout at 5 s (the kernel makes it 15), a wait that would be
    /// longer ends before it and the mount stays up. The sysctl is set back, whatever happens.
    @Test(
        .enabled(
            if: FileManager.default.isWritableFile(
                atPath: KernelRequestTimeout.sysctlDirectory + "/max_request_timeout"),
            "the kernel has no FUSE request timeout (Linux 6.15+), or it cannot be set here"))
    func aLongWaitEndsBeforeTheKernelAbortsTheMount() throws {
        let sysctl = KernelRequestTimeout.sysctlDirectory + "/max_request_timeout"
        let before = try String(contentsOfFile: sysctl, encoding: .utf8)
        try "5\n".write(toFile: sysctl, atomically: false, encoding: .utf8)
        defer { try? before.write(toFile: sysctl, atomically: false, encoding: .utf8) }
        let fx = try MountFixture(["--wait-timeout", "infinity"])
        try? before.write(toFile: sysctl, atomically: false, encoding: .utf8)  // the mount has read it
        try fx.seed("doc.txt", "text\n")
        let reader = try Child.holder()
        #expect(reader.ask("open r \(fx.path("doc.txt"))") == "ok 1")
        // A writer waits for the reader (no settle time for writers), forever by its options.
        let started = ContinuousClock.now
        let writer = try run("/bin/sh", ["-c", "echo new > \"$1\"", "sh", fx.path("doc.txt")])
        let waited = ContinuousClock.now - started
        #expect(waited < .seconds(15), "\(waited): past the kernel's timeout")
        #expect(writer.status == 0 || writer.errors.contains("busy"), "\(writer)")
        // Past the kernel's timeout and its check, the mount still answers.
        Thread.sleep(forTimeInterval: 16 - Double(waited.components.seconds))
        #expect(reader.ask("read 1")?.hasPrefix("data") == true)
        #expect(FileManager.default.fileExists(atPath: fx.path("doc.txt")))
    }
}
