import Coordination
import LinuxSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The items of a domain below one directory, as a host of a store shared with other hosts
/// (`--cluster`) sees them: what its holders hold, the other hosts' accesses begun here, what
/// its presenters present, the other hosts' changes told, and their presenters stood in. A
/// mount's store is its backing directory seen at the mount point; the daemon's, a directory
/// its clients use directly. Paths below the store's root are spelled alike on every host
/// ("" is the root itself).
package final class SharedStore: Sendable {
    package let domain: CoordinationDomain
    /// The store's root, as the domain's paths spell it.
    package let root: ItemPath
    /// Whether the item at a store path is a directory here now.
    let isDirectory: @Sendable (String) -> Bool
    /// The engine's facts for an item (directory, packages around it).
    let target: @Sendable (ItemPath, _ isDirectory: Bool) -> AccessTarget

    package init(
        domain: CoordinationDomain, root: ItemPath, isDirectory: @escaping @Sendable (String) -> Bool,
        target: @escaping @Sendable (ItemPath, _ isDirectory: Bool) -> AccessTarget
    ) {
        self.domain = domain
        self.root = root
        self.isDirectory = isDirectory
        self.target = target
    }

    // MARK: Paths

    /// An item's path below the store's root; nil for one outside the store.
    package func storePath(of path: ItemPath) -> String? {
        if path == root { return "" }
        guard root.isAncestor(of: path) else { return nil }
        return String(path.string.dropFirst(root.isRoot ? 1 : root.string.count + 1))
    }

    /// The domain's path of an item below the store's root.
    package func itemPath(ofStorePath path: String) -> ItemPath {
        path.isEmpty ? root : ItemPath(canonical: (root.isRoot ? "" : root.string) + "/" + path)
    }

    /// The item an access of `target` locks (its outermost package inside the store, or
    /// itself), below the store's root: the root itself for an access of a directory around
    /// the store (a rename or deletion of it takes the whole store); nil for one beside it.
    package func lockedStorePath(_ target: AccessTarget) -> String? {
        if target.path.isAncestor(of: root) { return "" }
        let package = target.enclosingPackages.first { root.isAncestor(of: $0) }
        return storePath(of: package ?? target.path)
    }

    /// What an access of `kind` to `target` needs a delegation of: the item it locks, and how.
    /// Deleting, moving or replacing an item inside a package is a write of the package (P22),
    /// not its deletion.
    package func delegationNeed(_ kind: AccessKind, of target: AccessTarget) -> (path: String, access: DelegatedAccess)?
    {
        guard let locked = lockedStorePath(target) else { return nil }
        let access = DelegatedAccess(kind)
        let itself =
            locked == ""
            ? target.path == root || target.path.isAncestor(of: root) : storePath(of: target.path) == locked
        return (locked, itself || !access.writes ? access : .writing)
    }

    /// The engine's target for a store path, as the item is here now (a directory or not).
    func storeTarget(_ path: String) -> AccessTarget {
        target(itemPath(ofStorePath: path), path.isEmpty || isDirectory(path))
    }

    // MARK: Holders and other hosts' accesses

    /// What this host's programs and coordinators hold now, below the store's root (other
    /// hosts' accesses left out).
    package func heldItems() -> [(path: String, writing: Bool)] {
        domain.engine.snapshot(SnapshotWindow(lists: [.holders])).holders.flatMap {
            holder -> [(path: String, writing: Bool)] in
            if case .host = holder.identity { return [] }
            return holder.intents.compactMap { intent in
                lockedStorePath(intent.target).map { ($0, intent.kind.isWrite) }
            }
        }
    }

    /// Begins another host's access of `path` here, as a recall of this host's delegation
    /// asks: this host's presenters save, relinquish or accommodate a deletion as for such an
    /// access of a local program, and it holds the item (for as long as the host's conflicting
    /// programs let it) until ended. Ended unchanged: what the other host's programs then do is
    /// told as it is done (its news, or a mount's watch of its backing directory), not guessed.
    package func beginAccess(forHost host: String, _ path: String, _ kind: DelegatedAccess) -> HostAccess {
        let access = HostAccess()
        let unchanged = IntentOutcome(existedBefore: true, existsAfter: true, changed: false)
        let waiting = Claim.beginWaiting(
            in: domain, identity: .host(host), intents: [Intent(kind.kind, storeTarget(path))],
            timeout: nil
        ) { [domain] result in
            if case .success(let claim) = result, !access.granted(claim) { claim.end(outcome: unchanged, in: domain) }
        }
        access.waiting(waiting) { [domain] claim in claim.end(outcome: unchanged, in: domain) }
        return access
    }

    // MARK: Presenters across hosts

    /// The items this host's presenters present, below the store's root (other hosts'
    /// stand-ins left out).
    package func presentedStorePaths() -> Set<String> {
        Set(
            domain.engine.snapshot(SnapshotWindow(lists: [.presenters])).presenters.compactMap { _, record -> String? in
                if case .host = record.owner { return nil }
                return record.path.flatMap(storePath(of:))
            })
    }

    /// Tells this host's presenters what `host`'s programs did, as changes of an accessor from
    /// another host (`via: cluster`); its stand-ins here hear nothing of it.
    package func tell(_ changes: [HostChange], madeBy host: String) {
        let accessor = CoordinatorIdentity.host(host)
        let engine = domain.engine
        var deliveries: [PresenterDelivery<PresenterNotification>] = []
        func outcome(_ before: Bool, _ after: Bool) -> IntentOutcome {
            IntentOutcome(existedBefore: before, existsAfter: after, changed: true)
        }
        for change in changes {
            switch change {
            case .changed(let path), .appeared(let path), .deleted(let path):
                let happened =
                    switch change {
                    case .appeared: outcome(false, true)
                    case .deleted: outcome(true, false)
                    default: outcome(true, true)
                    }
                deliveries += engine.changesMadeOutside(
                    [Intent(.writing([]), storeTarget(path))], outcomes: [happened], by: accessor)
            case .moved(let source, let destination):
                let moved = storeTarget(destination)
                deliveries += engine.moveMadeOutside(
                    from: AccessTarget(path: itemPath(ofStorePath: source), isDirectory: moved.isDirectory),
                    to: moved, by: accessor)
            }
        }
        if !deliveries.isEmpty { domain.deliver(deliveries) }
    }

    /// Stands a presenter of `host` at `path` (below the store's root) in this host's domain;
    /// `forward` gets what this host's programs do to it. Withdrawn by `withdraw`.
    package func standIn(
        forPresenterOf host: String, at path: String,
        forward: @escaping @Sendable (HostChange) -> Void
    ) -> HostPresenter {
        let presenter = HostPresenter(host: host, path: itemPath(ofStorePath: path), store: self, forward: forward)
        domain.register(presenter, key: ObjectIdentifier(presenter), linked: false)
        return presenter
    }

    package func withdraw(_ presenter: HostPresenter) {
        domain.unregister(key: ObjectIdentifier(presenter))
    }
}

/// A change another host's programs made to the shared store, below its root.
package enum HostChange: Hashable, Sendable {
    case changed(String)
    case appeared(String)
    case deleted(String)
    case moved(String, to: String)
}
