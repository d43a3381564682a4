#if canImport(Glibc)
import Glibc
#endif

/// What a mount does with an item's content before something replaces it.
public enum VersionPolicy: String, Sendable, CaseIterable {
    /// Keeps it as a version; a lost update's is kept as a conflict, and told.
    case keep
    /// Keeps versions, and fails a stale write (one that would replace content its writer never
    /// saw) with ESTALE before anything changes, for programs that read again and retry.
    case refuse
    /// Keeps nothing and checks nothing.
    case off
}

/// A mount's versions: the policy for each path (a glob against the path below the mount root,
/// `*` crossing `/`; the first rule that matches wins), the bounds, and who counts as one reader.
public struct VersionSettings: Sendable {
    public var policy: VersionPolicy = .keep
    public var rules: [(pattern: String, policy: VersionPolicy)] = []
    public var limits = VersionLimits()
    public var readers: ReaderIdentity = .session

    public init() {}

    /// The policy of the item at `relativePath`.
    public func policy(for relativePath: String) -> VersionPolicy {
        for rule in rules where fnmatch(rule.pattern, relativePath, 0) == 0 { return rule.policy }
        return policy
    }

    /// Whether any path keeps versions: else no store is opened.
    public var keepsAny: Bool { policy != .off || rules.contains { $0.policy != .off } }
}
