import LinuxSystem
import Coordination
import CoordinationWire
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Watches: the client's presenters (`RemotePresenter`), the requests they are sent, and the
/// client's answers to them.
extension ClientConnection {
    func watch(_ id: Int, _ path: String, _ mask: EventMask) {
        let resolved: (target: AccessTarget, realPath: String)
        do { resolved = try server.resolver.resolve(path) } catch {
            return send(.error(id: id, errno: error.errno, message: error.message))
        }
        guard Permissions.allows(peer, resolved.realPath, .read, from: server.resolver.permissionBase) else {
            return send(.error(id: id, errno: "EACCES", message: "cannot read '\(path)'"))
        }
        if let refusal = server.counts.takeWatch(for: peer.uid) {
            return send(.error(id: id, errno: "ENOSPC", message: refusal))
        }
        let wd = lock.withLock { () -> Int in
            lastNumber += 1; return lastNumber
        }
        let owner = newCoordinator()
        let presenter = RemotePresenter(
            wd: wd, path: resolved.target.path.string, mask: mask, owner: owner, connection: self)
        let accepted = lock.withLock { () -> Bool in
            guard !closed else { return false }
            watches[wd] = presenter
            return true
        }
        guard accepted else { return server.counts.returnWatches(1, of: peer.uid) }
        server.domain.register(presenter, key: ObjectIdentifier(presenter), linked: false)
        send(.ok(id: id, fields: ["wd": .int(wd), "path": .string(resolved.target.path.string)]))
    }

    @discardableResult
    func removeWatch(_ wd: Int) -> Bool {
        let removed = lock.withLock { () -> RemotePresenter? in
            defer { watches.releaseSpareCapacity() }
            return watches.removeValue(forKey: wd)
        }
        guard let presenter = removed else { return false }
        server.counts.returnWatches(1, of: peer.uid)
        server.domain.unregister(key: ObjectIdentifier(presenter))
        return true
    }

    func nextCookie() -> UInt64 {
        lock.withLock {
            lastCookie += 1; return lastCookie
        }
    }

    /// Sends a request record; `answered` gets the client's errno, or 0 if the client goes away.
    /// The client's word that it is still working goes to `progress`.
    func request(
        _ record: EventRecord, progress reports: PresenterProgress? = nil,
        _ answered: @escaping @Sendable (Int32) -> Void
    ) {
        let accepted = lock.withLock { () -> Bool in
            guard !closed else { return false }
            answers[record.cookie] = (answered, reports)
            return true
        }
        guard accepted else { return answered(0) }
        send(.event(record))
    }

    /// The client's answer to request `cookie`. An answer nobody waits for any more (it came
    /// after the presenter timeout, or twice) is dropped: closing the connection for it would
    /// take a slow presenter's watches. One to a cookie never sent is a client's mistake, and
    /// closes it as any bad line.
    func takeAnswer(_ cookie: UInt64, _ code: Int32) throws(WireError) {
        let (answered, issued) = lock.withLock { (answers.removeValue(forKey: cookie)?.answered, lastCookie) }
        guard let answered else {
            if cookie > issued || cookie == 0 { throw WireError("no request with cookie \(cookie) was sent") }
            return
        }
        answered(code)
    }

    /// The client's word that it is still working on request `cookie`. As with answers: one for
    /// a request no longer waiting is dropped.
    func takeWorking(_ cookie: UInt64) throws(WireError) {
        let (waiting, issued) = lock.withLock { (answers[cookie], lastCookie) }
        guard let waiting else {
            if cookie > issued || cookie == 0 { throw WireError("no request with cookie \(cookie) was sent") }
            return
        }
        waiting.progress?.stillWorking()
    }
}
