import CoordinationRuntime
import Dispatch
import LinuxSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// File locks across the hosts of a shared store (`--cluster`), as the mount sees them: a host
/// grants its programs flock and fcntl locks of a file only under a lock delegation of the file
/// (or of a directory above it) that it holds from the cluster, shared for shared locks and
/// exclusive for exclusive ones. Another host that wants a conflicting one recalls it; the host
/// gives it back once none of its programs' locks of the file are in the way. Paths are below the
/// store's root, as every host spells them.
package protocol HostLocks: AnyObject, Sendable {
    /// Whether this host may grant locks of `path` (exclusive ones with `exclusive`) now.
    func covers(_ path: String, exclusive: Bool) -> Bool
    /// `covers`, for an owner that holds locks of `path` already: also under a delegation
    /// recalled but kept until this host's holders that the recall waits for are done. (Their
    /// next locks asked for anew would queue behind the host that waits for them.)
    func coversHolder(_ path: String, exclusive: Bool) -> Bool
    /// Whether a recall of this host's delegation around `path` waits for holders of locks of it
    /// (of an exclusive one with `exclusive`, else of a shared one): such a holder that asks for
    /// what is not covered would wait for a host that waits for it.
    func recallWaits(for path: String, holding exclusive: Bool) -> Bool
    /// Asks for the delegation locks of `path` need; `completion` runs once, on any thread.
    /// Without `waits`, a delegation another host's programs use is not waited for
    /// (`.wouldWait`). The closure returned stops asking: `completion` is not called then.
    func acquire(
        _ path: String, exclusive: Bool, waits: Bool,
        completion: @escaping @Sendable (HostDelegationOutcome) -> Void
    ) -> @Sendable () -> Void
    /// Whether another host has a delegation in the way of `path`'s locks (exclusive ones with
    /// `exclusive`), and whether one of those is exclusive; nil when none is.
    func otherHostHolds(_ path: String, exclusive: Bool) -> Bool?
}

/// What a lock request comes to.
enum LockAnswer: Sendable, Equatable {
    case granted
    /// A lock is in the way, and the request does not wait (F_SETLK, LOCK_NB): EAGAIN.
    case wouldBlock
    /// Waiting would wait for itself (EDEADLK): found among this host's waiters, or a holder
    /// whose next lock would queue behind the host that waits for it.
    case deadlock
    /// The kernel interrupted the wait (a signal to the caller): EINTR, which the kernel
    /// restarts or returns as the signal's handler asks.
    case interrupted
    /// The host may take no lock across hosts now (its lease is lost, the cluster cannot be
    /// reached): ENOLCK, and why.
    case refused(String)
    /// Waited as long as the kernel's request timeout allows: ENOLCK.
    case timedOut

    var errno: Int32 {
        switch self {
        case .granted: 0
        case .wouldBlock: EAGAIN
        case .deadlock: EDEADLK
        case .interrupted: EINTR
        case .refused, .timedOut: ENOLCK
        }
    }
}

/// What F_GETLK finds in a request's way.
enum LockTest: Sendable, Equatable {
    case free
    case held(FileLock)
    /// Another host's programs lock the file (`exclusive`: maybe exclusively); their byte ranges
    /// and processes are theirs: the whole file is reported, by no process.
    case otherHost(exclusive: Bool)
    /// The host cannot ask the cluster now: ENOLCK.
    case refused(String)
}

/// The locks of this host's programs (`LockTable`), the requests that wait for them or for the
/// cluster's delegation (`HostLocks`), and their answers. A request is tried at once; one that
/// must wait keeps no thread: it is queued behind the lock in its way, or waits for the
/// delegation, and is answered by the thread that ends its wait (an unlock, a close, the
/// delegation's grant, the kernel's interrupt).
///
/// The kernel's interrupts come here directly (`cancel`, by the number `nextNumber` gave the
/// request): one that comes before its request waits (libfuse calls the interrupt function at
/// once when the kernel interrupted the request before it was registered) is kept until the
/// request begins to wait, which it then ends. Nothing of the mount's coordination is involved.
///
/// Lock order: `state`, then the host's (`HostLocks` is asked inside it; the cluster asks
/// `holders` outside its own), then the test hook `whenWaiting`. Answers, asks of the cluster
/// and timers run outside it.
final class FileLocks: Sendable {
    /// Nil: this host alone (the table as the kernel's own, for tests).
    let host: (any HostLocks)?
    /// How long a request may wait in all: the kernel's request timeout aborts the connection
    /// past it (nil: none in force, and a lock is waited for as long as it is held).
    let waitLimit: Duration?
    private let state = Mutex(State())
    private let numbers = Atomic<UInt>(1)
    private let logged = LogAllowance()

