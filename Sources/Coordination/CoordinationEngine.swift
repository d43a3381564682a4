import Synchronization

/// The coordination engine: a lock table over item paths, FIFO waiters, a wait-for graph, and
/// the registries of presenters and services.
///
/// It performs no I/O and never calls out while holding its lock: waiters are resumed and
/// messages are returned to the caller after the lock is released (X6). Timeouts are the
/// caller's: it abandons a ticket when its clock says so.
///
/// Lock order: `state` is the only lock; nothing is called while it is held.
public final class CoordinationEngine: Sendable {
    /// Resumes a waiting request exactly once, with its grant or the reason it ended.
    public typealias Resume = @Sendable (Result<Grant, CoordinationError>) -> Void

    let state = Mutex(State())
    /// Open while the engine holds nothing.
    let quietGate = QuietGate()
    /// Open while it holds nothing but gated grants (`Quietness.onlyGatedGrants`).
    let gatedGate = QuietGate()

    public init() {}

    /// Runs `body` under the lock, as every section that may change what the engine holds does:
    /// it closes each quiet gate when the engine comes to hold more than the gate allows and
    /// opens it when that is over, and returns only once nobody passes a closed gate who
    /// entered before it closed (`QuietGate`).
    @inline(__always)
    func withState<Result, E: Error>(_ body: (inout State) throws(E) -> sending Result) throws(E) -> sending Result {
        defer {
            quietGate.waitForPassingAccesses()
            gatedGate.waitForPassingAccesses()
        }
        return try state.withLock { state throws(E) -> sending Result in
            defer {
                let onlyGated = state.holdsOnlyGatedGrants
                // Nothing held at all: not even a gated grant, listed or in the tables.
                let quiet = onlyGated && state.shortList.isEmpty && state.gatedGrantCount == 0
                if quiet == state.quietGateClosed {
                    state.quietGateClosed = !quiet
                    if quiet { quietGate.open() } else { quietGate.close() }
                }
                if onlyGated == state.gatedGateClosed {
                    state.gatedGateClosed = !onlyGated
                    if onlyGated { gatedGate.open() } else { gatedGate.close() }
                }
            }
            return try body(&state)
        }
    }

    // MARK: Passing quietly

    /// How much the engine may hold while an access passes it (`passQuietly`).
    public enum Quietness: Sendable {
        /// Nothing: no grant, waiter, presenter or service.
        case nothingHeld
        /// Nothing but gated grants (`acquireAtOnce(_:for:gated:)`). The access must also
        /// pass the gates that the owners of those grants keep, which they closed before asking.
        case onlyGatedGrants
    }

    /// Lets a short access pass without a grant while the engine holds no more than `quietness`
    /// allows (`QuietGate`): true, and the caller calls `endPassingQuietly(quietness)` when it is
    /// done, without calling the engine meanwhile; false, and it coordinates as usual.
    public func passQuietly(_ quietness: Quietness = .nothingHeld) -> Bool {
        switch quietness {
        case .nothingHeld: quietGate.enter()
        case .onlyGatedGrants: gatedGate.enter()
        }
    }

    /// Ends an access that `passQuietly(quietness)` let through.
    public func endPassingQuietly(_ quietness: Quietness = .nothingHeld) {
        switch quietness {
        case .nothingHeld: quietGate.leave()
        case .onlyGatedGrants: gatedGate.leave()
        }
    }

    /// Accesses passing now, and whether the gate lets more through.
    public func quietPassage(_ quietness: Quietness = .nothingHeld) -> (passing: Int, isOpen: Bool) {
        let status =
            switch quietness {
            case .nothingHeld: quietGate.status
            case .onlyGatedGrants: gatedGate.status
            }
        return (status.passing, status.closers == 0)
    }

    // MARK: Acquisition

