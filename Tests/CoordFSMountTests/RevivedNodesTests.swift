import LinuxSystem
@testable import CoordFSMount
import CLinux
import FileVersions
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
    private func makeTable(fileHandles: Bool = true) throws -> (InodeTable, String, () -> Void) {
        let backing = try FreshBacking("coordfs-revive")
        let table = InodeTable(
            rootFD: backing.rootFD, rootStat: backing.rootInfo, descriptorBudget: 1000, fileHandles: fileHandles)
        return (table, backing.path, backing.remove)
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

    /// A file with one name, renamed behind the mount's back, is not looked for where ids are
    /// counted (no file handles): its handle is stale, as docs/mount.md says.
    @Test func aLoneFileRenamedBehindTheMountIsStaleWithoutHandles() throws {
        let (table, backing, cleanup) = try makeTable(fileHandles: false)
        defer { cleanup() }
        try make(backing + "/lone")
        let node = try lookUp("lone", in: table)
        #expect(!node.id.isStable)
        table.forget(node.id, 1)
        try #require(rename(backing + "/lone", backing + "/moved") == 0)
        do throws(Errno) {
            _ = try table.revive(node.id, countingLookup: true)
            Issue.record("revived at \(table.placement(of: node))")
        } catch {
            #expect(error.rawValue == ESTALE)
        }
    }

    /// With file handles, its id is its backing handle (`StableNodeIDs`): found by it under its
    /// new name.
    @Test func aLoneFileRenamedBehindTheMountIsFoundByItsHandle() throws {
        let (table, backing, cleanup) = try makeTable()
        defer { cleanup() }
        try make(backing + "/lone")
        let node = try lookUp("lone", in: table)
        try #require(node.id.isStable, "the backing gives no 8-byte handles")
        table.forget(node.id, 1)
        try #require(rename(backing + "/lone", backing + "/moved") == 0)
        let (again, _) = try table.revive(node.id, countingLookup: true)
        #expect(again.id == node.id && table.path(of: again.id) == "moved")
    }

    /// A handle as fanotify reports it names the node whose id it is: how the backing watch
    /// knows the mount's own writes (`BackingWatch.servedByTheKernel`).
    @Test func aReportedHandleGivesItsNodesID() throws {
        let (table, backing, cleanup) = try makeTable()
        defer { cleanup() }
        try make(backing + "/written")
        let node = try lookUp("written", in: table)
        try #require(node.id.isStable, "the backing gives no 8-byte handles")
        let reported = try #require(
            table.withFD(node, orElse: { _ in nil }) { BackingWatch.handle(of: $0) }, "no handle as fanotify's")
        let id = reported.withUnsafeBytes { table.stableIDs?.id(reported: $0.baseAddress!) }
        #expect(id == node.id)
        // A handle of another kind (another size) is no node's id.
        var other = reported
        other[0] = 12
        #expect(other.withUnsafeBytes { table.stableIDs?.id(reported: $0.baseAddress!) } == nil)
    }

    /// A table made afresh over the same backing (the mount mounted again) gives items the ids
    /// the first gave them, and finds an item it never looked up by its id, with the
    /// directories above it; a removed item's id is stale, and so is one in the version store.
    @Test func aNewTableOpensTheIdsOfTheOldOne() throws {
        let (first, backing, cleanup) = try makeTable()
        defer { cleanup() }
        try #require(mkdir(backing + "/a", 0o755) == 0 && mkdir(backing + "/a/b", 0o755) == 0)
        try make(backing + "/a/b/file")
        try make(backing + "/gone")
        let a = try lookUp("a", in: first)
        let (bFD, bInfo) = try first.openChild(named: "b", in: a)
        let b = first.remember(fd: bFD, info: bInfo, in: a, name: "b")
        let (fileFD, fileInfo) = try first.openChild(named: "file", in: b)
        let file = first.remember(fd: fileFD, info: fileInfo, in: b, name: "file")
        let gone = try lookUp("gone", in: first)
        try #require(file.id.isStable && b.id.isStable, "the backing gives no 8-byte handles")
        try #require(unlink(backing + "/gone") == 0)
        try #require(rename(backing + "/a", backing + "/renamed") == 0)

        let rootFD = open(backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(rootFD >= 0)
        var rootInfo = stat()
        try #require(fstat(rootFD, &rootInfo) == 0)
        let second = InodeTable(rootFD: rootFD, rootStat: rootInfo, descriptorBudget: 1000)
        let (revived, info) = try second.revive(file.id, countingLookup: true)
        #expect(revived.id == file.id && info.st_ino == fileInfo.st_ino)
        #expect(second.path(of: file.id) == "renamed/b/file", "placed with the directories above it")
        let renamed = try lookUp("renamed", in: second)
        #expect(second[b.id] != nil && renamed.id == a.id, "the same ids by name")
        for stale in [gone.id] {
            do throws(Errno) {
                _ = try second.revive(stale, countingLookup: true)
                Issue.record("a removed item's id was revived")
            } catch {
                #expect(error.rawValue == ESTALE)
            }
        }
        // An item in the version store, which the mount never shows, by its id.
        try #require(mkdir(backing + "/" + VersionStore.directoryName, 0o755) == 0)
        try make(backing + "/" + VersionStore.directoryName + "/kept")
        let keptFD = open(backing + "/" + VersionStore.directoryName + "/kept", CFS_O_PATH | O_CLOEXEC)
        try #require(keptFD >= 0)
        var handle = cfs_file_handle()
        var mount: Int32 = 0
        try #require(cfs_name_to_handle(keptFD, &handle, &mount) == 0)
        close(keptFD)
        let keptID = try #require(second.stableIDs?.id(for: handle))
        do throws(Errno) {
            _ = try second.revive(keptID, countingLookup: true)
            Issue.record("an item of the version store was revived")
        } catch {
            #expect(error.rawValue == ESTALE)
        }
    }
}
