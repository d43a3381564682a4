import LinuxSystem
@testable import CoordFSMount
import Coordination
import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `InodeTable.path`: the one walk that spells every coordinated request's item, relative to
/// the mount root or with the mount point in front.
@Suite struct InodeTablePaths {
    /// A table over a fresh directory, and the chain of `depth` nested directories remembered
    /// in it (innermost last). Names alternate short (inline strings) and long (heap strings).
    private func nested(depth: Int) throws -> (table: InodeTable, chain: [Inode], names: [String], cleanup: () -> Void)
    {
        let backing = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coordfs-paths-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: backing, withIntermediateDirectories: true)
        let rootFD = open(backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(rootFD >= 0)
        var rootInfo = stat()
        try #require(fstat(rootFD, &rootInfo) == 0)
        let table = InodeTable(rootFD: rootFD, rootStat: rootInfo, descriptorBudget: 1000)
        var chain: [Inode] = [], names: [String] = []
        var parentFD = rootFD, parent = table.root
        for level in 0..<depth {
            let name = level % 2 == 0 ? "d\(level)" : "a-directory-name-longer-than-fifteen-\(level)"
            try #require(mkdirat(parentFD, name, 0o755) == 0)
            let fd = openat(parentFD, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            try #require(fd >= 0)
            var info = stat()
            try #require(fstat(fd, &info) == 0)
            let inode = table.remember(fd: fd, info: info, in: parent, name: name)
            chain.append(inode)
            names.append(name)
            (parentFD, parent) = (fd, inode)
        }
        return (table, chain, names, { try? FileManager.default.removeItem(atPath: backing) })
    }

    @Test func theRootIsTheBase() throws {
        let (table, _, _, cleanup) = try nested(depth: 1)
        defer { cleanup() }
        #expect(table.path(of: InodeTable.rootID) == "")
        #expect(table.path(of: InodeTable.rootID, under: "/") == "/")
        #expect(table.path(of: InodeTable.rootID, under: "/mnt/point") == "/mnt/point")
        #expect(table.path(of: InodeTable.rootID, appending: "name") == "name")
        #expect(table.path(of: InodeTable.rootID, appending: "name", under: "/") == "/name")
        #expect(table.path(of: InodeTable.rootID, appending: "name", under: "/mnt/point") == "/mnt/point/name")
    }

    @Test(arguments: [1, 2, 31, 32, 33, 40])
    func nestedItemsAreSpelledFromTheRootDown(depth: Int) throws {
        // 32 ancestors fit the walk's stack buffer; deeper ones are fetched by a second walk.
        let (table, chain, names, cleanup) = try nested(depth: depth)
        defer { cleanup() }
        let relative = names.joined(separator: "/")
        let innermost = chain.last!.id
        #expect(table.path(of: innermost) == relative)
        #expect(table.path(of: innermost, appending: "leaf") == relative + "/leaf")
        #expect(table.path(of: innermost, under: "/") == "/" + relative)
        #expect(table.path(of: innermost, appending: "leaf", under: "/mnt/point") == "/mnt/point/" + relative + "/leaf")
        // What the mount hands the engine: the same item as the checked spelling.
        let canonical = ItemPath(canonical: table.path(of: innermost, appending: "leaf", under: "/mnt/point"))
        #expect(canonical == ItemPath("/mnt/point/" + relative + "/leaf")!)
        #expect(canonical.hashValue == ItemPath("/mnt/point/" + relative + "/leaf")!.hashValue)
    }
}

/// Without file handles (a mount not run as root, or a backing filesystem without them), an
/// evicted descriptor is opened again from its parent and its name, and only if the name still
/// leads to the same inode.
@Suite struct InodeTableReopeningByName {
    /// A table of 16 descriptors without file handles, over a new backing directory holding
    /// the directories `directories`; the caller removes the directory.
    static func smallTable(directories: [String]) throws -> (backing: String, table: InodeTable) {
        let backing = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coordfs-names-\(UUID().uuidString)"
        ).path
        for directory in directories {
            try FileManager.default.createDirectory(
                atPath: backing + "/" + directory, withIntermediateDirectories: true)
        }
        let rootFD = open(backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(rootFD >= 0)
        var rootInfo = stat()
        try #require(fstat(rootFD, &rootInfo) == 0)
        let table = InodeTable(rootFD: rootFD, rootStat: rootInfo, descriptorBudget: 16, fileHandles: false)
        #expect(!table.usesHandles)
        return (backing, table)
    }

