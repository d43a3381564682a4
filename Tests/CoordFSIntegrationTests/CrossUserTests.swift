import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A mount shared by several users (SPEC §4): a presenter's refusal is a veto only for its own
/// user's accesses, and root's for anyone's.
@Suite struct CrossUserVetoes {
    let binary = Paths.binary.path
    let asNobody = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

    @Test func anotherUsersVetoIsIgnoredAndRootsHolds() throws {
        let fx = try MountFixture(["-o", "allow_other"])
        try fx.seed("root.txt", "root's\n")
        try fx.seed("other.txt", "other\n")
        chmod(fx.backingPath("root.txt"), 0o644)
        chmod(fx.backingPath("other.txt"), 0o644)
        // Another user, who may read root's file, refuses every request about it.
        let theirs = try Child(asNobody[0], Array(asNobody.dropFirst()) + [binary, "watch", fx.path("root.txt"), "--answer", "EACCES"])
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
        let theirCat = try run(asNobody[0], Array(asNobody.dropFirst()) + ["/bin/cat", fx.path("other.txt")])
        #expect(theirCat.status != 0 && theirCat.errors.contains("Permission denied"), "\(theirCat)")
        withExtendedLifetime(roots) {}
    }
}
