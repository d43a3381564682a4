import FileCoordination
import Foundation
import Synchronization

/// An open file or directory of the mount: its backing descriptor and the intent it holds for
/// the life of the open (SPEC §3).
final class OpenFile: @unchecked Sendable {
    let fd: Int32
    let inode: Inode
    let claim: AccessClaim?
    /// Whether anything was written through it: its release then tells presenters.
    let written = Atomic<Bool>(false)
    /// Whether it was created by this open (for the notification at release).
    let created: Bool
    /// Directory streams for readdir, opened lazily.
    var directory: OpaquePointer?

    init(fd: Int32, inode: Inode, claim: AccessClaim?, created: Bool) {
        self.fd = fd
        self.inode = inode
        self.claim = claim
        self.created = created
    }
}

/// Open files by handle number (the `fh` the kernel hands back).
final class OpenFileTable: Sendable {
    private struct State {
        var files: [UInt64: OpenFile] = [:]
        var next: UInt64 = 1
    }
    private let state = Mutex(State())

    func insert(_ file: OpenFile) -> UInt64 {
        state.withLock { state in
            let handle = state.next
            state.next += 1
            state.files[handle] = file
            return handle
        }
    }

    subscript(handle: UInt64) -> OpenFile? { state.withLock { $0.files[handle] } }

    func remove(_ handle: UInt64) -> OpenFile? { state.withLock { $0.files.removeValue(forKey: handle) } }

    var count: Int { state.withLock { $0.files.count } }
}
