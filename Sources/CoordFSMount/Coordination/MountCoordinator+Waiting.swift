import LinuxSystem
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A request that cannot be granted at once waits (or, O_NONBLOCK, is answered as a blocking
/// one would be now), watched where its wait must end early, and interruptible by the kernel.
extension MountCoordinator {
    /// How a waiting request is watched and let through.
    private struct WaitPlan {
        /// A request about a name waits with its directory locked by the kernel; a setattr, its
        /// inode: holders that need them must not wait for it in turn.
        var underKernelLock: Bool
        /// A truncation locks the inode too: it is not looked at for holders stuck on it (its
        /// own rule's), but others are kept out meanwhile (the lock time).
        var locksOthersOut: Bool
        /// A request about a name in a directory other users may list or search, on a mount
        /// they may use: they may need the lock it waits under, so its wait for its own user
        /// ends at the lock time too, refused (`WaitWatch`, the own-user rule).
        var othersNeedLock: Bool
        /// An unlink, rmdir or rename: what it passes on the names it takes away is revoked once
        /// it is made (`MountClaim.revokePassed`).
        var changesNames: Bool
        /// O_NONBLOCK answers what a blocking request would do now. A read that the settle rule
        /// may let through begins as a waiter, looked at once; anything else is refused where it
        /// would wait.
        var settling: Bool
        /// An open of the items by this process went ahead by a break: the request goes ahead
        /// past the same holders at once, as that open's own writes do (`BrokenOpens`).
        var covered: Bool
        var watched: Bool
        /// Watched, its wait for other users ends by itself (the break time, or the lock time):
        /// a cycle through it is no deadlock (X1).
        var passesOtherUsers: Bool
    }

    private func plan(_ request: MountRequest, _ waiting: Waiting) -> WaitPlan {
        let underKernelLock = request.forTheCall || !waiting.wanted.name.isEmpty
        let locksOthersOut = underKernelLock || waiting.wanted.inodeLocked
        var changesNames = false
        if request.forTheCall, case .writing(let options) = waiting.wanted.kind,
            !options.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing])
        {
            changesNames = true
        }
        let settling =
            request.nonBlocking && waiting.mode != .strict && !waiting.wanted.kind.isWrite
            && waitWatch.settleTime != nil
        let covered = brokenOpens.covers(waiting.intents, of: waiting.process)
        let watched = !settling && waitWatch.watches(underKernelLock: underKernelLock, locksOthersOut: locksOthersOut)
        let passesOtherUsers = watched && (waitWatch.breakTime != nil || (locksOthersOut && waitWatch.lockTime != nil))
        let othersNeedLock = watched && othersMayNeedTheLock(of: waiting, besides: request.caller.uid)
        return WaitPlan(
            underKernelLock: underKernelLock, locksOthersOut: locksOthersOut, othersNeedLock: othersNeedLock,
            changesNames: changesNames, settling: settling, covered: covered, watched: watched,
            passesOtherUsers: passesOtherUsers)
    }

    /// Whether users other than `caller` may need a directory lock the kernel keeps while
    /// `waiting` waits: it is about a name (a rename, about two), the mount lets others in, and
    /// they may list or search the directory (either, for a rename), by its mode and owner as
    /// the mount shows them (`WaitWatch.othersMayListOrSearch`). Off with `--lock-time 0`. A
    /// directory that cannot be looked at counts as one they may.
    private func othersMayNeedTheLock(of waiting: Waiting, besides caller: uid_t) -> Bool {
        guard configuration.allowsOthers, waitWatch.lockTime != nil, !waiting.wanted.name.isEmpty else { return false }
        let directories = [waiting.wanted] + (waiting.other.map { [$0] } ?? [])
        return directories.contains { item in
            !item.name.isEmpty
                && targets.inodes.withFD(item.node, orElse: { _ in true }) { fd in
                    var info = stat()
                    guard fstat(fd, &info) == 0 else { return true }
                    return WaitWatch.othersMayListOrSearch(ownership.shown(info), besides: caller)
                }
        }
    }

    /// Leaves the request waiting for its claim; its body runs on the thread that ends the wait.
    func wait(_ reply: consuming Reply, _ request: MountRequest, _ waiting: Waiting) {
        let number = waitingRequests.number()
        let plan = plan(request, waiting)
        // Registered before the claim starts: the claim may be granted (and answered) at once.
        reply.onInterrupt(number)
        let pending = PendingReply(reply)
        // The completion runs on the thread that ended the wait: most often the one serving
        // the holder's RELEASE, which the kernel sends without waiting for its answer (close(2)
        // has returned), so the waiter is served there at once instead of after a hand-off to
        // another thread; a timeout's or an interrupt's, on the thread that noticed it.
        let access = Claim.beginWaiting(
            in: domain, identity: .process(waiting.process), intents: waiting.intents,
            waits: !request.nonBlocking || plan.settling || plan.covered, holds: waiting.mode.holds,
            timeout: configuration.waitTimeout, user: request.caller.uid,
            passesOtherUsers: plan.passesOtherUsers
        ) { [self] result in
            waitingRequests.ended(number)
            if plan.watched { waitWatch.forget(number) }
            switch result {
            case .success(let claim): granted(claim, pending.take(), request, waiting)
            case .failure(let failure): refused(failure, pending.take(), waiting, settling: plan.settling)
            }
        }
        var interrupted = false
        guard
            access.ifUnsettled({
                interrupted = waitingRequests.waits(number, in: access)
                if plan.watched {
                    // A strict request names no item: it never settles.
                    waitWatch.watch(
                        number, access, underKernelLock: plan.underKernelLock, locksOthersOut: plan.locksOthersOut,
                        othersNeedLock: plan.othersNeedLock, changesNames: plan.changesNames, passesLeases: true,
                        uid: request.caller.uid,
                        item: waiting.mode == .strict ? nil : (waiting.wanted.node, waiting.wanted.name))
                }
            })
        else { return }
        // Its holders were told of the break once, at the open's.
        if plan.covered && access.breakThroughWhileWaiting() {
            statistics.coveredByBrokenOpen.add(1, ordering: .relaxed)
            return
        }
        if plan.settling {
            if !waitWatch.goesAheadNow(access, item: (waiting.wanted.node, waiting.wanted.name)) {
                access.stopWaiting(because: .wouldBlock)
            }
            return
        }
        statistics.waited.add(1, ordering: .relaxed)
        if interrupted { access.cancel() }
    }

    /// The wait ended with `claim`: the body runs with it, unless its items moved while it
    /// waited in a way it could not follow, when it is taken again.
    private func granted(_ claim: Claim, _ reply: consuming Reply, _ request: MountRequest, _ waiting: Waiting) {
        // The paths as granted: moves reported while it waited are followed (C11).
        if movedBeforeHeld(
            claim.intents.lazy.map(\.path), waiting.wanted, waiting.other, since: waiting.movesSeen,
            attempt: request.attempt, now: coarseMilliseconds())
        {
            endUnused(claim, request)
            var again = request
            again.attempt += 1
            return take(reply, again)
        }
        let pending = PendingReply(reply)
        domain.deliveringAfter { request.body(pending.take(), MountClaim(claim, self)) }
    }

    private func refused(_ failure: AccessFailure, _ reply: consuming Reply, _ waiting: Waiting, settling: Bool) {
        var answer = Errno.from(coordination: failure)
        // Waiting for nobody, it closes no cycle: it would block.
        if settling && answer == Errno(code: EDEADLK) { answer = Errno(code: EAGAIN) }
        statistics.count(answer)
        reply.error(answer)
        if case .refused(.timedOut, _) = failure {
            logGivingUp(waiting.process, waiting.intents, after: .milliseconds(coarseMilliseconds() - waiting.began))
        }
    }

    /// A request that gave up waiting (EBUSY) says in the log who it waited for, and how long:
    /// what a user whose program failed asks next. Read after the fact from those holding its
    /// items now. At most ten lines a second: waiters giving up together, or a user who makes
    /// them, must not flood the log (or cost a snapshot of the engine each).
    private func logGivingUp(_ process: Int32, _ intents: [Intent], after waited: Duration) {
        guard waitingRequests.mayLogGivingUp() else { return }
        let paths = Set(intents.map(\.path))
        let holders = engine.snapshot(SnapshotWindow(lists: [.holders])).holders.flatMap { holder in
            holder.intents.filter { intent in
                paths.contains { $0 == intent.path || $0.isAncestor(of: intent.path) || intent.path.isAncestor(of: $0) }
            }
            .map { "\($0.path) held for \($0.kind.isWrite ? "write" : "read") by \(holder.identity.logName)" }
        }
        let wanted = intents.map { "\($0.kind.isWrite ? "write" : "read") of \($0.path)" }.joined(separator: ", ")
        let line =
            "\(CoordinatorIdentity.process(process).logName) gave up (EBUSY) after \(waited.logText) on \(wanted): "
            + (holders.isEmpty ? "nobody holds it any more" : holders.joined(separator: "; "))
        logger.notice("\(line)")
    }
}
