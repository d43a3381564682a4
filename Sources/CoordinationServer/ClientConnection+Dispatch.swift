import LinuxSystem
import Coordination
import CoordinationWire
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Each message to its handler, in the file of its concern; hello, which must come first, and
/// remount, which concerns the mount, are answered here.
extension ClientConnection {
    /// One message from the client. What it throws closes the connection (`run` tells the client why).
    func handle(_ message: ClientMessage) throws(WireError) {
        let greeted = lock.withLock { self.greeted }
        if case .hello(let id, let version) = message {
            guard version == WireProtocol.version else {
                send(
                    .error(
                        id: id, errno: "EPROTONOSUPPORT", message: "this server speaks version \(WireProtocol.version)")
                )
                throw WireError("unsupported version \(version)")
            }
            lock.withLock { self.greeted = true }
            send(
                .ok(
                    id: id,
                    fields: [
                        "version": .int(WireProtocol.version), "server": .string("coordfs"),
                        "root": .string(server.root), "pid": .int(Int(getpid()))
                    ]))
            return
        }
        guard greeted else { throw WireError("the first message must be hello") }
        switch message {
        case .hello: break
        case .watch(let id, let path, let mask): watch(id, path, mask)
        case .unwatch(let id, let wd):
            if removeWatch(wd) {
                send(.ok(id: id, fields: [:]))
            } else {
                send(.error(id: id, errno: "EINVAL", message: "no watch \(wd)"))
            }
        case .answer(let cookie, let code): try takeAnswer(cookie, code)
        case .working(let cookie): try takeWorking(cookie)
        case .hold(let id, let intents, let wait, let timeout, let inherit, let presenter, let coordinator, let holder):
            hold(id, intents, wait, timeout, inherit, presenter, coordinator, holder)
        case .release(let id, let number, let changed): release(id, number, changed)
        case .moved(let id, let number, let from, let to): moved(id, number, from, to)
        case .remount(let id, let options): changeMountOptions(id, options)
        case .cancel(let id, let request): cancelPendingHold(id, request)
        case .status(let id, let page):
            // Whether the client may learn of a path is asked once a directory: a page of one
            // user's thousands of watches names a few directories over and over.
            var learnable: [String: Bool] = [:]
            func mayLearnOnce(_ path: String) -> Bool {
                let directory = (path as NSString).deletingLastPathComponent
                if let known = learnable[directory] { return known }
                let answer = mayLearn(of: path)
                learnable[directory] = answer
                return answer
            }
            // Another page of one list: the other hosts were told on the first.
            let fields = server.status(page: page, othersToo: page.list == nil, mayLearn: mayLearnOnce)
            let line = StatusReply.line(id: id, fields: fields)
            guard outbox.hasRoom(for: line.count) else {
                return send(
                    .error(
                        id: id, errno: "ENOMEM",
                        message:
                            "a status page of \(line.count) bytes would pass your memory here; ask for a smaller one"))
            }
            outbox.send(line)
        case .vend(let id, let name, let path): vend(id, name, path)
        case .withdraw(let id, let number): withdraw(id, number)
        case .services(let id, let path): services(id, path)
        case .connect(let id, let name, let path): connect(id, name, path)
        case .versions(let id, let path): versions(id, path)
        case .version(let id, let path, let number, let action): version(id, path, number, action)
        case .addVersion(let id, let path): addVersion(id, path)
        }
    }

    /// Changes the options of the mount this server serves.
    private func changeMountOptions(_ id: Int, _ options: [String]) {
        guard let remount = server.remount else {
            return send(.error(id: id, errno: "EOPNOTSUPP", message: "this server serves no mount"))
        }
        // The mount's own user (the daemon's) and root: as mount(8) lets them remount.
        guard peer.uid == 0 || peer.uid == geteuid() else {
            return send(
                .error(id: id, errno: "EPERM", message: "only the mount's owner and root may change its options"))
        }
        if let refusal = remount(options) { return send(.error(id: id, errno: "EINVAL", message: refusal)) }
        send(.ok(id: id, fields: [:]))
    }
}
