import Coordination
import CoordinationRuntime
import LinuxSystem
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A host of a shared store grants its programs only what its delegations cover
/// (`HostDelegations`): a request outside them waits for the delegation first, and one whose
/// delegation was recalled while it took its claim gives the claim back unused and waits again.
/// Recalls the other way come in as accesses of another host (`SharedStore.beginAccess(forHost:)`),
/// met as this host's own programs' would be; the host in the way may answer a request itself:
/// let past its programs (it goes ahead holding nothing there), or refused with an errno. A
/// read of an item another host's presenters present asks them first, as a read here asks
/// this host's own.
extension MountCoordinator {
    /// `coordinate`, on a mount with delegations: the claim is taken as on any mount, then the
    /// delegations it needs are asked for; a host alone, whose delegation covers the item, goes
    /// on at once. One whose delegation is missing (or was recalled while it took its claim)
    /// gives the claim back unused and waits for it, then is coordinated again. `asked`: the
    /// other hosts' presenters have been asked already; `passed`: the needs another host let
    /// past its programs, which need no delegation any more.
    func coordinateInCluster(
        _ reply: consuming Reply, _ request: MountRequest, _ delegations: any HostDelegations,
        until deadline: ContinuousClock.Instant? = nil, asked: Bool = false, passed: [DelegationNeed] = [],
        promised: [any DelegationPromise] = []
    ) {
        // Before anything is taken here: a presenter's save there may need what this host holds.
        if !asked && delegations.othersPresentAnything {
            let questions = presenterQuestions(request, delegations)
            if !questions.isEmpty {
                let deadline = deadline ?? configuration.waitTimeout.map { ContinuousClock.now + $0 }
                return waitForDelegations(questions, delegations, reply, asking: true, waits: true, until: deadline) {
                    [self] reply, _, _ in
                    coordinateInCluster(reply, request, delegations, until: deadline, asked: true)
                }
            }
        }
        let taken = MountRequest(
            wanted: request.wanted, other: request.other, nonBlocking: request.nonBlocking,
            forTheCall: request.forTheCall, caller: request.caller
        ) { [self] reply, claim in
            // Without a claim, what is not coordinated needs nothing: the kernel's own threads,
            // paths the mode leaves alone, an O_TMPFILE file not linked yet. (A request that
            // passed a quiet gate holds nothing either, and needs its delegation.)
            if !claim.holds && !isCoordinated(request.wanted, request.other, request.caller) {
                return request.body(reply, claim)
            }
            // Asked once held: a recall that came meanwhile waited for this claim (or passage)
            // only if it began after this answer.
            let needs = delegationNeeds(request.wanted, request.other).filter { !passed.contains($0) }
            if case .accessor? = claim.held, holdLostItsCover(request, needs, delegations) {
                for promise in promised { promise.redeem() }
                return fencedAccessorRequest(reply, claim, request)
            }
            // Only what is not covered is waited for: an accessor's item, covered by the
            // delegation its hold was granted under though recalled, asked for again would
            // queue behind the other host's request that recalled it, which waits for the hold
            // (an atomic save in a coordinated write: its rename's temporary file is not
            // covered, its destination is).
            var missing: [DelegationNeed] = []
            for need in needs where !covered([need], by: delegations, for: claim) { missing.append(need) }
            // Claimed and looked: a recall that came with the grants may go on (it waits for the claim).
            for promise in promised { promise.redeem() }
            if missing.isEmpty {
                if nameNamesAnother(request, delegations) { return staleName(reply, claim, request) }
                return request.body(reply, claim)
            }
            if claim.holds { statistics.takenAgain.add(1, ordering: .relaxed) }
            claim.end(request.unchanged)
            let deadline = deadline ?? configuration.waitTimeout.map { ContinuousClock.now + $0 }
            // Never into the engine from here: this may run inside a quiet passage.
            waitForDelegations(missing, delegations, reply, waits: !request.nonBlocking, until: deadline) {
                [self] reply, passedNow, promised in
                coordinateInCluster(
                    reply, request, delegations, until: deadline, asked: true, passed: passed + passedNow,
                    promised: promised)
            }
        }
        take(reply, taken)
    }

