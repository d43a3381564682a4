import LinuxSystem
import Coordination
import CoordinationRuntime
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its table is behind `condition`.
/// Watches the requests that wait in the mount, and lets go ahead the ones whose wait must end
/// before the wait timeout (or refuses them, where they may not go ahead: the own-user rule
/// below). A request that goes ahead holds nothing, and presenters are still told what it did
/// (`CoordinatedAccess.breakThrough`). Five rules, looked at every 20 ms:
///
/// - **A kernel lock.** The kernel locks a directory before it sends a request that changes a
///   name in it (and the victim's inode for unlink and rename), and an inode before a setattr,
///   and keeps the lock until the reply. A request that waits there for a holder keeps the
///   holder from every name in that directory: an editor's atomic save (a temporary file beside
///   the item, renamed over it) blocks in the kernel before the mount sees it. No reply can give
///   the lock back and still make the caller wait, so the request goes ahead as soon as a process
///   it waits for is seen stuck on a kernel lock (a thread in uninterruptible sleep in a path or
///   inode operation, twice in a row).
/// - **A settled file.** A program that keeps a file open for writing and no longer writes it
///   (a server's port or pid file, its output) holds it like a lease: once the file has stayed
///   unchanged for the settle time, a reader waiting only for such opens goes ahead.
/// - **The lock time.** While a request the kernel holds a lock for waits (those above, and a
///   truncation), nobody can list, look up or create names in its directory (or write its
///   file): another user's holds, open files and presenters keep it at most the lock time.
/// - **The break time.** A request waits at most the break time for opens of unmodified programs
///   (leases, as Linux's `lease-break-time`) and for holds of other users; then it goes ahead.
///   The holds of other users it passes are revoked: they hold nothing from then on, and the
///   request is granted as usual when nothing else stands in its way (not a change of metadata:
///   a chmod that passed a writer leaves readers waiting for it).
/// - **A holder waiting for it.** Programs that talk to each other may each wait for the other:
///   a client keeps a file open while it sleeps reading its server's next command, and the
///   server opens the file for writing before it sends one (fstests' generic/571). The mount
///   sees only the server's wait; the client's, on a pipe or a TCP connection, it reads from
///   /proc (`InputWait`). When every process a program's request waits for sleeps reading
///   input that only the request's own process can send, and that process runs one thread
///   (the one waiting here), neither can do anything until the break time lets the request
///   in: it goes ahead at once instead, as at the break time (the same holds passed, the same
///   revoked), some 140 ms after it began. It costs nothing the break would not: what was
///   waited for could not have ended sooner. Only where the break time would end the wait (it
///   is shorter than the wait timeout, and the own-user rule refuses none of it); seen twice in
///   a row, and proven once by a walk over every process that no other holds that input's
///   other end (not again for `spentWaitWindow` where one does). A holder that would wake by
///   itself (a read timeout, a timer's signal) cannot be told from one that would not.
///
/// The break time and the lock time bound the whole wait, from the request's start: also its
/// wait after its presenters answered for what their own work took meanwhile (C21: a presenter
/// asked to relinquish may open or hold the item first, `CoordinatedAccess.isSettling`). Another
/// user's presenter could otherwise keep the request waiting for ever by opening the item as
/// its own work and keeping it open. That wait passes other users' holds alone, revoking them:
/// the work of a presenter of the caller's own user is the caller's to wait for, as ever (C21;
/// passing one user's programs past each other tore reads before, and was taken back).
///
/// A hold through the mount's control socket (`coordfs coordinate`, a Swift coordinator) that
/// waits is watched too (`SocketHoldWaits`), for the break time alone and for other users' holds
/// only: across users a hold is a lease whoever asks, and within one user a coordinated access
/// waits for its user's programs' opens, as it always has.
///
/// A name change (unlink, rmdir, rename) that went ahead by any of these rules revokes, once
/// it is made, the holds it passed on the names it took away (`CoordinatedAccess.revokePassed`):
/// what they stood for has gone from there, and nobody waits for them again. Nothing else of
/// their holders' changes.
///
/// Every hold a request went past, on any of its items (or above or inside them), is told once
/// (`BROKEN`), and the presenters of each of its items.
///
/// Another host's access that waits here for this host's holders (a recall's,
/// `SharedStore.beginAccess(forHost:)`) is watched for the settle rule alone
/// (`watchAnotherHost`): a read from another host goes past writers whose file has stayed
/// unchanged for the settle time, as a read here does. Its break time is the cluster's (the
/// recall gives the delegation back), and no kernel lock of this host's is held for it.
///
/// **A wait spent.** The lock time does not compound: a process that went past another user's
/// holds, open files or presenters by the lock time or the break time goes past that user's at
/// once in its next requests the kernel holds a lock for, until it has gone past them for none
/// for `spentWaitWindow` (`rm -rf` of a tree where another user holds many files waits the lock
/// time once in all, not once a file). Only another user's: its own user's holders are waited
/// for by their own rules, whoever passed whom before.
///
/// **Its own user, under a lock others need.** A request about a name in a directory other
/// users may list or search, on a mount they may use (`Watched.othersNeedLock`), keeps them out
/// of that directory while it waits: their listings, lookups of new names and creates there
/// sleep in the kernel before the mount hears of them, so nothing the mount sees tells it that
/// they wait, and no answer can give the lock back and let the request wait on. It may not go
/// past its own user's holders, open files and presenters either (one user's programs never
/// pass each other). So its wait for them is refused: at the lock time it fails with EBUSY
/// (`.timedOut`, as at the wait timeout), having changed nothing, and the program may try
/// again. It does not compound: the user's next requests, from any of its processes, that wait
/// for holders of the same processes are refused at once, until it has gone `spentWaitWindow`
/// without such a refusal (`RefusedWait`). Only a wait for holders is refused at once:
/// presenters answer by themselves, and each request gives them the lock time. A holder seen stuck on a kernel lock
/// is left to the kernel-lock rule, which lets the request go ahead.
final class WaitWatch: @unchecked Sendable {
    /// A waiting request.
    struct Watched {
        let claim: CoordinatedAccess
        /// The kernel holds a lock for it (a request about a name, a setattr but a truncation):
        /// the kernel-lock rule looks at it.
        let underKernelLock: Bool
        /// The kernel keeps others out of its directory or file while it waits (those, and a
        /// truncation): the lock time bounds its wait for other users.
        let locksOthersOut: Bool
        /// Other users may need the directory lock it waits under (a request about a name, in
        /// a directory they may list or search, on a mount they may use): the lock time bounds
        /// its wait for its own user too, which then fails (the own-user rule).
        let othersNeedLock: Bool
        /// It removes, replaces or moves a name (unlink, rmdir, rename): the holds it passes on
        /// its items are revoked once it is made (`CoordinatedAccess.revokePassed`).
        let changesNames: Bool
        /// It goes past open files of its own user's unmodified programs at the break time, as
        /// past leases (a program's request); false for a hold through the control socket.
        let passesLeases: Bool
        let since: ContinuousClock.Instant
        /// Its caller's user.
        let uid: uid_t
        /// The item it waits for, for the settle rule: a node, or a name in a directory node.
        let item: (node: Inode, name: String)?
        /// Another host's access: looked at for the settle rule alone (`watchAnotherHost`).
        var settlesOnly = false
    }

