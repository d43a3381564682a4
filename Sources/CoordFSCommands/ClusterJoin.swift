import Coordination
import CoordinationCluster
import CoordFSMount
import CoordinationRuntime
import CoordinationServer
import CoordinationWire
import Foundation
import Synchronization

/// What a host of a shared store is to its membership: its items, whether it sees the other
/// hosts' changes to them itself, and how it comes to grant only what its delegations cover.
/// A mount (its backing directory), or the daemon (a directory its clients use directly).
struct ClusterHost: Sendable {
    let store: SharedStore
    let seesChangesBehind: @Sendable () -> Bool
    let grantsUnder: @Sendable (any HostDelegations) -> Void
    /// Its programs' flock and fcntl locks, where it serves them (a mount; the daemon's clients
    /// lock the store directly, where coordfs sees no lock).
    var locks: Locks? = nil

    /// A host's locks: which files its programs hold locks of, and how it comes to grant them
    /// only under its lock delegations.
    struct Locks: Sendable {
        let holders: @Sendable () -> [(path: String, exclusive: Bool)]
        let servesUnder: @Sendable (any HostLocks) -> Void
    }

    /// A mount's: its requests and the holds through its socket pass the delegations, and its
    /// programs' locks the lock delegations.
    static func mount(_ filesystem: Filesystem) -> ClusterHost {
        ClusterHost(
            store: filesystem.store, seesChangesBehind: { filesystem.seesChangesBehind },
            grantsUnder: { filesystem.delegations = $0 },
            locks: Locks(holders: { filesystem.lockHolders() }, servesUnder: { filesystem.serveLocks(across: $0) }))
    }
}

/// A host's membership of a cluster of hosts that share one store (`--cluster`): its etcd
/// lease, its delegations, and its answers to other hosts' recalls, joined before the mount
/// (or the daemon) serves and left when it ends. A mount is a member twice over: for its
/// programs' accesses, and for their file locks (`locks`: delegations of their own, under a
/// lease of their own, which a lock's holder gives back once its locks are gone).
final class ClusterJoin: Sendable {
    let member: ClusterMember
    let locks: ClusterMember?
    let presenters: HostPresenters
    /// This host's name and its store's, for status.
    let hostName: String
    let storeName: String

    private init(member: ClusterMember, locks: ClusterMember?, host: ClusterHost, hostName: String, storeName: String) {
        self.member = member
        self.locks = locks
        presenters = HostPresenters(member: member, host: host)
        self.hostName = hostName
        self.storeName = storeName
    }