    /// Whether an open's item is no longer what its name names in the store: another host
    /// renamed a new file over it (an atomic save) or removed it, and the kernel, which keeps
    /// names a while, named the item it knew. Looked at (one fstatat) once after each
    /// delegation this host took, since only while it held none could another host change it;
    /// not for a file with other links, whose name the table knows may not be the one opened.
    private func nameNamesAnother(_ request: MountRequest, _ delegations: any HostDelegations) -> Bool {
        guard request.isOpen else { return false }
        let node = request.wanted.node, taken = delegations.acquisitions
        if node.nameCheckedAt.load(ordering: .relaxed) == taken || node.hasOtherLinks.load(ordering: .relaxed) {
            return false
        }
        if targets.nameNamesAnother(node) { return true }
        node.nameCheckedAt.store(taken, ordering: .relaxed)
        return false
    }

    /// Whether a request of an accessor (`Claim.accessor`) comes after its hold lost its
    /// cover: its host's lease may have ended, or a loss of cover since the hold was granted
    /// reaches an item the request needs (a recall broken at the break time, a lease lost and
    /// the item not carried over at the rejoin). Another host may have written the hold's item
    /// since the accessor read it: what the accessor writes now would undo that (a lost
    /// update), and what it reads is not what its hold stands for. As writes through an open
    /// file, then, it is refused (EIO), and so is everything the accessor does there after.
    private func holdLostItsCover(
        _ request: MountRequest, _ needs: [DelegationNeed], _ delegations: any HostDelegations
    ) -> Bool {
        let now = coarseMilliseconds()
        guard let process = callingProcess(request.caller, now: now) else { return false }
        let named = [request.wanted] + (request.other.map { [$0] } ?? [])
        let hold = domain.accessorHolds.covering(named.map { targets.target(of: $0, now: now) }, of: process)
        guard let cover = hold?.cover else { return false }
        return delegations.lostCover(of: needs, since: cover)
    }

    /// A request of an accessor whose hold lost its cover (`holdLostItsCover`): EIO, its
    /// claim ended unused.
    private func fencedAccessorRequest(
        _ reply: consuming Reply, _ claim: consuming MountClaim, _ request: MountRequest
    ) {
        statistics.fencedAccessorRequests.add(1, ordering: .relaxed)
        logger.error(
            "cluster: a request inside a coordinated access is refused (EIO): the item its hold was granted on may have been another host's since"
        )
        claim.end(request.unchanged)
        reply.error(Errno(code: EIO))
    }

    /// An open of an item another host replaced (`nameNamesAnother`): answered ESTALE, its
    /// claim ended unused. The kernel then looks the name up again, past what it kept, and
    /// opens the item the name is now, as NFS's close-to-open has it: an open after another
    /// host's close sees what that host wrote.
    private func staleName(_ reply: consuming Reply, _ claim: consuming MountClaim, _ request: MountRequest) {
        statistics.takenAgain.add(1, ordering: .relaxed)
        claim.end(request.unchanged)
        reply.error(Errno(code: ESTALE))
    }

    /// The delegations `wanted` (and `other`) need: of the item each locks (its outermost
    /// package, or itself), for a program's request.
    private func delegationNeeds(_ wanted: ItemIntent, _ other: ItemIntent?) -> [DelegationNeed] {
        let now = coarseMilliseconds()
        func need(_ intent: ItemIntent) -> DelegationNeed? {
            guard var need = store.delegationNeed(intent.kind, of: targets.target(of: intent, now: now)) else {
                return nil
            }
            need.byProgram = true
            return need
        }
        return [need(wanted), other.flatMap(need)].compactMap { $0 }
    }

