import CoordinationCluster
import CoordFSMount
import Foundation
import Synchronization

/// A mount's membership of a cluster of hosts that share one store (`--cluster`): its etcd
/// lease, its delegations, and its answers to other hosts' recalls, joined before the mount
/// serves and left when it ends.
final class ClusterJoin: Sendable {
    let member: ClusterMember
    let presenters: HostPresenters

    private init(member: ClusterMember, filesystem: Filesystem) {
        self.member = member
        presenters = HostPresenters(member: member, filesystem: filesystem)
    }

    /// The members' URLs of `etcd://HOST:PORT[,HOST:PORT...]` (http:// URLs are taken as they are).
    static func endpoints(_ text: String) throws -> [String] {
        var rest = Substring(text)
        if rest.hasPrefix("etcd://") { rest = rest.dropFirst("etcd://".count) }
        let members = rest.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard !members.isEmpty, !members.contains(where: \.isEmpty) else {
            throw CommandFailure("--cluster wants etcd://HOST:PORT[,HOST:PORT...], not '\(text)'")
        }
        return try members.map { member in
            if member.hasPrefix("http://") || member.hasPrefix("https://") { return member }
            guard let colon = member.lastIndex(of: ":"), let port = Int(member[member.index(after: colon)...]), (1...65535).contains(port),
                  colon != member.startIndex else {
                throw CommandFailure("--cluster: '\(member)' is not HOST:PORT")
            }
            return "http://" + member
        }
    }

    /// Joins: a lease, the store's delegations read and followed, recalls answered by
    /// `filesystem`. Waits at most `timeout` for etcd.
    static func join(endpoints: [String], store: String, host: String, ttl: Int64, breakTime: Duration?,
                     filesystem: Filesystem, timeout: Duration = .seconds(15)) throws -> ClusterJoin {
        let outcome = Mutex<Result<ClusterJoin, Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let task = Task {
            do {
                let client = EtcdClient(endpoints: endpoints)
                let member = ClusterMember(join: {
                    let lease = try await HostLease.grant(on: client, ttl: ttl)
                    let delegations = Delegations(client: client, store: store, host: host, lease: lease)
                    do { try await delegations.start() } catch {
                        try? await lease.revoke()
                        throw error
                    }
                    return delegations
                }, local: MountAccesses(filesystem: filesystem), breakTime: breakTime)
                try await member.start()
                outcome.withLock { $0 = .success(ClusterJoin(member: member, filesystem: filesystem)) }
            } catch {
                outcome.withLock { $0 = .failure(error) }
            }
            done.signal()
        }
        let (seconds, attoseconds) = timeout.components
        if done.wait(timeout: .now() + Double(seconds) + Double(attoseconds) / 1e18) == .timedOut {
            task.cancel()
            throw CommandFailure("cannot join the cluster at \(endpoints.joined(separator: ",")): no answer within \(seconds) s")
        }
        switch outcome.withLock({ $0 })! {
        case .success(let join):
            filesystem.delegations = MemberDelegations(member: join.member)
            join.presenters.start()
            return join
        case .failure(let error):
            throw CommandFailure("cannot join the cluster at \(endpoints.joined(separator: ",")): \(error)")
        }
    }

    /// Gives back every delegation (the lease is revoked), waiting at most a few seconds.
    func leave() {
        presenters.stop()
        let done = DispatchSemaphore(value: 0)
        Task { [member] in
            await member.leave()
            done.signal()
        }
        _ = done.wait(timeout: .now() + 5)
    }
}

/// Presenters across the hosts: this host publishes what its presenters present (when it does
/// not see the store's changes itself) and holds a read delegation of each presented item, so
/// that another host's access recalls it and these presenters are asked first; it stands the
/// other hosts' presenters in its domain, forwarding what its programs do to them; and it tells
/// its presenters what the other hosts sent.
final class HostPresenters: Sendable {
    private let member: ClusterMember
    private unowned let filesystem: Filesystem
    private let standIns = Mutex<[String: HostPresenter]>([:])
    private let publishing = Mutex<(scheduled: Bool, tasks: [Task<Void, Never>])>((false, []))
    /// Presented items whose read delegation is being asked for.
    private let asking = Mutex<Set<String>>([])

    init(member: ClusterMember, filesystem: Filesystem) {
        self.member = member
        self.filesystem = filesystem
    }

