import Synchronization

/// Grants that hosts sharing a store hold of its items, through etcd: a host holds a
/// delegation of an item (read or write) while no other host holds a conflicting one, and
/// grants its own programs' accesses inside it in memory. Another host that wants a
/// conflicting delegation makes a key of its own and waits; the holder hears a recall, meets
/// the request as its own program's (`Entry.request`), and gives the delegation back, or
/// answers the request on its key (`answer`: let past, refused) and keeps it.
///
/// Each delegation, wanted or held, is one key `<prefix><path>\0<host>\0<lease>\0<mode>` whose
/// value is its mode, its request and any answer (`Entry.value`), attached to the host's lease:
/// a host that dies or is cut off loses them all with its lease. Hosts are served first come,
/// first served by the keys' create revisions (the etcd lock recipe, over read and write
/// modes): a key is held once every conflicting key made before it is gone, and its create
/// revision is the grant's fencing token. Each host keeps a replica of all keys, read once and
/// then followed by one watch, so waiting and recalls cost no request of their own; the replica
/// is indexed by path (`DelegationIndex`), and a change looks again only at the keys around it,
/// so neither costs more as the store's keys grow.
///
/// With the store's names hidden (`HiddenNames`), a key has the path's hidden name in the
/// path's place, and its value the path sealed (`DelegationKeys`); the replica has the paths.
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
        /// Writes that share the item as they would on one host: one that only appends shares
        /// it with readers and with other such writers (U1), one in place among writers that
        /// share with each other (U2). Readers still wait for a writer in place.
        case appending = "a", inPlace = "s"
        /// A read's question to the other hosts' presenters of the item: only their presences
        /// are in its way, and their hosts answer it (`Answer.granted`) once those presenters
        /// have answered as for a read of their own. It holds nothing and is never recalled.
        case asking = "q"

        public var writes: Bool { !(self == .read || self == .presence || self == .asking) }
        public var isDestructive: Bool { self == .deleting || self == .moving || self == .replacing }
        /// Writers that share their item with each other's kind across hosts (U1, U2): appenders
        /// and writers in place.
        public var sharesWriters: Bool { self == .appending || self == .inPlace }
        /// Asked for of the item itself, never of a directory above it, where another host has
        /// anything around it: the host it recalls asks its presenters about this item, and a
        /// writer that shares the item keeps it beside the others'.
        public var isOfTheItem: Bool { isDestructive || self == .appending || self == .inPlace }

        /// Whether keys of these modes exclude each other where their items are one, or one
        /// holds the other (questions aside: `Delegations.inTheWay`): readers share (C3), and
        /// so do the writers that share an item on one host (U1, U2).
        func excludes(_ other: Mode) -> Bool {
            guard writes || other.writes else { return false }
            switch (self, other) {
            case (.appending, .read), (.read, .appending): return false
            case (.appending, .appending), (.appending, .inPlace), (.inPlace, .appending), (.inPlace, .inPlace):
                return false
            default: return true
            }
        }
    }

    /// How a host answered another's request itself, on that request's key, instead of giving
    /// its own delegation back: as its own coordination answered the same access of one of its
    /// programs. The requesting host deletes the key once it has read the answer.
    public enum Answer: Sendable, Equatable {
        /// A question (`Mode.asking`): the presenters there have answered.
        case granted
        /// Let past the holders there without their giving anything up (a writer whose file
        /// has stayed unchanged for the settle time): the request goes ahead holding nothing.
        case passed
        /// Refused as that host refuses its own program's (a presenter's refusal): an errno's
        /// name (`EACCES`).
        case refused(String)

        var text: String {
            switch self {
            case .granted: "granted"
            case .passed: "passed"
            case .refused(let errno): "refused:" + errno
            }
        }

        init?(text: Substring) {
            switch text {
            case "granted": self = .granted
            case "passed": self = .passed
            default:
                guard text.hasPrefix("refused:") else { return nil }
                self = .refused(String(text.dropFirst("refused:".count)))
            }
        }
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
        /// The access the key was first asked for, in the words of the hosts' coordination
        /// (opaque here): the host it recalls begins that access as its own program's would.
        /// Empty for a key of a directory, asked for on nobody's account.
        public var request = ""
        /// The holder's answer, once one host has answered the request itself (`answer`): the
        /// key is in nobody's way from then on, and wants nothing.
        public var answer: Answer?

        public init(
            path: String, host: String, mode: Mode, revision: Int64, lease: Int64, isTentative: Bool = false,
            asksIdle: Bool = false, request: String = "", answer: Answer? = nil
        ) {
            self.path = path
            self.host = host
            self.mode = mode
            self.revision = revision
            self.lease = lease
            self.isTentative = isTentative
            self.asksIdle = asksIdle
            self.request = request
            self.answer = answer
        }

        func isSameHolder(as other: Entry) -> Bool { host == other.host && lease == other.lease }

        /// The key's value: its mode, how it was asked for, its request and its answer
        /// (`w`, `r?`, `s|w20000`, `r!|r10000=refused:EACCES`).
        var value: [UInt8] {
            var text = mode.rawValue + (isTentative ? "?" : asksIdle ? "!" : "")
            if !request.isEmpty { text += "|" + request }
            if let answer { text += "=" + answer.text }
            return Array(text.utf8)
        }
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
        /// The host in the way answered the request itself (`Answer`), and the key is gone.
        case answered(Answer)

        public var description: String {
            switch self {
            case .leaseLost: "this host's cluster lease is lost"
            case .withdrawn: "the delegation was withdrawn while it was waited for"
            case .stopped: "this host has left the cluster"
            case .cannotJoin(let why): why
            case .etcd(let error): "etcd cannot be reached (\(error))"
            case .answered(.refused(let errno)): "another host refused it (\(errno))"
            case .answered(let answer): "another host answered it: \(answer.text)"
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
    /// How this space's keys are named and read.
    let keys: DelegationKeys
    private let state: Mutex<State>
    public let recalls: AsyncStream<Recall>
    private let recallSink: AsyncStream<Recall>.Continuation
    private let follower = Mutex<Task<Void, Never>?>(nil)
    /// The other holders' presences in the replica (`DelegationIndex.othersPresences`), read
    /// without a lock by every request that may have to ask them first.
    private let presencesElsewhere = Atomic<Int>(0)

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
        /// Told after a change to a key the replica had (`observeChanges`).
        var observer: (@Sendable () -> Void)?

        init(index: DelegationIndex) { self.index = index }
    }

    private struct Told: Hashable {
        let held: [UInt8], heldRevision: Int64, wanted: [UInt8], wantedRevision: Int64
    }

    /// `store`: the name hosts that share one store give it (their mounts of it coordinate).
    /// `space`: which of its keys (`/coordfs/<store>/<space>/`). `names`: the store's item names
    /// hidden from etcd, as every host of the store hides them (nil: in clear).
    public init(
        client: EtcdClient, store: String, host: String, lease: HostLease, space: KeySpace = .delegations,
        names: HiddenNames? = nil
    ) {
        precondition(!host.contains("\0") && !host.isEmpty)
        self.client = client
        self.host = host
        self.lease = lease
        self.store = store
        self.space = space
        keys = DelegationKeys(store: store, space: space, names: names)
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
    /// `request`: the access asked for (`Entry.request`), for the hosts it recalls. A holder
    /// that answers the request itself ends the wait with `Failure.answered` (a question
    /// granted returns), its key deleted.
    public func acquire(_ path: String, _ mode: Mode, request: String = "") async throws(Failure) -> Int64 {
        try await acquire(path, mode, request: request, asking: .waiting)!
    }

    /// `acquire`, telling `placed` as soon as the key is in line which other holders' keys
    /// were then in its way (none: it is granted at once). A host joining again after a lost
    /// lease learns so whether another host came before it (`ClusterMember.redelegate`).
    func acquire(
        _ path: String, _ mode: Mode, placed: @escaping @Sendable ([Entry]) -> Void
    ) async throws(Failure) -> Int64 {
        try await acquire(path, mode, request: "", asking: .waiting, placed: placed)!
    }

    /// `acquire`, unless another host's key is in the way: then the key made is withdrawn and
    /// nil returned. (A host asking for a whole directory on what its replica knew takes back a
    /// request that would wait for holders of items it does not need.) The key is tentative:
    /// it recalls nobody.
    public func acquireUnlessBlocked(_ path: String, _ mode: Mode) async throws(Failure) -> Int64? {
        try await acquire(path, mode, request: "", asking: .tentatively)
    }

    /// `acquire` for a request that does not wait for another host's programs (`O_NONBLOCK`):
    /// the hosts in the way are recalled, and one that holds the item idle gives it back, which
    /// this waits for. Nil, the key taken away, when a host whose programs hold it refuses it
    /// (`refuse`), when a key in the way is itself still waiting (another host's program wants
    /// the item first), or when no answer came within `patience` (a host cut off, or gone).
    public func acquireIfIdle(
        _ path: String, _ mode: Mode, patience: Duration, request: String = ""
    ) async throws(Failure) -> Int64? {
        try await acquire(path, mode, request: request, asking: .ifIdle(patience))
    }

    /// Refuses another host's request that does not wait (`Entry.asksIdle`), for this host's
    /// programs hold what it wants: its key is taken away as made, and its request fails.
    public func refuse(_ entry: Entry) async throws(Failure) {
        guard entry.asksIdle else { return }
        let key = keys.key(of: entry)
        do { _ = try await client.transaction([.created(key, at: entry.revision)], success: [.delete(key: key)]) } catch
        {
            throw .etcd(error)
        }
    }

    /// Answers another host's request that waits for this host's delegation (`entry`, as made)
    /// without giving the delegation back: its key is written again with the answer, under its
    /// own host's lease, which reads it there and deletes the key (`Failure.answered`).
    public func answer(_ entry: Entry, _ answer: Answer) async throws(Failure) {
        var answered = entry
        answered.answer = answer
        let key = keys.key(of: entry)
        do {
            _ = try await client.transaction(
                [.created(key, at: entry.revision)],
                success: [.put(key: key, value: keys.value(of: answered, at: key), lease: entry.lease)])
        } catch {
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
        _ path: String, _ mode: Mode, request: String, asking: Asking,
        placed: (@Sendable ([Entry]) -> Void)? = nil
    ) async throws(Failure) -> Int64? {
        let key = self.key(path, mode)
        var made = Entry(
            path: path, host: host, mode: mode, revision: 0, lease: lease.id, request: request)
        switch asking {
        case .waiting: break
        case .tentatively: made.isTentative = true
        case .ifIdle: made.asksIdle = true
        }
        // With the key, the keys that could be in its way, read at its revision: the replica
        // may not have followed that far yet, and must not grant on what it has not seen.
        let around = keys.neighbourhood(of: path)
        var placing: (mine: Entry, snapshot: [EtcdKeyValue], at: Int64)?
        do throws(EtcdError) {
            // A key of this run already there (acquired before) keeps its place in line, and
            // the answer another host gave it stands for this request too.
            while placing == nil {
                let answer = try await client.transaction(
                    [.absent(key)],
                    success: [.put(key: key, value: keys.value(of: made, at: key), lease: lease.id)] + around,
                    failure: [.range(key: key, prefix: false)] + around)
                if answer.succeeded {
                    made.revision = answer.revision
                    placing = (made, answer.ranges.flatMap { $0 }, answer.revision)
                } else if let existing = answer.ranges.first?.first {
                    var found = keys.entry(existing) ?? made
                    found.revision = existing.createRevision
                    placing = (found, answer.ranges.dropFirst().flatMap { $0 }, answer.revision)
                }
                // (Else it was deleted between the two: made again.)
            }
        } catch {
            throw .etcd(error)
        }
        let (mine, snapshot, readAt) = placing!
        let revision = mine.revision
        if let answered = mine.answer { return try await ended(key, made: revision, answered: answered) }
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
                            if let found = keys.entry(value), found.revision >= state.index[value.key]?.revision ?? 0 {
                                state.index.put(value.key, found)
                            }
                        }
                    }
                    // The replica past the read without the key: deleted since (given back, or
                    // taken back by a waiter that gave up); to be made again, not put back.
                    if state.revision >= readAt && state.index[key] == nil { return (.failure(.withdrawn), nil) }
                    // (As made, unless the replica has it answered already.)
                    if revision > (state.index[key]?.revision ?? 0) { state.index.put(key, mine) }
                    if let known = state.index[key], known.revision == revision, let answered = known.answer {
                        return (Self.outcome(of: answered, revision), nil)
                    }
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
            if case .answered(let answered) = failure {
                return try await ended(key, made: revision, answered: answered)
            }
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

    /// How a waiter of a key ends once another host has answered it: a question granted holds
    /// its key (its asker deletes it); any other answer ends the request, its key deleted here.
    private static func outcome(of answer: Answer, _ revision: Int64) -> Result<Int64, Failure> {
        answer == .granted ? .success(revision) : .failure(.answered(answer))
    }

    /// A request whose key (made at `revision`) another host answered: a question granted
    /// returns its token; otherwise the key is deleted and the answer thrown.
    private func ended(_ key: [UInt8], made revision: Int64, answered: Answer) async throws(Failure) -> Int64 {
        if answered == .granted { return revision }
        _ = try? await client.transaction([.created(key, at: revision)], success: [.delete(key: key)])
        throw .answered(answered)
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

    /// Calls `changed` from now on after each change of the replica to a key it had: given
    /// back, taken back, refused, answered, or gone with its lease. A recall waiting for the
    /// keys that want what it recalls (`stillWants`) looks again at once. One observer: a
    /// later one replaces it.
    public func observeChanges(_ changed: @escaping @Sendable () -> Void) {
        state.withLock { $0.observer = changed }
    }

    /// Whether the replica still has `entry`'s key as it was made, and nobody has answered it:
    /// its request still waits for what it wants.
    public func stillWants(_ entry: Entry) -> Bool {
        let key = keys.key(of: entry)
        return state.withLock { state in
            guard let known = state.index[key] else { return false }
            return known.revision == entry.revision && known.answer == nil
        }
    }

    /// Whether another holder's presenters present `path` itself (a presence of it): a read of
    /// it asks them first (`Mode.asking`). Without a lock while nobody else presents anything.
    public func othersPresent(at path: String) -> Bool {
        if presencesElsewhere.load(ordering: .relaxed) == 0 { return false }
        return state.withLock { $0.index.othersPresent(at: path) }
    }

    /// Whether another holder presents anything in the store, without a lock.
    public var othersPresentAnything: Bool { presencesElsewhere.load(ordering: .relaxed) > 0 }

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
        keys.key(of: Entry(path: path, host: host, mode: mode, revision: 0, lease: lease.id))
    }

    /// Reads every key anew: the revision read at.
    private func reload() async throws(Failure) -> Int64 {
        let (revision, values): (Int64, [EtcdKeyValue])
        do { (revision, values) = try await client.get(keys.prefix, prefix: true) } catch { throw .etcd(error) }
        settle { state in
            // Keys made after the read (an acquire's own, merged meanwhile) are kept; the
            // replica changes by the difference, so that recalls look only at what changed.
            let later = state.index.all.filter { $0.entry.revision > revision }
            let read = Dictionary(
                values.compactMap { value in keys.entry(value).map { (value.key, $0) } }, uniquingKeysWith: { $1 }
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
                for try await batch in client.watch(prefix: keys.prefix, from: next) {
                    settle { state in
                        for event in batch.events {
                            let key = event.keyValue.key
                            // A key this host made again may be in the replica before the
                            // watch brings the old one's deletion: older news is ignored.
                            let current = state.index[key]?.revision ?? 0
                            switch event.kind {
                            case .put:
                                if let made = keys.entry(event.keyValue), made.revision >= current {
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
        let (granted, withdrawn, answered, recalls, observer) = state.withLock { state in
            change(&state)
            let changes = state.index.takeChanges()
            // (A key made anew is told as a recall, if it recalls anything.)
            let observer = changes.contains(where: { $0.old != nil }) ? state.observer : nil
            presencesElsewhere.store(state.index.othersPresences, ordering: .relaxed)
            var granted: [(CheckedContinuation<Int64, Error>, Int64)] = []
            var withdrawn: [CheckedContinuation<Int64, Error>] = []
            var answered: [(CheckedContinuation<Int64, Error>, Result<Int64, Failure>)] = []
            for (key, waiters) in state.waiters {
                guard let mine = state.index[key] else {
                    withdrawn += waiters
                    state.waiters[key] = nil
                    continue
                }
                if let answer = mine.answer {
                    answered += waiters.map { ($0, Self.outcome(of: answer, mine.revision)) }
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
            return (granted, withdrawn, answered, recalls, observer)
        }
        for (waiter, revision) in granted { waiter.resume(returning: revision) }
        for (waiter, outcome) in answered { waiter.resume(with: outcome.mapError { $0 as Error }) }
        // A lease revoked is lost before etcd deletes its keys.
        for waiter in withdrawn { waiter.resume(throwing: lease.isLost ? Failure.leaseLost : Failure.withdrawn) }
        for recall in recalls { recallSink.yield(recall) }
        observer?()
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

    /// Whether `earlier`, made before `later`, is in its way: where their items are one, or one
    /// holds the other, and their modes exclude each other (`Mode.excludes`). A question is in
    /// nobody's way, and only the presences of its own item are in its way.
    static func inTheWay(_ earlier: Entry, of later: Entry) -> Bool {
        if later.mode == .asking { return earlier.mode == .presence && earlier.path == later.path }
        if earlier.mode == .asking { return false }
        return related(earlier.path, later.path) && earlier.mode.excludes(later.mode)
    }

    /// Two delegations conflict when either is in the other's way (`inTheWay`): one of them
    /// writes, their items are one or one holds the other, and they do not share it.
    static func conflict(_ a: Entry, _ b: Entry) -> Bool { inTheWay(a, of: b) || inTheWay(b, of: a) }

    /// Whether the items are one, or one holds the other.
    static func related(_ a: String, _ b: String) -> Bool { a == b || contains(a, b) || contains(b, a) }

    /// Whether the item `outer` holds `inner` ("" holds everything).
    static func contains(_ outer: String, _ inner: String) -> Bool {
        outer.isEmpty || inner.hasPrefix(outer + "/")
    }
}
