@testable import Coordination
import Synchronization
import Testing

/// The engine alone: acquisition, fairness, the wait-for graph, registries.
@Suite struct EngineTests {
    let a = ItemPath("/a")!, b = ItemPath("/b")!

    func request(_ who: CoordinatorIdentity, _ intents: Intent..., waits: Bool = true) -> AccessRequest {
        AccessRequest(identity: who, intents: intents, waits: waits)
    }

    /// Records resumptions.
    final class Resumed: Sendable {
        let results = Mutex<[String: Result<Grant, CoordinationError>]>([:])
        func resume(_ name: String) -> CoordinationEngine.Resume {
            { result in self.results.withLock { $0[name] = result } }
        }
        func grant(_ name: String) -> Grant? { results.withLock { try? $0[name]?.get() } }
        func error(_ name: String) -> CoordinationError? {
            results.withLock { if case .failure(let e)? = $0[name] { return e } else { return nil } }
        }
    }

    func granted(_ acquisition: CoordinationEngine.Acquisition) -> Grant? {
        if case .granted(let grant) = acquisition { return grant } else { return nil }
    }

    @Test func grantsFIFOAndWakesOnRelease() throws {
        let engine = CoordinationEngine(), resumed = Resumed()
        let r1 = try #require(granted(engine.acquire(request(.process(1), .read(a)), resume: resumed.resume("r1"))))
        guard case .waiting = engine.acquire(request(.process(2), .write(a)), resume: resumed.resume("w")) else {
            Issue.record(); return
        }
        guard case .waiting = engine.acquire(request(.process(3), .read(a)), resume: resumed.resume("r2")) else {
            Issue.record(); return
        }
        engine.release(r1.id)
        let w = try #require(resumed.grant("w"))
        #expect(resumed.grant("r2") == nil)
        engine.release(w.id)
        #expect(resumed.grant("r2") != nil)
    }

    @Test func nonBlockingRefusesAtOnce() {
        let engine = CoordinationEngine()
        _ = engine.acquire(request(.process(1), .write(a)), resume: { _ in })
        guard
            case .refused(.wouldBlock) = engine.acquire(request(.process(2), .read(a), waits: false), resume: { _ in })
        else {
            Issue.record("expected wouldBlock"); return
        }
        #expect(engine.snapshot().waiters.isEmpty)
    }

    @Test func grantsAtOnceOnlyWhenNothingWaitsOrAsks() throws {
        let engine = CoordinationEngine(), resumed = Resumed()
        // Nothing in the way: granted, and held like any grant.
        let first = try #require(engine.acquireAtOnce(request(.process(1), .write(a))))
        #expect(engine.acquireAtOnce(request(.process(2), .read(a))) == nil)
        #expect(engine.snapshot().waiters.isEmpty, "a refusal takes nothing and queues nothing")
        // Behind a queued waiter it is refused too, or it would overtake it (X3).
        guard case .waiting = engine.acquire(request(.process(2), .write(a)), resume: resumed.resume("w")) else {
            Issue.record(); return
        }
        engine.release(first)
        let waiter = try #require(resumed.grant("w"))
        #expect(engine.acquireAtOnce(request(.process(3), .read(a))) == nil)
        engine.release(waiter.id)
        #expect(engine.acquireAtOnce(request(.process(3), .read(b))) != nil, "other items are free")
        // A presenter to ask first: the caller has to go through `acquire`, which asks it.
        _ = engine.addPresenter(PresenterRecord(owner: .process(9), path: a))
        #expect(engine.acquireAtOnce(request(.process(4), .write(a))) == nil)
        guard case .granted(let asking) = engine.acquire(request(.process(4), .write(a)), resume: { _ in }) else {
            Issue.record(); return
        }
        #expect(!asking.requests.isEmpty)
    }

    /// docs/protocol.md: every request and notification says whose access it is about.
    @Test func deliveriesNameTheAccessor() throws {
        let engine = CoordinationEngine()
        _ = engine.addPresenter(PresenterRecord(owner: .process(9), path: a))
        guard case .granted(let grant) = engine.acquire(request(.purpose("editor"), .write(a)), resume: { _ in }) else {
            Issue.record(); return
        }
        #expect(!grant.requests.isEmpty && grant.requests.allSatisfy { $0.accessor == .purpose("editor") })
        engine.finishMessaging(grant.id) {}
        let told = engine.release(
            grant.id, outcomes: [IntentOutcome(existedBefore: true, existsAfter: true, changed: true)])
        #expect(!told.isEmpty && told.allSatisfy { $0.accessor == .purpose("editor") })
        #expect(engine.brokenCoordinationNotices(at: a, by: .process(4)).map(\.accessor) == [.process(4)])
        #expect(engine.brokenCoordinationNotices(at: a).map(\.accessor) == [nil])
    }

