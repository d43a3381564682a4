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

    func compare(_ extra: [String], mountOptions: [String] = ["-o", "allow_other"]) throws {
        let fx = try MountFixture(mountOptions)
        let native = fx.base.appendingPathComponent("native")
        try FileManager.default.createDirectory(at: native, withIntermediateDirectories: true)
        chmod(native.path, 0o755)
        let expected = try run("/usr/bin/python3", [script, native.appendingPathComponent("run").path] + extra)
        let actual = try run("/usr/bin/python3", [script, fx.path("run")] + extra)
        #expect(expected.status == 0, "\(expected.errors)")
        #expect(actual.status == 0, "\(actual.errors)")
        let want = expected.output.split(separator: "\n"), got = actual.output.split(separator: "\n")
        #expect(
            want.count > 20 && want.count == got.count, "\(want.count) steps natively, \(got.count) through the mount")
        for (native, mounted) in zip(want, got) where native != mounted {
            Issue.record("native:  \(native)\nmounted: \(mounted)")
        }
    }

    @Test func asRoot() throws { try compare([]) }

    /// Another user's write, fallocate and O_TRUNC open clear setuid and setgid as the backing
    /// filesystem does, and `stat` through the mount shows it at once, not after the kernel's
    /// attribute cache has run out.
    @Test(arguments: [[String](), ["--no-kernel-passthrough"]])
    func anotherUsersWritesClearPrivilegeBitsAndStatSeesItAtOnce(options: [String]) throws {
        let fx = try MountFixture(["-o", "allow_other"] + options)
        let script = Paths.scripts.appendingPathComponent("privilege_bits.py").path
        var outputs: [String] = []
        // Made by root through the mount itself (natively, in a directory beside it): the
        // kernel then knows the modes, as it would have them cached in use.
        for directory in [fx.base.appendingPathComponent("native").path, fx.path("bits")] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            chmod(directory, 0o777)
            for (name, mode) in [("suid", mode_t(0o4777)), ("direct", 0o4777), ("sgid", 0o2777), ("trunc", 0o4777)] {
                try Data("data".utf8).write(to: URL(fileURLWithPath: directory + "/" + name))
                chmod(directory + "/" + name, mode)
            }
            let result = try run(Nobody.program, Nobody.arguments(["/usr/bin/python3", script, directory]))
            #expect(result.status == 0, "\(result)")
            outputs.append(result.output)
        }
        #expect(
            outputs[0] == "write-open 0o777\nwrite-closed 0o777\ndirect 0o777\nfallocate 0o777\no_trunc 0o777\n",
            "natively: \(outputs[0])")
        #expect(outputs[1] == outputs[0], "through the mount: \(outputs[1])")
    }

    /// Another user, not in an item's group, setting its access ACL (setfacl) clears setgid
    /// as the kernel does natively (fstests generic/375); the mount kept it.
    @Test func anAccessACLSetByANonMemberOfTheGroupClearsSetgid() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        let script = """
            import os, struct, sys
            # Version 2; the owner, the group and others, rwx each (a minimal ACL: a mode).
            acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, 7, 0xFFFFFFFF) for tag in (1, 4, 32))
            for name in ("file", "dir"):
                path = os.path.join(sys.argv[1], name)
                os.setxattr(path, "system.posix_acl_access", acl)
                print(name, oct(os.stat(path).st_mode & 0o7777))
            """
        var outputs: [String] = []
        for directory in [fx.base.appendingPathComponent("native").path, fx.path("acl")] {
            try FileManager.default.createDirectory(atPath: directory + "/dir", withIntermediateDirectories: true)
            try Data("data".utf8).write(to: URL(fileURLWithPath: directory + "/file"))
            chmod(directory, 0o777)
            for name in ["file", "dir"] {
                // Nobody's, in root's group, which nobody is not in.
                chown(directory + "/" + name, 65534, 0)
                chmod(directory + "/" + name, 0o2755)
            }
            let result = try run(Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", script, directory]))
            #expect(result.status == 0, "\(result)")
            outputs.append(result.output)
        }
        #expect(outputs[0] == "file 0o777\ndir 0o777\n", "natively: \(outputs[0])")
        #expect(outputs[1] == outputs[0], "through the mount: \(outputs[1])")
    }

    @Test func asAnotherUserWithAllowOther() throws { try compare(["--as", "65534"]) }

    /// Writes then reach the mount, which must clear setuid as the kernel would.
    @Test func asAnotherUserWithoutKernelPassthrough() throws {
        try compare(["--as", "65534"], mountOptions: ["-o", "allow_other", "--no-kernel-passthrough"])
    }

    /// Without allow_other the kernel lets only root in and leaves permissions to the daemon
    /// (no default_permissions): the steps are root's all the same.
    @Test func asRootWithoutAllowOther() throws { try compare([], mountOptions: []) }

    /// The kernel checks permissions exactly when others may use the mount; without allow_other,
    /// others do not get in at all.
    @Test func othersGetInOnlyWithAllowOtherAndThenTheKernelChecks() throws {
        let mountOptions = { (fx: MountFixture) -> String in
            let line = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8))?
                .split(separator: "\n").first { $0.contains(" \(fx.mountPoint.path) ") }
            return line.map(String.init) ?? ""
        }
        let asNobody = """
            import os, sys
            os.setgroups([]); os.setgid(65534); os.setuid(65534)
            for path in sys.argv[1:]:
                try: open(path).close(); print("read")
                except OSError as e: print(e.errno)
            """
        let shared = try MountFixture(["-o", "allow_other"])
        try shared.seed("secret", "root only\n")
        chmod(shared.backingPath("secret"), 0o600)
        try shared.seed("public", "all\n")
        chmod(shared.backingPath("public"), 0o644)
        #expect(mountOptions(shared).contains("default_permissions"))
        let sharedRun = try run("/usr/bin/python3", ["-c", asNobody, shared.path("secret"), shared.path("public")])
        #expect(sharedRun.output == "\(EACCES)\nread\n", "\(sharedRun.output) \(sharedRun.errors)")

        let own = try MountFixture()
        try own.seed("public", "all\n")
        chmod(own.backingPath("public"), 0o644)
        #expect(!mountOptions(own).contains("default_permissions"))
        let ownRun = try run("/usr/bin/python3", ["-c", asNobody, own.path("public")])
        #expect(ownRun.output == "\(EACCES)\n", "\(ownRun.output) \(ownRun.errors)")
    }
}