    /// How many times a request that does not wait asks for the delegation: one granted may be
    /// recalled again at once by a host in line for it.
    static let askingAtOnce = 4

    private struct State {
        var table = LockTable()
        /// Requests not answered yet, by number: queued behind a lock, or asking the cluster.
        var waiting: [UInt: Waiter] = [:]
        /// Interrupts of requests not waiting yet (`cancel`): each ends its request's wait as it
        /// begins; forgotten once the request is answered.
        var interruptedEarly: Set<UInt> = []
    }

    private struct Waiter {
        var request: LockRequest
        var waits: Bool
        var answer: @Sendable (LockAnswer) -> Void
        /// Told (inside the lock) when the request begins to wait; true: treat it as interrupted
        /// then (tests stand in for an early interrupt with it).
        var whenWaiting: (@Sendable () -> Bool)?
        /// It has begun to wait (`beginWaiting`): registered, and timed.
        var began = false
        /// Asked the cluster this many times; `acquiring` while the last ask is under way, and
        /// `stop` ends it.
        var asked = 0
        var acquiring = false
        var stop: (@Sendable () -> Void)?
    }

    /// What a change under the lock leaves to do outside it.
    private struct Effects {
        var answers: [(@Sendable (LockAnswer) -> Void, LockAnswer)] = []
        var asks: [(number: UInt, generation: Int, path: String, exclusive: Bool, waits: Bool)] = []
        var stops: [@Sendable () -> Void] = []
        var timers: [UInt] = []
    }

    init(host: (any HostLocks)?, waitLimit: Duration? = nil) {
        self.host = host
        self.waitLimit = waitLimit
    }

    // MARK: Requests

    /// A number for a request (`set`), unique in this mount: what the kernel's interrupt names it by.
    func nextNumber() -> UInt { numbers.wrappingAdd(1, ordering: .relaxed).oldValue }

    /// Takes, changes or drops a lock (`request.type` `.unlock`), as F_SETLK, F_SETLKW and
    /// flock(2) do; `answer` runs once. `number` names the request while it waits (the kernel's
    /// interrupt, `cancel`); `whenWaiting` runs (inside the lock) when it begins to. Without
    /// `waits`, a lock in the way is not waited for (EAGAIN); the cluster's delegation is asked
    /// for all the same, from a host that holds it idle.
    func set(
        _ request: LockRequest, number: UInt, waits: Bool, whenWaiting: (@Sendable () -> Bool)? = nil,
        answer: @escaping @Sendable (LockAnswer) -> Void
    ) {
        let effects = state.withLock { state -> Effects in
            var effects = Effects()
            state.waiting[number] = Waiter(request: request, waits: waits, answer: answer, whenWaiting: whenWaiting)
            retry(number, &state, &effects)
            return effects
        }
        perform(effects)
    }

    /// F_GETLK: what is in the way of `request` (another owner's lock here, or another host's
    /// programs); `answer` runs once. Where another host holds the file's delegation, it is
    /// asked for as a request that does not wait asks: a host that holds it idle gives it back.
    func test(_ request: LockRequest, answer: @escaping @Sendable (LockTest) -> Void) {
        test(request, asked: 0, answer: answer)
    }

    private func test(_ request: LockRequest, asked: Int, answer: @escaping @Sendable (LockTest) -> Void) {
        let exclusive = request.type == .exclusive
        let found = state.withLock { state -> LockTest? in
            if let lock = state.table.conflict(with: request) { return .held(lock) }
            guard let host, request.type != .unlock else { return .free }
            if host.covers(request.path, exclusive: exclusive) { return .free }
            if state.table.holding(request.owner, request.kind, on: request.node) != nil
                && host.coversHolder(request.path, exclusive: exclusive)
            {
                return .free
            }
            return asked < Self.askingAtOnce
                ? nil : .otherHost(exclusive: host.otherHostHolds(request.path, exclusive: exclusive) ?? true)
        }
        if let found { return answer(found) }
        guard let host else { return answer(.free) }
        _ = host.acquire(request.path, exclusive: exclusive, waits: false) { [self] outcome in
            switch outcome {
            case .granted: test(request, asked: asked + 1, answer: answer)
            // (A lock's holder never answers a request itself: it is waited for, or refuses at once.)
            case .wouldWait, .passed, .refusedThere:
                answer(.otherHost(exclusive: host.otherHostHolds(request.path, exclusive: exclusive) ?? true))
            case .refused(let why): answer(.refused(why))
            }
        }
    }

