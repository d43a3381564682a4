/// Grants of one intent that end within the call that took them, granted with nothing in the
/// way, nobody waiting and no presenter to ask: nearly every grant of a busy mount (an unlink, a
/// mkdir, a setattr). They are kept in a short list beside the grant and hold tables.
///
/// Why a list of their own: between a kernel request's grant and its release the kernel does
/// the request's work, which leaves little of the engine in the CPU's caches. Filing the grant in
/// the grant table and its hold in the hold table touched both tables and their code twice per
/// request, cold; a brief grant touches one short array.
///
/// Every other path sees them: they block other requests (`State.blockers`), a release wakes
/// waiters, a snapshot lists them, and a session's end ends them. A brief grant messages nobody
/// and reports no move.
struct BriefHolds {
    struct Entry {
        let number: UInt64
        let identity: CoordinatorIdentity
        let kind: LockKind
        let intent: Intent

        /// Whether the item this grant locks (its outermost package, or itself: C17) is `path`.
        func locks(_ path: ItemPath) -> Bool {
            intent.target.enclosingPackages.isEmpty ? intent.target.path == path : intent.target.enclosingPackages[0] == path
        }

        /// Whether the item this grant locks lies inside `directory`.
        func locks(inside directory: ItemPath) -> Bool {
            directory.isAncestor(of: intent.target.enclosingPackages.isEmpty ? intent.target.path : intent.target.enclosingPackages[0])
        }
    }

    /// More brief grants at once than a mount has serving threads means the caller does not end
    /// them promptly; beyond this they go to the tables, where lookups do not scan.
    static let capacity = 32

    private(set) var entries: [Entry] = []

    init() { entries.reserveCapacity(Self.capacity) }

    var isEmpty: Bool { entries.isEmpty }
    var isFull: Bool { entries.count >= Self.capacity }

    mutating func add(_ entry: consuming Entry) { entries.append(entry) }

    /// Removes and returns the grant numbered `number`; nil when it is not live.
    mutating func remove(number: UInt64) -> Entry? {
        guard let index = entries.firstIndex(where: { $0.number == number }) else { return nil }
        // Order does not matter here; a snapshot sorts by number.
        entries.swapAt(index, entries.count - 1)
        return entries.removeLast()
    }

    mutating func removeAll(of identity: CoordinatorIdentity) {
        entries.removeAll { $0.identity == identity }
    }

    /// Calls `body` with the owner of each brief grant that `mode`, wanted by `identity`, must
    /// wait for. A brief grant never covers a subtree, so only the same item and, for a mode that
    /// covers a subtree, the items inside it matter.
    func forEachHolder(blocking mode: LockMode, for identity: CoordinatorIdentity,
                       _ body: (CoordinatorIdentity) -> Void) {
        for entry in entries where entry.identity != identity {
            if entry.locks(mode.path) {
                if entry.kind.conflicts(onTheSameItemWith: mode.kind) { body(entry.identity) }
            } else if mode.coversSubtree && entry.locks(inside: mode.path) {
                body(entry.identity)
            }
        }
    }

    /// Whether a brief grant of another identity stops a lock of `kind`, which covers no
    /// subtree, on `path`.
    func blocks(_ kind: LockKind, on path: ItemPath, for identity: CoordinatorIdentity) -> Bool {
        entries.contains { $0.identity != identity && $0.locks(path) && $0.kind.conflicts(onTheSameItemWith: kind) }
    }
}
