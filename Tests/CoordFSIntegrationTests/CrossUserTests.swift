@testable import CoordFSCommands
import CoordFSMount
import FileCoordination
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A mount shared by several users (docs/sharing.md): a presenter's refusal is a veto only for its own
/// user's accesses, and root's for anyone's.
@Suite struct CrossUserVetoes {
    let binary = Paths.binary.path

    @Test func anotherUsersVetoIsIgnoredAndRootsHolds() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try fx.seed("root.txt", "root's\n")
        try fx.seed("other.txt", "other\n")
        chmod(fx.backingPath("root.txt"), 0o644)
        chmod(fx.backingPath("other.txt"), 0o644)
        // Another user, who may read root's file, refuses every request about it.
        let theirs = try Child(
            Nobody.program, Nobody.arguments([binary, "watch", fx.path("root.txt"), "--answer", "EACCES"]))
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        // Root's accesses go on: read, append, rename, delete.
        let cat = try run("/bin/cat", [fx.path("root.txt")])
        #expect(cat.status == 0 && cat.output == "root's\n", "\(cat)")
        #expect(try run("/bin/sh", ["-c", "echo more >> \"$1\"", "sh", fx.path("root.txt")]).status == 0)
        #expect(try run("/bin/mv", [fx.path("root.txt"), fx.path("moved.txt")]).status == 0)
        #expect(try run("/bin/rm", [fx.path("moved.txt")]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: fx.backingPath("moved.txt")))
        // The refusals were asked (and ignored), not left unasked.
        #expect(theirs.next()?.contains("REQUEST") == true)
        // Root's refusal is a veto for anyone: another user's read of a file root presents fails.
        let roots = try Child(binary, ["watch", fx.path("other.txt"), "--answer", "EACCES"])
        #expect(eventually { (try? fx.state())?.contains("other.txt") == true })
        let theirCat = try run(Nobody.program, Nobody.arguments(["/bin/cat", fx.path("other.txt")]))
        #expect(theirCat.status != 0 && theirCat.errors.contains("Permission denied"), "\(theirCat)")
        withExtendedLifetime(roots) {}
    }

    /// `--vetoes anyone`: the mount's owner lets any user's refusal fail any access.
    @Test func theOwnerMayLetAnyonesRefusalVeto() throws {
        let fx = try MountFixture(["-o", "allow_other", "--vetoes", "anyone"])
        try fx.seed("root.txt", "root's\n")
        chmod(fx.backingPath("root.txt"), 0o644)
        let theirs = try Child(
            Nobody.program, Nobody.arguments([binary, "watch", fx.path("root.txt"), "--answer", "EACCES"]))
        #expect(eventually { (try? fx.state())?.contains("PRESENT") == true })
        let cat = try run("/bin/cat", [fx.path("root.txt")])
        #expect(cat.status != 0 && cat.errors.contains("Permission denied"), "\(cat)")
        #expect(FileManager.default.fileExists(atPath: fx.backingPath("root.txt")))
        withExtendedLifetime(theirs) {}
    }
}

/// Each user's share of the files open through a shared mount (docs/sharing.md): one user holding
/// files open until refused leaves every other user's opens and creates working.
@Suite struct CrossUserOpenFiles {

