@testable import Coordination
import Synchronization
import Testing

/// Grants on the short list (`CoordinationEngine.acquireAtOnce(_:for:)`): kept apart from the
/// grant and hold tables, they must block, be blocked, wake, be listed and end exactly as grants
/// from the tables do.
@Suite struct ShortListTests {
    let a = ItemPath("/a")!, b = ItemPath("/b")!

    func request(_ who: CoordinatorIdentity, _ intents: Intent...) -> AccessRequest {
        AccessRequest(identity: who, intents: intents)
    }

    func listed(
        _ engine: CoordinationEngine, _ who: CoordinatorIdentity, _ intent: Intent,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> GrantID {
        let id = try #require(engine.acquireAtOnce(intent, for: who), sourceLocation: sourceLocation)
        #expect(id.isOnShortList, "nothing stood in the way: on the short list", sourceLocation: sourceLocation)
        return id
    }

    @Test func aListedGrantBlocksOthersUntilItsReleaseWakesThem() throws {
        let engine = CoordinationEngine()
        let deleting = try listed(engine, .process(1), .write(a, .forDeleting))
        #expect(engine.acquireAtOnce(request(.process(2), .read(a))) == nil, "a read waits for a deletion (C2)")
        #expect(
            engine.acquireAtOnce(.read(a, .immediatelyAvailableMetadataOnly), for: .process(3)) == nil,
            "even a metadata-only read waits for a deletion (O3)")
        let woken = Mutex<Grant?>(nil)
        guard
            case .waiting = engine.acquire(
                request(.process(2), .write(a)),
                resume: { result in
                    woken.withLock { $0 = try? result.get() }
                })
        else { Issue.record("the writer should wait"); return }
        #expect(
            engine.snapshot().waiters.first?.waitsFor == [.process(1)], "the wait-for graph names the listed holder")
        let other = try #require(engine.acquireAtOnce(.read(b), for: .process(4)), "other items are free")
        engine.release(deleting, outcome: IntentOutcome(existedBefore: true, existsAfter: false))
        let grant = try #require(woken.withLock { $0 }, "the release woke the waiting writer")
        engine.release(grant.id)
        engine.release(other)
        #expect(engine.snapshot().isIdle)
    }

    @Test func aListedGrantWaitsForTheTablesAndForOtherListedGrants() throws {
        let engine = CoordinationEngine()
        // Held in the tables: a write of another process is refused at once, and one of the
        // holder's own process is not (C4).
        let held = try #require(engine.acquireAtOnce(request(.process(1), .write(a))))
        #expect(!held.isOnShortList)
        #expect(engine.acquireAtOnce(.write(a, .contentIndependentMetadataOnly), for: .process(2)) == nil)
        let own = try listed(engine, .process(1), .write(a, .forDeleting))
        engine.release(own)
        engine.release(held)
        // Listed against listed: readers share (C3), a writer waits for them.
        let reader1 = try listed(engine, .process(1), .read(a))
        let reader2 = try listed(engine, .process(2), .read(a))
        #expect(engine.acquireAtOnce(.write(a), for: .process(3)) == nil)
        engine.release(reader1)
        #expect(engine.acquireAtOnce(.write(a), for: .process(3)) == nil, "one reader still holds")
        engine.release(reader2)
        let writer = try listed(engine, .process(3), .write(a))
        #expect(engine.acquireAtOnce(request(.process(4), .read(a))) == nil, "the tables' path sees listed grants too")
        engine.release(writer)
        #expect(engine.snapshot().isIdle)
    }

    @Test func insideAPackageTheListedGrantLocksThePackage() throws {
        let engine = CoordinationEngine()
        let package = ItemPath("/doc.pkg")!
        let inner = Intent(.writing([]), AccessTarget(path: ItemPath("/doc.pkg/a")!, enclosingPackages: [package]))
        let other = Intent(.reading([]), AccessTarget(path: ItemPath("/doc.pkg/b")!, enclosingPackages: [package]))
        let grant = try listed(engine, .process(1), inner)
        #expect(engine.acquireAtOnce(other, for: .process(2)) == nil, "two items of one package conflict (C17)")
        #expect(engine.acquireAtOnce(request(.process(2), .read(package))) == nil)
        engine.release(grant)
        #expect(engine.acquireAtOnce(other, for: .process(2)) != nil)
    }

    @Test func aDirectoryDeletionWaitsForAListedGrantInsideIt() throws {
        let engine = CoordinationEngine()
        let inside = try listed(engine, .process(1), .write(ItemPath("/d/x")!))
        let directory = Intent(.writing(.forDeleting), AccessTarget(path: ItemPath("/d")!, isDirectory: true))
        let woken = Mutex(false)
        guard
            case .waiting = engine.acquire(
                request(.process(2), directory), resume: { _ in woken.withLock { $0 = true } })
        else { Issue.record("deleting the directory should wait for the write inside it (C19)"); return }
        engine.release(inside)
        #expect(woken.withLock { $0 })
    }

    @Test func whatCannotBeListedIsGrantedFromTheTables() throws {
        let engine = CoordinationEngine()
        // A directory being deleted covers its subtree.
        let directory = Intent(.writing(.forDeleting), AccessTarget(path: ItemPath("/d")!, isDirectory: true))
        let subtree = try #require(engine.acquireAtOnce(directory, for: .process(1)))
        #expect(!subtree.isOnShortList)
        // While a subtree is held, items inside it wait, and even other items go to the tables.
        #expect(engine.acquireAtOnce(.write(ItemPath("/d/y")!), for: .process(2)) == nil)
        let meanwhile = try #require(engine.acquireAtOnce(.write(a), for: .process(2)))
        #expect(!meanwhile.isOnShortList)
        engine.release(meanwhile)
        engine.release(subtree)
        // A request that waits in the queue: later ones go through the tables, behind it (X3).
        let holder = try #require(engine.acquireAtOnce(request(.process(1), .read(a))))
        guard case .waiting(let ticket) = engine.acquire(request(.process(2), .write(a)), resume: { _ in }) else {
            Issue.record("the second writer should wait"); return
        }
        let behind = try #require(engine.acquireAtOnce(.write(b), for: .process(3)))
        #expect(!behind.isOnShortList)
        #expect(
            engine.acquireAtOnce(.read(a), for: .process(3)) == nil,
            "sharing with the reader would overtake the waiting writer")
        engine.abandon(ticket, because: .timedOut)
        engine.release(behind)
        engine.release(holder)
        // A presenter elsewhere with nothing to be asked: the tables grant it.
        let elsewhere = engine.addPresenter(PresenterRecord(owner: .process(9), path: ItemPath("/elsewhere")!))
        let fromTheTables = try #require(engine.acquireAtOnce(.write(b), for: .process(2)))
        #expect(!fromTheTables.isOnShortList)
        engine.release(fromTheTables)
        // A presenter of the item: nil, as from `acquireAtOnce(_:)`, so that the caller asks it.
        let presenter = engine.addPresenter(PresenterRecord(owner: .process(9), path: a))
        #expect(engine.acquireAtOnce(.write(a), for: .process(1)) == nil)
        engine.removePresenter(presenter)
        engine.removePresenter(elsewhere)
        // An invalid intent is refused, as a request with it is.
        #expect(engine.acquireAtOnce(.write(b, [.forDeleting, .forMoving]), for: .process(2)) == nil)
        // More at once than the list keeps (open files keep their place): the rest go to the tables.
        let many = try (0..<ShortList.capacity + 1).map { i in
            try #require(engine.acquireAtOnce(.read(ItemPath("/item\(i)")!), for: .process(Int32(i))))
        }
        #expect(many.prefix(ShortList.capacity).allSatisfy { $0.isOnShortList })
        #expect(!many[ShortList.capacity].isOnShortList)
        #expect(
            engine.acquireAtOnce(request(.process(99), .write(ItemPath("/item3")!))) == nil,
            "a full list still blocks")
        many.forEach { engine.release($0) }
        #expect(engine.snapshot().isIdle)
    }

    @Test func listedGrantsAreListedInGrantOrderAndEndWithTheirSession() throws {
        let engine = CoordinationEngine()
        let first = try listed(engine, .process(1), .write(a))
        let second = try #require(engine.acquireAtOnce(request(.process(2), .write(b))))
        let third = try listed(engine, .process(1), .read(ItemPath("/c")!))
        let snapshot = engine.snapshot()
        #expect(snapshot.holders.map(\.grant) == [first, second, third])
        #expect(snapshot.holders[0].intents.map(\.path) == [a] && snapshot.holders[0].identity == .process(1))
        #expect(snapshot.description.contains("HOLD \(first) pid:1: write(0) /a"))
        engine.endSession(of: .process(1))
        #expect(engine.snapshot().holders.map(\.grant) == [second])
        #expect(engine.acquireAtOnce(.write(a), for: .process(3)) != nil, "the ended session holds nothing")
        // Ending an ended grant (a request finishing after its process died) does nothing.
        engine.release(first)
        engine.release(third, outcome: IntentOutcome(existedBefore: true, existsAfter: false))
        #expect(engine.snapshot().holders.count == 2)
    }

    @Test func aListedGrantReportsNoMoveAndFinishesNoMessaging() throws {
        let engine = CoordinationEngine()
        let grant = try listed(engine, .process(1), .write(a, .forMoving))
        engine.finishMessaging(grant) {}
        #expect(throws: CoordinationError.notInsideWrite) {
            try engine.reportMove(in: grant, from: AccessTarget(path: a), to: AccessTarget(path: b))
        }
        #expect(engine.snapshot().holders.map(\.grant) == [grant], "still held")
        engine.release(grant)
    }

    @Test func theReleaseOfAListedGrantTellsPresenters() throws {
        let engine = CoordinationEngine()
        let directory = ItemPath("/d")!, item = ItemPath("/d/x")!
        let grant = try listed(engine, .process(1), .write(item, .forDeleting))
        // Registered while the grant was held: nobody was to be asked when it was taken, but
        // the deletion is news to them when it ends (P12).
        let watcher = engine.addPresenter(PresenterRecord(owner: .process(2), path: directory))
        let delivered = engine.release(grant, outcome: IntentOutcome(existedBefore: true, existsAfter: false))
        #expect(delivered.map(\.presenter) == [watcher])
        #expect(delivered.first?.messages == [.subitemWasDeleted(item)])
    }

    @Test func theReleaseOfAListedGrantEndsTheServicesOfWhatItDeleted() throws {
        let engine = CoordinationEngine()
        let item = ItemPath("/d/x")!
        let kept = try engine.vendService(named: "sync", at: ItemPath("/d")!, owner: .process(3))
        let deleted = try engine.vendService(named: "sync", at: item, owner: .process(3))
        let grant = try listed(engine, .process(1), .write(item, .forDeleting))
        engine.release(grant, outcome: IntentOutcome(existedBefore: true, existsAfter: false))
        #expect(engine.service(deleted) == nil, "a deleted item's services end with it")
        #expect(engine.service(kept) != nil)
    }

    @Test func removingFromTheMiddleKeepsEveryOtherEntryFindable() throws {
        let engine = CoordinationEngine()
        let paths = (0..<6).map { ItemPath("/x\($0)")! }
        var grants = try paths.map { try listed(engine, .process(1), .write($0)) }
        for index in [2, 0, 3] {
            engine.release(grants[index])
            grants[index] = try #require(engine.acquireAtOnce(.write(paths[index]), for: .process(2)), "free again")
        }
        for (index, path) in paths.enumerated() {
            #expect(engine.acquireAtOnce(.read(path), for: .process(7)) == nil, "item \(index) is still held")
        }
        grants.forEach { engine.release($0) }
        #expect(engine.snapshot().isIdle)
    }
}