    /// What the settle rule looks at: when a file last changed (its later time of the two).
    struct FileState {
        let modified: timespec, changed: timespec

        /// Seconds since the file last changed, by the system's clock (negative for a time ahead).
        var secondsUnchanged: Double {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            func seconds(_ time: timespec) -> Double { Double(time.tv_sec) + Double(time.tv_nsec) / 1e9 }
            return seconds(now) - max(seconds(modified), seconds(changed))
        }
    }

    enum Reason: String {
        case kernelLock = "a kernel lock", settled = "a settled file", lockTime = "the lock time", breakTime =
            "the break time"
        case waitedOn = "a holder waiting for it"

        /// Whether it lets the request in as the break time does, past the same holds.
        var breaks: Bool { self == .breakTime || self == .waitedOn }
    }

    /// A holder seen asleep outside the mount waiting for input that only its waiter's process
    /// can send it (`InputWait`).
    struct InputWaitEdge: Hashable {
        let holder: Int32
        let waiter: Int32
    }

    /// How long a request waits before the processes it waits for are looked at for a wait on
    /// it: most waits end by themselves sooner, and cost no look at /proc.
    static let inputWaitLook: Duration = .milliseconds(100)

    /// A process's wait for another user's holders, spent (the lock time or the break time):
    /// by `process`, of `user`, for those of `holder`.
    struct SpentWait: Hashable {
        let process: Int32
        /// The caller's user: a process that changed user (or a number taken again) has none.
        let user: uid_t
        let holder: uid_t
    }