    @Test func aUserOutOfOpenFilesLeavesRootsCreatesWorking() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        let theirs = fx.backingPath("theirs")
        try FileManager.default.createDirectory(atPath: theirs, withIntermediateDirectories: true)
        chmod(theirs, 0o777)
        let before = try fx.statistics()
        let share = try #require(before["open_files_per_user"])
        let limit = try #require(before["open_file_limit"]), budget = try #require(before["descriptor_budget"])
        #expect(share == DescriptorLimit.openFilesPerUser(under: limit, inodeBudget: budget), "\(before)")
        let script = Paths.scripts.appendingPathComponent("open_until_refused.py").path
        let nobody = try Child(Nobody.program, Nobody.arguments(["/usr/bin/python3", script, fx.path("theirs")]))
        let report = try #require(nobody.next(timeout: .seconds(120)))
        let opened = try JSONSerialization.jsonObject(with: Data(report.utf8)) as? [String: Int] ?? [:]
        #expect(opened["opened"] == share && opened["errno"] == Int(EMFILE), "\(report)")
        // Root, while they are refused: 200 creates held open at once, and a listing.
        var held: [Int32] = []
        for index in 0..<200 {
            let fd = open(fx.path("root\(index)"), O_CREAT | O_RDWR | O_CLOEXEC, 0o644)
            #expect(fd >= 0, "root's create \(index): \(String(cString: strerror(errno)))")
            if fd >= 0 { held.append(fd) }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: fx.path("")).count >= 201)
        for fd in held { close(fd) }
        // Their files closed, their share is theirs again.
        nobody.send("")
        let after = try #require(nobody.next(timeout: .seconds(60)))
        #expect(after.contains("\"after\": 0"), "\(after)")
        #expect(nobody.waitForExit() == 0)
        #expect(eventually { (try? fx.statistics())?["open_files"] == before["open_files"] })
    }

    /// The mount's owner and root are not held to a user's share, but they leave the other
    /// users theirs: root holding files open until refused stops at its side's limit, with the
    /// daemon's descriptors not run out, and another user still opens its whole share. Before,
    /// root's opens under a limit of 2000 took the daemon's last descriptors after about 900
    /// (each an open file and a cached inode's descriptor), and from then every open and create
    /// on the mount failed with EMFILE, everyone's. The items looked up first keep their
    /// descriptors for life until open files press the table: they are given file handles then.
    @Test func rootsOpenFilesLeaveEveryoneElseTheirShare() throws {
        let fx = try MountFixture(["-o", "allow_other"], fileLimit: 2000)
        for folder in ["mine", "theirs"] {
            try FileManager.default.createDirectory(atPath: fx.backingPath(folder), withIntermediateDirectories: true)
            chmod(fx.backingPath(folder), 0o777)
        }
        for index in 0..<1500 {
            #expect(FileManager.default.createFile(atPath: fx.backingPath("mine/f\(index)"), contents: nil))
        }
        for index in 0..<1500 { #expect(access(fx.path("mine/f\(index)"), F_OK) == 0, "lookup \(index)") }
        let fields = try fx.statistics()
        let side = try #require(fields["open_files_each_side"]), share = try #require(fields["open_files_per_user"])
        let limit = try #require(fields["open_file_limit"]), budget = try #require(fields["descriptor_budget"])
        #expect(limit == 2000 && side > (limit - budget), "\(fields)")
        let script = Paths.scripts.appendingPathComponent("open_until_refused.py").path
        let root = try Child("/usr/bin/python3", [script, fx.path("mine")])
        let mine = try #require(root.next(timeout: .seconds(120)))
        #expect(mine == #"{"opened": \#(side), "errno": 24}"#, "\(mine)")
        let during = try fx.statistics()
        #expect((during["inode_descriptors"] ?? .max) <= (during["inode_budget"] ?? 0), "\(during)")
        let nobody = try Child(Nobody.program, Nobody.arguments(["/usr/bin/python3", script, fx.path("theirs")]))
        let theirs = try #require(nobody.next(timeout: .seconds(120)))
        #expect(theirs == #"{"opened": \#(share), "errno": 24}"#, "\(theirs)")
        for child in [root, nobody] {
            child.send("")
            let after = try #require(child.next(timeout: .seconds(60)))
            #expect(after.contains("\"after\": 0"), "\(after)")
            #expect(child.waitForExit() == 0)
        }
    }

    /// A share set by the mount's owner: the user's opendir, open and create are refused past it
    /// (EMFILE), nothing is left behind by the refused create, and the mount's owner is not counted.
    @Test func aShareSetByTheOwnerIsKept() throws {
        let fx = try MountFixture(["-o", "allow_other", "--open-files-per-user", "20"])
        let theirs = fx.backingPath("theirs")
        try FileManager.default.createDirectory(atPath: theirs, withIntermediateDirectories: true)
        chmod(theirs, 0o777)
        let script = Paths.scripts.appendingPathComponent("open_until_refused.py").path
        let nobody = try Child(Nobody.program, Nobody.arguments(["/usr/bin/python3", script, fx.path("theirs")]))
        let report = try #require(nobody.next(timeout: .seconds(60)))
        #expect(report == #"{"opened": 20, "errno": 24}"#, "\(report)")
        #expect(
            !FileManager.default.fileExists(atPath: fx.backingPath("theirs/f20")), "the refused create left its file")
        let listing = try run(Nobody.program, Nobody.arguments(["/bin/ls", fx.path("")]))
        #expect(
            listing.status != 0 && listing.errors.contains("Too many open files"),
            "the share is the user's, over all its processes: \(listing)")
        // Root opens far more than the share.
        let roots = (0..<100).map { open(fx.path("r\($0)"), O_CREAT | O_RDWR | O_CLOEXEC, 0o644) }
        #expect(roots.allSatisfy { $0 >= 0 })
        for fd in roots where fd >= 0 { close(fd) }
        nobody.send("")
        #expect(nobody.next(timeout: .seconds(60))?.contains("\"after\": 0") == true)
    }
}

