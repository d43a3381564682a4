import LinuxSystem
import CLinux
import CFusePassthrough
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// lookup, forget, getattr, setattr, readlink, statfs, access. Metadata reads are not
/// coordinated; setattr is a write (metadata-only unless it truncates).
extension Filesystem {
    func lookup(_ reply: consuming Reply, _ parentID: NodeID, _ name: String) {
        if name == "." || name == ".." { return lookupByHandle(reply, parentID, name) }
        guard let parent = inodes[parentID], !isVersionStore(parentID, name) else { return reply.error(ENOENT) }
        let readPoint = watchedWrites.readPoint
        do {
            let (inode, info) = try lookupNode(parent, name)
            reply.entry(
                inode, shown(info), timeout: timeout(onDevice: inode.device),
                attributeTimeout: attributeTimeout(for: info, of: inode, readSince: readPoint))
        } catch  where error.code == ENOENT {
            // A negative entry the kernel may cache: creations through the mount update it, and
            // those behind it are forgotten as they come (`BackingWatch`), so a create need not
            // be preceded by a LOOKUP each time.
            reply.negativeEntry(timeout: timeout(onDevice: parent.device))
        } catch {
            reply.error(error)
        }
    }

    /// The kernel's LOOKUP of "." in a node (a file handle of it, opened: the node itself) and
    /// of ".." (its parent, to reconnect a directory a handle named), for nodes it may have
    /// forgotten: see `InodeTable.revive`.
    private func lookupByHandle(_ reply: consuming Reply, _ id: NodeID, _ name: String) {
        let readPoint = watchedWrites.readPoint
        do throws(Errno) {
            if name == "." {
                let (inode, info) = try inodes.revive(id, countingLookup: true)
                return reply.entry(
                    inode, shown(info), timeout: timeout(onDevice: inode.device),
                    attributeTimeout: attributeTimeout(for: info, of: inode, readSince: readPoint))
            }
            let (node, _) = try inodes.revive(id, countingLookup: false)
            guard node.isDirectory else { return reply.error(ENOTDIR) }
            let parentID = id == InodeTable.rootID ? id : inodes.placement(of: node).parent
            let (parent, info) = try inodes.revive(parentID, countingLookup: true)
            reply.entry(
                parent, shown(info), timeout: timeout(onDevice: parent.device),
                attributeTimeout: attributeTimeout(for: info, of: parent, readSince: readPoint))
        } catch {
            reply.error(error)
        }
    }

    func forget(_ id: NodeID, _ count: UInt64) { inodes.forget(id, count) }

    /// A BATCH_FORGET's nodes and counts.
    func forget<Forgets: Collection<(NodeID, UInt64)>>(_ forgets: Forgets) { inodes.forget(forgets) }

    /// After a FORGET or BATCH_FORGET of `items` items: counts it and, while the io_uring
    /// queues serve everything else, waits a moment before this thread reads `/dev/fuse` again.
    /// The kernel hands a reader all the forgets queued by then in one BATCH_FORGET; read as
    /// they come, each unlink (and each item the kernel drops from its cache) would wake a
    /// thread of its own. What else comes that way (an interrupt, a notification's reply) waits
    /// at most this long. Through `/dev/fuse` alone forgets are not paced: every request would
    /// wait behind them; nor on a queue's own thread, should a kernel send them through the
    /// rings, where the CPU's other requests wait behind it.
    func forgetRequestServed(items: Int) {
        statistics.forgetRequests.add(1, ordering: .relaxed)
        statistics.forgotten.add(items, ordering: .relaxed)
        guard cfs_ring_serving() == 0, forgetsArePaced else { return }
        var pause = timespec(tv_sec: 0, tv_nsec: Self.forgetPause)
        _ = nanosleep(&pause, nil)
    }

    /// Nanoseconds a device reader waits after a forget (`forgetRequestServed`): the longer the
    /// pause, the more forgets one BATCH_FORGET gathers.
    static let forgetPause = 5_000_000

