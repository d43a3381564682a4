import LinuxSystem
import Coordination
import CoordinationWire
import CoordinationRuntime
import FileVersions
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its tables are behind `lock`.
/// The control socket: clients present items (watches) and hold intents over it, in the
/// protocol of docs/protocol.md. A mount serves one; so does `coordfs daemon`.
public final class ControlServer: @unchecked Sendable {
    public let socketPath: String
    public let domain: CoordinationDomain
    let resolver: ItemResolver
    /// What paths this server serves ("/" for the daemon, the mount point for a mount).
    let root: String
    private let mode: mode_t
    private let lock = NSLock()
    private var listener: Int32 = -1
    /// The listening socket was handed over (`SocketActivation`): it is shared with whoever
    /// handed it, so it is never shut down or unlinked here.
    private var inherited = false
    private var connections: [ObjectIdentifier: ClientConnection] = [:]
    /// Which connection provides each vended service.
    private var providers: [ServiceRegistrationID: ClientConnection] = [:]
    private var acceptThread: Thread?
    /// The socket file this server made, removed at the end only while it is still that file.
    private var boundFile: (device: UInt64, inode: UInt64)?
    let logger = Logger(label: "org.coordfs.control")
    /// Each user's connections and watches, against the server's limits.
    let counts: UserCounts
    /// Numbers the coordinators of this server's clients (`CoordinatorIdentity.client`).
    private let coordinatorNumbers = Atomic<UInt64>(0)

    func nextCoordinatorNumber() -> UInt64 { coordinatorNumbers.add(1, ordering: .relaxed).newValue }

    /// Lines read from every client so far: a mount's work includes its socket's (`IdleTrim.whenQuiet`).
    public var linesRead: Int { readLines.load(ordering: .relaxed) }
    let readLines = Atomic<Int>(0)

    /// Changes the options of the mount this server serves (`remount`): nil when it serves none
    /// (the daemon). Returns nil when done, or why not.
    public var remount: (@Sendable ([String]) -> String?)? {
        get { lock.withLock { remountHandler } }
        set { lock.withLock { remountHandler = newValue } }
    }
    private var remountHandler: (@Sendable ([String]) -> String?)?
    private var otherHostsHandler: (@Sendable () -> [(host: String, status: [String: WireValue])])?
    private var thisHostHandler: (@Sendable () -> [String: WireValue])?
    private var gate: (any ClaimGate)?

    /// The versions the mount this server serves keeps of its items (nil: none kept, or the
    /// daemon), keyed by the item's path below `resolver.permissionBase`.
    public var versions: VersionStore? {
        get { lock.withLock { versionStore } }
        set { lock.withLock { versionStore = newValue } }
    }
    private var versionStore: VersionStore?

    /// What holds must pass before they are claimed (a shared store's host's delegations).
    package var claimGate: (any ClaimGate)? {
        get { lock.withLock { gate } }
        set { lock.withLock { gate = newValue } }
    }

    /// How long a hold that names no timeout waits for others before it fails with EBUSY: the
    /// one default (`CoordinationDomain.standardWaitTimeout`), or a mount's `--wait-timeout`, so
    /// that a hold through a mount's socket waits as the mount's own requests do. nil waits
    /// forever.
    public var waitTimeout: Duration? {
        get { lock.withLock { holdWaitTimeout } }
        set { lock.withLock { holdWaitTimeout = newValue } }
    }
    private var holdWaitTimeout: Duration? = CoordinationDomain.standardWaitTimeout

    /// Who watches holds while they wait (a mount's break time for other users' holds); nil:
    /// they wait up to their timeout.
    package var holdWaits: (any HoldWaitWatch)? {
        get { lock.withLock { holdWaitWatch } }
        set { lock.withLock { holdWaitWatch = newValue } }
    }
    private var holdWaitWatch: (any HoldWaitWatch)?