    /// A request refused by the own-user rule: of `user`, waiting for its own user's holders in
    /// process `holder`. Kept by user, not by the refused process: a user that starts a new
    /// process for each removal (an `rm` each) would otherwise get the lock time again each
    /// time, and keep the directory locked as long as it liked.
    struct RefusedWait: Hashable {
        let user: uid_t
        let holder: Int32
    }

    /// How long after a process last went past another user's holders, by a rule or by a wait
    /// spent, its requests under a kernel lock go past that user's at once; and after it was
    /// last refused for waiting on its own user's holders under a lock others need, its
    /// requests that wait for those holders so are refused at once.
    static let spentWaitWindow: Duration = .seconds(5)

    private let condition = NSCondition()
    private var watched: [UInt: Watched] = [:]
    /// When each process last went past another user's holders (`SpentWait`).
    private var spentWaits: [SpentWait: ContinuousClock.Instant] = [:]
    /// When each user was last refused for waiting on its own holders (`RefusedWait`).
    private var refusedWaits: [RefusedWait: ContinuousClock.Instant] = [:]
    /// Processes seen stuck at the last look: a second look confirms.
    private var suspects: Set<Int32> = []
    /// Holders seen waiting for their waiters at the last look: a second look confirms.
    private var inputWaits: Set<InputWaitEdge> = []
    /// When each wait was last found not to be its waiter's alone (another process holds what
    /// its holder reads): not walked over again for `spentWaitWindow`.
    private var unprovenWaits: [InputWaitEdge: ContinuousClock.Instant] = [:]
    private var running = false
    private let logger: Logger
    let settleTime: Duration?
    let breakTime: Duration?
    /// How long a request that locks others out waits at most for other users
    /// (`MountConfiguration.lockTime`); nil: the break time.
    let lockTime: Duration?
    /// Whether a program's request that waits for open files reaches the break time before its
    /// wait timeout (`MountConfiguration.waitTimeout`): only then may a holder waiting for it
    /// let it in sooner.
    let breaksBeforeTimeout: Bool
    /// How the item of a watched request is looked at (`Filesystem` gives its inode table).
    private let look: @Sendable (Inode, String) -> FileState?
    /// Tells who held the items of a request (of the identity given) that went ahead of them:
    /// the presenters of each item, and the holds of the grants it went past, each once.
    var tellBroken: (@Sendable ([ItemPath], Set<GrantID>, CoordinatorIdentity) -> Void)?
    /// Requests that went ahead, by rule, and the holds revoked (by the break time, and by name
    /// changes made past them: `MountClaim.revokePassed`).
    let kernelLockBreaks = Atomic<Int>(0)
    let leaseBreaks = Atomic<Int>(0)
    let lockTimeBreaks = Atomic<Int>(0)
    /// Of `lockTimeBreaks`, those that went ahead at once on a wait spent (`SpentWait`).
    let lockTimeWaived = Atomic<Int>(0)
    /// Requests refused (EBUSY) by the own-user rule, at the lock time or at once.
    let lockTimeRefusals = Atomic<Int>(0)
    let holdsRevoked = Atomic<Int>(0)
    /// Numbers of other hosts' accesses watched (`watchAnotherHost`), apart from the mount's
    /// requests' (`WaitingRequests`): their high bit set.
    private let anotherHostsAccesses = Atomic<UInt>(0)
    static let interval: useconds_t = 20_000

    /// `waitTimeout`: how long a program's request waits at most (nil: for ever).
    init(
        logger: Logger = Logger(label: "org.coordfs.mount"), settleTime: Duration?, breakTime: Duration?,
        lockTime: Duration?, waitTimeout: Duration? = nil,
        look: @escaping @Sendable (Inode, String) -> FileState?
    ) {
        self.logger = logger
        self.settleTime = settleTime
        self.breakTime = breakTime
        self.lockTime = lockTime
        breaksBeforeTimeout = breakTime.map { breakTime in waitTimeout.map { breakTime < $0 } ?? true } ?? false
        self.look = look
    }

    /// Whether a request of this kind needs watching at all.
    func watches(underKernelLock: Bool, locksOthersOut: Bool) -> Bool {
        underKernelLock || (locksOthersOut && lockTime != nil) || settleTime != nil || breakTime != nil
    }

