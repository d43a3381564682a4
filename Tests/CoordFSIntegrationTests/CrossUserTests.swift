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
        let theirs = try Child(Nobody.program, Nobody.arguments([binary, "watch", fx.path("root.txt"), "--answer", "EACCES"]))
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
        let theirs = try Child(Nobody.program, Nobody.arguments([binary, "watch", fx.path("root.txt"), "--answer", "EACCES"]))
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
        #expect(!FileManager.default.fileExists(atPath: fx.backingPath("theirs/f20")), "the refused create left its file")
        let listing = try run(Nobody.program, Nobody.arguments(["/bin/ls", fx.path("")]))
        #expect(listing.status != 0 && listing.errors.contains("Too many open files"), "the share is the user's, over all its processes: \(listing)")
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
        let fx = try MountFixture(["-o", "allow_other", "--break-time", "1", "--wait-timeout", "infinity"], backingMode: 0o755)
        try fx.seed("shared.txt", "before\n")
        chmod(fx.backingPath("shared.txt"), 0o666)
        let url = URL(fileURLWithPath: fx.path("shared.txt"))
        var theirs: (status: Int32, output: String, errors: String)?
        do {
            try FileCoordinator().coordinate(writingItemAt: url) { url in
                // Another user writes while this accessor runs: it waits the break time, then
                // goes ahead.
                theirs = try run(Nobody.program, Nobody.arguments(["/bin/sh", "-c", "echo theirs > \"$1\"", "sh", url.path]))
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
        #expect(result.output == "1e16 EINVAL True\n-3 EINVAL True\nNaN EPROTO True\nInfinity EPROTO True\n1e400 EPROTO True\n",
                "\(result)")
        let command = try run(Nobody.program, Nobody.arguments([Paths.binary.path, "coordinate", "--read", fx.path("doc.txt"),
                                                                "--timeout", "1e16", "--", "/bin/true"]))
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
        let refused = try run(Nobody.program, Nobody.arguments([Paths.binary.path, "mount", dir + "/backing", dir + "/closed/mnt"]))
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
            try FileManager.default.createDirectory(atPath: fx.backingPath(directory), withIntermediateDirectories: true)
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
        let secretService = try Child(binary, ["vend", "org.example.root", fx.path("private/secret"), "--", "echo", "root"])
        let docService = try Child(binary, ["vend", "org.example.shared", fx.path("shared/doc"), "--", "echo", "root"])
        let services = { (path: String) in (try? run(self.binary, ["services", path]))?.output ?? "" }
        #expect(eventually { services(fx.path("private/secret")).contains("org.example.root") })
        #expect(eventually { services(fx.path("shared/doc")).contains("org.example.shared") })
        #expect(eventually { ((try? fx.state()) ?? "").components(separatedBy: "PRESENT").count == 3 })

        let script = Paths.scripts.appendingPathComponent("other_user_ops.py").path
        let python = Paths.repository.appendingPathComponent("clients/python").path
        let attempt = try run(Nobody.program, Nobody.arguments(["/usr/bin/env", "PYTHONPATH=\(python)", "/usr/bin/python3", script,
                                                                fx.mountPoint.path]))
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
            "answer a cookie never sent": "closed",
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
        let connected = try run("/bin/sh", ["-c", "echo | \"$0\" services \"$1\" --connect org.example.shared", binary, fx.path("shared/doc")])
        #expect(connected.output == "root\n", "\(connected)")
        withExtendedLifetime((secretService, docService)) {}
    }
}
