import Synchronization

/// The daemon's descriptors, shared by the inode table's cache and the files open through the
/// mount: both draw on the one open-file limit.
///
/// The inode table keeps up to `inodeCeiling` descriptors while few files are open, and gives
/// them up as files open: its budget is what the open files leave of the pool, never less than
/// `inodeFloor`. Without that, a program of the mount's owner or root holding ten thousand
/// files open took the daemon's last descriptors (each open file is one descriptor, its cached
/// inode another), and every create and open on the mount failed with EMFILE, for everyone.
final class DescriptorPool: Sendable {
    /// Descriptors for inodes and open files together: the open-file limit less a tenth, kept
    /// for the daemon's own (its sockets, watches, rings and version store).
    let size: Int
    /// The most inode descriptors kept (`--descriptor-budget`).
    let inodeCeiling: Int
    /// The least kept however many files are open: the items in use need theirs.
    let inodeFloor: Int
    /// Files and directories open through the mount right now, every user's.
    let openFiles = Atomic<Int>(0)

    /// A pool of `size` descriptors (`DescriptorLimit.largestBudget(under:)` of the limit).
    init(size: Int, inodeCeiling: Int) {
        self.size = max(32, size)
        self.inodeCeiling = max(16, min(inodeCeiling, self.size))
        inodeFloor = max(16, min(self.inodeCeiling, self.size / 8))
    }

    /// Open files the pool takes at most, every user's: what the inode floor leaves.
    var openFileRoom: Int { size - inodeFloor }

    /// The inode descriptors the table may keep now.
    var inodeBudget: Int {
        max(inodeFloor, min(inodeCeiling, size - openFiles.load(ordering: .relaxed)))
    }

    /// Whether open files take so much of the pool that the inode table must give up some of
    /// its descriptors: below that, an open costs the table nothing.
    var pressesOnInodes: Bool { openFiles.load(ordering: .relaxed) > size - inodeCeiling }
}