    /// Whether the io_uring queues serve this mount, so that `/dev/fuse` carries only forgets,
    /// interrupts and notifications' replies.
    var forgetsArePaced: Bool { cfs_ring_facts(device).queues > 0 }

    /// The kernel asks for attributes it did not keep (or no longer): a file asked about
    /// again is marked for its writes behind the mount, and kept long from then on.
    func getattr(_ reply: consuming Reply, _ id: NodeID, _ handle: UInt64?) {
        statistics.attributeRequests.add()
        var info = stat()
        var readPoint = watchedWrites.readPoint
        if let file = handle.flatMap({ files[$0] }) {
            if let failure = fstat(file.fd, &info).failure { return reply.error(failure) }
            watchWritesIfAsked(file.inode, fd: file.fd, &info, readSince: &readPoint)
            return reply.attr(shown(info), timeout: attributeTimeout(for: info, of: file.inode, readSince: readPoint))
        }
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        do {
            info = try inodes.withFD(inode) { fd throws(Errno) in
                var info = try statOf(fd)
                watchWritesIfAsked(inode, fd: fd, &info, readSince: &readPoint)
                return info
            }
            reply.attr(shown(info), timeout: attributeTimeout(for: info, of: inode, readSince: readPoint))
        } catch {
            reply.error(error)
        }
    }

    struct AttributeChange {
        var mode: mode_t?
        var uid: uid_t?
        var gid: gid_t?
        var size: off_t?
        var atime: timespec?
        var mtime: timespec?
    }

    func setattr(_ reply: consuming Reply, _ id: NodeID, _ change: AttributeChange, _ handle: UInt64?) {
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        let open = handle.flatMap { files[$0] }
        // Truncation changes contents: a plain write; through an open that writes in place, a
        // write in place that the other writers in place share (U2: SQLite's checkpoint sizes
        // the database with ftruncate while other connections have it open). The rest is
        // metadata (O9). A log's truncation (a file with appending opens: logrotate's
        // copytruncate, `truncate -s 0`) leaves its appenders appending at the new end and its
        // readers reading a prefix, as they share it already (U1): it does not wait for them.
        var options: WritingOptions =
            change.size == nil
            ? .contentIndependentMetadataOnly
            : open?.writesInPlace == true ? .sharingWriters : []
        if change.size != nil && inode.appenders.load(ordering: .relaxed) > 0 { options.formUnion(Self.logRotation) }
        // A process that holds the file open for writing (tar's fchown, fchmod and futimens; the
        // futimens of touch on the file it just made) changes its attributes as part of that
        // access: the open already holds the write and has asked its presenters, and its release
        // tells them of the change. Taken as a write of its own, it would wait for nobody but cost
        // a full coordination, and touch's watchers would hear of the change before the file
        // appeared. So too beside other writers in place, or with an open let past a break:
        // otherwise it would wait for the others' opens (root's SQLite fchowns the `-wal` and
        // `-shm` another connection keeps open), up to the break time.
        if change.size == nil, inode.writers.load(ordering: .relaxed) != 0,
            let process = coordinator.callingProcess(reply.caller, now: coarseMilliseconds()),
            inode.isWritten(by: process)
        {
            statistics.coordinated.add()
            statistics.coveredByOwnOpen.add(1, ordering: .relaxed)
            return apply(change, inode, open, reply, claim: MountClaim(nil, coordinator))
        }
        // A truncation may free a big file's blocks, for as long as the disk takes: it does not
        // pass the quiet gate, whose next closer would wait for it. The kernel keeps the inode
        // locked meanwhile, as for every setattr: every write of the file waits behind it.
        coordinator.coordinate(
            reply, ItemIntent(kind: .writing(options), node: inode, isDirectory: inode.isDirectory, inodeLocked: true),
            forTheCall: change.size == nil
        ) { [self] reply, claim in
            apply(change, inode, open, reply, claim: claim)
        }
    }

