@testable import Coordination
import Synchronization
import Testing

/// Holds of unmodified programs' open descriptors, as a mount marks them: a name change passes
/// reads through open files (a move, appenders too), a log's rotation passes its readers and
/// appenders, their holds follow their item's moves and go with a name removed, and revoked
/// holds hold nothing (docs/mount.md, the kernel's locks). Coordinated holds keep Apple's rules
/// (C2, O5, O6, C19).
@Suite struct OpenFileHoldTests {
    let a = ItemPath("/d/a")!, b = ItemPath("/d/b")!, c = ItemPath("/d/c")!, d = ItemPath("/d")!
    let deleting: WritingOptions = [.forDeleting, .passesOpenReads]
    let moving: WritingOptions = [.forMoving, .passesOpenReads, .passesAppends]
    let replacing: WritingOptions = [.forReplacing, .passesOpenReads]
    let rotating: WritingOptions = [.passesOpenReads, .passesAppends]
    let removed = IntentOutcome(existedBefore: true, existsAfter: false)

    func request(_ who: CoordinatorIdentity, _ intents: Intent...) -> AccessRequest {
        AccessRequest(identity: who, intents: intents)
    }

    func mode(_ kind: AccessKind, _ path: ItemPath, directory: Bool = false) -> LockMode {
        LockMode(Intent(kind, AccessTarget(path: path, isDirectory: directory)))
    }

    @Test func aWriteCarriesOneOptionBesidesTheMarks() {
        #expect(deleting.isValid && moving.isValid && replacing.isValid && rotating.isValid)
        #expect(WritingOptions([.sharingWriters, .passesOpenReads, .passesAppends]).isValid)
        #expect(!WritingOptions([.forDeleting, .forMoving, .passesOpenReads]).isValid)  // O10
        // The control socket knows the marks by no name.
        #expect(WritingOptions([.forDeleting, .passesOpenReads, .passesAppends]).names == ["forDeleting"])
        #expect(ReadingOptions.throughOpenFile.names.isEmpty)
    }

