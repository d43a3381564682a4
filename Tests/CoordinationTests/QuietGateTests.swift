@testable import Coordination
import Foundation
import Synchronization
import Testing

/// The quiet gate: short accesses pass without a grant only while the engine holds nothing, and
/// whoever the engine grants or registers next waits until they have passed.
@Suite struct QuietGateTests {
    let a = ItemPath("/a")!, b = ItemPath("/b")!

    final class Flag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .sequentiallyConsistent) }
        var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
    }

    /// Passes once and reports whether the gate let it through.
    func passes(_ engine: CoordinationEngine) -> Bool {
        guard engine.passQuietly() else { return false }
        engine.endPassingQuietly()
        return true
    }

    @Test func opensOnlyWhileTheEngineHoldsNothing() throws {
        let engine = CoordinationEngine()
        #expect(passes(engine), "a new engine holds nothing")

        // A grant on the short list, and one from the tables.
        let listed = try #require(engine.acquireAtOnce(.write(a), for: .process(1)))
        #expect(!passes(engine))
        engine.release(listed)
        #expect(passes(engine))
        let tabled = try #require(
            engine.acquireAtOnce(AccessRequest(identity: .process(1), intents: [.read(a), .read(b)])))
        #expect(!passes(engine))
        engine.release(tabled)
        #expect(passes(engine))

        // A waiter, behind a grant: the gate stays shut until both have ended.
        guard
            case .granted(let first) = engine.acquire(
                AccessRequest(identity: .process(1), intents: [.write(a)]),
                resume: { _ in })
        else { Issue.record("expected a grant"); return }
        let second = Mutex<GrantID?>(nil)
        guard
            case .waiting = engine.acquire(
                AccessRequest(identity: .process(2), intents: [.write(a)]),
                resume: { result in second.withLock { $0 = try? result.get().id } })
        else { Issue.record("expected to wait"); return }
        engine.release(first.id)
        #expect(!passes(engine), "the waiter now holds a")
        engine.release(try #require(second.withLock { $0 }))
        #expect(passes(engine))

        // A presenter, anywhere.
        let presenter = engine.addPresenter(PresenterRecord(owner: .process(3), path: b))
        #expect(!passes(engine))
        engine.removePresenter(presenter)
        #expect(passes(engine))

        // A service.
        let service = try engine.vendService(named: "s", at: b, owner: .process(4))
        #expect(!passes(engine))
        engine.withdrawService(service)
        #expect(passes(engine))

        // What a session held ends with it.
        _ = engine.addPresenter(PresenterRecord(owner: .process(5), path: a))
        _ = try #require(engine.acquireAtOnce(.read(b), for: .process(5)))
        #expect(!passes(engine))
        engine.endSession(of: .process(5))
        #expect(passes(engine))
        #expect(engine.quietPassage() == (passing: 0, isOpen: true))
    }

    /// A grant and a registration made while an access passes wait until it has passed: neither
    /// overlaps it.
    @Test func whatTheEngineGivesWaitsForThoseWhoPassed() async throws {
        for give in ["grant", "presenter", "service"] {
            let engine = CoordinationEngine()
            #expect(engine.passQuietly())
            let given = Flag()
            let giving = Thread {
                switch give {
                case "grant": _ = engine.acquireAtOnce(.write(self.a), for: .process(1))
                case "presenter": _ = engine.addPresenter(PresenterRecord(owner: .process(1), path: self.a))
                default: _ = try? engine.vendService(named: "s", at: self.a, owner: .process(1))
                }
                given.set()
            }
            giving.start()
            // The gate closes as soon as the engine holds the new thing; the giver still waits.
            var closed = false
            for _ in 0..<2000 where !closed {
                closed = !engine.quietPassage().isOpen
                if !closed { try await Task.sleep(for: .milliseconds(1)) }
            }
            #expect(closed, "\(give): the gate closes")
            try await Task.sleep(for: .milliseconds(100))
            let givenEarly = given.isSet
            #expect(!givenEarly, "\(give): returned while an access was passing")
            #expect(!passes(engine), "\(give): nobody passes a closed gate")
            engine.endPassingQuietly()
            for _ in 0..<2000 where !given.isSet {
                try await Task.sleep(for: .milliseconds(1))
            }
            let givenAtLast = given.isSet
            #expect(givenAtLast, "\(give): returned once the access had passed")
            #expect(engine.quietPassage() == (passing: 0, isOpen: false))
        }
    }

    /// Passes the second gate once (`onlyGatedGrants`) and reports whether it let it through.
    func passesBeside(_ engine: CoordinationEngine) -> Bool {
        guard engine.passQuietly(.onlyGatedGrants) else { return false }
        engine.endPassingQuietly(.onlyGatedGrants)
        return true
    }

    /// Gated grants shut the first gate (the engine holds something) and leave the second
    /// open; anything else the engine holds shuts both.
    @Test func gatedGrantsLeaveOnlyTheSecondGateOpen() throws {
        let engine = CoordinationEngine()
        #expect(passes(engine) && passesBeside(engine), "a new engine holds nothing")

        let gated = try #require(engine.acquireAtOnce(.write(a), for: .process(1), gated: true))
        #expect(gated.isOnShortList)
        #expect(!passes(engine), "the engine holds a grant")
        #expect(passesBeside(engine), "only a gated one")

        // Whatever else it comes to hold shuts the second gate too, until it is over.
        let listed = try #require(engine.acquireAtOnce(.read(b), for: .process(2)))
        #expect(!passesBeside(engine), "an ungated listed grant")
        engine.release(listed)
        #expect(passesBeside(engine))
        let tabled = try #require(
            engine.acquireAtOnce(AccessRequest(identity: .process(2), intents: [.read(b), .read(ItemPath("/c")!)])))
        #expect(!passesBeside(engine), "a grant from the tables")
        engine.release(tabled)
        #expect(passesBeside(engine))
        guard
            case .waiting(let ticket) = engine.acquire(
                AccessRequest(identity: .process(2), intents: [.read(a)]), resume: { _ in })
        else { Issue.record("expected to wait behind the gated write"); return }
        #expect(!passesBeside(engine), "a waiter")
        #expect(engine.abandon(ticket, because: .cancelled))
        #expect(passesBeside(engine))
        let presenter = engine.addPresenter(PresenterRecord(owner: .process(3), path: b))
        #expect(!passesBeside(engine), "a presenter")
        engine.removePresenter(presenter)
        let service = try engine.vendService(named: "s", at: b, owner: .process(4))
        #expect(!passesBeside(engine), "a service")
        engine.withdrawService(service)
        #expect(passesBeside(engine))

        // Gated grants past a full short list are gated in the tables: a mount with many
        // files open still lets accesses pass beside them. An ungated one there does not.
        for index in 0..<ShortList.capacity - 1 {
            _ = try #require(engine.acquireAtOnce(.read(ItemPath("/f\(index)")!), for: .process(5), gated: true))
        }
        #expect(passesBeside(engine), "a full list of gated grants")
        var overflow: [GrantID] = []
        for index in 0..<3 {
            overflow.append(
                try #require(engine.acquireAtOnce(.read(ItemPath("/g\(index)")!), for: .process(5), gated: true)))
        }
        #expect(overflow.allSatisfy { !$0.isOnShortList }, "the list was full")
        #expect(passesBeside(engine), "gated grants from the tables")
        let ungated = try #require(engine.acquireAtOnce(.read(ItemPath("/h")!), for: .process(6)))
        #expect(!ungated.isOnShortList)
        #expect(!passesBeside(engine), "an ungated grant from the tables")
        engine.release(ungated)
        #expect(passesBeside(engine))
        engine.release(overflow.removeLast())
        #expect(passesBeside(engine))
        // A gated grant's end counts once: with one gated table grant left, an ungated
        // one still shuts the gate.
        let another = try #require(engine.acquireAtOnce(.read(ItemPath("/h")!), for: .process(6)))
        #expect(!passesBeside(engine), "an ungated grant beside gated ones in the tables")
        engine.release(another)

        // Ended, by release or with their session: both gates open again.
        engine.endSession(of: .process(5))
        #expect(!passes(engine) && passesBeside(engine))
        // The two gated table grants the session ended are no longer counted: two ungated
        // ones shut the gate.
        let afterwards = try [ItemPath("/c")!, ItemPath("/d")!].map { path in
            try #require(engine.acquireAtOnce(AccessRequest(identity: .process(6), intents: [.read(b), .read(path)])))
        }
        #expect(!passesBeside(engine), "the gated count went back to zero with the session")
        afterwards.forEach { engine.release($0) }
        engine.release(gated)
        #expect(passes(engine) && passesBeside(engine))

        // A gated grant left alone in the tables still shuts the first gate: the engine
        // holds something, which only its owner's gates keep others from.
        var listedAlone: [GrantID] = []
        for index in 0..<ShortList.capacity {
            listedAlone.append(
                try #require(engine.acquireAtOnce(.read(ItemPath("/l\(index)")!), for: .process(7), gated: true)))
        }
        let tabledAlone = try #require(engine.acquireAtOnce(.read(ItemPath("/t")!), for: .process(7), gated: true))
        #expect(!tabledAlone.isOnShortList)
        listedAlone.forEach { engine.release($0) }
        #expect(!passes(engine) && passesBeside(engine), "only a gated grant in the tables")
        engine.release(tabledAlone)
        #expect(passes(engine) && passesBeside(engine))
        #expect(engine.quietPassage(.onlyGatedGrants) == (passing: 0, isOpen: true))
    }

    /// An ungated grant made while an access passes beside gated grants waits until it
    /// has passed; a gated one does not (its owner's own gate kept them apart).
    @Test func anUngatedGrantWaitsForThoseWhoPassedBesideGatedOnes() async throws {
        let engine = CoordinationEngine()
        let held = try #require(engine.acquireAtOnce(.read(a), for: .process(1), gated: true))
        #expect(engine.passQuietly(.onlyGatedGrants))
        // Another gated grant is given at once.
        let second = try #require(engine.acquireAtOnce(.read(b), for: .process(2), gated: true))
        let given = Flag()
        let giving = Thread {
            _ = engine.acquireAtOnce(.write(self.b), for: .process(2))
            given.set()
        }
        giving.start()
        var closed = false
        for _ in 0..<2000 where !closed {
            closed = !engine.quietPassage(.onlyGatedGrants).isOpen
            if !closed { try await Task.sleep(for: .milliseconds(1)) }
        }
        #expect(closed, "the second gate closes")
        try await Task.sleep(for: .milliseconds(100))
        let givenEarly = given.isSet
        #expect(!givenEarly, "returned while an access was passing")
        engine.endPassingQuietly(.onlyGatedGrants)
        for _ in 0..<2000 where !given.isSet { try await Task.sleep(for: .milliseconds(1)) }
        let givenAtLast = given.isSet
        #expect(givenAtLast, "returned once the access had passed")
        engine.release(held)
        engine.release(second)
    }

    final class Gate: Sendable {
        let gate = QuietGate()
        private let waited = Atomic<Bool>(false)
        func closeAndWaitInBackground() {
            Thread {
                self.gate.close()
                self.gate.waitForPassingAccesses()
                self.waited.store(true, ordering: .sequentiallyConsistent)
            }.start()
        }
        var hasWaited: Bool { waited.load(ordering: .sequentiallyConsistent) }
        func enters() -> Bool { gate.enter() }
        var status: (passing: Int, closers: Int) { gate.status }
    }

    /// Closers are counted (a mount's directory is shut once for each file held in it): the
    /// gate opens when the last one opens it.
    @Test func staysClosedUntilEveryCloserHasOpenedIt() {
        let directory = Gate()
        #expect(directory.enters())
        directory.gate.leave()
        directory.gate.close()
        directory.gate.close()
        #expect(directory.status == (passing: 0, closers: 2))
        #expect(!directory.enters(), "closed")
        directory.gate.open()
        #expect(!directory.enters(), "another closer still keeps it closed")
        directory.gate.open()
        #expect(directory.enters())
        #expect(directory.status == (passing: 1, closers: 0))
        directory.gate.leave()
    }

    @Test func aCloserWaitsForEveryoneWhoEnteredBefore() async throws {
        let directory = Gate()
        #expect(directory.enters())
        #expect(directory.enters())
        directory.closeAndWaitInBackground()
        for _ in 0..<2000 where directory.status.closers == 0 { try await Task.sleep(for: .milliseconds(1)) }
        #expect(directory.status == (passing: 2, closers: 1))
        #expect(!directory.enters(), "nobody new passes")
        try await Task.sleep(for: .milliseconds(50))
        #expect(!directory.hasWaited, "two are still passing")
        directory.gate.leave()
        try await Task.sleep(for: .milliseconds(50))
        #expect(!directory.hasWaited, "one is still passing")
        directory.gate.leave()
        for _ in 0..<2000 where !directory.hasWaited { try await Task.sleep(for: .milliseconds(1)) }
        #expect(directory.hasWaited, "returns once both have passed")
        directory.gate.open()
        #expect(directory.status == (passing: 0, closers: 0))
    }
}