    /// The members' URLs of `etcd://HOST:PORT[,HOST:PORT...]`: https:// where they are `secure`
    /// (the TLS options), else http:// (URLs are taken as they are).
    static func endpoints(_ text: String, secure: Bool = false) throws -> [String] {
        var rest = Substring(text)
        if rest.hasPrefix("etcd://") { rest = rest.dropFirst("etcd://".count) }
        let members = rest.split(separator: ",", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        guard !members.isEmpty, !members.contains(where: \.isEmpty) else {
            throw CommandFailure("--cluster wants etcd://HOST:PORT[,HOST:PORT...], not '\(text)'")
        }
        return try members.map { member in
            if member.hasPrefix("https://") { return member }
            if member.hasPrefix("http://") {
                guard !secure else {
                    throw CommandFailure(
                        "--cluster: '\(member)' is an http:// member, and --etcd-cacert, --etcd-cert and --etcd-key "
                            + "are for https:// members")
                }
                return member
            }
            guard let colon = member.lastIndex(of: ":"), let port = Int(member[member.index(after: colon)...]),
                (1...65535).contains(port),
                colon != member.startIndex
            else {
                throw CommandFailure("--cluster: '\(member)' is not HOST:PORT")
            }
            return (secure ? "https://" : "http://") + member
        }
    }

    /// Joins: a lease, the store's delegations read and followed, recalls answered by
    /// `local`'s coordination. Waits at most `timeout` for etcd. `clusterKey`: the secret the
    /// store's item names are hidden from etcd with (`HiddenNames`; nil: in clear).
    static func join(
        endpoints: [String], credentials: EtcdCredentials = EtcdCredentials(), store: String, host: String, ttl: Int64,
        whenUnreachable: ClusterMember.WhenUnreachable, breakTime: Duration?, clusterKey: [UInt8]? = nil,
        as local: ClusterHost, timeout: Duration = .seconds(15)
    ) throws -> ClusterJoin {
        let outcome = Mutex<Result<ClusterJoin, Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let names = clusterKey.map { HiddenNames(secret: $0, store: store) }
        let task = Task {
            do {
                let client = try EtcdClient(endpoints: endpoints, credentials: credentials)
                let member = ClusterMember(
                    join: ClusterJoin.joining(
                        client, store: store, host: host, ttl: ttl, names: names, space: .delegations),
                    local: StoreAccesses(store: local.store), breakTime: breakTime, whenUnreachable: whenUnreachable)
                try await member.start()
                // Locks are never broken: a recall waits for as long as this host's programs
                // hold what it wants, as a lock on one host is waited for.
                let locks = local.locks.map { side in
                    ClusterMember(
                        join: ClusterJoin.joining(
                            client, store: store, host: host, ttl: ttl, names: names, space: .locks),
                        local: LockHolders(held: side.holders), breakTime: nil, whenUnreachable: whenUnreachable,
                        role: .locks)
                }
                do { try await locks?.start() } catch {
                    await member.leave()
                    throw error
                }
                outcome.withLock {
                    $0 = .success(
                        ClusterJoin(member: member, locks: locks, host: local, hostName: host, storeName: store))
                }
            } catch {
                outcome.withLock { $0 = .failure(error) }
            }
            done.signal()
        }
        // Joining waits out an earlier run of this host name on another machine (HostRecord).
        let (seconds, attoseconds) = max(timeout, .seconds(ttl + 5)).components
        if done.wait(timeout: .now() + Double(seconds) + Double(attoseconds) / 1e18) == .timedOut {
            task.cancel()
            throw CommandFailure(
                "cannot join the cluster at \(endpoints.joined(separator: ",")): no answer within \(seconds) s")
        }
        switch outcome.withLock({ $0 })! {
        case .success(let join):
            local.grantsUnder(MemberDelegations(member: join.member))
            if let locks = join.locks { local.locks?.servesUnder(MemberLocks(member: locks)) }
            join.presenters.start()
            return join
        case .failure(let error):
            throw CommandFailure("cannot join the cluster at \(endpoints.joined(separator: ",")): \(error)")
        }
    }

    /// A member's join: a lease of its own, and this host's delegations of `space` under it,
    /// started. The accesses' run records the host in the store (`HostRecord`); the locks' run
    /// only reads and follows.
    private static func joining(
        _ client: EtcdClient, store: String, host: String, ttl: Int64, names: HiddenNames?,
        space: Delegations.KeySpace
    ) -> @Sendable () async throws -> Delegations {
        return {
            let lease = try await HostLease.grant(on: client, ttl: ttl)
            let delegations = Delegations(
                client: client, store: store, host: host, lease: lease, space: space, names: names)
            do { try await delegations.start(release: CoordFS.release, recording: space == .delegations) } catch {
                _ = try? await lease.revoke()
                throw error
            }
            return delegations
        }
    }

    /// Answers the other hosts' status requests with `server`'s, and shows theirs in it, with
    /// this host's standing (its lease held, lost or joining again) as `cluster`.
    func serveStatus(through server: ControlServer) {
        server.thisHost = { [member, hostName, storeName] in
            ClusterJoin.fields(of: member.standing, host: hostName, store: storeName)
        }
        member.answerStatus { [weak server] in
            guard let server else { return [] }
            return WireCodec.encode(.ok(id: 0, fields: server.status(othersToo: false)))
        }
        server.otherHosts = { [member] in
            // The status request waits for the other hosts' answers: at most half a second.
            let answers = Mutex<[String: [UInt8]]>([:])
            let done = DispatchSemaphore(value: 0)
            Task {
                let received = await member.askStatus()
                answers.withLock { $0 = received }
                done.signal()
            }
            _ = done.wait(timeout: .now() + 2)
            return answers.withLock { $0 }.sorted { $0.key < $1.key }.compactMap { host, bytes in
                guard case .ok(_, let fields)? = try? WireCodec.decodeServer(bytes) else { return nil }
                return (host, fields)
            }
        }
    }

    /// A host's standing as status shows it (docs/json.md, `cluster`).
    static func fields(of standing: ClusterMember.Standing, host: String, store: String) -> [String: WireValue] {
        func milliseconds(_ duration: Duration) -> WireValue {
            let (seconds, attoseconds) = duration.components
            return .int(Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000))
        }
        var fields: [String: WireValue] = [
            "host": .string(host), "store": .string(store), "lease": .string(standing.lease.rawValue),
            "leases_lost": .int(standing.leasesLost), "fenced_opens": .int(standing.fencedOpens)
        ]
        if let validFor = standing.validFor { fields["valid_ms"] = milliseconds(validFor) }
        if let lostFor = standing.lostFor { fields["lost_ms"] = milliseconds(lostFor) }
        return fields
    }

