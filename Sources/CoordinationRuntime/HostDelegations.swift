import Coordination

/// Grants beyond this host: the delegations a host of a shared store must hold before it grants
/// its own programs anything (`coordfs mount --cluster`, `coordfs daemon --cluster`). Paths are
/// below the store's root ("" is the root itself), as every host spells them.
package protocol HostDelegations: AnyObject, Sendable {
    /// Whether this host may grant `access` of `path` now.
    func covers(_ path: String, _ access: DelegatedAccess) -> Bool
    /// How many delegations this host has been granted (or let past another host's programs)
    /// so far, and losses of cover: before each, another host may have changed its items,
    /// names included.
    var acquisitions: UInt64 { get }
    /// `covers`, for an accessor's own request (a process of a hold through the control socket,
    /// or its descendant) of what its hold stands for: also under a delegation recalled but not
    /// given back yet, which the recall keeps for that hold until it ends.
    func coversAccessor(_ path: String, _ access: DelegatedAccess) -> Bool
    /// Asks for what `need` needs; `completion` runs once, on any thread. Without `waits`, a
    /// delegation another host holds is not waited for (`.wouldWait`). A host in the way takes
    /// the request as its own program's (`need.kind`), and may answer it itself: `.passed`,
    /// `.refusedThere`. The closure returned stops waiting (a request interrupted or past its
    /// wait timeout): `completion` is not called then.
    func acquire(
        _ need: DelegationNeed, waits: Bool, completion: @escaping @Sendable (HostDelegationOutcome) -> Void
    ) -> @Sendable () -> Void

    // Presenters on other hosts: a read asks them first, as a read asks a host's own (a write
    // recalls their presences instead).

    /// Whether another host presents anything at all: cheap, every request asks it.
    var othersPresentAnything: Bool { get }
    /// Whether another host's presenters present `path` itself.
    func othersPresent(at path: String) -> Bool
    /// Asks the other hosts whose presenters present `need.path` to ask them as for `need`'s
    /// access of their own host (a read: relinquish to a reader, save), and waits for their
    /// answers: `.granted`, or `.refusedThere` (a presenter there refused it), or `.refused`
    /// (ENOLCK). Made before the request takes anything: a presenter's save lands under what
    /// its own host holds. The closure returned stops waiting, as `acquire`'s.
    func askPresenters(
        _ need: DelegationNeed, completion: @escaping @Sendable (HostDelegationOutcome) -> Void
    ) -> @Sendable () -> Void

    // Fencing writes through open files: a write open is stamped at its grant, and each write
    // through it asks the two lock-free questions; only after a loss of cover since its stamp
    // is it judged (`admitsWrites`).

    /// The stamp of a write open of `path` granted now; nil when this host does not cover
    /// writes of `path` now (the open is fenced from the start).
    func stampWrites(_ path: String) -> UInt64?
    /// The stamp of a read open of `path` granted now; nil when this host holds no delegation
    /// that serves reads of `path` (a read another host let past its programs): not fenced.
    func stampReads(_ path: String) -> UInt64?
    /// Whether writes may land at all now, without a lock: false once the host's lease may have
    /// ended (its last renewal's answer, plus the TTL, less the margin), until it has joined
    /// again and asked again for what its programs hold.
    var mayAdmitWrites: Bool { get }
    /// The number of the last loss of cover, without a lock: an open stamped at or after it has
    /// lost nothing.
    var lastCoverLoss: UInt64 { get }
    /// Judges writes through an open of `path` stamped `stamp`, after a loss of cover since.
    /// `ofAnOpenFile`: a fenced answer counts as an open fenced for good (`coordfs status`);
    /// a hold's cover judged (`lostCover`) is not one.
    func admitsWrites(_ path: String, since stamp: UInt64, ofAnOpenFile: Bool) -> WriteAdmission
    /// Whether another host has a key of any kind at, inside or around `path`: its writes must
    /// reach the mount to be refused, so the kernel does not serve them (no passthrough).
    func othersInterested(in path: String) -> Bool
}

