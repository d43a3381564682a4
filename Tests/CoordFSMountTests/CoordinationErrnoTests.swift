import Coordination
import CoordinationRuntime
@testable import CoordFSMount
import Foundation
import LinuxSystem
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The errno a mount answers a refused request with (`Errno.from(coordination:)`), for what
/// ends its claim's wait: a refusal of the engine by the engine's table, an interrupted wait
/// with EINTR, a presenter's refusal by its own errno.
@Suite struct CoordinationErrnoTests {
    typealias Outcome = SocketHoldWaitsTests.Outcome

    let unchanged = IntentOutcome(existedBefore: true, existsAfter: true, changed: false)

    /// A presenter of `path` that stands for `owner` (no process by default), and refuses
    /// whatever it is asked, having run `beforeAnswering` first.
    final class RefusingPresenter: Presenter, Sendable {
        let owner: CoordinatorIdentity
        let path: ItemPath
        let refusal: any Error
        let beforeAnswering: @Sendable (RefusingPresenter) -> Void

        init(
            _ path: ItemPath, refusal: any Error, owner: CoordinatorIdentity = .object(1),
            beforeAnswering: @escaping @Sendable (RefusingPresenter) -> Void = { _ in }
        ) {
            self.path = path
            self.refusal = refusal
            self.owner = owner
            self.beforeAnswering = beforeAnswering
        }

        func presentedPaths(_ locator: ItemLocator) -> (item: ItemPath?, primary: ItemPath?) { (path, nil) }
        var answeredRequests: PresenterRequest.Kinds { .all }

        func asked(
            _ request: PresenterRequest, origin: AccessOrigin, progress: PresenterProgress,
            completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void
        ) {
            beforeAnswering(self)
            completion(refusal, nil)
        }

        func told(
            _ notifications: [PresenterNotification], origin: AccessOrigin, presentsPackage: Bool,
            moved: @escaping @Sendable () -> Void
        ) {}

        func reacquire(_ reacquirer: @escaping @Sendable () -> Void) { reacquirer() }
    }

    /// A presenter's refusal that carries no errno.
    struct Refusal: Error {}

    /// What ended a claim of `intents` by `identity` (a coordinator of this process), once
    /// `meanwhile` has had its waiting access; nil when it was granted (and ended here).
    func failure(
        of intents: [Intent], in domain: CoordinationDomain,
        identity: CoordinatorIdentity = .client(process: getpid(), number: 100), waits: Bool = true,
        timeout: Duration = .seconds(10), meanwhile: (CoordinatedAccess) -> Void = { _ in }
    ) -> AccessFailure? {
        let outcome = Outcome()
        let waiting = Claim.begin(
            in: domain, identity: identity, intents: intents, waits: waits, timeout: timeout
        ) { outcome.set($0) }
        if let waiting { meanwhile(waiting) }
        #expect(eventually(timeout + .seconds(5)) { outcome.value != nil }, "the claim never ended")
        switch outcome.value {
        case .success(let claim)?:
            claim.end(outcomes: intents.map { _ in unchanged }, in: domain)
            return nil
        case .failure(let failure)?:
            return failure
        case nil:
            return nil
        }
    }

    /// The errno the mount answers `failure` with; nil for none.
    func code(_ failure: AccessFailure?) -> Int32? { failure.map { Errno.from(coordination: $0).code } }

    @Test("C13 X1 X5 a refusal of the engine is answered with the engine's errno; an interrupted wait with EINTR")
    func refusalsOfTheEngineAreAnsweredWithItsErrno() throws {
        let domain = CoordinationDomain()
        let a = ItemPath("/d/a")!, b = ItemPath("/d/b")!
        let one = CoordinatorIdentity.client(process: getpid(), number: 1)
        let two = CoordinatorIdentity.client(process: getpid(), number: 2)
        let heldA = try #require(Claim.grantedAtOnce(in: domain, identity: one, intents: [.write(a)]))
        // Held: a request that may not wait would block; one that waits runs out of time, or is interrupted.
        #expect(code(failure(of: [.write(a)], in: domain, waits: false)) == EAGAIN)
        #expect(code(failure(of: [.write(a)], in: domain, timeout: .milliseconds(100))) == EBUSY)
        #expect(code(failure(of: [.write(a)], in: domain) { $0.cancel() }) == EINTR)
        // Two coordinators each holding what the other waits for: the newest waiter is refused.
        let heldB = try #require(Claim.grantedAtOnce(in: domain, identity: two, intents: [.write(b)]))
        let twoWaits = Outcome()
        let waiting = try #require(
            Claim.begin(in: domain, identity: two, intents: [.write(a)], timeout: .seconds(10)) { twoWaits.set($0) },
            "a is held: it waits")
        #expect(code(failure(of: [.write(b)], in: domain, identity: one)) == EDEADLK)
        waiting.cancel()
        #expect(eventually { twoWaits.value != nil })
        heldA.end(outcomes: [unchanged], in: domain)
        heldB.end(outcomes: [unchanged], in: domain)
        #expect(domain.engine.snapshot().isIdle)
    }

    @Test("C12 P14 a presenter's refusal is answered with its errno, or EACCES without one")
    func presenterRefusalsAreAnsweredWithTheirErrno() {
        let domain = CoordinationDomain()
        // The presenter stands for no user's process: its refusal is a veto where anyone's is.
        domain.vetoScope = .anyone
        let item = ItemPath("/d/f")!
        let refusals: [(any Error, Int32)] = [(POSIXError(.EROFS), EROFS), (Refusal(), EACCES)]
        for (refusal, expected) in refusals {
            let presenter = RefusingPresenter(item, refusal: refusal)
            domain.register(presenter, key: ObjectIdentifier(presenter), linked: false)
            let refused = failure(of: [.write(item)], in: domain)
            var byThePresenter = false
            if case .failed? = refused { byThePresenter = true }
            #expect(byThePresenter, "the presenter's refusal: \(String(describing: refused))")
            #expect(code(refused) == expected, "\(refusal)")
            domain.unregister(key: ObjectIdentifier(presenter))
        }
        #expect(domain.engine.snapshot().isIdle)
    }

    /// A presenter that refuses and is gone at once (its client disconnected) is weighed by
    /// whose it was when asked: another user's refusal is no veto even then. (It was: with the
    /// presenter gone from the engine its owner could not be found, and the refusal failed
    /// root's create with EACCES.)
    @Test("C12 another user's presenter that refuses and goes away at once vetoes nothing")
    func anotherUsersRefusalIsNoVetoEvenWhenItsPresenterIsGone() throws {
        guard geteuid() == 0 else {
            Issue.record("needs root, to run a process as another user")
            return
        }
        let nobody = try SocketHoldWaitsTests.Sleeper(asNobody: true)
        let domain = CoordinationDomain()
        #expect(domain.vetoScope == .ownUser)
        let item = ItemPath("/d/secret")!
        let presenter = RefusingPresenter(
            item, refusal: POSIXError(.EACCES), owner: .client(process: nobody.pid, number: 1)
        ) { [domain] presenter in
            domain.unregister(key: ObjectIdentifier(presenter))
        }
        domain.register(presenter, key: ObjectIdentifier(presenter), linked: false)
        let refused = failure(of: [.write(item)], in: domain)
        #expect(refused == nil, "another user's refusal failed the access: \(String(describing: refused))")
        #expect(domain.engine.snapshot().isIdle)
        withExtendedLifetime(nobody) {}
    }
}
