import Coordination
import Foundation

/// Intents held for someone who is not a `FileCoordinator` — a program coming through a coordfs
/// mount, a client of the control socket — with the same waiting, presenter messaging and
/// notifications as a coordinator's own accesses.
public final class AccessClaim: @unchecked Sendable {
    private let access: CoordinatedAccess

    private init(_ access: CoordinatedAccess) { self.access = access }

    /// Starts claiming `intents` for `identity`. `completion` runs once — possibly before this
    /// returns, on the calling thread — with the claim, granted and presenters answered, or the
    /// error that stopped it (`FileCoordinationError`, `CocoaError(.userCancelled)`, or a
    /// presenter's own error). Set `waits` false to be refused at once instead of waiting;
    /// `holds` false to tell presenters afterwards without holding anything (nobody waits).
    @discardableResult
    public static func begin(in domain: CoordinationDomain, identity: CoordinatorIdentity, intents: [Intent],
                             waits: Bool = true, holds: Bool = true, timeout: Duration?,
                             completion: @escaping @Sendable (Result<AccessClaim, Error>) -> Void) -> AccessClaim {
        var request = AccessRequest(identity: identity, intents: intents, waits: waits)
        request.holdsIntents = holds
        request.messagesPresenters = holds
        let claim = AccessClaim(CoordinatedAccess(domain: domain, request: request))
        claim.access.start(waitTimeout: timeout) { result in
            completion(result.map { _ in claim })
        }
        return claim
    }

    /// Runs `body` only if the claim is still waiting — its completion has not run and will not
    /// run before `body` returns — so that a table of waiting claims (for interrupts or
    /// cancellation) never keeps one that has already been settled. Returns whether it ran.
    @discardableResult
    public func ifStillWaiting(_ body: () -> Void) -> Bool { access.ifUnsettled(body) }

    /// Stops waiting (an interrupted system call); no effect once granted.
    public func cancel() { access.cancel() }

    /// The intents as granted: paths moved while waiting are updated (C11).
    public var intents: [Intent] { access.grantedIntents }

    /// Reports a move made under this claim: presenters follow it (C15).
    public func reportMove(from source: AccessTarget, to destination: AccessTarget) {
        guard let grant = access.grantID,
              let notifications = try? access.domain.engine.reportMove(in: grant, from: source, to: destination)
        else { return }
        PresenterNotifier.deliver(notifications, domain: access.domain)
    }

    /// Ends the claim; `outcomes` (one per intent) say what happened to each item.
    public func end(outcomes: [IntentOutcome]) { access.end(outcomes: outcomes) }
}