    /// The reads of a request whose items other hosts' presenters present: asked first, as a
    /// read here asks this host's presenters. None for a request nothing coordinates, nor for
    /// one that holds nothing (the notify mode tells, and asks nobody), nor inside an accessor
    /// whose hold covers its items (its hold asked them, and its own work messages nobody, C20).
    private func presenterQuestions(_ request: MountRequest, _ delegations: any HostDelegations) -> [DelegationNeed] {
        guard isCoordinated(request.wanted, request.other, request.caller),
            coordinationMode(request.wanted, request.other).holds
        else { return [] }
        let questions = delegationNeeds(request.wanted, request.other).filter {
            $0.asksPresenters && delegations.othersPresent(at: $0.path)
        }
        if questions.isEmpty || domain.accessorHolds.isEmpty { return questions }
        let now = coarseMilliseconds()
        guard let process = callingProcess(request.caller, now: now) else { return questions }
        let named = [request.wanted] + (request.other.map { [$0] } ?? [])
        let covering = domain.accessorHolds.covering(named.map { targets.target(of: $0, now: now) }, of: process)
        return covering == nil ? questions : []
    }

    /// Whether `delegations` cover `needs` now. An accessor's own request (`Claim.accessor`: a
    /// process of a `coordinate` hold, its descendant, a Swift program in its coordinated block)
    /// is covered for what its hold stands for by the delegation the hold was granted under,
    /// recalled or not, until its host gives it back: the recall waits for the hold, so waiting
    /// for the recall would be waiting for itself (until the break time). The identity rule of
    /// one host (C20), across hosts.
    private func covered(
        _ needs: [DelegationNeed], by delegations: any HostDelegations, for claim: borrowing MountClaim
    ) -> Bool {
        if needs.allSatisfy({ delegations.covers($0.path, $0.access) }) { return true }
        guard case .accessor(let held, _)? = claim.held else { return false }
        let holds = held.intents.compactMap { store.delegationNeed($0.kind, of: $0.target) }
        return needs.allSatisfy { need in
            if delegations.covers(need.path, need.access) { return true }
            // Only inside an item the hold needed as much of: a read hold's writer asks as anyone.
            let standsFor = holds.contains { hold in
                (hold.access.writes || !need.access.writes)
                    && (hold.path.isEmpty || hold.path == need.path || need.path.hasPrefix(hold.path + "/"))
            }
            return standsFor && delegations.coversAccessor(need.path, need.access)
        }
    }

    /// Waits for the delegations `needs` (or, `asking`, for the answers of the other hosts'
    /// presenters of their items), then hands the reply to `then` on another thread, with the
    /// needs another host let past its programs and the promises of the grants it waited for
    /// (`DelegationPromise`: redeemed once the request has claimed and looked); or answers EINTR (interrupted), EBUSY (past
    /// the deadline), EAGAIN (another host holds it and the request would not wait), ENOLCK
    /// (the host may grant nothing: its lease is lost, or the cluster cannot be reached), or
    /// the errno another host refused it with (a presenter's refusal there).
    private func waitForDelegations(
        _ needs: [DelegationNeed], _ delegations: any HostDelegations, _ reply: consuming Reply,
        asking: Bool = false, waits: Bool, until deadline: ContinuousClock.Instant?,
        then: @escaping @Sendable (consuming Reply, [DelegationNeed], [any DelegationPromise]) -> Void
    ) {
        let number = waitingRequests.number()
        reply.onInterrupt(number)
        let wait = DelegationWait(PendingReply(reply)) { [self] outcome, reply in
            waitingRequests.ended(number)
            switch outcome {
            case .granted(let passed, let promised):
                DispatchQueue.global().async { then(reply.take(), passed, promised) }
            case .interrupted: reply.take().error(Errno(code: EINTR))
            case .wouldWait: reply.take().error(Errno(code: EAGAIN))
            case .timedOut:
                statistics.count(Errno(code: EBUSY))
                reply.take().error(Errno(code: EBUSY))
            case .refused(let why):
                if waitingRequests.mayLogGivingUp() { logger.error("cluster: \(why); answering ENOLCK") }
                reply.take().error(Errno(code: ENOLCK))
            case .refusedThere(let code):
                statistics.count(Errno(code: code))
                reply.take().error(Errno(code: code))
            }
        }
        statistics.waited.add(1, ordering: .relaxed)
        if waitingRequests.waits(number, in: wait) { return wait.cancel() }
        if let deadline {
            let left = max(deadline - ContinuousClock.now, .zero)
            let (seconds, attoseconds) = left.components
            DispatchQueue.global().asyncAfter(deadline: .now() + Double(seconds) + Double(attoseconds) / 1e18) {
                wait.finish(.timedOut)
            }
        }
        acquire(needs[...], delegations, asking: asking, waits: waits, passed: [], for: wait)
    }