    /// Makes `change` (of the file's `open`, if it came through one) and answers the request.
    private func apply(
        _ change: AttributeChange, _ inode: Inode, _ open: OpenFile?, _ reply: consuming Reply,
        claim: consuming MountClaim
    ) {
        let readPoint = watchedWrites.readPoint
        let caller = reply.caller
        do {
            let info = try inodes.withFD(inode) { fd throws(Errno) -> stat in
                // A truncation by path of a file renamed over an instant before is refused as an
                // open for writing of it is (`refusingReplaced`), and kept first as a rewrite is.
                if change.size != nil, open == nil, let refusal = refusingReplaced(fd) { throw refusal }
                if let size = change.size, let refusal = keepBeforeTruncating(inode, fd, to: size, by: caller) {
                    throw refusal
                }
                try apply(change, to: fd, open: open)
                if change.size != nil {
                    open?.written.store(true, ordering: .relaxed)
                    if !caller.mayKeepPrivilegeBits { dropPrivilegeBits(open?.fd ?? fd, clearedFor: caller) }
                }
                if let open {
                    var info = stat()
                    _ = try check(fstat(open.fd, &info))
                    return info
                }
                return try statOf(fd)
            }
            claim.end(IntentOutcome(existedBefore: true, existsAfter: true, changed: true))
            if let failure = syncAttributes(of: inode, through: open) { return reply.error(failure) }
            reply.attr(shown(info), timeout: attributeTimeout(for: info, of: inode, readSince: readPoint))
        } catch {
            claim.end(IntentOutcome(existedBefore: true, existsAfter: true, changed: false))
            reply.error(error)
        }
    }

    private func apply(_ change: AttributeChange, to inodeFD: Int32, open: OpenFile?) throws(Errno) {
        let path = procPath(inodeFD)
        if let mode = change.mode {
            if let open { _ = try check(fchmod(open.fd, mode)) } else { _ = try check(chmod(path, mode)) }
        }
        if change.uid != nil || change.gid != nil {
            _ = try check(
                fchownat(
                    inodeFD, "", change.uid ?? uid_t.max, change.gid ?? gid_t.max,
                    CFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
        }
        if let size = change.size {
            if let open { _ = try check(ftruncate(open.fd, size)) } else { _ = try check(truncate(path, size)) }
        }
        if change.atime != nil || change.mtime != nil {
            var times = [
                change.atime ?? timespec(tv_sec: 0, tv_nsec: Int(CFS_UTIME_OMIT)),
                change.mtime ?? timespec(tv_sec: 0, tv_nsec: Int(CFS_UTIME_OMIT))
            ]
            if let open {
                _ = try check(futimens(open.fd, &times))
            } else {
                _ = try check(utimensat(AT_FDCWD, path, &times, 0))
            }
        }
    }

    func readlink(_ reply: consuming Reply, _ id: NodeID) {
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        withFD(inode, answering: reply) { reply, fd in
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let count = readlinkat(fd, "", &buffer, buffer.count - 1)
            if let failure = count.failure { return reply.error(failure) }
            reply.readlink(buffer)  // NUL-terminated: the buffer was zeroed, and count < its size
        }
    }

    func statfs(_ reply: consuming Reply, _ id: NodeID) {
        var info = statvfs()
        // Every item of the mount is on the backing filesystem: the root answers for all.
        if let failure = statvfs(procPath(inodes.rootDescriptor), &info).failure { return reply.error(failure) }
        reply.statfs(info)
    }

    func access(_ reply: consuming Reply, _ id: NodeID, _ mask: Int32) {
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        withFD(inode, answering: reply) { reply, fd in
            if let failure = faccessat(AT_FDCWD, procPath(fd), mask, 0).failure { return reply.error(failure) }
            reply.ok()
        }
    }
}
