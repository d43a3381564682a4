import CFuse3
import CFusePassthrough
import CoordinationRuntime
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// What the mount tells the kernel unasked, through its session.
extension Filesystem {
    /// The FUSE device's descriptor of this mount's session (-1 before it is mounted).
    var device: Int32 { session.load(ordering: .relaxed).map { fuse_session_fd(OpaquePointer($0)) } ?? -1 }

    /// Tells the kernel to forget the attributes it keeps of `inode` (attributes only: no
    /// page is touched, and no lock of the inode is taken, so a handler may send it).
    func invalidateAttributes(of inode: Inode) {
        guard let session = session.load(ordering: .relaxed) else { return }
        _ = fuse_lowlevel_notify_inval_inode(OpaquePointer(session), fuse_ino_t(inode.id.value), -1, 0)
    }

    /// `invalidateAttributes(of:)` for every known node `which` names.
    func invalidateAttributes(of which: (Inode) -> Bool) {
        for node in inodes.knownNodes where which(node) { invalidateAttributes(of: node) }
    }

    /// Tells the kernel to forget what it keeps of `inode`: its attributes, and with `pages`
    /// its cached pages too (its content changed behind the mount).
    func invalidate(_ inode: Inode, pages: Bool) {
        guard let session = session.load(ordering: .relaxed) else { return }
        _ = fuse_lowlevel_notify_inval_inode(OpaquePointer(session), fuse_ino_t(inode.id.value), pages ? 0 : -1, 0)
    }

    /// Tells the kernel to forget the entry `name` of `directory`, or that it has none: the
    /// next lookup of the name comes to the mount. The kernel takes the directory's lock for
    /// it: never sent from a request's handler.
    ///
    /// A node that is no directory has no entries: the backing watch finds a changed
    /// directory's node by its inode number, which a file may have taken once the directory
    /// was removed (the kernel would answer ENOTDIR, and libfuse log it).
    func invalidateEntry(named name: String, in directory: Inode) {
        guard directory.isDirectory, let session = session.load(ordering: .relaxed) else { return }
        _ = FileSystemName.withCString(name) { bytes in
            fuse_lowlevel_notify_inval_entry(
                OpaquePointer(session), fuse_ino_t(directory.id.value), bytes, strlen(bytes))
        }
    }

    /// Tells the kernel to forget what it keeps of every node the mount knows, and every name:
    /// after changes behind the mount that were lost. Names go at once, where the kernel knows
    /// how (Linux 6.16), those it keeps as missing too, so that a file made behind the mount
    /// meanwhile shows where a lookup had found nothing. Elsewhere each known node's name is
    /// forgotten, and with a directory's the names below it; a missing name in the root, which
    /// has no name, is kept until its time runs out.
    func invalidateEverything() {
        let namesForgotten = device >= 0 && cfs_notify_increment_epoch(device) == 0
        if namesForgotten { statistics.allNamesForgotten.add(1, ordering: .relaxed) }
        for node in inodes.knownNodes {
            invalidate(node, pages: true)
            if namesForgotten { continue }
            let place = inodes.placement(of: node)
            if node.id != InodeTable.rootID, let parent = inodes[place.parent] {
                invalidateEntry(named: place.name, in: parent)
            }
        }
    }
}
