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
        /// Served by the kernel from backing file `id`; `writable` when it was opened read-write.
        case backed(id: Int32, writable: Bool)
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

    /// Starts an open of `inode`: the mode it must use. `openBacking(readWrite)` opens the backing
    /// file anew (for the kernel to keep); nil when it cannot be opened so. `readWrite`: a
    /// read-write descriptor of it the caller keeps, registered as the backing file if one is
    /// needed. `prefersCached`: the first open of an inode is then served through the mount.
    func beginOpen(
        of inode: NodeID, writes: Bool, prefersCached: Bool = false, readWrite: Int32? = nil,
        openBacking: (_ readWrite: Bool) -> Int32?
    ) throws(Errno) -> Mode {
        let device = device.load(ordering: .relaxed)
        let mode = try shards[inode.shard].inodes.withLock { inodes throws(Errno) -> Mode in
            if let current = inodes[inode] {
                // A read-only backing (a file even root cannot open for writing, such as a
                // running program) cannot serve a writer, and the inode cannot switch modes.
                if case .backed(_, writable: false) = current.mode, writes { throw Errno(code: ETXTBSY) }
                inodes[inode] = (current.mode, current.opens + 1)
                return current.mode
            }
            let mode = device >= 0 && !prefersCached ? register(readWrite, openBacking, device: device) : .cached
            inodes[inode] = (mode, 1)
            return mode
        }
        if mode != .cached { backedOpens.add(1, ordering: .relaxed) }
        return mode
    }

    /// Whether an open of `inode` now would register a backing file: passthrough is on and no
    /// open of it is served yet.
    func needsBacking(_ inode: NodeID) -> Bool {
        isEnabled && shards[inode.shard].inodes.withLock { $0[inode] == nil }
    }

    /// Ends an open begun with `beginOpen`; the last one unregisters the backing file.
    func endOpen(of inode: NodeID) {
        let device = device.load(ordering: .relaxed)
        shards[inode.shard].inodes.withLock { inodes in
            guard let current = inodes[inode] else { return }
            if current.opens > 1 { inodes[inode] = (current.mode, current.opens - 1); return }
            inodes[inode] = nil
            if case .backed(let id, _) = current.mode, device >= 0 { _ = cfs_backing_close(device, id) }
        }
    }

    private func register(_ kept: Int32?, _ openBacking: (Bool) -> Int32?, device: Int32) -> Mode {
        var writable = true
        guard
            let fd = kept ?? openBacking(true)
                ?? {
                    writable = false; return openBacking(false)
                }()
        else { return .cached }
        // The kernel keeps its own reference: a descriptor opened here is not needed afterwards.
        defer { if fd != kept { close(fd) } }
        let id = cfs_backing_open(device, fd)
        if id == -EPERM || id == -ENOTTY || id == -EINVAL {
            // Not negotiated (or not allowed for this user): no passthrough for this session.
            self.device.store(-1, ordering: .relaxed)
        }
        return id > 0 ? .backed(id: id, writable: writable) : .cached
    }
}
