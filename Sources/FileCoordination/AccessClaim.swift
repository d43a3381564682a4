import Coordination
import Foundation
import Synchronization

/// Intents held for someone who is not a `FileCoordinator` — a program coming through a coordfs
/// mount, a client of the control socket — with the same waiting, presenter messaging and
/// notifications as a coordinator's own accesses.
public final class AccessClaim: @unchecked Sendable {
    /// Granted at once by the engine, with nobody to ask (most kernel requests): the grant is
    /// all there is. Otherwise `access` waited or asked presenters, and carries the rest.
    private let domain: CoordinationDomain
    private let atOnce: (id: GrantID, intents: [Intent])?
    private let access: CoordinatedAccess?
    /// Set by the first `end` of a claim granted at once.
    private let ended = Atomic<Bool>(false)
    /// Notifications held back while `notifyingPresentersAfter` runs (on any thread: a release
    /// may overlap the end of the open that made its handle).
    private let held = Mutex(HeldNotifications())

    private struct HeldNotifications {
        var scopes = 0
        var deliveries: [[PresenterDelivery<PresenterNotification>]] = []
    }

    private init(domain: CoordinationDomain, atOnce: (id: GrantID, intents: [Intent])?, access: CoordinatedAccess?) {
        self.domain = domain
        self.atOnce = atOnce
        self.access = access
    }

    /// The claim, granted now, when nothing blocks `intents` and no presenter has to be asked
    /// first; nil otherwise, having taken nothing: then `begin` waits and asks. A mount answers
    /// most requests this way without a wait table or any completion.
    public static func grantedAtOnce(in domain: CoordinationDomain, identity: CoordinatorIdentity,
                                     intents: [Intent], holds: Bool = true) -> AccessClaim? {
        guard let grant = grantAtOnce(in: domain, identity: identity, intents: intents, holds: holds) else { return nil }
        return AccessClaim(domain: domain, atOnce: (grant, intents), access: nil)
    }

    /// `grantedAtOnce` without the claim: the engine's grant of `intents`, which the caller ends
    /// with `CoordinationEngine.release` and whose notifications it hands to
    /// `CoordinationDomain.deliver`. For a caller that holds the grant no longer than a call of
    /// its own (a mount's rename), the claim object is most of what a grant costs; a mount's
    /// one-item requests go to `CoordinationEngine.acquireAtOnce(_:for:)` instead.
    public static func grantAtOnce(in domain: CoordinationDomain, identity: CoordinatorIdentity,
                                   intents: [Intent], holds: Bool = true) -> GrantID? {
        domain.engine.acquireAtOnce(request(identity, intents, waits: false, holds: holds))
    }

    /// Starts claiming `intents` for `identity`. `completion` runs once — possibly before this
    /// returns, on the calling thread — with the claim, granted and presenters answered, or the
    /// error that stopped it (`FileCoordinationError`, `CocoaError(.userCancelled)`, or a
    /// presenter's own error). Set `waits` false to be refused at once instead of waiting;
    /// `holds` false to tell presenters afterwards without holding anything (nobody waits).
    @discardableResult
    public static func begin(in domain: CoordinationDomain, identity: CoordinatorIdentity, intents: [Intent],
                             waits: Bool = true, holds: Bool = true, timeout: Duration?,
                             completion: @escaping @Sendable (Result<AccessClaim, Error>) -> Void) -> AccessClaim {
        if let claim = grantedAtOnce(in: domain, identity: identity, intents: intents, holds: holds) {
            completion(.success(claim))
            return claim
        }
        return beginWaiting(in: domain, identity: identity, intents: intents, waits: waits, holds: holds,
                            timeout: timeout, completion: completion)
    }