    /// What `acquire` did at once.
    public enum Acquisition: Sendable {
        /// Every intent is held; `resume` will not be called.
        case granted(Grant)
        /// The request waits; `resume` will be called exactly once.
        case waiting(TicketID)
        /// Refused at once (would block without waiting, deadlock, invalid); `resume` will not be called.
        case refused(CoordinationError)
    }

    /// Asks for all of `request`'s intents at once (C6): they are granted together or the
    /// request waits holding none of them.
    public func acquire(_ request: AccessRequest, resume: @escaping Resume) -> Acquisition {
        if let problem = request.validationProblem { return .refused(.invalidRequest(problem)) }
        let modes = request.holdsIntents ? request.intents.map(LockMode.init) : []
        return withState { state -> Acquisition in
            let blockers = state.blockers(of: request.identity, modes, queuedBefore: state.waiting.count)
            if blockers.isEmpty {
                let requests = request.messagesPresenters ? state.requestPlan(for: request) : []
                return .granted(state.grant(request, modes, requests: requests))
            }
            if !request.waits { return .refused(.wouldBlock) }
            if let cycle = state.cycle(from: request, through: blockers) {
                return .refused(.deadlock(cycle: cycle))
            }
            let ticket = TicketID(rawValue: state.takeNumber())
            state.waiting.append(
                State.Waiter(
                    ticket: ticket, request: request, modes: modes,
                    blockers: blockers, resume: resume, since: .now))
            return .waiting(ticket)
        }
    }

    /// Grants `request` at once, from the tables, when nothing blocks it and no presenter has to
    /// be asked first; otherwise takes nothing and returns nil, and the caller
    /// goes through `acquire`. It allocates no waiter, so it costs a fraction of a full call.
    /// The grant's intents are the request's (nothing moved them while it waited: it did not).
    public func acquireAtOnce(_ request: AccessRequest) -> GrantID? {
        if request.validationProblem != nil { return nil }
        return withState { state in state.grantAtOnce(request) }
    }

    /// `acquireAtOnce` of one intent that holds its item and whose grant reports no move (a
    /// mount's request, or its open file): no request is built unless the tables decide. Such a
    /// grant, with nothing waiting and nobody to ask, is kept on the engine's short list
    /// (`ShortList`), which costs less to take and to end; it blocks and is released like any
    /// grant, has nothing to finish messaging and cannot report a move (`reportMove` throws
    /// `.notInsideWrite`). A caller that may move the item uses `acquireAtOnce(_:)`.
    ///
    /// `gated`: the caller keeps the grant from every access that passes the engine beside
    /// gated grants (`Quietness.onlyGatedGrants`): it keeps gates of its own, which such
    /// an access passes too, and it closed them (waiting for those passing) before asking, and
    /// opens them only after the release. A grant that finds the short list full is gated in
    /// the tables: a mount with many files open still lets such accesses pass. (One that goes to
    /// the tables because something waits, a presenter or service is registered or a subtree is
    /// held closes the gate anyway, with what made it go there.)
    public func acquireAtOnce(
        _ intent: consuming Intent, for identity: CoordinatorIdentity,
        gated: Bool = false
    ) -> GrantID? {
        if !intent.isValid { return nil }
        let kind = LockKind(intent)
        // Moved into the lock's closure and on into the grant, never copied.
        var given = Optional(consume intent)
        return withState { state -> GrantID? in
            guard state.suitsShortList(kind) else {
                return state.grantAtOnce(
                    AccessRequest(identity: identity, intents: [given.take()!], waits: false),
                    gated: gated && !kind.coversSubtree)
            }
            return state.grantOnShortList(given.take()!, kind: kind, for: identity, gated: gated)
        }
    }

