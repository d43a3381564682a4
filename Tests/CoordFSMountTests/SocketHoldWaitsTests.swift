import Coordination
import CoordinationRuntime
@testable import CoordFSMount
import Foundation
import Synchronization
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A hold through a mount's control socket waits as the mount's own requests do for other
/// users (docs/sharing.md): another user's hold is passed at the break time, revoked and told.
/// Its own user's holds and programs' opens are waited for up to its timeout, as a coordinated
/// access waits within one user.
@Suite struct SocketHoldWaitsTests {
    let item = ItemPath("/shared.txt")!
    let unchanged = IntentOutcome(existedBefore: true, existsAfter: true, changed: false)

    /// A process that sleeps until the test ends, of nobody (uid 65534) or of the test's user.
    final class Sleeper {
        let pid: pid_t

        init(asNobody: Bool) throws {
            let words =
                (asNobody ? ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] : []) + [
                    "/bin/sleep", "60"
                ]
            var argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
            defer { argv.forEach { free($0) } }
            var child: pid_t = 0
            try #require(posix_spawn(&child, words[0], nil, nil, &argv, environ) == 0)
            pid = child
            if asNobody {
                // setpriv has changed its user once /proc says so (it then runs sleep).
                #expect(eventually(.seconds(5)) { CoordinatorUsers.user(of: .process(child)) == 65534 })
            }
        }

        deinit {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
    }

    // @unchecked Sendable: `result` is behind `lock`.
    /// What a claim came to, set once by its completion.
    final class Outcome: @unchecked Sendable {
        private let lock = NSLock()
        private var result: Result<Claim, AccessFailure>?
        func set(_ result: Result<Claim, AccessFailure>) { lock.withLock { self.result = result } }
        var value: Result<Claim, AccessFailure>? { lock.withLock { result } }
    }

    /// A mount's wait watch with a short break time, what the control socket's holds wait with,
    /// and the holds it told of a break (one line a break, the grants passed).
    func watched(breakTime: Duration) -> (WaitWatch, SocketHoldWaits, EventLog) {
        let watch = WaitWatch(settleTime: nil, breakTime: breakTime, lockTime: .seconds(1)) { _, _ in nil }
        let told = EventLog()
        watch.tellBroken = { _, grants, _ in told.add(grants.map(\.description).sorted().joined(separator: ",")) }
        return (watch, SocketHoldWaits(waitWatch: watch, numbers: WaitingRequests()), told)
    }

    /// A hold of `item` for writing by a client of this test's user, through `waits`: its
    /// outcome, and how long it took.
    func ownHold(
        in domain: CoordinationDomain, through waits: SocketHoldWaits,
        timeout: Duration
    ) throws -> (outcome: Result<Claim, AccessFailure>?, took: Duration) {
        let outcome = Outcome()
        let started = ContinuousClock.now
        let waiting = try #require(
            Claim.begin(
                in: domain, identity: .client(process: getpid(), number: 100), intents: [.write(item)],
                timeout: timeout, user: geteuid(), passesOtherUsers: waits.passesOtherUsers
            ) { result in
                outcome.set(result)
            })
        var unwatch: (@Sendable () -> Void)?
        _ = waiting.ifUnsettled { unwatch = waits.watch(waiting, user: geteuid()) }
        _ = eventually(timeout + .seconds(5)) { outcome.value != nil }
        let took = ContinuousClock.now - started
        unwatch?()
        return (outcome.value, took)
    }

    @Test(.enabled(if: geteuid() == 0, "runs a process as another user (nobody)"))
    func anotherUsersHoldIsPassedAtTheBreakTimeRevokedAndTold() throws {
        let theirs = try Sleeper(asNobody: true)
        let domain = CoordinationDomain()
        let (watch, waits, told) = watched(breakTime: .milliseconds(300))
        #expect(waits.passesOtherUsers)
        let holder = CoordinatorIdentity.client(process: theirs.pid, number: 1)
        let held = try #require(Claim.grantedAtOnce(in: domain, identity: holder, intents: [.read(item)]))
        let (outcome, took) = try ownHold(in: domain, through: waits, timeout: .seconds(10))
        guard case .success(let claim)? = outcome else {
            Issue.record("the hold: \(String(describing: outcome))"); return
        }
        #expect(took >= .milliseconds(300) && took < .seconds(3), "it waited the break time: \(took)")
        let heldGrant = try #require(held.grantID)
        #expect(told.events == [heldGrant.description], "the holder is told")
        #expect(watch.leaseBreaks.load(ordering: .relaxed) == 1 && watch.holdsRevoked.load(ordering: .relaxed) == 1)
        claim.end(outcomes: [unchanged], in: domain)
        // Revoked: its hold keeps nobody out any more, though it has not ended it.
        let next = try #require(
            Claim.grantedAtOnce(in: domain, identity: .client(process: getpid(), number: 101), intents: [.write(item)]),
            "the revoked hold held a later write up")
        next.end(outcomes: [unchanged], in: domain)
        held.end(outcomes: [unchanged], in: domain)
        #expect(domain.engine.snapshot().isIdle)
    }

    @Test func theHoldsOwnUsersHoldAndOpenFileAreWaitedFor() throws {
        let program = try Sleeper(asNobody: false)
        let domain = CoordinationDomain()
        let (watch, waits, told) = watched(breakTime: .milliseconds(200))
        // Another hold of the same user, and a program's open file of the same user (a lease
        // to a mount's own request, not to a coordinated access).
        for holder in [CoordinatorIdentity.client(process: getpid(), number: 1), .process(program.pid)] {
            let held = try #require(Claim.grantedAtOnce(in: domain, identity: holder, intents: [.read(item)]))
            let (outcome, took) = try ownHold(in: domain, through: waits, timeout: .seconds(1))
            guard case .failure(.refused(.timedOut, _))? = outcome else {
                Issue.record("the hold past \(holder): \(String(describing: outcome))"); return
            }
            #expect(took >= .milliseconds(900), "it waited its timeout: \(took)")
            held.end(outcomes: [unchanged], in: domain)
        }
        #expect(told.events.isEmpty)
        #expect(watch.leaseBreaks.load(ordering: .relaxed) == 0 && watch.holdsRevoked.load(ordering: .relaxed) == 0)
        #expect(domain.engine.snapshot().isIdle)
    }
}
