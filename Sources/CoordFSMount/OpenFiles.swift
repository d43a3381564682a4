import FileCoordination
import Foundation
import Synchronization

/// An open file or directory of the mount: its backing descriptor and the intent it holds for
/// the life of the open (SPEC §3).
final class OpenFile: @unchecked Sendable {
    let fd: Int32
    let inode: Inode
    let claim: RequestClaim?
    /// Whether anything was written through it: its release then tells presenters.
    let written = Atomic<Bool>(false)
    /// Whether it was created by this open (for the notification at release).
    let created: Bool
    /// Size and times at the open of a writable open served by kernel passthrough: its writes
    /// never reach the mount, so its release compares the file with these.
    let atOpen: stat?
    /// Directory streams for readdir, opened lazily.
    var directory: OpaquePointer?

    init(fd: Int32, inode: Inode, claim: RequestClaim?, created: Bool, passthrough: Bool = false, writes: Bool = false) {
        self.fd = fd
        self.inode = inode
        self.claim = claim
        self.created = created
        var info = stat()
        // A created file is reported as new whatever was written: nothing to compare.
        atOpen = passthrough && writes && !created && fstat(fd, &info) == 0 ? info : nil
    }

    /// Whether the file changed since the open, as far as the mount can tell.
    func changed(now: stat?) -> Bool {
        if written.load(ordering: .relaxed) { return true }
        guard let before = atOpen else { return false }
        guard let now else { return true }
        return before.st_size != now.st_size || before.st_mtim.tv_sec != now.st_mtim.tv_sec
            || before.st_mtim.tv_nsec != now.st_mtim.tv_nsec || before.st_ctim.tv_sec != now.st_ctim.tv_sec
            || before.st_ctim.tv_nsec != now.st_ctim.tv_nsec
    }
}

/// Open files by handle: the handle the kernel hands back is the retained `OpenFile` itself, so
/// a read or a write finds its file with no lock and no lookup. The kernel keeps a handle valid
/// from the open's reply until its release.
final class OpenFileTable: Sendable {
    private let open = Atomic<Int>(0)

    func insert(_ file: OpenFile) -> UInt64 {
        open.add(1, ordering: .relaxed)
        return UInt64(UInt(bitPattern: Unmanaged.passRetained(file).toOpaque()))
    }

    subscript(handle: UInt64) -> OpenFile? {
        guard let pointer = UnsafeRawPointer(bitPattern: UInt(handle)) else { return nil }
        return Unmanaged<OpenFile>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// Ends the handle (at release): the file is the caller's from now on.
    func remove(_ handle: UInt64) -> OpenFile? {
        guard let pointer = UnsafeRawPointer(bitPattern: UInt(handle)) else { return nil }
        open.subtract(1, ordering: .relaxed)
        return Unmanaged<OpenFile>.fromOpaque(pointer).takeRetainedValue()
    }

    var count: Int { open.load(ordering: .relaxed) }
}
