import Synchronization

/// Grants that hosts sharing a store hold of its items, through etcd: a host holds a
/// delegation of an item (read or write) while no other host holds a conflicting one, and
/// grants its own programs' accesses inside it in memory. Another host that wants a
/// conflicting delegation makes a key of its own and waits; the holder hears a recall, ends
/// its local accesses (its presenters relinquish as for a local writer), and gives the
/// delegation back.
///
/// Each delegation, wanted or held, is one key `<prefix><path>\0<host>\0<lease>\0<mode>` whose
/// value is its mode, attached to the host's lease: a host that dies or is cut off loses them all with its
/// lease. Hosts are served first come, first served by the keys' create revisions (the
/// etcd lock recipe, over read and write modes): a key is held once every conflicting key made
/// before it is gone, and its create revision is the grant's fencing token. Each host keeps a
/// replica of all keys, read once and then followed by one watch, so waiting and recalls cost
/// no request of their own; the replica is indexed by path (`DelegationIndex`), and a change
/// looks again only at the keys around it, so neither costs more as the store's keys grow.
public final class Delegations: Sendable {
    public enum Mode: String, Sendable, CaseIterable {
        case read = "r", write = "w"
        /// A read interest of a host's presenters (`ClusterMember.acquirePresence`): it conflicts
        /// as a read does, and its recall breaks nobody.
        case presence = "p"
        /// Writes that delete, move or replace the item: they conflict as writes do, and the
        /// hosts they recall ask their presenters of the item and of everything inside it as
        /// for such a write of their own (to accommodate a deletion, to relinquish).
        case deleting = "d", moving = "m", replacing = "x"

        public var writes: Bool { self != .read && self != .presence }
        /// Asked for of the item itself, never of a directory above it: the host it recalls
        /// asks its presenters about this item.
        public var isDestructive: Bool { writes && self != .write }
    }

    /// A delegation as the replica has it.
    public struct Entry: Sendable, Equatable {
        public var path: String
        public var host: String
        public var mode: Mode
        /// The key's create revision: its place in line, and the fencing token once held.
        public var revision: Int64
        /// The lease it lives by: a host's run. A key a host left in an earlier run (it died and
        /// came back within the TTL) is another holder's, not its own.
        public var lease: Int64
        /// Asked for unless another key is in its way, recalling nobody (`acquireUnlessBlocked`
        /// with `recalling` false): its host takes it back rather than wait. (A host asking
        /// for a whole directory on a replica that had not seen another host's key in it would
        /// otherwise have that host's presenters asked about a write of the directory that
        /// never comes.)
        public var isTentative = false
        /// Asked for by a request that does not wait for another host's programs (an
        /// `O_NONBLOCK` open, `acquireIfIdle`): a holder with none in its way gives its
        /// delegation back as for any recall, one whose programs hold what it wants refuses it
        /// (`refuse`): the request fails at once, as on one host.
        public var asksIdle = false

        func isSameHolder(as other: Entry) -> Bool { host == other.host && lease == other.lease }
    }

    /// Another host wants what this host holds.
    public struct Recall: Sendable, Equatable {
        /// This host's delegation that is in the way.
        public var held: Entry
        /// The other host's.
        public var wanted: Entry
    }

    public enum Failure: Error, Equatable, CustomStringConvertible {
        /// The host's lease is gone: it holds nothing any more.
        case leaseLost
        /// The key was deleted while it waited (given back, or its lease ended).
        case withdrawn
        /// This host stopped following the store.
        case stopped
        /// The store's other hosts cannot coordinate with this one (`HostRecord`): why.
        case cannotJoin(String)
        case etcd(EtcdError)

        public var description: String {
            switch self {
            case .leaseLost: "this host's cluster lease is lost"
            case .withdrawn: "the delegation was withdrawn while it was waited for"
            case .stopped: "this host has left the cluster"
            case .cannotJoin(let why): why
            case .etcd(let error): "etcd cannot be reached (\(error))"
            }
        }
    }

    /// Which of a store's kinds of keys a `Delegations` follows: the delegations of its items'
    /// accesses, or those of its files' locks (flock's and fcntl's, `ClusterMember` over them
    /// with the mount's lock table for holders). The two never meet: a lock of a file and an
    /// access of it do not conflict.
    public enum KeySpace: String, Sendable {
        case delegations
        case locks
    }

