import CFuse3
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A counter that every request adds to, kept in one slot per CPU: a single shared counter
/// moved its cache line between the CPUs on each request, and that miss cost a request more
/// than the rest of its bookkeeping. Reading sums the slots.
final class StripedCounter: Sendable {
    /// One slot, alone on its cache lines: padding on either side keeps the counter away from
    /// the object's header (which retains write) and from the neighbouring slots.
    private final class Slot: Sendable {
        private let before: (Int, Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0, 0)
        let count = Atomic<Int>(0)
        private let after: (Int, Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0, 0)
    }

    private let slots: [Slot]

    init(slots: Int = sysconf(Int32(_SC_NPROCESSORS_CONF))) {
        self.slots = (0..<max(1, slots)).map { _ in Slot() }
    }

    func add(_ amount: Int = 1) {
        // The CPU may change right after it is read: then two CPUs share a slot for a moment,
        // and the atomic add keeps the count right.
        let cpu = Int(cfs_current_cpu())
        slots[cpu >= 0 ? cpu % slots.count : 0].count.add(amount, ordering: .relaxed)
    }

    var value: Int { slots.reduce(0) { $0 + $1.count.load(ordering: .relaxed) } }
}
