import Coordination

/// What a hold through the control socket must pass before it is claimed, beyond this
/// server's domain: a host of a shared store (`coordfs mount --cluster`, `coordfs daemon
/// --cluster`) grants a hold only inside its delegations, as a mount grants its programs' opens,
/// and a read asks the other hosts' presenters of its item first, as a mount's reads do.
package protocol ClaimGate: Sendable {
    /// Whether `intents` ask other hosts' presenters first (`ask`, once, before anything else).
    func asksFirst(_ intents: [Intent]) -> Bool
    /// Asks them; `completion` and the closure returned as `admit`'s.
    func ask(
        _ intents: [Intent],
        completion: @escaping @Sendable ((errno: String, message: String)?, [any DelegationPromise]) -> Void
    ) -> @Sendable () -> Void
    /// Whether `intents` may be claimed here now.
    func admits(_ intents: [Intent]) -> Bool
    /// The stamp of a hold granted now (`HostDelegations.lastCoverLoss`), read before `admits`
    /// says it may be: its accessor's requests are judged against the losses of cover after it.
    var coverStamp: UInt64 { get }
    /// The first of a hold's `intents`, stamped `stamp`, whose cover was lost since
    /// (`HostDelegations.lostCover`); nil when none was. Asked as the hold ends, so its holder
    /// learns that another host may have had its items meanwhile.
    func itemWhoseCoverWasLost(_ intents: [Intent], since stamp: UInt64) -> ItemPath?
    /// Waits until they may (`waits` false: not for another host). `completion` runs once, on
    /// any thread: nil and the promises of the grants it waited for (each redeemed once the
    /// hold is claimed and has looked again, `DelegationPromise`), or the errno name and
    /// message that refuse the hold. The closure returned stops the wait; `completion` is not
    /// called then.
    func admit(
        _ intents: [Intent], waits: Bool,
        completion: @escaping @Sendable ((errno: String, message: String)?, [any DelegationPromise]) -> Void
    ) -> @Sendable () -> Void
}
