#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Lets a short access pass without the engine while the engine holds nothing at all: no grant,
/// no waiter, no presenter, no service.
///
/// Such an access (a mount's unlink, rename or mkdir, held only for its call) would be granted at
/// once, conflict with nobody and have nobody to tell; naming its item and taking and ending its
/// grant were most of what coordination cost it. Passing, it only counts itself in and out.
///
/// Exclusion is kept the other way round: the first lock section that leaves the engine holding
/// something closes the gate, and whoever it granted or registered waits, before going on, until
/// every access that passed before the close has left (`waitForPassersBy`). So a grant never
/// overlaps an access that passed, and a presenter registered misses nothing done after it
/// returns. Passers-by must not call the engine: they would wait for themselves.
///
/// Passers-by do not exclude one another, as one process's own requests never did (C4). On a
/// mount the kernel already orders those about the same names or the same item: it holds the
/// directories' and the items' inode locks across an unlink, a rename, a setattr.
struct QuietGate: ~Copyable {
    /// The high bit: closed. The rest: accesses passing now.
    private let word = Atomic<UInt64>(0)
    private static let closed: UInt64 = 1 << 63

    /// Counts an access in when the gate is open; false, counting nothing, when closed.
    func enter() -> Bool {
        var current = word.load(ordering: .relaxed)
        while current & Self.closed == 0 {
            let (exchanged, original) = word.weakCompareExchange(expected: current, desired: current + 1,
                                                                 successOrdering: .acquiring, failureOrdering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// Counts an access that entered out.
    func leave() {
        word.subtract(1, ordering: .releasing)
    }

    /// Closes (the engine holds something) or opens (it holds nothing); under the engine's lock.
    func set(open: Bool) {
        if open {
            word.bitwiseAnd(~Self.closed, ordering: .releasing)
        } else {
            word.bitwiseOr(Self.closed, ordering: .acquiringAndReleasing)
        }
    }

    /// Returns once no access that passed before the gate closed is still passing. Open, there
    /// is nothing to wait for: the engine holds nothing that a passer-by could overlap.
    func waitForPassersBy() {
        var rounds = 0
        while true {
            let current = word.load(ordering: .acquiring)
            if current & Self.closed == 0 || current == Self.closed { return }
            // A passer-by makes a call or two on a local filesystem: spin briefly, then yield.
            rounds += 1
            if rounds > 100 { usleep(rounds > 1000 ? 1000 : 20) } else { sched_yield() }
        }
    }

    /// Accesses passing now, and whether the gate is open (tests, diagnosis).
    var status: (passing: Int, isOpen: Bool) {
        let current = word.load(ordering: .relaxed)
        return (Int(current & ~Self.closed), current & Self.closed == 0)
    }
}