    /// Watches `claim` until `forget(number)`.
    func watch(
        _ number: UInt, _ claim: CoordinatedAccess, underKernelLock: Bool, locksOthersOut: Bool,
        othersNeedLock: Bool = false, changesNames: Bool, passesLeases: Bool, uid: uid_t,
        item: (node: Inode, name: String)?, settlesOnly: Bool = false
    ) {
        let now = ContinuousClock.now
        condition.lock()
        watched[number] = Watched(
            claim: claim, underKernelLock: underKernelLock, locksOthersOut: locksOthersOut,
            othersNeedLock: othersNeedLock, changesNames: changesNames, passesLeases: passesLeases,
            since: now, uid: uid, item: item, settlesOnly: settlesOnly)
        if !running {
            running = true
            Thread.start(named: "coordfs-waits") { [self] in loop() }
        }
        condition.unlock()
    }

    /// Watches another host's access, waiting here for `item` (a recall's,
    /// `SharedStore.beginAccess(forHost:)`), for the settle rule alone, until `forget` of the
    /// number returned.
    func watchAnotherHost(_ claim: CoordinatedAccess, item: (node: Inode, name: String)) -> UInt {
        let number = anotherHostsAccesses.wrappingAdd(1, ordering: .relaxed).newValue | (1 << (UInt.bitWidth - 1))
        watch(
            number, claim, underKernelLock: false, locksOthersOut: false, changesNames: false, passesLeases: false,
            uid: uid_t.max, item: item, settlesOnly: true)
        return number
    }

    func forget(_ number: UInt) {
        condition.lock()
        watched[number] = nil
        condition.unlock()
    }

    /// Runs while anything is watched; a new thread starts with the next request that waits.
    private func loop() {
        while true {
            usleep(Self.interval)
            let now = ContinuousClock.now
            guard let (requests, started) = snapshot(at: now) else { return }
            var round = started
            for (number, request) in requests {
                if let entry = judge(number, request, in: &round) { round.broken.append(entry) }
            }
            condition.lock()
            suspects = round.stuckNow
            inputWaits = round.inputWaitsNow
            for edge in round.unprovenNow { unprovenWaits[edge] = now }
            for wait in round.spending { spentWaits[wait] = now }
            for wait in round.refusing { refusedWaits[wait] = now }
            // Granted after its holders were revoked, a request may still ask presenters: it
            // stays watched until its end (`forget`), and the lock time bounds them too. So does
            // one let past while settling, which may wait on for holders not passed. Any other
            // is not looked at again.
            for entry in round.broken where entry.revoked == 0 && !entry.settling { watched[entry.number] = nil }
            for entry in round.refusals { watched[entry.number] = nil }
            condition.unlock()
            for entry in round.broken {
                if let claim = requests[entry.number]?.claim {
                    wentAhead(
                        claim, entry.callerName, for: entry.reason, past: entry.awaited, revoked: entry.revoked,
                        waived: entry.waived)
                }
            }
            for entry in round.refusals { refused(entry) }
        }
    }

    /// What a look works on: the requests watched, and a round that knows the processes stuck
    /// on a kernel lock at the look before, the holders seen waiting for their waiters then,
    /// the waits spent on other users and those refused on its own; nil (and the loop ends)
    /// once nothing is watched.
    private func snapshot(at now: ContinuousClock.Instant) -> (requests: [UInt: Watched], round: Round)? {
        condition.lock()
        defer { condition.unlock() }
        spentWaits = spentWaits.filter { now - $0.value < Self.spentWaitWindow }
        refusedWaits = refusedWaits.filter { now - $0.value < Self.spentWaitWindow }
        unprovenWaits = unprovenWaits.filter { now - $0.value < Self.spentWaitWindow }
        if watched.isEmpty {
            running = false
            suspects = []
            inputWaits = []
            return nil
        }
        var round = Round(now: now, previous: suspects, spent: spentWaits, refused: refusedWaits)
        round.inputWaitsBefore = inputWaits
        round.unproven = unprovenWaits
        return (watched, round)
    }

