extension CoordinationEngine {
    /// Records that the item at `source` now is at `destination`, inside `grant`, which must hold
    /// a write (C24). Presenters of the item and of everything inside it are re-indexed under the
    /// new location, waiting intents follow unless they replace (C11, O8), services follow, and
    /// the returned notifications tell presenters (C15, P8, P11).
    public func reportMove(
        in grant: GrantID, from source: AccessTarget, to destination: AccessTarget
    ) throws(CoordinationError)
        -> [PresenterDelivery<PresenterNotification>]
    {
        try state.withLock { state throws(CoordinationError) -> [PresenterDelivery<PresenterNotification>] in
            guard let record = state.grants[grant], record.intents.contains(where: { $0.kind.isWrite }) else {
                throw .notInsideWrite
            }
            if source.path == destination.path { return [] }  // harmless (C45)
            state.grants[grant]!.moved += [source.path, destination.path]
            // A mount's rename: the open descriptors it let past follow their inode.
            var byMount = false
            if case .process = record.identity { byMount = true }
            return state.move(from: source, to: destination, by: record.identity, openFilesFollow: byMount)
        }
    }
}

extension State {
    /// The move of the item at `source` to `destination`, by `identity` (nil: behind a mount):
    /// presenters re-indexed, waiters and services moved, the notifications returned.
    /// `openFilesFollow`: a mount's rename, which the holds of open descriptors follow
    /// (`relocateOpenFileHolds`).
    mutating func move(
        from source: AccessTarget, to destination: AccessTarget, by identity: CoordinatorIdentity?,
        tellingContainers: Bool = true, openFilesFollow: Bool = false
    ) -> [PresenterDelivery<PresenterNotification>] {
        let from = source.path, to = destination.path
        var builder = State.DeliveryBuilder<PresenterNotification>(excluding: identity)

        // Containers learn first, under their own (unchanged) paths.
        let oldContainers = tellingContainers ? presenterTree.presentersAbove(from) : []
        let oldContainerPaths = Set(oldContainers.map(\.0))
        let oldPackages = Set(source.enclosingPackages), newPackages = Set(destination.enclosingPackages)
        for (container, ids) in oldContainers {
            for id in ids {
                builder.add(
                    [.subitemDidMove(from: from, to: to)], to: id, at: container,
                    package: oldPackages.contains(container), records: presenters)
            }
        }
        for (container, ids) in tellingContainers ? presenterTree.presentersAbove(to) : []
        where !oldContainerPaths.contains(container) {
            for id in ids {
                builder.add(
                    [.subitemDidMove(from: from, to: to), .subitemDidAppear(to)], to: id, at: container,
                    package: newPackages.contains(container), records: presenters)  // P10
            }
        }

        // The item's presenters and everything inside it follow.
        var moved: [(PresenterID, PresenterRecord)] = []
        for id in presenterTree.presenters(at: from) { moved.append((id, presenters[id]!)) }
        for (_, id) in presenterTree.presentersInside(from) { moved.append((id, presenters[id]!)) }
        var seen = Set<PresenterID>()
        for (id, old) in moved where seen.insert(id).inserted {
            var new = old
            new.path = old.path.map { $0.relocated(from: from, to: to) ?? $0 }
            new.primaryPath = old.primaryPath.map { $0.relocated(from: from, to: to) ?? $0 }
            removePresenter(id)
            insertPresenter(id, new)
            if let newPath = new.path, newPath != old.path {
                builder.add(
                    [.didMove(to: newPath)], to: id, at: newPath,
                    package: destination.isPackage && newPath == to, records: presenters)
            }
        }

        relocateWaiters(from: from, to: to)
        if openFilesFollow {
            dropOpenFileHolds(at: to, inside: destination.isDirectory)
            relocateOpenFileHolds(from: from, to: to, inside: source.isDirectory)
        }
        for (id, service) in services {
            if let path = service.path.relocated(from: from, to: to) { services[id]!.path = path }
        }
        return builder.deliveries
    }
}

