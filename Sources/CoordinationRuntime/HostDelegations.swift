import Coordination

/// Grants beyond this host: the delegations a host of a shared store must hold before it grants
/// its own programs anything (`coordfs mount --cluster`, `coordfs daemon --cluster`). Paths are
/// below the store's root ("" is the root itself), as every host spells them.
package protocol HostDelegations: AnyObject, Sendable {
    /// Whether this host may grant `writing` (or reading) of `path` now.
    func covers(_ path: String, writing: Bool) -> Bool
    /// `covers`, for an accessor's own request (a process of a hold through the control socket,
    /// or its descendant) of what its hold stands for: also under a delegation recalled but not
    /// given back yet, which the recall keeps for that hold until it ends.
    func coversAccessor(_ path: String, writing: Bool) -> Bool
    /// Asks for what `access` of `path` needs; `completion` runs once, on any thread. Without
    /// `waits`, a delegation another host holds is not waited for (`.wouldWait`). The closure
    /// returned stops waiting (a request interrupted or past its wait timeout): `completion` is
    /// not called then.
    func acquire(
        _ path: String, _ access: DelegatedAccess, waits: Bool,
        completion: @escaping @Sendable (HostDelegationOutcome) -> Void
    ) -> @Sendable () -> Void

    // Fencing writes through open files: a write open is stamped at its grant, and each write
    // through it asks the two lock-free questions; only after a loss of cover since its stamp
    // is it judged (`admitsWrites`).

    /// The stamp of a write open of `path` granted now; nil when this host does not cover
    /// writes of `path` now (the open is fenced from the start).
    func stampWrites(_ path: String) -> UInt64?
    /// Whether writes may land at all now, without a lock: false once the host's lease may have
    /// ended (its last renewal's answer, plus the TTL, less the margin), until it has joined
    /// again and asked again for what its programs hold.
    var mayAdmitWrites: Bool { get }
    /// The number of the last loss of cover, without a lock: an open stamped at or after it has
    /// lost nothing.
    var lastCoverLoss: UInt64 { get }
    /// Judges writes through an open of `path` stamped `stamp`, after a loss of cover since.
    func admitsWrites(_ path: String, since stamp: UInt64) -> WriteAdmission
    /// Whether another host has a key of any kind at, inside or around `path`: its writes must
    /// reach the mount to be refused, so the kernel does not serve them (no passthrough).
    func othersInterested(in path: String) -> Bool
}

/// What becomes of writes through a file open for writing on a host of a shared store.
package enum WriteAdmission: Sendable, Equatable {
    /// They land: nothing since `through` (the open's stamp from now on) took the item away.
    case admitted(through: UInt64)
    /// Not now (EIO): the host's lease may have ended, and it has not joined again.
    case suspended
    /// Never again through this open (EIO until it is closed): the item may have been another
    /// host's since the open was granted (a recall broken at the break time, a lease lost).
    case fenced
}

/// What a request does to the item it needs a delegation of. The hosts its delegation recalls
/// ask their presenters as for such an access of their own: a deletion or replacement asks the
/// presenters of the item and of everything inside it to accommodate the deletion, a move asks
/// them to relinquish.
package enum DelegatedAccess: Sendable, Equatable {
    case reading, writing, deleting, moving, replacing

    package var writes: Bool { self != .reading }

    package init(_ kind: AccessKind) {
        guard case .writing(let options) = kind else { self = .reading; return }
        self =
            options.contains(.forDeleting)
            ? .deleting
            : options.contains(.forReplacing)
                ? .replacing
                : options.contains(.forMoving) ? .moving : .writing
    }

    /// The engine's kind of such an access.
    package var kind: AccessKind {
        switch self {
        case .reading: .reading([])
        case .writing: .writing([])
        case .deleting: .writing(.forDeleting)
        case .moving: .writing(.forMoving)
        case .replacing: .writing(.forReplacing)
        }
    }
}

/// How asking for a delegation ended: of accesses (`HostDelegations.acquire`) or of file locks
/// (a mount's `HostLocks.acquire`).
package enum HostDelegationOutcome: Sendable, Equatable {
    case granted
    /// Another host holds it, and the request would not wait.
    case wouldWait
    /// This host may grant nothing: its lease is lost, or the cluster cannot be reached (ENOLCK).
    case refused(String)
}