    /// Ends a waiting request with `reason` (a timeout, a cancellation). Returns false when it
    /// was no longer waiting: it was granted, and its `resume` has been or is being called.
    @discardableResult
    public func abandon(_ ticket: TicketID, because reason: CoordinationError) -> Bool {
        let (resume, woken) = withState { state -> (Resume?, [State.Wakeup]) in
            guard let index = state.waiting.firstIndex(where: { $0.ticket == ticket }) else { return (nil, []) }
            let waiter = state.waiting.remove(at: index)
            return (waiter.resume, state.grantWaiters())
        }
        resume?(.failure(reason))
        woken.forEach { $0.run() }
        return resume != nil
    }

    /// Whom a waiting request waits for (the holders and earlier waiters in its way), or nil
    /// when it is no longer waiting.
    public func blockers(of ticket: TicketID) -> Set<CoordinatorIdentity>? {
        state.withLock { state in state.waiting.first { $0.ticket == ticket }?.blockers }
    }

    /// Whom a grant still waits for before its accessor runs: the owners of the presenters it
    /// is asking (C21), then the holders of what their own work took (`finishMessaging`).
    public func awaited(by grant: GrantID) -> Set<CoordinatorIdentity> {
        state.withLock { state in
            guard let record = state.grants[grant] else { return [] }
            if !record.messaging.isEmpty { return record.messaging }
            guard let settling = state.settling.first(where: { $0.grant == grant }) else { return [] }
            return state.blockers(of: settling.identity, settling.modes, queuedBefore: 0)
        }
    }

    /// Lets a grant that `finishMessaging` keeps waiting go ahead now (a wait broken through).
    public func stopSettling(_ grant: GrantID) {
        let settled = withState { state -> State.Settling? in
            guard let index = state.settling.firstIndex(where: { $0.grant == grant }) else { return nil }
            return state.settling.remove(at: index)
        }
        settled?.proceed()
    }

    /// Whether `grant` waits for what its presenters' own work took (`finishMessaging`): it
    /// waits for holders again, as a request in the queue does, though it is granted.
    public func isSettling(_ grant: GrantID) -> Bool {
        state.withLock { state in state.settling.contains { $0.grant == grant } }
    }

    /// Ends the wait of a grant that `finishMessaging` keeps waiting without letting it go
    /// ahead (a cancelled or refused access): its `proceed` will not run, and its owner ends the
    /// grant. False when it was not waiting so (it went ahead, or never waited).
    public func abandonSettling(_ grant: GrantID) -> Bool {
        state.withLock { state -> Bool in
            guard let index = state.settling.firstIndex(where: { $0.grant == grant }) else { return false }
            state.settling.remove(at: index)
            return true
        }
    }

    /// Clears the grant's waiver for the presenters it was messaging: from now on the owners of
    /// those presenters wait for it like anyone else (C21). What their own work took meanwhile
    /// may still hold the grant's items: `proceed` runs once none of it does — at once, or when
    /// the last such access ends — so that the grant's accessor never overlaps it.
    /// `overlapping`: go ahead at once all the same (a wait broken through: what passed may be
    /// what cannot end before the grant's owner goes on).
    public func finishMessaging(
        _ grant: GrantID, overlapping: Bool = false, then proceed: @escaping @Sendable () -> Void
    ) {
        let now = withState { state -> Bool in
            guard let record = state.grants[grant] else { return true }
            state.grants[grant]!.messaging = []
            if overlapping { return true }
            let modes = record.holdsIntents ? record.intents.map(LockMode.init) : []
            if state.isFree(for: record.identity, modes) { return true }
            state.settling.append(
                State.Settling(grant: grant, identity: record.identity, modes: modes, proceed: proceed))
            return false
        }
        if now { proceed() }
    }

