import CFuse3
import LinuxSystem
#if canImport(Glibc)
import Glibc
#endif

// What a kernel request brings besides its arguments, in the mount's own types: handlers see
// no libfuse type but through these and `Reply`.

/// Who made a request, as the kernel tells it: the calling thread and its filesystem ids and
/// umask (FUSE_DONT_MASK leaves modes unmasked). Read from libfuse's context when asked for.
struct RequestCaller {
    let uid: uid_t
    let gid: gid_t
    /// The calling thread (the kernel names threads, not processes).
    let thread: pid_t
    let umask: mode_t
    /// Root's writes keep setuid and setgid (CAP_FSETID); nobody else's do.
    var mayKeepPrivilegeBits: Bool { uid == 0 }

    /// Whether the caller is in `group`, as the kernel's in_group_p asks: its filesystem group,
    /// or else one of its supplementary groups, which the request does not carry (read from
    /// /proc/TID/status: only for what only they decide). A caller gone is in its own alone.
    func isInGroup(_ group: gid_t) -> Bool {
        group == gid || UnixSocket.groups(of: thread, primary: gid).contains(group)
    }
}

extension Reply {
    var caller: RequestCaller {
        let context = fuse_req_ctx(req).pointee
        return RequestCaller(
            uid: context.uid, gid: context.gid, thread: context.pid, umask: mode_t(context.umask) & 0o777)
    }

    /// Has `interrupted(token)` called when the kernel interrupts this request (a signal to its
    /// caller while it waits).
    func onInterrupt(_ token: UInt) {
        fuse_req_interrupt_func(req, interruptTrampoline, UnsafeMutableRawPointer(bitPattern: token))
    }

    /// `onInterrupt`, for a lock request: `Filesystem.interruptLock(token)` is called.
    func onLockInterrupt(_ token: UInt) {
        fuse_req_interrupt_func(req, lockInterruptTrampoline, UnsafeMutableRawPointer(bitPattern: token))
    }
}

/// The file info of an open, a create or an opendir: the caller's open flags, and the copy an
/// answer fills in (libfuse's own lives on its dispatcher's stack, gone once a handler that
/// waits has returned).
struct OpenRequest {
    let info: fuse_file_info
    var flags: Int32 { info.flags }

    init(_ info: UnsafeMutablePointer<fuse_file_info>) { self.info = info.pointee }
}

/// A lock as the kernel's request describes it (libfuse's `struct flock`, read by the shim).
struct KernelLock {
    let type: LockType
    let range: LockRange
    /// The caller's process, in the mount's pid namespace.
    let pid: Int32

    init(_ lock: cfs_lock) {
        type = lock.type == F_WRLCK ? .exclusive : lock.type == F_RDLCK ? .shared : .unlock
        range = LockRange(lock.start, lock.end)
        pid = lock.pid
    }
}

/// A write's data as the kernel delivered it (in the request, or in a pipe to splice from).
struct WriteData {
    let buffers: UnsafeMutablePointer<fuse_bufvec>

    /// Writes all of it to `fd` at `offset`: the count written, or -errno.
    func write(to fd: Int32, at offset: off_t) -> Int { cfs_write_buf(buffers, fd, offset) }
}

/// The entries of one READDIR or READDIRPLUS answer, packed as the kernel reads them.
struct DirectoryListing {
    private let req: fuse_req_t
    private(set) var buffer: [CChar]
    private(set) var used = 0

    init(for reply: borrowing Reply, size: Int) {
        req = reply.req
        buffer = [CChar](repeating: 0, count: size)
    }

    /// Adds an entry if it fits: false when it does not (the next READDIR starts at it).
    mutating func add(_ name: UnsafePointer<CChar>, number: ino_t, type: mode_t, next: off_t) -> Bool {
        let room = buffer.count - used
        let needed = buffer.withUnsafeMutableBufferPointer { pointer in
            cfs_add_direntry(req, pointer.baseAddress! + used, room, name, number, type, next)
        }
        guard needed <= room else { return false }
        used += needed
        return true
    }

    /// Adds an entry with its node and attributes (READDIRPLUS; `node` nil for "." and "..",
    /// which the kernel does not look up): false when it does not fit, and then the kernel
    /// has not looked the node up.
    mutating func add(
        _ name: UnsafePointer<CChar>, node: NodeID?, attributes: stat, timeout: Double, attributeTimeout: Double,
        next: off_t
    ) -> Bool {
        var parameters = fuse_entry_param()
        parameters.ino = fuse_ino_t(node?.value ?? 0)
        parameters.generation = node?.generation ?? 0
        parameters.attr = attributes
        if node != nil {
            parameters.attr_timeout = attributeTimeout
            parameters.entry_timeout = timeout
        }
        let room = buffer.count - used
        let needed = buffer.withUnsafeMutableBufferPointer { pointer in
            fuse_add_direntry_plus(req, pointer.baseAddress! + used, room, name, &parameters, next)
        }
        guard needed <= room else { return false }
        used += needed
        return true
    }
}