    /// `begin` for a caller whose `grantedAtOnce` just came back nil: it waits (or is refused)
    /// and asks presenters, without trying the engine's at-once grant a second time.
    @discardableResult
    public static func beginWaiting(in domain: CoordinationDomain, identity: CoordinatorIdentity, intents: [Intent],
                                    waits: Bool = true, holds: Bool = true, timeout: Duration?,
                                    completion: @escaping @Sendable (Result<AccessClaim, Error>) -> Void) -> AccessClaim {
        let access = CoordinatedAccess(domain: domain, request: request(identity, intents, waits: waits, holds: holds))
        let claim = AccessClaim(domain: domain, atOnce: nil, access: access)
        access.start(waitTimeout: timeout) { result in
            completion(result.map { _ in claim })
        }
        return claim
    }

    private static func request(_ identity: CoordinatorIdentity, _ intents: [Intent], waits: Bool, holds: Bool) -> AccessRequest {
        var request = AccessRequest(identity: identity, intents: intents, waits: waits)
        request.holdsIntents = holds
        request.messagesPresenters = holds
        return request
    }

    /// Runs `body` only if the claim is still waiting — its completion has not run and will not
    /// run before `body` returns — so that a table of waiting claims (for interrupts or
    /// cancellation) never keeps one that has already been settled. Returns whether it ran.
    @discardableResult
    public func ifStillWaiting(_ body: () -> Void) -> Bool { access?.ifUnsettled(body) ?? false }

    /// Stops waiting (an interrupted system call); no effect once granted.
    public func cancel() { access?.cancel() }

    /// Whom the claim waits for now: holders in its way, or owners of the presenters it is
    /// asking. Empty once granted.
    public var awaited: Set<CoordinatorIdentity> { access?.awaited ?? [] }

    /// Whether it waits for holders (rather than for presenters' answers).
    public var waitsForHolders: Bool { access?.waitsForHolders ?? false }

    /// Stops waiting and goes ahead (`CoordinatedAccess.breakThrough`): for a caller whose wait
    /// holds something that those it waits for need.
    public func breakThrough() { access?.breakThrough() }

    /// The intents as granted: paths moved while waiting are updated (C11).
    public var intents: [Intent] { atOnce?.intents ?? access?.grantedIntents ?? [] }

    /// Reports a move made under this claim: presenters follow it (C15).
    public func reportMove(from source: AccessTarget, to destination: AccessTarget) {
        let grantID = atOnce.flatMap { ended.load(ordering: .acquiring) ? nil : $0.id } ?? access?.grantID
        guard let grantID, let notifications = try? domain.engine.reportMove(in: grantID, from: source, to: destination)
        else { return }
        notify(notifications)
    }

    /// Ends the claim; `outcomes` (one per intent) say what happened to each item.
    public func end(outcomes: [IntentOutcome]) {
        if let access { return access.end(outcomes: outcomes, notify: notify) }
        guard let atOnce, !ended.exchange(true, ordering: .acquiringAndReleasing) else { return }
        domain.engine.release(atOnce.id, outcomes: outcomes, deliver: notify)
    }

    /// `end` of a one-intent claim.
    public func end(outcome: IntentOutcome) {
        if let access { return access.end(outcomes: [outcome], notify: notify) }
        guard let atOnce, !ended.exchange(true, ordering: .acquiringAndReleasing) else { return }
        domain.engine.release(atOnce.id, outcome: outcome, deliver: notify)
    }

    /// Runs `body`, and tells presenters what it did (`end`, `reportMove`) only when it returns.
    /// A mount replies to the kernel inside `body`: its caller goes on first, and the presenters
    /// (and the clients behind them, on a small machine) are woken after, not in its way.
    /// Overlapping scopes deliver when the last one ends.
    public func notifyingPresentersAfter(_ body: () -> Void) {
        held.withLock { $0.scopes += 1 }
        body()
        let due = held.withLock { held -> [[PresenterDelivery<PresenterNotification>]] in
            held.scopes -= 1
            guard held.scopes == 0 else { return [] }
            defer { held.deliveries = [] }
            return held.deliveries
        }
        for deliveries in due { domain.deliver(deliveries) }
    }

    private func notify(_ deliveries: [PresenterDelivery<PresenterNotification>]) {
        let now = held.withLock { held -> Bool in
            guard held.scopes > 0 else { return true }
            held.deliveries.append(deliveries)
            return false
        }
        if now { domain.deliver(deliveries) }
    }
}
