import Coordination
import CoordinationRuntime
import LinuxSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A change another host's programs made to the shared store, below its root.
public enum HostChange: Hashable, Sendable {
    case changed(String)
    case appeared(String)
    case deleted(String)
    case moved(String, to: String)
}

/// Presenters across the hosts of a shared store: each host stands the other hosts' presenters
/// in its domain (`HostPresenter`), so that its engine tells them, as any presenter, what its
/// programs did; and tells its own presenters what the other hosts sent.
extension Filesystem {
    /// The items this mount's presenters present, below the store's root (other hosts' stand-ins
    /// left out).
    public func presentedStorePaths() -> Set<String> {
        Set(engine.snapshot().presenters.compactMap { _, record -> String? in
            if case .host = record.owner { return nil }
            guard let path = record.path, path == mountRoot || mountRoot.isAncestor(of: path) else { return nil }
            return storePath(of: path)
        })
    }

    /// Whether this mount sees every change to its backing directory itself: its watch covers a
    /// local filesystem, which no other machine mounts, so other hosts' changes come through it.
    public var seesChangesBehind: Bool { watchedDevice != .max }

    /// Tells this mount's presenters what `host`'s programs did, as changes of an accessor from
    /// another host (`via: cluster`); its own stand-ins here hear nothing of it.
    public func tell(_ changes: [HostChange], madeBy host: String) {
        let accessor = CoordinatorIdentity.host(host)
        var deliveries: [PresenterDelivery<PresenterNotification>] = []
        func outcome(_ before: Bool, _ after: Bool) -> IntentOutcome { IntentOutcome(existedBefore: before, existsAfter: after, changed: true) }
        for change in changes {
            switch change {
            case .changed(let path), .appeared(let path), .deleted(let path):
                let happened = switch change {
                case .appeared: outcome(false, true)
                case .deleted: outcome(true, false)
                default: outcome(true, true)
                }
                deliveries += engine.changesMadeOutside([Intent(.writing([]), storeTarget(path))], outcomes: [happened], by: accessor)
            case .moved(let source, let destination):
                let moved = storeTarget(destination)
                deliveries += engine.moveMadeOutside(from: AccessTarget(path: itemPath(ofStorePath: source), isDirectory: moved.isDirectory),
                                                     to: moved, by: accessor)
            }
        }
        if !deliveries.isEmpty { domain.deliver(deliveries) }
    }

    /// The engine's target for a store path: a directory if the backing has one there now.
    private func storeTarget(_ path: String) -> AccessTarget {
        var info = stat()
        let isDirectory = !path.isEmpty && FileSystemName.withCString(path) {
            fstatat(inodes.rootDescriptor, $0, &info, AT_SYMLINK_NOFOLLOW)
        } == 0 && (info.st_mode & S_IFMT) == S_IFDIR
        return target(itemPath(ofStorePath: path), isDirectory: path.isEmpty || isDirectory)
    }

    /// Stands a presenter of `host` at `path` (below the store's root) in this mount's domain;
    /// `forward` gets what this host's programs do to it. Withdrawn by `withdraw`.
    public func standIn(forPresenterOf host: String, at path: String,
                        forward: @escaping @Sendable (HostChange) -> Void) -> HostPresenter {
        let presenter = HostPresenter(host: host, path: itemPath(ofStorePath: path), filesystem: self, forward: forward)
        domain.register(presenter, key: ObjectIdentifier(presenter), linked: false)
        return presenter
    }

    public func withdraw(_ presenter: HostPresenter) {
        domain.unregister(key: ObjectIdentifier(presenter))
    }
}

/// Another host's presenter, standing in this host's domain: asked nothing (the other host's
/// own recalls ask its presenters before this host's programs go ahead), told what this host's
/// programs and coordinators did, which it forwards as changes of the store. Nothing else is
/// forwarded: a third host sends its own changes itself, and a change this host's backing watch
/// saw is another mount's of the same local filesystem (which sees it too) or nobody's.
public final class HostPresenter: Presenter, @unchecked Sendable {
    // @unchecked: `path` is guarded by its lock; the rest is constant.
    let host: String
    private let path: Mutex<ItemPath>
    private unowned let filesystem: Filesystem
    private let forward: @Sendable (HostChange) -> Void

    init(host: String, path: ItemPath, filesystem: Filesystem, forward: @escaping @Sendable (HostChange) -> Void) {
        self.host = host
        self.path = Mutex(path)
        self.filesystem = filesystem
        self.forward = forward
    }

    package var owner: CoordinatorIdentity { .host(host) }

    package func presentedPaths(_ locator: ItemLocator) -> (item: ItemPath?, primary: ItemPath?) { (path.withLock { $0 }, nil) }

    package var answeredRequests: PresenterRequest.Kinds { [] }

    package func asked(_ request: PresenterRequest, origin: AccessOrigin, progress: PresenterProgress,
                       completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void) {
        completion(nil, nil)
    }

    package func told(_ notifications: [PresenterNotification], origin: AccessOrigin, presentsPackage: Bool,
                      moved: @escaping @Sendable () -> Void) {
        guard origin.via == .mount || origin.via == .coordinator else { return }
        let own = path.withLock { $0 }
        func store(_ path: ItemPath) -> String { filesystem.storePath(of: path) }
        for notification in notifications {
            switch notification {
            case .didChange: forward(.changed(store(own)))
            case .itemWasDeleted: forward(.deleted(store(own)))
            case .didMove(let destination):
                forward(.moved(store(own), to: store(destination)))
                path.withLock { $0 = destination }
                moved()
            case .subitemDidAppear(let item): forward(.appeared(store(item)))
            case .subitemDidChange(let item): forward(.changed(store(item)))
            case .subitemWasDeleted(let item): forward(.deleted(store(item)))
            case .subitemDidMove(let source, let destination): forward(.moved(store(source), to: store(destination)))
            case .coordinationWasBroken: break
            }
        }
    }

    package func reacquire(_ reacquirer: @escaping @Sendable () -> Void) { reacquirer() }
}