    func start() {
        filesystem.domain.onPresentersChanged { [weak self] in self?.schedulePublishing() }
        let tasks = [
            Task { [self] in
                for await byHost in member.presences { standIn(for: byHost) }
            },
            Task { [self] in
                for await batch in member.changesElsewhere where !filesystem.seesChangesBehind {
                    filesystem.tell(batch.changes.map(Self.change), madeBy: batch.host)
                }
            },
            // A presence delegation given back to another host's access is asked for again.
            Task { [self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(250))
                    holdPresented(filesystem.presentedStorePaths())
                }
            },
        ]
        publishing.withLock { $0.tasks = tasks }
        schedulePublishing()
    }

    func stop() {
        for task in publishing.withLock({ $0.tasks }) { task.cancel() }
        for presenter in standIns.withLock({ $0.values }) { filesystem.withdraw(presenter) }
    }

    private func schedulePublishing() {
        let first = publishing.withLock { state -> Bool in
            defer { state.scheduled = true }
            return !state.scheduled
        }
        guard first else { return }
        Task { [self] in
            publishing.withLock { $0.scheduled = false }
            let presented = filesystem.presentedStorePaths()
            await member.present(filesystem.seesChangesBehind ? [] : presented)
            holdPresented(presented)
        }
    }

    private func holdPresented(_ paths: Set<String>) {
        for path in paths where !member.covers(path, .read) {
            // One request per item at a time: another host may hold it for long (a log).
            guard asking.withLock({ $0.insert(path).inserted }) else { continue }
            Task { [self] in
                try? await member.acquire(path, .read)
                asking.withLock { _ = $0.remove(path) }
            }
        }
    }

    /// Stands in each other host's presenters, and withdraws those gone.
    private func standIn(for byHost: [String: Set<String>]) {
        let wanted = Set(byHost.flatMap { host, paths in paths.map { host + "\0" + $0 } })
        let (added, removed) = standIns.withLock { current -> ([String], [HostPresenter]) in
            let removed = current.filter { !wanted.contains($0.key) }
            for key in removed.keys { current[key] = nil }
            return (wanted.filter { current[$0] == nil }.sorted(), Array(removed.values))
        }
        for presenter in removed { filesystem.withdraw(presenter) }
        for key in added {
            let parts = key.split(separator: "\0", maxSplits: 1, omittingEmptySubsequences: false)
            let host = String(parts[0]), path = parts.count > 1 ? String(parts[1]) : ""
            let presenter = filesystem.standIn(forPresenterOf: host, at: path) { [member] change in
                member.send(Self.change(change), to: host)
            }
            standIns.withLock { $0[key] = presenter }
        }
    }

    static func change(_ change: HostNews.Change) -> HostChange {
        switch change.kind {
        case .change: .changed(change.path)
        case .appear: .appeared(change.path)
        case .delete: .deleted(change.path)
        case .move: .moved(change.path, to: change.destination ?? change.path)
        }
    }

    static func change(_ change: HostChange) -> HostNews.Change {
        switch change {
        case .changed(let path): HostNews.Change(.change, path)
        case .appeared(let path): HostNews.Change(.appear, path)
        case .deleted(let path): HostNews.Change(.delete, path)
        case .moved(let source, let destination): HostNews.Change(.move, source, to: destination)
        }
    }
}

/// The mount's side of the delegations: what `coordinate` asks.
private final class MemberDelegations: HostDelegations {
    let member: ClusterMember

    init(member: ClusterMember) { self.member = member }

    func covers(_ path: String, writing: Bool) -> Bool { member.covers(path, writing ? .write : .read) }

    func acquire(_ path: String, writing: Bool, waits: Bool,
                 completion: @escaping @Sendable (HostDelegationOutcome) -> Void) -> @Sendable () -> Void {
        let task = Task { [member] in
            do throws(Delegations.Failure) {
                if waits {
                    try await member.acquire(path, writing ? .write : .read)
                    completion(.granted)
                } else {
                    completion(try await member.acquireAtOnce(path, writing ? .write : .read) ? .granted : .wouldWait)
                }
            } catch {
                // A wait stopped (cancelled) tells nobody: its request has been answered.
                if !Task.isCancelled { completion(.refused(Self.describe(error))) }
            }
        }
        return { task.cancel() }
    }

    static func describe(_ failure: Delegations.Failure) -> String {
        switch failure {
        case .leaseLost: "this host's cluster lease is lost"
        case .withdrawn: "the delegation was withdrawn while it was waited for"
        case .stopped: "this host has left the cluster"
        case .etcd(let error): "etcd cannot be reached (\(error))"
        }
    }
}

/// What the cluster asks of the mount's coordination.
private struct MountAccesses: LocalAccesses {
    let filesystem: Filesystem

    func holders() -> [(path: String, mode: Delegations.Mode)] {
        filesystem.heldItems().map { ($0.path, $0.writing ? .write : .read) }
    }

    func beginAccess(for host: String, _ path: String, _ mode: Delegations.Mode) -> any LocalAccess {
        filesystem.beginAccess(forHost: host, path, writing: mode == .write)
    }
}

extension HostAccess: LocalAccess {}
