import LinuxSystem
import Coordination
import CoordinationRuntime

/// What a coordinated kernel request holds while its handler runs: the runtime's `Claim`, or
/// nothing (a request not coordinated, or one that passed a quiet gate).
///
/// Not copyable: each way out consumes it, so the compiler refuses a second end, as it refuses
/// a second answer to a `Reply`. A handler ends it (`end`), or an open keeps it for the life of
/// the open file (`keptOpen`), which its release ends. One dropped unended stops debug builds;
/// a release build would leave its items held.
struct MountClaim: ~Copyable, Sendable {
    /// Nil when the request holds nothing.
    let held: Claim?
    unowned(unsafe) let coordinator: MountCoordinator
    private let obligation = EndObligation()

    init(_ held: Claim?, _ coordinator: MountCoordinator) {
        self.held = held
        self.coordinator = coordinator
    }

    /// Whether the request holds anything (an open that holds nothing appends or writes
    /// beside nobody's count).
    var holds: Bool { held != nil }

    /// Kept on the engine's short list: its end has nobody to tell unless a presenter registered
    /// meanwhile.
    var isOnShortList: Bool { held?.isOnShortList ?? false }

    /// Ends the claim; `outcome` says what happened to its one item.
    consuming func end(_ outcome: IntentOutcome) {
        coordinator.end(held, outcome: outcome)
        obligation.fulfil()
    }

    /// Ends the claim; `outcomes` (one per intent) say what happened to each item.
    consuming func end(_ outcomes: [IntentOutcome]) {
        coordinator.end(held, outcomes: outcomes)
        obligation.fulfil()
    }

    /// For an open: the claim, held until the open's release ends it
    /// (`MountCoordinator.end(_:outcome:thenAnswer:)`).
    consuming func keptOpen() -> OpenClaim {
        obligation.fulfil()
        return OpenClaim(held: held)
    }

    /// A name change made past holds (`WaitWatch`: the kernel-lock rule, the lock time, the
    /// break time) revokes, once it is made, those it passed on the names it took away
    /// (`CoordinatedAccess.revokePassed`): their items are gone from there.
    func revokePassed() {
        guard case .waited(let access)? = held else { return }
        let revoked = access.revokePassed()
        if revoked > 0 { coordinator.waitWatch.holdsRevoked.add(revoked, ordering: .relaxed) }
    }

    /// Reports the rename made under a claim of its two items: the first is now where the
    /// second was, at the paths as granted (C11); presenters follow it (C15).
    func reportRename(sourceIsDirectory: Bool) {
        guard let held else { return }
        let granted = held.intents
        guard granted.count == 2 else { return assertionFailure("a rename's claim holds its two items") }
        let destination = coordinator.targets.target(granted[1].path, isDirectory: sourceIsDirectory)
        held.reportMove(from: granted[0].target, to: destination, in: coordinator.domain)
    }

    /// For an open that went ahead by a break (`WaitWatch`), holding nothing: the intent it
    /// went ahead with.
    var wentAheadByBreak: Intent? {
        guard case .waited(let access)? = held, access.wentAheadHoldingNothing else { return nil }
        return access.grantedIntents.first
    }
}

/// An open's claim, from its grant to its release (`OpenFile.claim`).
struct OpenClaim: Sendable {
    let held: Claim?
}

/// A claim's duty to be ended: its deinit runs only when a claim is dropped without it.
private struct EndObligation: ~Copyable, Sendable {
    init() {}

    deinit { assertionFailure("a coordinated request's claim was never ended") }

    consuming func fulfil() { discard self }
}

/// Ending claims: a gated claim's name gate is opened after its grant ends.
extension MountCoordinator {
    /// Ends `claim`; `outcomes` (one per intent) say what happened to each item.
    func end(_ claim: Claim?, outcomes: [IntentOutcome]) {
        guard let claim else { return }
        claim.end(outcomes: outcomes, in: domain)
        openGate(of: claim)
    }

    /// Ends `claim`; `outcome` says what happened to its one item.
    func end(_ claim: Claim?, outcome: IntentOutcome) {
        guard let claim else { return }
        claim.end(outcome: outcome, in: domain)
        openGate(of: claim)
    }

    /// Opens a gated claim's name gate, after its release: before, a request passing the gate
    /// could overlap the grant.
    private func openGate(of claim: Claim) {
        if case .gated(_, let gate) = claim { nameGates.open(gate) }
    }

    /// Ends an open's claim at its release with `outcome` and answers `reply`, then tells
    /// presenters what the open did: the caller goes on first, and the presenters (and the
    /// clients behind them, on a small machine) are woken after.
    func end(_ open: OpenClaim, outcome: IntentOutcome, thenAnswer reply: consuming Reply) {
        guard let claim = open.held else { return reply.ok() }
        // A listed grant was made with no presenter registered: its end has nobody to tell
        // unless one registers meanwhile, who then hears of it just before the reply instead
        // of just after. Holding back nothing costs two per-thread lookups less. A claim made
        // inside an accessor tells nobody: its hold does.
        var tellsNobody = claim.isOnShortList
        if case .accessor = claim { tellsNobody = true }
        if tellsNobody {
            end(claim, outcome: outcome)
            return reply.ok()
        }
        domain.holdNotifications()
        end(claim, outcome: outcome)
        reply.ok()
        domain.deliverHeldNotifications()
    }
}
