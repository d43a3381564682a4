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
    /// Watches another host's access that waits here for holders, at a store path, with the
    /// rules a program's wait here is watched by that fit it (a mount's settle rule: a reader
    /// goes past writers whose file has stayed unchanged for the settle time); what it returns
    /// ends the watch. Nil where nothing watches waits (the daemon does not see files open).
    let watchesWaits: (@Sendable (CoordinatedAccess, _ storePath: String) -> @Sendable () -> Void)?

    package init(
        domain: CoordinationDomain, root: ItemPath, isDirectory: @escaping @Sendable (String) -> Bool,
        target: @escaping @Sendable (ItemPath, _ isDirectory: Bool) -> AccessTarget,
        watchesWaits: (@Sendable (CoordinatedAccess, _ storePath: String) -> @Sendable () -> Void)? = nil
    ) {
        self.domain = domain
        self.root = root
        self.isDirectory = isDirectory
        self.target = target
        self.watchesWaits = watchesWaits
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

    /// What an access of `kind` to `target` needs a delegation of: the item it locks, how, and
    /// the access as the hosts it recalls take it. Any write of an item inside a package is a
    /// write of the package (P22): not its deletion, nor a write that shares it.
    package func delegationNeed(_ kind: AccessKind, of target: AccessTarget) -> DelegationNeed? {
        guard let locked = lockedStorePath(target) else { return nil }
        let access = DelegatedAccess(kind)
        let itself =
            locked == ""
            ? target.path == root || target.path.isAncestor(of: root) : storePath(of: target.path) == locked
        if itself || !access.writes { return DelegationNeed(path: locked, access: access, kind: kind) }
        return DelegationNeed(path: locked, access: .writing, kind: .writing([]))
    }

    /// The engine's target for a store path, as the item is here now (a directory or not).
    func storeTarget(_ path: String) -> AccessTarget {
        target(itemPath(ofStorePath: path), path.isEmpty || isDirectory(path))
    }

    // MARK: Holders and other hosts' accesses

    /// What this host's programs and coordinators hold now, below the store's root, and how
    /// (other hosts' accesses left out): a delegation of that kind covers each.
    package func heldItems() -> [(path: String, access: DelegatedAccess)] {
        domain.engine.snapshot(SnapshotWindow(lists: [.holders])).holders.flatMap {
            holder -> [(path: String, access: DelegatedAccess)] in
            if case .host = holder.identity { return [] }
            return holder.intents.compactMap { intent in
                delegationNeed(intent.kind, of: intent.target).map { ($0.path, $0.access) }
            }
        }
    }

    /// Begins another host's access of `path` here, as a recall of this host's delegation
    /// asks: its request as the engine's `kind` (appending, in place, its options), met as the
    /// same access of a local program: it waits for the holders here in its way, and shares
    /// the item with those that share it; a program's read (`byProgram`) goes past a writer
    /// whose file has stayed unchanged for the settle time (`watchesWaits`), holding nothing,
    /// where a coordinated hold's waits; this host's presenters save, relinquish or
    /// accommodate a deletion, and a refusal of theirs refuses it (unless `asksPresenters` is
    /// false: a read has asked them already, `askPresenters`). It holds the item until ended.
    /// Ended unchanged: what the other host's programs then do is told as it is done (its
    /// news, or a mount's watch of its backing directory), not guessed.
    package func beginAccess(
        forHost host: String, _ path: String, _ kind: AccessKind, byProgram: Bool = false,
        asksPresenters: Bool = true
    ) -> HostAccess {
        begin(forHost: host, path, kind, holds: true, watched: byProgram, asksPresenters: asksPresenters)
    }

    /// Asks this host's presenters of `path` as for another host's access (a read: relinquish
    /// to a reader, save), holding nothing and waiting for nobody here: its answer is theirs.
    /// Their own work passes meanwhile, under what this host holds (C21).
    package func askPresenters(forHost host: String, _ path: String, _ kind: AccessKind) -> HostAccess {
        begin(forHost: host, path, kind, holds: false, watched: false, asksPresenters: true)
    }

    private func begin(
        forHost host: String, _ path: String, _ kind: AccessKind, holds: Bool, watched: Bool, asksPresenters: Bool
    ) -> HostAccess {
        let access = HostAccess()
        let unchanged = IntentOutcome(existedBefore: true, existsAfter: true, changed: false)
        var request = AccessRequest(identity: .host(host), intents: [Intent(kind, storeTarget(path))], waits: true)
        request.holdsIntents = holds
        request.messagesPresenters = asksPresenters
        let waiting = CoordinatedAccess(domain: domain, request: request)
        waiting.start(waitTimeout: nil) { [domain] result in
            switch result {
            case .success(let granted):
                let claim = Claim.waited(granted)
                if !access.granted(claim, passed: granted.wentAheadHoldingNothing) {
                    claim.end(outcome: unchanged, in: domain)
                }
            case .failure(let error):
                access.refused(errno: FileCoordinationError.errno(for: error, cancellation: ECANCELED))
            }
        }
        access.waiting(waiting) { [domain] claim in claim.end(outcome: unchanged, in: domain) }
        if watched, let watchesWaits {
            _ = waiting.ifUnsettled { access.watched(until: watchesWaits(waiting, path)) }
        }
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
