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
    /// Opens the kernel served from a backing file, for the mount's statistics.
    let backedOpens = Atomic<Int>(0)

    /// Turns passthrough on for a mounted session's device.
    func enable(device fd: Int32) { device.store(fd, ordering: .relaxed) }

    var isEnabled: Bool { device.load(ordering: .relaxed) >= 0 }

    /// Starts an open of `inode`, open at `fd` (the caller keeps it): the mode it must use. The
    /// first open's descriptor is registered as the inode's backing file. Only its place
    /// matters: the kernel serves each open from a file of its own, opened there with that
    /// open's flags and the daemon's rights, so a reader's descriptor serves a writer's open
    /// too (a write the backing refuses, a running program's, fails at the daemon's own open
    /// first). `prefersCached`: the first open of an inode is then served through the mount.
    func beginOpen(of inode: NodeID, fd: Int32, prefersCached: Bool = false) -> Mode {
        let device = device.load(ordering: .relaxed)
        let mode = shards[inode.shard].inodes.withLock { inodes -> Mode in
            if let current = inodes[inode] {
                // The inode cannot switch modes while any open uses it.
                inodes[inode] = (current.mode, current.opens + 1)
                return current.mode
            }
            let mode = device >= 0 && !prefersCached ? register(fd, device: device) : .cached
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

    private func register(_ fd: Int32, device: Int32) -> Mode {
        // The kernel keeps its own reference: the descriptor stays the caller's.
        let id = cfs_backing_open(device, fd)
        if id == -EPERM || id == -ENOTTY || id == -EINVAL {
            // Not negotiated (or not allowed for this user): no passthrough for this session.
            self.device.store(-1, ordering: .relaxed)
        }
        return id > 0 ? .backed(id: id) : .cached
    }
}