    public let host: String
    let client: EtcdClient
    /// The store's name in the cluster.
    let store: String
    let lease: HostLease
    public let space: KeySpace
    private let prefix: [UInt8]
    private let state: Mutex<State>
    public let recalls: AsyncStream<Recall>
    private let recallSink: AsyncStream<Recall>.Continuation
    private let follower = Mutex<Task<Void, Never>?>(nil)

    private struct State {
        /// Every delegation key under the prefix, by key and by path.
        var index: DelegationIndex
        var revision: Int64 = 0
        /// This host's keys still waiting, and who waits for each.
        var waiters: [[UInt8]: [CheckedContinuation<Int64, Error>]] = [:]
        /// Recalls told already: once per pair of keys, each as made at its revision.
        var told: Set<Told> = []
        var lost = false
        var started = false
        var stopped = false

        init(index: DelegationIndex) { self.index = index }
    }

    private struct Told: Hashable {
        let held: [UInt8], heldRevision: Int64, wanted: [UInt8], wantedRevision: Int64
    }

    /// `store`: the name hosts that share one store give it (their mounts of it coordinate).
    /// `space`: which of its keys (`/coordfs/<store>/<space>/`).
    public init(client: EtcdClient, store: String, host: String, lease: HostLease, space: KeySpace = .delegations) {
        precondition(!host.contains("\0") && !host.isEmpty)
        self.client = client
        self.host = host
        self.lease = lease
        self.store = store
        self.space = space
        prefix = Array("/coordfs/\(store)/\(space.rawValue)/".utf8)
        state = Mutex(State(index: DelegationIndex(host: host, lease: lease.id)))
        (recalls, recallSink) = AsyncStream.makeStream()
    }

    deinit {
        follower.withLock { $0?.cancel() }
        recallSink.finish()
    }

    /// Records this run of the host (`HostRecord`, `release` the coordfs version it names),
    /// reads every delegation and starts following changes. Without `recording`, it only reads
    /// and follows: the run of a host's locks, whose delegations' run records the host.
    public func start(release: String = "", recording: Bool = true) async throws(Failure) {
        precondition(!state.withLock { $0.started }, "started twice")
        state.withLock { $0.started = true }
        if recording { try await record(release: release) }
        let revision = try await reload()
        let task = Task { [self] in await follow(from: revision + 1) }
        follower.withLock { $0 = task }
        Task { [self, lease] in
            await lease.waitUntilLost()
            leaseLost()
        }
    }

    /// Stops following the store; waits under way end with `.stopped`. What this host holds
    /// stays held until its lease ends (`leave` gives it back).
    public func stop() {
        follower.withLock { $0?.cancel() }
        recallSink.finish()
        let waiters = state.withLock { state in
            state.stopped = true
            defer { state.waiters = [:] }
            return state.waiters.values.flatMap { $0 }
        }
        for waiter in waiters { waiter.resume(throwing: Failure.stopped) }
    }

    /// Leaves the store cleanly: stops following, and revokes the lease, so that what this
    /// host held is given back now, not after its TTL.
    public func leave() async {
        stop()
        _ = try? await lease.revoke()
    }

    // MARK: Taking and giving back

    /// Waits until this host holds `mode` on `path` ("" is the store's root, "a/b" an item
    /// below it), and returns the grant's fencing token. A read and a write of one path are two
    /// delegations (a host that reads an item and comes to write it keeps the read meanwhile).
    public func acquire(_ path: String, _ mode: Mode) async throws(Failure) -> Int64 {
        try await acquire(path, mode, asking: .waiting)!
    }

    /// `acquire`, telling `placed` as soon as the key is in line which other holders' keys
    /// were then in its way (none: it is granted at once). A host joining again after a lost
    /// lease learns so whether another host came before it (`ClusterMember.redelegate`).
    func acquire(
        _ path: String, _ mode: Mode, placed: @escaping @Sendable ([Entry]) -> Void
    ) async throws(Failure) -> Int64 {
        try await acquire(path, mode, asking: .waiting, placed: placed)!
    }

