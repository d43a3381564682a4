/// Changes made behind a mount, which nobody coordinated (a program writing the backing
/// directory directly): presenters hear of them as of coordinated changes, with no accessor
/// named, and every presenter hears, whoever owns it.
extension CoordinationEngine {
    /// The notifications a coordinated write with the same outcomes ends with (P9, P10, P19);
    /// without `tellingContainers`, only the items' own presenters hear (in a flood, the
    /// directories around hear of it as one change: `contentsChangedOutside`).
    ///
    /// `accessor`: who made them where that is known though nobody here coordinated them
    /// (another host of a shared store); its own presenters hear nothing (C14).
    public func changesMadeOutside(
        _ intents: [Intent], outcomes: [IntentOutcome], by accessor: CoordinatorIdentity? = nil,
        tellingContainers: Bool = true
    ) -> [PresenterDelivery<PresenterNotification>] {
        withState {
            $0.notifications(
                by: accessor, of: intents, moved: [], outcomes: outcomes, tellingContainers: tellingContainers)
        }
    }

    /// A move: presenters, waiters and services follow it as they follow a reported move
    /// (C11, C15, P8, P11). Without `tellingContainers`, the presenters of the directories
    /// around it hear nothing (they hear of a flood of changes as one).
    public func moveMadeOutside(
        from source: AccessTarget, to destination: AccessTarget, by accessor: CoordinatorIdentity? = nil,
        tellingContainers: Bool = true
    ) -> [PresenterDelivery<PresenterNotification>] {
        if source.path == destination.path { return [] }
        return state.withLock { state in
            // What was at the destination was replaced (a save by rename): its presenters hear
            // that their item changed, before the moved item's presenters join them.
            var replaced = State.DeliveryBuilder<PresenterNotification>(excluding: accessor)
            for id in state.presenterTree.presenters(at: destination.path) {
                replaced.add(
                    [.didChange], to: id, at: destination.path, package: destination.isPackage,
                    records: state.presenters)
            }
            return replaced.deliveries
                + state.move(from: source, to: destination, by: accessor, tellingContainers: tellingContainers)
        }
    }

    /// News of version `version` of `item` (kept as a conflict, added, removed, resolved): the
    /// item's presenters hear it, the presenters of the directories around it that a subitem's
    /// version did. Every presenter hears, the accessor's own too, as Apple's version messages
    /// reach a coordinator's own presenter (P18): a conflict's writer wrote over content it had
    /// not seen.
    public func versionNews(
        _ news: VersionNews, version: String, of item: AccessTarget, by accessor: CoordinatorIdentity?
    )
        -> [PresenterDelivery<PresenterNotification>]
    {
        withState { state in
            if state.presenterTree.isEmpty { return [] }
            var builder = State.DeliveryBuilder<PresenterNotification>(excluding: nil)
            let packages = Set(item.enclosingPackages)
            for id in state.presenterTree.presenters(at: item.path) {
                builder.add(
                    [.versionNews(news, version)], to: id, at: item.path, package: item.isPackage,
                    records: state.presenters)
            }
            for (ancestor, ids) in state.presenterTree.presentersAbove(item.path) {
                for id in ids {
                    builder.add(
                        [.subitemVersionNews(item.path, news, version)], to: id, at: ancestor,
                        package: packages.contains(ancestor), records: state.presenters)
                }
            }
            var deliveries = builder.deliveries
            for index in deliveries.indices { deliveries[index].accessor = accessor }
            return deliveries
        }
    }

    /// Many changes inside each of `directories` at once, told as one: the directory's own
    /// presenters hear that it changed, those above it that a subitem did.
    public func contentsChangedOutside(of directories: [AccessTarget]) -> [PresenterDelivery<PresenterNotification>] {
        withState { state in
            if state.presenterTree.isEmpty { return [] }
            var builder = State.DeliveryBuilder<PresenterNotification>(excluding: nil)
            for directory in directories {
                let packages = Set(directory.enclosingPackages)
                for id in state.presenterTree.presenters(at: directory.path) {
                    builder.add(
                        [.didChange], to: id, at: directory.path, package: directory.isPackage,
                        records: state.presenters)
                }
                for (ancestor, ids) in state.presenterTree.presentersAbove(directory.path) {
                    for id in ids {
                        builder.add(
                            [.subitemDidChange(directory.path)], to: id, at: ancestor,
                            package: packages.contains(ancestor), records: state.presenters)
                    }
                }
            }
            return builder.deliveries
        }
    }
}