    /// One look at every watched request.
    private struct Round {
        let now: ContinuousClock.Instant
        let previous: Set<Int32>
        let spent: [SpentWait: ContinuousClock.Instant]
        let refused: [RefusedWait: ContinuousClock.Instant]
        var stuckNow: Set<Int32> = []
        var looked: [Int32: Bool] = [:]
        /// Each identity's user, read from /proc at most once a look (nil: gone, as another's).
        var users: [CoordinatorIdentity: uid_t?] = [:]
        var broken: [Broken] = []
        var spending: [SpentWait] = []
        var refusals: [Refusal] = []
        var refusing: [RefusedWait] = []
        /// Holders seen waiting for their waiters at the look before, and at this one; the
        /// waits found not to be their waiters' alone lately, and at this look.
        var inputWaitsBefore: Set<InputWaitEdge> = []
        var inputWaitsNow: Set<InputWaitEdge> = []
        var unproven: [InputWaitEdge: ContinuousClock.Instant] = [:]
        var unprovenNow: [InputWaitEdge] = []
        /// What each process waits for outside the mount (`InputWait.sources`), read from
        /// /proc at most once a look.
        var inputs: [Int32: Set<InputWait.Source>?] = [:]

        init(
            now: ContinuousClock.Instant, previous: Set<Int32>, spent: [SpentWait: ContinuousClock.Instant],
            refused: [RefusedWait: ContinuousClock.Instant]
        ) {
            (self.now, self.previous, self.spent, self.refused) = (now, previous, spent, refused)
        }

        mutating func user(of identity: CoordinatorIdentity) -> uid_t? {
            if let known = users[identity] { return known }
            let found = CoordinatorUsers.user(of: identity)
            users[identity] = .some(found)
            return found
        }

        mutating func input(of process: Int32) -> Set<InputWait.Source>? {
            if let known = inputs[process] { return known }
            let found = InputWait.sources(of: process)
            inputs[process] = .some(found)
            return found
        }
    }

    /// Whether request `number` goes ahead at this look, and by which rule; it is let through
    /// here (its holders told first), and its entry returned for the loop to count and log.
    private func judge(_ number: UInt, _ request: Watched, in round: inout Round) -> Broken? {
        let awaited = request.claim.awaited
        guard !awaited.isEmpty else { return nil }
        func anotherUsers(_ identity: CoordinatorIdentity) -> Bool { round.user(of: identity) != request.uid }
        let caller = request.claim.request.identity.process
        // The wait the caller's process spends (or spent) on `identity`'s user: another user's only.
        func spentWait(_ identity: CoordinatorIdentity) -> SpentWait? {
            guard let caller, let holder = round.user(of: identity), holder != request.uid else { return nil }
            return SpentWait(process: caller, user: request.uid, holder: holder)
        }
        func waitSpent(_ identity: CoordinatorIdentity) -> Bool {
            spentWait(identity).flatMap { round.spent[$0] } != nil
        }
        let waitsForHolders = request.claim.waitsForHolders
        // Granted, presenters answered, waiting for what their own work took: holders again.
        let settling = !waitsForHolders && request.claim.isSettling
        var reason: Reason?
        if request.underKernelLock, holderStuck(awaited, in: &round) { reason = .kernelLock }
        if reason == nil, settles(request.claim, awaited, request.item) { reason = .settled }
        if reason == nil && request.settlesOnly { return nil }
        var waived = false
        if reason == nil, let lockTime, request.locksOthersOut, awaited.allSatisfy(anotherUsers) {
            if round.now - request.since >= lockTime {
                reason = .lockTime
            } else if awaited.allSatisfy(waitSpent) {
                reason = .lockTime
                waived = true
            }
        }
        if reason == nil, refuses(number, request, awaited, forHolders: waitsForHolders || settling, in: &round) {
            return nil
        }
        if reason == nil, let breakTime, round.now - request.since >= breakTime,
            (waitsForHolders && awaited.allSatisfy({ (request.passesLeases && Self.isLease($0)) || anotherUsers($0) }))
                || (settling && awaited.allSatisfy(anotherUsers))
        {
            reason = .breakTime
        }
        if reason == nil, holdersWaitForIt(request, awaited, waitsForHolders, in: &round) { reason = .waitedOn }
        guard let ended = reason else { return nil }
        if ended == .lockTime || ended.breaks { round.spending += awaited.compactMap(spentWait) }
        // Another user's holds passed at the break time: a lease broken (docs/sharing.md).
        // The caller's own user's open files keep their rule: passed, not revoked.
        var revoking: Set<CoordinatorIdentity> = []
        if ended.breaks && (waitsForHolders || settling) && !Self.changesMetadataOnly(request.claim.request) {
            revoking = awaited.filter(anotherUsers)
        }
        // A name change remembers what it passes on its own items, revoked once it is made.
        let noting: Set<CoordinatorIdentity> =
            request.changesNames && waitsForHolders ? awaited.subtracting(revoking) : []
        // Looked up while it still waits: what it goes past, told before it goes.
        tell(request.claim, passing: request.claim.grantsInItsWay(of: awaited))
        let callerName = request.claim.request.identity.logName
        let revoked = request.claim.breakThrough(revoking: revoking, noting: noting)
        return Broken(
            number: number, reason: ended, awaited: awaited, revoked: revoked, waived: waived,
            settling: settling, callerName: callerName)
    }

