import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// getlk, setlk (and setlkw), flock: served by a host of a shared store, whose programs' locks
/// must exclude the other hosts' (docs/cluster.md, file locks). Elsewhere the mount asks the
/// kernel for neither capability at INIT, and the kernel keeps every lock itself, as before.
///
/// A lock request is answered from the host's lock table (`FileLocks`), under the file's lock
/// delegation from the cluster (`HostLocks`). One that waits — for a lock of another program
/// here, or for the delegation from another host — is parked like a coordinated request: its
/// reply waits in a `PendingReply`, no thread (nor io_uring entry's queue) waits with it, and
/// the kernel's interrupt (a signal to the caller) ends it with EINTR.
///
/// Locks are not coordination: nothing here passes through the mount's coordination (claims,
/// the engine, the accesses' delegations, `WaitingRequests`). The hooks elsewhere are few: the
/// trampolines and the INIT capability (`FuseBridge`), FLUSH and RELEASE dropping their locks
/// (`Filesystem+Files`), and every close sending FLUSH (`sendsNoFlush`).
extension Filesystem {
    /// Serves flock and fcntl locks from now on, each under `host`'s delegations: set before
    /// the session runs (the capabilities are asked for at INIT).
    package func serveLocks(across host: any HostLocks) {
        fileLocks = FileLocks(host: host, waitLimit: configuration.lockWaitLimit)
    }

    /// The files this host's programs hold locks of (paths below the store's root), and whether
    /// any lock of each is exclusive: what another host's recall of a lock delegation waits for.
    package func lockHolders() -> [(path: String, exclusive: Bool)] {
        fileLocks?.holders() ?? []
    }

    /// F_GETLK (and F_OFD_GETLK): the lock in the way of the one described, or none (F_UNLCK).
    /// Another host's programs' locks show as a lock of the whole file by no process.
    func getlk(_ reply: consuming Reply, _ id: NodeID, _ handle: UInt64, owner: UInt64, _ asked: KernelLock) {
        guard let fileLocks else { return unserved(reply, "getlk") }
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        let request = LockRequest(
            node: id, handle: handle, kind: .posix, owner: LockOwner(owner), type: asked.type, range: asked.range,
            pid: asked.pid, path: targets.relativePath(inode))
        let pending = PendingReply(reply)
        fileLocks.test(request) { [self] found in
            let reply = pending.take()
            switch found {
            case .free: reply.lock(type: F_UNLCK, LockRange(0, 0), pid: 0)
            case .held(let lock): reply.lock(type: lock.exclusive ? F_WRLCK : F_RDLCK, lock.range, pid: lock.pid)
            case .otherHost(let exclusive): reply.lock(type: exclusive ? F_WRLCK : F_RDLCK, .wholeFile, pid: 0)
            case .refused(let why):
                if fileLocks.mayLog() { logger.error("cluster locks: \(why); answering ENOLCK") }
                reply.error(ENOLCK)
            }
        }
    }

    /// F_SETLK, F_SETLKW (`waits`), F_OFD_SETLK and F_OFD_SETLKW: a POSIX lock taken, changed or
    /// dropped. (Its drop at close comes as FLUSH, `flush`.)
    func setlk(
        _ reply: consuming Reply, _ id: NodeID, _ handle: UInt64, owner: UInt64, _ asked: KernelLock, waits: Bool
    ) {
        lock(reply, id, handle, .posix, LockOwner(owner), asked.type, asked.range, pid: asked.pid, waits: waits)
    }

    /// flock(2): `operation` LOCK_SH, LOCK_EX or LOCK_UN, with LOCK_NB when it does not wait.
    /// Its owner is the open file description; its drop at the last close comes with RELEASE.
    func flock(_ reply: consuming Reply, _ id: NodeID, _ handle: UInt64, owner: UInt64, operation: Int32) {
        let type: LockType
        switch operation & ~LOCK_NB {
        case LOCK_SH: type = .shared
        case LOCK_EX: type = .exclusive
        case LOCK_UN: type = .unlock
        default: return reply.error(EINVAL)
        }
        lock(reply, id, handle, .flock, LockOwner(owner), type, .wholeFile, pid: 0, waits: operation & LOCK_NB == 0)
    }

    private func lock(
        _ reply: consuming Reply, _ id: NodeID, _ handle: UInt64, _ kind: LockKind, _ owner: LockOwner,
        _ type: LockType,
        _ range: LockRange, pid: Int32, waits: Bool
    ) {
        guard let fileLocks else { return unserved(reply, kind == .flock ? "flock" : "setlk") }
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        let request = LockRequest(
            node: id, handle: handle, kind: kind, owner: owner, type: type, range: range, pid: pid,
            path: type == .unlock ? "" : targets.relativePath(inode))
        let number = fileLocks.nextNumber()
        // Registered before the request may wait (an unlock never does): an interrupt that
        // comes first is kept by `FileLocks` until the request begins to wait, and ends it then.
        if type != .unlock { reply.onLockInterrupt(number) }
        let pending = PendingReply(reply)
        fileLocks.set(request, number: number, waits: waits) { [self] answer in
            if case .refused(let why) = answer, fileLocks.mayLog() {
                logger.error("cluster locks: \(why); answering ENOLCK")
            } else if answer == .timedOut, fileLocks.mayLog() {
                logger.notice(
                    "a lock of '\(request.path)' was waited for as long as the kernel's request timeout allows; answering ENOLCK"
                )
            }
            let reply = pending.take()
            if answer == .granted { reply.ok() } else { reply.error(answer.errno) }
        }
    }

    /// The kernel interrupted lock request `number` (`lockInterruptTrampoline`).
    func interruptLock(_ number: UInt) { fileLocks?.cancel(number) }

    /// A lock request on a mount that does not serve locks: the kernel sends none (the
    /// capabilities were not asked for), so one is a bug, said once.
    private func unserved(_ reply: consuming Reply, _ operation: String) {
        if Self.unservedLogged.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged {
            logger.error("\(operation) reached a mount that serves no locks; answering ENOSYS")
        }
        reply.error(ENOSYS)
    }

    /// Whether a lock request reached a mount that serves none (said once a process).
    private static let unservedLogged = Atomic<Bool>(false)
}
