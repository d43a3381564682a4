/// How much a store keeps: versions of one item, bytes of all, and age. Pinned versions and
/// unresolved conflicts are never taken by the bounds; the oldest of the rest go first.
public struct VersionLimits: Sendable, Equatable {
    /// Versions kept of one item.
    public var perItem: Int
    /// Bytes of content kept in all.
    public var totalBytes: Int64
    /// Seconds a version is kept.
    public var maximumAge: Double
    /// Largest file copied to be kept (a hard link or a reflink costs nothing and has no bound):
    /// a larger one is not kept, which is logged and counted.
    public var copyLimit: Int64
    /// Seconds a version is kept whatever the bounds say: a file renamed over or removed may
    /// still be written by a program that had it open, and a version found written so is made
    /// a conflict then (an item full of unresolved conflicts would otherwise lose its newest
    /// version to its count at once).
    public var grace: Double

    public init(
        perItem: Int = 32, totalBytes: Int64 = 1 << 30, maximumAge: Double = 30 * 86_400, copyLimit: Int64 = 64 << 20,
        grace: Double = 5
    ) {
        self.perItem = perItem
        self.totalBytes = totalBytes
        self.maximumAge = maximumAge
        self.copyLimit = copyLimit
        self.grace = grace
    }

    /// The versions to remove from `all` (every version of the store, any order) at `now`:
    /// those past the age, then the oldest of each item past `perItem`, then the oldest of all
    /// until the rest fit in `totalBytes`.
    public func excess(of all: [VersionRecord], now: Double) -> [VersionRecord] {
        let removable = all.filter { !$0.pinned && !$0.isUnresolvedConflict && now - $0.time >= grace }.sorted {
            $0.id < $1.id
        }
        var removed = Set<String>()
        for version in removable where now - version.time > maximumAge { removed.insert(version.id) }
        let byItem = Dictionary(grouping: all.filter { !removed.contains($0.id) }, by: \.item)
        for (_, versions) in byItem where versions.count > perItem {
            var over = versions.count - perItem
            for version in versions.sorted(by: { $0.id < $1.id })
            where over > 0 && !version.pinned && !version.isUnresolvedConflict
                && now - version.time >= grace
            {
                removed.insert(version.id)
                over -= 1
            }
        }
        var total = all.filter { !removed.contains($0.id) }.reduce(Int64(0)) { $0 + $1.held }
        for version in removable where total > totalBytes && !removed.contains(version.id) {
            removed.insert(version.id)
            total -= version.held
        }
        return all.filter { removed.contains($0.id) }
    }
}