    /// Ends a grant and returns the notifications its writes call for (P9, P10, P12, P19, P20),
    /// after handing them to `deliver` and before waking whoever can now proceed — so a
    /// presenter hears of a write before it is asked about the next access. `outcomes` parallels
    /// the grant's intents; pass nil for an access that changed nothing.
    @discardableResult
    /// `beforeWaking` runs after `deliver`, before anyone waiting is woken: an access's
    /// reacquirers go there, so that a presenter hears them before the next access asks it.
    public func release(
        _ grant: GrantID, outcomes: [IntentOutcome]? = nil,
        deliver: ([PresenterDelivery<PresenterNotification>]) -> Void = { _ in },
        beforeWaking: () -> Void = {}
    )
        -> [PresenterDelivery<PresenterNotification>]
    {
        release(grant, someOutcomes: outcomes, deliver: deliver, beforeWaking: beforeWaking)
    }

    /// `release` of a one-intent grant, without an array for its one outcome: the end of most
    /// kernel requests.
    @discardableResult
    public func release(
        _ grant: GrantID, outcome: IntentOutcome,
        deliver: ([PresenterDelivery<PresenterNotification>]) -> Void = { _ in }
    )
        -> [PresenterDelivery<PresenterNotification>]
    {
        release(grant, someOutcomes: CollectionOfOne(outcome), deliver: deliver, beforeWaking: {})
    }

    private func release<Outcomes: Collection<IntentOutcome> & Sendable>(
        _ grant: GrantID, someOutcomes outcomes: Outcomes?,
        deliver: ([PresenterDelivery<PresenterNotification>]) -> Void, beforeWaking: () -> Void
    ) -> [PresenterDelivery<PresenterNotification>] {
        // The common end, on a path of its own (it runs cold, so its length is its cost).
        if grant.isOnShortList && withState({ $0.releaseListedQuietly(grant) }) { return [] }
        let (notifications, woken) = withState {
            state -> ([PresenterDelivery<PresenterNotification>], [State.Wakeup]) in
            if grant.isOnShortList {
                guard let index = state.shortList.index(of: grant.shortListNumber) else { return ([], []) }
                let entry = state.shortList.remove(at: index)
                let intents = CollectionOfOne(entry.intent)
                let notes =
                    outcomes.map { state.notifications(by: entry.identity, of: intents, moved: [], outcomes: $0) } ?? []
                if let outcomes {
                    state.endServices(ofItemsDeletedBy: intents, outcomes: outcomes)
                    if entry.kind.passesOpenReads { state.dropOpenFileHolds(removedBy: intents, outcomes: outcomes) }
                }
                return (notes, state.waiting.isEmpty && state.settling.isEmpty ? [] : state.grantWaiters())
            }
            guard let record = state.removeGrant(grant) else { return ([], []) }
            let notes = outcomes.map { state.notifications(after: record, outcomes: $0) } ?? []
            if let outcomes {
                state.endServices(ofItemsDeletedBy: record.intents, outcomes: outcomes)
                state.dropOpenFileHolds(removedBy: record.intents, outcomes: outcomes)
            }
            return (notes, state.grantWaiters())
        }
        if !notifications.isEmpty { deliver(notifications) }
        beforeWaking()
        woken.forEach { $0.run() }
        return notifications
    }

    /// Ends everything `identity` holds, waits for and presents: its process died or its client
    /// closed the connection (X4). Waiters of that identity end with `.ownerGone`.
    public func endSession(of identity: CoordinatorIdentity) {
        let (ended, woken) = withState { state -> ([Resume], [State.Wakeup]) in
            for (id, record) in state.grants where record.identity == identity { _ = state.removeGrant(id) }
            state.shortList.removeAll(of: identity)
            var ended: [Resume] = []
            state.waiting.removeAll { waiter in
                guard waiter.request.identity == identity else { return false }
                ended.append(waiter.resume)
                return true
            }
            for (id, record) in state.presenters where record.owner == identity { state.removePresenter(id) }
            for (id, record) in state.services where record.owner == identity { state.services[id] = nil }
            for (id, _) in state.grants { state.grants[id]!.messaging.remove(identity) }
            return (ended, state.grantWaiters())
        }
        ended.forEach { $0(.failure(.ownerGone)) }
        woken.forEach { $0.run() }
    }

