import LinuxSystem
import CLinux
import CFusePassthrough
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Extended attributes, passed through. Setting or removing one is a metadata-only write. The
/// mount root answers `user.coordfs.*` attributes of its own (the control socket, later).
extension Filesystem {
    func getxattr(_ reply: consuming Reply, _ id: NodeID, _ name: String, _ size: Int) {
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        if name == "user.coordfs.state" {
            // Every path held, waited for or presented, by anyone: the mount's owner's and
            // root's to read (`coordfs status` shows others what they may learn).
            let caller = reply.caller.uid
            if caller != 0 && caller != geteuid() && inode.id == InodeTable.rootID { return reply.error(EACCES) }
        }
        if let own = ownAttribute(inode, name) { return answer(reply, Array(own.utf8), size) }
        let isCapability = name == "security.capability"
        if isCapability && inode.hasNoCapability.load(ordering: .relaxed) { return reply.error(ENODATA) }
        withFD(inode, answering: reply) { reply, fd in
            if size == 0 {
                let needed = FileSystemName.withCString(name) { cfs_getxattr(procPath(fd), $0, nil, 0) }
                if let failure = needed.failure {
                    if isCapability && failure.code == ENODATA { inode.hasNoCapability.store(true, ordering: .relaxed) }
                    return reply.error(failure)
                }
                return reply.xattrSize(needed)
            }
            var buffer = [UInt8](repeating: 0, count: size)
            let count = FileSystemName.withCString(name) { cfs_getxattr(procPath(fd), $0, &buffer, size) }
            if let failure = count.failure { return reply.error(failure) }
            reply.buffer(buffer, count: count)
        }
    }

    func listxattr(_ reply: consuming Reply, _ id: NodeID, _ size: Int) {
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        withFD(inode, answering: reply) { reply, fd in
            if size == 0 {
                let needed = cfs_listxattr(procPath(fd), nil, 0)
                if let failure = needed.failure { return reply.error(failure) }
                return reply.xattrSize(needed)
            }
            var buffer = [CChar](repeating: 0, count: size)
            let count = cfs_listxattr(procPath(fd), &buffer, size)
            if let failure = count.failure { return reply.error(failure) }
            reply.buffer(buffer, count: count)
        }
    }

    func setxattr(_ reply: consuming Reply, _ id: NodeID, _ name: String, _ value: [UInt8], _ flags: Int32) {
        inodes[id]?.hasNoCapability.store(false, ordering: .relaxed)
        let caller = reply.caller
        let setsAccessACL = name == Self.accessACL && !caller.mayKeepPrivilegeBits
        changeAttribute(reply, id) { fd in
            let result = FileSystemName.withCString(name) { cfs_setxattr(procPath(fd), $0, value, value.count, flags) }
            if result == 0 && setsAccessACL { Self.dropSetGroup(of: fd, unlessIn: caller) }
            return result
        }
    }

    static let accessACL = "system.posix_acl_access"

    /// An access ACL sets the mode's group bits, and the kernel then clears setgid for a caller
    /// neither in the item's group nor privileged (posix_acl_update_mode); the backing
    /// filesystem, asked by the daemon, keeps it (fstests generic/375). Cleared here so.
    private static func dropSetGroup(of fd: Int32, unlessIn caller: RequestCaller) {
        var info = stat()
        guard fstatat(fd, "", &info, CFS_AT_EMPTY_PATH) == 0, info.st_mode & S_ISGID != 0,
            !caller.isInGroup(info.st_gid)
        else { return }
        // By path: `fd` is an O_PATH descriptor, which fchmod refuses.
        _ = chmod(procPath(fd), info.st_mode & 0o7777 & ~S_ISGID)
    }

    func removexattr(_ reply: consuming Reply, _ id: NodeID, _ name: String) {
        inodes[id]?.hasNoCapability.store(false, ordering: .relaxed)
        changeAttribute(reply, id) { fd in FileSystemName.withCString(name) { cfs_removexattr(procPath(fd), $0) } }
    }

