import LinuxSystem
import CLinux
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The one owner of a request's coordination: its mode, the quiet gates, the claim (granted at
/// once, inside an accessor, or waited for), its retries when its items moved, and its waits'
/// interrupts.
extension Filesystem {
    /// One intent of a kernel request: an access of an item, named by its node, or by the
    /// directory that holds it and its name there (the engine's `Intent` before its path is
    /// spelled out).
    struct ItemIntent {
        var kind: AccessKind
        /// The item itself, or the directory that holds `name`.
        var node: Inode
        /// Empty for `node` itself: the kernel never names an item so. Not an optional: copying
        /// a `String?` runs the optional's value witnesses, some ten cache lines of code.
        var name: String = ""
        var isDirectory: Bool
        /// The kernel keeps the item's inode locked while the request waits (a truncation):
        /// every write of the file waits behind it, as others' requests about names in a
        /// directory wait behind a request about one of them.
        var inodeLocked = false
    }

    /// The mode the configuration's rules give the item `wanted` names.
    private func mode(for wanted: ItemIntent) -> CoordinationMode {
        configuration.mode(for: relativePath(wanted.node, wanted.name.isEmpty ? nil : wanted.name))
    }

    /// The mode of a request: its item's, or (when that holds nothing) the other item's.
    func coordinationMode(_ wanted: ItemIntent, _ other: ItemIntent?) -> CoordinationMode {
        var mode = configuration.mode
        if !configuration.modeRules.isEmpty {
            mode = self.mode(for: wanted)
            if let other, !mode.holds {
                let otherMode = self.mode(for: other)
                if otherMode != .off { mode = otherMode }
            }
        }
        return mode
    }

    /// Takes `wanted` (and `other`, both or none) for the calling process, then runs `body`
    /// with what it holds (nil when the path is not coordinated). On refusal the request is
    /// answered with the errno and `body` does not run. An interrupt from the kernel ends the
    /// wait with EINTR.
    ///
    /// Requests of the kernel's own threads are not coordinated: they finish what a coordinated
    /// open started (with the writeback cache, the flusher writes pages and file times back).
    /// Making the flusher wait for the open's holder would stall writeback for the whole mount,
    /// and with it every writer throttled on dirty pages.
    ///
    /// `forTheCall`: the request holds its items only while `body` runs (docs/mount.md: a namespace
    /// change, a setattr), not for an open file's life. While the engine holds nothing, or only
    /// files held open by other names, such a request passes a quiet gate instead: nobody to
    /// wait for or to tell (`QuietGate`, `passQuietly`).
    ///
    /// A host of a shared store first waits for the delegations the request needs
    /// (`coordinateInCluster`).
    func coordinate(_ reply: consuming Reply, _ wanted: ItemIntent, and other: ItemIntent? = nil, nonBlocking: Bool = false,
                    forTheCall: Bool = false, _ body: @escaping @Sendable (consuming Reply, Claim?) -> Void) {
        if let delegations {
            return coordinateInCluster(reply, wanted, and: other, nonBlocking: nonBlocking, forTheCall: forTheCall, delegations, body)
        }
        coordinate(reply, wanted, and: other, nonBlocking: nonBlocking, forTheCall: forTheCall, attempt: 0, body)
    }

