import LinuxSystem
import Coordination
import CoordinationWire
import CoordinationRuntime
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its tables are behind `lock`; lines go out through the outbox.
/// One client of the control socket: its watches (remote presenters), its holds, and the
/// requests it has yet to answer. When it closes or dies, all of them end at once and nothing
/// waits on it (X4).
final class ClientConnection: @unchecked Sendable {
    let fd: Int32
    let peer: PeerCredentials
    /// Strong: a connection's thread still ends its client's watches and holds through the
    /// server after `stop()`, which may be the server's last reference. (Unowned, that end
    /// would crash a process whose server goes first.) The cycle ends when the connection closes
    /// and the server forgets it.
    private let server: ControlServer
    private let lock = NSLock()
    private let outbox: Outbox
    private var greeted = false
    private var closed = false
    /// The socket's descriptor is closed: its number may name another descriptor of the
    /// process now, which nothing here may touch.
    private var descriptorClosed = false
    private var watches: [Int: RemotePresenter] = [:]
    /// Coordinators the client named in its holds, with how many holds use each.
    private var namedCoordinators: [String: (identity: CoordinatorIdentity, holds: Int)] = [:]
    private var holds: [Int: Held] = [:]
    private var inheritingHolds: Set<Int> = []
    /// The processes this connection has told the domain inherit (`updateInheritance`).
    private var inheritingProcesses: Set<Int32> = []
    private var pendingHolds: [Int: CoordinatedAccess] = [:]
    /// The requests the client has yet to answer, by cookie: where its answer goes, and its word
    /// that it is still working.
    private var answers: [UInt64: (answered: @Sendable (Int32) -> Void, progress: PresenterProgress?)] = [:]
    private var vended: Set<ServiceRegistrationID> = []
    private var lastNumber = 0
    private var lastCookie: UInt64 = 0

    init(fd: Int32, peer: PeerCredentials, server: ControlServer) {
        self.fd = fd
        self.peer = peer
        self.server = server
        self.outbox = Outbox(fd: fd)
    }

    /// The client's process, as owner of its services.
    var identity: CoordinatorIdentity { .process(peer.pid) }

    /// A granted hold: the claim, its place among the accessor holds of the process, and which
    /// of its items existed when it was granted (for what presenters are told at its end).
    struct Held {
        let claim: Claim
        /// The client's name for its coordinator, if it gave one.
        let coordinatorName: String?
        /// The coordinator it holds for.
        var coordinator: CoordinatorIdentity? = nil
        /// Taken inside another hold of the same coordinator that covers its items (an access
        /// of a prepared batch, a nested one): it holds, asks and tells nothing of its own; the
        /// outer hold, whose claim it shares, did and will.
        var nested = false
        /// The process whose accesses through a mount are the hold's: the client, or the
        /// ancestor it named (`holder`).
        var holder: Int32 = 0
        let token: UInt64
        let realPaths: [String]
        let existedBefore: [Bool]
    }

    /// A coordinator of this client (SPEC §1): a hold, or a watch and the holds taken for it.
    private func newCoordinator() -> CoordinatorIdentity { .client(process: peer.pid, number: server.nextCoordinatorNumber()) }

    // MARK: Reading