/// Another user's hold delays an access at most the break time; a Swift coordinator
/// whose hold was broken that way hears it as an error of its coordinate call, and its
/// process's report handler hears it too.
@Suite struct CrossUserBreaks {
    @Test func aSwiftCoordinatorHearsThatItsCoordinationWasBroken() throws {
        let fx = try MountFixture(
            ["-o", "allow_other", "--break-time", "1", "--wait-timeout", "infinity"], backingMode: 0o755)
        try fx.seed("shared.txt", "before\n")
        chmod(fx.backingPath("shared.txt"), 0o666)
        let url = URL(fileURLWithPath: fx.path("shared.txt"))
        var theirs: (status: Int32, output: String, errors: String)?
        do {
            try FileCoordinator().coordinate(writingItemAt: url) { url in
                // Another user writes while this accessor runs: it waits the break time, then
                // goes ahead.
                theirs = try run(
                    Nobody.program, Nobody.arguments(["/bin/sh", "-c", "echo theirs > \"$1\"", "sh", url.path]))
            }
            Issue.record("the coordinate call returned as if its coordination had held")
        } catch FileCoordinationError.coordinationBroken(let item) {
            #expect(item.hasSuffix("/shared.txt"), "\(item)")
        }
        #expect(theirs?.status == 0, "\(String(describing: theirs))")
        #expect(try String(contentsOfFile: fx.backingPath("shared.txt"), encoding: .utf8) == "theirs\n")
        // A coordination that holds throws nothing.
        try FileCoordinator().coordinate(writingItemAt: url) { url in try Data("mine\n".utf8).write(to: url) }
    }

    /// `coordfs coordinate` whose hold another user's write went past: the command succeeded,
    /// but its turn was not its alone, so it exits 75 and says why; a command that failed keeps
    /// its own status; a turn that held exits 0 and says nothing. (It exited 0 either way.)
    @Test func coordinateSaysItsTurnWasBrokenInItsExitStatus() throws {
        let fx = try MountFixture(
            ["-o", "allow_other", "--break-time", "1", "--wait-timeout", "infinity"], backingMode: 0o755)
        try fx.seed("shared.txt", "before\n")
        chmod(fx.backingPath("shared.txt"), 0o666)
        let path = fx.path("shared.txt")
        // -o: the command's children are not the holder, so nobody's write is another user's.
        let theirWrite = [Nobody.program] + Nobody.arguments(["/bin/sh", "-c", "echo theirs > \"$1\"", "sh", path])
        let broken = try run(Paths.binary.path, ["coordinate", "-o", "-x", path, "--"] + theirWrite)
        #expect(broken.status == 75, "\(broken)")
        #expect(broken.errors.contains("went ahead past the hold"), "\(broken.errors)")
        #expect(try String(contentsOfFile: fx.backingPath("shared.txt"), encoding: .utf8) == "theirs\n")
        let failed = try run(
            Paths.binary.path,
            ["coordinate", "-o", "-x", path, "--", "/bin/sh", "-c", "\"$@\"; exit 3", "sh"] + theirWrite)
        #expect(failed.status == 3, "the command's own failure is its status: \(failed)")
        #expect(failed.errors.contains("went ahead past the hold"), "\(failed.errors)")
        let whole = try run(Paths.binary.path, ["coordinate", "-x", path, "--", "/bin/true"])
        #expect(whole.status == 0 && whole.errors.isEmpty, "\(whole)")
    }
}

/// Numbers from another user, on the socket and on the command line, are refused with
/// a clear error, and the mount goes on serving everyone. (`{"timeout":1e16}` once overflowed
/// converting to Int64 and took the mount down for every user.)
@Suite struct CrossUserNumbers {

    @Test func timeoutsPastAnyBoundAreRefusedAndTheMountLives() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try fx.seed("doc.txt", "text\n")
        chmod(fx.backingPath("doc.txt"), 0o644)
        let script = """
            import json, os, socket, sys
            path = sys.argv[1]
            for timeout in ["1e16", "-3", "NaN", "Infinity", "1e400"]:
                s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(os.getxattr(path, "user.coordfs.socket").decode())
                f = s.makefile("rwb", buffering=0)
                f.write(b'{"op":"hello","id":1,"version":1}\\n'); f.readline()
                line = '{"op":"hold","id":2,"intents":[{"path":"%s","access":"read"}],"timeout":%s}\\n' % (path, timeout)
                f.write(line.encode())
                reply = json.loads(f.readline() or b"{}")
                print(timeout, reply.get("error"), timeout not in ("1e16", "-3") or "timeout" in reply.get("message", ""))
                s.close()
            """
        let result = try run(Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", script, fx.path("doc.txt")]))
        #expect(
            result.output
                == "1e16 EINVAL True\n-3 EINVAL True\nNaN EPROTO True\nInfinity EPROTO True\n1e400 EPROTO True\n",
            "\(result)")
        let command = try run(
            Nobody.program,
            Nobody.arguments([
                Paths.binary.path, "coordinate", "--read", fx.path("doc.txt"),
                "--timeout", "1e16", "--", "/bin/true"
            ]))
        #expect(command.status != 0 && command.errors.contains("--timeout"), "\(command)")
        // Everyone is still served.
        #expect(try run("/bin/cat", [fx.path("doc.txt")]).output == "text\n")
        #expect(try run(Nobody.program, Nobody.arguments(["/bin/cat", fx.path("doc.txt")])).output == "text\n")
    }
}