    /// What the break time would pass, passed sooner: its holders wait for it (`holdersWait`).
    /// Not a wait the own-user rule ends, refused, before any break.
    private func holdersWaitForIt(
        _ request: Watched, _ awaited: Set<CoordinatorIdentity>, _ waitsForHolders: Bool, in round: inout Round
    ) -> Bool {
        guard breaksBeforeTimeout, request.passesLeases, !request.othersNeedLock, waitsForHolders,
            let caller = request.claim.request.identity.process, round.now - request.since >= Self.inputWaitLook,
            awaited.allSatisfy({ Self.isLease($0) || round.user(of: $0) != request.uid })
        else { return false }
        return holdersWait(for: caller, awaited, in: &round)
    }

    /// The rule of a holder waiting for it: whether every process in `awaited` is seen, at this
    /// look and the one before, asleep outside the mount reading input that only `caller` can
    /// send it, while `caller` runs one thread (the one waiting here) and so sends nothing
    /// (`InputWait`). Each holder is looked at once a look; the proof that no other process
    /// holds the other end of what it reads, a walk over every process, is made once both looks
    /// agree, and not again for `spentWaitWindow` where it failed.
    private func holdersWait(for caller: Int32, _ awaited: Set<CoordinatorIdentity>, in round: inout Round) -> Bool {
        var edges: [(edge: InputWaitEdge, sources: Set<InputWait.Source>)] = []
        for identity in awaited {
            guard let holder = identity.process, holder != caller else { return false }
            let edge = InputWaitEdge(holder: holder, waiter: caller)
            guard round.unproven[edge] == nil, let sources = round.input(of: holder), !sources.isEmpty,
                sources.allSatisfy({ InputWait.isHeld($0, by: caller) })
            else { return false }
            round.inputWaitsNow.insert(edge)
            edges.append((edge, sources))
        }
        let seenBefore = round.inputWaitsBefore
        guard edges.allSatisfy({ seenBefore.contains($0.edge) }), InputWait.hasOneThread(caller) else { return false }
        for (edge, sources) in edges {
            // The holder itself may hold an end too: asleep, it sends nothing either.
            let alone = sources.allSatisfy { source in
                InputWait.holders(of: source).map { $0.subtracting([edge.holder]) == [caller] } ?? false
            }
            if !alone {
                round.unprovenNow.append(edge)
                return false
            }
        }
        return true
    }

    /// The kernel-lock rule's look: whether a process of `awaited` is seen stuck on a kernel
    /// lock, at this look and the one before (each process looked at once a look).
    private func holderStuck(_ awaited: Set<CoordinatorIdentity>, in round: inout Round) -> Bool {
        for process in Set(awaited.compactMap(\.process)) {
            let stuck = round.looked[process] ?? Self.isStuckOnKernelLock(process)
            round.looked[process] = stuck
            if stuck { round.stuckNow.insert(process) }
            if stuck && round.previous.contains(process) { return true }
        }
        return false
    }

