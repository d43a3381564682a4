import CLinux
import LinuxSystem
@testable import CoordFSMount
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The kernel's forgets (`InodeTable.forget`): a node goes with its last lookup, its descriptor
/// with it, and it is remembered as departed.
@Suite struct ForgottenNodesTests {
    /// A BATCH_FORGET of more nodes than one lock's worth, with nodes still looked up, the root
    /// and an id never given among them: exactly the nodes counted down to zero go.
    @Test func aBatchForgetsEachNodeItCountsDownToZero() throws {
        let backing = try FreshBacking("coordfs-forgets")
        defer { backing.remove() }
        let table = InodeTable(rootFD: backing.rootFD, rootStat: backing.rootInfo, descriptorBudget: 1_000)
        let count = InodeTable.forgetsPerLock * 3 + 5
        let nodes = try (0..<count).map { index throws(Errno) -> Inode in
            let name = "f\(index)"
            close(open(backing.path + "/" + name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
            let (fd, info) = try table.openChild(named: name, in: table.root)
            return table.remember(fd: fd, info: info, in: table.root, name: name)
        }
        // Every third node was looked up twice: one forget leaves it known.
        for node in nodes.enumerated() where node.offset % 3 == 0 {
            let (fd, info) = try table.openChild(named: "f\(node.offset)", in: table.root)
            #expect(table.remember(fd: fd, info: info, in: table.root, name: "f\(node.offset)") === node.element)
        }
        let descriptorsBefore = table.openDescriptors
        var batch = nodes.map { ($0.id, UInt64(1)) }
        batch.insert((InodeTable.rootID, 1), at: 7)
        batch.insert((NodeID(999_999), 1), at: 40)
        table.forget(batch)

        let kept = nodes.enumerated().filter { $0.offset % 3 == 0 }.map(\.element)
        let gone = nodes.enumerated().filter { $0.offset % 3 != 0 }.map(\.element)
        #expect(kept.allSatisfy { table[$0.id] === $0 && table.holdsDescriptor($0) })
        #expect(
            gone.allSatisfy {
                table[$0.id] == nil && !table.holdsDescriptor($0) && $0.isForgotten.load(ordering: .relaxed)
            })
        #expect(table.openDescriptors == descriptorsBefore - gone.count, "each gone node's descriptor closed")
        #expect(table[InodeTable.rootID] === table.root)
        #expect(table.count == kept.count + 1)
        // Departed, not lost: each comes back by its id with the item it was.
        for node in gone.prefix(5) {
            let (revived, info) = try table.revive(node.id, countingLookup: true)
            #expect(revived.id == node.id && UInt64(info.st_ino) == node.number)
        }
    }
}

/// Lookups that open nothing (`InodeTable.rememberUnopened`): the node has its stable id and
/// is opened from its handle when a request needs its descriptor.
@Suite struct UnopenedLookupsTests {
    @Test func aFileLookedUpIsOpenedOnlyWhenUsed() throws {
        let backing = try FreshBacking("coordfs-unopened")
        defer { backing.remove() }
        let table = InodeTable(rootFD: backing.rootFD, rootStat: backing.rootInfo, descriptorBudget: 1_000)
        try #require(
            table.stableIDs?.handlesSayTheInode == true, "needs handles that say the inode number (ext4's), and root")
        close(open(backing.path + "/file", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
        try #require(symlink("file", backing.path + "/link") == 0)
        try #require(mkdir(backing.path + "/directory", 0o755) == 0)
        let descriptors = table.openDescriptors

        let (file, info, wasKnown) = try #require(try table.rememberUnopened(named: "file", in: table.root))
        #expect(!wasKnown)
        #expect(file.id.isStable && UInt64(info.st_ino) == file.number && (info.st_mode & S_IFMT) == S_IFREG)
        #expect(!table.holdsDescriptor(file) && table.openDescriptors == descriptors, "nothing opened")
        // The id a lookup that opens the item gives it.
        let opened = openat(backing.rootFD, "file", CFS_O_PATH | O_CLOEXEC)
        var handle = cfs_file_handle()
        var mount: Int32 = 0
        try #require(opened >= 0 && cfs_name_to_handle(opened, &handle, &mount) == 0)
        close(opened)
        #expect(table.stableIDs?.id(for: handle) == file.id)
        // Looked up again: the same node, counted twice.
        let again = try #require(try table.rememberUnopened(named: "file", in: table.root))
        #expect(again.0 === file && again.known && file.lookups == 2)
        // Used: opened from its handle, the item itself, and kept.
        let used = table.withFD(file, orElse: { _ in stat() }) { fd in
            var used = stat()
            _ = fstat(fd, &used)
            return used
        }
        #expect(used.st_ino == info.st_ino && table.holdsDescriptor(file))

        let (link, linkInfo, _) = try #require(try table.rememberUnopened(named: "link", in: table.root))
        #expect((linkInfo.st_mode & S_IFMT) == S_IFLNK && !table.holdsDescriptor(link))
        let target = table.withFD(link, orElse: { _ in "" }) { fd in
            var bytes = [CChar](repeating: 0, count: 64)
            let count = readlinkat(fd, "", &bytes, bytes.count)
            return String(decoding: bytes.prefix(max(0, count)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        #expect(target == "file", "the link itself, not followed")

        // A directory is opened by its lookup (`openChild`): nil here. A name not there: ENOENT.
        #expect(try table.rememberUnopened(named: "directory", in: table.root) == nil)
        #expect(throws: Errno(code: ENOENT)) { try table.rememberUnopened(named: "absent", in: table.root) }
        // Replaced behind the table's back by a file that may take the same inode number (no
        // descriptor holds the old one, never opened): a node of its own, the new item's.
        close(open(backing.path + "/other", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
        let (other, _, _) = try #require(try table.rememberUnopened(named: "other", in: table.root))
        try #require(unlink(backing.path + "/other") == 0)
        close(open(backing.path + "/other", O_CREAT | O_WRONLY | O_CLOEXEC, 0o600))
        let (replaced, replacedInfo, replacedWasKnown) = try #require(
            try table.rememberUnopened(named: "other", in: table.root))
        #expect(replaced !== other && replaced.id != other.id && !replacedWasKnown)
        #expect((replacedInfo.st_mode & 0o777) == 0o600 && replaced.number == UInt64(replacedInfo.st_ino))
        #expect(table[other.id] === other, "the old node stays until the kernel forgets it")
        // The old node's item is gone: no revival, and its lookup is not left counted.
        #expect(throws: Errno(code: ESTALE)) { try table.revive(other.id, countingLookup: true) }
        #expect(other.lookups == 1, "the failed revival's lookup counted out")
        // Forgotten: departed, and found again by its id.
        table.forget(link.id, 1)
        #expect(table[link.id] == nil)
        let (revived, revivedInfo) = try table.revive(link.id, countingLookup: true)
        #expect(revived.number == link.number && (revivedInfo.st_mode & S_IFMT) == S_IFLNK)
    }
}

/// A request's own opens of a node's item (`InodeTable.openItem`), and the descriptor an unlink
/// holds across the call where it would free the file (`InodeTable.holdForUnlink`).
@Suite struct ItemOpensTests {
    /// A node never opened: its item straight from its handle, with the open's own flags, and
    /// still no descriptor of the table's. One with a descriptor: through it, which reaches its
    /// file after the file's last name is gone. A node whose file is gone: ESTALE.
    @Test func aNodeWithoutADescriptorIsOpenedFromItsHandle() throws {
        let backing = try FreshBacking("coordfs-item-opens")
        defer { backing.remove() }
        let table = InodeTable(rootFD: backing.rootFD, rootStat: backing.rootInfo, descriptorBudget: 1_000)
        try #require(
            table.stableIDs?.handlesSayTheInode == true, "needs handles that say the inode number (ext4's), and root")
        let writer = open(backing.path + "/file", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
        #expect(write(writer, "content", 7) == 7)
        close(writer)
        let (file, _, _) = try #require(try table.rememberUnopened(named: "file", in: table.root))
        let descriptors = table.openDescriptors

        let appending = try table.openItem(of: file, flags: O_WRONLY | O_APPEND | O_CLOEXEC).get()
        #expect(write(appending, "+more", 5) == 5, "opened for writing, as asked")
        #expect(fcntl(appending, F_GETFL) & O_APPEND != 0)
        close(appending)
        let reading = try table.openItem(of: file, flags: O_RDONLY | O_CLOEXEC).get()
        var bytes = [UInt8](repeating: 0, count: 32)
        let count = read(reading, &bytes, bytes.count)
        close(reading)
        #expect(String(decoding: bytes.prefix(max(0, count)), as: UTF8.self) == "content+more")
        #expect(!table.holdsDescriptor(file) && table.openDescriptors == descriptors, "the node still holds none")

        // Held by its node: opened through the node's descriptor, even with its name gone.
        table.withFD(file, orElse: { _ in }) { _ in }
        #expect(table.holdsDescriptor(file))
        try #require(unlink(backing.path + "/file") == 0)
        let unlinked = try table.openItem(of: file, flags: O_RDONLY | O_CLOEXEC).get()
        #expect(read(unlinked, &bytes, bytes.count) == 12, "the unlinked file, through the node's descriptor")
        close(unlinked)

        close(open(backing.path + "/gone", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
        let (gone, _, _) = try #require(try table.rememberUnopened(named: "gone", in: table.root))
        try #require(unlink(backing.path + "/gone") == 0)
        #expect(throws: Errno(code: ESTALE)) { try table.openItem(of: gone, flags: O_RDONLY | O_CLOEXEC).get() }
    }

    /// The unlink of a file's last name frees it, unless something holds it: a file no
    /// descriptor of the table holds gets one for the call; one its node holds, one with other
    /// links, and a directory get none.
    @Test func anUnlinkHoldsAFileNothingElseHolds() throws {
        let backing = try FreshBacking("coordfs-unlink-holds")
        defer { backing.remove() }
        let table = InodeTable(rootFD: backing.rootFD, rootStat: backing.rootInfo, descriptorBudget: 1_000)
        func info(_ name: String) -> stat {
            var info = stat()
            _ = fstatat(backing.rootFD, name, &info, AT_SYMLINK_NOFOLLOW)
            return info
        }
        for name in ["alone", "known", "opened", "linked"] {
            let fd = open(backing.path + "/" + name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
            #expect(write(fd, "12345", 5) == 5)
            close(fd)
        }
        try #require(link(backing.path + "/linked", backing.path + "/other") == 0)
        try #require(mkdir(backing.path + "/directory", 0o755) == 0)
        let (opened, openedInfo) = try table.openChild(named: "opened", in: table.root)
        _ = table.remember(fd: opened, info: openedInfo, in: table.root, name: "opened")

        let held = try #require(table.holdForUnlink("alone", info("alone"), parentFD: backing.rootFD))
        try #require(unlink(backing.path + "/alone") == 0)
        var after = stat()
        #expect(fstat(held, &after) == 0 && after.st_nlink == 0 && after.st_size == 5, "alive until closed")
        close(held)
        if table.stableIDs?.handlesSayTheInode == true {
            _ = try #require(try table.rememberUnopened(named: "known", in: table.root))
            let known = table.holdForUnlink("known", info("known"), parentFD: backing.rootFD)
            #expect(known != nil, "a node without a descriptor holds nothing")
            if let known { close(known) }
        }
        #expect(table.holdForUnlink("opened", info("opened"), parentFD: backing.rootFD) == nil)
        #expect(table.holdForUnlink("linked", info("linked"), parentFD: backing.rootFD) == nil)
        #expect(table.holdForUnlink("directory", info("directory"), parentFD: backing.rootFD) == nil)
    }
}

/// Items on another filesystem mounted inside the backing directory: the table opens handles
/// on the root's filesystem alone, so theirs are never taken, and an evicted one is opened again
/// by its name.
@Suite struct OtherFilesystemNodesTests {
    @Test func anItemOnAnotherFilesystemIsReopenedByName() throws {
        let backing = try FreshBacking("coordfs-other-filesystem")
        defer { backing.remove() }
        try #require(getuid() == 0, "mounts a tmpfs inside the backing directory: needs root")
        try #require(mkdir(backing.path + "/inside", 0o755) == 0)
        try #require(mount("tmpfs", backing.path + "/inside", "tmpfs", 0, "size=1m") == 0)
        defer { _ = umount2(backing.path + "/inside", Int32(MNT_DETACH)) }
        let table = InodeTable(rootFD: backing.rootFD, rootStat: backing.rootInfo, descriptorBudget: 8)
        try #require(table.usesHandles, "needs file handles on the backing (root, ext4)")
        let (insideFD, insideInfo) = try table.openChild(named: "inside", in: table.root)
        let inside = table.remember(fd: insideFD, info: insideInfo, in: table.root, name: "inside")
        #expect(inside.device != table.root.device)
        let files = try (0..<24).map { index throws(Errno) -> Inode in
            let name = "f\(index)"
            close(open(backing.path + "/inside/" + name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
            let (fd, info) = try table.openChild(named: name, in: inside)
            return table.remember(fd: fd, info: info, in: inside, name: name)
        }
        #expect(files.allSatisfy { $0.handle == nil }, "no handle taken on another filesystem")
        let evicted = files.filter { !table.holdsDescriptor($0) }
        #expect(!evicted.isEmpty && table.openDescriptors <= table.descriptorBudget, "evicted past the budget")
        for file in evicted {
            let number = table.withFD(file, orElse: { _ in UInt64(0) }) { fd in
                var info = stat()
                return fstat(fd, &info) == 0 ? UInt64(info.st_ino) : 0
            }
            #expect(number == file.number, "opened again by its name, the item itself")
        }
        let reading = try table.openItem(of: files[0], flags: O_RDONLY | O_CLOEXEC).get()
        var info = stat()
        #expect(fstat(reading, &info) == 0 && UInt64(info.st_ino) == files[0].number)
        close(reading)
    }
}

/// A mount of the root's own filesystem inside the backing directory (here a read-only bind
/// mount of a directory outside it): its items get no handle, as a handle would open them
/// through the root's mount, writable; they are opened by name, through their own mount.
@Suite struct OtherMountNodesTests {
    @Test func anItemOnAReadOnlyBindMountIsOpenedThroughItsMount() throws {
        let backing = try FreshBacking("coordfs-bind-mount")
        defer { backing.remove() }
        let outside = try FreshBacking("coordfs-bind-source")
        defer { outside.remove() }
        try #require(getuid() == 0, "bind-mounts a directory inside the backing directory: needs root")
        try #require(mkdir(backing.path + "/inside", 0o755) == 0)
        close(open(outside.path + "/kept", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
        try #require(mount(outside.path, backing.path + "/inside", nil, UInt(MS_BIND), nil) == 0)
        defer { _ = umount2(backing.path + "/inside", Int32(MNT_DETACH)) }
        let readOnly = UInt(MS_BIND | MS_REMOUNT | MS_RDONLY)
        try #require(mount(nil, backing.path + "/inside", nil, readOnly, nil) == 0)
        close(open(backing.path + "/writable", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
        let table = InodeTable(rootFD: backing.rootFD, rootStat: backing.rootInfo, descriptorBudget: 8)
        try #require(table.stableIDs != nil, "needs stable ids (root, ext4)")
        let (insideFD, insideInfo) = try table.openChild(named: "inside", in: table.root)
        let inside = table.remember(fd: insideFD, info: insideInfo, in: table.root, name: "inside")
        #expect(inside.device == table.root.device && inside.onAnotherMount && !inside.id.isStable)
        #expect(try table.rememberUnopened(named: "kept", in: inside) == nil, "not looked up by handle")
        let (keptFD, keptInfo) = try table.openChild(named: "kept", in: inside)
        let kept = table.remember(fd: keptFD, info: keptInfo, in: inside, name: "kept")
        #expect(kept.onAnotherMount && kept.handle == nil && !kept.id.isStable)
        switch table.openItem(of: kept, flags: O_WRONLY | O_CLOEXEC) {
        case .failure(let failure): #expect(failure.code == EROFS, "its mount's flags: \(failure)")
        case .success(let fd):
            close(fd)
            Issue.record("opened for writing on a read-only mount")
        }
        let reading = try table.openItem(of: kept, flags: O_RDONLY | O_CLOEXEC).get()
        close(reading)
        // On the root's own mount: opened from its handle, writable.
        let writable = try #require(try table.rememberUnopened(named: "writable", in: table.root)).0
        #expect(writable.id.isStable && !writable.onAnotherMount)
        let writing = try table.openItem(of: writable, flags: O_WRONLY | O_CLOEXEC).get()
        close(writing)
    }
}