/// Permission problems are said as such, not as something else ("does not exist", "not inside
/// a coordfs mount").
@Suite struct CrossUserPermissionMessages {

    @Test func aMountPointAnotherUserCannotReachIsSaidToBeUnreachable() throws {
        let dir = "/tmp/coordfs-perm-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir + "/closed/mnt", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/backing", withIntermediateDirectories: true)
        chmod(dir + "/closed", 0o700)
        chmod(dir + "/backing", 0o777)
        let refused = try run(
            Nobody.program, Nobody.arguments([Paths.binary.path, "mount", dir + "/backing", dir + "/closed/mnt"]))
        #expect(refused.status != 0 && refused.errors.contains("cannot be reached: Permission denied"), "\(refused)")
        #expect(!refused.errors.contains("does not exist"), "\(refused)")
    }

    @Test func watchingADirectoryOneCannotReadSaysPermissionDenied() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try FileManager.default.createDirectory(atPath: fx.backingPath("secret"), withIntermediateDirectories: true)
        chmod(fx.backingPath("secret"), 0o700)
        let watched = try run(Nobody.program, Nobody.arguments([Paths.binary.path, "watch", fx.path("secret")]))
        #expect(watched.status != 0 && watched.errors.contains("permission denied"), "\(watched)")
        #expect(!watched.errors.contains("not inside a coordfs mount"), "\(watched)")
    }

    /// A file only its owner may read, on a mount shared with allow_other: refused for its mode,
    /// not blamed on a mount option the mount has.
    @Test func aFileOnlyItsOwnerMayReadIsNotBlamedOnAllowOther() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try fx.seed("secret.txt")
        chmod(fx.backingPath("secret.txt"), 0o600)
        let watched = try run(Nobody.program, Nobody.arguments([Paths.binary.path, "watch", fx.path("secret.txt")]))
        #expect(watched.status != 0 && watched.errors.contains("permission denied"), "\(watched)")
        // Before: "… a FUSE mount made without -o allow_other lets in nobody but the user who mounted it".
        #expect(!watched.errors.contains("allow_other"), "\(watched)")
    }

    /// A user other than root unmounting root's mount is told whose it is, in one line: not "it
    /// is busy" after fusermount3's "entry … not found in /etc/mtab".
    @Test func anotherUsersMountIsUnmountedOnlyByThatUserOrRoot() throws {
        let fx = try MountFixture()
        let refused = try run(Nobody.program, Nobody.arguments([Paths.binary.path, "unmount", fx.mountPoint.path]))
        #expect(
            refused.status == 1
                && refused.errors.contains(
                    "cannot unmount '\(fx.mountPoint.path)': root made it, and a mount is "
                        + "unmounted only by the user who made it or by root"),
            "\(refused)")
        #expect(!refused.errors.contains("mtab") && !refused.errors.contains("busy"), "\(refused)")
        #expect(MountFixture.isMounted(fx.mountPoint.path))
    }

    /// A directory its owner may read but not search (0644) lists through a mount that owner
    /// made: the daemon, with the owner's rights alone, opens it as the owner's own opendir
    /// does (a lookup of "." in it would need the search permission).
    @Test func aDirectoryReadableButNotSearchableListsThroughItsOwnersMount() throws {
        let nobody: uid_t = 65534
        try withNobodysMount { fx in
            let directory = fx.backingPath("unsearchable")
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
            for name in ["a", "b"] {
                #expect(FileManager.default.createFile(atPath: directory + "/" + name, contents: Data()))
            }
            #expect(chown(directory, nobody, gid_t(nobody)) == 0 && chmod(directory, 0o644) == 0)
            let list = "import os, sys; print(' '.join(sorted(os.listdir(sys.argv[1]))))"
            let direct = try run(Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", list, directory]))
            #expect(direct.output == "a b\n", "as the owner lists it directly: \(direct.errors)")
            let mounted = try run(
                Nobody.program, Nobody.arguments(["/usr/bin/python3", "-c", list, fx.path("unsearchable")]))
            #expect(mounted.output == "a b\n", "\(mounted.errors)")
        }
    }

    /// Another user's mount made without allow_other lets root in no more than anyone: `status`
    /// of it says whose it is and why, rather than "not inside a coordfs mount", and `status`
    /// listing every mount names it on a warning line rather than leave it out unsaid.
    @Test func anotherUsersPrivateMountIsSaidToBeTheirs() throws {
        let nobody: uid_t = 65534
        try withNobodysMount { fx in
            let mnt = fx.mountPoint.path
            let theirs =
                "that uid 65534 (nobody) made without -o allow_other: the kernel lets nobody else into it, root included"
            let named = try run(Paths.binary.path, ["status", mnt])
            #expect(named.status == 1 && named.errors.contains("'\(mnt)' is a coordfs mount \(theirs)"), "\(named)")
            #expect(!named.errors.contains("not inside a coordfs mount"), "\(named)")
            let inside = try run(Paths.binary.path, ["status", fx.path("doc.txt")])
            #expect(
                inside.status == 1
                    && inside.errors.contains(
                        "'\(fx.path("doc.txt"))' is on the coordfs mount at '\(mnt)', one \(theirs)"),
                "\(inside)")
            let everywhere = try run("/bin/sh", ["-c", "cd / && exec \"$0\" status", Paths.binary.path])
            // The only mount there is: status 1. (Beside mounts of the machine's own, which are
            // listed, its warning line.)
            let onlyMount = MountTable.coordfsMounts(in: MountTable.entries()).count == 1
            #expect(
                everywhere.status == (onlyMount ? 1 : 0)
                    && everywhere.errors.contains("the coordfs mount at '\(mnt)' is one \(theirs)"),
                "\(everywhere)")
            // Its own user sees it as ever.
            let own = try run(asUser(nobody)[0], Array(asUser(nobody).dropFirst()) + [Paths.binary.path, "status", mnt])
            #expect(own.status == 0 && own.output.contains("\(mnt) — control socket"), "\(own)")
        }
    }

    /// A backing directory its user cannot list and search is refused, as bindfs refuses it:
    /// mounted, every access through it failed with EACCES.
    @Test func anUnreadableBackingDirectoryIsRefused() throws {
        let dir = "/tmp/coordfs-unreadable-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for directory in ["backing", "mnt"] {
            try FileManager.default.createDirectory(atPath: dir + "/" + directory, withIntermediateDirectories: true)
        }
        chmod(dir, 0o755)
        chmod(dir + "/backing", 0o700)
        chown(dir + "/mnt", 65534, 65534)
        try withFuseOpenToUsers {
            let refused = try run(
                Nobody.program, Nobody.arguments([Paths.binary.path, "mount", dir + "/backing", dir + "/mnt"]))
            // Before, it mounted: clear it.
            if MountFixture.isMounted(dir + "/mnt") { _ = umount2(dir + "/mnt", Int32(MNT_DETACH)) }
            #expect(
                refused.status == 1
                    && refused.errors.contains("cannot read backing directory '\(dir)/backing' (Permission denied)")
                    && refused.errors.contains("uid 65534 (nobody)"), "\(refused)")
        }
    }
}

