import Coordination
import FileCoordination

/// What a coordinated request holds while its handler runs (and an open, until its release).
///
/// Most requests are granted at once with nobody to ask: they hold only the engine's grant. An
/// `AccessClaim` for them was an object made and freed per request, with a lock of its own for
/// its notifications: about 8 % of the instructions coordination adds to a request. The others
/// hold the claim that waited or asked presenters.
enum RequestClaim: Sendable {
    /// Granted at once; its intents are the request's.
    case grant(GrantID, intents: [Intent])
    /// Granted at once for one item (`CoordinationEngine.acquireAtOnce(_:for:)`): it reports no
    /// move, so it keeps no intents.
    case single(GrantID)
    /// `single`, screened (`NameGates`): the gate of its item's name was shut for it, and is
    /// opened again when it ends. Ended exactly once, as every claim is.
    case screened(GrantID, gate: Int)
    case claim(AccessClaim)
    /// Made inside an accessor of the calling process, whose hold covers an item it names (SPEC
    /// §1): it holds nothing of its own and messages nobody; a move it makes is reported in the
    /// hold, and the hold's end tells presenters the rest.
    case accessor(AccessClaim, intents: [Intent])

    /// Kept on the engine's short list: its end has nobody to tell unless a presenter registered
    /// meanwhile.
    var isOnShortList: Bool {
        switch self {
        case .single(let id), .screened(let id, _): id.isOnShortList
        case .grant, .claim, .accessor: false
        }
    }

    /// The intents as granted: paths moved while the request waited are updated (C11). A single
    /// claim has none to give.
    var intents: [Intent] {
        switch self {
        case .grant(_, let intents): intents
        case .single, .screened: []
        case .claim(let claim): claim.intents
        case .accessor(_, let intents): intents
        }
    }
}

/// Notifications of grants ended by this thread's running handlers: delivered when the
/// outermost handler returns, after its reply (see `Filesystem.notifyingPresentersAfter`).
struct HeldNotifications {
    var depth = 0
    var deliveries: [[PresenterDelivery<PresenterNotification>]] = []
}

extension Filesystem {
    /// Runs `body`, and tells presenters what it did (`end`, `reportMove`) only when it returns.
    /// A handler replies to the kernel inside `body`: its caller goes on first, and the
    /// presenters (and the clients behind them, on a small machine) are woken after.
    func notifyingPresentersAfter(_ claim: RequestClaim, _ body: () -> Void) {
        if case .claim(let claim) = claim { return claim.notifyingPresentersAfter(body) }
        if case .accessor = claim { return body() }
        // A listed grant was made with no presenter registered: its end has nobody to tell
        // unless one registers meanwhile, who then hears of it just before the reply instead
        // of just after. Holding back nothing costs two per-thread lookups less.
        if claim.isOnShortList { return body() }
        holdNotifications()
        body()
        deliverHeldNotifications()
    }

    /// `notifyingPresentersAfter` in two halves, for a claim granted at once, whose handler is
    /// called between them. Called through a closure, the handler's captures were retained
    /// and released again: several reference counts on a mount's commonest requests.
    func holdNotifications() {
        heldNotifications.withValue { $0.depth += 1 }
    }

    /// The second half: delivers what this thread's outermost handler held back.
    func deliverHeldNotifications() {
        let due = heldNotifications.withValue { held -> [[PresenterDelivery<PresenterNotification>]] in
            held.depth -= 1
            guard held.depth == 0, !held.deliveries.isEmpty else { return [] }
            defer { held.deliveries = [] }
            return held.deliveries
        }
        for deliveries in due { domain.deliver(deliveries) }
    }

    /// Ends `claim`; `outcome` says what happened to its one item.
    func end(_ claim: RequestClaim?, outcome: IntentOutcome) {
        switch claim {
        case .grant(let id, _), .single(let id): engine.release(id, outcome: outcome) { notify($0) }
        case .screened(let id, let gate):
            // Opened after the release: until then a request passing it could overlap the grant.
            engine.release(id, outcome: outcome) { notify($0) }
            nameGates.open(gate)
        case .claim(let claim): claim.end(outcome: outcome)
        case .accessor, nil: break
        }
    }

    /// Ends `claim`; `outcomes` (one per intent) say what happened to each item.
    func end(_ claim: RequestClaim?, outcomes: [IntentOutcome]) {
        switch claim {
        case .grant(let id, _), .single(let id): engine.release(id, outcomes: outcomes) { notify($0) }
        case .screened(let id, let gate):
            engine.release(id, outcomes: outcomes) { notify($0) }
            nameGates.open(gate)
        case .claim(let claim): claim.end(outcomes: outcomes)
        case .accessor, nil: break
        }
    }

    /// Reports a move made under `claim`: presenters follow it (C15).
    func reportMove(_ claim: RequestClaim, from source: AccessTarget, to destination: AccessTarget) {
        switch claim {
        case .single, .screened:
            assertionFailure("a single claim reports no move")
        case .grant(let id, _):
            // An ended grant has no move to report.
            if let notifications = try? engine.reportMove(in: id, from: source, to: destination), !notifications.isEmpty {
                notify(notifications)
            }
        case .claim(let claim):
            claim.reportMove(from: source, to: destination)
        case .accessor(let claim, _):
            // A file the accessor made, renamed over the held item (an atomic save), is a new
            // version of it, which the hold's end tells as a change; only the held item moving
            // is a move.
            if claim.intents.contains(where: { $0.path == source.path || $0.path.isAncestor(of: source.path) }) {
                claim.reportMove(from: source, to: destination)
            }
        }
    }

    /// Holds `deliveries` back while a handler on this thread runs; delivers them otherwise.
    private func notify(_ deliveries: [PresenterDelivery<PresenterNotification>]) {
        let held = heldNotifications.withValue { held -> Bool in
            guard held.depth > 0 else { return false }
            held.deliveries.append(deliveries)
            return true
        }
        if !held { domain.deliver(deliveries) }
    }
}
