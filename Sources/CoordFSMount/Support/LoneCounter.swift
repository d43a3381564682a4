import LinuxSystem
import Synchronization

/// A counter on a cache line of its own, for a value every request reads and few write. As a
/// field of the inode table, the directory-names generation shared a line with the table's
/// lock: after a lookup served on the other CPU, a request's read of it missed.
final class LoneCounter: Sendable {
    // A cache line's worth on either side: whatever 64-byte line holds `count` lies within
    // this object, past its header (whose reference count every retain writes).
    private let before: (Int, Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0, 0)
    private let count = Atomic<Int>(0)
    private let after: (Int, Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0, 0)

    var value: Int { count.load(ordering: .acquiring) }

    func increment() { count.add(1, ordering: .releasing) }
}
