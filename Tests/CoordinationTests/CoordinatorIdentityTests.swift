@testable import Coordination
import Synchronization
import Testing

/// Who a coordinator is across processes (docs/decisions.md): a socket client's hold or presenter is
/// a coordinator of its own, one with its process's requests through a mount; only a presenter's
/// own work passes the access that asks it; waiting for a presenter's answer is no wait for a
/// grant.
@Suite struct CoordinatorIdentityTests {
    let a = ItemPath("/a")!, b = ItemPath("/b")!, c = ItemPath("/c")!

    func request(_ who: CoordinatorIdentity, _ intents: Intent..., waits: Bool = true) -> AccessRequest {
        AccessRequest(identity: who, intents: intents, waits: waits)
    }

    func granted(_ acquisition: CoordinationEngine.Acquisition) -> Grant? {
        if case .granted(let grant) = acquisition { return grant }
        return nil
    }

    func refusal(_ acquisition: CoordinationEngine.Acquisition) -> CoordinationError? {
        if case .refused(let error) = acquisition { return error }
        return nil
    }

    @Test("C4 a process's requests through a mount are one with its coordinators; two coordinators of it are two")
    func aProcessIsOneWithEachOfItsCoordinators() throws {
        let engine = CoordinationEngine()
        let hold = try #require(
            granted(engine.acquire(request(.client(process: 7, number: 1), .write(a)), resume: { _ in })))
        #expect(
            granted(engine.acquire(request(.process(7), .write(a), waits: false), resume: { _ in })) != nil,
            "the process's own open inside its accessor")
        #expect(
            refusal(engine.acquire(request(.client(process: 7, number: 2), .write(a), waits: false), resume: { _ in }))
                == .wouldBlock,
            "another coordinator of the same process")
        #expect(refusal(engine.acquire(request(.process(8), .read(a), waits: false), resume: { _ in })) == .wouldBlock)
        engine.release(hold.id)
    }

    @Test("C21 while a presenter of process B is asked, only its own work passes, and the asker waits for that work")
    func onlyThePresentersOwnWorkPassesAndTheAskerWaitsForIt() throws {
        let engine = CoordinationEngine()
        let presenterOwner = CoordinatorIdentity.client(process: 20, number: 1)
        _ = engine.addPresenter(PresenterRecord(owner: presenterOwner, path: a))
        let asking = try #require(
            granted(engine.acquire(request(.client(process: 10, number: 1), .write(a)), resume: { _ in })))
        #expect(!asking.requests.isEmpty)
        // Another coordinator of B waits like anyone's.
        #expect(
            refusal(engine.acquire(request(.client(process: 20, number: 2), .write(a), waits: false), resume: { _ in }))
                == .wouldBlock)
        // The presenter's own coordinator, and B's requests through the mount, pass.
        let own = try #require(granted(engine.acquire(request(presenterOwner, .write(a)), resume: { _ in })))
        #expect(granted(engine.acquire(request(.process(20), .read(b)), resume: { _ in })) != nil)
        // The answers are in; the asker's accessor waits for the presenter's own work to end.
        let proceeded = Atomic<Bool>(false)
        engine.finishMessaging(asking.id) { proceeded.store(true, ordering: .relaxed) }
        let early = proceeded.load(ordering: .relaxed)
        #expect(!early, "it would overlap the presenter's own write")
        engine.release(own.id)
        let after = proceeded.load(ordering: .relaxed)
        #expect(after)
        engine.release(asking.id)
    }

    /// Process 10's write of `a` granted while the presenter of process 20 is asked, and process
    /// 20's read of `a` (that presenter's own work) granted meanwhile: the answers in, the write
    /// settles behind the work (`goesAhead` called once it goes ahead).
    func settlingBehindPresentersWork(
        in engine: CoordinationEngine, goesAhead: @escaping @Sendable () -> Void
    ) throws
        -> (asking: Grant, work: Grant)
    {
        _ = engine.addPresenter(PresenterRecord(owner: .client(process: 20, number: 1), path: a))
        let asking = try #require(
            granted(engine.acquire(request(.client(process: 10, number: 1), .write(a)), resume: { _ in })))
        // Process 20's work: its program reads the item while its presenter is asked.
        let work = try #require(granted(engine.acquire(request(.process(20), .read(a)), resume: { _ in })))
        engine.finishMessaging(asking.id, then: goesAhead)
        return (asking, work)
    }

    /// The break time ends a wait for a presenter's own work too (docs/sharing.md): the work of
    /// the holders its caller passes is revoked, and the asker goes ahead; kept by anyone else,
    /// it waits on for them.
    @Test("C21 a wait for a presenter's own work broken for its owner revokes that work alone")
    func aWaitForAPresentersWorkBrokenRevokesThatWorkAlone() throws {
        let engine = CoordinationEngine()
        let proceeded = Atomic<Bool>(false)
        let (asking, work) = try settlingBehindPresentersWork(in: engine) { proceeded.store(true, ordering: .relaxed) }
        let early = proceeded.load(ordering: .relaxed)
        #expect(engine.isSettling(asking.id) && !early, "it waits for the presenter's work")
        #expect(
            engine.breakSettling(asking.id, revoking: [.process(30)]).isEmpty, "nobody's of those named is in its way")
        #expect(engine.isSettling(asking.id), "not let past a holder its caller did not name")
        #expect(engine.breakSettling(asking.id, revoking: [.process(20)]) == [work.id])
        let after = proceeded.load(ordering: .relaxed)
        #expect(after && !engine.isSettling(asking.id), "let past the work, it goes ahead")
        engine.release(asking.id)
        // Revoked: nobody waits for that work again.
        let later = try #require(
            granted(engine.acquire(request(.process(40), .write(a)), resume: { _ in })),
            "the revoked work holds nothing")
        engine.release(later.id)
        engine.release(work.id)
        #expect(engine.snapshot().isIdle)
    }

    @Test("C13 a wait for a presenter's own work abandoned does not go ahead")
    func aWaitForAPresentersWorkAbandonedDoesNotGoAhead() throws {
        let engine = CoordinationEngine()
        let proceeded = Atomic<Bool>(false)
        let (asking, work) = try settlingBehindPresentersWork(in: engine) { proceeded.store(true, ordering: .relaxed) }
        #expect(engine.abandonSettling(asking.id))
        #expect(!engine.abandonSettling(asking.id), "once")
        engine.release(asking.id)
        engine.release(work.id)
        let went = proceeded.load(ordering: .relaxed)
        #expect(!went, "its owner ended it: it never went ahead")
        #expect(engine.snapshot().isIdle)
    }

    @Test("X1 waiting for a presenter's answer is no edge: B's coordinator waiting for A is no deadlock")
    func waitingForAPresentersAnswerIsNoEdgeOfTheWaitForGraph() throws {
        let engine = CoordinationEngine()
        let presenterOwner = CoordinatorIdentity.client(process: 20, number: 1)
        _ = engine.addPresenter(PresenterRecord(owner: presenterOwner, path: a))
        // A holds b, and asks B's presenter of a.
        let holdB = try #require(
            granted(engine.acquire(request(.client(process: 10, number: 1), .write(b)), resume: { _ in })))
        let asking = try #require(
            granted(engine.acquire(request(.client(process: 10, number: 2), .write(a)), resume: { _ in })))
        // B's ordinary coordinator waits for A's b: no cycle (it used to be refused EDEADLK).
        guard
            case .waiting(let ticket) = engine.acquire(
                request(.client(process: 20, number: 2), .write(b)), resume: { _ in })
        else {
            Issue.record("B's coordinator should wait for A's hold, not be refused"); return
        }
        #expect(engine.blockers(of: ticket) == [.client(process: 10, number: 1)])
        engine.abandon(ticket, because: .cancelled)
        engine.release(asking.id)
        engine.release(holdB.id)
    }

    @Test("X1 a real cycle of two coordinators, and of three, is refused with EDEADLK")
    func realCyclesAreStillRefused() throws {
        let engine = CoordinationEngine()
        let one = CoordinatorIdentity.client(process: 1, number: 1)
        let two = CoordinatorIdentity.client(process: 2, number: 1)
        let three = CoordinatorIdentity.client(process: 3, number: 1)
        // Two: 1 holds a, 2 holds b; 2 waits for a; 1 asking for b closes the cycle.
        let holdA = try #require(granted(engine.acquire(request(one, .write(a)), resume: { _ in })))
        let holdB = try #require(granted(engine.acquire(request(two, .write(b)), resume: { _ in })))
        guard case .waiting(let twoWaits) = engine.acquire(request(two, .write(a)), resume: { _ in }) else {
            Issue.record(); return
        }
        guard case .deadlock(let cycle)? = refusal(engine.acquire(request(one, .write(b)), resume: { _ in })) else {
            Issue.record("a two-coordinator cycle was not refused"); return
        }
        #expect(cycle.first == one && cycle.last == one && cycle.contains(two))
        engine.abandon(twoWaits, because: .cancelled)
        // Three: 3 holds c; 2 waits for c, 3 waits for a (held by 1), 1 asking for b closes it.
        let holdC = try #require(granted(engine.acquire(request(three, .write(c)), resume: { _ in })))
        guard case .waiting(let twoWaitsForC) = engine.acquire(request(two, .write(c)), resume: { _ in }) else {
            Issue.record(); return
        }
        guard case .waiting(let threeWaitsForA) = engine.acquire(request(three, .write(a)), resume: { _ in }) else {
            Issue.record(); return
        }
        guard case .deadlock(let longer)? = refusal(engine.acquire(request(one, .write(b)), resume: { _ in })) else {
            Issue.record("a three-coordinator cycle was not refused"); return
        }
        #expect(longer.count == 4 && Set(longer) == [one, two, three])
        // A process's request through a mount, made inside its coordinator's accessor, closes
        // the cycle of that coordinator.
        guard case .deadlock? = refusal(engine.acquire(request(.process(1), .write(b)), resume: { _ in })) else {
            Issue.record("the process of a coordinator in a cycle was let wait"); return
        }
        for ticket in [twoWaitsForC, threeWaitsForA] { engine.abandon(ticket, because: .cancelled) }
        for grant in [holdA, holdB, holdC] { engine.release(grant.id) }
        #expect(engine.snapshot().isIdle)
    }

    @Test("C14 a process's accesses never message that process's presenters")
    func aProcessNeverMessagesItsOwnPresenters() throws {
        let engine = CoordinationEngine()
        _ = engine.addPresenter(PresenterRecord(owner: .client(process: 30, number: 1), path: a))
        let fromTheMount = try #require(granted(engine.acquire(request(.process(30), .write(a)), resume: { _ in })))
        #expect(fromTheMount.requests.isEmpty)
        engine.release(fromTheMount.id)
        let anotherCoordinator = try #require(
            granted(engine.acquire(request(.client(process: 30, number: 2), .write(a)), resume: { _ in })))
        #expect(anotherCoordinator.requests.isEmpty, "the process tells its presenters itself")
        engine.release(anotherCoordinator.id)
        let otherProcess = try #require(granted(engine.acquire(request(.process(31), .write(a)), resume: { _ in })))
        #expect(!otherProcess.requests.isEmpty)
        engine.release(otherProcess.id)
    }
}