    /// The own-user rule: refuses `request` (EBUSY, as at its wait timeout) if others may need
    /// the lock it waits under and it waits for its own user (`awaited`'s holders; presenters
    /// yet to answer, while it asks them), once it has waited the lock time; at once if it
    /// waits for holders only, all of whose processes its process was refused for within
    /// `spentWaitWindow`. Not while one of them is seen stuck on a kernel lock: the next look
    /// may let it go ahead instead. Whether it was refused (its completion has run).
    private func refuses(
        _ number: UInt, _ request: Watched, _ awaited: Set<CoordinatorIdentity>, forHolders: Bool,
        in round: inout Round
    ) -> Bool {
        guard request.othersNeedLock, let lockTime else { return false }
        let waitedFor = forHolders ? awaited : (request.claim.unansweredOwners ?? awaited)
        let own = waitedFor.filter { round.user(of: $0) == request.uid }
        let stuck = round.stuckNow, refusedBefore = round.refused
        guard !own.isEmpty, !own.contains(where: { $0.process.map { stuck.contains($0) } == true }) else {
            return false
        }
        let holders = Set(own.compactMap(\.process))
        // A caller without a process (a client's own coordinator) is never refused at once.
        let refusing =
            request.claim.request.identity.process == nil
            ? [] : holders.map { RefusedWait(user: request.uid, holder: $0) }
        let waited = round.now - request.since >= lockTime
        let waived =
            !waited && forHolders && !refusing.isEmpty && own.allSatisfy({ $0.process != nil })
            && refusing.allSatisfy({ refusedBefore[$0] != nil })
        guard waited || waived, request.claim.giveUp(because: .timedOut) else { return false }
        round.refusing += refusing
        round.refusals.append(Refusal(number: number, claim: request.claim, own: own, waived: waived))
        return true
    }

    /// A request refused at a look by the own-user rule: whom of its own user it waited for, and
    /// whether at once, its process refused for them a moment before.
    private struct Refusal {
        let number: UInt
        let claim: CoordinatedAccess
        let own: Set<CoordinatorIdentity>
        let waived: Bool
    }

    /// Counts a refusal, and logs one made at the lock time (those at once follow one logged).
    private func refused(_ refusal: Refusal) {
        lockTimeRefusals.add(1, ordering: .relaxed)
        guard !refusal.waived else { return }
        let claim = refusal.claim
        let wanted = claim.grantedIntents.map { "\($0.kind.isWrite ? "write" : "read") of \($0.path)" }.joined(
            separator: ", ")
        let line =
            "\(claim.request.identity.logName) refused (EBUSY) on \(wanted.isEmpty ? "its request" : wanted) at the lock time, "
            + "waiting for its own user's \(refusal.own.map(\.logName).sorted().joined(separator: ", ")): "
            + "other users may need the directory the kernel keeps locked meanwhile"
        logger.notice("\(line)")
    }

    /// Whether a user other than `caller` may list or search a directory with these attributes
    /// (as the mount shows them, and the kernel checks them with `allow_other`), and so wait on
    /// its lock (a listing and a lookup of a name the kernel does not know yet take it shared,
    /// a create takes it whole): its mode lets its group or others read or search it, or it is
    /// another user's. Root, who may enter any, is not counted.
    static func othersMayListOrSearch(_ directory: stat, besides caller: uid_t) -> Bool {
        directory.st_uid != caller || directory.st_mode & (S_IRGRP | S_IXGRP | S_IROTH | S_IXOTH) != 0
    }

    /// A request let go ahead at a look (its holders told already): by which rule, past whom,
    /// how many of their holds were revoked, and whether the lock time was waived for a wait
    /// spent.
    private struct Broken {
        let number: UInt
        let reason: Reason
        let awaited: Set<CoordinatorIdentity>
        let revoked: Int
        let waived: Bool
        /// It was let past while settling after its presenters' own work.
        let settling: Bool
        /// The caller as the log names it, read before it went ahead: once past, it may finish
        /// and exit before the line is written, its command gone from /proc.
        let callerName: String
    }

    /// The settle rule: a reader waiting for writers' open files only (a writer waits for
    /// readers until they close: they change nothing, so "unchanged" says nothing of them), its
    /// item unchanged for the settle time, by its own times: a writer that went quiet before
    /// this request came holds it up no longer than one that goes quiet after.
    private func settles(
        _ claim: CoordinatedAccess, _ awaited: Set<CoordinatorIdentity>, _ item: (node: Inode, name: String)?
    ) -> Bool {
        guard let settleTime, let item, claim.waitsForHolders, awaited.allSatisfy(Self.isLease),
            claim.grantedIntents.allSatisfy({ !$0.kind.isWrite }), let state = look(item.node, item.name)
        else { return false }
        return state.secondsUnchanged >= settleTime.timeInterval
    }

