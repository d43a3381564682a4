import Coordination
import Dispatch
import FileCoordination
import Foundation
import TestSupport
import Testing

/// The X rules: the pitfalls of Apple's coordination, made safe.
@Suite struct PitfallRules {
    @Test("X1 a cycle between coordinators gives the newest waiter a deadlock error, nothing else") func x1() throws {
        let fx = try Fixture()
        let x = try fx.file("x"), y = try fx.file("y")
        let c1 = fx.coordinator(), c2 = fx.coordinator()
        let go1 = Gate(), go2 = Gate()
        let log = fx.log
        let first = Background {
            try c1.coordinate(writingItemAt: x) { _ in
                log.add("c1 holds x")
                go1.wait()
                try c1.coordinate(writingItemAt: y) { _ in log.add("c1 got y") }
            }
        }
        let second = Background { () -> Error? in
            var caught: Error?
            try c2.coordinate(writingItemAt: y) { _ in
                log.add("c2 holds y")
                go2.wait()
                do { try c2.coordinate(writingItemAt: x) { _ in log.add("c2 got x") } } catch { caught = error }
            }
            return caught
        }
        #expect(log.waitFor("c1 holds x") && log.waitFor("c2 holds y"))
        go1.open()
        #expect(fx.waitForWaiters(1))
        go2.open()
        let error = try second.join()
        guard case .deadlock(let item, let cycle)? = error as? FileCoordinationError else {
            Issue.record("expected a deadlock error, got \(String(describing: error))")
            return
        }
        #expect(cycle.count == 3)
        #expect(item == x.path && (error.map { $0 as NSError })?.userInfo[NSFilePathErrorKey] as? String == x.path)
        try first.join()
        #expect(log.contains("c1 got y") && !log.contains("c2 got x"))
        #expect(fx.isIdle)
    }