    @Test func aStaleGrantIDEndsNothing() throws {
        let engine = CoordinationEngine()
        let first = try #require(engine.acquireAtOnce(request(.process(1), .write(a))))
        engine.release(first)
        // The freed slot is reused by the next grant, under a new generation.
        let second = try #require(engine.acquireAtOnce(request(.process(2), .write(a))))
        #expect(second.index == first.index && second != first)
        // Ending the first grant again (a claim ended twice) must not end the second.
        engine.release(first)
        engine.finishMessaging(first) {}
        #expect(throws: CoordinationError.notInsideWrite) {
            try engine.reportMove(in: first, from: AccessTarget(path: a), to: AccessTarget(path: b))
        }
        #expect(engine.snapshot().holders.map(\.grant) == [second])
        #expect(engine.acquireAtOnce(request(.process(3), .read(a))) == nil, "the second grant still holds the item")
        engine.release(second)
        #expect(engine.snapshot().holders.isEmpty)
    }

    @Test func grantTableReusesSlotsAndListsTheLiveOnes() throws {
        let engine = CoordinationEngine()
        let grants = try (0..<5).map { i in
            try #require(engine.acquireAtOnce(request(.process(Int32(i)), .write(ItemPath("/item\(i)")!))))
        }
        engine.release(grants[1])
        engine.release(grants[3])
        let again = try #require(engine.acquireAtOnce(request(.process(9), .write(ItemPath("/item9")!))))
        #expect(again.index == grants[3].index, "the last slot freed is reused first")
        // The snapshot lists the live grants in the order they were granted.
        #expect(engine.snapshot().holders.map(\.grant) == [grants[0], grants[2], grants[4], again])
        for grant in [grants[0], grants[2], grants[4], again] { engine.release(grant) }
        #expect(engine.snapshot().holders.isEmpty)
    }

    @Test func presentersAreAskedOnlyWhatTheyAnswer() throws {
        let engine = CoordinationEngine()
        let directory = ItemPath("/d")!, item = ItemPath("/d/x")!
        let deleting = request(.process(1), .write(item, .forDeleting))
        // A presenter of the directory that hears of deletions but answers no request.
        let quiet = engine.addPresenter(PresenterRecord(owner: .process(2), path: directory, answers: []))
        let granted = try #require(engine.acquireAtOnce(deleting), "nobody to ask: granted at once")
        engine.release(granted)
        let planned = engine.state.withLock { $0.requestPlan(for: deleting) }
        #expect(planned.isEmpty)
        // The same presenter answering subitem deletions is asked, so the grant waits for it.
        engine.removePresenter(quiet)
        _ = engine.addPresenter(
            PresenterRecord(owner: .process(2), path: directory, answers: [.accommodateSubitemDeletion]))
        #expect(engine.acquireAtOnce(deleting) == nil)
        let asked = engine.state.withLock { $0.requestPlan(for: deleting) }
        #expect(asked.map(\.messages) == [[.accommodateSubitemDeletion(item)]])
        // Only what it answers: a write of the item asks a presenter of the item to relinquish and
        // save, and one that answers only saving is asked only that.
        _ = engine.addPresenter(PresenterRecord(owner: .process(3), path: item, answers: [.saveChanges]))
        let merging = request(.process(1), .write(item, .forMerging))
        #expect(engine.state.withLock { $0.requestPlan(for: merging) }.map(\.messages) == [[.saveChanges]])
    }

    @Test func releaseWithOneOutcomeTellsWhatTheArrayFormTells() throws {
        // The mount ends most grants with `release(_:outcome:)`: the same notifications and
        // wake-ups as `release(_:outcomes:)` with a one-element array.
        let directory = ItemPath("/d")!, item = ItemPath("/d/x")!
        let deleted = IntentOutcome(existedBefore: true, existsAfter: false)
        var told: [[PresenterDelivery<PresenterNotification>]] = []
        for one in [true, false] {
            let engine = CoordinationEngine(), resumed = Resumed()
            _ = engine.addPresenter(PresenterRecord(owner: .process(2), path: directory, answers: []))
            _ = engine.addPresenter(PresenterRecord(owner: .process(3), path: item, answers: []))
            let grant = try #require(engine.acquireAtOnce(request(.process(1), .write(item, .forDeleting))))
            guard case .waiting = engine.acquire(request(.process(4), .read(item)), resume: resumed.resume("r")) else {
                Issue.record("a read waits for the deletion"); return
            }
            var delivered: [PresenterDelivery<PresenterNotification>] = []
            let returned =
                one
                ? engine.release(grant, outcome: deleted) { delivered = $0 }
                : engine.release(grant, outcomes: [deleted]) { delivered = $0 }
            #expect(returned.map(\.messages) == delivered.map(\.messages))
            #expect(resumed.grant("r") != nil, "the waiting read is granted")
            told.append(returned)
        }
        let messages = told.map { Dictionary(uniqueKeysWithValues: $0.map { ($0.presentedPath, $0.messages) }) }
        #expect(messages[0] == [directory: [.subitemWasDeleted(item)], item: [.itemWasDeleted]])
        #expect(messages[0] == messages[1])
    }

    /// A write of attributes alone (chmod, chown, utimes: contentIndependentMetadataOnly) is
    /// told as such, for inotify's ATTRIB; any other change as before.
    @Test func aChangeOfAttributesAloneIsToldAsSuch() throws {
        let directory = ItemPath("/d")!, item = ItemPath("/d/x")!
        var told: [[ItemPath: [PresenterNotification]]] = []
        for options: WritingOptions in [.contentIndependentMetadataOnly, []] {
            let engine = CoordinationEngine()
            _ = engine.addPresenter(PresenterRecord(owner: .process(2), path: directory, answers: []))
            _ = engine.addPresenter(PresenterRecord(owner: .process(3), path: item, answers: []))
            let grant = try #require(engine.acquireAtOnce(request(.process(1), .write(item, options))))
            let delivered = engine.release(
                grant, outcome: IntentOutcome(existedBefore: true, existsAfter: true, changed: true)
            ) { _ in }
            told.append(Dictionary(uniqueKeysWithValues: delivered.map { ($0.presentedPath, $0.messages) }))
        }
        #expect(told[0] == [directory: [.subitemDidChangeAttributes(item)], item: [.didChangeAttributes]])
        #expect(told[1] == [directory: [.subitemDidChange(item)], item: [.didChange]])
    }

    /// One grant that writes an item's attributes and its contents tells one change of it, of
    /// its contents, whatever the order: told both, a presenter in another process heard
    /// did-change twice.
    @Test func aChangeOfAttributesAndContentsAtOnceIsToldOnce() throws {
        let directory = ItemPath("/d")!, item = ItemPath("/d/x")!
        let changed = IntentOutcome(existedBefore: true, existsAfter: true, changed: true)
        for intents in [
            [Intent.write(item, .contentIndependentMetadataOnly), .write(item)],
            [.write(item), .write(item, .contentIndependentMetadataOnly)]
        ] {
            let engine = CoordinationEngine()
            _ = engine.addPresenter(PresenterRecord(owner: .process(2), path: directory, answers: []))
            _ = engine.addPresenter(PresenterRecord(owner: .process(3), path: item, answers: []))
            let grant = try #require(
                engine.acquireAtOnce(AccessRequest(identity: .process(1), intents: intents, waits: true)))
            let delivered = engine.release(grant, outcomes: [changed, changed]) { _ in }
            let told = Dictionary(uniqueKeysWithValues: delivered.map { ($0.presentedPath, $0.messages) })
            #expect(told == [directory: [.subitemDidChange(item)], item: [.didChange]], "\(intents)")
        }
    }

    @Test func reentryDoesNotQueueBehindWaitersOfItself() throws {
        // P holds a; Q waits for a; P asks for a again: granted, not deadlocked by fairness.
        let engine = CoordinationEngine(), resumed = Resumed()
        _ = try #require(granted(engine.acquire(request(.process(1), .read(a)), resume: { _ in })))
        guard case .waiting = engine.acquire(request(.process(2), .write(a)), resume: resumed.resume("q")) else {
            Issue.record(); return
        }
        #expect(granted(engine.acquire(request(.process(1), .read(a)), resume: { _ in })) != nil)
    }

    @Test func deadlockGoesToTheNewestWaiter() throws {
        let engine = CoordinationEngine(), resumed = Resumed()
        _ = try #require(granted(engine.acquire(request(.process(1), .write(a)), resume: { _ in })))
        _ = try #require(granted(engine.acquire(request(.process(2), .write(b)), resume: { _ in })))
        guard case .waiting = engine.acquire(request(.process(1), .write(b)), resume: resumed.resume("p1")) else {
            Issue.record(); return
        }
        guard case .refused(.deadlock(let cycle)) = engine.acquire(request(.process(2), .write(a)), resume: { _ in })
        else {
            Issue.record("expected deadlock"); return
        }
        #expect(cycle == [.process(2), .process(1), .process(2)])
        #expect(engine.snapshot().waiters.count == 1, "the older waiter is undisturbed")
    }

    @Test func abandonEndsOnlyWaiting() throws {
        let engine = CoordinationEngine(), resumed = Resumed()
        let held = try #require(granted(engine.acquire(request(.process(1), .write(a)), resume: { _ in })))
        guard case .waiting(let ticket) = engine.acquire(request(.process(2), .read(a)), resume: resumed.resume("r"))
        else { Issue.record(); return }
        #expect(engine.abandon(ticket, because: .timedOut))
        #expect(resumed.error("r") == .timedOut)
        #expect(!engine.abandon(ticket, because: .timedOut))
        engine.release(held.id)
        #expect(engine.snapshot().isIdle)
    }

    @Test func messagingWaiverLetsThePresentersOwnerThrough() throws {
        let engine = CoordinationEngine()
        let owner = CoordinatorIdentity.object(9)
        _ = engine.addPresenter(PresenterRecord(owner: owner, path: a))
        let read = try #require(granted(engine.acquire(request(.process(1), .read(a)), resume: { _ in })))
        #expect(read.requests.map(\.messages) == [[.relinquishToReader, .saveChanges]])
        let save = try #require(granted(engine.acquire(request(owner, .write(a)), resume: { _ in })), "C21")
        engine.release(save.id)
        engine.finishMessaging(read.id) {}
        guard case .refused(.wouldBlock) = engine.acquire(request(owner, .write(a), waits: false), resume: { _ in })
        else {
            Issue.record("after messaging the owner waits like anyone"); return
        }
    }

    @Test func presenterLookupScalesWithDepthNotCount() {
        let engine = CoordinationEngine()
        for index in 0..<10_000 {
            _ = engine.addPresenter(PresenterRecord(owner: .object(1), path: ItemPath("/other/\(index)")!))
        }
        let target = ItemPath("/docs/x/y")!
        let id = engine.addPresenter(PresenterRecord(owner: .object(2), path: ItemPath("/docs")!))
        let tree = engine.state.withLock { $0.presenterTree.presentersAbove(target) }
        #expect(tree.count == 1 && tree[0].1 == [id])
        engine.removePresenter(id)
        #expect(engine.state.withLock { $0.presenterTree.presentersAbove(target).isEmpty })
    }

    @Test func servicesNearestWinsAndFollowMoves() throws {
        let engine = CoordinationEngine()
        let outer = try engine.vendService(named: "s", at: ItemPath("/m")!, owner: .process(1))
        let inner = try engine.vendService(named: "s", at: ItemPath("/m/sub")!, owner: .process(2))
        #expect(engine.services(for: ItemPath("/m/sub/f")!)["s"]?.0 == inner)
        #expect(engine.services(for: ItemPath("/m/f")!)["s"]?.0 == outer)
        let write = try #require(
            granted(engine.acquire(request(.process(3), .write(ItemPath("/m")!, .forMoving)), resume: { _ in })))
        _ = try engine.reportMove(
            in: write.id, from: AccessTarget(path: ItemPath("/m")!, isDirectory: true),
            to: AccessTarget(path: ItemPath("/n")!, isDirectory: true))
        #expect(engine.services(for: ItemPath("/n/sub/f")!)["s"]?.0 == inner)
        engine.endSession(of: .process(2))
        #expect(engine.services(for: ItemPath("/n/sub/f")!)["s"]?.0 == outer)
        #expect(throws: CoordinationError.self) { try engine.vendService(named: "", at: .root, owner: .process(1)) }
    }
}

@Suite struct CrossProcessPlanning {
    /// The engine half of P15: a presenter registered for another process is planned exactly as
    /// one of this process. Delivering it over the control socket is the event channel's part.
    @Test("P15 engine half: a presenter of another process gets the same messages") func p15EngineHalf() throws {
        let engine = CoordinationEngine()
        let item = ItemPath("/docs/a")!
        let local = engine.addPresenter(PresenterRecord(owner: .object(1), path: item))
        let remote = engine.addPresenter(PresenterRecord(owner: .process(777), path: item))
        for intent in [Intent.read(item), .write(item, .forDeleting), .write(item, .forMerging)] {
            guard
                case .granted(let grant) = engine.acquire(
                    AccessRequest(identity: .process(1), intents: [intent]), resume: { _ in })
            else {
                Issue.record("not granted"); return
            }
            let byPresenter = Dictionary(uniqueKeysWithValues: grant.requests.map { ($0.presenter, $0.messages) })
            #expect(byPresenter[local] != nil && byPresenter[local] == byPresenter[remote])
            engine.release(grant.id)
        }
    }
}