    /// Acquires `needs` (or asks about them) one after the other, then finishes `wait` with
    /// those another host let past its programs.
    private func acquire(
        _ needs: ArraySlice<DelegationNeed>, _ delegations: any HostDelegations, asking: Bool, waits: Bool,
        passed: [DelegationNeed], for wait: DelegationWait
    ) {
        guard let need = needs.first else { return wait.finish(.granted(passed, wait.promised)) }
        let answered: @Sendable (HostDelegationOutcome) -> Void = { [self] outcome in
            switch outcome {
            case .granted(let promise):
                if let promise { wait.keep(promise) }
                acquire(needs.dropFirst(), delegations, asking: asking, waits: waits, passed: passed, for: wait)
            case .passed:
                acquire(
                    needs.dropFirst(), delegations, asking: asking, waits: waits, passed: passed + [need], for: wait)
            case .wouldWait: wait.finish(.wouldWait)
            case .refused(let why): wait.finish(.refused(why))
            case .refusedThere(let errno): wait.finish(.refusedThere(errno))
            }
        }
        let stop =
            asking
            ? delegations.askPresenters(need, completion: answered)
            : delegations.acquire(need, waits: waits, completion: answered)
        wait.stopsWith(stop)
    }
}

/// A request waiting for its host's delegations: finished once, by the grant, the wait timeout,
/// the kernel's interrupt or a refusal. An interrupt or a timeout stops the wait for the
/// delegation too.
final class DelegationWait: Sendable, CancellableWait {
    enum Outcome: Sendable {
        /// With the needs another host let past its programs, and the promises of the grants
        /// waited for.
        case granted([DelegationNeed], [any DelegationPromise])
        case interrupted, timedOut, wouldWait
        case refused(String)
        case refusedThere(Int32)
    }

    private struct State {
        var completion: (@Sendable (Outcome, PendingReply) -> Void)?
        var stop: (@Sendable () -> Void)?
        /// The promises of the grants waited for so far: handed on with the request, or
        /// redeemed at once if it ends otherwise.
        var promises: [any DelegationPromise] = []
    }

    private let reply: PendingReply
    private let state: Mutex<State>

    /// Keeps the promise of a grant waited for; one that comes once the wait has ended is
    /// redeemed at once.
    func keep(_ promise: any DelegationPromise) {
        let kept = state.withLock { state -> Bool in
            guard state.completion != nil else { return false }
            state.promises.append(promise)
            return true
        }
        if !kept { promise.redeem() }
    }

    var promised: [any DelegationPromise] { state.withLock { $0.promises } }

    init(_ reply: PendingReply, _ completion: @escaping @Sendable (Outcome, PendingReply) -> Void) {
        self.reply = reply
        state = Mutex(State(completion: completion))
    }

    /// What stops the wait for the delegation asked for now.
    func stopsWith(_ stop: @escaping @Sendable () -> Void) {
        let finished = state.withLock { state -> Bool in
            if state.completion == nil { return true }
            state.stop = stop
            return false
        }
        if finished { stop() }
    }

    func finish(_ outcome: Outcome) {
        let ended = state.withLock { state in
            defer { state = State() }
            return state
        }
        guard let completion = ended.completion else { return }
        switch outcome {
        case .interrupted, .timedOut: ended.stop?()
        case .granted, .wouldWait, .refused, .refusedThere: break
        }
        if case .granted = outcome {} else { for promise in ended.promises { promise.redeem() } }
        completion(outcome, reply)
    }

    func cancel() { finish(.interrupted) }
}

extension MountCoordinator {
    /// What holds through this mount's control socket must pass: its host's delegations, when
    /// it has any.
    var claimGate: (any ClaimGate)? { delegations.map { DelegationGate(store: store, delegations: $0) } }
}