    @Test("C2 a name change passes open files' reads, not coordinated reads nor writers")
    func c2NameChangesAndOpenFiles() {
        let openRead = mode(.reading(.throughOpenFile), a), read = mode(.reading([]), a)
        let appender = mode(.writing(.appendingOnly), a), inPlace = mode(.writing(.sharingWriters), a)
        let truncating = mode(.writing([]), a)
        for change in [mode(.writing(deleting), a), mode(.writing(moving), a), mode(.writing(replacing), a)] {
            #expect(!change.conflicts(with: openRead) && !openRead.conflicts(with: change))
            #expect(change.conflicts(with: read) && read.conflicts(with: change))  // C2, O5, O6
            #expect(change.conflicts(with: inPlace) && change.conflicts(with: truncating))
        }
        #expect(!mode(.writing(moving), a).conflicts(with: appender), "an appender appends on under the new name")
        #expect(mode(.writing(deleting), a).conflicts(with: appender), "its appends would be lost")
        #expect(mode(.writing(replacing), a).conflicts(with: appender), "its appends would be lost")
        // A coordinator's deletion carries no mark: it waits for an open file's read too.
        #expect(mode(.writing(.forDeleting), a).conflicts(with: openRead))
        // A log's rotation passes its readers and appenders; an O_TRUNC writer still waits for them.
        #expect(
            !mode(.writing(rotating), a).conflicts(with: openRead)
                && !mode(.writing(rotating), a).conflicts(with: appender))
        #expect(!mode(.writing([.sharingWriters, .passesOpenReads]), a).conflicts(with: openRead))
        #expect(mode(.writing([.sharingWriters, .passesOpenReads]), a).conflicts(with: read))
        #expect(truncating.conflicts(with: openRead) && truncating.conflicts(with: appender))
        #expect(
            mode(.writing(rotating), a).conflicts(with: inPlace)
                && mode(.writing(rotating), a).conflicts(with: truncating))
        // A directory removed or moved passes the open files' reads left inside it (C19 otherwise).
        #expect(!mode(.writing(deleting), d, directory: true).conflicts(with: openRead))
        #expect(mode(.writing(.forDeleting), d, directory: true).conflicts(with: openRead))  // C19
        #expect(mode(.writing(deleting), d, directory: true).conflicts(with: inPlace))
        #expect(!mode(.writing(moving), d, directory: true).conflicts(with: appender))
    }

    @Test("P22 inside a package a name change is a write of the package: no open file lets it pass")
    func p22NoMarksInsideAPackage() {
        let package = ItemPath("/d/doc.pkg")!, page = ItemPath("/d/doc.pkg/page")!
        let inside = Intent(.writing(deleting), AccessTarget(path: page, enclosingPackages: [package]))
        let reader = Intent(.reading(.throughOpenFile), AccessTarget(path: package, isPackage: true))
        #expect(LockMode(inside).conflicts(with: LockMode(reader)))
    }

    @Test func theEngineLetsANameChangePastAnOpenFilesReadListedOrInTheTables() throws {
        let engine = CoordinationEngine()
        let listed = try #require(engine.acquireAtOnce(.read(a, .throughOpenFile), for: .process(1)))
        #expect(listed.isOnShortList)
        let unlink = try #require(engine.acquireAtOnce(.write(a, deleting), for: .process(2)))
        engine.release(unlink)
        // From the tables (a presenter elsewhere keeps grants off the short list), and beside a
        // directory's removal.
        let presenter = engine.addPresenter(PresenterRecord(owner: .process(9), path: ItemPath("/elsewhere")!))
        let tabled = try #require(engine.acquireAtOnce(request(.process(3), .read(b, .throughOpenFile))))
        #expect(!tabled.isOnShortList)
        let rename = try #require(engine.acquireAtOnce(request(.process(2), .write(b, moving), .write(c, replacing))))
        engine.release(rename)
        let removal = Intent(.writing(deleting), AccessTarget(path: d, isDirectory: true))
        let rmdir = try #require(engine.acquireAtOnce(request(.process(2), removal)), "only open files' reads inside")
        engine.release(rmdir)
        #expect(
            engine.acquireAtOnce(request(.process(2), .write(b, .forDeleting))) == nil,
            "an unmarked deletion waits (C2)")
        engine.release(tabled)
        engine.release(listed)
        engine.removePresenter(presenter)
        #expect(engine.snapshot().isIdle)
    }

    /// A mount's rename: the open files' holds on the item follow it, those of the item it
    /// replaced go, and a moved hold is gated no more (its owner's gate guards the old name).
    @Test func openFilesHoldsFollowTheirItemAndGoWhenItIsReplaced() throws {
        let engine = CoordinationEngine()
        let reader = try #require(engine.acquireAtOnce(.read(a, .throughOpenFile), for: .process(1), gated: true))
        let appender = try #require(engine.acquireAtOnce(.write(a, .appendingOnly), for: .process(5), gated: true))
        let replacedReader = try #require(
            engine.acquireAtOnce(.read(b, .throughOpenFile), for: .process(4), gated: true))
        #expect(engine.quietPassage(.onlyGatedGrants).isOpen)
        let rename = try #require(engine.acquireAtOnce(request(.process(2), .write(a, moving), .write(b, replacing))))
        _ = try engine.reportMove(in: rename, from: AccessTarget(path: a), to: AccessTarget(path: b))
        engine.release(rename)
        #expect(!engine.quietPassage(.onlyGatedGrants).isOpen, "requests about the new name pass beside no moved hold")
        // A new file at the old name is free; the moved item is still held by its reader and appender.
        let made = try #require(engine.acquireAtOnce(.write(a), for: .process(3)), "the holds left with their item")
        engine.release(made)
        #expect(engine.acquireAtOnce(.write(b), for: .process(3)) == nil, "the reader holds the item at its new name")
        #expect(engine.snapshot().holders.contains { $0.grant == reader && $0.intents.first?.path == b })
        #expect(engine.snapshot().holders.contains { $0.grant == appender && $0.intents.first?.path == b })
        engine.release(reader)
        engine.release(appender)
        // The replaced item's reader holds nothing there any more.
        let written = try #require(engine.acquireAtOnce(.write(b), for: .process(3)))
        engine.release(written)
        engine.release(replacedReader)
        #expect(engine.snapshot().isIdle)
        #expect(engine.quietPassage(.onlyGatedGrants).isOpen)
    }

    /// Moves others report (a client's `moved`, a coordinator's) leave open files' holds where
    /// they are: only a mount's rename, which saw the descriptors it let past, moves them.
    @Test func onlyAMountsRenameMovesOpenFilesHolds() throws {
        let engine = CoordinationEngine()
        let reader = try #require(engine.acquireAtOnce(.read(a, .throughOpenFile), for: .process(1)))
        let client = CoordinatorIdentity.client(process: 2, number: 1)
        let write = try #require(engine.acquireAtOnce(request(client, .write(c), .write(b))))
        _ = try engine.reportMove(in: write, from: AccessTarget(path: a), to: AccessTarget(path: b))
        engine.release(write)
        #expect(engine.snapshot().holders.contains { $0.grant == reader && $0.intents.first?.path == a })
        engine.release(reader)
        #expect(engine.snapshot().isIdle)
    }

    /// An unlink that went ahead beside open files' reads: once it is made, their holds on the
    /// removed name go (a file made there next is not theirs); one that failed leaves them.
    @Test func aRemovedNamesReadersHoldItNoMore() throws {
        let engine = CoordinationEngine()
        let reader = try #require(engine.acquireAtOnce(.read(a, .throughOpenFile), for: .process(1)))
        let failed = try #require(engine.acquireAtOnce(.write(a, deleting), for: .process(2)))
        engine.release(failed, outcome: IntentOutcome(existedBefore: true, existsAfter: true, changed: false))
        #expect(engine.acquireAtOnce(.write(a), for: .process(3)) == nil, "a failed unlink leaves the reader holding")
        let unlink = try #require(engine.acquireAtOnce(.write(a, deleting), for: .process(2)))
        engine.release(unlink, outcome: removed)
        let made = try #require(
            engine.acquireAtOnce(.write(a), for: .process(3)), "the reader's hold went with the name")
        engine.release(made)
        engine.release(reader)
        #expect(engine.snapshot().isIdle)
    }

    /// The break time: the holds passed are revoked and the request is granted, holding, when
    /// nothing else is in its way (here an open file's read, which a deletion passes). Nobody
    /// waits for a revoked hold again; its owner still ends it.
    @Test func aBrokenWaitRevokesTheHoldsItPassedAndIsGrantedHolding() throws {
        let engine = CoordinationEngine()
        let holder = CoordinatorIdentity.client(process: 7, number: 1)
        let held = try #require(engine.acquireAtOnce(request(holder, .read(a), .read(b))))
        let listed = try #require(engine.acquireAtOnce(.read(a, .throughOpenFile), for: .process(8)))
        let granted = Mutex<Grant?>(nil)
        guard
            case .waiting(let ticket) = engine.acquire(
                request(.process(2), .write(a, deleting)),
                resume: { result in
                    granted.withLock { $0 = try? result.get() }
                })
        else { Issue.record("the deletion should wait for the coordinated read"); return }
        #expect(
            engine.breakThrough(ticket, revoking: [holder, .process(8)]) == [held],
            "the open file's read was not in its way")
        let grant = try #require(granted.withLock { $0 }, "granted, holding its item")
        #expect(engine.acquireAtOnce(request(.process(3), .read(a))) == nil, "the deletion holds")
        engine.release(grant.id)
        // Nobody waits for the revoked hold again, on either item.
        let other = try #require(engine.acquireAtOnce(request(.process(4), .write(b))))
        engine.release(other)
        engine.release(held)
        engine.release(listed)
        #expect(engine.snapshot().isIdle)
    }

    @Test func aBrokenWaitStillInTheWayGoesAheadHoldingNothing() throws {
        let engine = CoordinationEngine()
        let passed = CoordinatorIdentity.client(process: 7, number: 1),
            kept = CoordinatorIdentity.client(process: 7, number: 2)
        let first = try #require(engine.acquireAtOnce(request(passed, .read(a))))
        let second = try #require(engine.acquireAtOnce(request(kept, .read(a))))
        let ended = Mutex<CoordinationError?>(nil)
        guard
            case .waiting(let ticket) = engine.acquire(
                request(.process(2), .write(a)),
                resume: { result in
                    if case .failure(let error) = result { ended.withLock { $0 = error } }
                })
        else { Issue.record("the write should wait"); return }
        #expect(engine.breakThrough(ticket, revoking: [passed]) == [first])
        #expect(ended.withLock { $0 } == .brokenThrough)
        #expect(engine.acquireAtOnce(request(.process(3), .write(a))) == nil, "the hold not passed still holds")
        engine.release(second)
        engine.release(first)
        #expect(engine.snapshot().isIdle)
    }

    /// A name change that went ahead notes the grants it passed on its own items (and inside
    /// them), not a directory's above; revoking them later lets whoever waited only for them in.
    @Test func theGrantsANameChangePassesAreNotedOnItsOwnItemsAndRevokedLater() throws {
        let engine = CoordinationEngine()
        // One coordinator holds the file and, in a second grant, its directory (C4: they coexist).
        let holder = CoordinatorIdentity.client(process: 7, number: 1)
        let held = try #require(engine.acquireAtOnce(request(holder, .write(a))))
        let directory = try #require(
            engine.acquireAtOnce(
                request(holder, Intent(.writing(.forDeleting), AccessTarget(path: d, isDirectory: true)))))
        guard case .waiting(let ticket) = engine.acquire(request(.process(2), .write(a, deleting)), resume: { _ in })
        else {
            Issue.record("the unlink should wait"); return
        }
        #expect(engine.grants(of: [holder], onTheItemsOf: ticket) == [held], "not the directory's, above it")
        #expect(engine.snapshot().holders.count == 2, "nothing revoked by looking")
        #expect(engine.abandon(ticket, because: .brokenThrough))
        engine.release(directory)
        guard case .waiting(let reader) = engine.acquire(request(.process(3), .read(a)), resume: { _ in }) else {
            Issue.record("a read waits for the writer"); return
        }
        #expect(engine.revoke([held]) == 1)
        #expect(engine.blockers(of: reader) == nil, "granted once the hold was revoked")
        #expect(engine.revoke([held]) == 0, "revoked once")
        engine.release(held)
        #expect(engine.grants(of: [holder], onTheItemsOf: ticket).isEmpty, "no longer waiting")
    }
}
