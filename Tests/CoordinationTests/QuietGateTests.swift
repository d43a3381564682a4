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
        let tabled = try #require(engine.acquireAtOnce(AccessRequest(identity: .process(1), intents: [.read(a), .read(b)])))
        #expect(!passes(engine))
        engine.release(tabled)
        #expect(passes(engine))

        // A waiter, behind a grant: the gate stays shut until both have ended.
        guard case .granted(let first) = engine.acquire(AccessRequest(identity: .process(1), intents: [.write(a)]),
                                                        resume: { _ in })
        else { Issue.record("expected a grant"); return }
        let second = Mutex<GrantID?>(nil)
        guard case .waiting = engine.acquire(AccessRequest(identity: .process(2), intents: [.write(a)]),
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
        #expect(engine.quietPassage == (passing: 0, isOpen: true))
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
                closed = !engine.quietPassage.isOpen
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
            #expect(engine.quietPassage == (passing: 0, isOpen: false))
        }
    }
}
