#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Lets a short access pass without the engine while the engine holds nothing it could touch.
/// The engine keeps two: one open while it holds nothing at all (no grant, no waiter, no
/// presenter, no service), one open while it holds nothing but gated grants, whose owners
/// keep gates of their own that such an access passes as well (a mount's gates for names, shut
/// while a file known by the name is held: see `CoordinationEngine.Quietness`).
///
/// Such an access (a mount's unlink, rename or mkdir, held only for its call) would be granted at
/// once, conflict with nobody and have nobody to tell; naming its item and taking and ending its
/// grant are most of what coordination would cost it. Passing, it only counts itself in and out.
///
/// Exclusion is kept the other way round: the first lock section that leaves the engine holding
/// more than a gate allows closes it, and whoever it granted or registered waits, before going
/// on, until every access that passed before the close has left (`waitForPassingAccesses`). So a grant
/// never overlaps an access that passed, and a presenter registered misses nothing done after it
/// returns. Passing accesses must not call the engine: they would wait for themselves.
///
/// Passing accesses do not exclude one another, as one process's own requests never did (C4). On a
/// mount the kernel already orders those about the same names or the same item: it holds the
/// directories' and the items' inode locks across an unlink, a rename, a setattr.
public struct QuietGate: ~Copyable, Sendable {
    /// The high half: closers (the engine's lock section that closed it, or the files a
    /// name's gate is shut for). The low half: accesses passing now.
    private let word = Atomic<UInt64>(0)
    private static let oneCloser: UInt64 = 1 << 32
    private static let passing: UInt64 = oneCloser - 1

    public init() {}

    /// Counts an access in while nobody keeps the gate closed; false, counting nothing, when
    /// someone does.
    public func enter() -> Bool {
        var current = word.load(ordering: .relaxed)
        while current < Self.oneCloser {
            let (exchanged, original) = word.weakCompareExchange(
                expected: current, desired: current + 1,
                successOrdering: .acquiring, failureOrdering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// Counts an access that entered out.
    public func leave() {
        word.subtract(1, ordering: .releasing)
    }

    /// Counts a closer in: nobody enters until every closer has opened it again. Accesses that
    /// entered before may still be passing: see `waitForPassingAccesses`.
    public func close() {
        word.add(Self.oneCloser, ordering: .acquiringAndReleasing)
    }

    /// Counts a closer out.
    public func open() {
        word.subtract(Self.oneCloser, ordering: .releasing)
    }

    /// Returns once no access that passed before the gate closed is still passing. Open, there
    /// is nothing to wait for: nothing is held that a passer-by could overlap.
    public func waitForPassingAccesses() {
        var rounds = 0
        while true {
            let current = word.load(ordering: .acquiring)
            if current < Self.oneCloser || current & Self.passing == 0 { return }
            // A passer-by makes a call or two on a local filesystem: spin briefly, then yield.
            rounds += 1
            if rounds > 100 { usleep(rounds > 1000 ? 1000 : 20) } else { sched_yield() }
        }
    }

    /// Accesses passing now, and closers (tests, diagnosis).
    public var status: (passing: Int, closers: Int) {
        let current = word.load(ordering: .relaxed)
        return (Int(current & Self.passing), Int(current >> 32))
    }
}
