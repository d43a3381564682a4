/// The engine's state; every helper here runs with the engine's lock held.
struct State: ~Copyable {
    struct Hold {
        let grant: GrantID
        let identity: CoordinatorIdentity
        /// Filed under its item's path in `holds`: the path is not repeated here.
        let kind: LockKind
    }

    struct GrantRecord {
        /// When it was granted, among all numbers the engine hands out: orders a snapshot.
        let number: UInt64
        let identity: CoordinatorIdentity
        /// Those of open descriptors follow their item's moves (`relocateOpenFileHolds`).
        var intents: [Intent]
        /// False for an access that only tells (`AccessRequest.holdsIntents`), and for one whose
        /// holds were revoked (`giveUpHolds`).
        var holdsIntents: Bool
        /// Owners of the presenters this grant is messaging: their requests do not wait for it
        /// while it does (C21), and the grant's owner waits for them (wait-for graph).
        var messaging: Set<CoordinatorIdentity>
        /// Since when it has been asking them (for `coordfs status`); nil for a grant that asks nobody.
        var messagingSince: ContinuousClock.Instant? = nil
        /// Moves reported inside this grant: their notifications replace the writes' own.
        var moved: [ItemPath] = []
        /// Its owner keeps it from the accesses that pass beside gated grants, as a listed
        /// one (`ShortList.Entry.gated`): a gated grant that found the list full.
        var gated = false
    }

    struct Waiter {
        let ticket: TicketID
        var request: AccessRequest
        var modes: [LockMode]
        /// Whom it waits for, as of the last scan: the edges of the wait-for graph.
        var blockers: Set<CoordinatorIdentity>
        let resume: CoordinationEngine.Resume
        /// When it began to wait (for `coordfs status`).
        let since: ContinuousClock.Instant
    }

    /// A grant whose presenters have answered, waiting for what their own work took meanwhile
    /// to end before its accessor runs (`finishMessaging`).
    struct Settling {
        let grant: GrantID
        let identity: CoordinatorIdentity
        let modes: [LockMode]
        let proceed: @Sendable () -> Void
    }

    /// A resumption to run once the lock is released: a waiter's grant, or a settled grant.
    struct Wakeup {
        private let resume: CoordinationEngine.Resume?
        private let grant: Grant?
        private let proceed: (@Sendable () -> Void)?

        init(resume: @escaping CoordinationEngine.Resume, grant: Grant) {
            self.resume = resume
            self.grant = grant
            proceed = nil
        }

        init(settled proceed: @escaping @Sendable () -> Void) {
            resume = nil
            grant = nil
            self.proceed = proceed
        }

        func run() {
            if let proceed { proceed() } else if let resume, let grant { resume(.success(grant)) }
        }
    }

    /// The holds on one item: nearly always one, kept without an array of its own.
    struct Holds: Sequence {
        private var first: Hold?
        private var rest: [Hold] = []

        init() {}

        init(_ hold: consuming Hold) { first = hold }

        var isEmpty: Bool { first == nil }

        mutating func append(_ hold: Hold) {
            if first == nil { first = hold } else { rest.append(hold) }
        }

        /// Removes the hold of `grant`, if any.
        mutating func remove(grant: GrantID) {
            if first?.grant == grant {
                first = rest.isEmpty ? nil : rest.removeFirst()
            } else if let index = rest.firstIndex(where: { $0.grant == grant }) {
                rest.remove(at: index)
            }
        }

        struct Iterator: IteratorProtocol {
            fileprivate var first: Hold?
            fileprivate var rest: IndexingIterator<[Hold]>
            mutating func next() -> Hold? {
                if let hold = first { first = nil; return hold }
                return rest.next()
            }
        }

        func makeIterator() -> Iterator { Iterator(first: first, rest: rest.makeIterator()) }
    }

