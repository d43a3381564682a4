import Logging
import Synchronization

/// What a host's side of the cluster needs of the host's own coordination.
public protocol LocalAccesses: Sendable {
    /// What this host's programs and coordinators hold now: store paths ("" the root) and
    /// modes (a writer that shares the item as `appending` or `inPlace`); other hosts'
    /// accesses (`beginAccess`) left out.
    func holders() -> [(path: String, mode: Delegations.Mode)]
    /// Begins on this host the access another host's key `wanted` asks for (its request, of
    /// its path), as this host's own program's would begin: its presenters save or relinquish
    /// as for a local reader or writer, and this host's coordination answers it
    /// (`LocalAccess.answer`). Ended by `LocalAccess.end`.
    func beginAccess(for wanted: Delegations.Entry) -> any LocalAccess
    /// Calls `changed` from now on whenever what it returns says may have changed: a recall
    /// that waits for it looks again at once, and otherwise only now and then. What it does
    /// not tell of, a recall looks at again every few milliseconds. One observer: a later one
    /// replaces it.
    func observeChanges(_ changed: @escaping @Sendable () -> Void) -> LocalChanges
}

extension LocalAccesses {
    /// Tells of nothing: a recall looks again every few milliseconds.
    public func observeChanges(_ changed: @escaping @Sendable () -> Void) -> LocalChanges { [] }
}

/// What a host's own coordination tells its member of as it changes
/// (`LocalAccesses.observeChanges`).
public struct LocalChanges: OptionSet, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// What `holders()` returns: a holder ended, or came.
    public static let holders = LocalChanges(rawValue: 1)
    /// What an access begun here (`beginAccess`) answers.
    public static let answers = LocalChanges(rawValue: 2)
}

/// Another host's access begun on this host (`LocalAccesses.beginAccess`).
public protocol LocalAccess: Sendable {
    /// What this host's coordination answers it so far.
    var answer: LocalAnswer { get }
    func end()
}

extension LocalAccess {
    /// An access that asks nothing of this host's coordination is granted at once.
    public var answer: LocalAnswer { .granted }
}

/// What a host's own coordination answers another host's access begun there
/// (`LocalAccesses.beginAccess`), as it would answer the same access of its own program.
public enum LocalAnswer: Sendable, Equatable {
    /// Not yet: it waits for this host's holders, or for its presenters' answers.
    case waiting
    /// Granted here: the holders and presenters here let it in.
    case granted
    /// Let past this host's holders without their giving anything up (a writer whose file has
    /// stayed unchanged for the settle time): it goes ahead holding nothing, and this host
    /// keeps its delegation.
    case passed
    /// Refused as this host refuses its own program's (a presenter's refusal): the errno's name.
    case refused(String)
}

/// One host of a shared store: the delegations it holds, so that it grants its own programs in
/// memory, and its answers to other hosts' recalls.
///
/// A host asks for as much as nobody else wants: for an item, the delegation of its outermost
/// directory below the store's root that no other host has a conflicting key in or above, so a
/// host alone in a subtree asks etcd once. A recall narrows it: the host stops granting under
/// the recalled delegation (but to its holders' own accessors: the recall waits for those
/// holders, `coversAccessor`), begins the other host's access as its own program's
/// (`LocalAccesses.beginAccess`), waits until its own coordination grants it and none of its
/// holders conflicts with the other host's key (or the break time passes), takes finer
/// delegations for the holders that go on (those that share the item keep keys that share it),
/// and gives the recalled one back. Where its coordination lets the request past its holders
/// or refuses it, it answers on the request's key instead and keeps the delegation; so too for a
/// read's question to its presenters (`askPresenters`), which its presence alone is in the way of.
///
/// A delegation nothing here has used for an idle time (no request granted from it, no holder
/// inside it) is given back unasked (`sweepIdle`): the fine ones a host takes where hosts meet
/// (one per item) do not pile up, and once the other hosts' have gone too, the next request
/// asks for the whole directory again.
///
/// Writes through files its programs keep open are fenced (`mayAdmitWrites`, `admitsWrites`):
/// none lands once the lease may have ended (its last renewal's answer, plus the TTL, less the
/// margin), and none through an open whose item may have become another host's since its grant
/// (`CoverLosses`): a recall broken at the break time, or a lost lease. A host that joins again
/// after a lost lease first asks again for what its programs hold (`redelegate`), before it
/// grants anything new; an item whose new key finds no other host's key before it, under a lost
/// lease that etcd still had, was this host's all along, and its write opens go on.
///
/// A mount of a shared store is a member twice over (`Role`): for its programs' accesses, and
/// for their flock and fcntl locks, under a lease and keys of their own. Only the accesses'
/// member fences writes (and says how the host stands, `standing`); the locks' member, its lease
/// lost, grants no lock across hosts (ENOLCK) and asks again for the files its programs still
/// lock before it grants any new one, as the accesses' member asks again for what is held.
public final class ClusterMember: Sendable {
    private let join: @Sendable () async throws -> Delegations
    private let local: any LocalAccesses
    private let breakTime: Duration
    /// How long a delegation stays unused before it is given back (nil: kept until recalled).
    private let idleTime: Duration?
    private let logger = Logger(label: "org.coordfs.cluster")
    private let state: Mutex<State>
    private let tasks = Mutex<[Task<Void, Never>]>([])
    /// Signalled whenever what a recall waits for may have changed (`giveBack`): this host's
    /// holders and the answers of the accesses begun here (as far as `local` tells of them,
    /// `localTells`), the other hosts' keys in the replica, the keys recalled, and the grants
    /// held here.
    private let recallNews: ChangeSignal
    /// What `local` tells of as it changes: a recall looks again every few milliseconds for the rest.
    private let localTells: LocalChanges
    /// Whether writes through open files may land, read without a lock (`mayAdmitWrites`):
    /// `WriteStanding`'s raw value.
    private let writeStanding = Atomic<UInt8>(WriteStanding.suspended.rawValue)
    /// Until when the present run's lease is known valid (`LeaseClock` nanoseconds; 0: lost),
    /// as the lease tells it (`HostLease.observeValidity`).
    private let leaseUntil = Atomic<Int64>(0)
    /// The lease `leaseUntil` follows: an earlier run's that tells late is not listened to.
    private let leaseFollowed = Atomic<Int64>(0)
    /// `state.losses.last`, read without a lock by every write through an open file.
    private let lastLoss = Atomic<UInt64>(0)
    /// The other hosts' presented items (store paths by host), whole, whenever they change.
    public let presences: AsyncStream<[String: Set<String>]>
    private let presencesSink: AsyncStream<[String: Set<String>]>.Continuation
    /// What other hosts' programs did to items this host's presenters present.
    public let changesElsewhere: AsyncStream<HostNews.Batch>
    private let changesSink: AsyncStream<HostNews.Batch>.Continuation

    struct Key: Hashable, Sendable {
        var path: String
        var mode: Delegations.Mode
    }

    /// Whether writes through open files may land.
    private enum WriteStanding: UInt8 {
        /// While the lease may be valid (`leaseUntil`), by their cover (`CoverLosses`).
        case member
        /// Not now: the lease is lost, or the host is joining again (`redelegate`).
        case suspended
        /// All: the host coordinates alone (`WhenUnreachable.local`).
        case alone
    }

    private struct State {
        /// This run's delegations (a new lease after a lost one is a new run); nil while the
        /// host is not a member.
        var delegations: Delegations?
        /// Held and granted from: by path, which modes (and whether granted from since the last
        /// sweep of idle delegations, `Modes.granted`).
        var held: [String: Modes] = [:]
        /// Recalled, being given back: the other hosts' keys that want them.
        var recalled: [Key: [Delegations.Entry]] = [:]
        /// Recalled keys still this host's while its holders that conflict with the recall go
        /// on: their accessors' own requests are still granted from them (`coversAccessor`),
        /// nobody else's. Out once the host gives the key back (or keeps it after all).
        var kept: Set<Key> = []
        /// Acquires under way, shared by the requests that need them.
        var acquiring: [Key: Acquiring] = [:]
        /// Keys granted to requests that waited for them and have yet to use them (`GrantPromise`):
        /// a recall stops granting from one only once they have, or the promise has run out.
        var promised: [Key: Promise] = [:]
        var acquires: UInt64 = 0
        /// Recalled keys (and idle ones, `sweepIdle`) being given back: asked for again only
        /// once they are.
        var givingBack: [Key: Task<Void, Never>] = [:]
        /// Keys given back, as made: a grant of one of them that comes late is not held.
        var givenBack: Set<GivenBack> = []
        var leaving = false
        /// Coordinating alone: etcd unreachable, and `WhenUnreachable.local`.
        var alone = false
        /// This run's presence and news.
        var news: HostNews?
        /// The items this host's presenters present.
        var presented: Set<String> = []
        /// What this host answers other hosts' status requests with.
        var statusAnswer: (@Sendable () -> [UInt8])?
        /// While a run begun after a lost lease asks again for what this host's programs hold
        /// (`redelegate`): nothing new is granted until it has.
        var rejoining: Task<Void, Never>?
        /// When its write opens may have lost their cover.
        var losses = CoverLosses()
        /// The loss of the run whose lease was lost, narrowed once its items are re-delegated.
        var pendingRunLoss: UInt64?
        /// Since when the lease is lost (nil while a run holds one).
        var lostSince: ContinuousClock.Instant?
        var leasesLost = 0
        /// Write opens told they are fenced (`admitsWrites`, `stampWrites`).
        var fencedOpens = 0
        /// Other hosts' accesses begun here, by the key that asks for them: one access however
        /// many of this host's delegations that key recalls (a presence and a directory's
        /// write), ended once the last of their recalls is done with it.
        var begun: [Begun.Key: Begun] = [:]

