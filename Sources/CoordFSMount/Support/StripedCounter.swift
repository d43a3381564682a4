import LinuxSystem
import CLinux
import Synchronization

/// A counter that every request adds to, kept in one slot per CPU: a single shared counter
/// moved its cache line between the CPUs on each request served on the other one. Reading sums
/// the slots.
final class StripedCounter: Sendable {
    /// A slot filling two cache lines, so that no two slots (and nothing else) share one.
    private struct Slot: ~Copyable, Sendable {
        let count = Atomic<Int>(0)
        private let padding: (Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int) = (
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
        )
    }

    /// Inline in the object (no array to retain on each add), after a line of padding that
    /// keeps the first slot off the object's header, which retains write.
    private let header: (Int, Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0, 0)
    private let slots = InlineArray<16, Slot> { _ in Slot() }

    func add(_ amount: Int = 1) {
        // CPUs past 16 share slots, and the CPU may change right after it is read: the adds
        // are atomic, so sharing costs speed, never counts.
        let cpu = Int(cfs_current_cpu())
        slots[cpu >= 0 ? cpu & 15 : 0].count.add(amount, ordering: .relaxed)
    }

    var value: Int {
        var sum = 0
        for index in slots.indices { sum += slots[index].count.load(ordering: .relaxed) }
        return sum
    }
}