    /// `coordinate`, taken again (`attempt` > 0) when what it held had moved before it held it.
    func coordinate(_ reply: consuming Reply, _ wanted: ItemIntent, and other: ItemIntent?, nonBlocking: Bool,
                            forTheCall: Bool, attempt: Int, _ body: @escaping @Sendable (consuming Reply, Claim?) -> Void) {
        // An O_TMPFILE file not linked yet: nobody else can reach it (`tmpfile`).
        if wanted.name.isEmpty && wanted.node.isUnnamed.load(ordering: .relaxed) { return body(reply, nil) }
        let mode = coordinationMode(wanted, other)
        if mode == .off { return body(reply, nil) }
        let wanted = mode == .strict ? Self.strict(wanted) : wanted
        let other = mode == .strict ? other.map(Self.strict) : other
        if forTheCall && mayPassQuietly(wanted, other), let passage = passQuietly(wanted, other) {
            if attempt == 0 { statistics.coordinated.add() }
            body(reply, nil)
            return endPassing(passage)
        }
        // One clock reading serves the request's caches.
        let now = coarseMilliseconds()
        guard let process = callingProcess(reply.caller, now: now) else { return body(reply, nil) }
        let identity = CoordinatorIdentity.process(process)
        if attempt == 0 { statistics.coordinated.add() }
        if !domain.accessorHolds.isEmpty, let claim = accessorClaim(of: process, wanted, other, now: now) {
            return body(reply, claim)
        }
        // Read before the targets are named: see `movedBeforeHeld`.
        let movesSeen = inodes.placesGeneration.value
        let intents: [Intent]
        if other == nil && mode.holds {
            // Most requests: one item, nothing in the way and nobody to ask. Without an intents
            // array unless the request has to wait. (Only a rename, of two items, reports a move.)
            // The engine keeps the intent it is given; one that waits is made again.
            let (target, place) = targetAndPlace(of: wanted, now: now)
            configuration.afterNamingTargets?()
            var claim: Claim?
            if !forTheCall, let place, target.enclosingPackages.isEmpty {
                // An open, a create, a truncation: gated, it leaves the engine's second quiet
                // gate open for requests about other names (`NameGates`).
                let gate = nameGates.index(of: place.name, in: place.directory)
                nameGates.shut(gate)
                if let grant = engine.acquireAtOnce(Intent(wanted.kind, target), for: identity, gated: true) {
                    claim = .gated(grant, gate: gate)
                } else {
                    nameGates.open(gate)
                }
            } else if let grant = engine.acquireAtOnce(Intent(wanted.kind, target), for: identity) {
                claim = .single(grant)
            }
            if let claim {
                if movedBeforeHeld(CollectionOfOne(target.path), wanted, other, since: movesSeen, attempt: attempt, now: now) {
                    return coordinateAgain(claim, reply, wanted, other, nonBlocking, forTheCall, attempt, body)
                }
                // As `end(_:outcome:thenAnswer:)`: a listed claim holds nothing back.
                if claim.isOnShortList { return body(reply, claim) }
                domain.holdNotifications()
                body(reply, claim)
                return domain.deliverHeldNotifications()
            }
            intents = [Intent(wanted.kind, target)]
        } else {
            intents = if let other {
                [Intent(wanted.kind, target(of: wanted, now: now)), Intent(other.kind, target(of: other, now: now))]
            } else {
                [Intent(wanted.kind, target(of: wanted, now: now))]
            }
            configuration.afterNamingTargets?()
            if let claim = Claim.grantedAtOnce(in: domain, identity: identity, intents: intents, holds: mode.holds) {
                if movedBeforeHeld(intents.lazy.map(\.path), wanted, other, since: movesSeen, attempt: attempt, now: now) {
                    return coordinateAgain(claim, reply, wanted, other, nonBlocking, forTheCall, attempt, body)
                }
                domain.holdNotifications()
                body(reply, claim)
                return domain.deliverHeldNotifications()
            }
        }
        let number = waitingRequests.number()
        // A request about a name waits with its directory locked by the kernel; a setattr, its
        // inode: holders that need them must not wait for it in turn. A truncation locks the
        // inode too: it is not looked at for holders stuck on it (its own rule's), but others
        // are kept out meanwhile (the lock time).
        let underKernelLock = forTheCall || !wanted.name.isEmpty
        let locksOthersOut = underKernelLock || wanted.inodeLocked
        // An unlink, rmdir or rename: what it passes on the names it takes away is revoked once
        // it is made (`revokePassedHolds`).
        var changesNames = false
        if forTheCall, case .writing(let options) = wanted.kind, !options.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing]) {
            changesNames = true
        }
        // O_NONBLOCK answers what a blocking request would do now. A read that the settle rule
        // may let through begins as a waiter, looked at once (below); anything else is refused
        // where it would wait.
        let settling = nonBlocking && mode != .strict && !wanted.kind.isWrite && waitWatch.settleTime != nil
        // An open of the items by this process went ahead by a break: the request goes ahead past
        // the same holders at once, as that open's own writes do (`BrokenOpens`).
        let covered = brokenOpens.covers(intents, of: process)
        let watched = !settling && waitWatch.watches(underKernelLock: underKernelLock, locksOthersOut: locksOthersOut)
        // Watched, its wait for other users ends by itself (the break time, or the lock time):
        // a cycle through it is no deadlock (X1).
        let passesOtherUsers = watched && (waitWatch.breakTime != nil || (locksOthersOut && waitWatch.lockTime != nil))
        // Registered before the claim starts: the claim may be granted (and answered) at once.
        reply.onInterrupt(number)
        let uid = reply.caller.uid
        let pending = PendingReply(reply)
        // The completion runs on the thread that ended the wait: most often the one serving
        // the holder's RELEASE, which the kernel sends without waiting for its answer (close(2)
        // has returned), so the waiter is served there at once instead of after a hand-off to
        // another thread; a timeout's or an interrupt's, on the thread that noticed it.
        let access = Claim.beginWaiting(in: domain, identity: identity, intents: intents, waits: !nonBlocking || settling || covered,
                                        holds: mode.holds, timeout: configuration.waitTimeout,
                                        user: uid, passesOtherUsers: passesOtherUsers) { [self] result in
            waitingRequests.ended(number)
            if watched { waitWatch.forget(number) }
            switch result {
            case .success(let claim):
                // The paths as granted: moves reported while it waited are followed (C11).
                if movedBeforeHeld(claim.intents.lazy.map(\.path), wanted, other, since: movesSeen, attempt: attempt,
                                   now: coarseMilliseconds()) {
                    return coordinateAgain(claim, pending.take(), wanted, other, nonBlocking, forTheCall, attempt, body)
                }
                domain.deliveringAfter { body(pending.take(), claim) }
            case .failure(let error):
                var failure = Errno.from(coordination: error)
                // Waiting for nobody, it closes no cycle: it would block.
                if settling && failure == Errno(code: EDEADLK) { failure = Errno(code: EAGAIN) }
                statistics.count(failure)
                pending.take().error(failure)
                if case .timedOut? = error as? FileCoordinationError {
                    logGivingUp(process, intents, after: .milliseconds(coarseMilliseconds() - now))
                }
            }
        }
        var interrupted = false
        guard access.ifUnsettled({
            interrupted = waitingRequests.waits(number, in: access)
            if watched {
                waitWatch.watch(number, access, underKernelLock: underKernelLock, locksOthersOut: locksOthersOut,
                                changesNames: changesNames, passesLeases: true, uid: uid,
                                item: mode == .strict ? nil : (wanted.node, wanted.name))   // strict: no settling
            }
        }) else { return }
        // Its holders were told of the break once, at the open's.
        if covered && access.breakThroughWhileWaiting() {
            statistics.coveredByBrokenOpen.add(1, ordering: .relaxed)
            return
        }
        if settling {
            if !waitWatch.goesAheadNow(access, item: (wanted.node, wanted.name)) { access.stopWaiting(because: .wouldBlock) }
            return
        }
        statistics.waited.add(1, ordering: .relaxed)
        if interrupted { access.cancel() }
    }

    /// `intent` as strict mode takes it: every writer excludes every other open (no appending or
    /// writing in place beside others, U1, U2), and no open file lets a change pass it.
    private static func strict(_ intent: ItemIntent) -> ItemIntent {
        var strict = intent
        switch intent.kind {
        case .writing(let options):
            if !options.isDisjoint(with: [.appendingOnly, .sharingWriters]) {
                strict.kind = .writing([])
            } else if !options.isDisjoint(with: [.passesOpenReads, .passesAppends]) {
                strict.kind = .writing(options.subtracting([.passesOpenReads, .passesAppends]))
            }
        case .reading(let options):
            if options.contains(.throughOpenFile) { strict.kind = .reading(options.subtracting(.throughOpenFile)) }
        }
        return strict
    }

    /// A name change made past holds (`WaitWatch`: the kernel-lock rule, the lock time, the
    /// break time) revokes, once it is made, those it passed on the names it took away
    /// (`CoordinatedAccess.revokePassed`): their items are gone from there.
    func revokePassedHolds(_ claim: Claim?) {
        guard case .waited(let access)? = claim else { return }
        let revoked = access.revokePassed()
        if revoked > 0 { waitWatch.holdsRevoked.add(revoked, ordering: .relaxed) }
    }

    /// A request that gave up waiting (EBUSY) says in the log who it waited for, and how long:
    /// what a user whose program failed asks next. Read after the fact from those holding its items now. At most ten
    /// lines a second: waiters giving up together, or a user who makes them, must not flood the
    /// log (or cost a snapshot of the engine each).
    private func logGivingUp(_ process: Int32, _ intents: [Intent], after waited: Duration) {
        guard waitingRequests.mayLogGivingUp() else { return }
        let paths = Set(intents.map(\.path))
        let holders = engine.snapshot().holders.flatMap { holder in
            holder.intents.filter { intent in paths.contains { $0 == intent.path || $0.isAncestor(of: intent.path) || intent.path.isAncestor(of: $0) } }
                .map { "\($0.path) held for \($0.kind.isWrite ? "write" : "read") by \(holder.identity.logName)" }
        }
        let wanted = intents.map { "\($0.kind.isWrite ? "write" : "read") of \($0.path)" }.joined(separator: ", ")
        let line = "\(CoordinatorIdentity.process(process).logName) gave up (EBUSY) after \(waited.logText) on \(wanted): "
            + (holders.isEmpty ? "nobody holds it any more" : holders.joined(separator: "; "))
        logger.notice("\(line)")
    }

    /// The claim of a request that `process` makes inside one of its own accessors: a hold it
    /// took through the control socket covers an item the request names (C20, docs/swift.md).
    private func accessorClaim(of process: Int32, _ wanted: ItemIntent, _ other: ItemIntent?, now: Int64) -> Claim? {
        let first = target(of: wanted, now: now)
        let second = other.map { target(of: $0, now: now) }
        let targets = second.map { [first, $0] } ?? [first]
        guard let held = domain.accessorHolds.covering(targets, of: process) else { return nil }
        var intents = [Intent(wanted.kind, first)]
        if let other, let second { intents.append(Intent(other.kind, second)) }
        return .accessor(held: held.claim, intents: intents)
    }

    /// Ends `stale` unused and coordinates the request again (`movedBeforeHeld`).
    private func coordinateAgain(_ stale: Claim, _ reply: consuming Reply, _ wanted: ItemIntent, _ other: ItemIntent?, _ nonBlocking: Bool,
                           _ forTheCall: Bool, _ attempt: Int, _ body: @escaping @Sendable (consuming Reply, Claim?) -> Void) {
        statistics.takenAgain.add(1, ordering: .relaxed)
        let unchanged = IntentOutcome(existedBefore: true, existsAfter: true, changed: false)
        end(stale, outcomes: other == nil ? [unchanged] : [unchanged, unchanged])
        coordinate(reply, wanted, and: other, nonBlocking: nonBlocking, forTheCall: forTheCall, attempt: attempt + 1, body)
    }

    /// Whether the items a claim was granted on (`granted`, in the order of `wanted`, `other`)
    /// are no longer where the claim holds them.
    ///
    /// A request names its targets from the inode table, then asks the engine. A rename that
    /// moves an item in between leaves the request holding the name the item has left. A rename
    /// that holds a grant meanwhile makes the request wait and reports the move, which the
    /// waiting request follows (C11); but a rename that passes a quiet gate holds nothing and
    /// reports nothing, and the request's grant merely waits for it to leave the gate (`QuietGate`,
    /// `NameGates`). (Nor does a rename that begins and ends while the request
    /// is between naming and asking, if its thread is preempted there.) So when a node
    /// has moved since the targets were named (`InodeTable.placesGeneration`), they are named
    /// again, and a claim whose targets differ is ended unused and taken again. Once held,
    /// nothing moves its items without waiting for it. (After many attempts, unlikely but not
    /// impossible while others keep moving the same item, the claim is kept as granted.)
    private func movedBeforeHeld<Paths: Collection<ItemPath>>(_ granted: Paths, _ wanted: ItemIntent, _ other: ItemIntent?,
                                                             since seen: Int, attempt: Int, now: Int64) -> Bool {
        guard attempt < 64, inodes.placesGeneration.value != seen else { return false }
        var paths = granted.makeIterator()
        if paths.next() != target(of: wanted, now: now).path { return true }
        if let other, paths.next() != target(of: other, now: now).path { return true }
        return false
    }

    /// Whether a request for the call may pass the quiet gate: its items lie on the backing's
    /// own filesystem, and that is local. Whoever closes the gate waits for the requests that
    /// passed; one on a network filesystem could keep it waiting as long as its server takes.
    private func mayPassQuietly(_ wanted: ItemIntent, _ other: ItemIntent?) -> Bool {
        filesystems.rootIsLocal && wanted.node.device == filesystems.rootDevice
            && (other.map { $0.node.device == filesystems.rootDevice } ?? true)
    }

    /// The kernel interrupted a waiting request (possibly before its claim was registered).
    func interrupt(_ number: UInt) { waitingRequests.interrupt(number) }

    /// The thread group of the calling thread: the process is the coordinator — or, when it
    /// descends from a process whose holds are inherited (`coordfs coordinate`), that process.
    /// Nil for a kernel thread.
    func callingProcess(_ request: RequestCaller, now: Int64) -> Int32? {
        let caller = ProcessInfoCache.caller(of: request.thread, now: now)
        if caller.isKernelThread { return nil }
        let process = caller.process
        guard domain.hasInheritingProcesses else { return process }
        let inheriting = domain.inheritingProcesses
        var current = process
        for _ in 0..<32 {
            if inheriting.contains(current) { return current }
            guard let parent = ProcessInfoCache.parent(of: current, now: now), parent > 1 else { break }
            current = parent
        }
        return process
    }
}