    private var lastNumber: UInt64 = 0
    var holds = HoldTable()
    /// Holds that cover a subtree; while zero, ancestors need no look.
    var subtreeHoldCount = 0
    var grants = GrantTable()
    /// One-item grants that nothing stood in the way of: see `ShortList`.
    var shortList = ShortList()
    /// FIFO: earlier requests are granted first when they conflict with later ones (X3).
    var waiting: [Waiter] = []
    /// Grants waiting for their presenters' own work to end (`finishMessaging`).
    var settling: [Settling] = []
    var presenters: [PresenterID: PresenterRecord] = [:]
    var presenterTree = PresenterTree()
    var services: [ServiceRegistrationID: ServiceRecord] = [:]
    /// Whether each quiet gate is closed: kept here so that the lock sections that do not change
    /// one leave its word alone (passing accesses write it).
    var quietGateClosed = false
    var gatedGateClosed = false
    /// Grants in the table that are gated (`GrantRecord.gated`).
    var gatedGrantCount = 0

    /// Holds nothing but gated grants: an access that its owners' own gates let through
    /// would conflict with nobody and have nobody to tell.
    var holdsOnlyGatedGrants: Bool {
        grants.count == gatedGrantCount && shortList.ungatedCount == 0 && waiting.isEmpty && presenters.isEmpty
            && services.isEmpty
    }

    mutating func takeNumber() -> UInt64 {
        lastNumber += 1
        return lastNumber
    }

    // MARK: Conflicts

    // `blockers` and `grant` read their modes through a buffer: `acquireAtOnce` keeps them on
    // the stack; these take them from an array.

    func blockers(
        of identity: CoordinatorIdentity, _ modes: [LockMode], queuedBefore position: Int
    ) -> Set<CoordinatorIdentity> {
        modes.withUnsafeBufferPointer { blockers(of: identity, $0, queuedBefore: position) }
    }

    mutating func grant(
        _ request: AccessRequest, _ modes: [LockMode], requests: [PresenterDelivery<PresenterRequest>]
    ) -> Grant {
        let id = modes.withUnsafeBufferPointer { grant(request, $0, requests: requests) }
        return Grant(id: id, identity: request.identity, intents: request.intents, requests: requests)
    }

    /// The identities a request must wait for: conflicting holders, and conflicting requests
    /// queued before it — except those that themselves wait for the requester, which it would
    /// otherwise deadlock with through fairness alone (a process re-opening what it holds).
    func blockers(
        of identity: CoordinatorIdentity, _ modes: UnsafeBufferPointer<LockMode>,
        queuedBefore position: Int
    ) -> Set<CoordinatorIdentity> {
        var found = Set<CoordinatorIdentity>()
        for mode in modes {
            if let sameItem = holds[mode.path] {
                // The kinds first: a read among a thousand reads looks up no grant.
                for hold in sameItem
                where hold.kind.conflicts(onTheSameItemWith: mode.kind) && isBlocking(hold, for: identity) {
                    found.insert(hold.identity)
                }
            }
            if subtreeHoldCount > 0 {
                for ancestor in mode.path.ancestors {
                    for hold in holds[ancestor] ?? Holds()
                    where hold.kind.coversSubtree && !hold.kind.leavesUntouched(mode.kind)
                        && isBlocking(hold, for: identity)
                    {
                        found.insert(hold.identity)
                    }
                }
            }
            if mode.coversSubtree {
                // Rare (deleting or moving a directory): a scan of the held items.
                for (path, inside) in holds where mode.path.isAncestor(of: path) {
                    for hold in inside where !mode.kind.leavesUntouched(hold.kind) && isBlocking(hold, for: identity) {
                        found.insert(hold.identity)
                    }
                }
            }
            if !shortList.isEmpty { shortList.forEachHolder(blocking: mode, for: identity) { found.insert($0) } }
        }
        for waiter in waiting[..<position] where !waiter.request.identity.isSameCoordinator(as: identity) {
            guard !found.contains(waiter.request.identity),
                waiter.modes.contains(where: { theirs in modes.contains { theirs.conflicts(with: $0) } })
            else { continue }
            if !waits(waiter.request.identity, for: identity) { found.insert(waiter.request.identity) }
        }
        return found
    }

    /// A hold blocks `identity` unless it is its own (C4) or its grant is messaging a presenter
    /// of `identity` right now (C21): only that presenter's own work passes, not every
    /// coordinator of its process.
    /// Whether nothing held blocks `modes` of `identity` (waiters aside).
    func isFree(for identity: CoordinatorIdentity, _ modes: [LockMode]) -> Bool {
        blockers(of: identity, modes, queuedBefore: 0).isEmpty
    }

