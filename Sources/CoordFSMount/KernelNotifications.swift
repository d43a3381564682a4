import CFuse3
import Synchronization

// What the mount tells the kernel unasked, through its session.
extension Filesystem {
    /// The FUSE device's descriptor of this mount's session (-1 before it is mounted).
    var device: Int32 { session.load(ordering: .relaxed).map { fuse_session_fd(OpaquePointer($0)) } ?? -1 }

    /// Tells the kernel to forget the attributes it keeps of `inode` (attributes only: no
    /// page is touched, and no lock of the inode is taken, so a handler may send it).
    func invalidateAttributes(of inode: Inode) {
        guard let session = session.load(ordering: .relaxed) else { return }
        _ = fuse_lowlevel_notify_inval_inode(OpaquePointer(session), fuse_ino_t(inode.id), -1, 0)
    }
}