/// Every operation of the control socket, tried by another user against root's items on a
/// shared mount (docs/sharing.md): what that user could not read or write, it can neither hold,
/// watch, vend, find nor connect to, and it cannot make root's presenters or services follow a
/// move it names. (A `moved` naming root's `private/secret` as its source was once accepted
/// from a hold of the user's own file: root's presenter then followed into that file.)
@Suite struct CrossUserOperations {
    let binary = Paths.binary.path

    @Test("C24 a move is reported only inside a write of both places, by a user who could make it")
    func eachOperationAsAnotherUser() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        for directory in ["private", "shared", "nobody"] {
            try FileManager.default.createDirectory(
                atPath: fx.backingPath(directory), withIntermediateDirectories: true)
        }
        try fx.seed("private/secret", "root's secret\n")
        try fx.seed("shared/doc", "root's document\n")
        try fx.seed("nobody/a", "a\n")
        try fx.seed("nobody/b", "b\n")
        chmod(fx.backingPath("private"), 0o700)
        chmod(fx.backingPath("shared/doc"), 0o644)
        chmod(fx.backingPath("nobody"), 0o777)
        for file in ["nobody", "nobody/a", "nobody/b"] { chown(fx.backingPath(file), 65534, 65534) }

        // Root presents and vends both of its items.
        let secretPresenter = try Child(binary, ["watch", fx.path("private/secret")])
        let docPresenter = try Child(binary, ["watch", fx.path("shared/doc")])
        let secretService = try Child(
            binary, ["vend", "org.example.root", fx.path("private/secret"), "--", "echo", "root"])
        let docService = try Child(binary, ["vend", "org.example.shared", fx.path("shared/doc"), "--", "echo", "root"])
        let services = { (path: String) in (try? run(self.binary, ["services", path]))?.output ?? "" }
        #expect(eventually { services(fx.path("private/secret")).contains("org.example.root") })
        #expect(eventually { services(fx.path("shared/doc")).contains("org.example.shared") })
        #expect(eventually { ((try? fx.state()) ?? "").components(separatedBy: "PRESENT").count == 3 })

