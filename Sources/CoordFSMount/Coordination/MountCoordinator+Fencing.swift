import Coordination
import CoordinationRuntime
import LinuxSystem
import Synchronization

/// Fencing open files on a host of a shared store (docs/cluster.md, fencing): an open is
/// stamped at its grant, and each write through it lands, and each read through it is served,
/// only while the host's lease may be valid and nothing since the grant took its item away (a
/// recall broken at the break time, a lease lost and not carried over at the rejoin): after
/// that, another host may be writing the file. The kernel does not serve the reads and writes
/// of a file another host has any interest in (no passthrough): the mount must see them to
/// refuse them.
extension MountCoordinator {
    /// An open on a host of a shared store: its item's store path, and its cover, stamped as
    /// it was granted (none for a read this host held no delegation for: one another host let
    /// past its programs holds nothing to lose).
    struct SharedOpen {
        var path: String
        var cover: OpenCover?

        /// A write open fenced from its grant (`sharedOpen`): refused (EIO) before the backing
        /// file is touched. Opened, a truncating open would empty a file whose writes then fail.
        var isRefused: Bool { cover?.fenced.load(ordering: .relaxed) == true }
    }

    /// The store path of the item `intent` is about: what its delegation is of.
    func storePath(of intent: ItemIntent) -> String? {
        store.delegationNeed(intent.kind, of: targets.target(of: intent, now: coarseMilliseconds()))?.path
    }

    /// For an open just granted (`claim`, to `caller`) on a host of a shared store: its item's
    /// path and its cover; nil on a mount with no cluster. An open nothing coordinates (the
    /// mode is off there, a kernel thread's) has no cover: nothing asked for its item, and
    /// nothing takes it away.
    func sharedOpen(
        _ wanted: ItemIntent, writes: Bool, claim: borrowing MountClaim, _ caller: RequestCaller
    ) -> SharedOpen? {
        guard let delegations, let path = storePath(of: wanted) else { return nil }
        guard claim.holds || isCoordinated(wanted, nil, caller) else { return SharedOpen(path: path) }
        guard writes else { return SharedOpen(path: path, cover: delegations.stampReads(path).map(OpenCover.init)) }
        let stamp = delegations.stampWrites(path)
        if stamp == nil {
            statistics.fencedWrites.add(1, ordering: .relaxed)
            logger.error(
                "cluster: '\(path.isEmpty ? "/" : path)' was to be opened for writing as this host lost it: the open is refused (EIO)"
            )
        }
        return SharedOpen(path: path, cover: OpenCover(stamp: stamp))
    }

    /// Whether the kernel may serve an open from its backing file (kernel passthrough): not
    /// one of an item another host has any interest in, whose access may come while the file
    /// is open. A write the kernel serves cannot be refused, and the mount would not see it.
    /// (The first open of an inode decides for all its opens until the last is released.)
    func mayPassThrough(_ shared: SharedOpen?) -> Bool {
        guard let shared, let delegations else { return true }
        return !delegations.othersInterested(in: shared.path)
    }

    /// Whether a write through `file` may land (write, fallocate, copy_file_range's output):
    /// always but on a host of a shared store; there while its lease may be valid, and while
    /// nothing since the open's grant has taken its item away. Refused: EIO, as NFS answers
    /// writes under a lock lost with its lease. An open fenced so stays fenced until it is
    /// closed: its program may not know what another host wrote meanwhile.
    func admitsWrite(through file: OpenFile) -> Bool {
        guard let cover = file.cover else { return true }
        return admits(through: file, cover, refusing: statistics.fencedWrites, "writes")
    }

    /// Whether a read through `file` may be served: as its writes (`admitsWrite`), for an open
    /// stamped as covered. Refused: EIO, as NFS answers I/O under state lost with its lease; what
    /// the kernel has cached is still read (a mapping, the page cache), as it was when it came.
    func admitsRead(through file: OpenFile) -> Bool {
        guard let cover = file.cover else { return true }
        return admits(through: file, cover, refusing: statistics.fencedReads, "reads")
    }

    private func admits(
        through file: OpenFile, _ cover: OpenCover, refusing counted: borrowing Atomic<Int>, _ what: String
    ) -> Bool {
        guard let delegations else { return true }
        func refused() -> Bool {
            counted.add(1, ordering: .relaxed)
            return false
        }
        if cover.fenced.load(ordering: .relaxed) || !delegations.mayAdmitWrites { return refused() }
        let stamp = cover.stamp.load(ordering: .relaxed)
        if delegations.lastCoverLoss <= stamp { return true }
        let path = storePath(of: ItemIntent(kind: .writing([]), node: file.inode, isDirectory: false)) ?? ""
        switch delegations.admitsWrites(path, since: stamp, ofAnOpenFile: true) {
        case .admitted(let through):
            // Writes judged at once move it on only forward.
            _ = cover.stamp.max(through, ordering: .relaxed)
            return true
        case .suspended:
            return refused()
        case .fenced:
            if !cover.fenced.exchange(true, ordering: .relaxed) {
                logger.error(
                    "cluster: \(what) through an open file of '\(path.isEmpty ? "/" : path)' are refused (EIO) until it is closed: another host may have written it since it was opened"
                )
            }
            return refused()
        }
    }
}