    func isBlocking(_ hold: Hold, for identity: CoordinatorIdentity) -> Bool {
        if hold.identity.isSameCoordinator(as: identity) { return false }
        return grants.readRecord(hold.grant) { record in
            record.messaging.isEmpty || !record.messaging.contains { $0.isSameCoordinator(as: identity) }
        } ?? true
    }

    // MARK: Wait-for graph

    /// The identities `identity` waits for directly: the blockers of its waiting requests, and
    /// of those of the coordinators it is one with (a process's request through a mount may be
    /// made inside its coordinator's accessor, which cannot end before the request does).
    /// Waiting for a presenter's answer is no edge: the presenter timeout bounds it, and the
    /// presenter's process may well wait for a grant meanwhile without any cycle. With `users`,
    /// a wait that ends by itself is no edge either (`counts`).
    private func edges(
        from identity: CoordinatorIdentity, users: [CoordinatorIdentity: UInt32]?
    ) -> Set<CoordinatorIdentity> {
        var next = Set<CoordinatorIdentity>()
        for waiter in waiting where waiter.request.identity.isSameCoordinator(as: identity) {
            if let users, waiter.request.passesOtherUsers {
                for blocker in waiter.blockers where Self.counts(blocker, from: waiter.request, users: users) {
                    next.insert(blocker)
                }
            } else {
                next.formUnion(waiter.blockers)
            }
        }
        return next
    }

    /// Whether `start` waits, directly or through others, for `target`. Every edge counts here,
    /// leases too: an earlier waiter that waits for the requester does not hold it up
    /// (`blockers`), whoever's it is.
    func waits(_ start: CoordinatorIdentity, for target: CoordinatorIdentity) -> Bool {
        path(from: start, to: target, users: nil) != nil
    }

    /// The chain `start … target` in the wait-for graph, if there is one.
    private func path(
        from start: CoordinatorIdentity, to target: CoordinatorIdentity,
        users: [CoordinatorIdentity: UInt32]?
    ) -> [CoordinatorIdentity]? {
        var parent: [CoordinatorIdentity: CoordinatorIdentity] = [:]
        var visited: Set<CoordinatorIdentity> = [start]
        var frontier = [start]
        while let current = frontier.popLast() {
            for next in edges(from: current, users: users) where !visited.contains(next) {
                parent[next] = current
                if next.isSameCoordinator(as: target) {
                    var chain = [target]
                    var walk = target
                    while let previous = parent[walk] { chain.append(previous); walk = previous }
                    return chain.reversed()
                }
                visited.insert(next)
                frontier.append(next)
            }
        }
        return nil
    }

    /// The cycle that `request` waiting for `blockers` would close (X1), as a list that starts
    /// and ends with its identity. A cycle through a wait that ends by itself (one user's for
    /// another user's holds, which it goes past at the break time) is no deadlock: where a
    /// waiter's wait may, the cycle is looked for again without such edges.
    func cycle(from request: AccessRequest, through blockers: Set<CoordinatorIdentity>) -> [CoordinatorIdentity]? {
        guard let found = cycle(from: request, through: blockers, users: nil) else { return nil }
        // Nearly always there is no cycle at all, or nobody's wait ends by itself.
        guard let users = waitUsers(with: request) else { return found }
        return cycle(from: request, through: blockers, users: users)
    }

    private func cycle(
        from request: AccessRequest, through blockers: Set<CoordinatorIdentity>,
        users: [CoordinatorIdentity: UInt32]?
    ) -> [CoordinatorIdentity]? {
        for blocker in blockers.sorted(by: { $0.description < $1.description })
        where users.map({ Self.counts(blocker, from: request, users: $0) }) ?? true {
            if let chain = path(from: blocker, to: request.identity, users: users) { return [request.identity] + chain }
        }
        return nil
    }

    /// The users of the waiting coordinators and of `request`'s, by `userKey`; nil when neither
    /// it nor any waiter passes other users (every edge counts).
    private func waitUsers(with request: AccessRequest) -> [CoordinatorIdentity: UInt32]? {
        guard request.passesOtherUsers || waiting.contains(where: { $0.request.passesOtherUsers }) else { return nil }
        var users: [CoordinatorIdentity: UInt32] = [:]
        for waiter in waiting {
            if let user = waiter.request.user { users[Self.userKey(waiter.request.identity)] = user }
        }
        if let user = request.user { users[Self.userKey(request.identity)] = user }
        return users
    }

