import Coordination

/// A directory's own quiet gate (`Inode.gate`): shut while a file in it is open (or being
/// created, or truncated) under a screened grant, and open otherwise.
///
/// The engine's first quiet gate lets a request held only for its call (an unlink, a mkdir, a
/// chmod) pass while the engine holds nothing; one open file anywhere on the mount shut it for
/// everyone. The files a mount holds open are its own grants, each one item outside any
/// package, and such a grant can conflict only with a request about that item: one that names
/// it in its directory (unlink, rename, link over it, mkdir of its name) or one on the item
/// itself (chmod, setxattr), which the engine also names by its directory and name. So the
/// mount screens these grants (`CoordinationEngine.acquireAtOnce(_:for:screened:)`): each shuts
/// its directory's gate first (`shut`), waiting for whoever is passing it, and opens it again
/// after its release. A request held for its call may then pass beside them when the engine
/// holds nothing else and the gate of every directory it names an item in is open
/// (`Filesystem.coordinate`). Requests that cover a subtree (rmdir, a directory's rename) still
/// need the engine to hold nothing.
///
/// The directory is the one the grant's path was spelled from when it was taken: the engine
/// keeps that path for the grant's life, whatever is renamed meanwhile, and so does the gate.
/// (The kernel forgets that directory's node only once the file has moved out of it; a node
/// made for it later starts with its gate open, and the name the grant still holds there, which
/// no longer leads to the file, is not guarded.)
extension QuietGate {
    /// Counts a file held open in the directory, and returns once nobody who entered before is
    /// still passing.
    func shut() {
        close()
        waitForPassersBy()
    }
}

extension Filesystem {
    /// The directory gates a request held for its call passed, beside the engine's screened
    /// grants: `second` only when it names items in two directories.
    struct Passage {
        let first: Inode
        let second: Inode?
    }

    /// Lets a request held for its call pass while the engine holds nothing but screened
    /// grants and no file is held open in a directory it names an item in (see above); nil,
    /// having counted nothing, when it must be coordinated.
    func passBesideOpenFiles(_ wanted: Wanted, _ other: Wanted?) -> Passage? {
        // An rmdir or a directory's rename conflicts with files open anywhere below it.
        if wanted.coversSubtree || other?.coversSubtree == true { return nil }
        guard engine.passQuietly(.onlyScreenedGrants) else { return nil }
        if let first = gateDirectory(of: wanted), first.gate.enter() {
            guard let other else { return Passage(first: first, second: nil) }
            if let second = gateDirectory(of: other) {
                if second === first { return Passage(first: first, second: nil) }
                // Entering never waits, so taking two gates in either order cannot deadlock.
                if second.gate.enter() { return Passage(first: first, second: second) }
            }
            first.gate.leave()
        }
        engine.endPassingQuietly(.onlyScreenedGrants)
        return nil
    }

    func endPassing(_ passage: Passage) {
        passage.second?.gate.leave()
        passage.first.gate.leave()
        engine.endPassingQuietly(.onlyScreenedGrants)
    }

    /// The directory whose gate guards the item `wanted` names: the node it names an item in,
    /// or the item's parent, as the engine's path for it is spelled (`targetAndDirectory`).
    /// Nil for the root.
    private func gateDirectory(of wanted: Wanted) -> Inode? {
        wanted.name.isEmpty ? inodes.placementNode(of: wanted.node).parent : wanted.node
    }
}

extension Filesystem.Wanted {
    /// A destructive write on a directory: the engine makes it wait for everything held inside
    /// (outside packages; here, where packages are not looked at, everywhere).
    var coversSubtree: Bool {
        guard isDirectory, case .writing(let options) = kind else { return false }
        return !options.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing])
    }
}