extension State {
    /// Waiting intents follow a move, except those that replace: they mean the path (O8).
    mutating func relocateWaiters(from: ItemPath, to: ItemPath) {
        for index in waiting.indices {
            var changed = false
            var intents = waiting[index].request.intents
            for i in intents.indices {
                if case .writing(let options) = intents[i].kind, options.contains(.forReplacing) { continue }
                if let path = intents[i].target.path.relocated(from: from, to: to) {
                    intents[i].target.path = path
                    intents[i].target.enclosingPackages = intents[i].target.enclosingPackages.map {
                        $0.relocated(from: from, to: to) ?? $0
                    }
                    changed = true
                }
            }
            if changed {
                waiting[index].request.intents = intents
                waiting[index].modes = intents.map(LockMode.init)
            }
        }
    }
}

extension State {
    /// A hold of an open descriptor that a name change leaves as it was
    /// (`LockKind.leavesUntouched`): a read through an open file, an appender. It keeps its
    /// inode, whatever becomes of its names.
    static func followsItsInode(_ kind: LockKind) -> Bool { kind.readsOpenFile || kind.appends }

    /// Holds of open descriptors on the item moved, and inside it, follow it: their descriptors
    /// keep the inode, under its new name. Left behind, they would hold off whatever is made
    /// under the old name next (logrotate's new log, a second `tail -f`'s reader). A coordinated
    /// hold names a path and stays where it is (only waiting intents follow, C11). A moved hold
    /// is gated no more: the gate its owner shut guards the name it left, and a request about
    /// the new name passing beside it would not see it.
    /// `inside`: the item is a directory, whose contents move with it; a file's holds are looked
    /// up, not looked for.
    mutating func relocateOpenFileHolds(from: ItemPath, to: ItemPath, inside: Bool) {
        func moved(_ intent: Intent) -> Intent {
            var intent = intent
            intent.target.path = intent.target.path.relocated(from: from, to: to) ?? intent.target.path
            intent.target.enclosingPackages = intent.target.enclosingPackages.map {
                $0.relocated(from: from, to: to) ?? $0
            }
            return intent
        }
        if !shortList.isEmpty { shortList.relocate(from: from, following: Self.followsItsInode, moved) }
        guard holds.count > 0 else { return }
        var moving: [(grant: GrantID, path: ItemPath)] = []
        if inside {
            for (path, held) in holds where path == from || from.isAncestor(of: path) {
                for hold in held where Self.followsItsInode(hold.kind) { moving.append((hold.grant, path)) }
            }
        } else if let held = holds[from] {
            for hold in held where Self.followsItsInode(hold.kind) { moving.append((hold.grant, from)) }
        }
        for (grant, path) in moving {
            guard let record = grants[grant], record.holdsIntents else { continue }
            for index in record.intents.indices where LockMode.lockedPath(record.intents[index]) == path {
                let kind = LockKind(record.intents[index])
                guard Self.followsItsInode(kind) else { continue }
                let intent = moved(record.intents[index])
                holds.remove(grant: grant, at: path)
                holds.append(
                    Hold(grant: grant, identity: record.identity, kind: LockKind(intent)),
                    at: LockMode.lockedPath(intent))
                grants[grant]!.intents[index] = intent
            }
            // Its owner's gate (a mount's `NameGates`) guards the name it left: requests about
            // the new one would pass beside it. Gated no more, it closes the engine's gate.
            if grants[grant]?.gated == true {
                grants[grant]!.gated = false
                gatedGrantCount -= 1
            }
        }
    }

    /// Holds of open descriptors on what was at `path` (and inside it) before a move replaced
    /// it: their inode has no name there any more, and what is there now is not theirs to hold
    /// off. They hold nothing from then on, as revoked holds.
    mutating func dropOpenFileHolds(at path: ItemPath, inside: Bool) {
        if !shortList.isEmpty { shortList.revoke(at: path, following: Self.followsItsInode) }
        guard holds.count > 0 else { return }
        var dropped: [GrantID] = []
        if inside {
            for (held, there) in holds where held == path || path.isAncestor(of: held) {
                for hold in there where Self.followsItsInode(hold.kind) { dropped.append(hold.grant) }
            }
        } else if let there = holds[path] {
            for hold in there where Self.followsItsInode(hold.kind) { dropped.append(hold.grant) }
        }
        for grant in dropped { giveUpHolds(of: grant) }
    }
}
