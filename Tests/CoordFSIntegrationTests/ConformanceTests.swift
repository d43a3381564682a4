import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The same POSIX steps through the mount and on the backing filesystem must give the same
/// return values, errnos, modes and owners — as root, and as another user through
/// `allow_other` with the kernel's permission checks.
@Suite struct Conformance {
    let script = Paths.scripts.appendingPathComponent("posix_steps.py").path

    func compare(_ extra: [String], mountOptions: [String] = []) throws {
        let fx = try MountFixture(["-o", "allow_other"] + mountOptions)
        let native = fx.base.appendingPathComponent("native")
        try FileManager.default.createDirectory(at: native, withIntermediateDirectories: true)
        chmod(native.path, 0o755)
        let expected = try run("/usr/bin/python3", [script, native.appendingPathComponent("run").path] + extra)
        let actual = try run("/usr/bin/python3", [script, fx.path("run")] + extra)
        #expect(expected.status == 0, "\(expected.errors)")
        #expect(actual.status == 0, "\(actual.errors)")
        let want = expected.output.split(separator: "\n"), got = actual.output.split(separator: "\n")
        #expect(want.count > 20 && want.count == got.count, "\(want.count) steps natively, \(got.count) through the mount")
        for (native, mounted) in zip(want, got) where native != mounted {
            Issue.record("native:  \(native)\nmounted: \(mounted)")
        }
    }

    @Test func asRoot() throws { try compare([]) }

    @Test func asAnotherUserWithAllowOther() throws { try compare(["--as", "65534"]) }

    /// Writes then reach the mount, which must clear setuid as the kernel would.
    @Test func asAnotherUserWithoutKernelPassthrough() throws {
        try compare(["--as", "65534"], mountOptions: ["--no-kernel-passthrough"])
    }
}