    /// `mode` is the socket file's: 0666 when others may use the mount (`allow_other`), else 0600.
    package init(
        socketPath: String, mode: mode_t, domain: CoordinationDomain, resolver: ItemResolver, root: String,
        limits: ClientLimits = .standard
    ) {
        counts = UserCounts(limits: limits)
        self.socketPath = socketPath
        self.mode = mode
        self.domain = domain
        self.resolver = resolver
        self.root = root
    }

    public func start() throws {
        let fd = try UnixSocket.listen(at: socketPath, mode: mode)
        var info = stat()
        let file = lstat(socketPath, &info) == 0 ? (UInt64(info.st_dev), UInt64(info.st_ino)) : nil
        lock.withLock {
            listener = fd; boundFile = file
        }
        startAccepting(fd)
    }

    /// Starts serving on `fd`, a socket already listening at `socketPath` that someone else
    /// keeps too (systemd's, handed over by socket activation).
    public func start(listeningOn fd: Int32) {
        lock.withLock {
            listener = fd; inherited = true
        }
        startAccepting(fd)
    }

    private func startAccepting(_ fd: Int32) {
        // Holds of this server's clients whose coordination was broken: their clients are told.
        domain.onBrokenHolds { [weak self] grants, paths in
            guard let self else { return }
            for connection in self.lock.withLock({ Array(self.connections.values) }) {
                connection.tellBroken(grants, along: paths)
            }
        }
        lock.withLock { acceptThread = Thread.start(named: "coordfs-control") { [self] in acceptLoop(fd) } }
    }

    /// Accepts until `stop()` shuts the listening socket down, then closes it. Closed by
    /// `stop()` instead, its number could go to a new descriptor (another server's listening
    /// socket, in a process that starts one next) before this thread came back to accept(2), and
    /// it would then take that server's first client and close it.
    /// Serves one client already connected on `fd` (one end of a socket pair, say) on the
    /// calling thread, until it closes: the protocol as a listening server serves it, for a
    /// fuzzer or a client handed over by another process. `fd` is the connection's from now on.
    public func serve(connected fd: Int32) {
        guard let peer = UnixSocket.peerCredentials(fd) else { Glibc.close(fd); return }
        if counts.takeConnection(for: peer.uid) != nil { Glibc.close(fd); return }
        let connection = ClientConnection(fd: fd, peer: peer, server: self)
        lock.withLock { connections[ObjectIdentifier(connection)] = connection }
        connection.run()
    }

