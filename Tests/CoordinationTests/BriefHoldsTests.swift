@testable import Coordination
import Synchronization
import Testing

/// Brief grants (`CoordinationEngine.acquireBriefly`): kept apart from the grant and hold tables,
/// they must block, be blocked, wake, be listed and end exactly as grants from the tables do.
@Suite struct BriefHoldsTests {
    let a = ItemPath("/a")!, b = ItemPath("/b")!

    func request(_ who: CoordinatorIdentity, _ intents: Intent...) -> AccessRequest {
        AccessRequest(identity: who, intents: intents)
    }

    func briefGrant(_ engine: CoordinationEngine, _ who: CoordinatorIdentity, _ intent: Intent,
                    sourceLocation: SourceLocation = #_sourceLocation) throws -> GrantID {
        let id = try #require(engine.acquireBriefly(request(who, intent)), sourceLocation: sourceLocation)
        #expect(id.isBrief, "nothing stood in the way: a brief grant", sourceLocation: sourceLocation)
        return id
    }

    @Test func aBriefGrantBlocksOthersUntilItsReleaseWakesThem() throws {
        let engine = CoordinationEngine()
        let deleting = try briefGrant(engine, .process(1), .write(a, .forDeleting))
        #expect(engine.acquireAtOnce(request(.process(2), .read(a))) == nil, "a read waits for a deletion (C2)")
        #expect(engine.acquireBriefly(request(.process(3), .read(a, .immediatelyAvailableMetadataOnly))) == nil,
                "even a metadata-only read waits for a deletion (O3)")
        let woken = Mutex<Grant?>(nil)
        guard case .waiting = engine.acquire(request(.process(2), .write(a)), resume: { result in
            woken.withLock { $0 = try? result.get() }
        }) else { Issue.record("the writer should wait"); return }
        #expect(engine.snapshot().waiters.first?.waitsFor == [.process(1)], "the wait-for graph names the brief holder")
        let other = try #require(engine.acquireBriefly(request(.process(4), .read(b))), "other items are free")
        engine.release(deleting, outcome: IntentOutcome(existedBefore: true, existsAfter: false))
        let grant = try #require(woken.withLock { $0 }, "the release woke the waiting writer")
        engine.release(grant.id)
        engine.release(other)
        #expect(engine.snapshot().isIdle)
    }

    @Test func aBriefGrantWaitsForTheTablesAndForOtherBriefGrants() throws {
        let engine = CoordinationEngine()
        // Held in the tables (an open file): a brief write of another process is refused at
        // once, and one of the holder's own process is not (C4).
        let open = try #require(engine.acquireAtOnce(request(.process(1), .write(a))))
        #expect(!open.isBrief)
        #expect(engine.acquireBriefly(request(.process(2), .write(a, .contentIndependentMetadataOnly))) == nil)
        let own = try briefGrant(engine, .process(1), .write(a, .forDeleting))
        engine.release(own)
        engine.release(open)
        // Brief against brief: readers share (C3), a writer waits for them.
        let reader1 = try briefGrant(engine, .process(1), .read(a))
        let reader2 = try briefGrant(engine, .process(2), .read(a))
        #expect(engine.acquireBriefly(request(.process(3), .write(a))) == nil)
        engine.release(reader1)
        #expect(engine.acquireBriefly(request(.process(3), .write(a))) == nil, "one reader still holds")
        engine.release(reader2)
        let writer = try briefGrant(engine, .process(3), .write(a))
        #expect(engine.acquireAtOnce(request(.process(4), .read(a))) == nil, "the tables' path sees brief grants too")
        engine.release(writer)
        #expect(engine.snapshot().isIdle)
    }

    @Test func aDirectoryDeletionWaitsForABriefGrantInsideIt() throws {
        let engine = CoordinationEngine()
        let inside = try briefGrant(engine, .process(1), .write(ItemPath("/d/x")!))
        let directory = Intent(.writing(.forDeleting), AccessTarget(path: ItemPath("/d")!, isDirectory: true))
        let woken = Mutex(false)
        guard case .waiting = engine.acquire(request(.process(2), directory), resume: { _ in woken.withLock { $0 = true } })
        else { Issue.record("deleting the directory should wait for the write inside it (C19)"); return }
        engine.release(inside)
        #expect(woken.withLock { $0 })
    }

    @Test func whatCannotBeBriefIsGrantedFromTheTables() throws {
        let engine = CoordinationEngine()
        // Two items.
        let two = try #require(engine.acquireBriefly(request(.process(1), .write(a), .write(b))))
        #expect(!two.isBrief)
        engine.release(two)
        // A directory being deleted covers its subtree.
        let directory = Intent(.writing(.forDeleting), AccessTarget(path: ItemPath("/d")!, isDirectory: true))
        let subtree = try #require(engine.acquireBriefly(request(.process(1), directory)))
        #expect(!subtree.isBrief)
        // While a subtree is held, items inside it wait, and even other items go to the tables.
        #expect(engine.acquireBriefly(request(.process(2), .write(ItemPath("/d/y")!))) == nil)
        let meanwhile = try #require(engine.acquireBriefly(request(.process(2), .write(a))))
        #expect(!meanwhile.isBrief)
        engine.release(meanwhile)
        engine.release(subtree)
        // A request that waits in the queue: later ones go through the tables, behind it (X3).
        let holder = try #require(engine.acquireAtOnce(request(.process(1), .read(a))))
        guard case .waiting(let ticket) = engine.acquire(request(.process(2), .write(a)), resume: { _ in }) else {
            Issue.record("the second writer should wait"); return
        }
        let behind = try #require(engine.acquireBriefly(request(.process(3), .write(b))))
        #expect(!behind.isBrief)
        #expect(engine.acquireBriefly(request(.process(3), .read(a))) == nil,
                "sharing with the reader would overtake the waiting writer")
        engine.abandon(ticket, because: .timedOut)
        engine.release(behind)
        engine.release(holder)
        // A presenter to ask: nil, as from `acquireAtOnce`, so that the caller asks it.
        let presenter = engine.addPresenter(PresenterRecord(owner: .process(9), path: a))
        #expect(engine.acquireBriefly(request(.process(1), .write(a))) == nil)
        engine.removePresenter(presenter)
        // More at once than the list keeps: the rest go to the tables.
        let many = try (0..<BriefHolds.capacity + 1).map { i in
            try #require(engine.acquireBriefly(request(.process(Int32(i)), .read(ItemPath("/item\(i)")!))))
        }
        #expect(many.prefix(BriefHolds.capacity).allSatisfy { $0.isBrief })
        #expect(!many[BriefHolds.capacity].isBrief)
        many.forEach { engine.release($0) }
        #expect(engine.snapshot().isIdle)
    }

    @Test func theOneIntentFormDecidesAsTheRequestForm() throws {
        let engine = CoordinationEngine()
        let first = try #require(engine.acquireBriefly(.write(a, .forDeleting), for: .process(1)))
        #expect(first.isBrief)
        #expect(engine.acquireBriefly(.read(a), for: .process(2)) == nil, "blocked: nil, holding nothing")
        #expect(engine.acquireBriefly(.write(b, [.forDeleting, .forMoving]), for: .process(2)) == nil, "an invalid intent")
        // A presenter elsewhere with nothing to be asked: the tables grant it.
        _ = engine.addPresenter(PresenterRecord(owner: .process(9), path: ItemPath("/elsewhere")!))
        let fromTheTables = try #require(engine.acquireBriefly(.write(b), for: .process(2)))
        #expect(!fromTheTables.isBrief)
        // A presenter of the item: nil, so that the caller asks it through `acquire`.
        _ = engine.addPresenter(PresenterRecord(owner: .process(9), path: ItemPath("/c")!))
        #expect(engine.acquireBriefly(.write(ItemPath("/c")!), for: .process(2)) == nil)
        engine.release(first)
        engine.release(fromTheTables)
        #expect(engine.snapshot().isIdle)
    }

    @Test func briefGrantsAreListedInGrantOrderAndEndWithTheirSession() throws {
        let engine = CoordinationEngine()
        let first = try briefGrant(engine, .process(1), .write(a))
        let second = try #require(engine.acquireAtOnce(request(.process(2), .write(b))))
        let third = try briefGrant(engine, .process(1), .read(ItemPath("/c")!))
        let snapshot = engine.snapshot()
        #expect(snapshot.holders.map(\.grant) == [first, second, third])
        #expect(snapshot.holders[0].intents.map(\.path) == [a] && snapshot.holders[0].identity == .process(1))
        #expect(snapshot.description.contains("HOLD \(first) pid:1: write(0) /a"))
        engine.endSession(of: .process(1))
        #expect(engine.snapshot().holders.map(\.grant) == [second])
        #expect(engine.acquireBriefly(request(.process(3), .write(a))) != nil, "the ended session holds nothing")
        // Ending an ended brief grant (a request finishing after its process died) does nothing.
        engine.release(first)
        engine.release(third, outcome: IntentOutcome(existedBefore: true, existsAfter: false))
        #expect(engine.snapshot().holders.count == 2)
    }

    @Test func aBriefGrantReportsNoMoveAndFinishesNoMessaging() throws {
        let engine = CoordinationEngine()
        let grant = try briefGrant(engine, .process(1), .write(a, .forMoving))
        engine.finishMessaging(grant)
        #expect(throws: CoordinationError.notInsideWrite) {
            try engine.reportMove(in: grant, from: AccessTarget(path: a), to: AccessTarget(path: b))
        }
        #expect(engine.snapshot().holders.map(\.grant) == [grant], "still held")
        engine.release(grant)
    }

    @Test func theReleaseOfABriefGrantTellsPresenters() throws {
        let engine = CoordinationEngine()
        let directory = ItemPath("/d")!, item = ItemPath("/d/x")!
        let grant = try briefGrant(engine, .process(1), .write(item, .forDeleting))
        // Registered while the grant was held: nobody was to be asked when it was taken, but
        // the deletion is news to them when it ends (P12).
        let watcher = engine.addPresenter(PresenterRecord(owner: .process(2), path: directory))
        let delivered = engine.release(grant, outcome: IntentOutcome(existedBefore: true, existsAfter: false))
        #expect(delivered.map(\.presenter) == [watcher])
        #expect(delivered.first?.messages == [.subitemWasDeleted(item)])
    }

    @Test func theReleaseOfABriefGrantEndsTheServicesOfWhatItDeleted() throws {
        let engine = CoordinationEngine()
        let item = ItemPath("/d/x")!
        let kept = try engine.vendService(named: "sync", at: ItemPath("/d")!, owner: .process(3))
        let deleted = try engine.vendService(named: "sync", at: item, owner: .process(3))
        let grant = try briefGrant(engine, .process(1), .write(item, .forDeleting))
        engine.release(grant, outcome: IntentOutcome(existedBefore: true, existsAfter: false))
        #expect(engine.service(deleted) == nil, "a deleted item's services end with it")
        #expect(engine.service(kept) != nil)
    }
}