    @Test("X2 a presenter that does not answer delays the access by the presenter timeout, and it is reported")
    func x2() throws {
        let fx = try Fixture(presenterTimeout: .milliseconds(300))
        let a = try fx.file("a")
        let silent = SilentPresenter(url: a)
        fx.domain.addFilePresenter(silent)
        let reports = EventLog()
        fx.domain.reportHandler = { reports.add($0.description) }
        let start = ContinuousClock.now
        try fx.coordinator().coordinate(readingItemAt: a) { _ in fx.log.add("read") }
        let waited = ContinuousClock.now - start
        #expect(fx.log.contains("read"))
        #expect(waited >= .milliseconds(250))
        // Named as a watch gets it, and as Swift calls it.
        #expect(
            reports.events.count == 1 && reports.events[0].contains("RELINQUISH_READER (relinquishToReader)"),
            "\(reports.events)")
        #expect(fx.isIdle)
    }

    /// The domain keeps the deadlines of all its accesses in order on one timer: a shorter
    /// timeout set while an access waits out a longer one still holds for the accesses after it.
    @Test("X2 a shorter presenter timeout holds for later accesses while an earlier one waits out a longer one")
    func x2ShorterLater() throws {
        let fx = try Fixture(presenterTimeout: .seconds(3))
        let a = try fx.file("a"), b = try fx.file("b")
        fx.domain.addFilePresenter(SilentPresenter(url: a, log: fx.log, name: "a"))
        fx.domain.addFilePresenter(SilentPresenter(url: b))
        let start = ContinuousClock.now
        let first = Background { () -> Duration in
            try fx.coordinator().coordinate(readingItemAt: a) { _ in fx.log.add("read a") }
            return ContinuousClock.now - start
        }
        #expect(fx.log.waitFor("a asked"))
        fx.domain.presenterTimeout = .milliseconds(300)
        let second = ContinuousClock.now
        try fx.coordinator().coordinate(readingItemAt: b) { _ in fx.log.add("read b") }
        let waitedForB = ContinuousClock.now - second
        #expect(waitedForB >= .milliseconds(250) && waitedForB < .milliseconds(2500), "\(waitedForB)")
        #expect(!fx.log.contains("read a"), "a's access still waits out its own timeout")
        let waitedForA = try first.join()
        #expect(waitedForA >= .milliseconds(2900), "\(waitedForA)")
        #expect(fx.isIdle)
    }

    @Test("X3 a stream of readers cannot starve a waiting writer") func x3() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let reader = fx.holdRead("R1", a)
        #expect(reader.started(fx))
        let writer = fx.write("W", a)
        #expect(fx.waitForWaiters(1))
        let late = fx.read("R2", a)
        #expect(fx.waitForWaiters(2), "the later reader queues behind the writer")
        try reader.release()
        try writer.join()
        try late.join()
        #expect(fx.log.order("R1-end", before: "W-run"))
        #expect(fx.log.order("W-run", before: "R2-run"))
    }

    @Test("X4 when a coordinator's process goes, its intents and presenters go at once") func x4() throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let engine = fx.engine
        let process = CoordinatorIdentity.process(4242)
        guard
            case .granted = engine.acquire(
                AccessRequest(identity: process, intents: [.write(ItemPath(a.path)!)]), resume: { _ in })
        else {
            Issue.record("not granted")
            return
        }
        _ = engine.addPresenter(PresenterRecord(owner: process, path: ItemPath(a.path)!))
        let reader = fx.read("R", a)
        #expect(fx.waitForWaiters(1))
        engine.endSession(of: process)
        try reader.join()
        #expect(engine.presenters.isEmpty)
        #expect(fx.isIdle)
    }

    @Test("X5 waiting is bounded by a configurable timeout with a clear error") func x5() async throws {
        let fx = try Fixture()
        let a = try fx.file("a")
        let holder = fx.holdWrite("W", a)
        #expect(holder.started(fx))
        let coordinator = fx.coordinator()
        coordinator.waitTimeout = .milliseconds(150)
        #expect(throws: FileCoordinationError.timedOut(item: a.path)) {
            try coordinator.coordinate(readingItemAt: a) { _ in }
        }
        await #expect(throws: FileCoordinationError.timedOut(item: a.path)) {
            try await coordinator.read(at: a) { _ in }
        }
        let op = CoordinatedAccessOperation(coordinator: coordinator, intents: [.readingIntent(with: a)]) { _ in }
        // Waited for through the operation's own completion: this test is async.
        await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
            op.completionBlock = { finished.resume() }
            OperationQueue().addOperation(op)
        }
        #expect(op.error as? FileCoordinationError == .timedOut(item: a.path))
        #expect(
            FileCoordinationError.timedOut(item: a.path).description
                == "timed out waiting for coordinated access to \(a.path)")
        try holder.release()
        #expect(fx.isIdle)
    }

    @Test("X6 presenters of one item that coordinate from their own callbacks do not deadlock the engine") func x6()
        throws
    {
        let fx = try Fixture(presenterTimeout: .milliseconds(500))
        let a = try fx.file("a")
        let done = EventLog()
        let presenters = (0..<2).map { CoordinatingPresenter(name: "P\($0)", url: a, domain: fx.domain, done: done) }
        presenters.forEach(fx.domain.addFilePresenter)
        try fx.coordinator().coordinate(writingItemAt: a) { url in try Data("new".utf8).write(to: url) }
        // While they sort themselves out, the engine serves everyone else at once.
        let start = ContinuousClock.now
        try fx.coordinator().coordinate(writingItemAt: try fx.file("other")) { _ in }
        #expect(ContinuousClock.now - start < .milliseconds(200))
        #expect(eventually(.seconds(10)) { done.events.count == 2 })
        #expect(eventually { fx.isIdle })
    }

    @Test("X7 a stopped client holds others up only within the timeouts") func x7() throws {
        let fx = try Fixture(presenterTimeout: .milliseconds(200))
        let a = try fx.file("a")
        let stopped = fx.presenter("stopped", "a")
        stopped.presentedItemOperationQueue.isSuspended = true  // like SIGSTOP: it never runs
        try fx.coordinator().coordinate(writingItemAt: a) { _ in fx.log.add("write") }
        #expect(fx.log.contains("write"))
        // A holder that never lets go: waiters give up after their own timeout.
        let holder = fx.holdWrite("stuck", a)
        #expect(holder.started(fx))
        let coordinator = fx.coordinator()
        coordinator.waitTimeout = .milliseconds(200)
        #expect(throws: FileCoordinationError.timedOut(item: a.path)) {
            try coordinator.coordinate(readingItemAt: a) { _ in }
        }
        try holder.release()
        stopped.presentedItemOperationQueue.isSuspended = false
    }

    /// A presenter that misses three deadlines in a row (a stopped process, a queue that never
    /// runs) is asked nothing more, as one that is gone, until it answers again: its late
    /// answers, once its queue runs, bring it back.
    @Test("X7 a presenter that misses three deadlines in a row costs nothing more until it answers again")
    func x7MissedDeadlines() throws {
        let fx = try Fixture(presenterTimeout: .milliseconds(200))
        let a = try fx.file("a")
        let stopped = fx.presenter("stopped", "a")
        stopped.presentedItemOperationQueue.isSuspended = true
        for n in 1...3 {
            let start = ContinuousClock.now
            try fx.coordinator().coordinate(readingItemAt: a) { _ in }
            #expect(ContinuousClock.now - start >= .milliseconds(150), "deadline \(n)")
        }
        let start = ContinuousClock.now
        for _ in 1...5 { try fx.coordinator().coordinate(readingItemAt: a) { _ in } }
        #expect(ContinuousClock.now - start < .milliseconds(150), "asked nothing")
        stopped.presentedItemOperationQueue.isSuspended = false
        #expect(eventually { fx.log.count("stopped:relinquishToReader") == 3 }, "its three late answers")
        // Back: asked again, and answering in time.
        #expect(
            eventually {
                _ = try? fx.coordinator().coordinate(readingItemAt: a) { _ in }
                return fx.log.count("stopped:relinquishToReader") == 4
            })
        #expect(fx.isIdle)
    }
}

// @unchecked Sendable: immutable but for its thread-safe log.
/// Never answers relinquish requests.
final class SilentPresenter: FilePresenter, @unchecked Sendable {
    let presentedItemURL: URL?
    let presentedItemOperationQueue = OperationQueue()
    private let log: EventLog?
    private let name: String
    /// With `log`, says "NAME asked" when asked (and still never answers).
    init(url: URL, log: EventLog? = nil, name: String = "") { presentedItemURL = url; self.log = log; self.name = name }
    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        log?.add("\(name) asked")
    }
    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        log?.add("\(name) asked")
    }
}

// @unchecked Sendable: immutable but for its thread-safe log.
/// Re-reads its item with a coordinated read whenever it changes (X6).
final class CoordinatingPresenter: FilePresenter, @unchecked Sendable {
    let name: String
    let presentedItemURL: URL?
    let presentedItemOperationQueue: OperationQueue
    let domain: CoordinationDomain
    let done: EventLog

    init(name: String, url: URL, domain: CoordinationDomain, done: EventLog) {
        self.name = name
        self.presentedItemURL = url
        self.domain = domain
        self.done = done
        presentedItemOperationQueue = OperationQueue()
        presentedItemOperationQueue.maxConcurrentOperationCount = 1
    }

    func presentedItemDidChange() {
        let coordinator = FileCoordinator(filePresenter: self, domain: domain)
        try? coordinator.coordinate(readingItemAt: presentedItemURL!) { url in _ = try? Data(contentsOf: url) }
        done.add(name)
    }
}