        let script = Paths.scripts.appendingPathComponent("other_user_ops.py").path
        let python = Paths.repository.appendingPathComponent("clients/python").path
        let attempt = try run(
            Nobody.program,
            Nobody.arguments([
                "/usr/bin/env", "PYTHONPATH=\(python)", "/usr/bin/python3", script,
                fx.mountPoint.path
            ]))
        #expect(attempt.status == 0, "\(attempt)")
        let answered = try JSONSerialization.jsonObject(with: Data(attempt.output.utf8)) as? [String: String] ?? [:]
        let expected = [
            "hold read private/secret": "EACCES",
            "hold write shared/doc": "EACCES",
            "hold write shared/doc and nobody/a": "EACCES",
            "hold for a process of another user": "EPERM",
            "hold for a presenter not its own": "EINVAL",
            "moved private/secret to nobody/a": "EPERM",
            "moved shared/doc to nobody/a": "EPERM",
            "moved nobody/a to shared/doc": "EPERM",
            "moved nobody/b to nobody/a, holding only a": "EPERM",
            "moved private/secret to nobody/a, holding a and b": "EPERM",
            "moved nobody/b to nobody/a, holding both": "ok",
            "release another connection's hold": "EINVAL",
            "cancel another connection's request": "EINVAL",
            "watch private/secret": "EACCES",
            "unwatch another connection's watch": "EINVAL",
            "vend on private/secret": "EACCES",
            "services of private/secret": "EACCES",
            "connect to private/secret's service": "EACCES",
            "withdraw another connection's service": "EINVAL",
            "vend root's name on shared/doc": "ok",
            "remount": "EPERM",
            "status names private/secret": "no",
            "answer a cookie never sent": "closed"
        ]
        for (name, outcome) in expected.sorted(by: { $0.key < $1.key }) {
            #expect(answered[name] == outcome, "\(name): \(answered[name] ?? "not tried")")
        }
        #expect(Set(answered.keys) == Set(expected.keys), "\(answered.keys.sorted())")

        // Root's presenters heard of no move, and are where they were; its services too, and
        // root's clients still reach root's provider of the name another user vended as well.
        #expect(secretPresenter.next(timeout: .seconds(1)) == nil)
        #expect(docPresenter.next(timeout: .milliseconds(100)) == nil)
        let state = try fx.state()
        #expect(state.contains("private/secret") && state.contains("shared/doc"), "\(state)")
        #expect(services(fx.path("private/secret")).contains("org.example.root"))
        #expect(!services(fx.path("nobody/a")).contains("org.example"))
        let connected = try run(
            "/bin/sh",
            ["-c", "echo | \"$0\" services \"$1\" --connect org.example.shared", binary, fx.path("shared/doc")])
        #expect(connected.output == "root\n", "\(connected)")
        withExtendedLifetime((secretService, docService)) {}
    }
}

/// A hold through a mount's control socket (`coordfs coordinate`, and so a Swift coordinator)
/// is a lease across users exactly as the mount's own requests are (docs/sharing.md): another
/// user's hold or open file keeps it at most the break time, then it goes past them, revokes
/// them and tells their holders. Its own user's it waits for as before, and a hold that names
/// no timeout waits the mount's wait timeout. (It waited 120 s for another user's plain open,
/// then failed with EBUSY; with `--wait-timeout infinity`, 120 s all the same.)
@Suite struct CrossUserSocketHolds {
    let binary = Paths.binary.path