    /// What a coordinator's user is filed under: its process, for one that stands in a process
    /// (a process's requests through a mount and its clients' holds are one user's).
    private static func userKey(_ identity: CoordinatorIdentity) -> CoordinatorIdentity {
        identity.process.map { .process($0) } ?? identity
    }

    /// Whether the edge from `request` to `blocker` counts in the wait-for graph: not when the
    /// request's wait for other users ends by itself (`AccessRequest.passesOtherUsers`) and
    /// `blocker` is another user's. One whose user is not known counts.
    private static func counts(
        _ blocker: CoordinatorIdentity, from request: AccessRequest,
        users: [CoordinatorIdentity: UInt32]
    ) -> Bool {
        guard request.passesOtherUsers, let user = request.user, let theirs = users[userKey(blocker)] else {
            return true
        }
        return theirs == user
    }

    // MARK: Granting

    /// Whether a grant of `kind`, which holds its item, goes on the short list: nothing waits,
    /// no presenter is to be asked, no directory is held for deletion or a move, the list has
    /// room, and the grant covers no subtree itself.
    func suitsShortList(_ kind: LockKind) -> Bool {
        waiting.isEmpty && subtreeHoldCount == 0 && !shortList.isFull && presenterTree.isEmpty && !kind.coversSubtree
    }

    /// Grants `intent` (of `kind`, which `suitsShortList`) on the short list; nil when something
    /// holds what it wants. The listed grant keeps `intent` itself: it is not copied.
    mutating func grantOnShortList(
        _ intent: consuming Intent, kind: LockKind,
        for identity: CoordinatorIdentity, gated: Bool = false
    ) -> GrantID? {
        let path = LockMode.lockedPath(intent)
        // An empty hold table (the usual case on a mount) is not probed.
        if holds.count > 0, let sameItem = holds[path] {
            for hold in sameItem where hold.kind.conflicts(onTheSameItemWith: kind) && isBlocking(hold, for: identity) {
                return nil
            }
        }
        if shortList.blocks(kind, on: path, for: identity) { return nil }
        let number = takeNumber()
        shortList.add(
            ShortList.Entry(number: number, identity: identity, kind: kind, intent: intent, gated: gated),
            lockedPath: path)
        return GrantID(shortListNumber: number)
    }

    /// Grants `request` from the tables when nothing blocks it and no presenter is to be asked
    /// first; nil otherwise, having taken nothing. `gated`: as a listed grant's
    /// (`GrantRecord.gated`).
    mutating func grantAtOnce(_ request: AccessRequest, gated: Bool = false) -> GrantID? {
        let count = request.holdsIntents ? request.intents.count : 0
        // The modes live only for this call: on the stack, not in an array of their own.
        return withUnsafeTemporaryAllocation(of: LockMode.self, capacity: count) { storage -> GrantID? in
            for (index, intent) in request.intents.prefix(count).enumerated() {
                (storage.baseAddress! + index).initialize(to: LockMode(intent))
            }
            defer { _ = storage.baseAddress?.deinitialize(count: count) }
            let modes = UnsafeBufferPointer(storage)
            guard blockers(of: request.identity, modes, queuedBefore: waiting.count).isEmpty else { return nil }
            let requests = request.messagesPresenters ? requestPlan(for: request) : []
            guard requests.isEmpty else { return nil }
            return grant(request, modes, requests: requests, gated: gated)
        }
    }

    /// Takes `modes` for `request`; `requests` is its `requestPlan` (empty when it messages nobody).
    mutating func grant(
        _ request: AccessRequest, _ modes: UnsafeBufferPointer<LockMode>,
        requests: [PresenterDelivery<PresenterRequest>], gated: Bool = false
    ) -> GrantID {
        var messaging = Set<CoordinatorIdentity>()
        for delivery in requests { if let owner = presenters[delivery.presenter]?.owner { messaging.insert(owner) } }
        let id = grants.insert(
            GrantRecord(
                number: takeNumber(), identity: request.identity, intents: request.intents,
                holdsIntents: request.holdsIntents, messaging: messaging,
                messagingSince: messaging.isEmpty ? nil : .now, gated: gated))
        if gated { gatedGrantCount += 1 }
        for mode in modes {
            holds.append(Hold(grant: id, identity: request.identity, kind: mode.kind), at: mode.path)
            if mode.coversSubtree { subtreeHoldCount += 1 }
        }
        return id
    }