        /// Grants from `key`, made at `revision` by `run`: unless the run has ended, or the key
        /// was recalled as soon as granted (and is not promised to acquire `number`'s requests,
        /// `GrantPromise`), or given back already.
        mutating func hold(_ key: Key, made revision: Int64, by run: Delegations, for number: UInt64? = nil) {
            let promisedHere = number != nil && promised[key]?.number == number
            guard delegations === run, recalled[key] == nil || promisedHere,
                !givenBack.contains(GivenBack(key: key, revision: revision))
            else {
                if promisedHere { promised[key] = nil }
                return
            }
            // Granted for a request that has yet to use it: not idle before the next sweep.
            held[key.path, default: []].formUnion([Modes(key.mode), .granted])
        }

        /// Grants from `key`, recalled, no more: only its holders' accessors' requests, while
        /// they go on (`kept`).
        mutating func stopGranting(from key: Key) {
            // Kept (and granted from again should nobody want it after all, `stillWanted`)
            // only if granted from now: a key given back idle, or one whose grant was not
            // held, kept so would be granted from with no key in the store.
            if held[key.path]?.contains(Modes(key.mode)) == true { kept.insert(key) }
            stopHolding(Modes(key.mode), at: key.path)
        }

        /// Whether `key` is promised to requests that waited for it (`GrantPromise`): made so
        /// here when its grant, recalled as it came, is still on its way to them.
        mutating func isPromised(_ key: Key) -> Bool {
            if promised[key] != nil { return true }
            guard let entry = acquiring[key], entry.waiters > 0, !entry.abandoned else { return false }
            promised[key] = Promise(number: entry.number, waiting: entry.waiters, until: .now + promiseLimit)
            return true
        }

        /// Grants no more from `mode` at `path`.
        mutating func stopHolding(_ mode: Modes, at path: String) {
            guard var modes = held[path] else { return }
            modes.remove(mode)
            held[path] = modes.subtracting(.granted).isEmpty ? nil : modes
        }

        /// The held delegation `mode` of `path` is granted from: its path and modes.
        func holding(_ path: String, _ mode: Delegations.Mode) -> (path: String, modes: Modes)? {
            // A host alone holds a few delegations: compared in place, nothing allocated.
            if held.count <= 8 {
                return held.first { other, modes in
                    modes.serves(mode)
                        && (other.isEmpty || other == path
                            || (path.utf8.count > other.utf8.count && path.hasPrefix(other)
                                && path.utf8[path.utf8.index(path.utf8.startIndex, offsetBy: other.utf8.count)]
                                    == UInt8(ascii: "/")))
                }.map { ($0.key, $0.value) }
            }
            if let modes = held[path], modes.serves(mode) { return (path, modes) }
            var directory = Substring(path)
            while !directory.isEmpty {
                directory = directory.lastIndex(of: "/").map { directory[..<$0] } ?? ""
                let above = String(directory)
                if let modes = held[above], modes.serves(mode) { return (above, modes) }
            }
            return nil
        }
    }

    private struct Modes: OptionSet {
        let rawValue: UInt8
        static let read = Modes(rawValue: 1)
        static let write = Modes(rawValue: 2)
        static let presence = Modes(rawValue: 4)
        /// Not a mode: granted from since the last sweep of idle delegations (`sweepIdle`).
        static let granted = Modes(rawValue: 8)
        static let appending = Modes(rawValue: 16)
        static let inPlace = Modes(rawValue: 32)
        init(rawValue: UInt8) { self.rawValue = rawValue }
        init(_ mode: Delegations.Mode) {
            switch mode {
            case .read: self = .read
            case .write, .deleting, .moving, .replacing: self = .write
            case .presence: self = .presence
            case .appending: self = .appending
            case .inPlace: self = .inPlace
            case .asking: self = []  // a question is never held
            }
        }
        /// Holding `mode`: a write delegation serves everything; a read or a presence serves
        /// reads and presences; a writer in place serves appends too (both share with the
        /// others' writers in place and appenders, U2). Sharing writers serve no read: another
        /// host may hold the item for writing beside them.
        func serves(_ mode: Delegations.Mode) -> Bool {
            switch mode {
            case .read, .presence: !isDisjoint(with: [.read, .write, .presence])
            case .appending: !isDisjoint(with: [.write, .inPlace, .appending])
            case .inPlace: !isDisjoint(with: [.write, .inPlace])
            case .write, .deleting, .moving, .replacing: contains(.write)
            case .asking: false
            }
        }
    }

    /// A key granted to the requests that waited for it (`GrantPromise`): by its acquire's
    /// number, how many have yet to use it, and until when a recall waits for them.
    struct Promise {
        let number: UInt64
        var waiting: Int
        let until: ContinuousClock.Instant
    }

    /// How long a recall that comes with a grant waits at most for the requests it was granted
    /// to: one that never comes back (its program gone) delays another host's request this long.
    public static let promiseLimit: Duration = .seconds(1)

    /// One acquire of a key, shared by the requests that wait for it.
    private struct Acquiring {
        let number: UInt64
        let task: Task<Void, Never>
        let ending: Ending
        var waiters = 0
        /// Its last waiter gave up before the grant: the key is taken back.
        var abandoned = false
    }

    private struct GivenBack: Hashable {
        var key: Key
        var revision: Int64
    }

    /// Another host's access begun here, and how many recalls use it.
    private struct Begun {
        struct Key: Hashable {
            var host: String
            var revision: Int64
        }
        let access: any LocalAccess
        var users: Int
    }

    /// How an acquire ended, for the requests that wait for it: one that is cancelled stops
    /// waiting at once.
    private final class Ending: Sendable {
        private let state = Mutex<
            (
                result: Result<Void, Delegations.Failure>?, waiting: [UInt64: CheckedContinuation<Void, Error>],
                next: UInt64
            )
        >(
            (nil, [:], 0))

        func finish(_ result: Result<Void, Delegations.Failure>) {
            let waiting = state.withLock { state in
                state.result = result
                defer { state.waiting = [:] }
                return state.waiting.values
            }
            for waiter in waiting { waiter.resume(with: result.mapError { $0 as Error }) }
        }

