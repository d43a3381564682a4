import Coordination
import Synchronization

/// Another host's presenter, standing in this host's domain: asked nothing (the other host's
/// own recalls ask its presenters before this host's programs go ahead), told what this host's
/// programs and coordinators did, which it forwards as changes of the store. Nothing else is
/// forwarded: a third host sends its own changes itself, and a change a mount's backing watch
/// saw is another mount's of the same local filesystem (which sees it too) or nobody's.
package final class HostPresenter: Presenter, @unchecked Sendable {
    // @unchecked: `path` is guarded by its lock; the rest is constant.
    let host: String
    private let path: Mutex<ItemPath>
    private unowned let store: SharedStore
    private let forward: @Sendable (HostChange) -> Void

    init(host: String, path: ItemPath, store: SharedStore, forward: @escaping @Sendable (HostChange) -> Void) {
        self.host = host
        self.path = Mutex(path)
        self.store = store
        self.forward = forward
    }

    package var owner: CoordinatorIdentity { .host(host) }

    package func presentedPaths(_ locator: ItemLocator) -> (item: ItemPath?, primary: ItemPath?) {
        (path.withLock { $0 }, nil)
    }

    package var answeredRequests: PresenterRequest.Kinds { [] }

    package func asked(
        _ request: PresenterRequest, origin: AccessOrigin, progress: PresenterProgress,
        completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void
    ) {
        completion(nil, nil)
    }

    package func told(
        _ notifications: [PresenterNotification], origin: AccessOrigin, presentsPackage: Bool,
        moved: @escaping @Sendable () -> Void
    ) {
        guard origin.via == .mount || origin.via == .coordinator else { return }
        guard let own = store.storePath(of: path.withLock { $0 }) else { return }
        let store = self.store
        // A move across the store's edge (a daemon's clients use the whole host) is, to the
        // other hosts, an item that appeared or went.
        func move(_ source: ItemPath, _ destination: ItemPath) {
            switch (store.storePath(of: source), store.storePath(of: destination)) {
            case let (from?, to?): forward(.moved(from, to: to))
            case let (from?, nil): forward(.deleted(from))
            case let (nil, to?): forward(.appeared(to))
            case (nil, nil): break
            }
        }
        func inside(_ item: ItemPath, _ change: (String) -> HostChange) {
            if let path = store.storePath(of: item) { forward(change(path)) }
        }
        for notification in notifications {
            switch notification {
            case .didChange, .didChangeAttributes: forward(.changed(own))
            case .itemWasDeleted: forward(.deleted(own))
            case .didMove(let destination):
                move(store.itemPath(ofStorePath: own), destination)
                path.withLock { $0 = destination }
                moved()
            case .subitemDidAppear(let item): inside(item) { .appeared($0) }
            case .subitemDidChange(let item), .subitemDidChangeAttributes(let item): inside(item) { .changed($0) }
            case .subitemWasDeleted(let item): inside(item) { .deleted($0) }
            case .subitemDidMove(let source, let destination): move(source, destination)
            // A conflict version is kept in the store of the host that replaced the content;
            // the other hosts' presenters hear of the change itself.
            case .coordinationWasBroken, .versionNews, .subitemVersionNews: break
            }
        }
    }

    package func reacquire(_ reacquirer: @escaping @Sendable () -> Void) { reacquirer() }
}