    /// Gives back every delegation (the lease is revoked), waiting at most a few seconds.
    func leave() {
        presenters.stop()
        let done = DispatchSemaphore(value: 0)
        Task { [member, locks] in
            await member.leave()
            await locks?.leave()
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
    private let host: ClusterHost
    private var store: SharedStore { host.store }
    private let state = Mutex(State())

    private struct State {
        var stopped = false
        var scheduled = false
        var tasks: [Task<Void, Never>] = []
        /// The other hosts' presenters stood in here, by host and path.
        var standIns: [String: HostPresenter] = [:]
        /// Presented items whose presence is held or asked for.
        var presences: Set<String> = []
        var asking: Set<String> = []
    }

    init(member: ClusterMember, host: ClusterHost) {
        self.member = member
        self.host = host
    }

    func start() {
        store.domain.onPresentersChanged { [weak self] in self?.schedulePublishing() }
        let tasks = [
            Task { [self] in
                for await byHost in member.presences { standIn(for: byHost) }
            },
            Task { [self] in
                for await batch in member.changesElsewhere where !host.seesChangesBehind() {
                    store.tell(batch.changes.map(Self.change), madeBy: batch.host)
                }
            },
            // A presence given back to another host's access is asked for again; a mount's
            // watch of its backing directory may also have begun or ended.
            Task { [self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(250))
                    if Task.isCancelled { return }
                    await publish()
                }
            }
        ]
        let stopped = state.withLock { state -> Bool in
            state.tasks = tasks
            return state.stopped
        }
        if stopped { for task in tasks { task.cancel() } }
        schedulePublishing()
    }

    func stop() {
        let (tasks, standIns) = state.withLock { state in
            state.stopped = true
            defer { state.standIns = [:] }
            return (state.tasks, Array(state.standIns.values))
        }
        for task in tasks { task.cancel() }
        for presenter in standIns { store.withdraw(presenter) }
    }

    private func schedulePublishing() {
        let first = state.withLock { state -> Bool in
            defer { state.scheduled = true }
            return !state.scheduled && !state.stopped
        }
        guard first else { return }
        Task { [self] in
            state.withLock { $0.scheduled = false }
            await publish()
        }
    }

    /// Publishes what this host's presenters present (for the other hosts to send it their
    /// changes, unless it sees them itself), holds a presence of each, and gives back the
    /// presences of items no longer presented.
    private func publish() async {
        if state.withLock({ $0.stopped }) { return }
        let presented = store.presentedStorePaths()
        await member.present(host.seesChangesBehind() ? [] : presented)
        let gone = state.withLock { state -> Set<String> in
            defer { state.presences = presented }
            return state.presences.subtracting(presented)
        }
        for path in gone { await member.releasePresence(path) }
        // A presence of each presented item itself, whatever else covers it: another host's
        // read of it asks it (`ClusterMember.askPresenters`).
        for path in presented where !member.holdsPresence(path) {
            // One request per item at a time: another host may hold it for long (a log).
            guard state.withLock({ !$0.stopped && $0.asking.insert(path).inserted }) else { continue }
            Task { [self] in
                try? await member.acquirePresence(path)
                state.withLock { _ = $0.asking.remove(path) }
            }
        }
    }

    /// Stands in each other host's presenters, and withdraws those gone.
    private func standIn(for byHost: [String: Set<String>]) {
        let wanted = Set(byHost.flatMap { host, paths in paths.map { host + "\0" + $0 } })
        let (added, removed) = state.withLock { state -> ([String], [HostPresenter]) in
            if state.stopped { return ([], []) }
            let removed = state.standIns.filter { !wanted.contains($0.key) }
            for key in removed.keys { state.standIns[key] = nil }
            return (wanted.filter { state.standIns[$0] == nil }.sorted(), Array(removed.values))
        }
        for presenter in removed { store.withdraw(presenter) }
        for key in added {
            let parts = key.split(separator: "\0", maxSplits: 1, omittingEmptySubsequences: false)
            let host = String(parts[0]), path = parts.count > 1 ? String(parts[1]) : ""
            let presenter = store.standIn(forPresenterOf: host, at: path) { [member] change in
                member.send(Self.change(change), to: host)
            }
            let kept = state.withLock { state -> Bool in
                if state.stopped { return false }
                state.standIns[key] = presenter
                return true
            }
            if !kept { store.withdraw(presenter) }
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

/// The host's side of the delegations: what a mount's requests and a socket's holds ask.
private final class MemberDelegations: HostDelegations {
    let member: ClusterMember
    private let granted = Atomic<UInt64>(0)

    /// The grants, and the losses of cover: after a lost lease the rejoin asks again for what
    /// this host's programs hold without a grant here, and another host may have replaced those
    /// items meanwhile.
    var acquisitions: UInt64 { granted.load(ordering: .acquiring) &+ member.lastCoverLoss }

    init(member: ClusterMember) { self.member = member }

    func covers(_ path: String, _ access: DelegatedAccess) -> Bool { member.covers(path, Delegations.Mode(access)) }

    func coversAccessor(_ path: String, _ access: DelegatedAccess) -> Bool {
        member.coversAccessor(path, Delegations.Mode(access))
    }

    var othersPresentAnything: Bool { member.othersPresentAnything }

    func othersPresent(at path: String) -> Bool { member.othersPresent(at: path) }

    func stampWrites(_ path: String) -> UInt64? { member.stampWrites(path) }

    func stampReads(_ path: String) -> UInt64? { member.stampReads(path) }

    var mayAdmitWrites: Bool { member.mayAdmitWrites }

    var lastCoverLoss: UInt64 { member.lastCoverLoss }

    func admitsWrites(_ path: String, since stamp: UInt64, ofAnOpenFile: Bool) -> WriteAdmission {
        switch member.admitsWrites(path, since: stamp, ofAnOpenFile: ofAnOpenFile) {
        case .admitted(let through): .admitted(through: through)
        case .suspended: .suspended
        case .fenced: .fenced
        }
    }

    func othersInterested(in path: String) -> Bool { member.othersInterested(in: path) }

    func acquire(
        _ need: DelegationNeed, waits: Bool, completion: @escaping @Sendable (HostDelegationOutcome) -> Void
    ) -> @Sendable () -> Void {
        member.ask(need.path, Delegations.Mode(need.access), request: need.request.text, waits: waits) {
            [self] outcome in
            if outcome == .granted() || outcome == .passed { granted.add(1, ordering: .releasing) }
            completion(outcome)
        }
    }

    func askPresenters(
        _ need: DelegationNeed, completion: @escaping @Sendable (HostDelegationOutcome) -> Void
    ) -> @Sendable () -> Void {
        let task = Task { [member] in
            do throws(Delegations.Failure) {
                try await member.askPresenters(of: need.path, request: need.request.text)
                if !Task.isCancelled { completion(.granted()) }
            } catch {
                if !Task.isCancelled { completion(HostDelegationOutcome(error)) }
            }
        }
        return { task.cancel() }
    }
}

/// The host's side of the lock delegations: what its mount's lock requests ask.
private final class MemberLocks: HostLocks {
    let member: ClusterMember

    init(member: ClusterMember) { self.member = member }

    func covers(_ path: String, exclusive: Bool) -> Bool { member.covers(path, exclusive ? .write : .read) }

    func coversHolder(_ path: String, exclusive: Bool) -> Bool {
        member.coversAccessor(path, exclusive ? .write : .read)
    }

    func recallWaits(for path: String, holding exclusive: Bool) -> Bool {
        member.recallWaits(for: path, exclusive ? .write : .read)
    }

    func acquire(
        _ path: String, exclusive: Bool, waits: Bool,
        completion: @escaping @Sendable (HostDelegationOutcome) -> Void
    ) -> @Sendable () -> Void {
        member.ask(path, exclusive ? .write : .read, waits: waits, completion: completion)
    }

    func otherHostHolds(_ path: String, exclusive: Bool) -> Bool? {
        let others = member.othersInTheWay(of: path, exclusive ? .write : .read)
        return others.isEmpty ? nil : others.contains { $0.mode.writes }
    }
}

/// What the lock delegations ask of the host: the files its programs hold locks of. Another
/// host's recall of a lock delegation asks nobody here (locks have no presenters).
private struct LockHolders: LocalAccesses {
    let held: @Sendable () -> [(path: String, exclusive: Bool)]

    func holders() -> [(path: String, mode: Delegations.Mode)] {
        held().map { ($0.path, $0.exclusive ? .write : .read) }
    }

    func beginAccess(for wanted: Delegations.Entry) -> any LocalAccess { NoAccess() }

    private struct NoAccess: LocalAccess {
        func end() {}
    }
}

/// What the cluster asks of the host's own coordination.
private final class StoreAccesses: LocalAccesses {
    let store: SharedStore
    /// Told when an access begun here is answered (`observeChanges`).
    private let answerChanged = Mutex<(@Sendable () -> Void)?>(nil)

    init(store: SharedStore) { self.store = store }

    func holders() -> [(path: String, mode: Delegations.Mode)] {
        store.heldItems().map { ($0.path, Delegations.Mode($0.access)) }
    }

    /// Another host's request, as its program asked it (its kind and options), met here as a
    /// program's here would be; a read has asked the presenters here already (its question),
    /// and a presence is no access: nobody here is asked for it.
    func beginAccess(for wanted: Delegations.Entry) -> any LocalAccess {
        let request =
            HostRequest(text: wanted.request) ?? HostRequest(kind: DelegatedAccess(wanted.mode).kind, byProgram: false)
        let (host, path, kind) = (wanted.host, wanted.path, request.kind)
        let access: HostAccess
        switch wanted.mode {
        case .presence: return NoAccess()
        case .asking: access = store.askPresenters(forHost: host, path, kind)
        case .read:
            access = store.beginAccess(forHost: host, path, kind, byProgram: request.byProgram, asksPresenters: false)
        case .write, .appending, .inPlace, .deleting, .moving, .replacing:
            access = store.beginAccess(forHost: host, path, kind, byProgram: request.byProgram)
        }
        if let changed = answerChanged.withLock({ $0 }) { access.observeAnswer(changed) }
        return StoreAccess(access)
    }

    /// The answers of the accesses begun here, which wait in this host's engine for the holders
    /// in their way: a recall goes on as soon as one is granted. Holders are not told of (the
    /// engine's releases, the mount's commonest path, tell nobody): a recall that waits for a
    /// holder without an access of its own waiting here looks again every few milliseconds.
    func observeChanges(_ changed: @escaping @Sendable () -> Void) -> LocalChanges {
        answerChanged.withLock { $0 = changed }
        return .answers
    }

    private struct NoAccess: LocalAccess {
        func end() {}
    }

    /// The access begun, and its answer in the cluster's words.
    private struct StoreAccess: LocalAccess {
        let access: HostAccess

        init(_ access: HostAccess) { self.access = access }

        var answer: LocalAnswer {
            switch access.answer {
            case .waiting: .waiting
            case .granted: .granted
            case .passed: .passed
            case .refused(let errno): .refused(ErrnoNames.name(of: errno))
            }
        }

        func end() { access.end() }
    }
}

extension Delegations.Mode {
    /// The key a request's access of an item needs.
    init(_ access: DelegatedAccess) {
        switch access {
        case .reading: self = .read
        case .writing: self = .write
        case .appending: self = .appending
        case .writingInPlace: self = .inPlace
        case .deleting: self = .deleting
        case .moving: self = .moving
        case .replacing: self = .replacing
        }
    }
}

extension DelegatedAccess {
    /// The access another host's key (not a presence) stands for.
    init(_ mode: Delegations.Mode) {
        switch mode {
        case .read, .presence, .asking: self = .reading
        case .write: self = .writing
        case .appending: self = .appending
        case .inPlace: self = .writingInPlace
        case .deleting: self = .deleting
        case .moving: self = .moving
        case .replacing: self = .replacing
        }
    }
}

extension GrantPromise: DelegationPromise {}

extension HostDelegationOutcome {
    /// How a request for a delegation (or a question) that failed ends: refused by the host in
    /// the way (its errno, by name across hosts), let past its programs, or refused here
    /// (ENOLCK: the lease is lost, the cluster cannot be reached).
    init(_ failure: Delegations.Failure) {
        switch failure {
        case .answered(.passed): self = .passed
        case .answered(.refused(let name)): self = .refusedThere(errno: ErrnoNames.code(of: name) ?? EACCES)
        case .answered(.granted): self = .granted()
        default: self = .refused(failure.description)
        }
    }
}

extension ClusterMember {
    /// Asks for a delegation (of accesses or of locks, as this member stands for) of `path` for
    /// a mount; `completion` runs once, unless the closure returned stops asking first: a wait
    /// stopped (cancelled) tells nobody, its request has been answered.
    fileprivate func ask(
        _ path: String, _ mode: Delegations.Mode, request: String = "", waits: Bool,
        completion: @escaping @Sendable (HostDelegationOutcome) -> Void
    ) -> @Sendable () -> Void {
        let task = Task { [self] in
            do throws(Delegations.Failure) {
                if waits {
                    completion(.granted(try await acquire(path, mode, request: request)))
                } else {
                    completion(try await acquireAtOnce(path, mode, request: request) ? .granted() : .wouldWait)
                }
            } catch {
                if !Task.isCancelled { completion(HostDelegationOutcome(error)) }
            }
        }
        return { task.cancel() }
    }
}