    /// The kernel interrupted request `number`: it stops waiting, answered EINTR; one that does
    /// not wait yet is when it begins to (one granted at once is granted). An interrupt of a
    /// request answered already (its answer and the interrupt crossed) leaves its number behind.
    func cancel(_ number: UInt) {
        let effects = state.withLock { state -> Effects in
            var effects = Effects()
            guard let node = state.waiting[number]?.request.node else {
                state.interruptedEarly.insert(number)
                return effects
            }
            state.table.dequeue(number, on: node)
            finish(number, .interrupted, &state, &effects)
            return effects
        }
        perform(effects)
    }

    /// Whether one more refusal or timeout may be logged: at most ten a second, so requests
    /// failing together (a lost lease) do not flood the log.
    func mayLog() -> Bool { logged.allows() }

    /// Its process closed a descriptor of `node`: its POSIX locks of the file go (FLUSH's
    /// `lock_owner`), as close(2) drops them on any filesystem.
    func flush(_ node: NodeID, owner: LockOwner) {
        let effects = state.withLock { state -> Effects in
            var effects = Effects()
            if state.table.removePOSIX(of: owner, on: node) { wake(node, &state, &effects) }
            return effects
        }
        perform(effects)
    }

    /// The open `handle` of `node` is released: its flock lock goes (`flockOwner`, which the
    /// kernel names when the open took one), and its OFD locks.
    func release(_ handle: UInt64, of node: NodeID, flockOwner: LockOwner?) {
        let effects = state.withLock { state -> Effects in
            var effects = Effects()
            if state.table.release(handle, on: node, flockOwner: flockOwner) { wake(node, &state, &effects) }
            return effects
        }
        perform(effects)
    }

    /// The files this host's programs hold locks of: what another host's recall waits for.
    func holders() -> [(path: String, exclusive: Bool)] {
        state.withLock { $0.table.heldFiles() }
    }

    /// The locks held of `node` (tests, status).
    func locks(on node: NodeID) -> [FileLock] {
        state.withLock { $0.table.locks(on: node) }
    }

    // MARK: Deciding

    private enum Decision {
        case grant
        case answer(LockAnswer)
        /// Behind the lock in its way.
        case queue
        /// For the cluster's delegation (exclusive or shared).
        case ask(exclusive: Bool)
    }

    /// What `waiter`'s request comes to now: the locks here first, then the cluster's
    /// delegation of the file.
    private func decide(_ waiter: Waiter, _ table: LockTable) -> Decision {
        let request = waiter.request
        if request.type == .unlock || table.holdsAlready(request) { return .grant }
        if let blocker = table.conflict(with: request) {
            guard waiter.waits else { return .answer(.wouldBlock) }
            return table.wouldDeadlock(request, blockedBy: blocker) ? .answer(.deadlock) : .queue
        }
        guard let host else { return .grant }
        let exclusive = request.type == .exclusive
        if host.covers(request.path, exclusive: exclusive) { return .grant }
        if let holding = table.holding(request.owner, request.kind, on: request.node) {
            if host.coversHolder(request.path, exclusive: exclusive) { return .grant }
            // The recall waits for this owner's locks, and a new delegation would be asked for
            // behind the host that recalls: it would wait for itself.
            if host.recallWaits(for: request.path, holding: holding) {
                return .answer(waiter.waits ? .deadlock : .wouldBlock)
            }
        }
        if !waiter.waits && waiter.asked >= Self.askingAtOnce { return .answer(.wouldBlock) }
        return .ask(exclusive: exclusive)
    }

    /// Tries request `number` again, and the file's waiters after it when the locks changed.
    private func retry(_ number: UInt, _ state: inout State, _ effects: inout Effects) {
        guard let node = state.waiting[number]?.request.node else { return }
        if settle(number, &state, &effects) { wake(node, &state, &effects) }
    }