    /// Reads and handles lines until the client closes, errs or sends something malformed.
    func run() {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let helloDeadline = ContinuousClock.now + server.counts.limits.helloTimeout
        reading: while true {
            // Asleep in poll, for input alone: a read blocked on the socket is woken too each time
            // the client takes in what was sent to it (the kernel wakes the socket's waiters when
            // its send space frees), once for every event a watcher reads: wakings that cost a
            // mount dear under a watcher hearing of every new file.
            var input = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            // Until its hello, a connection may wait only so long: it holds a thread and one of
            // its user's places.
            var timeout: Int32 = -1
            if !lock.withLock({ greeted }) {
                let left = helloDeadline - ContinuousClock.now
                let milliseconds = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000
                guard milliseconds > 0 else {
                    send(.error(id: nil, errno: "EPROTO", message: "no hello within \(server.counts.limits.helloTimeout)"))
                    break reading
                }
                timeout = Int32(min(milliseconds, Int64(Int32.max)))
            }
            let ready = poll(&input, 1, timeout)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            if ready == 0 { continue }
            let count = read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            pending += buffer[0..<count]
            do throws(WireError) {
                try WireLines.take(from: &pending) { line throws(WireError) in
                    let message: ClientMessage
                    do throws(WireError) {
                        message = try WireCodec.decodeClient(line)
                    } catch {
                        // A request it can tell apart, malformed: refused alone, and the client goes on.
                        guard let id = error.refusedRequest, lock.withLock({ greeted }) else { throw error }
                        return send(.error(id: id, errno: "EINVAL", message: error.description))
                    }
                    try handle(message)
                }
            } catch {
                send(.error(id: nil, errno: "EPROTO", message: "\(error)"))
                break reading
            }
            if pending.count > WireProtocol.maximumLineLength {
                send(.error(id: nil, errno: "EPROTO", message: "line longer than \(WireProtocol.maximumLineLength) bytes"))
                break
            }
        }
        close()
    }

    private func handle(_ message: ClientMessage) throws(WireError) {
        let greeted = lock.withLock { self.greeted }
        if case .hello(let id, let version) = message {
            guard version == WireProtocol.version else {
                send(.error(id: id, errno: "EPROTONOSUPPORT", message: "this server speaks version \(WireProtocol.version)"))
                throw WireError("unsupported version \(version)")
            }
            lock.withLock { self.greeted = true }
            send(.ok(id: id, fields: ["version": .int(WireProtocol.version), "server": .string("coordfs"),
                                      "root": .string(server.root), "pid": .int(Int(getpid()))]))
            return
        }
        guard greeted else { throw WireError("the first message must be hello") }
        switch message {
        case .hello: break
        case .watch(let id, let path, let mask): watch(id, path, mask)
        case .unwatch(let id, let wd):
            if removeWatch(wd) { send(.ok(id: id, fields: [:])) }
            else { send(.error(id: id, errno: "EINVAL", message: "no watch \(wd)")) }
        case .answer(let cookie, let code):
            // An answer nobody waits for any more (it came after the presenter timeout, or
            // twice) is dropped: closing the connection for it would take a slow presenter's
            // watches.
            // One to a cookie never sent is a client's mistake, and closes it as any bad line.
            let (answered, issued) = lock.withLock { (answers.removeValue(forKey: cookie)?.answered, lastCookie) }
            guard let answered else {
                if cookie > issued || cookie == 0 { throw WireError("no request with cookie \(cookie) was sent") }
                return
            }
            answered(code)
        case .working(let cookie):
            // As with answers: one for a request no longer waiting is dropped.
            let (waiting, issued) = lock.withLock { (answers[cookie], lastCookie) }
            guard let waiting else {
                if cookie > issued || cookie == 0 { throw WireError("no request with cookie \(cookie) was sent") }
                return
            }
            waiting.progress?.stillWorking()
        case .hold(let id, let intents, let wait, let timeout, let inherit, let presenter, let coordinator, let holder):
            hold(id, intents, wait, timeout, inherit, presenter, coordinator, holder)
        case .release(let id, let number, let changed):
            guard let held = lock.withLock({ () -> Held? in
                inheritingHolds.remove(number)
                return holds.removeValue(forKey: number)
            }) else { return send(.error(id: id, errno: "EINVAL", message: "no hold \(number)")) }
            updateInheritance()
            end(held, changed: changed)
            send(.ok(id: id, fields: [:]))
        case .moved(let id, let number, let from, let to): moved(id, number, from, to)
        case .remount(let id, let options):
            guard let remount = server.remount else {
                return send(.error(id: id, errno: "EOPNOTSUPP", message: "this server serves no mount"))
            }
            // The mount's own user (the daemon's) and root: as mount(8) lets them remount.
            guard peer.uid == 0 || peer.uid == geteuid() else {
                return send(.error(id: id, errno: "EPERM", message: "only the mount's owner and root may change its options"))
            }
            if let refusal = remount(options) { return send(.error(id: id, errno: "EINVAL", message: refusal)) }
            send(.ok(id: id, fields: [:]))
        case .cancel(let id, let request):
            guard let claim = lock.withLock({ pendingHolds[request] }) else {
                return send(.error(id: id, errno: "EINVAL", message: "no pending hold \(request)"))
            }
            claim.cancel()
            send(.ok(id: id, fields: [:]))
        case .status(let id):
            send(.ok(id: id, fields: server.status(mayLearn: mayLearn(of:))))
        case .vend(let id, let name, let path): vend(id, name, path)
        case .withdraw(let id, let number):
            let service = ServiceRegistrationID(rawValue: UInt64(max(0, number)))
            guard lock.withLock({ vended.remove(service) }) != nil else {
                return send(.error(id: id, errno: "EINVAL", message: "no service \(number) of yours"))
            }
            server.domain.engine.withdrawService(service)
            server.setProvider(nil, for: service)
            send(.ok(id: id, fields: [:]))
        case .services(let id, let path): services(id, path)
        case .connect(let id, let name, let path): connect(id, name, path)
        }
    }

