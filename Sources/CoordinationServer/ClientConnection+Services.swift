import LinuxSystem
import Coordination
import CoordinationWire
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Services: what a client vends for an item, the services it may look up, and the connections
/// made to them (a socket pair, one end passed to each side).
extension ClientConnection {
    /// Whether this client trusts the provider of `service`: its own user, root, or the user
    /// the server runs as (the mount's owner). Another user vending the same name nearer the
    /// item must not capture this client's connections.
    private func trusts(_ service: ServiceRegistrationID, _ record: ServiceRecord) -> Bool {
        // No client provides it: the server's own process vended it.
        guard let provider = server.provider(of: service) else { return true }
        let uid = provider.peer.uid
        return uid == peer.uid || uid == 0 || uid == geteuid()
    }

    /// The item at `path`, if this client may read it; else answers the error and returns nil.
    private func readable(_ id: Int, _ path: String) -> AccessTarget? {
        let resolved: (target: AccessTarget, realPath: String)
        do { resolved = try server.resolver.resolve(path) } catch {
            send(.error(id: id, errno: error.errno, message: error.message))
            return nil
        }
        var info = stat()
        guard FileSystemName.withCString(resolved.realPath, { lstat($0, &info) }) == 0 else {
            send(.error(id: id, errno: "ENOENT", message: "no item at '\(path)'"))
            return nil
        }
        guard Permissions.allows(peer, resolved.realPath, .read, from: server.resolver.permissionBase) else {
            send(.error(id: id, errno: "EACCES", message: "cannot read '\(path)'"))
            return nil
        }
        return resolved.target
    }

    func vend(_ id: Int, _ name: String, _ path: String) {
        let limit = server.counts.limits.servicesPerConnection
        if lock.withLock({ vended.count }) >= limit {
            return send(
                .error(
                    id: id, errno: "ENOSPC", message: "too many services vended on one connection (at most \(limit))"))
        }
        guard let target = readable(id, path) else { return }
        // One user vending a name twice for one item would take its own first registration's
        // clients without a word: refused, naming the first.
        let ownUsers = server.domain.engine.services(for: target.path) { [self] service, _ in
            server.provider(of: service)?.peer.uid == peer.uid
        }
        if let (_, existing) = ownUsers[name], existing.path == target.path {
            let by = existing.owner.process.map { " by pid \($0)" } ?? ""
            return send(.error(id: id, errno: "EEXIST", message: "'\(name)' is already vended for \(target.path)\(by)"))
        }
        do {
            let service = try server.domain.engine.vendService(named: name, at: target.path, owner: identity)
            let kept = lock.withLock { () -> Bool in
                guard !closed else { return false }
                vended.insert(service)
                return true
            }
            guard kept else { return server.domain.engine.withdrawService(service) }
            server.setProvider(self, for: service)
            send(.ok(id: id, fields: ["service": .int(Int(service.rawValue)), "path": .string(target.path.string)]))
        } catch {
            send(.error(id: id, errno: "EINVAL", message: "\(error)"))
        }
    }

    /// Withdraws service `number`, which this client vended.
    func withdraw(_ id: Int, _ number: Int) {
        let service = ServiceRegistrationID(rawValue: UInt64(max(0, number)))
        guard lock.withLock({ vended.remove(service) }) != nil else {
            return send(.error(id: id, errno: "EINVAL", message: "no service \(number) of yours"))
        }
        server.domain.engine.withdrawService(service)
        server.setProvider(nil, for: service)
        send(.ok(id: id, fields: [:]))
    }

    func services(_ id: Int, _ path: String) {
        guard let target = readable(id, path) else { return }
        let found = server.domain.engine.services(for: target.path, trusted: trusts).sorted { $0.key < $1.key }.map {
            name, entry -> WireValue in
            var fields: [String: WireValue] = ["name": .string(name), "path": .string(entry.1.path.string)]
            if let pid = entry.1.owner.process { fields["pid"] = .int(Int(pid)) }
            return .object(fields)
        }
        send(.ok(id: id, fields: ["services": .array(found)]))
    }

    func connect(_ id: Int, _ name: String, _ path: String) {
        guard let target = readable(id, path) else { return }
        guard let (service, registration) = server.domain.engine.services(for: target.path, trusted: trusts)[name],
            let provider = server.provider(of: service)
        else {
            return send(.error(id: id, errno: "ENOENT", message: "'\(path)' has no service named '\(name)'"))
        }
        var ends: [Int32] = [0, 0]
        do throws(Errno) {
            _ = try check(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends))
        } catch {
            return send(.error(id: id, errno: ErrnoNames.name(of: error.code), message: "socketpair failed"))
        }
        defer { Glibc.close(ends[0]); Glibc.close(ends[1]) }
        // Who connects, from the socket's credentials: what inetd's and systemd's services
        // learn from their own connections.
        let client = EventOrigin(
            via: "coordinator", pid: Int(peer.pid), uid: Int(peer.uid), gid: Int(peer.gid),
            command: ProcFile.command(of: peer.pid))
        let record = EventRecord(
            wd: Int(service.rawValue), mask: .serviceConnection, cookie: UInt64(peer.pid),
            name: registration.name, path: target.path.string, origin: client)
        guard provider.send(.event(record), descriptor: ends[1]) else {
            return send(.error(id: id, errno: "ECONNREFUSED", message: "the provider of '\(name)' is gone"))
        }
        _ = send(.ok(id: id, fields: ["name": .string(name), "descriptor": .bool(true)]), descriptor: ends[0])
    }
}
