import Coordination

/// The intents held for someone who is not a `FileCoordinator` — a program's request through a
/// mount, a control-socket client's hold — from their grant to their end, with the same waiting,
/// presenter messaging and notifications as a coordinator's own accesses.
///
/// Most claims are granted at once with nobody to ask: they hold only the engine's grant, and
/// cost no object. The others hold the `CoordinatedAccess` that waited or asked presenters.
/// Whatever the kind, a claim's notifications go out through `CoordinationDomain.deliver`, which
/// holds them back while the thread is inside `deliveringAfter`.
package enum Claim: Sendable {
    /// Granted at once; its intents are the request's.
    case grant(GrantID, intents: [Intent])
    /// Granted at once for one item (`CoordinationEngine.acquireAtOnce(_:for:)`): it reports no
    /// move, so it keeps no intents.
    case single(GrantID)
    /// `single`, gated: a gate of its holder's (a mount's `NameGates`) was shut for it, and is
    /// opened again by the holder when it ends (`gate`).
    case gated(GrantID, gate: Int)
    /// Waited, or asked presenters first.
    case waited(CoordinatedAccess)
    /// Made inside an accessor of the calling process whose hold (`held`) covers an item it names
    /// (C20, docs/swift.md): it holds nothing of its own and messages nobody; a move it makes is
    /// reported in the hold, and the hold's end tells presenters the rest.
    indirect case accessor(held: Claim, intents: [Intent])

    // MARK: Beginning

    /// The claim, granted now, when nothing blocks `intents` and no presenter has to be asked
    /// first; nil otherwise, having taken nothing. `holds` false tells presenters afterwards
    /// without holding anything (nobody waits).
    package static func grantedAtOnce(
        in domain: CoordinationDomain, identity: CoordinatorIdentity,
        intents: [Intent], holds: Bool = true
    ) -> Claim? {
        domain.engine.acquireAtOnce(request(identity, intents, waits: false, holds: holds)).map {
            .grant($0, intents: intents)
        }
    }

    /// Starts claiming `intents` for `identity`: at once where it can, else waiting. `completion`
    /// runs once — possibly before this returns, on the calling thread — with the claim, granted
    /// and presenters answered, or the failure that stopped it (the engine's refusal, or a
    /// presenter's own error: `AccessFailure`). Returns the waiting access, nil when granted at
    /// once. `waits` false is refused at once instead of waiting. `user`: whose claim it is;
    /// `passesOtherUsers`: its caller lets it past other users' holds at the break time, so its
    /// wait for them closes no deadlock (`AccessRequest`).
    @discardableResult
    package static func begin(
        in domain: CoordinationDomain, identity: CoordinatorIdentity, intents: [Intent],
        waits: Bool = true, holds: Bool = true, timeout: Duration?,
        user: UInt32? = nil, passesOtherUsers: Bool = false,
        completion: @escaping @Sendable (Result<Claim, AccessFailure>) -> Void
    ) -> CoordinatedAccess? {
        if let claim = grantedAtOnce(in: domain, identity: identity, intents: intents, holds: holds) {
            completion(.success(claim))
            return nil
        }
        return beginWaiting(
            in: domain, identity: identity, intents: intents, waits: waits, holds: holds,
            timeout: timeout, user: user, passesOtherUsers: passesOtherUsers, completion: completion)
    }

    /// `begin` for a caller whose `grantedAtOnce` just came back nil: it waits (or is refused)
    /// and asks presenters, without trying the at-once grant a second time. The access returned
    /// is what a caller cancels, watches (`awaited`) or lets through (`breakThrough`).
    package static func beginWaiting(
        in domain: CoordinationDomain, identity: CoordinatorIdentity, intents: [Intent],
        waits: Bool = true, holds: Bool = true, timeout: Duration?,
        user: UInt32? = nil, passesOtherUsers: Bool = false,
        completion: @escaping @Sendable (Result<Claim, AccessFailure>) -> Void
    ) -> CoordinatedAccess {
        var asked = request(identity, intents, waits: waits, holds: holds)
        asked.user = user
        asked.passesOtherUsers = passesOtherUsers && user != nil
        let access = CoordinatedAccess(domain: domain, request: asked)
        access.begin(waitTimeout: timeout) { result in completion(result.map { .waited($0) }) }
        return access
    }

    private static func request(
        _ identity: CoordinatorIdentity, _ intents: [Intent], waits: Bool, holds: Bool
    ) -> AccessRequest {
        var request = AccessRequest(identity: identity, intents: intents, waits: waits)
        request.holdsIntents = holds
        request.messagesPresenters = holds
        return request
    }

    // MARK: Holding

    /// Kept on the engine's short list: its end has nobody to tell unless a presenter registered
    /// meanwhile.
    package var isOnShortList: Bool {
        switch self {
        case .single(let id), .gated(let id, _): id.isOnShortList
        case .grant, .waited, .accessor: false
        }
    }

    /// The intents as granted: paths moved while the claim waited are updated (C11). A single
    /// claim has none to give.
    package var intents: [Intent] {
        switch self {
        case .grant(_, let intents), .accessor(_, let intents): intents
        case .single, .gated: []
        case .waited(let access): access.grantedIntents
        }
    }

    /// The engine's grant it holds by, once granted; nil for a claim inside an accessor, which
    /// holds nothing of its own, and for a waited one not granted (yet, or any more).
    package var grantID: GrantID? {
        switch self {
        case .grant(let id, _), .single(let id), .gated(let id, _): return id
        case .waited(let access): return access.grantID
        case .accessor: return nil
        }
    }

    /// Reports a move made under the claim: presenters follow it (C15).
    package func reportMove(from source: AccessTarget, to destination: AccessTarget, in domain: CoordinationDomain) {
        switch self {
        case .single, .gated:
            assertionFailure("a single claim reports no move")
        case .grant(let id, _):
            // An ended grant has no move to report.
            if let notifications = try? domain.engine.reportMove(in: id, from: source, to: destination),
                !notifications.isEmpty
            {
                domain.deliver(notifications)
            }
        case .waited(let access):
            guard let id = access.grantID,
                let notifications = try? domain.engine.reportMove(in: id, from: source, to: destination),
                !notifications.isEmpty
            else { return }
            domain.deliver(notifications)
        case .accessor(let held, _):
            // A file the accessor made, renamed over the held item (an atomic save), is a new
            // version of it, which the hold's end tells as a change; only the held item moving
            // is a move.
            if held.intents.contains(where: { $0.path == source.path || $0.path.isAncestor(of: source.path) }) {
                held.reportMove(from: source, to: destination, in: domain)
            }
        }
    }

    // MARK: Ending

    /// Ends the claim; `outcome` says what happened to its one item. A gated claim's gate is
    /// its holder's to open, after this.
    package func end(outcome: IntentOutcome, in domain: CoordinationDomain) {
        switch self {
        case .grant(let id, _), .single(let id), .gated(let id, _):
            domain.engine.release(id, outcome: outcome) { domain.deliver($0) }
        case .waited(let access): access.end(outcomes: [outcome])
        case .accessor: break
        }
    }

    /// Ends the claim; `outcomes` (one per intent) say what happened to each item.
    package func end(outcomes: [IntentOutcome], in domain: CoordinationDomain) {
        switch self {
        case .grant(let id, _), .single(let id), .gated(let id, _):
            domain.engine.release(id, outcomes: outcomes) { domain.deliver($0) }
        case .waited(let access): access.end(outcomes: outcomes)
        case .accessor: break
        }
    }
}