    // MARK: Services

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

    private func vend(_ id: Int, _ name: String, _ path: String) {
        let limit = server.counts.limits.servicesPerConnection
        if lock.withLock({ vended.count }) >= limit {
            return send(.error(id: id, errno: "ENOSPC", message: "too many services vended on one connection (at most \(limit))"))
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

    private func services(_ id: Int, _ path: String) {
        guard let target = readable(id, path) else { return }
        let found = server.domain.engine.services(for: target.path, trusted: trusts).sorted { $0.key < $1.key }.map { name, entry -> WireValue in
            var fields: [String: WireValue] = ["name": .string(name), "path": .string(entry.1.path.string)]
            if let pid = entry.1.owner.process { fields["pid"] = .int(Int(pid)) }
            return .object(fields)
        }
        send(.ok(id: id, fields: ["services": .array(found)]))
    }

    private func connect(_ id: Int, _ name: String, _ path: String) {
        guard let target = readable(id, path) else { return }
        guard let (service, registration) = server.domain.engine.services(for: target.path, trusted: trusts)[name],
              let provider = server.provider(of: service) else {
            return send(.error(id: id, errno: "ENOENT", message: "'\(path)' has no service named '\(name)'"))
        }
        var ends: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            return send(.error(id: id, errno: ErrnoNames.name(of: errno), message: "socketpair failed"))
        }
        defer { Glibc.close(ends[0]); Glibc.close(ends[1]) }
        // Who connects, from the socket's credentials: what inetd's and systemd's services
        // learn from their own connections.
        let client = EventOrigin(via: "coordinator", pid: Int(peer.pid), uid: Int(peer.uid), gid: Int(peer.gid),
                                 command: ProcFile.command(of: peer.pid))
        let record = EventRecord(wd: Int(service.rawValue), mask: .serviceConnection, cookie: UInt64(peer.pid),
                                 name: registration.name, path: target.path.string, origin: client)
        guard provider.send(.event(record), descriptor: ends[1]) else {
            return send(.error(id: id, errno: "ECONNREFUSED", message: "the provider of '\(name)' is gone"))
        }
        _ = send(.ok(id: id, fields: ["name": .string(name), "descriptor": .bool(true)]), descriptor: ends[0])
    }

    // MARK: Watches

    private func watch(_ id: Int, _ path: String, _ mask: EventMask) {
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
        let wd = lock.withLock { () -> Int in lastNumber += 1; return lastNumber }
        let owner = newCoordinator()
        let presenter = RemotePresenter(wd: wd, path: resolved.target.path.string, mask: mask, owner: owner, connection: self)
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
        guard let presenter = lock.withLock({ watches.removeValue(forKey: wd) }) else { return false }
        server.counts.returnWatches(1, of: peer.uid)
        server.domain.unregister(key: ObjectIdentifier(presenter))
        return true
    }

    // MARK: Holds

    /// The identity of the coordinator the client named `name`, counting one more hold of it.
    private func namedCoordinator(_ name: String) -> CoordinatorIdentity {
        let (identity, made) = lock.withLock { () -> (CoordinatorIdentity, Bool) in
            if let known = namedCoordinators[name] {
                namedCoordinators[name] = (known.identity, known.holds + 1)
                return (known.identity, false)
            }
            let identity = CoordinatorIdentity.client(process: peer.pid, number: server.nextCoordinatorNumber())
            namedCoordinators[name] = (identity, 1)
            return (identity, true)
        }
        // Its purpose identifier, for the origin presenters are told: the name, or the purpose
        // in the FileCoordinator's own form ("purpose:ID"); a presenter's coordinator has none.
        if made && !name.hasPrefix("object:") {
            server.domain.setPurpose(name.hasPrefix("purpose:") ? String(name.dropFirst(8)) : name, for: identity)
        }
        return identity
    }

    /// One hold of the coordinator named `name` has ended.
    private func dropNamedCoordinator(_ name: String?) {
        guard let name else { return }
        let ended = lock.withLock { () -> CoordinatorIdentity? in
            guard let known = namedCoordinators[name] else { return nil }
            namedCoordinators[name] = known.holds > 1 ? (known.identity, known.holds - 1) : nil
            return known.holds > 1 ? nil : known.identity
        }
        if let ended { server.domain.setPurpose(nil, for: ended) }
    }

    private func hold(_ id: Int, _ wanted: [WireIntent], _ wait: Bool, _ timeout: Double?, _ inherit: Bool, _ presenter: Int?,
                      _ coordinatorName: String?, _ holderID: Int? = nil) {
        let limit = server.counts.limits.holdsPerConnection
        if lock.withLock({ holds.count + pendingHolds.count }) >= limit {
            return send(.error(id: id, errno: "ENOSPC", message: "too many holds on one connection (at most \(limit), granted or waited for)"))
        }
        let holder = holderID.map { Int32($0) } ?? peer.pid
        if holder != peer.pid && !Self.isAncestor(holder, of: peer.pid, sameUserAs: peer.uid) {
            return send(.error(id: id, errno: "EPERM", message: "process \(holder) is not an ancestor of yours of your user"))
        }
        // Taken for a presenter of this client: its own work, which passes while it is asked.
        let coordinator: CoordinatorIdentity
        if holder != peer.pid {
            // The holder's own: its opens through a mount (and, inheriting, its children's) are
            // the same coordinator, and neither waits for the other.
            coordinator = .process(holder)
        } else if let presenter {
            guard let watch = lock.withLock({ watches[presenter] }) else {
                return send(.error(id: id, errno: "EINVAL", message: "no watch \(presenter) of yours"))
            }
            coordinator = watch.owner
        } else if let coordinatorName {
            coordinator = namedCoordinator(coordinatorName)
        } else {
            coordinator = newCoordinator()
        }
        let name = presenter == nil ? coordinatorName : nil
        var intents: [Intent] = []
        for item in wanted {
            let resolved: (target: AccessTarget, realPath: String)
            do { resolved = try server.resolver.resolve(item.path) } catch {
                dropNamedCoordinator(name); return send(.error(id: id, errno: error.errno, message: error.message))
            }
            guard let kind = Self.kind(item) else {
                dropNamedCoordinator(name); return send(.error(id: id, errno: "EINVAL", message: "unknown options \(item.options ?? []) for a \(item.access.rawValue)"))
            }
            guard Permissions.allows(peer, resolved.realPath, item.access == .read ? .read : .write, from: server.resolver.permissionBase) else {
                dropNamedCoordinator(name); return send(.error(id: id, errno: "EACCES", message: "cannot \(item.access.rawValue) '\(item.path)'"))
            }
            intents.append(Intent(kind, resolved.target))
        }
        // Inside another granted hold of the same named coordinator that covers every item.
        if let name, let outer = lock.withLock({ holds.values.first { held in
            held.coordinatorName == name && intents.allSatisfy { intent in
                held.claim.intents.contains { ($0.kind.isWrite || !intent.kind.isWrite) && AccessorHolds.covers($0, intent.target) }
            }
        } }) {
            var inner = Held(claim: outer.claim, coordinatorName: name, token: 0, realPaths: [], existedBefore: [])
            inner.nested = true
            let number = lock.withLock { () -> Int in
                lastNumber += 1
                holds[lastNumber] = inner
                return lastNumber
            }
            return send(.ok(id: id, fields: ["hold": .int(number), "paths": .array(intents.map { .string($0.path.string) })]))
        }
        let duplicate = lock.withLock { pendingHolds[id] != nil }
        if duplicate {
            dropNamedCoordinator(name)
            return send(.error(id: id, errno: "EINVAL", message: "request \(id) is already pending"))
        }
        // The decoder has bounded it (`Seconds`): the conversion cannot trap.
        let claimTimeout: Duration? = timeout.flatMap { try? Seconds.duration($0).get() } ?? server.domain.defaultWaitTimeout
        // The completion holds the connection: a grant that comes after the client has gone
        // must still find it, to give the grant back (`closed` below). Held weakly, a hold
        // granted then stayed for good.
        let waiting = Claim.begin(in: server.domain, identity: coordinator, intents: intents, waits: wait,
                                  timeout: claimTimeout) { [self] result in
            self.lock.withLock { _ = self.pendingHolds.removeValue(forKey: id) }
            switch result {
            case .failure(let error):
                self.dropNamedCoordinator(name)
                self.send(.error(id: id, errno: Self.errnoName(error), message: "\(error)"))
            case .success(let claim):
                // What the process does through a mount on these items is now its accessor's.
                let token = self.server.domain.accessorHolds.add(claim, of: holder)
                // Where the items are as granted: one moved while the hold waited is where it went.
                let granted = claim.intents.map { (try? self.server.resolver.resolve($0.path.string).realPath) ?? "" }
                var held = Held(claim: claim, coordinatorName: name, token: token, realPaths: granted,
                                existedBefore: granted.map(Self.exists))
                held.coordinator = coordinator
                held.holder = holder
                let number = self.lock.withLock { () -> Int? in
                    guard !self.closed else { return nil }
                    self.lastNumber += 1
                    self.holds[self.lastNumber] = held
                    if inherit { self.inheritingHolds.insert(self.lastNumber) }
                    return self.lastNumber
                }
                guard let number else { return self.end(held, changed: false) }
                self.updateInheritance()
                self.send(.ok(id: id, fields: ["hold": .int(number),
                                               "paths": .array(claim.intents.map { .string($0.path.string) })]))
            }
        }
        // A connection closed meanwhile (its writer found the client gone) cancelled only the
        // waits it knew of: this one is cancelled here.
        guard let waiting else { return }    // granted at once
        var closedMeanwhile = false
        _ = waiting.ifUnsettled {
            lock.withLock { if closed { closedMeanwhile = true } else { pendingHolds[id] = waiting } }
        }
        if closedMeanwhile { waiting.cancel() }
    }

    /// A move the holder made inside hold `number`: the destination must be one of its items,
    /// which the client may write; the source is named by where the item was.
    private func moved(_ id: Int, _ number: Int, _ from: String, _ to: String) {
        guard let held = lock.withLock({ holds[number] }) else { return send(.error(id: id, errno: "EINVAL", message: "no hold \(number)")) }
        let source: AccessTarget, destination: (target: AccessTarget, realPath: String)
        do {
            destination = try server.resolver.resolve(to)
            source = try server.resolver.resolve(from).target
        } catch {
            return send(.error(id: id, errno: error.errno, message: error.message))
        }
        guard held.claim.intents.contains(where: { $0.kind.isWrite && ($0.path == source.path || $0.path == destination.target.path) }) else {
            return send(.error(id: id, errno: "EPERM", message: "hold \(number) writes neither '\(from)' nor '\(to)'"))
        }
        var moving = source
        moving.isDirectory = destination.target.isDirectory
        held.claim.reportMove(from: moving, to: destination.target, in: server.domain)
        send(.ok(id: id, fields: [:]))
    }

    /// Tells the client of each of its holds, held for one of `holders`, that holds `path`:
    /// an access went ahead without waiting for it any longer (a BROKEN event; `cookie` is the hold).
    func tellBroken(_ holders: Set<CoordinatorIdentity>, at path: ItemPath) {
        let broken = lock.withLock {
            holds.filter { _, held in
                !held.nested && held.coordinator.map(holders.contains) == true && held.claim.intents.contains { $0.path == path }
            }.keys.sorted()
        }
        for number in broken {
            send(.event(EventRecord(wd: 0, mask: .broken, cookie: UInt64(number), name: "", path: path.string)))
        }
    }

    /// Ends a hold: presenters learn what became of each written item (changed, deleted or
    /// made), and the process's requests through a mount are its own again.
    private func end(_ held: Held, changed: Bool) {
        // The coordinator's name goes after its last hold has told presenters (its purpose is
        // part of the origin they are told).
        defer { dropNamedCoordinator(held.coordinatorName) }
        if held.nested { return }
        server.domain.accessorHolds.remove(held.token, of: held.holder)
        let intents = held.claim.intents
        held.claim.end(outcomes: intents.indices.map { index in
            guard changed, intents[index].kind.isWrite, index < held.realPaths.count else {
                return IntentOutcome(existedBefore: true, existsAfter: true, changed: false)
            }
            return IntentOutcome(existedBefore: held.existedBefore[index], existsAfter: Self.exists(held.realPaths[index]))
        }, in: server.domain)
    }

    private static func exists(_ realPath: String) -> Bool {
        var info = stat()
        return !realPath.isEmpty && FileSystemName.withCString(realPath) { lstat($0, &info) } == 0
    }

    /// The processes whose descendants count as them, from the inheriting holds, told to the
    /// domain as they change (`inheritingProcesses`).
    private func updateInheritance() {
        let (added, removed) = lock.withLock { () -> (Set<Int32>, Set<Int32>) in
            let wanted = closed ? [] : Set(inheritingHolds.compactMap { holds[$0]?.holder })
            defer { inheritingProcesses = wanted }
            return (wanted.subtracting(inheritingProcesses), inheritingProcesses.subtracting(wanted))
        }
        for pid in added { server.domain.setInheriting(pid, true) }
        for pid in removed { server.domain.setInheriting(pid, false) }
    }

    /// Whether `ancestor` is a parent, grandparent, … of `pid`, and runs as `uid`.
    static func isAncestor(_ ancestor: Int32, of pid: Int32, sameUserAs uid: UInt32) -> Bool {
        var current = pid
        for _ in 0..<64 {
            guard let fields = ProcFile.statusFields(["PPid"], of: current),
                  let parent = fields["PPid"].flatMap({ Int32($0) }), parent > 1 else { return false }
            if parent == ancestor {
                // Uid: real, effective, saved, filesystem; the socket's credentials are effective.
                let ids = ProcFile.statusFields(["Uid"], of: parent)?["Uid"]?.split(separator: "\t") ?? []
                return uid == 0 || (ids.count > 1 && UInt32(ids[1]) == uid)
            }
            current = parent
        }
        return false
    }

    static func kind(_ intent: WireIntent) -> AccessKind? {
        let names = intent.options ?? []
        switch intent.access {
        case .read:
            var options = ReadingOptions()
            for name in names {
                // forUploading is the coordinator's own business (a snapshot it takes), not the server's.
                guard let option = ReadingOptions.named.first(where: { $0.1 == name && $0.0 != .forUploading })?.0 else { return nil }
                options.insert(option)
            }
            return .reading(options)
        case .write:
            var options = WritingOptions()
            for name in names {
                guard let option = WritingOptions.named.first(where: { $0.1 == name })?.0 else { return nil }
                options.insert(option)
            }
            return options.isValid ? .writing(options) : nil
        }
    }

    static func errnoName(_ error: Error) -> String {
        ErrnoNames.name(of: FileCoordinationError.errno(for: error, cancellation: ECANCELED))
    }

    /// Whether the client may learn of `path`: it could read the directory that lists it.
    func mayLearn(of path: String) -> Bool {
        if peer.uid == 0 { return true }
        let parent = (path as NSString).deletingLastPathComponent
        guard let resolved = try? server.resolver.resolve(parent.isEmpty ? "/" : parent) else { return false }
        return Permissions.allows(peer, resolved.realPath, .read, from: server.resolver.permissionBase)
    }

    // MARK: Writing

    func nextCookie() -> UInt64 { lock.withLock { lastCookie += 1; return lastCookie } }

    /// Sends a request record; `answered` gets the client's errno, or 0 if the client goes away.
    /// The client's word that it is still working goes to `progress`.
    func request(_ record: EventRecord, progress reports: PresenterProgress? = nil, _ answered: @escaping @Sendable (Int32) -> Void) {
        let accepted = lock.withLock { () -> Bool in
            guard !closed else { return false }
            answers[record.cookie] = (answered, reports)
            return true
        }
        guard accepted else { return answered(0) }
        send(.event(record))
    }

    /// Sends a line now, without blocking: what the socket does not take waits in the outbox.
    func send(_ message: ServerMessage) {
        outbox.send(WireCodec.encode(message))
    }

    /// Sends a line with (a duplicate of) `descriptor` attached; false if the client is gone.
    @discardableResult
    func send(_ message: ServerMessage, descriptor: Int32) -> Bool {
        guard !lock.withLock({ closed }) else { return false }
        return outbox.send(WireCodec.encode(message), descriptor: descriptor)
    }

    // MARK: Ending

    /// Ends everything the client had: watches go, holds end, pending holds are cancelled, and
    /// requests it never answered count as consent.
    /// Shuts the socket down (its reader then ends the connection), unless the connection has
    /// closed it already. (Unguarded, a server stopping would shut down whatever new socket, of
    /// another client or of another part of the process, took the number of a connection that
    /// closed meanwhile.)
    func shutDown() {
        lock.withLock { if !descriptorClosed { _ = shutdown(fd, Int32(SHUT_RDWR)) } }
    }

    /// Once only: the descriptor and the user's connection are given back here.
    func close() {
        let taken = lock.withLock { () -> ([RemotePresenter], [Held], [CoordinatedAccess], [@Sendable (Int32) -> Void], Set<ServiceRegistrationID>)? in
            if closed { return nil }
            closed = true
            defer { watches = [:]; holds = [:]; pendingHolds = [:]; answers = [:]; inheritingHolds = []; vended = [] }
            return (Array(watches.values), Array(holds.values), Array(pendingHolds.values), answers.values.map(\.answered), vended)
        }
        guard let (presenters, claims, pending, unanswered, services) = taken else { return }
        for service in services {
            server.domain.engine.withdrawService(service)
            server.setProvider(nil, for: service)
        }
        updateInheritance()
        for presenter in presenters { server.domain.unregister(key: ObjectIdentifier(presenter)) }
        server.counts.returnWatches(presenters.count, of: peer.uid)
        for claim in pending { claim.cancel() }
        for held in claims { end(held, changed: false) }
        for answered in unanswered { answered(0) }
        outbox.close(grace: .seconds(1))   // a last error line still goes out
        lock.withLock {
            descriptorClosed = true
            shutdown(fd, Int32(SHUT_RDWR))
            Glibc.close(fd)
        }
        server.counts.returnConnection(of: peer.uid)
        server.forget(self)
    }
}
