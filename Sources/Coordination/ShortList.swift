/// Grants of one item that nothing stood in the way of, with nobody waiting and no presenter
/// to ask: nearly every grant of a busy mount (an open, a create, an unlink, a setattr). The
/// engine keeps them on a short list beside its grant and hold tables.
///
/// Why a list of their own: between a kernel request's grant and its release the kernel does
/// the request's work, which leaves little of the engine in the CPU's caches. Filing a grant in
/// the grant table and its hold in the hold table runs the code of both tables twice per request,
/// cold; a grant on the short list touches one short array.
///
/// Every other path sees them: they block other requests (`State.blockers`), a release wakes
/// waiters, a snapshot lists them, and a session's end ends them. A grant on the list messages
/// nobody and reports no move (`CoordinationEngine.acquireAtOnce(_:for:)`).
struct ShortList {
    struct Entry {
        let number: UInt64
        let identity: CoordinatorIdentity
        let kind: LockKind
        /// An open descriptor's follows its item's moves (`relocate`).
        var intent: Intent
        /// Its owner keeps it from the accesses that pass the engine beside gated grants
        /// (`CoordinationEngine.Quietness.onlyGatedGrants`).
        var gated = false
        /// Revoked (`State.revoke`): it blocks nobody any more, and stays listed until its
        /// owner ends it.
        var revoked = false

        /// The item this grant locks: its outermost package, or itself (C17).
        func locks(_ path: ItemPath) -> Bool {
            intent.target.enclosingPackages.isEmpty
                ? intent.target.path == path : intent.target.enclosingPackages[0] == path
        }

        /// Whether the item this grant locks lies inside `directory`.
        func locks(inside directory: ItemPath) -> Bool {
            directory.isAncestor(
                of: intent.target.enclosingPackages.isEmpty ? intent.target.path : intent.target.enclosingPackages[0])
        }
    }

    /// Every request looks through the list, so it stays short: an open file keeps its place
    /// until it is closed, and a grant that finds the list full goes to the tables, where
    /// lookups do not scan.
    static let capacity = 32

    private(set) var entries: [Entry] = []
    /// Each entry's locked path's hash, in step with `entries`: a look for one item reads these
    /// few integers, and an entry only when its hash matches.
    private var keys: [Int] = []
    /// Listed grants that are not gated: while there are any, nothing passes beside the list.
    private(set) var ungatedCount = 0

    init() {
        entries.reserveCapacity(Self.capacity)
        keys.reserveCapacity(Self.capacity)
    }

    var isEmpty: Bool { entries.isEmpty }
    var isFull: Bool { entries.count >= Self.capacity }

    mutating func add(_ entry: consuming Entry, lockedPath: ItemPath) {
        keys.append(lockedPath.hashCode)
        if !entry.gated { ungatedCount += 1 }
        entries.append(entry)
    }

    /// Where the grant numbered `number` is listed; nil when it is not.
    func index(of number: UInt64) -> Int? {
        entries.firstIndex { $0.number == number }
    }

    /// Removes and returns the grant at `index`. (Not an optional entry: ending one would run
    /// the optional's value witnesses on every release.)
    @discardableResult
    mutating func remove(at index: Int) -> Entry {
        // Order does not matter here; a snapshot sorts by number.
        let last = entries.count - 1
        if index != last {
            entries.swapAt(index, last)
            keys.swapAt(index, last)
        }
        keys.removeLast()
        let entry = entries.removeLast()
        if !entry.gated { ungatedCount -= 1 }
        return entry
    }

    mutating func removeAll(of identity: CoordinatorIdentity) {
        for index in entries.indices.reversed() where entries[index].identity == identity {
            if !entries[index].gated { ungatedCount -= 1 }
            entries.remove(at: index)
            keys.remove(at: index)
        }
    }

    /// Calls `body` with the owner of each listed grant that `mode`, wanted by `identity`, must
    /// wait for. A listed grant never covers a subtree, so only the same item and, for a mode
    /// that covers a subtree, the items inside it matter.
    func forEachHolder(
        blocking mode: LockMode, for identity: CoordinatorIdentity,
        _ body: (CoordinatorIdentity) -> Void
    ) {
        let key = mode.path.hashCode
        for index in entries.indices where stops(index, mode, key: key, for: identity) { body(entries[index].identity) }
    }

    /// Calls `body` with the id of each listed grant of `holders` that `mode`, wanted by
    /// `identity`, must wait for.
    func forEachGrant(
        of holders: Set<CoordinatorIdentity>, blocking mode: LockMode, for identity: CoordinatorIdentity,
        _ body: (GrantID) -> Void
    ) {
        let key = mode.path.hashCode
        for index in entries.indices
        where holders.contains(entries[index].identity) && stops(index, mode, key: key, for: identity) {
            body(GrantID(shortListNumber: entries[index].number))
        }
    }

    /// Whether the listed grant at `index` stops `mode` (whose path hashes to `key`), wanted by
    /// `identity`.
    private func stops(_ index: Int, _ mode: LockMode, key: Int, for identity: CoordinatorIdentity) -> Bool {
        guard !entries[index].revoked, !entries[index].identity.isSameCoordinator(as: identity) else { return false }
        if keys[index] == key && entries[index].locks(mode.path) {
            return entries[index].kind.conflicts(onTheSameItemWith: mode.kind)
        }
        return mode.coversSubtree && entries[index].locks(inside: mode.path)
            && !mode.kind.leavesUntouched(entries[index].kind)
    }

    /// Marks the listed grant numbered `number` revoked; false when it is not listed, or was
    /// revoked already.
    mutating func revoke(_ number: UInt64) -> Bool {
        guard let index = index(of: number), !entries[index].revoked else { return false }
        entries[index].revoked = true
        return true
    }

    /// Marks revoked the listed grants whose kind `follows`, on the item at `path` or inside it.
    mutating func revoke(at path: ItemPath, following follows: (LockKind) -> Bool) {
        for index in entries.indices where !entries[index].revoked && follows(entries[index].kind) {
            let locked = LockMode.lockedPath(entries[index].intent)
            if locked == path || path.isAncestor(of: locked) { entries[index].revoked = true }
        }
    }

    /// Moves the listed grants whose kind `follows`, on the item at `from` or inside it, to
    /// where `moved` takes their intents; they are gated no more.
    mutating func relocate(from: ItemPath, following follows: (LockKind) -> Bool, _ moved: (Intent) -> Intent) {
        for index in entries.indices where !entries[index].revoked && follows(entries[index].kind) {
            let path = LockMode.lockedPath(entries[index].intent)
            guard path == from || from.isAncestor(of: path) else { continue }
            entries[index].intent = moved(entries[index].intent)
            keys[index] = LockMode.lockedPath(entries[index].intent).hashCode
            // Its owner's gate guards the name it left: requests about the new one pass no gate.
            if entries[index].gated {
                entries[index].gated = false
                ungatedCount += 1
            }
        }
    }

    /// Whether a listed grant of another identity stops a lock of `kind`, which covers no
    /// subtree, on `path`.
    func blocks(_ kind: LockKind, on path: ItemPath, for identity: CoordinatorIdentity) -> Bool {
        let key = path.hashCode
        for index in keys.indices where keys[index] == key {
            let entry = entries[index]
            if !entry.revoked && !entry.identity.isSameCoordinator(as: identity) && entry.locks(path)
                && entry.kind.conflicts(onTheSameItemWith: kind)
            {
                return true
            }
        }
        return false
    }
}