    private func acceptLoop(_ listener: Int32) {
        defer { Glibc.close(listener) }
        let shared = lock.withLock { inherited }
        while true {
            // A shared socket is not shut down to stop this loop (its other holder would stop
            // listening too): the loop looks up between waits of at most a quarter second, and
            // takes no client once stopped, leaving them to the socket's next server.
            if shared {
                var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
                let polled = poll(&ready, 1, 250)
                if lock.withLock({ self.listener < 0 }) { return }
                if polled <= 0 { continue }
            }
            let fd: Int32
            do throws(Errno) {
                fd = try check(accept(listener, nil, nil))
            } catch {
                if error == .interrupted || error == .connectionAbort { continue }
                if lock.withLock({ self.listener < 0 }) { return }  // stopped
                if error == .tooManyOpenFiles || error == .tooManyOpenFilesInSystem || error == .noBufferSpace
                    || error == .noMemory
                {
                    // Out of descriptors or memory for now: clients wait in the backlog.
                    logger.warning("control socket: accept: \(error.description); retrying")
                    usleep(100_000)
                    continue
                }
                logger.error("control socket: accept: \(error.description); no more clients are taken")
                return
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            guard let peer = UnixSocket.peerCredentials(fd) else { Glibc.close(fd); continue }
            if let refusal = counts.takeConnection(for: peer.uid) {
                // Said before closing, so that the client learns why (its hello fails with it).
                let line = WireCodec.encode(ServerMessage.error(id: nil, errno: "EMFILE", message: refusal))
                _ = Glibc.send(fd, line, line.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                Glibc.close(fd)
                continue
            }
            let connection = ClientConnection(fd: fd, peer: peer, server: self)
            let accepted = lock.withLock { () -> Bool in
                guard self.listener >= 0 else { return false }
                connections[ObjectIdentifier(connection)] = connection
                return true
            }
            guard accepted else { counts.returnConnection(of: peer.uid); Glibc.close(fd); return }
            Thread.start(named: "coordfs-client \(peer.pid)") { connection.run() }
        }
    }

    func setProvider(_ connection: ClientConnection?, for service: ServiceRegistrationID) {
        lock.withLock { providers[service] = connection }
    }

    func provider(of service: ServiceRegistrationID) -> ClientConnection? { lock.withLock { providers[service] } }

    func forget(_ connection: ClientConnection) {
        let idle = lock.withLock { () -> Bool in
            connections.removeValue(forKey: ObjectIdentifier(connection))
            return connections.isEmpty
        }
        if idle && trimsMemoryWhenIdle { IdleTrim.schedule { [weak self] in self?.clientCount == 0 } }
    }

    /// Stops accepting, ends every connection, and removes the socket file.
    public func stop() {
        let (fd, open, file, shared) = lock.withLock {
            () -> (Int32, [ClientConnection], (device: UInt64, inode: UInt64)?, Bool) in
            defer { listener = -1; boundFile = nil }
            // The accept thread's closure holds the server: kept here, the two would hold each
            // other (and a mount's whole filesystem, through the resolver) for the life of the
            // process.
            acceptThread = nil
            return (listener, Array(connections.values), boundFile, inherited)
        }
        if fd >= 0 && !shared {
            shutdown(fd, Int32(SHUT_RDWR))  // the accept thread wakes, and closes it
            var info = stat()
            if let file, lstat(socketPath, &info) == 0, UInt64(info.st_dev) == file.device,
                UInt64(info.st_ino) == file.inode
            {
                unlink(socketPath)
            }
        }
        for connection in open { connection.shutDown() }
    }

    public var clientCount: Int { lock.withLock { connections.count } }

    /// Whether to give the allocator's free memory back once the last client has gone
    /// (`IdleTrim`): for the daemon, whose clients are all it serves. A mount is not idle when
    /// its socket is, and a trim would lock the arenas its serving threads allocate from: it
    /// trims once its requests and its socket's lines have both stopped (`IdleTrim.whenQuiet`).
    public var trimsMemoryWhenIdle: Bool {
        get { lock.withLock { trims } }
        set { lock.withLock { trims = newValue } }
    }
    private var trims = false

    /// Options as Apple names them, and coordfs's own for the opens of unmodified programs.
    static func names(of options: ReadingOptions) -> String { options.names.joined(separator: ",") }

    static func names(of options: WritingOptions) -> String {
        var names = options.names
        if options.contains(.appendingOnly) { names.append("appending") }
        if options.contains(.sharingWriters) { names.append("inPlace") }
        return names.joined(separator: ",")
    }

    /// The most entries of each list one status reply carries: what a client asks for, at most.
    public static let statusPageLimit = 1000
    /// The most a client may ask for in one page.
    public static let statusPageMaximum = 10_000

    /// The part of the engine a status page describes.
    static func window(_ page: StatusPage) -> SnapshotWindow {
        let lists: Set<SnapshotWindow.List> =
            page.list.map { [SnapshotWindow.List(rawValue: $0.rawValue)!] } ?? Set(SnapshotWindow.List.allCases)
        var after: [SnapshotWindow.List: UInt64] = [:]
        for list in lists { if let cursor = page.after { after[list] = UInt64(cursor) } }
        return SnapshotWindow(
            lists: lists, limit: min(page.limit ?? statusPageLimit, statusPageMaximum), after: after)
    }

    /// The engine's state as a status reply: like lslocks, with each holder's command.
    /// `mayLearn` says whether the asking client may learn of a path (it could read the
    /// directory that lists it); the paths it may not are left out, and their entries say
    /// `"hidden": true`, so that it still sees that somebody holds or waits.
    /// `othersToo`: with the other hosts' of a shared store (`otherHosts`); their answers are
    /// this host's alone.
    ///
    /// A reply describes one page (`page`): at most `statusPageLimit` entries of each list, or
    /// fewer if the client asks, with `totals` counting every entry and `next` the cursor of
    /// each list that goes on. However much a mount holds, a request costs the server its
    /// page, and the engine's lock for a moment.
    public func status(
        page: StatusPage = StatusPage(), othersToo: Bool = true, mayLearn: (String) -> Bool = { _ in true }
    ) -> [String: WireValue] {
        let snapshot = domain.engine.snapshot(Self.window(page))
        let now = ContinuousClock.now
        // One process's watches read its command line once, not once a watch.
        var commands: [Int32: String?] = [:]
        func command(of pid: Int32) -> String? {
            if let known = commands[pid] { return known }
            let read = ProcFile.command(of: pid)
            commands[pid] = read
            return read
        }
        func waited(since: ContinuousClock.Instant) -> WireValue {
            let (seconds, attoseconds) = (now - since).components
            return .int(Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000))
        }
        func who(_ identity: CoordinatorIdentity) -> [String: WireValue] {
            var fields: [String: WireValue] = ["identity": .string(identity.description)]
            if let pid = identity.process {
                fields["pid"] = .int(Int(pid))
                if let command = command(of: pid) { fields["command"] = .string(command) }
            }
            return fields
        }
        func describe(_ intent: Intent) -> WireValue {
            // A mount's marks (`ReadingOptions.throughOpenFile`, `WritingOptions.passesOpenReads`,
            // `passesAppends`) have no names: an open's read shows as a read.
            let mode: String
            switch intent.kind {
            case .reading(let options):
                let names = Self.names(of: options)
                mode = names.isEmpty ? "read" : "read(\(names))"
            case .writing(let options):
                let names = Self.names(of: options)
                mode = names.isEmpty ? "write" : "write(\(names))"
            }
            guard mayLearn(intent.path.string) else { return .object(["hidden": .bool(true), "mode": .string(mode)]) }
            return .object(["path": .string(intent.path.string), "mode": .string(mode)])
        }
        func waitsFor(_ identities: Set<CoordinatorIdentity>) -> WireValue {
            .array(identities.map(\.description).sorted().map { .string($0) })
        }
        // A grant still asking presenters has not begun its access: it waits, for their answers.
        let holders: [WireValue] = snapshot.holders.filter(\.messaging.isEmpty).map { holder in
            var fields = who(holder.identity)
            fields["intents"] = .array(holder.intents.map(describe))
            return .object(fields)
        }
        let asking: [WireValue] = snapshot.holders.filter { !$0.messaging.isEmpty }.map { holder in
            var fields = who(holder.identity)
            fields["intents"] = .array(holder.intents.map(describe))
            fields["waits_for"] = waitsFor(holder.messaging)
            fields["asking_presenters"] = .bool(true)
            if let since = holder.messagingSince { fields["waited_ms"] = waited(since: since) }
            return .object(fields)
        }
        let waiters: [WireValue] =
            asking
            + snapshot.waiters.map { waiter in
                var fields = who(waiter.identity)
                fields["intents"] = .array(waiter.intents.map(describe))
                fields["waits_for"] = waitsFor(waiter.waitsFor)
                fields["waited_ms"] = waited(since: waiter.since)
                return .object(fields)
            }
        let presenters: [WireValue] = snapshot.presenters.map { _, record in
            var fields = who(record.owner)
            let path = record.path?.string ?? ""
            if path.isEmpty || mayLearn(path) { fields["path"] = .string(path) } else { fields["hidden"] = .bool(true) }
            return .object(fields)
        }
        // A service of an item this client may not learn of shows as there, not what or where.
        let services: [WireValue] = snapshot.services.map { _, record in
            var fields = who(record.owner)
            if mayLearn(record.path.string) {
                fields["name"] = .string(record.name)
                fields["path"] = .string(record.path.string)
            } else {
                fields["hidden"] = .bool(true)
            }
            return .object(fields)
        }
        var fields: [String: WireValue] = [
            "root": .string(root), "socket": .string(socketPath), "holders": .array(holders),
            "waiters": .array(waiters), "presenters": .array(presenters), "services": .array(services),
            "totals": .object(
                Dictionary(uniqueKeysWithValues: snapshot.totals.map { ($0.key.rawValue, .int($0.value)) }))
        ]
        if !snapshot.next.isEmpty {
            fields["next"] = .object(
                Dictionary(uniqueKeysWithValues: snapshot.next.map { ($0.key.rawValue, .int(Int($0.value))) }))
        }
        if let thisHost = lock.withLock({ thisHostHandler }) { fields["cluster"] = .object(thisHost()) }
        if othersToo, let otherHosts = lock.withLock({ otherHostsHandler }) {
            fields["hosts"] = .array(
                otherHosts().map { host, status in Self.seenFromHere(host, status, root: root, mayLearn: mayLearn) })
        }
        return fields
    }

    /// The other hosts of a shared store, each with its own `status()` (`coordfs mount
    /// --cluster`): `coordfs status` shows their holders and waiters too.
    public var otherHosts: (@Sendable () -> [(host: String, status: [String: WireValue])])? {
        get { lock.withLock { otherHostsHandler } }
        set { lock.withLock { otherHostsHandler = newValue } }
    }

    /// This host's standing in a shared store's cluster (its lease held, lost, joining again),
    /// shown as `cluster` in every status reply (`coordfs mount --cluster`, `coordfs daemon
    /// --cluster`).
    public var thisHost: (@Sendable () -> [String: WireValue])? {
        get { lock.withLock { thisHostHandler } }
        set { lock.withLock { thisHostHandler = newValue } }
    }

    /// Another host's status as this mount's users see it: its paths spelled under this mount's
    /// root, and hidden where this user could not learn them here.
    static func seenFromHere(
        _ host: String, _ status: [String: WireValue], root: String,
        mayLearn: (String) -> Bool
    ) -> WireValue {
        let theirRoot: String = if case .string(let path)? = status["root"] { path } else { "" }
        func spelled(_ path: String) -> String? {
            guard path == theirRoot || path.hasPrefix(theirRoot == "/" ? "/" : theirRoot + "/") else { return nil }
            let below = path.dropFirst(theirRoot == "/" ? 1 : theirRoot.count)
            return root == "/" ? (below.hasPrefix("/") ? String(below) : "/" + below) : root + below
        }
        func entries(_ value: WireValue?) -> WireValue {
            guard case .array(let entries)? = value else { return .array([]) }
            return .array(
                entries.map { entry in
                    guard case .object(var fields) = entry, case .array(let intents)? = fields["intents"] else {
                        return entry
                    }
                    fields["intents"] = .array(
                        intents.map { intent in
                            guard case .object(var intentFields) = intent,
                                case .string(let path)? = intentFields["path"]
                            else { return intent }
                            if let here = spelled(path), mayLearn(here) {
                                intentFields["path"] = .string(here)
                            } else {
                                intentFields["path"] = nil
                                intentFields["hidden"] = .bool(true)
                            }
                            return .object(intentFields)
                        })
                    return .object(fields)
                })
        }
        return .object([
            "host": .string(host), "holders": entries(status["holders"]), "waiters": entries(status["waiters"])
        ])
    }
}
