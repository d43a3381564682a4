import CoordinationCluster
import CoordFSMount
import Foundation
import Synchronization

/// A mount's membership of a cluster of hosts that share one store (`--cluster`): its etcd
/// lease, its delegations, and its answers to other hosts' recalls, joined before the mount
/// serves and left when it ends.
final class ClusterJoin: Sendable {
    let member: ClusterMember

    private init(member: ClusterMember) { self.member = member }

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
                outcome.withLock { $0 = .success(ClusterJoin(member: member)) }
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
            return join
        case .failure(let error):
            throw CommandFailure("cannot join the cluster at \(endpoints.joined(separator: ",")): \(error)")
        }
    }

    /// Gives back every delegation (the lease is revoked), waiting at most a few seconds.
    func leave() {
        let done = DispatchSemaphore(value: 0)
        Task { [member] in
            await member.leave()
            done.signal()
        }
        _ = done.wait(timeout: .now() + 5)
    }
}

/// The mount's side of the delegations: what `coordinate` asks.
private final class MemberDelegations: HostDelegations {
    let member: ClusterMember

    init(member: ClusterMember) { self.member = member }

    func covers(_ path: String, writing: Bool) -> Bool { member.covers(path, writing ? .write : .read) }

    func acquire(_ path: String, writing: Bool, completion: @escaping @Sendable (HostDelegationFailure?) -> Void) {
        Task { [member] in
            do throws(Delegations.Failure) {
                try await member.acquire(path, writing ? .write : .read)
                completion(nil)
            } catch {
                completion(HostDelegationFailure(Self.describe(error)))
            }
        }
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
