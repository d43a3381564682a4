import LinuxSystem
import CFuse3
import CLinux
import CFusePassthrough
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: a request handle libfuse lets any thread answer, once.
/// One kernel request's answer. Not copyable: each answering method consumes it, so the compiler
/// refuses a second answer. A handler that waits passes it on (to `MountCoordinator.coordinate`'s body, or in a
/// `PendingReply` across threads); one dropped unanswered answers EIO, and stops debug builds.
struct Reply: ~Copyable, @unchecked Sendable {
    let req: fuse_req_t

    init(req: fuse_req_t) { self.req = req }

    deinit {
        fuse_reply_err(req, EIO)
        assertionFailure("a kernel request was never answered")
    }

    consuming func error(_ code: Int32) { fuse_reply_err(req, code); discard self }
    consuming func error(_ errno: Errno) { fuse_reply_err(req, errno.code); discard self }
    consuming func error(_ error: Error) { fuse_reply_err(req, (error as? Errno)?.code ?? EIO); discard self }
    consuming func ok() { fuse_reply_err(req, 0); discard self }
    consuming func none() { fuse_reply_none(req); discard self }

    /// `attributeTimeout`: how long the kernel keeps `info` (`timeout`, the name's, if nil).
    consuming func entry(_ inode: Inode, _ info: stat, timeout: Double, attributeTimeout: Double? = nil) {
        var entry = fuse_entry_param()
        entry.ino = fuse_ino_t(inode.id.value)
        entry.generation = inode.id.generation
        entry.attr = info
        entry.attr_timeout = attributeTimeout ?? timeout
        entry.entry_timeout = timeout
        fuse_reply_entry(req, &entry)
        discard self
    }

    consuming func negativeEntry(timeout: Double) {
        var entry = fuse_entry_param()
        entry.ino = 0
        entry.entry_timeout = timeout
        fuse_reply_entry(req, &entry)
        discard self
    }

    /// `size` bytes of `fd` at `offset` (fewer at the end of the file): read straight into the
    /// io_uring entry that carries the request, or otherwise spliced (or copied) by libfuse.
    consuming func data(from fd: Int32, offset: off_t, size: Int) {
        let answered = cfs_ring_reply_read(UnsafeMutableRawPointer(req), fd, Int64(offset), size)
        if answered == 1 { discard self; return }
        if answered < 0 { return error(-answered) }
        _ = cfs_reply_fd_data(req, fd, offset, size)
        discard self
    }

    consuming func attr(_ info: stat, timeout: Double) {
        var info = info
        fuse_reply_attr(req, &info, timeout)
        discard self
    }

    /// `fi` is a copy: libfuse's own lives on its dispatcher's stack, gone once a handler that
    /// waits has returned.
    /// `noFlush`: close(2) of it sends no FLUSH (see `Filesystem.sendsNoFlush`).
    consuming func open(_ fi: fuse_file_info, handle: UInt64, keepCache: Bool, directIO: Bool = false, noFlush: Bool) {
        var fi = fi
        cfs_file_info_set(&fi, handle, keepCache ? 1 : 0, directIO ? 1 : 0, noFlush ? 1 : 0)
        fuse_reply_open(req, &fi)
        discard self
    }

    /// An opendir's answer; `cacheListing`: the kernel may keep the listing across opens (until
    /// a change through the mount, or one behind it the mount sees, makes it forget it).
    consuming func openDirectory(_ fi: fuse_file_info, handle: UInt64, cacheListing: Bool) {
        var fi = fi
        cfs_file_info_set_directory(&fi, handle, cacheListing ? 1 : 0)
        fuse_reply_open(req, &fi)
        discard self
    }

    /// An open the kernel serves from backing file `backingID` (kernel passthrough).
    consuming func open(_ fi: fuse_file_info, handle: UInt64, backingID: Int32, noFlush: Bool) {
        var fi = fi
        cfs_file_info_set(&fi, handle, 0, 0, noFlush ? 1 : 0)
        cfs_reply_open_backed(UnsafeMutableRawPointer(req), &fi, backingID)
        discard self
    }

    /// `backingID`: served by kernel passthrough from that backing file.
    consuming func create(
        _ inode: Inode, _ info: stat, timeout: Double, attributeTimeout: Double? = nil, _ fi: fuse_file_info,
        handle: UInt64,
        directIO: Bool = false, backingID: Int32? = nil, noFlush: Bool
    ) {
        var fi = fi
        var entry = fuse_entry_param()
        entry.ino = fuse_ino_t(inode.id.value)
        entry.generation = inode.id.generation
        entry.attr = info
        entry.attr_timeout = attributeTimeout ?? timeout
        entry.entry_timeout = timeout
        cfs_file_info_set(&fi, handle, 0, directIO ? 1 : 0, noFlush ? 1 : 0)
        if let backingID {
            cfs_reply_create_backed(UnsafeMutableRawPointer(req), &entry, &fi, backingID)
        } else {
            fuse_reply_create(req, &entry, &fi)
        }
        discard self
    }

    consuming func written(_ count: Int) { fuse_reply_write(req, count); discard self }
    /// The first `count` elements of `array`, as bytes.
    consuming func buffer<Element>(_ array: [Element], count: Int) {
        let req = self.req
        discard self
        _ = array.withUnsafeBytes { bytes in
            fuse_reply_buf(
                req, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), count * MemoryLayout<Element>.stride)
        }
    }
    /// The target as its bytes: a link may point at a name that is not UTF-8.
    consuming func readlink(_ target: UnsafePointer<CChar>) { fuse_reply_readlink(req, target); discard self }
    consuming func statfs(_ info: statvfs) { var info = info; fuse_reply_statfs(req, &info); discard self }
    consuming func xattrSize(_ size: Int) { fuse_reply_xattr(req, size); discard self }
    consuming func lseek(_ offset: off_t) { fuse_reply_lseek(req, offset); discard self }
    /// A GETLK's answer: the lock in the way (`type` F_RDLCK or F_WRLCK, its range and its
    /// holder's pid), or F_UNLCK for none.
    consuming func lock(type: Int32, _ range: LockRange, pid: Int32) {
        _ = cfs_reply_lock(req, type, range.start, range.end, pid)
        discard self
    }
}

// @unchecked Sendable: taken once, by the one thread that ends the wait it was parked for.
/// A reply parked while its request waits, for the thread that ends the wait to answer.
/// Dropped untaken, its reply answers EIO.
final class PendingReply: @unchecked Sendable {
    private var reply: Reply?

    init(_ reply: consuming Reply) { self.reply = consume reply }

    /// The reply; taken a second time is a bug.
    func take() -> Reply {
        guard let reply = reply.take() else { preconditionFailure("a parked reply was taken twice") }
        return reply
    }
}