    // MARK: Presenters

    /// Registers a presenter (C16).
    public func addPresenter(_ record: PresenterRecord) -> PresenterID {
        withState { state in
            let id = PresenterID(rawValue: state.takeNumber())
            state.insertPresenter(id, record)
            return id
        }
    }

    /// Unregisters a presenter; unknown ids are ignored.
    public func removePresenter(_ id: PresenterID) {
        withState { state in state.removePresenter(id) }
    }

    /// Removes many presenters (a connection's watches, when it closes), a few hundred for
    /// each time the lock is taken: one at a time, a client that ends with tens of thousands
    /// of watches queued every other request behind it, a lock hand-over each; all at once,
    /// it would hold the lock for the whole.
    public func removePresenters(_ ids: [PresenterID]) {
        var start = ids.startIndex
        while start < ids.endIndex {
            let end = min(start + 256, ids.endIndex)
            withState { state in for id in ids[start..<end] { state.removePresenter(id) } }
            start = end
        }
    }

    /// Re-indexes a presenter under the URL it now reports (C22, P8).
    public func updatePresenter(_ id: PresenterID, path: ItemPath?, primaryPath: ItemPath?) {
        withState { state in
            guard var record = state.presenters[id] else { return }
            if record.path == path && record.primaryPath == primaryPath { return }
            state.removePresenter(id)
            record.path = path
            record.primaryPath = primaryPath
            state.insertPresenter(id, record)
        }
    }

    /// The record of a presenter, if registered.
    public func presenter(_ id: PresenterID) -> PresenterRecord? {
        state.withLock { $0.presenters[id] }
    }

    /// Every registered presenter.
    public var presenters: [PresenterID: PresenterRecord] { state.withLock { $0.presenters } }
}

/// One coordination call: who asks, and for what.
public struct AccessRequest: Sendable {
    public var identity: CoordinatorIdentity
    public var intents: [Intent]
    /// False for a non-blocking request (`O_NONBLOCK`): refused with `.wouldBlock` instead of waiting.
    public var waits: Bool
    /// Presenters asked to relinquish already (by an enclosing prepared batch, C9): they are not
    /// asked again (P21).
    public var alreadyRelinquished: Set<PresenterID>
    /// False when the caller will not message presenters (the `off` and metadata paths).
    public var messagesPresenters: Bool
    /// True for a prepared batch: presenters of everything inside the items are asked too (C9).
    public var messagesContents: Bool = false
    /// False for an access that only tells (a mount's `notify` mode): granted at once, it holds
    /// nothing and blocks nobody; its release still yields notifications.
    public var holdsIntents: Bool = true
    /// The user the requester acts for (its filesystem uid), where its caller knows it.
    public var user: UInt32? = nil
    /// Its wait for coordinators of another `user` ends by itself: across users a hold is a
    /// lease, which its caller goes past at the break time (docs/sharing.md). Such a wait closes
    /// no deadlock (X1).
    public var passesOtherUsers = false

    public init(
        identity: CoordinatorIdentity, intents: [Intent], waits: Bool = true,
        alreadyRelinquished: Set<PresenterID> = [], messagesPresenters: Bool = true
    ) {
        self.identity = identity
        self.intents = intents
        self.waits = waits
        self.alreadyRelinquished = alreadyRelinquished
        self.messagesPresenters = messagesPresenters
    }

    var validationProblem: String? {
        if intents.isEmpty { return "a coordination call needs at least one intent" }
        for intent in intents {
            if let problem = intent.validationProblem { return problem }
        }
        return nil
    }
}

/// A granted call: the intents, with their paths as moved while the call waited (C11), and the
/// requests to put to presenters before the accessor may run.
public struct Grant: Sendable {
    public let id: GrantID
    public let identity: CoordinatorIdentity
    public let intents: [Intent]
    public let requests: [PresenterDelivery<PresenterRequest>]
}
