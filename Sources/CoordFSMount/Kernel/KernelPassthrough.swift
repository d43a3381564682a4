import LinuxSystem
import CLinux
import CFusePassthrough
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Kernel passthrough (`CFusePassthrough/passthrough.c`): the kernel serves reads, writes and mmap of an
/// open file from a backing file registered with it, so the data path never reaches the daemon.
/// Opens and releases still do, and they are what coordination holds on to.
///
/// The kernel wants one backing file per inode while any open uses it, and fails (EIO) an open
/// that would mix passthrough and page-cached opens of one inode. So an inode's opens are all of
/// one kind until its last release, and its backing file is registered at the first open and
/// unregistered at the last release.
final class KernelPassthrough: Sendable {
    enum Mode: Equatable {
        /// Served by the kernel from backing file `id`.
        case backed(id: Int32)
        /// Through the daemon and the page cache.
        case cached
    }

    /// The opens of the inodes whose ids fall in one shard: a lock held across the kernel's
    /// registration of a backing file (a system call), so one of its own per shard, and creates
    /// and releases of files on other CPUs do not wait for it.
    private final class Shard: Sendable {
        let inodes = Mutex<[NodeID: (mode: Mode, opens: Int)]>([:])
    }

    /// The session's /dev/fuse descriptor once mounted; -1 while passthrough is unavailable.
    private let device = Atomic<Int32>(-1)
    private let shards = (0..<64).map { _ in Shard() }
    /// Backing devices whose files the kernel refused as backing files: a filesystem stacked
    /// as deep as the mount (an overlay mounted inside the backing, ELOOP) or whose files it
    /// cannot serve (EOPNOTSUPP). Their opens go through the mount without asking again.
    /// `refusing` is set once any is: most mounts never look at the set.
    private let refusingDevices = Mutex<Set<UInt64>>([])
    private let refusing = Atomic<Bool>(false)
    /// Opens the kernel served from a backing file, for the mount's statistics.
    let backedOpens = Atomic<Int>(0)
    /// Backing files the kernel refused, for the mount's statistics: one a device, once.
    let refusedRegistrations = Atomic<Int>(0)

    /// Turns passthrough on for a mounted session's device.
    func enable(device fd: Int32) { device.store(fd, ordering: .relaxed) }

    var isEnabled: Bool { device.load(ordering: .relaxed) >= 0 }

    /// Starts an open of `inode`, open at `fd` (the caller keeps it): the mode it must use. The
    /// first open's descriptor is registered as the inode's backing file. Only its place
    /// matters: the kernel serves each open from a file of its own, opened there with that
    /// open's flags and the daemon's rights, so a reader's descriptor serves a writer's open
    /// too (a write the backing refuses, a running program's, fails at the daemon's own open
    /// first). `device`: the backing device the file lies on. `prefersCached`: the first open of
    /// an inode is then served through the mount.
    func beginOpen(of inode: NodeID, on device: UInt64, fd: Int32, prefersCached: Bool = false) -> Mode {
        let session = self.device.load(ordering: .relaxed)
        let mode = shards[inode.shard].inodes.withLock { inodes -> Mode in
            if let current = inodes[inode] {
                // The inode cannot switch modes while any open uses it.
                inodes[inode] = (current.mode, current.opens + 1)
                return current.mode
            }
            let mode = session >= 0 && !prefersCached && !refuses(device) ? register(fd, on: device, session) : .cached
            inodes[inode] = (mode, 1)
            return mode
        }
        if mode != .cached { backedOpens.add(1, ordering: .relaxed) }
        return mode
    }

    /// Ends an open begun with `beginOpen`; the last one unregisters the backing file.
    func endOpen(of inode: NodeID) {
        let device = device.load(ordering: .relaxed)
        shards[inode.shard].inodes.withLock { inodes in
            guard let current = inodes[inode] else { return }
            if current.opens > 1 { inodes[inode] = (current.mode, current.opens - 1); return }
            inodes[inode] = nil
            if case .backed(let id) = current.mode, device >= 0 { _ = cfs_backing_close(device, id) }
        }
    }

    private func refuses(_ device: UInt64) -> Bool {
        refusing.load(ordering: .relaxed) && refusingDevices.withLock { $0.contains(device) }
    }

    private func register(_ fd: Int32, on device: UInt64, _ session: Int32) -> Mode {
        // The kernel keeps its own reference: the descriptor stays the caller's.
        let id = cfs_backing_open(session, fd)
        if id == -EPERM || id == -ENOTTY || id == -EINVAL {
            // Not negotiated (or not allowed for this user): no passthrough for this session.
            self.device.store(-1, ordering: .relaxed)
        } else if id == -ELOOP || id == -EOPNOTSUPP {
            // Every file of that filesystem would be refused alike: a call spent at each first open.
            if refusingDevices.withLock({ $0.insert(device).inserted }) {
                refusedRegistrations.add(1, ordering: .relaxed)
            }
            refusing.store(true, ordering: .relaxed)
        }
        return id > 0 ? .backed(id: id) : .cached
    }
}
