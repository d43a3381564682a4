import Coordination
import CoordinationRuntime
import FileCoordination
import Foundation
import Synchronization
import TestSupport
import Testing

// @unchecked Sendable: immutable but for its thread-safe log.
/// A presenter that takes its messages on the sender's thread, as a control-socket watch does.
private final class InlinePresenter: ExtendedFilePresenter, @unchecked Sendable {
    let presentedItemURL: URL?
    let presentedItemOperationQueue = OperationQueue()
    let log: EventLog
    var takesMessagesInline: Bool { true }

    init(_ url: URL, log: EventLog) {
        presentedItemURL = url
        self.log = log
    }

    func relinquishPresentedItem(
        toWriter: Bool, completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void
    ) {
        completion(nil, nil)
    }
    func accommodatePresentedSubitemDeletion(at url: URL, completionHandler: @escaping @Sendable (Error?) -> Void) {
        log.add(
            "asked to accommodate \(url.lastPathComponent) on thread \(UInt(bitPattern: Int(bitPattern: pthread_self())))"
        )
        completionHandler(nil)
    }
    func presentedSubitemDidAppear(at url: URL) { log.add("appeared \(url.lastPathComponent)") }
    func presentedSubitemWasDeleted(at url: URL) { log.add("deleted \(url.lastPathComponent)") }
    func presentedItemWasDeleted() {}
}

@Suite struct ClaimTests {
    /// An inline presenter of "dir", and a claim granted at once to create "dir/new" in it.
    private func creationWatched(by fixture: Fixture) throws -> Claim {
        let directory = try fixture.directory("dir")
        fixture.domain.addFilePresenter(InlinePresenter(directory, log: fixture.log))
        let intents = [Intent(.writing([]), try fixture.domain.accessTarget(for: fixture.url("dir/new")))]
        return try #require(Claim.grantedAtOnce(in: fixture.domain, identity: .process(1), intents: intents))
    }

    @Test func presentersHearOfAClaimOnlyOnceItsScopeHasEnded() throws {
        let fixture = try Fixture()
        let claim = try creationWatched(by: fixture)
        fixture.domain.deliveringAfter {
            _ = try? fixture.file("dir/new")
            claim.end(outcomes: [IntentOutcome(existedBefore: false, existsAfter: true)], in: fixture.domain)
            fixture.log.add("replied")
        }
        #expect(fixture.log.events == ["replied", "appeared new"])
    }

    @Test func overlappingScopesDeliverWhenTheLastEnds() throws {
        let fixture = try Fixture()
        let claim = try creationWatched(by: fixture)
        fixture.domain.deliveringAfter {
            // A release overlapping the end of the open that made its handle.
            fixture.domain.deliveringAfter {
                _ = try? fixture.file("dir/new")
                claim.end(outcomes: [IntentOutcome(existedBefore: false, existsAfter: true)], in: fixture.domain)
            }
            fixture.log.add("inner scope ended")
        }
        #expect(fixture.log.events == ["inner scope ended", "appeared new"])
    }

    @Test func outsideAScopePresentersHearAtOnce() throws {
        let fixture = try Fixture()
        let claim = try creationWatched(by: fixture)
        try fixture.file("dir/new")
        claim.end(outcomes: [IntentOutcome(existedBefore: false, existsAfter: true)], in: fixture.domain)
        #expect(fixture.log.events == ["appeared new"])
    }

    @Test func anInlinePresenterIsAskedOnTheAccessingThread() throws {
        let fixture = try Fixture()
        let directory = try fixture.directory("dir")
        try fixture.file("dir/old")
        fixture.domain.addFilePresenter(InlinePresenter(directory, log: fixture.log))
        let intents = [Intent(.writing(.forDeleting), try fixture.domain.accessTarget(for: fixture.url("dir/old")))]
        let accessingThread = Mutex<UInt>(0)
        let asked = Background { () -> Bool in
            accessingThread.withLock { $0 = UInt(bitPattern: Int(bitPattern: pthread_self())) }
            let done = DispatchSemaphore(value: 0)
            Claim.begin(in: fixture.domain, identity: .process(1), intents: intents, timeout: .seconds(10)) { result in
                if case .success(let claim) = result {
                    claim.end(outcomes: [IntentOutcome(existedBefore: true, existsAfter: false)], in: fixture.domain)
                }
                done.signal()
            }
            return done.wait(timeout: .now() + 10) == .success
        }
        #expect(try asked.join())
        #expect(fixture.log.events.first == "asked to accommodate old on thread \(accessingThread.withLock { $0 })")
    }
}
