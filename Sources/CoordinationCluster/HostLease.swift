import Synchronization

/// A host's membership of a cluster: one etcd lease, kept alive a few times per TTL. Every key a
/// host holds for its grants is attached to it, so when the host dies or is cut off, etcd
/// deletes them once the TTL has passed and the other hosts proceed. A host that cannot renew
/// its lease within the TTL, or learns it has expired, has lost it: from then on it must grant
/// nothing that relied on it (the others may already have proceeded), and join again.
public final class HostLease: Sendable {
    public let id: Int64
    /// Seconds etcd keeps the lease after its last renewal.
    public let ttl: Int64
    private let client: EtcdClient
    private let loss = Loss()
    private let renewal: Task<Void, Never>

    /// Grants a lease of `ttl` seconds and starts renewing it.
    public static func grant(on client: EtcdClient, ttl: Int64) async throws(EtcdError) -> HostLease {
        let (id, granted) = try await client.grantLease(ttl: ttl)
        return HostLease(id: id, ttl: granted, client: client)
    }

    private init(id: Int64, ttl: Int64, client: EtcdClient) {
        self.id = id
        self.ttl = ttl
        self.client = client
        let loss = self.loss
        renewal = Task {
            let clock = ContinuousClock()
            var renewed = clock.now
            // Three tries a TTL: one lost request, or a member's failover, leaves time for another.
            let interval = Duration.milliseconds(max(ttl * 1000 / 3, 200))
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                if Task.isCancelled { return }
                let alive: Bool
                // etcd counts the TTL from when it renewed, which is after this.
                let asked = clock.now
                do {
                    alive = try await client.keepAlive(id) != nil
                    if alive { renewed = asked }
                } catch {
                    // Unreachable: the lease lives on in etcd until its TTL from the last renewal.
                    alive = clock.now - renewed < .seconds(ttl)
                }
                if !alive { return loss.happened() }
            }
        }
    }

    deinit { renewal.cancel() }

    /// Whether the lease has been lost (expired, revoked, or not renewed within its TTL).
    public var isLost: Bool { loss.hasHappened }

    /// Returns once the lease is lost.
    public func waitUntilLost() async { await loss.wait() }

    /// Stops renewing without telling etcd: the lease ends after its TTL, as a host's that died.
    func stopRenewing() { renewal.cancel() }

    /// Ends the lease at once (a host leaving cleanly): etcd deletes its keys now, not after the TTL.
    public func revoke() async throws(EtcdError) {
        renewal.cancel()
        loss.happened()
        try await client.revoke(id)
    }
}

/// A lease's loss, once, and who waits for it.
private final class Loss: Sendable {
    private let state = Mutex<(happened: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    var hasHappened: Bool { state.withLock { $0.happened } }

    func happened() {
        let waiters = state.withLock { state in
            state.happened = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let happened = state.withLock { state in
                if !state.happened { state.waiters.append(continuation) }
                return state.happened
            }
            if happened { continuation.resume() }
        }
    }
}
