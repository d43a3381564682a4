import LinuxSystem
import Coordination
import CoordinationRuntime

/// What a coordinated request holds while its handler runs (and an open, until its release): a
/// runtime `Claim`. Most are granted at once with nobody to ask and hold only the engine's grant
/// (`single`, or `gated` behind a name gate); the others waited or asked presenters.
extension Filesystem {
    /// Ends `claim` with `outcome` and answers `reply`, then tells presenters what the claim
    /// did: the caller goes on first, and the presenters (and the clients behind them, on a
    /// small machine) are woken after.
    func end(_ claim: Claim, outcome: IntentOutcome, thenAnswer reply: consuming Reply) {
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

    /// Ends `claim`; `outcome` says what happened to its one item.
    func end(_ claim: Claim?, outcome: IntentOutcome) {
        guard let claim else { return }
        claim.end(outcome: outcome, in: domain)
        // Opened after the release: until then a request passing it could overlap the grant.
        if case .gated(_, let gate) = claim { nameGates.open(gate) }
    }

    /// Ends `claim`; `outcomes` (one per intent) say what happened to each item.
    func end(_ claim: Claim?, outcomes: [IntentOutcome]) {
        guard let claim else { return }
        claim.end(outcomes: outcomes, in: domain)
        if case .gated(_, let gate) = claim { nameGates.open(gate) }
    }

    /// Reports a move made under `claim`: presenters follow it (C15).
    func reportMove(_ claim: Claim, from source: AccessTarget, to destination: AccessTarget) {
        claim.reportMove(from: source, to: destination, in: domain)
    }
}
