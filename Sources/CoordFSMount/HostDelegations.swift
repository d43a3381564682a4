/// Grants beyond this host: the delegations a host of a shared store must hold before it grants
/// its own programs anything (`coordfs mount --cluster`). Paths are below the store's root ("" is
/// the root itself), as every host spells them.
public protocol HostDelegations: AnyObject, Sendable {
    /// Whether this host may grant `writing` (or reading) of `path` now.
    func covers(_ path: String, writing: Bool) -> Bool
    /// Asks for what `path` needs; `completion` runs once, on any thread. Without `waits`, a
    /// delegation another host holds is not waited for (`.wouldWait`). The closure returned stops
    /// waiting (a request interrupted or past its wait timeout): `completion` is not called then.
    func acquire(_ path: String, writing: Bool, waits: Bool,
                 completion: @escaping @Sendable (HostDelegationOutcome) -> Void) -> @Sendable () -> Void
}

/// How asking for a delegation ended.
public enum HostDelegationOutcome: Sendable {
    case granted
    /// Another host holds it, and the request would not wait.
    case wouldWait
    /// This host may grant nothing: its lease is lost, or the cluster cannot be reached (ENOLCK).
    case refused(String)
}
