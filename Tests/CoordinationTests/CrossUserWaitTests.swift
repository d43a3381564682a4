@testable import Coordination
import Testing

/// Across users a hold is a lease (docs/sharing.md): a wait for another user's holds that its
/// caller ends at the break time closes no cycle of the wait-for graph, so another user cannot
/// turn a bounded wait into EDEADLK by holding one item and asking for one the waiter holds.
/// Within one user, and through waits that do not end by themselves, a cycle is refused as
/// before.
@Suite struct CrossUserWaitTests {
    let a = ItemPath("/a")!, b = ItemPath("/b")!, c = ItemPath("/c")!
    let root: UInt32 = 0, nobody: UInt32 = 65534

    /// A request of `user`, whose wait for other users ends by itself when `passes`.
    func request(_ who: CoordinatorIdentity, _ intent: Intent, user: UInt32?, passes: Bool = true) -> AccessRequest {
        var request = AccessRequest(identity: who, intents: [intent])
        request.user = user
        request.passesOtherUsers = passes
        return request
    }

    func granted(_ acquisition: CoordinationEngine.Acquisition) -> Grant? {
        if case .granted(let grant) = acquisition { return grant }
        return nil
    }

    func waiting(_ acquisition: CoordinationEngine.Acquisition) -> TicketID? {
        if case .waiting(let ticket) = acquisition { return ticket }
        return nil
    }

    func isDeadlock(_ acquisition: CoordinationEngine.Acquisition) -> Bool {
        if case .refused(.deadlock) = acquisition { return true }
        return false
    }

    /// `first` (of `firstUser`) holds a and `second` (of `secondUser`) holds b; `second` waits
    /// for a; then `first` asks for b. What that last request got, with the engine emptied after.
    func crossedWaits(
        _ first: CoordinatorIdentity, _ firstUser: UInt32?, passes firstPasses: Bool,
        _ second: CoordinatorIdentity, _ secondUser: UInt32?, passes secondPasses: Bool
    ) throws -> CoordinationEngine.Acquisition {
        let engine = CoordinationEngine()
        let holdsA = try #require(
            granted(engine.acquire(request(first, .write(a), user: firstUser, passes: firstPasses), resume: { _ in })))
        let holdsB = try #require(
            granted(
                engine.acquire(request(second, .write(b), user: secondUser, passes: secondPasses), resume: { _ in })))
        let secondWaits = try #require(
            waiting(
                engine.acquire(request(second, .write(a), user: secondUser, passes: secondPasses), resume: { _ in })))
        let last = engine.acquire(request(first, .write(b), user: firstUser, passes: firstPasses), resume: { _ in })
        if let ticket = waiting(last) { engine.abandon(ticket, because: .cancelled) }
        engine.abandon(secondWaits, because: .cancelled)
        engine.release(holdsA.id)
        engine.release(holdsB.id)
        #expect(engine.snapshot().isIdle)
        return last
    }

    @Test("X1 another user's hold that the waiter goes past at the break time closes no cycle")
    func anotherUserCannotTurnABoundedWaitIntoADeadlock() throws {
        let roots = CoordinatorIdentity.client(process: 100, number: 1),
            theirs = CoordinatorIdentity.client(process: 200, number: 1)
        // Root holds a; nobody holds b and waits for a; root asking for b waits (it was refused
        // EDEADLK at once): both waits end at the break time.
        #expect(waiting(try crossedWaits(roots, root, passes: true, theirs, nobody, passes: true)) != nil)
        // Either wait that ends by itself is enough: root's alone, or theirs alone.
        #expect(waiting(try crossedWaits(roots, root, passes: true, theirs, nobody, passes: false)) != nil)
        #expect(waiting(try crossedWaits(roots, root, passes: false, theirs, nobody, passes: true)) != nil)
        // A program's request through a mount is one with its process's holds, and is that
        // process's user's.
        #expect(
            waiting(try crossedWaits(.process(100), root, passes: true, .process(200), nobody, passes: true)) != nil)
    }

    @Test("X1 a cycle within one user, or through waits that do not end by themselves, is still refused")
    func realCyclesAreStillRefused() throws {
        let one = CoordinatorIdentity.client(process: 100, number: 1),
            two = CoordinatorIdentity.client(process: 200, number: 1)
        // One user's two coordinators: Apple's semantics, a deadlock.
        #expect(isDeadlock(try crossedWaits(one, 1000, passes: true, two, 1000, passes: true)))
        // Two users whose waits nobody ends (a server with no break time).
        #expect(isDeadlock(try crossedWaits(one, root, passes: false, two, nobody, passes: false)))
        // Users not known: every edge counts.
        #expect(isDeadlock(try crossedWaits(one, nil, passes: true, two, nil, passes: true)))
        #expect(isDeadlock(try crossedWaits(one, root, passes: true, two, nil, passes: true)))
    }

    @Test("X1 in a longer cycle only an edge to another user's coordinator ends by itself")
    func onlyCrossUserEdgesAreLeftOut() throws {
        let engine = CoordinationEngine()
        let first = CoordinatorIdentity.client(process: 100, number: 1)  // root's
        let second = CoordinatorIdentity.client(process: 200, number: 1)  // nobody's
        let third = CoordinatorIdentity.client(process: 300, number: 1)  // root's too
        let holdsA = try #require(granted(engine.acquire(request(first, .write(a), user: root), resume: { _ in })))
        let holdsB = try #require(
            granted(engine.acquire(request(second, .write(b), user: nobody, passes: false), resume: { _ in })))
        let holdsC = try #require(granted(engine.acquire(request(third, .write(c), user: root), resume: { _ in })))
        // Nobody waits for c (root's, a wait that does not end by itself); root's third waits
        // for a (its own user's: no lease).
        let secondWaits = try #require(
            waiting(engine.acquire(request(second, .write(c), user: nobody, passes: false), resume: { _ in })))
        let thirdWaits = try #require(waiting(engine.acquire(request(third, .write(a), user: root), resume: { _ in })))
        // Root's first asking for b: its wait for nobody ends at the break time, so no cycle.
        let firstWaits = try #require(waiting(engine.acquire(request(first, .write(b), user: root), resume: { _ in })))
        engine.abandon(firstWaits, because: .cancelled)
        // The same request with no break time of its own closes the cycle 1 → 2 → 3 → 1.
        guard
            case .refused(.deadlock(let cycle)) = engine.acquire(
                request(first, .write(b), user: root, passes: false), resume: { _ in })
        else {
            Issue.record("the cycle through waits that do not end by themselves was let wait"); return
        }
        #expect(cycle.first == first && cycle.last == first && Set(cycle) == [first, second, third])
        for ticket in [secondWaits, thirdWaits] { engine.abandon(ticket, because: .cancelled) }
        for grant in [holdsA, holdsB, holdsC] { engine.release(grant.id) }
        #expect(engine.snapshot().isIdle)
    }
}