    /// Decides request `number` and acts on it. Whether the file's locks changed.
    @discardableResult
    private func settle(_ number: UInt, _ state: inout State, _ effects: inout Effects) -> Bool {
        guard var waiter = state.waiting[number] else { return false }
        let request = waiter.request
        // flock(2) drops the lock it converts before it looks: one that then waits has lost it.
        let converted = state.table.dropConverted(request)
        switch decide(waiter, state.table) {
        case .grant:
            state.table.apply(request)
            finish(number, .granted, &state, &effects)
            return true
        case .answer(let answer):
            finish(number, answer, &state, &effects)
        case .queue:
            state.table.enqueue(number, request)
            beginWaiting(number, &state, &effects)
        case .ask(let exclusive):
            waiter.asked += 1
            waiter.acquiring = true
            state.waiting[number] = waiter
            if beginWaiting(number, &state, &effects) {
                effects.asks.append((number, waiter.asked, request.path, exclusive, waiter.waits))
            }
        }
        return converted
    }

    /// Tries the requests queued for `node`, first come first, as long as one is granted: a lock
    /// gone (or narrowed, or made shared) may let several in.
    private func wake(_ node: NodeID, _ state: inout State, _ effects: inout Effects) {
        var changed = true
        while changed {
            changed = false
            for (number, request) in state.table.queue(of: node) where state.table.conflict(with: request) == nil {
                state.table.dequeue(number, on: node)
                if settle(number, &state, &effects) {
                    changed = true
                    break
                }
            }
        }
    }

    /// Request `number` begins to wait (or waits on): timed the first time, where the kernel
    /// times requests. False when it was interrupted already, and is answered so.
    @discardableResult
    private func beginWaiting(_ number: UInt, _ state: inout State, _ effects: inout Effects) -> Bool {
        guard let waiter = state.waiting[number], !waiter.began else { return true }
        state.waiting[number]?.began = true
        if waitLimit != nil { effects.timers.append(number) }
        let hooked = waiter.whenWaiting?() ?? false
        guard state.interruptedEarly.remove(number) != nil || hooked else { return true }
        state.table.dequeue(number, on: waiter.request.node)
        finish(number, .interrupted, &state, &effects)
        return false
    }

    /// Answers request `number`, and stops what it waited for unless it was granted.
    private func finish(_ number: UInt, _ answer: LockAnswer, _ state: inout State, _ effects: inout Effects) {
        state.interruptedEarly.remove(number)
        guard let waiter = state.waiting.removeValue(forKey: number) else { return }
        if answer != .granted, let stop = waiter.stop { effects.stops.append(stop) }
        effects.answers.append((waiter.answer, answer))
    }

    /// Ends request `number`'s wait with `answer`, if it still waits.
    private func end(_ number: UInt, _ answer: LockAnswer) {
        let effects = state.withLock { state -> Effects in
            var effects = Effects()
            guard let node = state.waiting[number]?.request.node else { return effects }
            state.table.dequeue(number, on: node)
            finish(number, answer, &state, &effects)
            return effects
        }
        perform(effects)
    }

    // MARK: Outside the lock

    private func perform(_ effects: Effects) {
        for stop in effects.stops { stop() }
        if let host {
            for ask in effects.asks {
                let stop = host.acquire(ask.path, exclusive: ask.exclusive, waits: ask.waits) { [weak self] outcome in
                    self?.acquired(ask.number, generation: ask.generation, outcome)
                }
                let kept = state.withLock { state -> Bool in
                    guard let waiter = state.waiting[ask.number], waiter.asked == ask.generation, waiter.acquiring
                    else { return false }
                    state.waiting[ask.number]?.stop = stop
                    return true
                }
                // Answered meanwhile (interrupted, or the ask ended before this): nothing to stop later.
                if !kept { stop() }
            }
        }
        if let waitLimit {
            let (seconds, attoseconds) = waitLimit.components
            for number in effects.timers {
                DispatchQueue.global().asyncAfter(deadline: .now() + Double(seconds) + Double(attoseconds) / 1e18) {
                    [weak self] in
                    self?.end(number, .timedOut)
                }
            }
        }
        for (answer, outcome) in effects.answers { answer(outcome) }
    }

    /// The cluster answered ask `generation` of request `number`.
    private func acquired(_ number: UInt, generation: Int, _ outcome: HostDelegationOutcome) {
        let effects = state.withLock { state -> Effects in
            var effects = Effects()
            guard let waiter = state.waiting[number], waiter.asked == generation, waiter.acquiring else {
                return effects
            }
            state.waiting[number]?.acquiring = false
            state.waiting[number]?.stop = nil
            switch outcome {
            case .granted: retry(number, &state, &effects)
            // (A lock's holder never answers a request itself: it is waited for, or refuses at once.)
            case .wouldWait, .passed, .refusedThere: finish(number, .wouldBlock, &state, &effects)
            case .refused(let why): finish(number, .refused(why), &state, &effects)
            }
            return effects
        }
        perform(effects)
    }
}