        func wait() async throws {
            let id = state.withLock { state in
                state.next += 1
                return state.next
            }
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                    let now = state.withLock { state -> Result<Void, Error>? in
                        if let result = state.result { return result.mapError { $0 as Error } }
                        if Task.isCancelled { return .failure(CancellationError()) }
                        state.waiting[id] = continuation
                        return nil
                    }
                    if let now { continuation.resume(with: now) }
                }
            } onCancel: {
                state.withLock { $0.waiting.removeValue(forKey: id) }?.resume(throwing: CancellationError())
            }
        }
    }

    /// What a host does once its lease is lost and etcd cannot be reached.
    public enum WhenUnreachable: String, Sendable, CaseIterable {
        /// Grants nothing that needs coordination (ENOLCK) until it has joined again.
        case refuse
        /// Coordinates its own programs alone, with a loud warning, until it has joined again:
        /// other hosts doing the same are not coordinated with.
        case local
    }

    private let whenUnreachable: WhenUnreachable

    /// What a member's delegations stand for.
    public enum Role: Sendable {
        /// Its programs' accesses of the store's items: the presenters' presences and news
        /// between hosts (`HostNews`) go with them, and writes through open files are fenced by
        /// its lease and its losses of cover (`mayAdmitWrites`, `admitsWrites`).
        case accesses
        /// Its programs' flock and fcntl locks of the store's files (`Delegations.KeySpace.locks`):
        /// nothing to tell presenters, and nobody is broken (`breakTime` nil). Nothing asks its
        /// fencing of writes: a lock lost with its lease is refused anew (ENOLCK) until the
        /// host has joined again and asked again for the locks its programs hold (`redelegate`).
        case locks

        /// How its log lines begin.
        var subject: String { self == .accesses ? "cluster" : "cluster locks" }
    }

    private let role: Role

    /// How long a delegation nothing here uses is kept by default: between this and twice this.
    public static let defaultIdleTime: Duration = .seconds(5)

    /// `join`: a new run's delegations, started (a lease granted, the store read and followed).
    /// `breakTime`: how long a recall waits for this host's holders that conflict with it before
    /// it gives the delegation back regardless (nil: for as long as they hold). `idleTime`: how
    /// long a delegation nothing here uses is kept (at most twice that; nil: until recalled).
    public init(
        join: @escaping @Sendable () async throws -> Delegations, local: any LocalAccesses, breakTime: Duration?,
        whenUnreachable: WhenUnreachable = .refuse, idleTime: Duration? = ClusterMember.defaultIdleTime,
        role: Role = .accesses
    ) {
        self.join = join
        self.role = role
        self.whenUnreachable = whenUnreachable
        self.local = local
        self.idleTime = idleTime
        self.breakTime = breakTime ?? .seconds(Int64.max / 4)
        state = Mutex(State())
        let news = ChangeSignal()
        recallNews = news
        localTells = local.observeChanges { news.signal() }
        (presences, presencesSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        (changesElsewhere, changesSink) = AsyncStream.makeStream()
    }

    /// Joins, and from then on answers recalls; joins again whenever the lease is lost.
    public func start() async throws {
        let delegations = try await join()
        await begin(delegations)
    }

    /// Begins a run. `lost`: the run before, whose lease was lost: what this host's programs
    /// hold is asked for again first (`redelegate`), and nothing new is granted until then.
    private func begin(_ delegations: Delegations, after lost: Delegations? = nil) async {
        // Presence and news are the presenters' part: a run without them (etcd failing just
        // then) still coordinates accesses. Locks have no presenters.
        let news: HostNews? = role == .accesses ? HostNews(delegations: delegations) : nil
        if let news {
            if let answer = state.withLock({ $0.statusAnswer }) { news.answerStatus(with: answer) }
            do { try await news.start() } catch {
                logger.error("\(role.subject): cannot follow the other hosts' presenters yet: \(error)")
                let retrying = Task {
                    while !Task.isCancelled && !delegations.lease.isLost {
                        try? await Task.sleep(for: .seconds(1))
                        if (try? await news.start()) != nil { return }
                    }
                }
                tasks.withLock { $0.append(retrying) }
            }
        }
        follow(delegations.lease)
        let presented = state.withLock { state in
            state.delegations = delegations
            state.news = news
            state.held = [:]
            state.recalled = [:]
            state.kept = []
            // What an earlier run was doing ended with it (its tasks find themselves gone).
            state.acquiring = [:]
            state.promised = [:]
            state.givingBack = [:]
            state.givenBack = []
            if let lost {
                // Nor alone any more: the run asks the cluster, beginning with what is held here.
                state.alone = false
                writeStanding.store(WriteStanding.suspended.rawValue, ordering: .releasing)
                state.rejoining = Task { [self] in await redelegate(in: delegations, after: lost) }
            } else {
                writeStanding.store(WriteStanding.member.rawValue, ordering: .releasing)
            }
            return state.presented
        }
        var following: [Task<Void, Never>] = []
        if let news {
            await news.present(presented)
            following.append(
                Task { [self] in
                    for await presences in news.presences { presencesSink.yield(presences) }
                })
            following.append(
                Task { [self] in
                    for await batch in news.received { changesSink.yield(batch) }
                })
        }
        // A key that wants what is recalled, given back, taken back or answered ends a wait.
        delegations.observeChanges { [recallNews] in recallNews.signal() }
        let recalls = Task { [self] in
            for await recall in delegations.recalls { recalled(recall, in: delegations) }
        }
        let loss = Task { [self] in
            await delegations.lease.waitUntilLost()
            let leaving = state.withLock { state -> Bool in
                if state.delegations === delegations {
                    state.delegations = nil
                    state.news = nil
                    state.held = [:]
                    state.kept = []
                    state.rejoining = nil
                    state.lostSince = state.lostSince ?? .now
                    state.leasesLost += 1
                    if !state.alone { writeStanding.store(WriteStanding.suspended.rawValue, ordering: .releasing) }
                    // Every write open granted so far may have lost its cover: other hosts may
                    // go ahead once etcd expires the lease. Narrowed when this host joins again.
                    state.pendingRunLoss = state.losses.record(.allBut([]))
                    lastLoss.store(state.losses.last, ordering: .releasing)
                }
                return state.leaving
            }
            delegations.stop()
            news?.stop()
            recallNews.signal()  // the recalls of this run end
            if leaving { return }
            switch role {
            case .accesses:
                logger.error(
                    "cluster: this host's lease is lost: it grants nothing, and refuses writes through files open for writing (EIO), until it has joined again"
                )
            case .locks:
                logger.error(
                    "cluster locks: this host's lease of its file locks is lost: it takes no lock across hosts (ENOLCK) until it has joined again and asked again for the locks its programs hold"
                )
            }
            await rejoin(after: delegations)
        }
        let sweeping = Task { [self] in await sweepIdle(of: delegations) }
        tasks.withLock { $0 += [recalls, loss, sweeping] + following }
    }

    /// Joins again, once a second until it can. The new run asks again for what this host's
    /// programs hold before anything else, and then revokes the lost lease where etcd still has
    /// it (a host cut off for less than its TTL): its keys held this host's place in line for
    /// those items meanwhile, and would otherwise stand in the new run's way until they expired
    /// (`redelegate`).
    private func rejoin(after lost: Delegations) async {
        var attempts = 0, refusalTold = false
        while !Task.isCancelled && !state.withLock({ $0.leaving }) {
            do {
                let delegations = try await join()
                if state.withLock({ $0.leaving }) { return await delegations.leave() }
                let wasAlone = state.withLock { $0.alone }
                await begin(delegations, after: lost)
                // Left meanwhile: this run is nobody's.
                if state.withLock({ $0.leaving }) { return await delegations.leave() }
                await state.withLock({ $0.rejoining })?.value
                if wasAlone { logger.notice("\(role.subject): this host no longer coordinates alone") }
                return
            } catch {
                attempts += 1
                if case Delegations.Failure.cannotJoin(let why)? = error as? Delegations.Failure {
                    if !refusalTold {
                        logger.critical(
                            "\(role.subject): cannot join again: \(why); this host grants nothing until it can")
                    }
                    refusalTold = true
                } else if attempts == 1 && whenUnreachable == .local && !state.withLock({ $0.leaving }) {
                    state.withLock { state in
                        state.alone = true
                        writeStanding.store(WriteStanding.alone.rawValue, ordering: .releasing)
                    }
                    logger.critical(
                        "\(role.subject): etcd cannot be reached (\(error)): this host now coordinates its own programs ALONE (--cluster-unreachable local); other hosts' programs are NOT coordinated with until it joins again"
                    )
                }
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// `leaseUntil` follows `lease` from now on (a run's, as it begins).
    private func follow(_ lease: HostLease) {
        let id = lease.id
        leaseFollowed.store(id, ordering: .releasing)
        lease.observeValidity { [weak self] until in
            guard let self, leaseFollowed.load(ordering: .acquiring) == id else { return }
            leaseUntil.store(until.map(LeaseClock.nanoseconds) ?? 0, ordering: .releasing)
        }
    }

    // MARK: Joining again

    /// How long a rejoin waits for its keys to be in line before it revokes the lost lease.
    static let redelegationPatience: Duration = .seconds(5)

    /// First thing in a run after a lost lease: asks again for each item this host's programs
    /// hold (a write where any writes it, else a read), exactly that item, while the lost lease's
    /// keys still stand in line before any other host's that came since; once every new key is
    /// in line (or after `redelegationPatience`), revokes the lost lease. An item whose new key
    /// had nothing but the lost run's keys in its way, under a lease etcd still had when revoked,
    /// was this host's all along: its write opens go on. Any other item was, or may have been,
    /// another host's meanwhile (etcd had expired the lease, or another host's key came first):
    /// its write opens granted under the lost lease are fenced for good (`CoverLosses`). Each
    /// item's key stays asked for until granted: other hosts then wait for the programs that
    /// still hold it, as for any holder.
    private func redelegate(in delegations: Delegations, after lost: Delegations) async {
        var wanted: [String: Delegations.Mode] = [:]
        for holder in local.holders() where wanted[holder.path] != .write {
            wanted[holder.path] = holder.mode.writes ? .write : .read
        }
        let placements = Placements()
        for (path, mode) in wanted {
            Task { [self] in await redelegate(path, mode, in: delegations, after: lost, reporting: placements) }
        }
        let deadline = ContinuousClock.now + Self.redelegationPatience
        while placements.count < wanted.count && ContinuousClock.now < deadline && !delegations.lease.isLost {
            try? await Task.sleep(for: .milliseconds(5))
        }
        var stillHad = false
        do { stillHad = try await lost.lease.revoke() } catch {
            logger.error(
                "\(role.subject): cannot revoke the lost lease (\(error)); its keys stand in line until etcd expires it"
            )
        }
        let clear = placements.clear
        let carried = stillHad ? clear : []
        let ended = state.withLock { state -> Bool in
            guard state.delegations === delegations else { return false }
            if let number = state.pendingRunLoss {
                state.losses.narrow(number, to: .allBut(carried))
                state.pendingRunLoss = nil
            }
            state.rejoining = nil
            state.lostSince = nil
            writeStanding.store(WriteStanding.member.rawValue, ordering: .releasing)
            return true
        }
        guard ended else { return }
        logger.notice(
            "\(role.subject): \(Self.rejoinSummary(role, wanted: wanted, carried: carried, stillHad: stillHad))")
    }

    /// What a rejoin tells of the items held here, asked for again first (`wanted`); those
    /// `carried` had only the lost run's keys before them, under a lease etcd still had.
    static func rejoinSummary(
        _ role: Role, wanted: [String: Delegations.Mode], carried: Set<String>, stillHad: Bool
    ) -> String {
        switch role {
        case .accesses:
            let writing = wanted.filter { $0.value.writes }.map { $0.key }
            let fenced = writing.filter { !carried.contains($0) }.count
            var summary = "joined again; \(wanted.count) item(s) held here asked for again first"
            if !writing.isEmpty {
                summary += ", \(writing.count - fenced) open for writing go on, \(fenced) fenced"
                if fenced > 0 {
                    summary +=
                        " (writes through them fail with EIO: "
                        + (stillHad
                            ? "another host asked for them meanwhile)"
                            : "the lost lease had ended in etcd, and other hosts may have written them)")
                }
            }
            return summary
        case .locks:
            // Locks are not fenced: their programs still hold them here, and the other hosts
            // wait for them again from now; what they did meanwhile is said.
            let uncertain = wanted.keys.filter { !carried.contains($0) }.sorted()
            var summary = "joined again; \(wanted.count) file(s) locked here asked for again first"
            if !uncertain.isEmpty {
                summary +=
                    ", \(wanted.count - uncertain.count) kept throughout; \(uncertain.count) may have been locked by another host meanwhile ("
                    + (stillHad ? "another host asked for them first" : "the lost lease had ended in etcd")
                    + "): " + uncertain.prefix(8).map { $0.isEmpty ? "/" : $0 }.joined(separator: ", ")
                    + (uncertain.count > 8 ? ", ..." : "")
            }
            return summary
        }
    }

    /// Asks again for `mode` of `path` (exactly that item) for a holder here, reporting once
    /// whether only the lost run's keys were in its way when it was put in line.
    private func redelegate(
        _ path: String, _ mode: Delegations.Mode, in delegations: Delegations, after lost: Delegations,
        reporting placements: Placements
    ) async {
        let key = Key(path: path, mode: mode), lostLease = lost.lease.id, host = delegations.host
        for _ in 0..<4 {
            do throws(Delegations.Failure) {
                let token = try await delegations.acquire(path, mode) { inTheWay in
                    placements.report(path, clear: inTheWay.allSatisfy { $0.host == host && $0.lease == lostLease })
                }
                state.withLock { $0.hold(key, made: token, by: delegations) }
                return
            } catch .withdrawn {
                continue
            } catch {
                break
            }
        }
        placements.report(path, clear: false)
    }

    /// What `redelegate` learnt of each item's key as it was put in line: the first word on each.
    private final class Placements: Sendable {
        private let state = Mutex<[String: Bool]>([:])

        func report(_ path: String, clear: Bool) {
            state.withLock { if $0[path] == nil { $0[path] = clear } }
        }

        var count: Int { state.withLock { $0.count } }
        /// The items that had only the lost run's keys in their way.
        var clear: Set<String> { state.withLock { reports in Set(reports.filter { $0.value }.keys) } }
    }

    /// Whether the host coordinates alone (its lease lost, etcd unreachable, and
    /// `WhenUnreachable.local`).
    public var isAlone: Bool { state.withLock { $0.alone } }

    /// Stops answering recalls and gives every delegation back.
    public func leave() async {
        let (delegations, news) = state.withLock { state -> (Delegations?, HostNews?) in
            state.leaving = true
            state.held = [:]
            state.kept = []
            writeStanding.store(WriteStanding.suspended.rawValue, ordering: .releasing)
            defer { (state.delegations, state.news) = (nil, nil) }
            return (state.delegations, state.news)
        }
        for task in tasks.withLock({ $0 }) { task.cancel() }
        news?.stop()
        presencesSink.finish()
        changesSink.finish()
        await delegations?.leave()
        recallNews.signal()  // the recalls under way end, their lease revoked
    }

    // MARK: Presenters on other hosts

    /// Publishes the items this host's presenters present (store paths); kept for the runs to
    /// come after a lost lease.
    public func present(_ paths: Set<String>) async {
        let news = state.withLock { state -> HostNews? in
            state.presented = paths
            return state.news
        }
        await news?.present(paths)
    }

    /// Every other host's status (what `answerStatus` gives there), by host name.
    public func askStatus() async -> [String: [UInt8]] {
        await state.withLock { $0.news }?.askStatus() ?? [:]
    }

    /// What this host answers other hosts' `askStatus` with (its holders, waiters, presenters).
    public func answerStatus(with answer: @escaping @Sendable () -> [UInt8]) {
        let news = state.withLock { state in
            state.statusAnswer = answer
            return state.news
        }
        news?.answerStatus(with: answer)
    }

    /// Sends `change`, made by this host's programs, to `host`, whose presenters present it.
    public func send(_ change: HostNews.Change, to host: String) {
        state.withLock { $0.news }?.send(change, to: host)
    }

    /// This run's delegations, while the host is a member.
    var currentDelegations: Delegations? { state.withLock { $0.delegations } }

    // MARK: Granting

    /// Whether this host may grant `mode` on `path` ("" the root) now: it holds a delegation of
    /// the item or a directory above it that is not being recalled.
    public func covers(_ path: String, _ mode: Delegations.Mode) -> Bool {
        state.withLock { state in
            if state.alone { return true }
            // The lease counted lost is lost here at once, before its loss is handled; joining
            // again, nothing new is granted before the items held here are asked for again.
            if state.held.isEmpty || state.rejoining != nil || state.delegations?.lease.isLost != false { return false }
            // Nor once the lease may have ended by the clock: a daemon woken from a pause past its
            // TTL serves the requests that waited for it before its renewal has noticed anything.
            guard leaseMayBeValid, let found = state.holding(path, mode) else { return false }
            // Not idle: marked once a sweep. (Presences too: presenters inside a delegation
            // rely on it, and ask for a presence of their own only once it has gone.)
            if !found.modes.contains(.granted) { state.held[found.path]?.insert(.granted) }
            return true
        }
    }

    /// `covers`, for a request of an accessor of one of this host's holders (a process of a
    /// `coordfs coordinate` hold or its descendant, a Swift program inside its coordinated
    /// block): also from a delegation recalled but not given back yet. The recall waits for the
    /// holders that conflict with it, so the delegation stays this host's until they end; their
    /// own work inside it waiting for the recall would wait for itself (until the break time).
    /// The caller asks only for what the accessor's hold stands for.
    public func coversAccessor(_ path: String, _ mode: Delegations.Mode) -> Bool {
        if covers(path, mode) { return true }
        return state.withLock { state in
            guard !state.kept.isEmpty, state.rejoining == nil, state.delegations?.lease.isLost == false,
                leaseMayBeValid
            else {
                return false
            }
            return state.kept.contains { key in
                Modes(key.mode).serves(mode) && Delegations.contains(key.path, path, orIs: true)
            }
        }
    }

    // MARK: Fencing writes

    /// Whether writes through files open for writing may land at all now, without a lock (every
    /// write through a mount asks): the host coordinates alone, or is a member whose lease may
    /// still be valid (its last renewal's answer, plus the TTL, less the margin: by the clock,
    /// before the renewal's task has noticed). False while it is lost and while it joins again.
    /// Whether the present run's lease may still be valid by the clock (`mayAdmitWrites`'s
    /// test for a member): past it, nothing is granted from what the host holds, since etcd may
    /// have ended the lease and another host gone ahead before the renewal has noticed.
    private var leaseMayBeValid: Bool { leaseUntil.load(ordering: .acquiring) > LeaseClock.now }

    public var mayAdmitWrites: Bool {
        switch writeStanding.load(ordering: .acquiring) {
        case WriteStanding.alone.rawValue: true
        case WriteStanding.member.rawValue: leaseMayBeValid
        default: false
        }
    }

    /// The number of the last loss of cover (`CoverLosses`), without a lock: a write open
    /// stamped (or judged) at or after it has lost nothing since.
    public var lastCoverLoss: UInt64 { lastLoss.load(ordering: .acquiring) }

    /// The stamp of a write open of `path` granted now (`CoverLosses.last`): the losses it is
    /// judged against are those after it. Nil when this host does not cover writes of `path`
    /// now, whether held or kept for its holders (its lease lost, joining again, or the
    /// delegation gone since the grant): that open is fenced from the start.
    public func stampWrites(_ path: String) -> UInt64? {
        state.withLock { state in
            if state.alone { return state.losses.last }
            guard state.rejoining == nil, let delegations = state.delegations, !delegations.lease.isLost else {
                state.fencedOpens += 1
                return nil
            }
            // Any delegation that serves a write: of the item, or one that shares it.
            let covered =
                state.holding(path, .appending) != nil
                || state.kept.contains { $0.mode.writes && Delegations.contains($0.path, path, orIs: true) }
            if !covered { state.fencedOpens += 1 }
            return covered ? state.losses.last : nil
        }
    }

    /// The stamp of a read open of `path` granted now, judged as a write open's (`admitsWrites`);
    /// nil when this host holds nothing that serves reads of `path` (a read another host let
    /// past its programs), whose reads nothing takes away: they are not fenced. A host alone
    /// stamps every read.
    public func stampReads(_ path: String) -> UInt64? {
        state.withLock { state in
            if state.alone { return state.losses.last }
            guard state.rejoining == nil, let delegations = state.delegations, !delegations.lease.isLost else {
                return nil
            }
            let covered =
                state.holding(path, .read) != nil
                || state.kept.contains {
                    Modes($0.mode).serves(.read) && Delegations.contains($0.path, path, orIs: true)
                }
            return covered ? state.losses.last : nil
        }
    }

    /// What becomes of writes through a file open for writing.
    public enum WriteAdmission: Sendable, Equatable {
        /// They land; no loss of cover since `through` reaches it (the open's new stamp).
        case admitted(through: UInt64)
        /// Not now: the lease may have ended, and the host has not joined again (or is joining).
        case suspended
        /// Never again through this open: a loss of cover since its stamp reaches its item.
        case fenced
    }

    /// Judges writes through a file open for writing of `path` ("" the store's root), stamped
    /// `stamp` (`stampWrites`, or the last `admitted(through:)`). While the host coordinates
    /// alone they land, judged again once it has joined. `ofAnOpenFile`: a fenced answer is an
    /// open file's, fenced for good (`Standing.fencedOpens`); not so for a hold's cover judged
    /// (at its release, or at a request of its accessor).
    public func admitsWrites(_ path: String, since stamp: UInt64, ofAnOpenFile: Bool = true) -> WriteAdmission {
        guard mayAdmitWrites else { return .suspended }
        return state.withLock { state in
            if state.alone { return .admitted(through: stamp) }
            guard state.rejoining == nil, state.delegations != nil else { return .suspended }
            guard let through = state.losses.judge(path, since: stamp) else {
                if ofAnOpenFile { state.fencedOpens += 1 }
                return .fenced
            }
            return .admitted(through: through)
        }
    }

    /// Whether another host (or an earlier run of this one) has a key at, inside or around
    /// `path`, of any mode (a presence too): such an item may be asked for while it is open
    /// here, so its writes must reach the mount to be refused (no kernel passthrough). True
    /// when this host is no member now.
    public func othersInterested(in path: String) -> Bool {
        guard let delegations = state.withLock({ $0.delegations }) else { return true }
        return delegations.othersHaveKeys(around: path)
    }

    /// This host's standing in the cluster, for `coordfs status`.
    public struct Standing: Sendable, Equatable {
        public enum Lease: String, Sendable {
            /// A member: its lease is valid for `validFor` more, unless renewed.
            case held
            /// Lost: nothing is granted and no write through an open file lands.
            case lost
            /// Joined again: asking for what its programs hold, before it grants anything new.
            case rejoining
            /// Lost, and coordinating its own programs alone (`WhenUnreachable.local`).
            case alone
        }
        public var lease: Lease
        /// While held: how long the lease is known valid still.
        public var validFor: Duration?
        /// Since the lease was lost (lost, rejoining or alone).
        public var lostFor: Duration?
        /// Leases lost since the host first joined.
        public var leasesLost: Int
        /// Write opens fenced (their writes refused for good) since the host first joined.
        public var fencedOpens: Int
    }

    public var standing: Standing {
        state.withLock { state in
            let lostFor = state.lostSince.map { ContinuousClock.now - $0 }
            let lease: Standing.Lease
            if state.alone {
                lease = .alone
            } else if state.rejoining != nil {
                lease = .rejoining
            } else if let delegations = state.delegations, !delegations.lease.isLost {
                lease = .held
            } else {
                lease = .lost
            }
            return Standing(
                lease: lease, validFor: lease == .held ? state.delegations?.lease.validFor : nil,
                // (Lost by the clock a moment before the loss is handled: just now.)
                lostFor: lease == .held ? nil : lostFor ?? .zero, leasesLost: state.leasesLost,
                fencedOpens: state.fencedOpens)
        }
    }

    /// Whether a recall of one of this host's delegations at or above `path`, kept while the
    /// holders it waits for go on (`coversAccessor`), waits for a holder of `mode` at `path`:
    /// another host's key that conflicts with such a holder wants it. A holder there that asks
    /// for what the kept delegation does not serve would queue behind the host that waits for it.
    public func recallWaits(for path: String, _ mode: Delegations.Mode) -> Bool {
        state.withLock { state in
            guard !state.kept.isEmpty, state.rejoining == nil, state.delegations?.lease.isLost == false,
                leaseMayBeValid
            else {
                return false
            }
            let holder = Delegations.Entry(path: path, host: "", mode: mode, revision: 0, lease: 0)
            return state.kept.contains { key in
                Delegations.contains(key.path, path, orIs: true)
                    && (state.recalled[key] ?? []).contains { Delegations.conflict(holder, $0) }
            }
        }
    }

    /// The other hosts' keys, held or waiting, in the way of `mode` of `path` now (none while
    /// this host is not a member).
    public func othersInTheWay(of path: String, _ mode: Delegations.Mode) -> [Delegations.Entry] {
        currentDelegations?.blockers(of: path, mode) ?? []
    }

    /// Waits until `covers(path, mode)` held at the moment the delegation was granted (a recall
    /// may end it again at once: the caller asks `covers` after it has taken what it needs).
    /// Cancelled, it stops waiting; the last waiter of a key not granted yet takes the key back,
    /// so that no host is recalled for a request nobody waits for any more.
    /// `request`: the access asked for, in the words of the hosts' coordination
    /// (`Delegations.Entry.request`): a host the key recalls begins it as its own program's,
    /// and may answer it itself (`Delegations.Failure.answered`: let past its holders, or
    /// refused there).
    @discardableResult
    public func acquire(
        _ path: String, _ mode: Delegations.Mode, request: String = ""
    ) async throws(Delegations.Failure) -> GrantPromise? {
        try await acquire(path, mode, exactly: false, request: request)
    }

    /// Holds a presence of `path` (exactly that item, whatever else covers it): a read interest
    /// of this host's presenters, which another host's write recalls, and another host's read
    /// asks (`askPresenters`), so that they are asked first. A recall of it waits for this
    /// host's conflicting programs however long they hold (it breaks nobody: a presenter only
    /// wants to be asked).
    public func acquirePresence(_ path: String) async throws(Delegations.Failure) {
        try await acquire(path, .presence, exactly: true, request: "")?.redeem()
    }

    /// Whether this host holds a presence of exactly `path` (a host alone needs none).
    public func holdsPresence(_ path: String) -> Bool {
        state.withLock { state in state.alone || state.held[path]?.contains(.presence) == true }
    }

    /// Whether another host's presenters present `path` itself: a read of it asks them first
    /// (`askPresenters`). Cheap while no other host presents anything.
    public func othersPresent(at path: String) -> Bool {
        currentDelegations?.othersPresent(at: path) ?? false
    }

    /// Whether another host presents anything in the store (no lock of the replica's).
    public var othersPresentAnything: Bool { currentDelegations?.othersPresentAnything ?? false }

    /// Asks the other hosts whose presenters present `path` to ask them as for a read of this
    /// host's (`request`, as `acquire`), before this host takes what the read needs: a question
    /// (`Delegations.Mode.asking`) that only their presences are in the way of, and which each
    /// answers once its presenters have (a presenter's save lands meanwhile, under whatever its
    /// host holds). Returns once they have, or at once when nobody else presents it; throws
    /// `.answered(.refused)` when one refused it there.
    public func askPresenters(of path: String, request: String) async throws(Delegations.Failure) {
        await afterRejoining()
        for _ in 0..<4 {
            let step = state.withLock { state -> Delegations? in state.alone ? nil : state.delegations }
            guard let delegations = step else {
                if isAlone { return }
                throw .leaseLost
            }
            if delegations.lease.isLost { throw .leaseLost }
            if !delegations.othersPresent(at: path) { return }
            do throws(Delegations.Failure) {
                _ = try await delegations.acquire(path, .asking, request: request)
                try? await delegations.release(path, .asking)
                return
            } catch .withdrawn {
                continue  // another request of this host asked the same and was answered first
            }
        }
    }

    /// Gives back the presence of `path`: its presenters are gone.
    public func releasePresence(_ path: String) async {
        let delegations = state.withLock { state -> Delegations? in
            state.stopHolding(.presence, at: path)
            return state.delegations
        }
        try? await delegations?.release(path, .presence)
    }

    /// Returns once the present run has asked again for what was held here (at once, unless
    /// it is joining again after a lost lease).
    private func afterRejoining() async {
        await state.withLock({ $0.rejoining })?.value
    }

    private enum Step {
        case lost
        /// The key is being given back: asked for again once it is.
        case after(Task<Void, Never>)
        case waiting(Key, UInt64, Ending, Delegations)
    }

    /// `exactly`: of the item itself, not of a directory above it. Returns the request's share
    /// of the grant's promise when it waited for a grant (`GrantPromise`).
    @discardableResult
    private func acquire(
        _ path: String, _ mode: Delegations.Mode, exactly: Bool, request: String
    ) async throws(Delegations.Failure) -> GrantPromise? {
        await afterRejoining()
        // A presence is held of its item whatever else covers it: another host's read asks it.
        func done() -> Bool { mode == .presence ? holdsPresence(path) : covers(path, mode) }
        // A key withdrawn under its waiters (taken back, or deleted as it was read) is asked for again.
        for _ in 0..<16 {
            if done() { return nil }
            if Task.isCancelled { throw .withdrawn }
            let step = state.withLock { current -> Step in
                guard let delegations = current.delegations, !delegations.lease.isLost, leaseMayBeValid else {
                    return .lost
                }
                let key =
                    exactly
                    ? Key(path: path, mode: mode) : key(for: path, mode, in: delegations, avoiding: current.recalled)
                if let givingBack = current.givingBack[key] { return .after(givingBack) }
                if current.acquiring[key] == nil {
                    current.acquires += 1
                    current.acquiring[key] = makeAcquiring(
                        key, number: current.acquires, for: path, mode, request: request, in: delegations)
                }
                current.acquiring[key]!.waiters += 1
                return .waiting(key, current.acquiring[key]!.number, current.acquiring[key]!.ending, delegations)
            }
            switch step {
            case .lost:
                throw .leaseLost
            case .after(let givingBack):
                await givingBack.value
            case .waiting(let key, let number, let ending, let delegations):
                do {
                    try await ending.wait()
                    leaveWaiting(key, number, delegations, abandoned: false)
                    let promise = share(of: key, number)
                    if done() { return promise }
                    promise?.redeem()
                } catch is CancellationError {
                    leaveWaiting(key, number, delegations, abandoned: true)
                    throw .withdrawn
                } catch Delegations.Failure.withdrawn {
                    leaveWaiting(key, number, delegations, abandoned: false)
                } catch {
                    leaveWaiting(key, number, delegations, abandoned: false)
                    throw (error as? Delegations.Failure) ?? .leaseLost
                }
            }
        }
        throw .withdrawn
    }

    /// The acquire of `key` for `path` (its own path, or a directory above it); made under the
    /// state's lock, its task waits for it.
    private func makeAcquiring(
        _ key: Key, number: UInt64, for path: String, _ mode: Delegations.Mode, request: String,
        in delegations: Delegations
    ) -> Acquiring {
        let ending = Ending()
        let task = Task { [self] in
            var token: Int64?
            var result: Result<Void, Delegations.Failure> = .success(())
            do throws(Delegations.Failure) {
                if key.path == path {
                    // Of the item itself: a host it recalls begins the request as its own.
                    token = try await delegations.acquire(key.path, key.mode, request: key.mode == mode ? request : "")
                } else if let granted = try await delegations.acquireUnlessBlocked(key.path, key.mode) {
                    token = granted
                } else {
                    // A directory asked for on what the replica knew, with another host's key
                    // in its way after all: the item alone is asked for instead.
                    try await acquire(path, mode, exactly: true, request: request)
                }
            } catch {
                result = .failure(error)
            }
            let takeBack = state.withLock { state -> Bool in
                let entry = state.acquiring[key]
                let mine = entry?.number == number
                if mine { state.acquiring[key] = nil }
                guard let token, case .success = result else {
                    if state.promised[key]?.number == number { state.promised[key] = nil }
                    return false
                }
                // Given up by its requests, or ended with its run: taken back, not held.
                if !mine || entry?.abandoned == true || state.delegations !== delegations {
                    if state.promised[key]?.number == number { state.promised[key] = nil }
                    return true
                }
                // Promised to its waiters; if a recall came first, it made the promise (or
                // the promise has run out already, and the grant is not held).
                if let entry, entry.waiters > 0, state.recalled[key] == nil {
                    state.promised[key] = Promise(
                        number: number, waiting: entry.waiters, until: .now + Self.promiseLimit)
                }
                state.hold(key, made: token, by: delegations, for: number)
                return false
            }
            if takeBack {
                try? await delegations.release(key.path, key.mode)
                result = .failure(.withdrawn)
            }
            // A recall may wait for this grant to cover the holders that go on (`giveBack`).
            recallNews.signal()
            ending.finish(result)
        }
        return Acquiring(number: number, task: task, ending: ending)
    }

    /// One waiter of an acquire less; the last to give up (`abandoned`) before the grant takes
    /// the key back.
    private func leaveWaiting(_ key: Key, _ number: UInt64, _ delegations: Delegations, abandoned: Bool) {
        let task = state.withLock { state -> Task<Void, Never>? in
            guard var entry = state.acquiring[key], entry.number == number else { return nil }
            entry.waiters -= 1
            defer { state.acquiring[key] = entry }
            guard abandoned, entry.waiters <= 0, !entry.abandoned else { return nil }
            entry.abandoned = true
            return entry.task
        }
        guard let task else { return }
        task.cancel()  // an item asked for in its place is given up too
        Task { try? await delegations.release(key.path, key.mode) }
    }

    /// How long a request that does not wait (O_NONBLOCK) waits at most for the hosts in its
    /// way to answer: one that holds the item idle gives it back, and one whose programs hold
    /// it refuses, within milliseconds; one that does not answer is cut off, or gone.
    static let idlePatience: Duration = .seconds(1)

    /// `acquire` for a request that does not wait for another host's programs (O_NONBLOCK):
    /// true once this host may grant it, having waited only for the hosts that hold it idle to
    /// give it back; false, having taken nothing, when another host's programs hold what `path`
    /// needs (that host refuses it), another request waits for it already (here or on another
    /// host), or a host in its way did not answer within `idlePatience`.
    public func acquireAtOnce(
        _ path: String, _ mode: Delegations.Mode, request: String = ""
    ) async throws(Delegations.Failure) -> Bool {
        await afterRejoining()
        var waitedForIdle = 0
        while true {
            if covers(path, mode) { return true }
            let step = state.withLock { current -> AtOnce in
                guard let delegations = current.delegations, !delegations.lease.isLost, leaseMayBeValid else {
                    return .lost
                }
                let key = key(for: path, mode, in: delegations, avoiding: current.recalled)
                let exact = Key(path: path, mode: mode)
                // Being given back idle (nobody else wants it): asked for again once it is.
                if let idle = [key, exact].compactMap({ current.recalled[$0] == nil ? current.givingBack[$0] : nil })
                    .first
                {
                    return .afterIdle(idle)
                }
                let busy = [key, exact].contains { current.givingBack[$0] != nil || current.acquiring[$0] != nil }
                return busy ? .busy : .asking(key, delegations)
            }
            switch step {
            case .lost:
                throw .leaseLost
            case .busy:
                return false
            case .afterIdle(let idle):
                waitedForIdle += 1
                if waitedForIdle > 4 { return false }
                await idle.value
            case .asking(let key, let delegations):
                return try await acquireAtOnce(path, mode, as: key, request: request, in: delegations)
            }
        }
    }

    private enum AtOnce {
        case lost
        /// Another request waits for it already (here, or the recall of another host's).
        case busy
        case afterIdle(Task<Void, Never>)
        case asking(Key, Delegations)
    }

    private func acquireAtOnce(
        _ path: String, _ mode: Delegations.Mode, as key: Key, request: String,
        in delegations: Delegations
    ) async throws(Delegations.Failure) -> Bool {
        // A directory asked for on the replica's word recalls nobody; the item itself recalls
        // the hosts in its way, and is granted once those that hold it idle have given it back.
        let exact = Key(path: path, mode: mode)
        if key != exact, let token = try await delegations.acquireUnlessBlocked(key.path, key.mode) {
            state.withLock { $0.hold(key, made: token, by: delegations) }
            return covers(path, mode)
        }
        guard
            let token = try await delegations.acquireIfIdle(
                path, mode, patience: Self.idlePatience, request: request)
        else {
            return false
        }
        state.withLock { $0.hold(exact, made: token, by: delegations) }
        return covers(path, mode)
    }

    /// The key to ask for `mode` of `path`: of its outermost directory nobody else wants
    /// (`delegationPath`). A deletion, move or replacement, or a write that shares the item
    /// (appending, in place), is asked for as a write of such a directory when there is one
    /// (nobody else has anything in it to be asked about), else of the item itself in its own
    /// mode, so that the hosts it recalls know what is being done, and writers that share the
    /// item keep it beside each other; writers that share, of the outermost directory where
    /// only such writers of other hosts are (`DelegationIndex.outermostFree`).
    private func key(
        for path: String, _ mode: Delegations.Mode, in delegations: Delegations,
        avoiding recalled: [Key: [Delegations.Entry]]
    ) -> Key {
        guard mode.isOfTheItem else {
            return Key(path: delegationPath(for: path, mode, in: delegations, avoiding: recalled), mode: mode)
        }
        let directory = delegationPath(for: path, .write, in: delegations, avoiding: recalled)
        if directory != path { return Key(path: directory, mode: .write) }
        // Where other hosts' writers that share are all there is (hosts making files side by
        // side in one directory), one key of the directory in that mode serves every file this
        // host makes and writes there: no round trip to etcd for each.
        guard mode.sharesWriters else { return Key(path: path, mode: mode) }
        return Key(path: delegationPath(for: path, mode, in: delegations, avoiding: recalled), mode: mode)
    }

    /// The delegation to ask for `path`: its outermost directory (or itself) in which and
    /// above which no other host has a key that conflicts; `path` itself when there is none.
    /// Never a key of this host being recalled.
    /// (The replica's index answers in one walk down the path, however many keys the store has.)
    private func delegationPath(
        for path: String, _ mode: Delegations.Mode, in delegations: Delegations,
        avoiding recalled: [Key: [Delegations.Entry]]
    ) -> String {
        if path.isEmpty { return path }
        return delegations.outermostFree(for: path, mode) { recalled[Key(path: $0, mode: mode)] != nil }
    }

    // MARK: Recalls

    private func recalled(_ recall: Delegations.Recall, in delegations: Delegations) {
        let key = Key(path: recall.held.path, mode: recall.held.mode)
        state.withLock { state in
            guard state.delegations === delegations else { return }
            // The replica's recall of a key given back already, made before it saw the key go:
            // nothing to give, and nothing to keep.
            if state.givenBack.contains(GivenBack(key: key, revision: recall.held.revision)) { return }
            let first = state.recalled[key] == nil
            state.recalled[key, default: []].append(recall.wanted)
            // A question takes nothing: what it asks of is granted from meanwhile, as before.
            // Granted to requests that have yet to use it: they do first (`giveBack`).
            if recall.wanted.mode != .asking && !state.isPromised(key) { state.stopGranting(from: key) }
            if first {
                let revision = recall.held.revision
                state.givingBack[key] = Task { [self] in await giveBack(key, made: revision, of: delegations) }
            }
        }
        recallNews.signal()  // a recall under way of the key looks at the new key at once
    }

    /// Serves the recalls of `key` (as made at `revision`) and gives it back, or keeps it where
    /// this host answered the requests that wanted it itself.
    ///
    /// Each other host's request meets this host's programs and presenters as the same access
    /// of a program here would (`LocalAccesses.beginAccess`, its kind and options as asked):
    /// the delegation goes back once that access is granted here (presenters answered, no
    /// holder here in its way; those that share the item with it, an appender beside a
    /// reader, keep narrower delegations that share it too), or at the break time. One let
    /// past the holders here (a settled writer), or refused here (a presenter's refusal), or a
    /// question once its presenters have answered, is answered on its own key
    /// (`Delegations.answer`), and the delegation stays this host's.
    ///
    /// Between looks it waits for news (`recallNews`): the other host's program waits for this,
    /// and a look every few milliseconds would add half that to every handover on average.
    private func giveBack(_ key: Key, made revision: Int64, of delegations: Delegations) async {
        await keepPromise(key, of: delegations)
        var serving = Serving(deadline: ContinuousClock.now + breakTime)
        while true {
            // Read before looking: news from here on cuts the wait short.
            let seen = recallNews.changes
            guard let all = stillWanted(key, of: delegations) else {
                endAccesses(serving.began)
                return  // kept
            }
            if delegations.lease.isLost { break }
            guard let patience = await serve(key, all, &serving, of: delegations) else { break }
            await recallNews.wait(after: seen, atMost: patience)
        }
        await handOver(key, made: revision, of: delegations)
        endAccesses(serving.began)
    }

    /// Waits until the requests `key` was granted to have used it, or the promise has run out
    /// (`GrantPromise`); then grants from it no more, as the recalls ask.
    private func keepPromise(_ key: Key, of delegations: Delegations) async {
        while true {
            let seen = recallNews.changes
            let left = state.withLock { state -> Duration? in
                guard let promise = state.promised[key] else { return nil }
                let left = promise.until - .now
                if left <= .zero || delegations.lease.isLost {
                    state.promised[key] = nil
                    return nil
                }
                return left
            }
            guard let left else { break }
            await recallNews.wait(after: seen, atMost: left)
        }
        state.withLock { state in
            guard state.delegations === delegations,
                state.recalled[key]?.contains(where: { $0.mode != .asking }) == true
            else { return }
            state.stopGranting(from: key)
        }
    }

    /// A waiting request's share of the promise of `key`, granted by its acquire `number`: nil
    /// when there is none (the grant was not held, or the promise ran out).
    private func share(of key: Key, _ number: UInt64) -> GrantPromise? {
        guard state.withLock({ $0.promised[key]?.number == number }) else { return nil }
        return GrantPromise { [weak self] in self?.redeem(key, number) }
    }

    private func redeem(_ key: Key, _ number: UInt64) {
        let kept = state.withLock { state -> Bool in
            guard var promise = state.promised[key], promise.number == number else { return false }
            promise.waiting -= 1
            state.promised[key] = promise.waiting > 0 ? promise : nil
            return promise.waiting <= 0
        }
        if kept { recallNews.signal() }
    }

    /// What a recall's service of a delegation has done so far (`giveBack`).
    private struct Serving {
        /// When the holders here that conflict with the recall are broken (`breakTime`).
        let deadline: ContinuousClock.Instant
        /// The other hosts' accesses begun here, by their keys' revisions; and in order.
        var begun: [Int64: any LocalAccess] = [:]
        var began: [Delegations.Entry] = []
        /// Requests answered on their keys, and requests that do not wait refused.
        var answered: Set<Int64> = []
        var refused: Set<Int64> = []
        /// Delegations asked for the holders here that go on.
        var asked: Set<Key> = []
        var broken = false
        /// A write to etcd failed: the next look comes soon, told or not.
        var retrying = false
    }

    /// How long a recall waits at most before it looks again, unless news comes first.
    static let recallPatience: Duration = .milliseconds(100)
    /// How often a recall looks again while it waits for what `local` does not tell of.
    static let recallLooks: Duration = .milliseconds(10)

    /// The other hosts' keys that still want `key`: one taken back (a host that asked for a
    /// whole directory and narrowed its request), answered, or whose host's lease ended, does
    /// not. Nil when none does: the delegation is kept, and granted from again.
    private func stillWanted(_ key: Key, of delegations: Delegations) -> [Delegations.Entry]? {
        state.withLock { state -> [Delegations.Entry]? in
            guard state.delegations === delegations else { return [] }
            let wanted = (state.recalled[key] ?? []).filter { delegations.stillWants($0) }
            if wanted.isEmpty {
                state.recalled[key] = nil
                state.givingBack[key] = nil
                // Granted from again; a question alone never stopped it (`recalled`).
                if state.kept.remove(key) != nil { state.held[key.path, default: []].insert(Modes(key.mode)) }
                return nil
            }
            state.recalled[key] = wanted
            return wanted
        }
    }

    /// One look at the recall of `key` by `all`, the other hosts' keys that still want it:
    /// refuses those that do not wait where a program here is in their way, begins the others
    /// here and answers them as this host's coordination does, breaks the holders here in
    /// their way at the deadline, and asks for delegations of their own for those that go on.
    /// Nil once the delegation may go; else how long to wait before looking again.
    private func serve(
        _ key: Key, _ all: [Delegations.Entry], _ serving: inout Serving, of delegations: Delegations
    ) async -> Duration? {
        let holders = local.holders().map {
            Delegations.Entry(path: $0.path, host: "", mode: $0.mode, revision: 0, lease: 0)
        }
        // A request that does not wait (O_NONBLOCK) with a program of this host in its way
        // is refused: it fails at once, as it would on one host, and nobody here is asked.
        // The key is kept once the replica has seen the refusals (`stillWanted`).
        let refusing = all.filter { other in other.asksIdle && holders.contains { Delegations.conflict($0, other) } }
        for other in refusing where serving.refused.insert(other.revision).inserted {
            try? await delegations.refuse(other)
        }
        let wanted = all.filter { !refusing.contains($0) }
        if wanted.isEmpty { return patience(awaiting: holders.isEmpty ? [] : .holders, &serving) }
        for other in wanted where serving.begun[other.revision] == nil && !Self.queuedBehind(other, in: wanted) {
            serving.begun[other.revision] = beginAccess(for: other)
            serving.began.append(other)
        }
        let (waiting, unanswered) = await answers(to: wanted, &serving, of: delegations)
        let conflicting = holders.filter { holder in wanted.contains { Delegations.conflict(holder, $0) } }
        // Another host's presence breaks nobody here: its presenters only want to be asked;
        // nor does a question, which waits for presenters only.
        let pastDeadline =
            ContinuousClock.now >= serving.deadline && wanted.contains { $0.mode != .presence && $0.mode != .asking }
        if (conflicting.isEmpty && !waiting) || pastDeadline {
            if !conflicting.isEmpty && !serving.broken {
                serving.broken = true
                broke(key, for: wanted, past: conflicting.count, of: delegations)
            }
            // Holders that go on need delegations of their own before this one goes.
            let uncovered = holders.filter { holder in
                !conflicting.contains(holder) && Delegations.contains(key.path, holder.path, orIs: true)
                    && !covers(holder.path, holder.mode)
            }
            if uncovered.isEmpty { return nil }
            for holder in uncovered where serving.asked.insert(Key(path: holder.path, mode: holder.mode)).inserted {
                Task { [self] in try? await acquire(holder.path, holder.mode) }
            }
        }
        // While an access begun here waits, it waits for the holders here in its way itself.
        return patience(awaiting: unanswered ? .answers : holders.isEmpty ? [] : .holders, &serving)
    }

    /// Whether `other` conflicts with an earlier request in `wanted` that is met here holding
    /// the item (a read or a write: a presence or a question holds nothing). It is not met
    /// here: begun, it would wait for the earlier one's access begun here, which lasts until
    /// the delegation goes, and the delegation would wait for it: a deadlock until the break
    /// time. Once the delegation has gone, it waits for the earlier request's host instead, in
    /// the store's order, and that host meets it.
    private static func queuedBehind(_ other: Delegations.Entry, in wanted: [Delegations.Entry]) -> Bool {
        func holds(_ entry: Delegations.Entry) -> Bool { entry.mode != .presence && entry.mode != .asking }
        return holds(other)
            && wanted.contains { $0.revision < other.revision && holds($0) && Delegations.conflict($0, other) }
    }

    /// What this host answers each of `wanted`, as it would its own program's: not yet; granted
    /// (the delegation may go); or on the request's own key. Whether any is still to go
    /// (`waiting`: not yet answered here, or answered on its key and not yet seen so in the
    /// replica), and whether any is not yet answered here (`unanswered`).
    private func answers(
        to wanted: [Delegations.Entry], _ serving: inout Serving, of delegations: Delegations
    ) async -> (waiting: Bool, unanswered: Bool) {
        var waiting = false, unanswered = false
        for other in wanted {
            let answer = serving.begun[other.revision]?.answer ?? .granted
            if let onKey = Self.answerOnKey(answer, to: other) {
                waiting = true  // until the replica has the answer (`stillWants`)
                guard !serving.answered.contains(other.revision) else { continue }
                if (try? await delegations.answer(other, onKey)) != nil {
                    serving.answered.insert(other.revision)
                } else {
                    serving.retrying = true
                }
            } else if answer == .waiting {
                waiting = true
                unanswered = true
            }
        }
        return (waiting, unanswered)
    }

    /// How long a recall waits before it looks again, unless news comes first: a moment where
    /// it waits for what `local` does not tell of (`awaiting`), or retries a write etcd did not
    /// take; else `recallPatience`, for what no news reaches (a lease that ran out by the
    /// clock). Never past the deadline, while it is ahead.
    private func patience(awaiting: LocalChanges, _ serving: inout Serving) -> Duration {
        let told = localTells.isSuperset(of: awaiting) && !serving.retrying
        serving.retrying = false
        let pause = told ? Self.recallPatience : Self.recallLooks
        let left = serving.deadline - ContinuousClock.now
        return left > .zero ? min(pause, left) : pause
    }

    /// A recall of `key` broken at the break time, past `holders` holders here that conflict
    /// with `wanted`: their write opens lose their cover, refused from now.
    private func broke(_ key: Key, for wanted: [Delegations.Entry], past holders: Int, of delegations: Delegations) {
        let given = wanted.filter { $0.mode != .presence }.map(\.path)
        state.withLock { state in
            guard state.delegations === delegations else { return }
            _ = state.losses.record(.around(given))
            lastLoss.store(state.losses.last, ordering: .releasing)
        }
        logger.warning(
            "\(role.subject): recall of \(key.mode.writes ? "write" : "read") \(key.path.isEmpty ? "/" : key.path) by \(Set(wanted.map(\.host)).sorted().joined(separator: ", ")) broken after the break time: \(holders) holder(s) here still hold; writes through their open files are refused (EIO) from now"
        )
    }

    /// Gives `key` (as made at `revision`) back, its recall served.
    private func handOver(_ key: Key, made revision: Int64, of delegations: Delegations) async {
        // Going: from here the holders' accessors wait for a delegation as anyone does.
        state.withLock { state in
            guard state.delegations === delegations else { return }
            state.kept.remove(key)
        }
        if !delegations.lease.isLost {
            do { try await delegations.release(key.path, key.mode) } catch {
                logger.error("\(role.subject): cannot give back \(key.path.isEmpty ? "/" : key.path): \(error)")
            }
        }
        state.withLock { state in
            if state.delegations === delegations {
                state.recalled[key] = nil
                state.givingBack[key] = nil
                if state.givenBack.count > 4096 { state.givenBack = [] }
                state.givenBack.insert(GivenBack(key: key, revision: revision))
            }
        }
    }

    /// The answer written on another host's key (`wanted`) rather than given by handing this
    /// host's delegation over: a request let past or refused here, and a question once its
    /// presenters here have answered. Nil: not yet, or given by the delegation going back.
    static func answerOnKey(_ answer: LocalAnswer, to wanted: Delegations.Entry) -> Delegations.Answer? {
        switch answer {
        case .waiting: nil
        case .granted: wanted.mode == .asking ? .granted : nil
        case .passed: .passed
        case .refused(let errno): .refused(errno)
        }
    }

    /// Begins here the access `wanted` asks for, or shares the one another recall began for it.
    private func beginAccess(for wanted: Delegations.Entry) -> any LocalAccess {
        let key = Begun.Key(host: wanted.host, revision: wanted.revision)
        func joined(_ state: inout State) -> (any LocalAccess)? {
            guard var found = state.begun[key] else { return nil }
            found.users += 1
            state.begun[key] = found
            return found.access
        }
        if let shared = state.withLock({ joined(&$0) }) { return shared }
        // Begun outside the lock: it reaches the host's own coordination.
        let access = local.beginAccess(for: wanted)
        let (kept, spare) = state.withLock { state -> (any LocalAccess, (any LocalAccess)?) in
            if let shared = joined(&state) { return (shared, access) }
            state.begun[key] = Begun(access: access, users: 1)
            return (access, nil)
        }
        spare?.end()
        return kept
    }

    /// One recall is done with the accesses begun for `wanted`: the last ends each.
    private func endAccesses(_ wanted: [Delegations.Entry]) {
        let ending = state.withLock { state -> [any LocalAccess] in
            wanted.compactMap { entry -> (any LocalAccess)? in
                let key = Begun.Key(host: entry.host, revision: entry.revision)
                guard var found = state.begun[key] else { return nil }
                found.users -= 1
                if found.users > 0 {
                    state.begun[key] = found
                    return nil
                }
                state.begun[key] = nil
                return found.access
            }
        }
        for access in ending { access.end() }
    }

    // MARK: Idle delegations

    /// Every `idleTime`, gives back the delegations of this run that nothing here used since
    /// the sweep before: no request was granted from them (`covers`, `Modes.granted`) and no
    /// holder is at or inside them. Presences stay (they are the presenters', given back when
    /// those go), and so does what is being asked for, recalled or given back already.
    private func sweepIdle(of delegations: Delegations) async {
        guard let idleTime else { return }
        while !Task.isCancelled {
            try? await Task.sleep(for: idleTime)
            let busy = Self.paths(holding: local.holders())
            let going = state.withLock { state -> Bool in
                guard state.delegations === delegations, !state.leaving else { return false }
                if state.alone || delegations.lease.isLost { return true }
                var idle: [String: Modes] = [:]
                var used: [String] = []
                for (path, modes) in state.held {
                    if modes.contains(.granted) {
                        used.append(path)
                        continue
                    }
                    let giving = modes.intersection([.read, .write, .appending, .inPlace])
                    guard !giving.isEmpty, !busy.contains(path) else { continue }
                    let keys = Self.keys(giving, at: path)
                    guard
                        !keys.contains(where: {
                            state.acquiring[$0] != nil || state.givingBack[$0] != nil
                                || state.recalled[$0] != nil || state.kept.contains($0)
                        })
                    else { continue }
                    idle[path] = giving
                }
                for path in used { state.held[path]?.remove(.granted) }
                guard !idle.isEmpty else { return true }
                // From here nothing new is granted from them; asked for again, they wait for this.
                for (path, modes) in idle { state.stopHolding(modes, at: path) }
                let task = Task { [self, idle] in await giveBackIdle(idle, of: delegations) }
                for (path, modes) in idle {
                    for key in Self.keys(modes, at: path) { state.givingBack[key] = task }
                }
                return true
            }
            if !going { return }
        }
    }

    /// Gives back `idle` (taken out of `held` by `sweepIdle`), but for what a holder came to
    /// hold meanwhile: a request granted from one just before the sweep took its claim first
    /// (the mount asks `covers` once it holds its claim), and is seen here.
    private func giveBackIdle(_ idle: [String: Modes], of delegations: Delegations) async {
        let busy = Self.paths(holding: local.holders())
        let going = state.withLock { state -> [(path: String, mode: Delegations.Mode)] in
            var going: [(path: String, mode: Delegations.Mode)] = []
            for (path, modes) in idle {
                let keys = Self.keys(modes, at: path)
                if busy.contains(path) {
                    // Held again, unless recalled meanwhile (that recall gives it back).
                    if state.delegations === delegations && !keys.contains(where: { state.recalled[$0] != nil }) {
                        state.held[path, default: []].formUnion(modes.union(.granted))
                    }
                } else {
                    going += keys.map { (path: $0.path, mode: $0.mode) }
                }
            }
            return going
        }
        if !going.isEmpty && !delegations.lease.isLost {
            do { try await delegations.release(going) } catch {
                logger.error("\(role.subject): cannot give back \(going.count) idle delegation(s): \(error)")
            }
        }
        state.withLock { state in
            guard state.delegations === delegations else { return }
            for (path, modes) in idle {
                for key in Self.keys(modes, at: path) where state.recalled[key] == nil { state.givingBack[key] = nil }
            }
        }
    }

    /// The keys a delegation of `modes` at `path` may be: a write delegation is one of four.
    private static func keys(_ modes: Modes, at path: String) -> [Key] {
        var keys: [Key] = []
        if modes.contains(.read) { keys.append(Key(path: path, mode: .read)) }
        if modes.contains(.appending) { keys.append(Key(path: path, mode: .appending)) }
        if modes.contains(.inPlace) { keys.append(Key(path: path, mode: .inPlace)) }
        if modes.contains(.write) {
            keys += [Delegations.Mode.write, .deleting, .moving, .replacing].map { Key(path: path, mode: $0) }
        }
        return keys
    }

    /// The paths at or around which a holder holds: each holder's, and every directory above it.
    private static func paths(holding holders: [(path: String, mode: Delegations.Mode)]) -> Set<String> {
        var paths: Set<String> = []
        for holder in holders {
            var path = Substring(holder.path)
            while paths.insert(String(path)).inserted && !path.isEmpty {
                path = path.lastIndex(of: "/").map { path[..<$0] } ?? ""
            }
        }
        return paths
    }
}

extension Delegations {
    /// `contains`, or the same item.
    static func contains(_ outer: String, _ inner: String, orIs same: Bool) -> Bool {
        (same && outer == inner) || contains(outer, inner)
    }
}