    @Test func aHoldGoesPastAnotherUsersHoldAndOpenFileAtTheBreakTime() throws {
        let fx = try MountFixture(["-o", "allow_other", "--break-time", "2", "--wait-timeout", "infinity"])
        for name in ["held.txt", "open.txt"] {
            try fx.seed(name, "\(name)\n")
            chmod(fx.backingPath(name), 0o644)
        }
        let holder = try Child(
            Nobody.program,
            Nobody.arguments(["/usr/bin/python3", "-c", LockTimeAndRevokedHolds.holder, fx.path("held.txt")]))
        let held = try #require(holder.next()?.split(separator: " ").dropFirst().first.map(String.init))
        let reader = try Child(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", Paths.scripts.appendingPathComponent("hold.py").path])
        )
        #expect(reader.ask("open r \(fx.path("open.txt"))") == "ok 1")
        for name in ["held.txt", "open.txt"] {
            let started = ContinuousClock.now
            let coordinate = try Child(binary, ["coordinate", "-x", fx.path(name), "--", "/bin/true"])
            let status = coordinate.waitForExit(timeout: .seconds(10))
            let took = ContinuousClock.now - started
            #expect(
                status == 0,
                "root's hold of \(name) beside another user's: status \(String(describing: status)) after \(took)")
            #expect(took >= .milliseconds(1500), "it waited the break time: \(took)")
        }
        #expect(holder.next() == "broken \(held)", "the hold passed is told")
        // Revoked: root's next holds go ahead at once.
        for name in ["held.txt", "open.txt"] {
            let started = ContinuousClock.now
            #expect(
                try run(binary, ["coordinate", "-x", fx.path(name), "-w", "1", "--", "/bin/true"]).status == 0,
                "the revoked hold on \(name) held root up again")
            #expect(ContinuousClock.now - started < .seconds(1))
        }
        let statistics = try fx.statistics()
        #expect(statistics["lease_breaks"] == 2 && statistics["holds_revoked"] == 2, "\(statistics)")
        #expect(reader.ask("read 1") == "data open.txt|", "the reader reads on what it opened")
    }

    /// A hold of two items goes past another user's hold on its second item at the break time,
    /// and that hold is told and revoked. (Only holders of a request's first item were told.)
    @Test func aHoldOfTwoItemsTellsAnotherUsersHoldOnItsSecond() throws {
        let fx = try MountFixture(["-o", "allow_other", "--break-time", "2", "--wait-timeout", "infinity"])
        for name in ["first.txt", "second.txt"] {
            try fx.seed(name, "\(name)\n")
            chmod(fx.backingPath(name), 0o644)
        }
        let holder = try Child(
            Nobody.program,
            Nobody.arguments(["/usr/bin/python3", "-c", LockTimeAndRevokedHolds.holder, fx.path("second.txt")]))
        let held = try #require(holder.next()?.split(separator: " ").dropFirst().first.map(String.init))
        let started = ContinuousClock.now
        let roots = try Child(
            "/usr/bin/python3",
            [
                "-c", LockTimeAndRevokedHolds.holder, "--write",
                fx.path("first.txt") + "+" + fx.path("second.txt")
            ])
        let granted = roots.next(timeout: .seconds(10))
        let took = ContinuousClock.now - started
        #expect(
            granted?.hasPrefix("held ") == true && granted != "held None",
            "root's hold of both: \(String(describing: granted))")
        #expect(took >= .milliseconds(1500) && took < .seconds(5), "it waited the break time: \(took)")
        #expect(holder.next(timeout: .seconds(2)) == "broken \(held)", "the hold of the second item is told")
        #expect(holder.next(timeout: .milliseconds(300)) == nil, "and told once")
        let statistics = try fx.statistics()
        #expect(statistics["lease_breaks"] == 1 && statistics["holds_revoked"] == 1, "\(statistics)")
    }

    /// Within one user nothing changed: a hold waits for its own user's holds and open files
    /// until its timeout, whatever the break time (a coordinated access, not a lease's breaker).
    @Test func aHoldWaitsForItsOwnUsersHoldsAndOpenFilesAsBefore() throws {
        let fx = try MountFixture(["--break-time", "0.5", "--wait-timeout", "infinity"])
        try fx.seed("held.txt")
        try fx.seed("open.txt")
        let holder = try Child("/usr/bin/python3", ["-c", LockTimeAndRevokedHolds.holder, fx.path("held.txt")])
        #expect(holder.next()?.hasPrefix("held ") == true)
        let reader = try Child.holder()
        #expect(reader.ask("open r \(fx.path("open.txt"))") == "ok 1")
        for name in ["held.txt", "open.txt"] {
            let started = ContinuousClock.now
            let refused = try run(binary, ["coordinate", "-x", fx.path(name), "-w", "2", "--", "/bin/true"])
            let took = ContinuousClock.now - started
            #expect(
                refused.status == 1 && took >= .milliseconds(1800),
                "root's hold of \(name) beside root's own: \(refused) after \(took)")
        }
        #expect(holder.next(timeout: .milliseconds(300)) == nil, "nobody was told of a break")
        let statistics = try fx.statistics()
        #expect(statistics["lease_breaks"] == 0 && statistics["holds_revoked"] == 0, "\(statistics)")
    }

    @Test("X5 a hold that names no timeout waits the mount's wait timeout")
    func aHoldThatNamesNoTimeoutWaitsTheMountsWaitTimeout() throws {
        let fx = try MountFixture(["--wait-timeout", "1"])
        try fx.seed("held.txt")
        let holder = try Child("/usr/bin/python3", ["-c", LockTimeAndRevokedHolds.holder, fx.path("held.txt")])
        #expect(holder.next()?.hasPrefix("held ") == true)
        let started = ContinuousClock.now
        let waiting = try Child(binary, ["coordinate", "-x", fx.path("held.txt"), "--", "/bin/true"])
        let status = waiting.waitForExit(timeout: .seconds(8))
        let took = ContinuousClock.now - started
        #expect(status == 1, "EBUSY after the mount's 1 s: status \(String(describing: status)) after \(took)")
        #expect(took >= .milliseconds(900) && took < .seconds(5), "\(took)")
    }
}