    @Test func evictedItemsReopenByNameAndNeverAsAnotherFile() throws {
        let (backing, table) = try Self.smallTable(directories: ["sub"])
        defer { try? FileManager.default.removeItem(atPath: backing) }
        func remember(_ name: String, in parent: Inode) throws -> Inode {
            try table.withFD(parent) { parentFD throws(Errno) -> Inode in
                let fd = try check(openat(parentFD, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC))
                var info = stat()
                _ = fstat(fd, &info)
                return table.remember(fd: fd, info: info, in: parent, name: name)
            }
        }
        func number(_ inode: Inode) throws -> UInt64 {
            try table.withFD(inode) { fd throws(Errno) -> UInt64 in
                var info = stat()
                _ = try check(fstat(fd, &info))
                return UInt64(info.st_ino)
            }
        }
        let sub = try remember("sub", in: table.root)
        var files: [Inode] = []
        for index in 0..<40 {
            #expect(FileManager.default.createFile(atPath: backing + "/sub/f\(index)", contents: Data("\(index)".utf8)))
            files.append(try remember("f\(index)", in: sub))
        }
        // Items in the root, until the directory itself is among the oldest.
        for index in 0..<20 {
            #expect(FileManager.default.createFile(atPath: backing + "/g\(index)", contents: Data()))
            _ = try remember("g\(index)", in: table.root)
        }
        #expect(table.openDescriptors <= 16, "over budget, the oldest were let go")
        #expect(
            !table.holdsDescriptor(files[0]) && !table.holdsDescriptor(sub),
            "the first file and its directory were evicted")
        // Reopened by name, the parent first: the same inodes as remembered.
        for inode in files { #expect(try number(inode) == inode.number) }
        // Behind the table's back, f1's name goes to another file: f1's inode is not reopened
        // as that one.
        for index in 2..<40 { _ = try number(files[index]) }  // f1 is the oldest again
        #expect(!table.holdsDescriptor(files[1]))
        try FileManager.default.moveItem(atPath: backing + "/sub/f1", toPath: backing + "/sub/moved")
        #expect(FileManager.default.createFile(atPath: backing + "/sub/f1", contents: Data("other".utf8)))
        #expect(throws: Errno.self) { try number(files[1]) }
    }

