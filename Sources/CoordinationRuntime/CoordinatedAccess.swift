import Coordination
import Dispatch
import Foundation

/// The coordinator an access runs for, as the runtime needs it (a `FileCoordinator`).
package protocol AccessCoordinator: AnyObject, Sendable {
    var isCancelled: Bool { get }
    var identity: CoordinatorIdentity { get }
    var waitTimeout: Duration? { get }
    /// The key the presenter it was made with is registered under (`CoordinationDomain.register`).
    var presenterKey: ObjectIdentifier? { get }
    /// Keeps a waiting access, for `cancel`, until `untrack`.
    func track(_ access: CoordinatedAccess)
    func untrack(_ access: CoordinatedAccess)
}

// @unchecked Sendable: its phase and remote holds are behind `lock`.
/// One coordination call on its way to the accessor: waiting in the engine, then asking
/// presenters, then granted. Every coordinate method — synchronous, on a queue, async/await or
/// as an `Operation` — and every claim of a mount's request or a socket client's hold runs
/// through this one path.
package final class CoordinatedAccess: @unchecked Sendable {
    enum Phase {
        case idle
        case waiting(TicketID)
        /// The messenger is nil when there was nobody to ask.
        case messaging(Grant, PresenterMessenger?)
        case granted(Grant, PresenterMessenger?)
        case ended
    }

    /// The coordinator it runs for; nil for a `Claim` (a mount's request, a client's hold).
    package let coordinator: (any AccessCoordinator)?
    package let domain: CoordinationDomain
    package let request: AccessRequest
    private let lock = NSLock()
    private var phase: Phase = .idle
    private var completion: (@Sendable (Result<CoordinatedAccess, AccessFailure>) -> Void)?
    private var timer: DispatchWorkItem?
    /// Set by a cancel that came before the request reached the engine.
    private var cancelRequested: CoordinationError?
    /// Holds taken in coordfs mounts served by other processes, and the one being waited for.
    private var remoteHolds: [(MountLink, Int)] = []
    /// An item of a remote hold whose coordination the server broke (`broken`).
    private var brokenItem: String?
    /// Items that moved while a remote hold waited (C11): where they were, where they are.
    private var remoteMoves: [ItemPath: ItemPath] = [:]
    private var remoteRequest: (link: MountLink, id: Int)?
    /// Set by `breakThrough`: it goes ahead without waiting for anyone any more.
    private var brokeThrough = false
    /// Set when it went ahead holding nothing (`goAheadHoldingNothing`).
    private var heldNothing = false
    /// The grants a broken wait went past on the access's own items, for `revokePassed`.
    private var passedGrants: [GrantID] = []
    /// Existence of each written item once presenters have answered, for the notifications after.
    private var before: [ItemLocator.Fingerprint?] = []

    package init(coordinator: any AccessCoordinator, domain: CoordinationDomain, request: AccessRequest) {
        self.coordinator = coordinator
        self.domain = domain
        self.request = request
    }

    package init(domain: CoordinationDomain, request: AccessRequest) {
        self.coordinator = nil
        self.domain = domain
        self.request = request
    }

    /// The item errors name: the first of the request's.
    private var item: String { request.intents.first?.path.string ?? "/" }

    /// The intents as granted, with their paths updated by moves while waiting (C11).
    package var grantedIntents: [Intent] {
        lock.withLock {
            var intents: [Intent]
            switch phase {
            case .granted(let grant, _), .messaging(let grant, _): intents = grant.intents
            default: intents = request.intents
            }
            if !remoteMoves.isEmpty {
                for index in intents.indices {
                    if let moved = remoteMoves[intents[index].path] { intents[index].target.path = moved }
                }
            }
            return intents
        }
    }

    /// Reports a move made in the accessor to the daemons this access holds items in: they do
    /// not see the rename (a mount does, and reports it itself).
    /// Every daemon is told; the first refusal is thrown once all have been.
    package func reportRemoteMove(from source: ItemPath, to destination: ItemPath) throws {
        let holds = lock.withLock { remoteHolds }
        var refusal: Error?
        for (link, number) in holds where link.isDaemon {
            do { try link.reportMove(in: number, from: source, to: destination) } catch { refusal = refusal ?? error }
        }
        if let refusal { throw refusal }
    }

    package var grantID: GrantID? {
        lock.withLock {
            if case .granted(let grant, _) = phase { return grant.id }
            return nil
        }
    }

    /// Presenters this access asked to relinquish (for a prepared batch, C9).
    package var relinquishedPresenters: Set<PresenterID> {
        lock.withLock {
            guard case .granted(let grant, _) = phase else { return [] }
            return Set(grant.requests.filter { $0.messages.contains { $0.deliveryRank == 0 } }.map(\.presenter))
        }
    }

    /// Starts; `completion` runs once, with this access granted or the error that stopped it, as
    /// the API reports it (`AccessFailure.error`). It may run before `start` returns, on the
    /// calling thread.
    package func start(
        waitTimeout: Duration?, completion: @escaping @Sendable (Result<CoordinatedAccess, Error>) -> Void
    ) {
        begin(waitTimeout: waitTimeout) { result in completion(result.mapError { $0.error }) }
    }

    /// `start`, for the runtime's own callers: `completion` gets the failure as an
    /// `AccessFailure`, the engine's refusal as the engine gave it.
    package func begin(
        waitTimeout: Duration?, completion: @escaping @Sendable (Result<CoordinatedAccess, AccessFailure>) -> Void
    ) {
        let early = lock.withLock { () -> CoordinationError? in
            self.completion = completion
            return cancelRequested
        }
        if coordinator?.isCancelled == true || early != nil {
            return refuse(early ?? .cancelled)
        }
        coordinator?.track(self)
        switch domain.engine.acquire(
            request,
            resume: { [self] result in
                switch result {
                case .success(let grant): granted(grant)
                case .failure(.brokenThrough): goAheadHoldingNothing()
                case .failure(let error): refuse(error)
                }
            })
        {
        case .granted(let grant):
            granted(grant)
        case .refused(let error):
            refuse(error)
        case .waiting(let ticket):
            let (armed, cancelled) = lock.withLock { () -> (Bool, CoordinationError?) in
                guard case .idle = phase else { return (false, nil) }  // resumed already
                phase = .waiting(ticket)
                return (true, cancelRequested)
            }
            if armed, let cancelled {
                domain.engine.abandon(ticket, because: cancelled)
            } else if armed, let waitTimeout {
                let item = DispatchWorkItem { [weak self] in self?.cancel(because: .timedOut) }
                lock.withLock { timer = item }
                DispatchQueue.global().asyncAfter(deadline: .now() + waitTimeout.timeInterval, execute: item)
            }
        }
    }

    /// Runs `body` if the completion has not been delivered yet, under the lock that delivers it:
    /// what `body` registers is in place before the completion can run. Returns whether it ran.
    package func ifUnsettled(_ body: () -> Void) -> Bool {
        lock.withLock {
            guard completion != nil else { return false }
            body()
            return true
        }
    }

    /// Stops waiting (for the engine or for presenters); no effect once granted (C13).
    package func cancel(because reason: CoordinationError = .cancelled) {
        let current = lock.withLock { () -> Phase in
            if cancelRequested == nil { cancelRequested = reason }
            return phase
        }
        switch current {
        case .waiting(let ticket):
            // The engine resumes the waiter with `reason` unless it was granted meanwhile.
            _ = domain.engine.abandon(ticket, because: reason)
        case .messaging(let grant, let messenger):
            // Asking presenters, it fails cancelled, whatever the reason (C13).
            messenger?.fail(with: .refused(.cancelled, item: item))
            if let remote = lock.withLock({ remoteRequest }) { remote.link.cancel(remote.id) }
            // Waiting for what its presenters' own work took: still a wait (C13).
            if domain.engine.abandonSettling(grant.id) {
                abandonGrant(grant, .refused(reason, item: item))
            }
        case .idle, .granted, .ended:
            break
        }
    }

    /// Ends its wait with `reason`, as its timeout would: waiting in the engine, asking
    /// presenters (whose answers still missing are not waited for; those that relinquished are
    /// given their items back), or waiting for what their own work took (`isSettling`). It
    /// fails, holding nothing. Whether it ended it (false when it went on meanwhile).
    @discardableResult
    package func giveUp(because reason: CoordinationError) -> Bool {
        switch lock.withLock({ phase }) {
        case .waiting(let ticket):
            return domain.engine.abandon(ticket, because: reason)
        case .messaging(let grant, let messenger):
            let failure = AccessFailure.refused(reason, item: item)
            if domain.engine.abandonSettling(grant.id) {
                abandonGrant(grant, failure)
                return true
            }
            // Its completion ends the grant with the failure (`granted`).
            return messenger?.fail(with: failure) ?? false
        case .idle, .granted, .ended:
            return false
        }
    }

    /// Ends a wait in the engine with `reason`, as `cancel` does; no effect once granted, also
    /// while asking presenters (an O_NONBLOCK open that a blocking one would wait for, refused
    /// with `.wouldBlock`, unless a holder let it in meanwhile).
    package func stopWaiting(because reason: CoordinationError) {
        if case .waiting(let ticket) = lock.withLock({ phase }) { domain.engine.abandon(ticket, because: reason) }
    }

    /// Whom this access waits for now: the holders in its way, or the owners of the presenters
    /// it is asking (and then the holders of what their own work took).
    package var awaited: Set<CoordinatorIdentity> {
        switch lock.withLock({ phase }) {
        case .waiting(let ticket): domain.engine.blockers(of: ticket) ?? []
        case .messaging(let grant, _): domain.engine.awaited(by: grant.id)
        case .idle, .granted, .ended: []
        }
    }

    /// While it asks presenters, the owners of those that have not answered yet (a presenter
    /// that said it is still working among them); nil in any other phase.
    package var unansweredOwners: Set<CoordinatorIdentity>? {
        guard case .messaging(let grant, let messenger?) = lock.withLock({ phase }), !domain.engine.isSettling(grant.id)
        else { return nil }
        return Set(messenger.unanswered.compactMap { domain.engine.presenter($0)?.owner })
    }

    /// The grants of `holders` in its way now (`awaited`'s holders' grants): waiting in the
    /// engine, those on its items, inside those it covers and above them; settling after its
    /// presenters' work, those its grant waits for. Empty while it asks presenters, and once
    /// granted. What a caller about to let it past them (`breakThrough`) tells (`BROKEN`).
    package func grantsInItsWay(of holders: Set<CoordinatorIdentity>) -> Set<GrantID> {
        if holders.isEmpty { return [] }
        switch lock.withLock({ phase }) {
        case .waiting(let ticket): return Set(domain.engine.grants(of: holders, inTheWayOf: ticket))
        case .messaging(let grant, _): return Set(domain.engine.grants(of: holders, inTheWayOfSettling: grant.id))
        case .idle, .granted, .ended: return []
        }
    }

    /// Whether it waits in the engine for holders (not for presenters' answers).
    package var waitsForHolders: Bool {
        if case .waiting = lock.withLock({ phase }) { return true }
        return false
    }

    /// Whether it is granted and its presenters have answered, but it waits for what their own
    /// work took meanwhile (C21, `CoordinationEngine.finishMessaging`): holders again, not
    /// presenters.
    package var isSettling: Bool {
        guard case .messaging(let grant, _) = lock.withLock({ phase }) else { return false }
        return domain.engine.isSettling(grant.id)
    }

    /// Stops waiting and goes ahead: the holders in its way, or the presenters it asks, need
    /// something its caller holds to finish (a kernel lock a mount's request holds while it
    /// waits), or have been waited for as long as they may be. Waiting in the engine, it goes
    /// ahead holding nothing, and presenters are still told what it did; asking presenters, it
    /// goes on without the answers still missing.
    ///
    /// `revoking`: holders whose grants in its way are revoked first (leases broken at the
    /// break time): they hold nothing from then on, and it is granted as usual if nothing else
    /// stands in its way. Settling after its presenters' own work, it is let past those holders
    /// alone (`CoordinationEngine.breakSettling`). `noting`: holders whose grants on its own
    /// items (and inside them) it remembers, for `revokePassed` once its change is made. Returns
    /// how many grants were revoked.
    @discardableResult
    package func breakThrough(
        revoking holders: Set<CoordinatorIdentity> = [], noting passed: Set<CoordinatorIdentity> = []
    ) -> Int {
        switch lock.withLock({
            brokeThrough = true; return phase
        }) {
        case .waiting(let ticket):
            // Looked up while it still waits: once it goes ahead, nothing stands in its way.
            if !passed.isEmpty {
                let found = domain.engine.grants(of: passed, onTheItemsOf: ticket)
                if !found.isEmpty { lock.withLock { passedGrants += found } }
            }
            if !holders.isEmpty { return domain.engine.breakThrough(ticket, revoking: holders).count }
            domain.engine.abandon(ticket, because: .brokenThrough)
        case .messaging(let grant, let messenger):
            if !holders.isEmpty && domain.engine.isSettling(grant.id) {
                return domain.engine.breakSettling(grant.id, revoking: holders).count
            }
            messenger?.stopWaiting()
            domain.engine.stopSettling(grant.id)
        case .idle, .granted, .ended: break
        }
        return 0
    }

    /// Revokes the grants a broken wait went past on the access's own items (`breakThrough`'s
    /// `noting`), once what it did took those items away from them: a name removed, replaced
    /// or moved elsewhere. Returns how many it revoked.
    @discardableResult
    package func revokePassed() -> Int {
        let grants = lock.withLock { () -> [GrantID] in
            defer { passedGrants = [] }
            return passedGrants
        }
        return domain.engine.revoke(grants)
    }

    /// `breakThrough` while it waits in the engine for holders, and only then: one asking
    /// presenters goes on asking them. Whether it broke through (false too when it was granted
    /// meanwhile).
    package func breakThroughWhileWaiting() -> Bool {
        guard case .waiting(let ticket) = lock.withLock({ phase }) else { return false }
        return domain.engine.abandon(ticket, because: .brokenThrough)
    }

    /// Whether its wait was broken and it went ahead holding nothing (a mount's request that
    /// went ahead of leases: `WaitWatch`).
    package var wentAheadHoldingNothing: Bool { lock.withLock { heldNothing } }

    /// After a broken wait: granted at once, holding nothing and asking nobody.
    private func goAheadHoldingNothing() {
        var telling = request
        telling.holdsIntents = false
        telling.messagesPresenters = false
        switch domain.engine.acquire(telling, resume: { _ in }) {
        case .granted(let grant):
            lock.withLock {
                phase = .messaging(grant, nil)
                heldNothing = true
            }
            completeGrant(grant)
        case .waiting(let ticket):
            domain.engine.abandon(ticket, because: .cancelled)  // holding nothing, it cannot wait
            refuse(.timedOut)
        case .refused(let error):
            refuse(error)
        }
    }

    private func granted(_ grant: Grant) {
        lock.withLock {
            timer?.cancel()
            timer = nil
        }
        // Nobody to ask and nothing held in other mounts, the common case: granted at once, with
        // no messenger and no engine call to end a messaging that never began.
        if grant.requests.isEmpty && remoteGroups(grant).isEmpty {
            lock.withLock { phase = .messaging(grant, nil) }
            return completeGrant(grant)
        }
        let messenger = PresenterMessenger(grant.requests, domain: domain, accessor: request.identity) {
            [self] failure in
            if let failure { return abandonGrant(grant, failure) }
            domain.engine.finishMessaging(grant.id, overlapping: lock.withLock { brokeThrough }) { [self] in
                takeRemote(remoteGroups(grant)[...]) { [self] error in
                    if let error { return abandonGrant(grant, .failed(error)) }
                    completeGrant(grant)
                }
            }
        }
        lock.withLock { phase = .messaging(grant, messenger) }
        messenger.start()
    }

    /// The intents inside coordfs mounts served by other processes, by mount.
    private func remoteGroups(_ grant: Grant) -> [(MountLink, [Intent])] {
        guard coordinator != nil, domain.usesMounts else { return [] }
        var groups: [(MountLink, [Intent])] = []
        for intent in grant.intents {
            guard let link = domain.link(for: intent.path) else { continue }
            if let index = groups.firstIndex(where: { $0.0 === link }) {
                groups[index].1.append(intent)
            } else {
                groups.append((link, [intent]))
            }
        }
        return groups
    }

    /// Takes the remote holds one mount after another; `finish` gets nil or the first error.
    private func takeRemote(_ groups: ArraySlice<(MountLink, [Intent])>, _ finish: @escaping @Sendable (Error?) -> Void)
    {
        guard let (link, intents) = groups.first else { return finish(nil) }
        let done = PendingFlag()
        // One coordinator at the server too: its nested and batched accesses never wait for each other.
        let id = link.hold(
            intents, forPresenter: coordinator?.presenterKey, coordinator: coordinator.map { "\($0.identity)" },
            timeout: coordinator?.waitTimeout
        ) { [self] result in
            done.set()
            lock.withLock { remoteRequest = nil }
            switch result {
            case .success(let (number, paths)):
                lock.withLock {
                    remoteHolds.append((link, number))
                    for (intent, path) in zip(intents, paths) where path != intent.path.string {
                        if let moved = ItemPath(path) { remoteMoves[intent.path] = moved }
                    }
                }
                takeRemote(groups.dropFirst(), finish)
            case .failure(let error):
                finish(error)
            }
        }
        let cancelled = lock.withLock { () -> Bool in
            guard !done.isSet else { return false }
            remoteRequest = (link, id)
            return cancelRequested != nil
        }
        if cancelled { link.cancel(id) }
    }

    private func releaseRemote(changed: Bool) {
        let holds = lock.withLock { () -> [(MountLink, Int)] in
            defer { remoteHolds = [] }; return remoteHolds
        }
        for (link, number) in holds {
            guard let item = link.release(number, changed: changed) else { continue }
            lock.withLock { if brokenItem == nil { brokenItem = item } }
            domain.report(.coordinationBroken(item: item))
        }
    }

    /// The item another's access went ahead on while this access held it (another user's,
    /// docs/sharing.md; another host's, once this host lost its cover, docs/cluster.md), once
    /// the access has ended; nil when its coordination held throughout.
    package var broken: String? { lock.withLock { brokenItem } }

    /// The wait failed after the local grant: give everything back and fail.
    private func abandonGrant(_ grant: Grant, _ failure: AccessFailure) {
        releaseRemote(changed: false)
        domain.engine.release(grant.id)
        let messenger = lock.withLock { () -> PresenterMessenger? in
            if case .messaging(_, let messenger) = phase { return messenger }
            return nil
        }
        messenger?.endAccess()
        fail(failure)
    }

    private func completeGrant(_ grant: Grant) {
        // A claim's owner reports outcomes itself (and its items may be behind this very mount).
        var fingerprints: [ItemLocator.Fingerprint?] = []
        if coordinator != nil {
            let moves = lock.withLock { remoteMoves }
            fingerprints = grant.intents.map {
                $0.kind.isWrite ? ItemLocator.fingerprint(Self.path(of: $0, after: moves)) : nil
            }
        }
        let completion = lock.withLock { () -> (@Sendable (Result<CoordinatedAccess, AccessFailure>) -> Void)? in
            guard case .messaging(_, let messenger) = phase else { return nil }
            before = fingerprints
            phase = .granted(grant, messenger)
            defer { self.completion = nil }
            return self.completion
        }
        completion?(.success(self))
    }

    /// The engine refused it, or it gave up waiting, for `reason`.
    private func refuse(_ reason: CoordinationError) { fail(.refused(reason, item: item)) }

    private func fail(_ failure: AccessFailure) {
        let completion = lock.withLock { () -> (@Sendable (Result<CoordinatedAccess, AccessFailure>) -> Void)? in
            timer?.cancel()
            timer = nil
            phase = .ended
            defer { self.completion = nil }
            return self.completion
        }
        coordinator?.untrack(self)
        completion?(.failure(failure))
    }

    /// Where the accessor found the item of `intent`: where the grant names it, unless a hold in
    /// another process's mount or daemon waited while that process moved the item (C11), and so
    /// was granted where the item went (`remoteMoves`), as the accessor's URL says. What changed
    /// is looked for there: looked for where the item had been, nothing was there before or
    /// after, and the server was told that nothing changed, so the item's presenters heard
    /// relinquish, save and reacquire with no did-change between.
    private static func path(of intent: Intent, after moves: [ItemPath: ItemPath]) -> ItemPath {
        moves.isEmpty ? intent.path : moves[intent.path] ?? intent.path
    }

    /// Ends the access: releases the grant, tells presenters what changed (from `outcomes`, or
    /// by looking at the items), runs reacquirers, and reads the coordinator's presenter's URL
    /// again (C5, C22). The notifications go out through `CoordinationDomain.deliver`.
    package func end(outcomes given: [IntentOutcome]? = nil) {
        let ended = lock.withLock {
            () -> (Grant, PresenterMessenger?, [ItemLocator.Fingerprint?], [ItemPath: ItemPath])? in
            guard case .granted(let grant, let messenger) = phase else { return nil }
            phase = .ended
            return (grant, messenger, before, remoteMoves)
        }
        coordinator?.untrack(self)
        guard let (grant, messenger, before, moves) = ended else { return }
        let outcomes =
            given
            ?? zip(grant.intents, before).map { intent, old -> IntentOutcome in
                let new = intent.kind.isWrite ? ItemLocator.fingerprint(Self.path(of: intent, after: moves)) : nil
                return IntentOutcome(existedBefore: old != nil, existsAfter: new != nil, changed: old != new)
            }
        // Presenters hear what the access did, then get their reacquirers, and only then is the
        // next access let in to ask them again (P4, and Apple's order).
        domain.engine.release(
            grant.id, outcomes: outcomes, deliver: { domain.deliver($0) },
            beforeWaking: { messenger?.endAccess() })
        // Other processes' presenters are told of every write of an item that exists (P9): a
        // file's fingerprint may not show a save (an inode number used again, a timestamp
        // of the same clock tick).
        releaseRemote(
            changed: zip(grant.intents, outcomes).contains { $0.kind.isWrite && ($1.existedBefore || $1.existsAfter) })
        if let key = coordinator?.presenterKey, let id = domain.presenterID(forKey: key) { domain.refresh(id) }
    }
}

// @unchecked Sendable: its value is behind `lock`.
/// Set once, read from any thread.
final class PendingFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}