    /// For a request that must not wait (O_NONBLOCK), just begun: whether it goes ahead now,
    /// as a blocking one would at the first look (the settle rule; the others need time to
    /// pass). Otherwise it is the caller's to refuse.
    func goesAheadNow(_ claim: CoordinatedAccess, item: (node: Inode, name: String)) -> Bool {
        let awaited = claim.awaited
        guard !awaited.isEmpty, settles(claim, awaited, item) else { return false }
        tell(claim, passing: claim.grantsInItsWay(of: awaited))
        let callerName = claim.request.identity.logName
        claim.breakThrough()
        wentAhead(claim, callerName, for: .settled, past: awaited)
        return true
    }

    /// Tells who held the items `claim` is about to go ahead on (the holds of the grants
    /// `passed`, each once, whichever item they held, and the presenters of every item). Told
    /// before it goes, not after the look: a holder whose hold ends meanwhile would otherwise
    /// hear nothing, and take a turn that was passed for a whole one (its release's answer
    /// follows the event on its connection).
    private func tell(_ claim: CoordinatedAccess, passing passed: Set<GrantID>) {
        let paths = claim.grantedIntents.map(\.path)
        if !paths.isEmpty { tellBroken?(paths, passed, claim.request.identity) }
    }

    /// Counts and logs that `claim`, of `callerName` (as the log names it), went ahead (its
    /// holders were told, `tell`).
    private func wentAhead(
        _ claim: CoordinatedAccess, _ callerName: String, for reason: Reason, past awaited: Set<CoordinatorIdentity>,
        revoked: Int = 0, waived: Bool = false
    ) {
        switch reason {
        case .kernelLock: kernelLockBreaks.add(1, ordering: .relaxed)
        case .lockTime: lockTimeBreaks.add(1, ordering: .relaxed)
        case .settled, .breakTime, .waitedOn: leaseBreaks.add(1, ordering: .relaxed)
        }
        if waived { lockTimeWaived.add(1, ordering: .relaxed) }
        if revoked > 0 { holdsRevoked.add(revoked, ordering: .relaxed) }
        let revoking = revoked > 0 ? "; \(revoked) of their holds revoked" : ""
        let spent = waived ? ", waited for their user already" : ""
        let wanted = claim.grantedIntents.map { "\($0.kind.isWrite ? "write" : "read") of \($0.path)" }.joined(
            separator: ", ")
        let line =
            "\(callerName) went ahead on \(wanted.isEmpty ? "its request" : wanted) (\(reason.rawValue)\(spent)), "
            + "past \(awaited.map(\.logName).sorted().joined(separator: ", "))\(revoking)"
        logger.notice("\(line)")
    }

    /// Whether `request` writes nothing but metadata (O9: chmod, chown, utimes, xattrs).
    static func changesMetadataOnly(_ request: AccessRequest) -> Bool {
        request.intents.allSatisfy { intent in
            if case .writing(let options) = intent.kind { return options.contains(.contentIndependentMetadataOnly) }
            return false
        }
    }

    /// An unmodified program's request or open file, held for that program alone.
    static func isLease(_ identity: CoordinatorIdentity) -> Bool {
        if case .process = identity { return true }
        return false
    }

    /// Kernel functions a task sleeps in, uninterruptibly, while it waits for a directory's or
    /// an inode's lock on its way through a path or into a file (as /proc/TID/wchan names them).
    static let lockWaits = [
        "path_openat", "filename_create", "lookup_slow", "open_last_lookups", "do_unlinkat",
        "do_rmdir", "lock_rename", "do_renameat2", "vfs_", "fuse_", "do_truncate", "chmod_common",
        "chown_common", "utimes_common", "rwsem_", "down_"
    ]

    /// Whether a thread of `process` sleeps uninterruptibly where lock waits sleep.
    static func isStuckOnKernelLock(_ process: Int32) -> Bool {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process)/task") else {
            return false
        }
        for task in tasks {
            guard let stat = ProcFile.read("/proc/\(process)/task/\(task)/stat"),
                let close = stat.lastIndex(of: ")")
            else { continue }
            // "PID (comm) S ...": the state follows the command, which may hold anything.
            let state = stat[stat.index(after: close)...].dropFirst().first
            guard state == "D", let wchan = ProcFile.read("/proc/\(process)/task/\(task)/wchan") else { continue }
            if lockWaits.contains(where: { wchan.hasPrefix($0) }) { return true }
        }
        return false
    }
}
