import Coordination

/// Grants beyond this host: the delegations a host of a shared store must hold before it grants
/// its own programs anything (`coordfs mount --cluster`, `coordfs daemon --cluster`). Paths are
/// below the store's root ("" is the root itself), as every host spells them.
public protocol HostDelegations: AnyObject, Sendable {
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
    func acquire(_ path: String, _ access: DelegatedAccess, waits: Bool,
                 completion: @escaping @Sendable (HostDelegationOutcome) -> Void) -> @Sendable () -> Void
}

/// What a request does to the item it needs a delegation of. The hosts its delegation recalls
/// ask their presenters as for such an access of their own: a deletion or replacement asks the
/// presenters of the item and of everything inside it to accommodate the deletion, a move asks
/// them to relinquish.
public enum DelegatedAccess: Sendable, Equatable {
    case reading, writing, deleting, moving, replacing

    public var writes: Bool { self != .reading }

    public init(_ kind: AccessKind) {
        guard case .writing(let options) = kind else { self = .reading; return }
        self = options.contains(.forDeleting) ? .deleting : options.contains(.forReplacing) ? .replacing
            : options.contains(.forMoving) ? .moving : .writing
    }

    /// The engine's kind of such an access.
    public var kind: AccessKind {
        switch self {
        case .reading: .reading([])
        case .writing: .writing([])
        case .deleting: .writing(.forDeleting)
        case .moving: .writing(.forMoving)
        case .replacing: .writing(.forReplacing)
        }
    }
}

/// How asking for a delegation ended.
public enum HostDelegationOutcome: Sendable {
    case granted
    /// Another host holds it, and the request would not wait.
    case wouldWait
    /// This host may grant nothing: its lease is lost, or the cluster cannot be reached (ENOLCK).
    case refused(String)
}
