import Foundation
import Testing

/// Modes are the caller's (docs/sharing.md: as on the backing filesystem): the daemon's own umask is
/// never applied on top of the caller's, and a chown to the caller keeps the setuid and setgid
/// bits its own create would have kept. Compared step by step with the same calls made natively.
@Suite struct ModeTests {
    @Test(arguments: [mode_t(0o000), 0o002, 0o022, 0o077])
    func createsGiveTheBackingFilesystemsModesWhateverTheDaemonsUmask(_ daemonMask: mode_t) throws {
        let fx = try MountFixture(["-o", "allow_other"], backingMode: 0o777, umask: daemonMask)
        let native = fx.base.appendingPathComponent("native")
        try FileManager.default.createDirectory(
            at: native, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o777])
        try FileManager.default.createDirectory(
            atPath: fx.path("root"), withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o777])
        try FileManager.default.createDirectory(
            atPath: fx.path("nobody"), withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o777])
        try FileManager.default.createDirectory(
            at: native.appendingPathComponent("root"), withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o777])
        try FileManager.default.createDirectory(
            at: native.appendingPathComponent("nobody"), withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o777])
        // The script under each of the caller's umasks 000, 002, 022 and 077, as root and as
        // another user (whose items the daemon, as root, makes and then gives away).
        // (A copy the other user can read: the repository may lie where it cannot.)
        let script = fx.base.appendingPathComponent("modes.py").path
        try FileManager.default.copyItem(atPath: Paths.scripts.appendingPathComponent("modes.py").path, toPath: script)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: script)
        for (who, prefix) in [
            ("root", [String]()), ("nobody", ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        ] {
            let command = prefix + ["/usr/bin/python3", script, native.appendingPathComponent(who).path, fx.path(who)]
            let result = try run(command[0], Array(command.dropFirst()))
            let report = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any] ?? [:]
            #expect(report["compared"] as? Int == 36, "\(who): \(result)")
            #expect(
                (report["differences"] as? [Any])?.isEmpty == true,
                "daemon umask \(String(daemonMask, radix: 8)), \(who): \(report)")
        }
    }
}
