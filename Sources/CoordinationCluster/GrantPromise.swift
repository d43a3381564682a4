import Synchronization

/// A delegation granted to requests that waited for it is theirs first: a recall that comes
/// with the grant (another host's request queued behind theirs) gives it back only once each
/// of them has taken its claim here and looked, or `ClusterMember.promiseLimit` has passed.
/// Otherwise a host whose every grant is recalled at once (three hosts at one file) would hand
/// each on before the request it was asked for could use it, and that request would ask again,
/// behind the others, without end.
///
/// Each waiting request holds one of these: `redeem` once it has looked (its claim taken, the
/// delegation found covering it or not). Dropped unredeemed, it redeems itself.
public final class GrantPromise: Sendable {
    private let redemption: Mutex<(@Sendable () -> Void)?>

    init(redeem: @escaping @Sendable () -> Void) { redemption = Mutex(redeem) }

    public func redeem() { redemption.withLock { $0.take() }?() }

    deinit { redeem() }
}
