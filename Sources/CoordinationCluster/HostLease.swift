import Synchronization

/// A host's membership of a cluster: one etcd lease, kept alive a few times per TTL. Every key a
/// host holds for its grants is attached to it, so when the host dies or is cut off, etcd
/// deletes them once the TTL has passed and the other hosts proceed. A host that cannot renew
/// its lease within the TTL, or learns it has expired, has lost it: from then on it must grant
/// nothing that relied on it (the others may already have proceeded), and join again.
///
/// The lease is counted lost a margin before etcd could expire it (a tenth of the TTL, at most
/// a second), from the clock alone: a renewal still waiting for an answer does not hold it up.
public final class HostLease: Sendable {
    public let id: Int64
    /// Seconds etcd keeps the lease after its last renewal.
    public let ttl: Int64
    private let client: EtcdClient
    private let validity: Validity
    private let renewal: Task<Void, Never>

    /// Grants a lease of `ttl` seconds and starts renewing it.
    public static func grant(on client: EtcdClient, ttl: Int64) async throws(EtcdError) -> HostLease {
        // etcd counts the TTL from when it granted, which is after this.
        let asked = ContinuousClock.now
        let (id, granted) = try await client.grantLease(ttl: ttl)
        return HostLease(id: id, ttl: granted, validUntil: asked + .seconds(granted), client: client)
    }

    private init(id: Int64, ttl: Int64, validUntil: ContinuousClock.Instant, client: EtcdClient) {
        self.id = id
        self.ttl = ttl
        self.client = client
        let margin = Duration.milliseconds(min(ttl * 100, 1000))
        let validity = Validity(until: validUntil - margin)
        self.validity = validity
        renewal = Task {
            // Five tries a TTL: a renewal that waits out an election (a second or two after the
            // leader is lost) still leaves time for another.
            let interval = Duration.milliseconds(max(ttl * 1000 / 5, 200))
            // After a renewal without an answer (a member gone, an election under way), the
            // next comes soon: the TTL may not leave time for two more full intervals.
            var next = interval
            while !Task.isCancelled {
                let left = validity.left
                guard left > .zero else { return validity.end() }
                try? await Task.sleep(for: min(next, left))
                if Task.isCancelled { return }
                guard validity.left > .zero else { return validity.end() }
                let asked = ContinuousClock.now
                // A renewal that would answer after the lease ran out is not waited for.
                // .none: no answer (unreachable, or not in time); .some(nil): the lease is gone.
                let renewed = await withTaskGroup(of: Int64??.self) { group in
                    group.addTask {
                        do { return .some(try await client.keepAlive(id)) } catch { return .none }
                    }
                    group.addTask {
                        try? await Task.sleep(for: validity.left)
                        return .none
                    }
                    let first = await group.next()!
                    group.cancelAll()
                    return first
                }
                switch renewed {
                case .some(.some(let granted)):
                    validity.extend(to: asked + .seconds(granted) - margin)
                    next = interval
                case .some(.none): return validity.end()  // expired or revoked in etcd
                case .none: next = .milliseconds(200)
                }
            }
        }
    }

    deinit { renewal.cancel() }

    /// Whether the lease has been lost (expired, revoked, or not renewed within its TTL).
    public var isLost: Bool { validity.isLost }

    /// Returns once the lease is lost.
    public func waitUntilLost() async { await validity.waitUntilLost() }

    /// How long the lease is known valid still: until its last renewal's answer's TTL, less the
    /// margin, counted from when that renewal was asked for; zero once lost.
    public var validFor: Duration { validity.left }

    /// Calls `observer` with the instant until which the lease is known valid, now and at each
    /// renewal, and with nil once it is lost; each call in order, under the lease's lock (the
    /// observer only records it). One observer: a later one replaces it.
    public func observeValidity(_ observer: @escaping @Sendable (ContinuousClock.Instant?) -> Void) {
        validity.observe(observer)
    }

    /// Stops renewing without telling etcd: the lease ends after its TTL, as a host's that died.
    func stopRenewing() {
        renewal.cancel()
        let validity = self.validity
        Task {
            try? await Task.sleep(for: validity.left)
            validity.end()
        }
    }

    /// Counts the lease lost here now, without telling etcd, where it lives on until its TTL: as
    /// a host whose renewals went unanswered until its margin, and that reaches etcd again just
    /// after. (For tests.)
    func loseLocally() {
        renewal.cancel()
        validity.end()
    }

    /// Ends the lease at once (a host leaving cleanly): etcd deletes its keys now, not after the
    /// TTL. Whether etcd still had it (false: it had expired, or was revoked already).
    @discardableResult
    public func revoke() async throws(EtcdError) -> Bool {
        renewal.cancel()
        validity.end()
        return try await client.revoke(id)
    }
}

/// Until when a lease is known to be valid, its loss (once), and who waits for it.
private final class Validity: Sendable {
    private struct State {
        var until: ContinuousClock.Instant
        var lost = false
        var waiters: [CheckedContinuation<Void, Never>] = []
        var observer: (@Sendable (ContinuousClock.Instant?) -> Void)?
    }
    private let state: Mutex<State>

    init(until: ContinuousClock.Instant) { state = Mutex(State(until: until)) }

    var left: Duration { state.withLock { $0.lost ? .zero : max($0.until - .now, .zero) } }
    var isLost: Bool { state.withLock { $0.lost || $0.until <= .now } }

    func observe(_ observer: @escaping @Sendable (ContinuousClock.Instant?) -> Void) {
        state.withLock { state in
            state.observer = observer
            observer(state.lost ? nil : state.until)
        }
    }

    func extend(to until: ContinuousClock.Instant) {
        state.withLock { state in
            guard !state.lost, until > state.until else { return }
            state.until = until
            state.observer?(until)
        }
    }

    func end() {
        let waiters = state.withLock { state in
            // Told once: the loss is for good.
            if !state.lost { state.observer?(nil) }
            state.lost = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func waitUntilLost() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let lost = state.withLock { state in
                if !state.lost { state.waiters.append(continuation) }
                return state.lost
            }
            if lost { continuation.resume() }
        }
    }
}
