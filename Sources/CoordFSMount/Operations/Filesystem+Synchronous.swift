import LinuxSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `-o sync` and `-o dirsync`. The kernel makes a FUSE mount's writes synchronous by itself (an
/// FSYNC after a buffered write; the write's flags on a direct_io one, `OpenFile.syncOwedToDirectWrites`),
/// but asks nothing after a change of names or attributes, nor after what reaches the daemon in
/// place of a write: the mount syncs those before it answers, as a local filesystem would. Each
/// returns nil when the change may be answered, else the sync's errno.
extension Filesystem {
    /// What the mount syncs before it answers.
    struct Synchronicity {
        /// `dirsync` (or `sync`): changes of names.
        var names: Bool
        /// `sync`: everything.
        var everything: Bool
    }

    /// Under `dirsync` (or `sync`): the directories whose names changed (`other`: a rename's
    /// second, when it is another).
    func syncNames(in directory: Inode, and other: Inode? = nil) -> Errno? {
        guard synchronicity.names else { return nil }
        if let failure = fsyncDirectory(directory) { return failure }
        if let other, other !== directory { return fsyncDirectory(other) }
        return nil
    }

    /// Under `sync`: an item whose mode, owner, times, size or extended attributes changed, by
    /// `open` when the change came through one. Regular files and directories only: opening
    /// anything else to sync it could wait (a FIFO) or open a device.
    func syncAttributes(of inode: Inode, through open: OpenFile? = nil) -> Errno? {
        guard synchronicity.everything else { return nil }
        if let open {
            statistics.syncedAttributes.add(1, ordering: .relaxed)
            return Glibc.fsync(open.fd).failure
        }
        return inodes.withFD(inode, orElse: { $0 }) { fd -> Errno? in
            var info = stat()
            if let failure = fstat(fd, &info).failure { return failure }
            let type = info.st_mode & S_IFMT
            guard type == S_IFREG || type == S_IFDIR else { return nil }
            statistics.syncedAttributes.add(1, ordering: .relaxed)
            return fsync(itemAt: fd)
        }
    }

    /// Under `sync`: the data of a file changed without a write (a fallocate, a copy_file_range's
    /// output, an open's O_TRUNC).
    func syncData(of fd: Int32) -> Errno? {
        guard synchronicity.everything else { return nil }
        statistics.syncedWrites.add(1, ordering: .relaxed)
        return fdatasync(fd).failure
    }

    private func fsyncDirectory(_ directory: Inode) -> Errno? {
        statistics.syncedDirectories.add(1, ordering: .relaxed)
        return inodes.withFD(directory, orElse: { $0 }) { fsync(itemAt: $0) }
    }

    /// fsync of the item a node's descriptor names: that descriptor is O_PATH, which fsync
    /// refuses, so the item is opened again for it.
    private func fsync(itemAt fd: Int32) -> Errno? {
        let opened = Glibc.open(procPath(fd), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        if let failure = opened.failure { return failure }
        defer { close(opened) }
        return Glibc.fsync(opened).failure
    }
}
