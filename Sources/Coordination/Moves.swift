extension CoordinationEngine {
    /// Records that the item at `source` now is at `destination`, inside `grant`, which must hold
    /// a write (C24). Presenters of the item and of everything inside it are re-indexed under the
    /// new location, waiting intents follow unless they replace (C11, O8), services follow, and
    /// the returned notifications tell presenters (C15, P8, P11).
    public func reportMove(in grant: GrantID, from source: AccessTarget, to destination: AccessTarget) throws(CoordinationError)
        -> [PresenterDelivery<PresenterNotification>]
    {
        try state.withLock { state throws(CoordinationError) -> [PresenterDelivery<PresenterNotification>] in
            guard let record = state.grants[grant], record.intents.contains(where: { $0.kind.isWrite }) else {
                throw .notInsideWrite
            }
            if source.path == destination.path { return [] }     // harmless (C45)
            state.grants[grant]!.moved += [source.path, destination.path]
            return state.move(from: source, to: destination, by: record.identity)
        }
    }
}

extension State {
    /// The move of the item at `source` to `destination`, by `identity` (nil: behind a mount):
    /// presenters re-indexed, waiters and services moved, the notifications returned.
    mutating func move(from source: AccessTarget, to destination: AccessTarget, by identity: CoordinatorIdentity?,
                       tellingContainers: Bool = true) -> [PresenterDelivery<PresenterNotification>]
    {
        let from = source.path, to = destination.path
        var builder = State.DeliveryBuilder<PresenterNotification>(excluding: identity)

        // Containers learn first, under their own (unchanged) paths.
        let oldContainers = tellingContainers ? presenterTree.presentersAbove(from) : []
        let oldContainerPaths = Set(oldContainers.map(\.0))
        let oldPackages = Set(source.enclosingPackages), newPackages = Set(destination.enclosingPackages)
        for (container, ids) in oldContainers {
            for id in ids {
                builder.add([.subitemDidMove(from: from, to: to)], to: id, at: container,
                            package: oldPackages.contains(container), records: presenters)
            }
        }
        for (container, ids) in tellingContainers ? presenterTree.presentersAbove(to) : [] where !oldContainerPaths.contains(container) {
            for id in ids {
                builder.add([.subitemDidMove(from: from, to: to), .subitemDidAppear(to)], to: id, at: container,
                            package: newPackages.contains(container), records: presenters)   // P10
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
                builder.add([.didMove(to: newPath)], to: id, at: newPath,
                            package: destination.isPackage && newPath == to, records: presenters)
            }
        }

        relocateWaiters(from: from, to: to)
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