    private func changeAttribute(_ reply: consuming Reply, _ id: NodeID, _ change: @escaping @Sendable (Int32) -> Int32)
    {
        guard let inode = inodes[id] else { return reply.error(ENOENT) }
        coordinator.coordinate(
            reply,
            ItemIntent(
                kind: .writing(.contentIndependentMetadataOnly), node: inode,
                isDirectory: inode.isDirectory), forTheCall: true
        ) { reply, claim in
            let failure: Errno? = self.inodes.withFD(inode, orElse: { $0 }) { fd in change(fd).failure }
            claim.end(IntentOutcome(existedBefore: true, existsAfter: true, changed: failure == nil))
            if let failure = failure ?? self.syncAttributes(of: inode) { reply.error(failure) } else { reply.ok() }
        }
    }

    private func answer(_ reply: consuming Reply, _ value: [UInt8], _ size: Int) {
        if size == 0 { return reply.xattrSize(value.count) }
        if size < value.count { return reply.error(ERANGE) }
        reply.buffer(value, count: value.count)
    }

    /// Attributes coordfs answers itself: the control socket on every item, the rest on the root.
    private func ownAttribute(_ inode: Inode, _ name: String) -> String? {
        guard name.hasPrefix("user.coordfs.") else { return nil }
        // The socket is found from any item of the mount; the rest only on its root.
        if name == "user.coordfs.socket" { return socketPath }
        guard inode.id == InodeTable.rootID else { return nil }
        switch name {
        case "user.coordfs.backing": return configuration.backing
        case "user.coordfs.mode": return configuration.mode.rawValue
        case "user.coordfs.state": return domain.stateDump()
        case "user.coordfs.pid": return String(getpid())
        // Read by another mount of the same backing directory: whether the two coordinate.
        case "user.coordfs.cluster":
            return configuration.cluster.map { "\($0.endpoints.joined(separator: ","))\n\($0.host)\n\($0.store)" }
        case "user.coordfs.stats":
            let ring = cfs_ring_facts(device)
            return String(statistics.json.dropLast())
                + ",\"inodes\":\(inodes.count),\"inode_descriptors\":\(inodes.openDescriptors),"
                + "\"descriptor_budget\":\(inodes.descriptorBudget),\"open_file_limit\":\(backing.openFileLimit),\"open_files\":\(files.count),"
                + "\"inode_budget\":\(inodes.pool.inodeBudget),\"open_files_each_side\":\(files.budget.sideLimit),"
                + "\"open_files_per_user\":\(files.budget.perUser),\"socket_holds\":\(domain.accessorHolds.holds),"
                + "\"kernel_passthrough\":\(passthrough?.isEnabled == true ? 1 : 0),\"passthrough_opens\":\(passthrough?.backedOpens.load(ordering: .relaxed) ?? 0),"
                + "\"passthrough_refused\":\(passthrough?.refusedRegistrations.load(ordering: .relaxed) ?? 0),"
                + "\"max_threads\":\(configuration.maxThreads),\"ring_queues\":\(ring.queues),"
                + "\"kernel_lock_breaks\":\(coordinator.waitWatch.kernelLockBreaks.load(ordering: .relaxed)),"
                + "\"lock_time_breaks\":\(coordinator.waitWatch.lockTimeBreaks.load(ordering: .relaxed)),\"lock_time_waived\":\(coordinator.waitWatch.lockTimeWaived.load(ordering: .relaxed)),\"lock_time_refusals\":\(coordinator.waitWatch.lockTimeRefusals.load(ordering: .relaxed)),\"holds_revoked\":\(coordinator.waitWatch.holdsRevoked.load(ordering: .relaxed)),"
                + "\"versions_kept\":\(versions?.kept.load(ordering: .relaxed) ?? 0),\"versions_not_kept\":\(versions?.notKept.load(ordering: .relaxed) ?? 0),"
                + "\"lost_updates\":\(versions?.conflicts.load(ordering: .relaxed) ?? 0),\"stale_writes_refused\":\(versions?.refused.load(ordering: .relaxed) ?? 0),"
                + "\"version_bytes\":\(versions?.store.totalBytes ?? 0),"
                + "\"lease_breaks\":\(coordinator.waitWatch.leaseBreaks.load(ordering: .relaxed)),"
                + "\"ring_requests\":\(ring.served),\"ring_lane_requests\":\(ring.laned),\"ring_direct_reads\":\(ring.direct_reads),"
                + "\"ring_lanes_all\":\(ring.lanes_all),\"ring_lane_nodes\":\(ring.lane_nodes),"
                + "\"serve_nice\":\(ring.queues > 0 ? ring.queue_nice : statistics.workerNice.load(ordering: .relaxed))}"
        default: return nil
        }
    }
}
