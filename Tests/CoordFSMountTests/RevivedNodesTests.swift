import LinuxSystem
@testable import CoordFSMount
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A node the kernel forgot is found again, for its file handle (`InodeTable.revive`, the
/// kernel's LOOKUP of "." after drop_caches), by the places it was reached by: a file with hard
/// links under another of its names once the one it was known by is gone, as fstests
/// generic/426 leaves it (`open_by_handle -l`, then `-u`: linked, the inodes dropped, the first
/// name unlinked, dropped again).
@Suite struct RevivedNodesTests {
    /// A table over a fresh directory, the directory's path, and what removes it.
    private func makeTable() throws -> (InodeTable, String, () -> Void) {
        let backing = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coordfs-revive-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: backing, withIntermediateDirectories: true)
        let rootFD = open(backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(rootFD >= 0)
        var rootInfo = stat()
        try #require(fstat(rootFD, &rootInfo) == 0)
        let table = InodeTable(rootFD: rootFD, rootStat: rootInfo, descriptorBudget: 1000)
        return (table, backing, { try? FileManager.default.removeItem(atPath: backing) })
    }

    /// A LOOKUP of `name` in the root, as the mount records it.
    private func lookUp(_ name: String, in table: InodeTable) throws -> Inode {
        let (fd, info) = try table.openChild(named: name, in: table.root)
        return table.remember(fd: fd, info: info, in: table.root, name: name)
    }

    private func make(_ path: String) throws {
        let fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
        try #require(fd >= 0)
        close(fd)
    }

    @Test func aFileLinkedThroughTheMountIsFoundUnderItsLinkOnceItsFirstNameIsGone() throws {
        let (table, backing, cleanup) = try makeTable()
        defer { cleanup() }
        try make(backing + "/file")
        let node = try lookUp("file", in: table)
        try #require(link(backing + "/file", backing + "/link") == 0)
        #expect(try lookUp("link", in: table) === node, "the link's reply names the same node")
        table.forget(node.id, 2)
        let (revived, _) = try table.revive(node.id, countingLookup: true)
        #expect(revived.id == node.id && table.placement(of: revived).name == "file")
        // Unlinked through the mount (which tells the table first), then dropped again: the
        // link it was reached by before the first drop still leads to it.
        table.nameGoing("file", in: table.root, parentFD: table.rootDescriptor)
        try #require(unlink(backing + "/file") == 0)
        table.forget(node.id, 1)
        let (again, info) = try table.revive(node.id, countingLookup: true)
        #expect(again.id == node.id && table.placement(of: again).name == "link" && info.st_nlink == 1)
    }

    /// Linked where the mount never looked (behind it, or by a lookup the kernel has forgotten
    /// since): a file seen with other links is looked for in its directory by inode number.
    @Test func aFileSeenWithLinksIsFoundUnderANameTheMountNeverKnew() throws {
        let (table, backing, cleanup) = try makeTable()
        defer { cleanup() }
        try make(backing + "/file")
        try #require(link(backing + "/file", backing + "/elsewhere") == 0)
        let node = try lookUp("file", in: table)
        table.forget(node.id, 1)
        try #require(unlink(backing + "/file") == 0)
        let (again, _) = try table.revive(node.id, countingLookup: true)
        #expect(again.id == node.id && table.placement(of: again).name == "elsewhere")
    }

    /// A file with one name, renamed behind the mount's back, is not looked for: its handle is
    /// stale, as docs/mount.md says.
    @Test func aLoneFileRenamedBehindTheMountIsStale() throws {
        let (table, backing, cleanup) = try makeTable()
        defer { cleanup() }
        try make(backing + "/lone")
        let node = try lookUp("lone", in: table)
        table.forget(node.id, 1)
        try #require(rename(backing + "/lone", backing + "/moved") == 0)
        do throws(Errno) {
            _ = try table.revive(node.id, countingLookup: true)
            Issue.record("revived at \(table.placement(of: node))")
        } catch {
            #expect(error.rawValue == ESTALE)
        }
    }
}