    /// `acquire`, unless another host's key is in the way: then the key made is withdrawn and
    /// nil returned. (A host asking for a whole directory on what its replica knew takes back a
    /// request that would wait for holders of items it does not need.) The key is tentative:
    /// it recalls nobody.
    public func acquireUnlessBlocked(_ path: String, _ mode: Mode) async throws(Failure) -> Int64? {
        try await acquire(path, mode, asking: .tentatively)
    }

    /// `acquire` for a request that does not wait for another host's programs (`O_NONBLOCK`):
    /// the hosts in the way are recalled, and one that holds the item idle gives it back, which
    /// this waits for. Nil, the key taken away, when a host whose programs hold it refuses it
    /// (`refuse`), when a key in the way is itself still waiting (another host's program wants
    /// the item first), or when no answer came within `patience` (a host cut off, or gone).
    public func acquireIfIdle(_ path: String, _ mode: Mode, patience: Duration) async throws(Failure) -> Int64? {
        try await acquire(path, mode, asking: .ifIdle(patience))
    }

    /// Refuses another host's request that does not wait (`Entry.asksIdle`), for this host's
    /// programs hold what it wants: its key is taken away as made, and its request fails.
    public func refuse(_ entry: Entry) async throws(Failure) {
        guard entry.asksIdle else { return }
        let key = self.key(of: entry)
        do { _ = try await client.transaction([.created(key, at: entry.revision)], success: [.delete(key: key)]) } catch
        {
            throw .etcd(error)
        }
    }

    /// How a request waits for the keys in its way.
    private enum Asking {
        /// Until they are gone.
        case waiting
        /// Not at all, and recalling nobody (`acquireUnlessBlocked`).
        case tentatively
        /// Until their hosts give them back or refuse it, at most the patience (`acquireIfIdle`).
        case ifIdle(Duration)
    }

