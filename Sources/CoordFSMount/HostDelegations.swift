/// Grants beyond this host: the delegations a host of a shared store must hold before it grants
/// its own programs anything (`coordfs mount --cluster`). Paths are below the store's root ("" is
/// the root itself), as every host spells them.
public protocol HostDelegations: AnyObject, Sendable {
    /// Whether this host may grant `writing` (or reading) of `path` now.
    func covers(_ path: String, writing: Bool) -> Bool
    /// Waits until it may; `completion` runs once, on any thread: nil, or why it may not
    /// (the host's lease is lost, or the cluster cannot be reached).
    func acquire(_ path: String, writing: Bool, completion: @escaping @Sendable (HostDelegationFailure?) -> Void)
}

/// Why a host may not grant: what its programs are told (ENOLCK).
public struct HostDelegationFailure: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