extension HostDelegations {
    /// Whether a hold stamped `stamp` (`lastCoverLoss` at its grant) lost its cover of `needs`
    /// since: the host's lease may have ended, or a loss since (a recall broken at the break
    /// time, a lease lost and the item not carried over at the rejoin) reaches one of them.
    /// Another host may have had the item since, so the hold was not its holder's alone.
    package func lostCover(of needs: [DelegationNeed], since stamp: UInt64) -> Bool {
        if mayAdmitWrites && lastCoverLoss <= stamp { return false }
        return needs.contains { need in
            if case .admitted = admitsWrites(need.path, since: stamp, ofAnOpenFile: false) { return false }
            return true
        }
    }
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
/// them to relinquish. An appending write, and a write in place among writers that share the
/// item, share it with the other hosts' accesses that share it on one host (U1, U2).
package enum DelegatedAccess: Sendable, Equatable {
    case reading, writing, appending, writingInPlace, deleting, moving, replacing

    package var writes: Bool { self != .reading }

    package init(_ kind: AccessKind) {
        guard case .writing(let options) = kind else { self = .reading; return }
        if options.contains(.forDeleting) {
            self = .deleting
        } else if options.contains(.forReplacing) {
            self = .replacing
        } else if options.contains(.forMoving) {
            self = .moving
        } else if options.contains(.appendingOnly) {
            self = .appending
        } else if options.contains(.sharingWriters) {
            self = .writingInPlace
        } else {
            self = .writing
        }
    }

    /// The engine's kind of such an access, where the request's own is not known.
    package var kind: AccessKind {
        switch self {
        case .reading: .reading([])
        case .writing: .writing([])
        case .appending: .writing(.appendingOnly)
        case .writingInPlace: .writing(.sharingWriters)
        case .deleting: .writing(.forDeleting)
        case .moving: .writing(.forMoving)
        case .replacing: .writing(.forReplacing)
        }
    }
}

/// What a request needs of the other hosts for one item: a delegation of the item it locks
/// (below the store's root; `SharedStore.delegationNeed`), and the access itself as the engine
/// knows it, which a host it recalls begins as its own program's.
package struct DelegationNeed: Sendable, Equatable {
    package var path: String
    package var access: DelegatedAccess
    package var kind: AccessKind
    /// An unmodified program's open through a mount, not a coordinated hold: another host's
    /// writers whose file has settled let it past, as they let their own host's programs.
    package var byProgram = false

    package init(path: String, access: DelegatedAccess, kind: AccessKind, byProgram: Bool = false) {
        self.path = path
        self.access = access
        self.kind = kind
        self.byProgram = byProgram
    }

    /// Whether it asks the other hosts' presenters of its item first: a read that asks
    /// presenters anything (not a metadata-only one, O3).
    package var asksPresenters: Bool {
        guard case .reading(let options) = kind else { return false }
        return !options.contains(.immediatelyAvailableMetadataOnly)
    }

    /// The request as the hosts it reaches take it.
    package var request: HostRequest { HostRequest(kind: kind, byProgram: byProgram) }
}

/// A request as the other hosts' coordination reads it (`Delegations.Entry.request`): the
/// engine's kind of the access (its options too), and whether it is an unmodified program's
/// open through a mount (`DelegationNeed.byProgram`) rather than a coordinated hold.
package struct HostRequest: Sendable, Equatable {
    package var kind: AccessKind
    package var byProgram: Bool

    package init(kind: AccessKind, byProgram: Bool) {
        self.kind = kind
        self.byProgram = byProgram
    }

    /// `r` or `w`, the options' raw value in hexadecimal, and `/p` for a program's open
    /// (`w10000/p`: a program appending).
    package var text: String {
        let program = byProgram ? "/p" : ""
        switch kind {
        case .reading(let options): return "r" + String(options.rawValue, radix: 16) + program
        case .writing(let options): return "w" + String(options.rawValue, radix: 16) + program
        }
    }

    /// The request `text` names; nil for one no host makes.
    package init?(text: String) {
        var rest = Substring(text)
        byProgram = rest.hasSuffix("/p")
        if byProgram { rest = rest.dropLast(2) }
        guard let first = rest.first, let raw = UInt(rest.dropFirst(), radix: 16) else { return nil }
        switch first {
        case "r": kind = .reading(ReadingOptions(rawValue: raw))
        case "w":
            let options = WritingOptions(rawValue: raw)
            guard options.isValid else { return nil }
            kind = .writing(options)
        default: return nil
        }
    }
}

/// How asking for a delegation ended: of accesses (`HostDelegations.acquire`) or of file locks
/// (a mount's `HostLocks.acquire`).
package enum HostDelegationOutcome: Sendable, Equatable {
    /// Granted; to a request that waited for it, with its share of the grant's promise: no
    /// recall takes the delegation from it before it has taken its claim here and looked
    /// (`DelegationPromise.redeem`), or a moment has passed.
    case granted(_ promise: (any DelegationPromise)? = nil)
    /// Another host holds it, and the request would not wait.
    case wouldWait
    /// This host may grant nothing: its lease is lost, or the cluster cannot be reached (ENOLCK).
    case refused(String)
    /// Another host let the request past its programs without their giving anything up (a
    /// writer whose file has stayed unchanged for the settle time), as it lets its own: the
    /// request goes ahead holding nothing there. (Never for locks.)
    case passed
    /// Another host refused it as it refuses its own program's (a presenter's refusal): the
    /// errno to answer. (Never for locks.)
    case refusedThere(errno: Int32)

    package static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.granted, .granted), (.wouldWait, .wouldWait), (.passed, .passed): true
        case (.refused(let a), .refused(let b)): a == b
        case (.refusedThere(let a), .refusedThere(let b)): a == b
        default: false
        }
    }
}

/// A delegation granted to a request that waited for it is that request's first: a recall
/// that came with the grant waits until the request has taken its claim here and looked
/// whether the delegation covers it (`redeem`), then serves the other host. Dropped
/// unredeemed, a promise redeems itself.
package protocol DelegationPromise: AnyObject, Sendable {
    func redeem()
}