    private func acquire(
        _ path: String, _ mode: Mode, asking: Asking,
        placed: (@Sendable ([Entry]) -> Void)? = nil
    ) async throws(Failure) -> Int64? {
        let key = self.key(path, mode)
        let marker =
            switch asking {
            case .waiting: ""
            case .tentatively: "?"
            case .ifIdle: "!"
            }
        // With the key, the keys that could be in its way, read at its revision: the replica
        // may not have followed that far yet, and must not grant on what it has not seen.
        let around = neighbourhood(of: path)
        var made: (revision: Int64, snapshot: [EtcdKeyValue], at: Int64)?
        do throws(EtcdError) {
            // A key of this run already there (acquired before) keeps its place in line.
            while made == nil {
                let answer = try await client.transaction(
                    [.absent(key)],
                    success: [.put(key: key, value: Array((mode.rawValue + marker).utf8), lease: lease.id)] + around,
                    failure: [.range(key: key, prefix: false)] + around)
                if answer.succeeded {
                    made = (answer.revision, answer.ranges.flatMap { $0 }, answer.revision)
                } else if let existing = answer.ranges.first?.first {
                    made = (existing.createRevision, answer.ranges.dropFirst().flatMap { $0 }, answer.revision)
                }
                // (Else it was deleted between the two: made again.)
            }
        } catch {
            throw .etcd(error)
        }
        let (revision, snapshot, readAt) = made!
        let mine = Entry(
            path: path, host: host, mode: mode, revision: revision, lease: lease.id,
            isTentative: marker == "?", asksIdle: marker == "!")
        // A request that does not wait takes its key back once its patience has run out; a
        // grant that comes after that is not held (the key is going).
        var patience: (timer: Task<Void, Never>, first: FirstOfTwo)?
        if case .ifIdle(let duration) = asking {
            let first = FirstOfTwo()
            patience = (
                Task { [self] in
                    try? await Task.sleep(for: duration)
                    guard !Task.isCancelled, first.take() else { return }
                    _ = try? await client.transaction([.created(key, at: revision)], success: [.delete(key: key)])
                }, first
            )
        }
        defer { patience?.timer.cancel() }
        let granted: Int64
        do {
            granted = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Int64, Error>) in
                let (settled, inTheWay) = state.withLock { state -> (Result<Int64, Failure>?, [Entry]?) in
                    if state.lost { return (.failure(.leaseLost), nil) }
                    if state.stopped { return (.failure(.stopped), nil) }
                    // Behind the snapshot, the replica learns what it holds; deletions after
                    // it come through the watch. (Ahead of it, the replica knows better; and a
                    // key it has in a later making is not put back to an earlier one.)
                    if state.revision < readAt {
                        for value in snapshot {
                            if let found = entry(value), found.revision >= (state.index[value.key]?.revision ?? 0) {
                                state.index.put(value.key, found)
                            }
                        }
                    }
                    // The replica past the read without the key: deleted since (given back, or
                    // taken back by a waiter that gave up); to be made again, not put back.
                    if state.revision >= readAt && state.index[key] == nil { return (.failure(.withdrawn), nil) }
                    if mine.revision >= (state.index[key]?.revision ?? 0) { state.index.put(key, mine) }
                    let blockers = state.index.blockers(of: mine)
                    if blockers.isEmpty { return (.success(revision), []) }
                    switch asking {
                    case .waiting: break
                    case .tentatively: return (.success(0), blockers)
                    // One in the way that waits itself: another host's program wants it first.
                    case .ifIdle where blockers.contains(where: { state.index.isBlocked($0) }):
                        return (.success(0), blockers)
                    case .ifIdle: break
                    }
                    state.waiters[key, default: []].append(continuation)
                    return (nil, blockers)
                }
                if let inTheWay { placed?(inTheWay) }
                if let settled { continuation.resume(with: settled) }
                settle { _ in }  // recalls this key makes
            }
        } catch let failure as Failure {
            // Taken away by the holder that refused it, or by its own patience: refused.
            if case .ifIdle = asking, failure == .withdrawn { return nil }
            throw failure
        } catch {
            throw .leaseLost
        }
        if granted != 0 { return (patience?.first.take() ?? true) ? granted : nil }
        do { _ = try await client.transaction([.created(key, at: revision)], success: [.delete(key: key)]) } catch {
            throw .etcd(error)
        }
        return nil
    }

    /// Reads of the keys that can conflict with one of `path`: its own, those of the items it
    /// holds, and those of the directories that hold it.
    private func neighbourhood(of path: String) -> [EtcdOperation] {
        if path.isEmpty { return [.range(key: prefix, prefix: true)] }
        var reads: [EtcdOperation] = [
            .range(key: prefix + Array(path.utf8) + [0], prefix: true),
            .range(key: prefix + Array((path + "/").utf8), prefix: true)
        ]
        var directory = Substring(path)
        while true {
            if let slash = directory.lastIndex(of: "/") { directory = directory[..<slash] } else { directory = "" }
            reads.append(.range(key: prefix + Array(directory.utf8) + [0], prefix: true))
            if directory.isEmpty { break }
        }
        return reads
    }

    /// Gives back this host's delegation of `path` in `mode`, or in every mode it has (as this
    /// run made it: the watch tells the replica). A key still waiting is withdrawn.
    public func release(_ path: String, _ mode: Mode? = nil) async throws(Failure) {
        for mode in mode.map({ [$0] }) ?? Mode.allCases {
            let key = self.key(path, mode)
            guard let made = state.withLock({ $0.index[key] }) else { continue }
            do {
                _ = try await client.transaction([.created(key, at: made.revision)], success: [.delete(key: key)])
            } catch {
                throw .etcd(error)
            }
        }
    }

    /// Gives back several of this host's delegations, those the replica has (as `release` each),
    /// a few dozen keys to a transaction: what a host gives back idle comes in hundreds.
    func release(_ items: [(path: String, mode: Mode)]) async throws(Failure) {
        let made = state.withLock { state in
            items.compactMap { item -> (key: [UInt8], revision: Int64)? in
                let key = self.key(item.path, item.mode)
                return state.index[key].map { (key, $0.revision) }
            }
        }
        // etcd takes at most 128 operations of each kind in a transaction (--max-txn-ops).
        for start in stride(from: 0, to: made.count, by: 64) {
            let batch = made[start..<min(start + 64, made.count)]
            do throws(EtcdError) {
                let answer = try await client.transaction(
                    batch.map { .created($0.key, at: $0.revision) },
                    success: batch.map { .delete(key: $0.key) })
                // One of them went meanwhile (its lease ended): the others one by one.
                if !answer.succeeded {
                    for (key, revision) in batch {
                        _ = try await client.transaction([.created(key, at: revision)], success: [.delete(key: key)])
                    }
                }
            } catch {
                throw .etcd(error)
            }
        }
    }

    /// Whether the replica still has `entry`'s key as it was made.
    public func isPresent(_ entry: Entry) -> Bool {
        let key = self.key(of: entry)
        return state.withLock { $0.index[key]?.revision == entry.revision }
    }

    /// Whether another holder (another host, or an earlier run of this one) has a key of any
    /// mode at `path`, in a directory above it, or inside it. (One walk down the path.)
    func othersHaveKeys(around path: String) -> Bool {
        state.withLock { state in
            !state.index.forEachRelated(to: path, .others, writesOnly: false) { _, _ in false }
        }
    }

    /// The other holders' keys, held or waiting, in the way of `mode` of `path` now (what a
    /// request for it would wait for, were it made now). Through the index: the depth of the path.
    public func blockers(of path: String, _ mode: Mode) -> [Entry] {
        state.withLock { state in
            state.index.blockers(of: Entry(path: path, host: host, mode: mode, revision: .max, lease: lease.id))
        }
    }

    /// Every delegation, held or wanted, by every host, in line order. (For status and tests:
    /// it sorts every key. Requests ask `outermostFree` and the index.)
    public func entries() -> [Entry] {
        state.withLock { $0.index.all.map { $0.entry }.sorted { $0.revision < $1.revision } }
    }

    /// The delegation to ask for `mode` of `path`: its outermost directory (the store's root
    /// aside) in which and above which no other holder has a key that conflicts, and that
    /// `excluded` does not refuse; `path` itself when there is none (`DelegationIndex`).
    func outermostFree(for path: String, _ mode: Mode, unless excluded: (String) -> Bool) -> String {
        state.withLock { $0.index.outermostFree(for: path, mode, unless: excluded) }
    }

    // MARK: The replica

    /// This run's key for `path`: another run of the same host (one that died and came back
    /// within its lease's TTL) has keys of its own, under its own lease.
    private func key(_ path: String, _ mode: Mode) -> [UInt8] {
        key(of: Entry(path: path, host: host, mode: mode, revision: 0, lease: lease.id))
    }

    /// The key of `entry`, of whichever host.
    private func key(of entry: Entry) -> [UInt8] {
        prefix + Array(entry.path.utf8) + [0] + Array(entry.host.utf8) + [0]
            + Array(String(entry.lease, radix: 16).utf8) + [0]
            + Array(entry.mode.rawValue.utf8)
    }

    private func entry(_ value: EtcdKeyValue) -> Entry? {
        guard value.key.starts(with: prefix) else { return nil }
        let rest = value.key[prefix.count...]
        let tentative = value.value.last == UInt8(ascii: "?"), idle = value.value.last == UInt8(ascii: "!")
        guard let zero = rest.firstIndex(of: 0),
            let mode = Mode(
                rawValue: String(decoding: tentative || idle ? value.value.dropLast() : value.value[...], as: UTF8.self)
            )
        else { return nil }
        let holder = rest[(zero + 1)...]
        let host = holder.firstIndex(of: 0).map { holder[..<$0] } ?? holder
        return Entry(
            path: String(decoding: rest[..<zero], as: UTF8.self), host: String(decoding: host, as: UTF8.self),
            mode: mode, revision: value.createRevision, lease: value.lease, isTentative: tentative, asksIdle: idle)
    }

    /// Reads every key anew: the revision read at.
    private func reload() async throws(Failure) -> Int64 {
        let (revision, values): (Int64, [EtcdKeyValue])
        do { (revision, values) = try await client.get(prefix, prefix: true) } catch { throw .etcd(error) }
        settle { state in
            // Keys made after the read (an acquire's own, merged meanwhile) are kept; the
            // replica changes by the difference, so that recalls look only at what changed.
            let later = state.index.all.filter { $0.entry.revision > revision }
            let read = Dictionary(
                values.compactMap { value in entry(value).map { (value.key, $0) } }, uniquingKeysWith: { $1 }
            )
            .merging(later.map { ($0.key, $0.entry) }, uniquingKeysWith: { $1 })
            for (key, _) in state.index.all where read[key] == nil { state.index.remove(key) }
            for (key, made) in read { state.index.put(key, made) }
            state.revision = max(state.revision, revision)
        }
        return revision
    }

    /// Follows changes from `revision`; after a lost connection, from where it stopped; after
    /// a compaction, from a new read.
    private func follow(from revision: Int64) async {
        var next = revision
        while !Task.isCancelled {
            do {
                for try await batch in client.watch(prefix: prefix, from: next) {
                    settle { state in
                        for event in batch.events {
                            let key = event.keyValue.key
                            // A key this host made again may be in the replica before the
                            // watch brings the old one's deletion: older news is ignored.
                            let current = state.index[key]?.revision ?? 0
                            switch event.kind {
                            case .put:
                                if let made = entry(event.keyValue), made.revision >= current {
                                    state.index.put(key, made)
                                }
                            case .delete:
                                if current <= event.keyValue.modRevision { state.index.remove(key) }
                            }
                        }
                        state.revision = max(state.revision, batch.revision)
                    }
                    next = batch.revision + 1
                }
            } catch EtcdError.compacted {
                if let revision = try? await reload() {
                    next = revision + 1
                } else {
                    try? await Task.sleep(for: .milliseconds(200))
                }
            } catch {
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    /// Changes the replica, then wakes the waiters whose keys are now held and tells recalls:
    /// those the change made (the index looks only around the keys that changed).
    private func settle(_ change: (inout State) -> Void) {
        let (granted, withdrawn, recalls) = state.withLock { state in
            change(&state)
            let changes = state.index.takeChanges()
            var granted: [(CheckedContinuation<Int64, Error>, Int64)] = []
            var withdrawn: [CheckedContinuation<Int64, Error>] = []
            for (key, waiters) in state.waiters {
                guard let mine = state.index[key] else {
                    withdrawn += waiters
                    state.waiters[key] = nil
                    continue
                }
                if !state.index.isBlocked(mine) {
                    granted += waiters.map { ($0, mine.revision) }
                    state.waiters[key] = nil
                }
            }
            var recalls: [Recall] = []
            // Held: this run's keys with nothing before them in the way; wanted: another
            // holder's later key that conflicts, and recalls (not tentative).
            for pair in state.index.recalls(after: changes) {
                let told = Told(
                    held: pair.heldKey, heldRevision: pair.held.revision, wanted: pair.wantedKey,
                    wantedRevision: pair.wanted.revision)
                if state.told.insert(told).inserted { recalls.append(Recall(held: pair.held, wanted: pair.wanted)) }
            }
            // Pairs told of keys gone, or made again, are forgotten.
            if !state.told.isEmpty && changes.contains(where: { $0.old != nil }) {
                state.told = state.told.filter { pair in
                    state.index[pair.held]?.revision == pair.heldRevision
                        && state.index[pair.wanted]?.revision == pair.wantedRevision
                }
            }
            return (granted, withdrawn, recalls)
        }
        for (waiter, revision) in granted { waiter.resume(returning: revision) }
        // A lease revoked is lost before etcd deletes its keys.
        for waiter in withdrawn { waiter.resume(throwing: lease.isLost ? Failure.leaseLost : Failure.withdrawn) }
        for recall in recalls { recallSink.yield(recall) }
    }

    /// Decides once between a grant and the end of a request's patience: the first to take it.
    private final class FirstOfTwo: Sendable {
        private let taken = Atomic<Bool>(false)
        func take() -> Bool { !taken.exchange(true, ordering: .acquiringAndReleasing) }
    }

    private func leaseLost() {
        let waiters = state.withLock { state -> [CheckedContinuation<Int64, Error>] in
            state.lost = true
            defer { state.waiters = [:] }
            return state.waiters.values.flatMap { $0 }
        }
        for waiter in waiters { waiter.resume(throwing: Failure.leaseLost) }
    }

    // MARK: Conflicts

    /// Two delegations conflict when either writes and their items are one, or one holds the other.
    static func conflict(_ a: Entry, _ b: Entry) -> Bool {
        guard a.mode.writes || b.mode.writes else { return false }
        return a.path == b.path || contains(a.path, b.path) || contains(b.path, a.path)
    }

    /// Whether the item `outer` holds `inner` ("" holds everything).
    static func contains(_ outer: String, _ inner: String) -> Bool {
        outer.isEmpty || inner.hasPrefix(outer + "/")
    }
}