    /// Ends listed grant `grant` when its end calls for nothing more: nobody to tell, no
    /// service to end, nobody to wake. False, with nothing changed, otherwise.
    mutating func releaseListedQuietly(_ grant: GrantID) -> Bool {
        guard presenterTree.isEmpty && services.isEmpty && waiting.isEmpty && settling.isEmpty,
            let index = shortList.index(of: grant.shortListNumber)
        else { return false }
        // A deletion beside open files' reads may leave their holds to drop (`dropOpenFileHolds`).
        if shortList.entries[index].kind.passesOpenReads && (shortList.entries.count > 1 || holds.count > 0) {
            return false
        }
        shortList.remove(at: index)
        return true
    }

    /// After a mount's deletion that went ahead beside open files' reads (`passesOpenReads`),
    /// their holds on the item removed: its name is gone, and what is made there next is not
    /// theirs to hold off (`dropOpenFileHolds`). `intents` and `outcomes` are the ended grant's.
    mutating func dropOpenFileHolds(removedBy intents: some Sequence<Intent>, outcomes: some Sequence<IntentOutcome>) {
        for (intent, outcome) in zip(intents, outcomes) where !outcome.existsAfter {
            guard case .writing(let options) = intent.kind, options.contains(.forDeleting),
                options.contains(.passesOpenReads)
            else { continue }
            dropOpenFileHolds(at: LockMode.lockedPath(intent), inside: intent.target.isDirectory)
        }
    }

    mutating func removeGrant(_ id: GrantID) -> GrantRecord? {
        guard let record = grants.remove(id) else { return nil }
        if !settling.isEmpty { settling.removeAll { $0.grant == id } }
        if record.gated { gatedGrantCount -= 1 }
        guard record.holdsIntents else { return record }
        // By index: iterating would copy (and retain) each intent.
        for index in record.intents.indices {
            if LockKind(record.intents[index]).coversSubtree { subtreeHoldCount -= 1 }
            holds.remove(grant: id, at: LockMode.lockedPath(record.intents[index]))
        }
        return record
    }

    /// Grants every waiter that can now proceed, in arrival order, and refreshes the blockers of
    /// the others.
    mutating func grantWaiters() -> [Wakeup] {
        var woken: [Wakeup] = []
        var index = 0
        while index < waiting.count {
            let waiter = waiting[index]
            let blockers = blockers(of: waiter.request.identity, waiter.modes, queuedBefore: index)
            if blockers.isEmpty {
                waiting.remove(at: index)
                let requests = waiter.request.messagesPresenters ? requestPlan(for: waiter.request) : []
                woken.append(
                    Wakeup(resume: waiter.resume, grant: grant(waiter.request, waiter.modes, requests: requests)))
            } else {
                waiting[index].blockers = blockers
                index += 1
            }
        }
        var settled = 0
        while settled < settling.count {
            if isFree(for: settling[settled].identity, settling[settled].modes) {
                woken.append(Wakeup(settled: settling.remove(at: settled).proceed))
            } else {
                settled += 1
            }
        }
        return woken
    }

    // MARK: Presenter index

    mutating func insertPresenter(_ id: PresenterID, _ record: PresenterRecord) {
        presenters[id] = record
        if let path = record.path { presenterTree.insert(id, at: path) }
        if let primary = record.primaryPath, primary != record.path { presenterTree.insert(id, at: primary) }
    }

    mutating func removePresenter(_ id: PresenterID) {
        guard let record = presenters.removeValue(forKey: id) else { return }
        presenters.releaseSpareCapacity()
        if let path = record.path { presenterTree.remove(id, at: path) }
        if let primary = record.primaryPath, primary != record.path { presenterTree.remove(id, at: primary) }
    }
}
