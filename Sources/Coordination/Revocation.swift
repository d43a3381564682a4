/// Revoked holds: a hold that an access went past at the break time, or whose item a name
/// change took away from it, holds nothing from then on (docs/mount.md, docs/sharing.md). Its
/// grant stays until its owner ends it, and that end still tells presenters what it did (P9);
/// only nobody waits for it any more.
extension CoordinationEngine {
    /// Lets waiting request `ticket` past `holders`, whose wait its caller ended (leases broken
    /// at the break time): their grants that stand in its way are revoked. The request is then
    /// granted as usual if nothing else stands in its way; otherwise it ends with
    /// `.brokenThrough` (its owner goes ahead holding nothing, as after `abandon`). Returns the
    /// grants revoked.
    @discardableResult
    public func breakThrough(_ ticket: TicketID, revoking holders: Set<CoordinatorIdentity>) -> [GrantID] {
        let (revoked, resume, woken) = withState { state -> ([GrantID], Resume?, [State.Wakeup]) in
            guard let index = state.waiting.firstIndex(where: { $0.ticket == ticket }) else { return ([], nil, []) }
            let waiter = state.waiting[index]
            var revoked: [GrantID] = []
            for grant in state.grants(
                of: holders, standingIn: waiter.modes, for: waiter.request.identity, aboveToo: true)
            {
                if state.revoke(grant) { revoked.append(grant) }
            }
            var woken = state.grantWaiters()
            // Still in the way: an earlier waiter, or a holder its caller did not pass.
            guard let left = state.waiting.firstIndex(where: { $0.ticket == ticket }) else {
                return (revoked, nil, woken)
            }
            let stuck = state.waiting.remove(at: left)
            woken += state.grantWaiters()
            return (revoked, stuck.resume, woken)
        }
        resume?(.failure(.brokenThrough))
        woken.forEach { $0.run() }
        return revoked
    }

    /// Lets `grant`, which waits for what its presenters' own work took (`finishMessaging`),
    /// past `holders`, whose wait its caller ended (leases broken at the break time): their
    /// grants in its way are revoked, and it goes ahead once nothing else keeps it: at once when
    /// nothing does, or when nobody but `holders` does (a grant that holds nothing to revoke).
    /// Kept by anyone else, it waits on for them: nobody is passed but those named. Returns the
    /// grants revoked.
    @discardableResult
    public func breakSettling(_ grant: GrantID, revoking holders: Set<CoordinatorIdentity>) -> [GrantID] {
        let (revoked, woken) = withState { state -> ([GrantID], [State.Wakeup]) in
            guard let settling = state.settling.first(where: { $0.grant == grant }) else { return ([], []) }
            var revoked: [GrantID] = []
            for id in state.grants(of: holders, standingIn: settling.modes, for: settling.identity, aboveToo: true) {
                if state.revoke(id) { revoked.append(id) }
            }
            var woken = revoked.isEmpty ? [] : state.grantWaiters()
            if let left = state.settling.firstIndex(where: { $0.grant == grant }),
                state.blockers(of: settling.identity, settling.modes, queuedBefore: 0).isSubset(of: holders)
            {
                woken.append(State.Wakeup(settled: state.settling.remove(at: left).proceed))
            }
            return (revoked, woken)
        }
        woken.forEach { $0.run() }
        return revoked
    }

    /// The grants of `holders` that stand in the way of waiting request `ticket` on its own
    /// items, and inside those it covers (a directory removed or moved): not those of a
    /// directory above them. Nothing is changed; empty when it is no longer waiting.
    public func grants(of holders: Set<CoordinatorIdentity>, onTheItemsOf ticket: TicketID) -> [GrantID] {
        state.withLock { state in
            guard let waiter = state.waiting.first(where: { $0.ticket == ticket }) else { return [] }
            return state.grants(of: holders, standingIn: waiter.modes, for: waiter.request.identity, aboveToo: false)
        }
    }