    /// Names of a file with hard links removed through the mount: another name it still has
    /// becomes its path when its own goes; one of its others just goes.
    @Test func namesRemovedThroughTheMountLeaveTheFileANameItHas() throws {
        let (backing, table) = try Self.smallTable(directories: ["a"])
        defer { try? FileManager.default.removeItem(atPath: backing) }
        func remember(_ name: String, in parent: Inode) throws -> Inode {
            let (fd, info) = try table.openChild(named: name, in: parent)
            return table.remember(fd: fd, info: info, in: parent, name: name)
        }
        let a = try remember("a", in: table.root)
        #expect(FileManager.default.createFile(atPath: backing + "/a/one", contents: Data()))
        for name in ["two", "three"] { try #require(link(backing + "/a/one", backing + "/a/" + name) == 0) }
        let file = try remember("one", in: a)
        // Looked up last, "two" would be the first other to stand in.
        for name in ["three", "two"] { #expect(try remember(name, in: a) === file) }
        #expect(table.path(of: file.id) == "a/one")
        let rootFD = open(backing + "/a", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(rootFD) }
        // One of its others goes: its path stays.
        table.nameGoing("two", in: a, parentFD: rootFD)
        try FileManager.default.removeItem(atPath: backing + "/a/two")
        #expect(table.path(of: file.id) == "a/one")
        // Its own goes: the other it still has.
        table.nameGoing("one", in: a, parentFD: rootFD)
        try FileManager.default.removeItem(atPath: backing + "/a/one")
        #expect(table.path(of: file.id) == "a/three")
        // Its last name goes: nothing else to be known by.
        table.nameGoing("three", in: a, parentFD: rootFD)
        #expect(table.path(of: file.id) == "a/three")
    }

    /// A file with two names, both looked up, is coordinated by the first: opens by either
    /// name must conflict. When that name goes, an evicted descriptor is reopened by the other,
    /// which it is known by from then on. (It answered ESTALE until the kernel happened to look
    /// the other name up again.)
    @Test func anEvictedFileWithHardLinksReopensByItsOtherName() throws {
        let (backing, table) = try Self.smallTable(directories: ["a", "b"])
        defer { try? FileManager.default.removeItem(atPath: backing) }
        func remember(_ name: String, in parent: Inode) throws -> Inode {
            let (fd, info) = try table.openChild(named: name, in: parent)
            return table.remember(fd: fd, info: info, in: parent, name: name)
        }
        func number(_ inode: Inode) throws -> UInt64 {
            try table.withFD(inode) { fd throws(Errno) -> UInt64 in UInt64(try statOf(fd).st_ino) }
        }
        func evict(_ inode: Inode, using others: [Inode]) throws {
            for other in others { _ = try number(other) }
            #expect(!table.holdsDescriptor(inode), "evicted")
        }
        let (a, b) = (try remember("a", in: table.root), try remember("b", in: table.root))
        #expect(FileManager.default.createFile(atPath: backing + "/a/first", contents: Data("linked".utf8)))
        try #require(link(backing + "/a/first", backing + "/b/second") == 0)
        let file = try remember("first", in: a)
        #expect(try remember("second", in: b) === file, "one inode, two names")
        #expect(table.path(of: file.id) == "a/first", "coordinated by one path, whichever name was looked up last")
        var others: [Inode] = []
        for index in 0..<20 {
            #expect(FileManager.default.createFile(atPath: backing + "/g\(index)", contents: Data()))
            others.append(try remember("g\(index)", in: table.root))
        }
        let keep = [a, b] + others

        // The name it is known by goes: reopened by the other, and known by it.
        try evict(file, using: keep)
        try FileManager.default.removeItem(atPath: backing + "/a/first")
        #expect(try number(file) == file.number)
        #expect(table.path(of: file.id) == "b/second", "known by the name that led to it")

        // A third name is looked up, then both are renamed through the mount: the name it is
        // known by moves with its rename, the other stays one of its names under its new one.
        try #require(link(backing + "/b/second", backing + "/a/third") == 0)
        #expect(try remember("third", in: a) === file)
        try FileManager.default.moveItem(atPath: backing + "/b/second", toPath: backing + "/b/fifth")
        table.moved(file.id, from: (b.id, "second"), to: b.id, name: "fifth")
        #expect(table.path(of: file.id) == "b/fifth")
        try FileManager.default.moveItem(atPath: backing + "/a/third", toPath: backing + "/a/sixth")
        table.moved(file.id, from: (a.id, "third"), to: a.id, name: "sixth")
        #expect(table.path(of: file.id) == "b/fifth", "another name's rename moves nothing")
        try evict(file, using: keep)
        try FileManager.default.removeItem(atPath: backing + "/b/fifth")
        #expect(try number(file) == file.number)
        #expect(table.path(of: file.id) == "a/sixth")

        // Every name it was reached by gone, or leading to another file: ESTALE, never the
        // other file. (Moved away, not removed: a removed file's inode number may be given to
        // the next file made, and a name proves no more than the number.)
        try evict(file, using: keep)
        try FileManager.default.moveItem(atPath: backing + "/a/sixth", toPath: backing + "/moved")
        #expect(FileManager.default.createFile(atPath: backing + "/a/sixth", contents: Data("other".utf8)))
        #expect(throws: Errno(code: ESTALE)) { try number(file) }
    }
}
