/// The times this host's write opens may have lost their cover, in order: a recall broken at
/// the break time (the delegation given back under holders that conflict with the other hosts'
/// keys, `Scope.around` those keys), and a run whose lease was lost (every item, but those the
/// rejoin re-delegated with nobody else in between, `Scope.allBut`). A write open is stamped at
/// its grant with the number of the last loss before it (`last`), and judged only against the
/// losses after it: the first whose scope reaches its item fences it for good (its writes are
/// refused until it is closed: another host may have written the item since, or be writing it).
///
/// Only losses are recorded, never grants: a host that loses nothing pays for none of this, and
/// a write through an open stamped at or after `last` is admitted without a look (the mount
/// keeps `last` of the member's in an atomic, `ClusterMember.lastCoverLoss`).
struct CoverLosses: Sendable {
    enum Scope: Sendable, Equatable {
        /// The items another host was given: these paths, what is inside them, and the
        /// directories that hold them (a write there conflicts with their keys).
        case around([String])
        /// Every item but these paths: a run's lease lost, its items re-delegated at the rejoin
        /// with no other host's key before them (under a lease that etcd still had).
        case allBut(Set<String>)

        func reaches(_ path: String) -> Bool {
            switch self {
            case .around(let paths):
                paths.contains { Delegations.contains($0, path, orIs: true) || Delegations.contains(path, $0) }
            case .allBut(let paths): !paths.contains(path)
            }
        }
    }

    struct Loss: Sendable, Equatable {
        var number: UInt64
        var scope: Scope
    }

    /// The last loss's number (0: none yet): what a write open granted now is stamped with.
    private(set) var last: UInt64 = 0
    /// The losses kept, oldest first.
    private(set) var kept: [Loss] = []
    /// The number of the last loss no longer kept (`limit`): an open stamped before it may have
    /// been reached, and is fenced.
    private(set) var forgottenThrough: UInt64 = 0
    /// How many are kept: a write open that stays open across more losses than this is fenced.
    static let limit = 256

    /// Records a loss; its number.
    mutating func record(_ scope: Scope) -> UInt64 {
        last += 1
        kept.append(Loss(number: last, scope: scope))
        if kept.count > Self.limit {
            forgottenThrough = kept.removeFirst().number
        }
        return last
    }

    /// Narrows loss `number` (a run's, at its rejoin) to `scope`.
    mutating func narrow(_ number: UInt64, to scope: Scope) {
        guard let index = kept.firstIndex(where: { $0.number == number }) else { return }
        kept[index].scope = scope
    }

    /// Judges a write open of `path` stamped `stamp` (or last judged through it): nil when a
    /// loss after it reaches `path` (fenced), else the number it is admitted through (`last`).
    func judge(_ path: String, since stamp: UInt64) -> UInt64? {
        if stamp >= last { return last }
        if stamp < forgottenThrough { return nil }
        for loss in kept where loss.number > stamp && loss.scope.reaches(path) { return nil }
        return last
    }
}

/// The lease's validity as a number, for checks without a lock on every write: nanoseconds of
/// the continuous clock since the process first asked.
enum LeaseClock {
    private static let origin = ContinuousClock.now

    static func nanoseconds(_ instant: ContinuousClock.Instant) -> Int64 {
        let (seconds, attoseconds) = (instant - origin).components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    static var now: Int64 { nanoseconds(.now) }
}