    /// The grants of `holders` that stand in the way of waiting request `ticket`: on its items,
    /// inside those it covers and on a directory above them that covers its subtree, on any of
    /// its items (what a request that goes past them went past). Nothing is changed; empty when
    /// it is no longer waiting.
    public func grants(of holders: Set<CoordinatorIdentity>, inTheWayOf ticket: TicketID) -> [GrantID] {
        state.withLock { state in
            guard let waiter = state.waiting.first(where: { $0.ticket == ticket }) else { return [] }
            return state.grants(of: holders, standingIn: waiter.modes, for: waiter.request.identity, aboveToo: true)
        }
    }

    /// The grants of `holders` that keep `grant` settling after its presenters' own work
    /// (`finishMessaging`), as `grants(of:inTheWayOf:)`; empty when it is not settling.
    public func grants(of holders: Set<CoordinatorIdentity>, inTheWayOfSettling grant: GrantID) -> [GrantID] {
        state.withLock { state in
            guard let settling = state.settling.first(where: { $0.grant == grant }) else { return [] }
            return state.grants(of: holders, standingIn: settling.modes, for: settling.identity, aboveToo: true)
        }
    }

    /// Revokes `grants` (those still there and holding): they hold nothing from then on, and
    /// whoever waited only for them goes ahead. Returns how many were revoked.
    @discardableResult
    public func revoke(_ grants: [GrantID]) -> Int {
        if grants.isEmpty { return 0 }
        let (count, woken) = withState { state -> (Int, [State.Wakeup]) in
            var count = 0
            for grant in grants { if state.revoke(grant) { count += 1 } }
            return (count, count > 0 ? state.grantWaiters() : [])
        }
        woken.forEach { $0.run() }
        return count
    }
}

extension State {
    /// The grants of `holders` whose holds stand in the way of `modes`, wanted by `identity`:
    /// on the same items, inside those that cover a subtree and, with `aboveToo`, on a
    /// directory above them that covers its subtree.
    func grants(
        of holders: Set<CoordinatorIdentity>, standingIn modes: [LockMode], for identity: CoordinatorIdentity,
        aboveToo: Bool
    ) -> [GrantID] {
        var found = Set<GrantID>()
        for mode in modes {
            if let sameItem = holds[mode.path] {
                for hold in sameItem
                where holders.contains(hold.identity) && isBlocking(hold, for: identity)
                    && hold.kind.conflicts(onTheSameItemWith: mode.kind)
                {
                    found.insert(hold.grant)
                }
            }
            if aboveToo && subtreeHoldCount > 0 {
                for ancestor in mode.path.ancestors {
                    for hold in holds[ancestor] ?? Holds()
                    where holders.contains(hold.identity) && hold.kind.coversSubtree
                        && !hold.kind.leavesUntouched(mode.kind) && isBlocking(hold, for: identity)
                    {
                        found.insert(hold.grant)
                    }
                }
            }
            if mode.coversSubtree {
                for (path, inside) in holds where mode.path.isAncestor(of: path) {
                    for hold in inside
                    where holders.contains(hold.identity) && !mode.kind.leavesUntouched(hold.kind)
                        && isBlocking(hold, for: identity)
                    {
                        found.insert(hold.grant)
                    }
                }
            }
            if !shortList.isEmpty {
                shortList.forEachGrant(of: holders, blocking: mode, for: identity) { found.insert($0) }
            }
        }
        return Array(found)
    }

    /// Revokes grant `id`: a grant in the tables gives its holds up, a listed one is marked.
    /// False when it is gone or holds nothing already.
    mutating func revoke(_ id: GrantID) -> Bool {
        if id.isOnShortList { return shortList.revoke(id.shortListNumber) }
        guard grants[id]?.holdsIntents == true else { return false }
        giveUpHolds(of: id)
        return true
    }

    /// Takes the holds of grant `id`, in the tables, out of the hold table: it holds nothing
    /// from then on (and its release finds nothing to take out).
    mutating func giveUpHolds(of id: GrantID) {
        guard let record = grants[id], record.holdsIntents else { return }
        // By index: iterating would copy (and retain) each intent.
        for index in record.intents.indices {
            if LockKind(record.intents[index]).coversSubtree { subtreeHoldCount -= 1 }
            holds.remove(grant: id, at: LockMode.lockedPath(record.intents[index]))
        }
        grants[id]!.holdsIntents = false
    }
}