/// A wait for another user's hold ends by itself at the break time, so a cycle through it is no
/// deadlock (X1, docs/sharing.md): another user who holds one item and asks for one root holds
/// cannot make root's wait fail with EDEADLK at once. (It did, in a millisecond.)
@Suite struct CrossUserCycles {
    /// Holds on command under one named coordinator, through the socket of the first path's
    /// mount: a line "N" holds the N-th path (from 0) for writing and prints the reply, "ok"
    /// or the errno name; a BROKEN event of one of its holds prints "broken".
    static let holder = """
        import json, os, socket, sys, threading
        paths = sys.argv[1:]
        s = socket.socket(socket.AF_UNIX); s.connect(os.getxattr(paths[0], "user.coordfs.socket").decode())
        reader, writer = s.makefile("rb"), s.makefile("wb", buffering=0)
        def send(m): writer.write(json.dumps(m).encode() + b"\\n")
        def read():
            for line in reader:
                record = json.loads(line)
                if "BROKEN" in record.get("events", []):
                    print("broken", flush=True)
                elif record.get("id", 0) > 1:
                    print(record.get("error") or "ok", flush=True)
        send({"op": "hello", "id": 1, "version": 1})
        threading.Thread(target=read, daemon=True).start()
        for number, line in enumerate(sys.stdin, start=2):
            send({"op": "hold", "id": number, "coordinator": "one", "intents": [{"path": paths[int(line)], "access": "write"}]})
        """

    @Test("X1 another user's open closes no cycle with root's: both go ahead at the break time")
    func anotherUsersOpenMakesNoDeadlockOfRootsOpen() throws {
        let fx = try MountFixture(["-o", "allow_other", "--break-time", "2", "--wait-timeout", "infinity"])
        for name in ["x", "y"] {
            try fx.seed(name)
            chmod(fx.backingPath(name), 0o666)
        }
        let roots = try Child.holder()
        let theirs = try Child(
            Nobody.program, Nobody.arguments(["/usr/bin/python3", Paths.scripts.appendingPathComponent("hold.py").path])
        )
        // Truncating writers: each excludes every other open.
        #expect(roots.ask("open wt \(fx.path("x"))") == "ok 1")
        #expect(theirs.ask("open wt \(fx.path("y"))") == "ok 1")
        theirs.send("open wt \(fx.path("x"))")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true })
        let started = ContinuousClock.now
        #expect(roots.ask("open wt \(fx.path("y"))") == "ok 2", "root's open waits the break time, not EDEADLK")
        let took = ContinuousClock.now - started
        #expect(took >= .milliseconds(1000) && took < .seconds(5), "\(took)")
        #expect(theirs.next() == "ok 2", "theirs went ahead at its break time")
        // Within one user a cycle is still refused (aCycleOfTwoProcessesGetsEDEADLK).
    }

    @Test("X1 another user's hold closes no cycle with root's hold through the socket")
    func anotherUsersHoldMakesNoDeadlockOfRootsHold() throws {
        let fx = try MountFixture(["-o", "allow_other", "--break-time", "2", "--wait-timeout", "infinity"])
        for name in ["a", "b"] {
            try fx.seed(name)
            chmod(fx.backingPath(name), 0o666)
        }
        let arguments = ["/usr/bin/python3", "-c", Self.holder, fx.path("a"), fx.path("b")]
        let roots = try Child(arguments[0], Array(arguments.dropFirst()))
        let theirs = try Child(Nobody.program, Nobody.arguments(arguments))
        #expect(roots.ask("1") == "ok", "root holds b")
        #expect(theirs.ask("0") == "ok", "they hold a")
        theirs.send("1")
        #expect(eventually { (try? fx.state())?.contains("WAIT") == true }, "they wait for root's b")
        let started = ContinuousClock.now
        roots.send("0")
        // Root's b is passed at their break time meanwhile (told); then root's own answer.
        var answers: [String] = []
        while let line = roots.next(timeout: .seconds(10)) {
            answers.append(line)
            if line != "broken" { break }
        }
        let took = ContinuousClock.now - started
        #expect(answers.last == "ok", "root's hold of a: \(answers)")
        #expect(took >= .milliseconds(1000) && took < .seconds(5), "\(took)")
        let theirAnswers = [theirs.next(), theirs.next()].compactMap { $0 }
        #expect(Set(theirAnswers) == ["ok", "broken"], "their hold of b granted, their a broken: \(theirAnswers)")
    }
}
