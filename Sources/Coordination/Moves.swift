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
            let from = source.path, to = destination.path
            if from == to { return [] }                          // harmless (reference C45)
            var builder = State.DeliveryBuilder<PresenterNotification>(excluding: record.identity)

            // Containers learn first, under their own (unchanged) paths.
            let oldContainers = state.presenterTree.presentersAbove(from)
            let oldContainerPaths = Set(oldContainers.map(\.0))
            let oldPackages = Set(source.enclosingPackages), newPackages = Set(destination.enclosingPackages)
            for (container, ids) in oldContainers {
                for id in ids {
                    builder.add([.subitemDidMove(from: from, to: to)], to: id, at: container,
                                package: oldPackages.contains(container), records: state.presenters)
                }
            }
            for (container, ids) in state.presenterTree.presentersAbove(to) where !oldContainerPaths.contains(container) {
                for id in ids {
                    builder.add([.subitemDidMove(from: from, to: to), .subitemDidAppear(to)], to: id, at: container,
                                package: newPackages.contains(container), records: state.presenters)   // P10
                }
            }

            // The item's presenters and everything inside it follow.
            var moved: [(PresenterID, PresenterRecord)] = []
            for id in state.presenterTree.presenters(at: from) { moved.append((id, state.presenters[id]!)) }
            for (_, id) in state.presenterTree.presentersInside(from) { moved.append((id, state.presenters[id]!)) }
            var seen = Set<PresenterID>()
            for (id, old) in moved where seen.insert(id).inserted {
                var new = old
                new.path = old.path.map { $0.relocated(from: from, to: to) ?? $0 }
                new.primaryPath = old.primaryPath.map { $0.relocated(from: from, to: to) ?? $0 }
                state.removePresenter(id)
                state.insertPresenter(id, new)
                if let newPath = new.path, newPath != old.path {
                    builder.add([.didMove(to: newPath)], to: id, at: newPath,
                                package: destination.isPackage && newPath == to, records: state.presenters)
                }
            }

            state.grants[grant]!.moved += [from, to]
            state.relocateWaiters(from: from, to: to)
            for (id, service) in state.services {
                if let path = service.path.relocated(from: from, to: to) { state.services[id]!.path = path }
            }
            return builder.deliveries
        }
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
