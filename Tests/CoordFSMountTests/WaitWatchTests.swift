import Coordination
import CoordinationRuntime
@testable import CoordFSMount
import Foundation
import Synchronization
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What a mount's wait watch tells when a request goes past holders, and the lock time spent
/// once (docs/sharing.md): every hold passed, on any of the request's items, is told once; a
/// process that waited the lock time for another user goes past that user's holders at once
/// for a while, and nobody else does.
@Suite struct WaitWatchTests {
    typealias Sleeper = SocketHoldWaitsTests.Sleeper
    typealias Outcome = SocketHoldWaitsTests.Outcome

    let item = ItemPath("/d/f")!
    let other = ItemPath("/d/g")!
    let unchanged = IntentOutcome(existedBefore: true, existsAfter: true, changed: false)

    /// A request of process `caller` (of this test's user) for `intents`, watched as a mount's
    /// request under a kernel lock (an unlink's, a rename's) that changes no names: what it came
    /// to (ended here), and how long it took.
    func lockedRequest(
        of caller: Int32, _ intents: [Intent], in domain: CoordinationDomain, watch: WaitWatch,
        number: UInt, timeout: Duration = .seconds(10)
    ) throws -> (granted: Bool, took: Duration) {
        let outcome = Outcome()
        let started = ContinuousClock.now
        let waiting = try #require(
            Claim.begin(
                in: domain, identity: .process(caller), intents: intents, timeout: timeout,
                user: geteuid(), passesOtherUsers: true
            ) { outcome.set($0) },
            "the request was granted at once: nothing held it")
        _ = waiting.ifUnsettled {
            watch.watch(
                number, waiting, underKernelLock: true, locksOthersOut: true, changesNames: false, passesLeases: true,
                uid: geteuid(), item: nil)
        }
        _ = eventually(timeout + .seconds(5)) { outcome.value != nil }
        let took = ContinuousClock.now - started
        watch.forget(number)
        guard case .success(let claim)? = outcome.value else { return (false, took) }
        claim.end(outcomes: intents.map { _ in unchanged }, in: domain)
        return (true, took)
    }

    @Test(.enabled(if: geteuid() == 0, "runs a process as another user (nobody)"))
    func aHoldOnTheSecondItemOfARequestIsToldAndAHoldOfBothOnce() throws {
        let theirs = try Sleeper(asNobody: true)
        let domain = CoordinationDomain()
        let watch = WaitWatch(settleTime: nil, breakTime: .seconds(30), lockTime: .milliseconds(300)) { _, _ in nil }
        // One line a request told of: its items, then the grants it went past.
        let told = EventLog()
        watch.tellBroken = { paths, grants, _ in
            told.add(
                paths.map(\.string).joined(separator: ",") + " "
                    + grants.map(\.description).sorted().joined(separator: ","))
        }
        // Another user's hold of the second item (`f`, renamed over), and one of both.
        let ofTheSecond = try #require(
            Claim.grantedAtOnce(
                in: domain, identity: .client(process: theirs.pid, number: 1),
                intents: [.read(item)]))
        let ofBoth = try #require(
            Claim.grantedAtOnce(
                in: domain, identity: .client(process: theirs.pid, number: 2),
                intents: [.read(other), .read(item)]))
        let (granted, took) = try lockedRequest(
            of: getpid(), [.write(other), .write(item)], in: domain, watch: watch, number: 1)
        #expect(granted && took >= .milliseconds(250) && took < .seconds(3), "the lock time: \(took)")
        // Told just after the request is let go.
        _ = eventually(.seconds(2)) { !told.events.isEmpty }
        let second = try #require(ofTheSecond.grantID), both = try #require(ofBoth.grantID)
        let passed = [second.description, both.description].sorted().joined(separator: ",")
        #expect(
            told.events == ["\(other.string),\(item.string) \(passed)"],
            "told once: the presenters of both items, and both holds passed, each once")
        for claim in [ofTheSecond, ofBoth] { claim.end(outcomes: claim.intents.map { _ in unchanged }, in: domain) }
        #expect(domain.engine.snapshot().isIdle)
    }

    /// A holder is told before the request goes past it, not after: one that ends its hold in
    /// between (a `coordfs coordinate` whose command just finished) must not take its turn for a
    /// whole one. At the telling, the request is still waiting.
    @Test(.enabled(if: geteuid() == 0, "runs a process as another user (nobody)"))
    func holdersAreToldBeforeTheRequestGoesPastThem() throws {
        let theirs = try Sleeper(asNobody: true)
        let domain = CoordinationDomain()
        let watch = WaitWatch(settleTime: nil, breakTime: .seconds(30), lockTime: .milliseconds(300)) { _, _ in nil }
        let outcome = Outcome()
        let told = EventLog()
        watch.tellBroken = { _, grants, _ in
            told.add("\(grants.count) passed, the request \(outcome.value == nil ? "waiting" : "gone")")
        }
        let held = try #require(
            Claim.grantedAtOnce(
                in: domain, identity: .client(process: theirs.pid, number: 1), intents: [.read(item)]))
        let waiting = try #require(
            Claim.begin(
                in: domain, identity: .process(getpid()), intents: [.write(item)], timeout: .seconds(10),
                user: geteuid(), passesOtherUsers: true
            ) { outcome.set($0) },
            "the request was granted at once: nothing held it")
        _ = waiting.ifUnsettled {
            watch.watch(
                1, waiting, underKernelLock: true, locksOthersOut: true, changesNames: false, passesLeases: true,
                uid: geteuid(), item: nil)
        }
        #expect(eventually(.seconds(5)) { outcome.value != nil }, "let through at the lock time")
        watch.forget(1)
        #expect(told.events == ["1 passed, the request waiting"])
        if case .success(let claim)? = outcome.value { claim.end(outcomes: [unchanged], in: domain) }
        held.end(outcomes: [unchanged], in: domain)
        #expect(domain.engine.snapshot().isIdle)
    }

    @Test(.enabled(if: geteuid() == 0, "runs a process as another user (nobody)"))
    func aWaitSpentOnAnotherUserLetsItsProcessAloneGoPastThatUserAtOnce() throws {
        let theirs = try Sleeper(asNobody: true)
        let anotherOfOurs = try Sleeper(asNobody: false)
        let domain = CoordinationDomain()
        let watch = WaitWatch(settleTime: nil, breakTime: .seconds(30), lockTime: .milliseconds(500)) { _, _ in nil }
        let held = try #require(
            Claim.grantedAtOnce(
                in: domain, identity: .client(process: theirs.pid, number: 1),
                intents: [.read(item)]))
        // Not revoked (no name changed): each request below finds the hold in its way.
        let first = try lockedRequest(of: getpid(), [.write(item)], in: domain, watch: watch, number: 1)
        #expect(first.granted && first.took >= .milliseconds(450), "the lock time: \(first.took)")
        let second = try lockedRequest(of: getpid(), [.write(item)], in: domain, watch: watch, number: 2)
        #expect(second.granted && second.took < .milliseconds(300), "at once, the wait spent: \(second.took)")
        let elsewhere = try lockedRequest(of: anotherOfOurs.pid, [.write(item)], in: domain, watch: watch, number: 3)
        #expect(
            elsewhere.granted && elsewhere.took >= .milliseconds(450), "another process spent none: \(elsewhere.took)")
        #expect(
            watch.lockTimeBreaks.load(ordering: .relaxed) == 3 && watch.lockTimeWaived.load(ordering: .relaxed) == 1)
        held.end(outcomes: [unchanged], in: domain)

        // Its own user's hold it waits for as ever, the wait spent on another user's or not.
        let ours = try #require(
            Claim.grantedAtOnce(
                in: domain, identity: .client(process: anotherOfOurs.pid, number: 2),
                intents: [.read(item)]))
        let own = try lockedRequest(
            of: getpid(), [.write(item)], in: domain, watch: watch, number: 4, timeout: .seconds(1))
        #expect(
            !own.granted && own.took >= .milliseconds(900),
            "its own user's hold is waited for until the timeout: \(own.took)")
        #expect(watch.lockTimeWaived.load(ordering: .relaxed) == 1)
        ours.end(outcomes: [unchanged], in: domain)
        #expect(domain.engine.snapshot().isIdle)
    }

    // @unchecked Sendable: `work` is behind `lock`.
    /// A presenter of `path` for `owner` that, asked anything, first does its own work: a read
    /// of the item by its process (a program's open, which goes ahead of the access that asked,
    /// C21), kept until `endWork`. Then it consents.
    final class WorkingPresenter: Presenter, @unchecked Sendable {
        let owner: CoordinatorIdentity
        let path: ItemPath
        let domain: CoordinationDomain
        private let lock = NSLock()
        private var work: Claim?

        init(owner: CoordinatorIdentity, path: ItemPath, domain: CoordinationDomain) {
            self.owner = owner
            self.path = path
            self.domain = domain
        }

        func presentedPaths(_ locator: ItemLocator) -> (item: ItemPath?, primary: ItemPath?) { (path, nil) }
        var answeredRequests: PresenterRequest.Kinds { .all }

        func asked(
            _ request: PresenterRequest, origin: AccessOrigin, progress: PresenterProgress,
            completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void
        ) {
            lock.withLock {
                if work == nil, let process = owner.process {
                    work = Claim.grantedAtOnce(in: domain, identity: .process(process), intents: [.read(path)])
                }
            }
            completion(nil, nil)
        }

        func told(
            _ notifications: [PresenterNotification], origin: AccessOrigin, presentsPackage: Bool,
            moved: @escaping @Sendable () -> Void
        ) {}

        func reacquire(_ reacquirer: @escaping @Sendable () -> Void) { reacquirer() }

        var workGrant: GrantID? { lock.withLock { work?.grantID } }

        func endWork() {
            let ending = lock.withLock { () -> Claim? in
                defer { work = nil }; return work
            }
            ending?.end(outcome: IntentOutcome(existedBefore: true, existsAfter: true, changed: false), in: domain)
        }
    }

    /// A program's open (no kernel lock) of `intents` by process `caller` (this one, unless
    /// told), begun and watched as `number`: what it comes to (set by its completion), and when
    /// it began.
    func openRequest(
        _ intents: [Intent], by caller: Int32 = getpid(), in domain: CoordinationDomain, watch: WaitWatch,
        number: UInt, timeout: Duration = .seconds(10)
    ) throws -> (Outcome, ContinuousClock.Instant) {
        let outcome = Outcome()
        let started = ContinuousClock.now
        let waiting = try #require(
            Claim.begin(
                in: domain, identity: .process(caller), intents: intents, timeout: timeout,
                user: geteuid(), passesOtherUsers: true
            ) { outcome.set($0) },
            "the request was granted at once: it asked nobody")
        _ = waiting.ifUnsettled {
            watch.watch(
                number, waiting, underKernelLock: false, locksOthersOut: false, changesNames: false, passesLeases: true,
                uid: geteuid(), item: nil)
        }
        return (outcome, started)
    }

    /// A program's open whose holder, another program, sleeps reading what only the opener's
    /// process can send it (fstests' generic/571: a client between two commands of its server,
    /// the server opening the file the client keeps open): neither can go on until the break
    /// time lets the open in, so it goes ahead at once, as it would then, passing the holder
    /// without revoking it. (It waited the break time.)
    @Test(
        "X1 a holder asleep reading what only its waiter can send is gone past at once, as at the break time",
        .enabled(if: geteuid() == 0, "looks at every process's descriptors"))
    func aHolderWaitingForItsWaiterIsGonePastAtOnce() throws {
        let talk = try InputWaitTests.Conversation()
        let domain = CoordinationDomain()
        let watch = WaitWatch(settleTime: nil, breakTime: .seconds(30), lockTime: .milliseconds(300)) { _, _ in nil }
        let held = try #require(
            Claim.grantedAtOnce(in: domain, identity: .process(talk.reader), intents: [.read(item)]))
        #expect(eventually(.seconds(5)) { InputWait.sources(of: talk.reader) != nil }, "the reader sleeps reading")
        let (outcome, started) = try openRequest([.write(item)], by: talk.process, in: domain, watch: watch, number: 1)
        _ = eventually(.seconds(5)) { outcome.value != nil }
        let took = ContinuousClock.now - started
        watch.forget(1)
        let claim = try #require(try outcome.value?.get(), "granted")
        #expect(took >= WaitWatch.inputWaitLook && took < .seconds(2), "at once, not at the break time: \(took)")
        #expect(watch.leaseBreaks.load(ordering: .relaxed) == 1 && watch.holdsRevoked.load(ordering: .relaxed) == 0)
        claim.end(outcomes: [unchanged], in: domain)
        held.end(outcomes: [unchanged], in: domain)
        #expect(domain.engine.snapshot().isIdle)
    }

    /// The same, with a bystander holding the server's end of the connection too: the holder
    /// might hear from it and close its file first, so the open waits the break time. Nor is a
    /// wait that would end at the wait timeout, before any break, cut short.
    @Test(
        "X1 a holder that another process could wake is waited for until the break time",
        .enabled(if: geteuid() == 0, "looks at every process's descriptors"))
    func aHolderAnotherProcessCouldWakeIsWaitedForUntilTheBreakTime() throws {
        let domain = CoordinationDomain()
        let overheard = try InputWaitTests.Conversation(bystander: true)
        let watch = WaitWatch(settleTime: nil, breakTime: .seconds(1), lockTime: .milliseconds(300)) { _, _ in nil }
        let held = try #require(
            Claim.grantedAtOnce(in: domain, identity: .process(overheard.reader), intents: [.read(item)]))
        #expect(eventually(.seconds(5)) { InputWait.sources(of: overheard.reader) != nil }, "the reader sleeps reading")
        let (outcome, started) = try openRequest(
            [.write(item)], by: overheard.process, in: domain, watch: watch, number: 1)
        _ = eventually(.seconds(5)) { outcome.value != nil }
        let took = ContinuousClock.now - started
        watch.forget(1)
        let claim = try #require(try outcome.value?.get(), "granted at the break time")
        #expect(took >= .milliseconds(900) && took < .seconds(3), "the break time: \(took)")
        claim.end(outcomes: [unchanged], in: domain)
        held.end(outcomes: [unchanged], in: domain)

        let talk = try InputWaitTests.Conversation()
        let timedOut = WaitWatch(
            settleTime: nil, breakTime: .seconds(30), lockTime: .milliseconds(300), waitTimeout: .seconds(1)
        ) { _, _ in nil }
        let holding = try #require(
            Claim.grantedAtOnce(in: domain, identity: .process(talk.reader), intents: [.read(item)]))
        #expect(eventually(.seconds(5)) { InputWait.sources(of: talk.reader) != nil }, "the reader sleeps reading")
        let (failed, _) = try openRequest(
            [.write(item)], by: talk.process, in: domain, watch: timedOut, number: 2, timeout: .seconds(1))
        _ = eventually(.seconds(5)) { failed.value != nil }
        timedOut.forget(2)
        var failure: AccessFailure?
        if case .failure(let error)? = failed.value { failure = error }
        #expect(Self.isTimedOut(failure), "its wait timeout, which comes before the break time")
        #expect(timedOut.leaseBreaks.load(ordering: .relaxed) == 0)
        holding.end(outcomes: [unchanged], in: domain)
        #expect(domain.engine.snapshot().isIdle)
    }

    /// Another user's presenter that opens the item as its own work before it answers keeps the
    /// access waiting for that work at most the break time, from the access's start: then the
    /// work is revoked and the access goes ahead. (It waited until the work ended.)
    @Test(.enabled(if: geteuid() == 0, "runs a process as another user (nobody)"))
    func anotherUsersPresentersOwnWorkIsPassedAtTheBreakTimeAndRevoked() throws {
        let theirs = try Sleeper(asNobody: true)
        let domain = CoordinationDomain()
        let watch = WaitWatch(settleTime: nil, breakTime: .seconds(1), lockTime: .milliseconds(300)) { _, _ in nil }
        let presenter = WorkingPresenter(owner: .client(process: theirs.pid, number: 1), path: item, domain: domain)
        domain.register(presenter, key: ObjectIdentifier(presenter), linked: false)
        let (outcome, started) = try openRequest([.write(item)], in: domain, watch: watch, number: 1)
        _ = eventually(.seconds(5)) { outcome.value != nil }
        let took = ContinuousClock.now - started
        watch.forget(1)
        let claim = try #require(try outcome.value?.get(), "granted")
        #expect(presenter.workGrant != nil, "the presenter did its work first")
        #expect(took >= .milliseconds(900) && took < .seconds(3), "the break time: \(took)")
        #expect(watch.leaseBreaks.load(ordering: .relaxed) == 1 && watch.holdsRevoked.load(ordering: .relaxed) == 1)
        claim.end(outcomes: [unchanged], in: domain)
        presenter.endWork()
        domain.unregister(key: ObjectIdentifier(presenter))
        #expect(domain.engine.snapshot().isIdle)
    }

    /// The same presenter of the access's own user: its work is waited for until it ends, past
    /// the break time (within one user a coordinated access waits for its presenters' work, C21).
    @Test func aPresentersOwnWorkOfTheSameUserIsWaitedForUntilItEnds() throws {
        let ours = try Sleeper(asNobody: false)
        let domain = CoordinationDomain()
        let watch = WaitWatch(settleTime: nil, breakTime: .milliseconds(500), lockTime: .milliseconds(300)) { _, _ in
            nil
        }
        let presenter = WorkingPresenter(owner: .client(process: ours.pid, number: 1), path: item, domain: domain)
        domain.register(presenter, key: ObjectIdentifier(presenter), linked: false)
        let (outcome, _) = try openRequest([.write(item)], in: domain, watch: watch, number: 1, timeout: .seconds(1))
        Thread.sleep(forTimeInterval: 1.5)
        #expect(
            outcome.value == nil && presenter.workGrant != nil,
            "past the break time and the wait timeout, it waits for the work")
        presenter.endWork()
        _ = eventually(.seconds(2)) { outcome.value != nil }
        watch.forget(1)
        let claim = try #require(try outcome.value?.get(), "granted once the work ended")
        #expect(watch.leaseBreaks.load(ordering: .relaxed) == 0 && watch.holdsRevoked.load(ordering: .relaxed) == 0)
        claim.end(outcomes: [unchanged], in: domain)
        domain.unregister(key: ObjectIdentifier(presenter))
        #expect(domain.engine.snapshot().isIdle)
    }

    /// A request of process `caller` (of this test's user) for `intents`, watched as a mount's
    /// name change under a directory lock: one other users may need (`othersNeedLock`), or not.
    /// Why it failed (nil: granted, and ended here), and how long it took.
    func nameChange(
        of caller: Int32, _ intents: [Intent], in domain: CoordinationDomain, watch: WaitWatch, number: UInt,
        othersNeedLock: Bool = true, timeout: Duration = .seconds(10)
    ) throws -> (failure: AccessFailure?, took: Duration) {
        let outcome = Outcome()
        let started = ContinuousClock.now
        let waiting = try #require(
            Claim.begin(
                in: domain, identity: .process(caller), intents: intents, timeout: timeout,
                user: geteuid(), passesOtherUsers: true
            ) { outcome.set($0) },
            "the request was granted at once: nothing held it")
        _ = waiting.ifUnsettled {
            watch.watch(
                number, waiting, underKernelLock: true, locksOthersOut: true, othersNeedLock: othersNeedLock,
                changesNames: true, passesLeases: true, uid: geteuid(), item: nil)
        }
        #expect(eventually(timeout + .seconds(5)) { outcome.value != nil }, "the request never ended")
        let took = ContinuousClock.now - started
        watch.forget(number)
        switch outcome.value {
        case .success(let claim)?:
            claim.end(outcomes: intents.map { _ in unchanged }, in: domain)
            return (nil, took)
        case .failure(let failure)?:
            return (failure, took)
        case nil:
            return (nil, took)
        }
    }

    /// Whether a request failed as at its wait timeout: EBUSY through the mount.
    static func isTimedOut(_ failure: AccessFailure?) -> Bool {
        if case .refused(.timedOut, _)? = failure { return true }
        return false
    }

    /// A name change that waits for its own user's hold under a directory lock other users may
    /// need is refused (EBUSY) at the lock time, and the hold holds on, untold: the change may
    /// not go past its own user's hold, nor keep everyone else out of the directory for longer.
    /// The user's next such request for the same holder is refused at once, from its process or
    /// another (a user starting an `rm` after another got the lock time again each time, and
    /// kept the directory locked). Where nobody else needs the lock it waits as ever. (It waited
    /// until its wait timeout whoever else needed the lock.)
    @Test func aWaitForItsOwnUserUnderALockOthersNeedIsRefusedAtTheLockTime() throws {
        let holder = try Sleeper(asNobody: false)
        let anotherOfOurs = try Sleeper(asNobody: false)
        let domain = CoordinationDomain()
        let watch = WaitWatch(settleTime: nil, breakTime: .seconds(30), lockTime: .milliseconds(300)) { _, _ in nil }
        let told = EventLog()
        watch.tellBroken = { _, grants, _ in told.add(grants.map(\.description).sorted().joined(separator: ",")) }
        let held = try #require(
            Claim.grantedAtOnce(
                in: domain, identity: .client(process: holder.pid, number: 1), intents: [.write(item)]))
        let first = try nameChange(of: getpid(), [.write(item)], in: domain, watch: watch, number: 1)
        #expect(Self.isTimedOut(first.failure), "refused as at the wait timeout: \(String(describing: first.failure))")
        #expect(first.took >= .milliseconds(250) && first.took < .seconds(3), "at the lock time: \(first.took)")
        let again = try nameChange(of: getpid(), [.write(item)], in: domain, watch: watch, number: 2)
        #expect(
            Self.isTimedOut(again.failure) && again.took < .milliseconds(200),
            "at once, refused for the same holder a moment ago: \(again.took)")
        let elsewhere = try nameChange(of: anotherOfOurs.pid, [.write(item)], in: domain, watch: watch, number: 3)
        #expect(
            Self.isTimedOut(elsewhere.failure) && elsewhere.took < .milliseconds(200),
            "another process of the user, refused at once too: \(elsewhere.took)")
        #expect(watch.lockTimeRefusals.load(ordering: .relaxed) == 3)
        #expect(
            watch.lockTimeBreaks.load(ordering: .relaxed) == 0 && watch.leaseBreaks.load(ordering: .relaxed) == 0
                && told.events.isEmpty, "nobody was passed or told")
        #expect(held.grantID != nil && !domain.engine.snapshot().isIdle, "the hold holds on")
        // Nobody else needs the lock: it waits for its own user as ever, until its timeout.
        let alone = try nameChange(
            of: getpid(), [.write(item)], in: domain, watch: watch, number: 4, othersNeedLock: false,
            timeout: .seconds(1))
        #expect(Self.isTimedOut(alone.failure) && alone.took >= .milliseconds(900), "its wait timeout: \(alone.took)")
        #expect(watch.lockTimeRefusals.load(ordering: .relaxed) == 3)
        held.end(outcomes: [unchanged], in: domain)
        #expect(domain.engine.snapshot().isIdle, "the refused requests left nothing behind")
    }

    // @unchecked Sendable: `pending` is behind `lock`.
    /// A presenter of `path` for `owner` that answers nothing until `answerAll` (one still
    /// working, or gone quiet).
    final class SilentPresenter: Presenter, @unchecked Sendable {
        let owner: CoordinatorIdentity
        let path: ItemPath
        private let lock = NSLock()
        private var pending: [@Sendable (Error?, (@Sendable () -> Void)?) -> Void] = []
        private var count = 0

        init(owner: CoordinatorIdentity, path: ItemPath) {
            self.owner = owner
            self.path = path
        }

        func presentedPaths(_ locator: ItemLocator) -> (item: ItemPath?, primary: ItemPath?) { (path, nil) }
        var answeredRequests: PresenterRequest.Kinds { .all }

        func asked(
            _ request: PresenterRequest, origin: AccessOrigin, progress: PresenterProgress,
            completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void
        ) {
            lock.withLock {
                count += 1
                pending.append(completion)
            }
        }

        func told(
            _ notifications: [PresenterNotification], origin: AccessOrigin, presentsPackage: Bool,
            moved: @escaping @Sendable () -> Void
        ) {}

        func reacquire(_ reacquirer: @escaping @Sendable () -> Void) { reacquirer() }

        var requests: Int { lock.withLock { count } }

        func answerAll() {
            let answers = lock.withLock { () -> [@Sendable (Error?, (@Sendable () -> Void)?) -> Void] in
                defer { pending = [] }; return pending
            }
            for answer in answers { answer(nil, nil) }
        }
    }

    /// A presenter of its own user that has not answered keeps such a name change waiting the
    /// lock time at most: the change is refused (EBUSY), its answer no longer waited for, and a
    /// late answer changes nothing. (It waited the presenter timeout, 10 s here; a presenter
    /// saying it is still working, up to the break time.)
    @Test func anUnansweredPresenterOfItsOwnUserUnderALockOthersNeedIsRefusedAtTheLockTime() throws {
        let ours = try Sleeper(asNobody: false)
        let domain = CoordinationDomain()
        let watch = WaitWatch(settleTime: nil, breakTime: .seconds(30), lockTime: .milliseconds(300)) { _, _ in nil }
        let presenter = SilentPresenter(owner: .client(process: ours.pid, number: 1), path: item)
        domain.register(presenter, key: ObjectIdentifier(presenter), linked: false)
        let refused = try nameChange(of: getpid(), [.write(item)], in: domain, watch: watch, number: 1)
        #expect(presenter.requests >= 1, "the presenter was asked")
        #expect(Self.isTimedOut(refused.failure), "refused: \(String(describing: refused.failure))")
        #expect(refused.took >= .milliseconds(250) && refused.took < .seconds(3), "at the lock time: \(refused.took)")
        #expect(watch.lockTimeRefusals.load(ordering: .relaxed) == 1)
        presenter.answerAll()
        domain.unregister(key: ObjectIdentifier(presenter))
        #expect(domain.engine.snapshot().isIdle)
    }

    /// Who else may need a directory's lock: anyone its mode lets list or search it, its group
    /// or others, and its owner when that is not the caller. Root, who may enter any, aside.
    @Test func othersMayListOrSearchADirectoryByItsModeAndOwner() {
        func directory(_ mode: mode_t, owner: uid_t) -> stat {
            var info = stat()
            info.st_mode = S_IFDIR | mode
            info.st_uid = owner
            return info
        }
        let cases: [(mode: mode_t, owner: uid_t, caller: uid_t, others: Bool)] = [
            (0o700, 1000, 1000, false), (0o755, 1000, 1000, true), (0o711, 1000, 1000, true),
            (0o704, 1000, 1000, true), (0o750, 1000, 1000, true), (0o770, 1000, 1000, true),
            (0o700, 1000, 1001, true), (0o1777, 0, 1000, true), (0o700, 0, 0, false), (0o2700, 0, 0, false)
        ]
        for (mode, owner, caller, others) in cases {
            #expect(
                WaitWatch.othersMayListOrSearch(directory(mode, owner: owner), besides: caller) == others,
                "mode \(String(mode, radix: 8)), owner \(owner), caller \(caller)")
        }
    }

    /// A file whose times a test sets: changed just now, until it has settled.
    final class File: Sendable {
        let settled = Atomic<Bool>(false)

        var state: WaitWatch.FileState {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            let changed = settled.load(ordering: .relaxed) ? timespec(tv_sec: 0, tv_nsec: 0) : now
            return WaitWatch.FileState(modified: changed, changed: changed)
        }
    }

    /// Another host's read waiting here (a recall's, `watchAnotherHost`) goes past a program's
    /// open whose file has settled, as a program's read here does, holding nothing; and by no
    /// other rule: this host's break time and lock time are not its own (the recall has the
    /// cluster's).
    @Test func anotherHostsReadGoesPastASettledFileAndByNoOtherRule() throws {
        let file = File()
        let domain = CoordinationDomain()
        let watch = WaitWatch(
            settleTime: .milliseconds(300), breakTime: .milliseconds(200), lockTime: .milliseconds(200)
        ) { _, _ in file.state }
        let node = Inode(
            id: NodeID(2), device: 1, number: 2, handle: nil, isDirectory: false, parent: NodeID(1), name: "f")
        let writer = try #require(
            Claim.grantedAtOnce(in: domain, identity: .process(getpid()), intents: [.write(item, .sharingWriters)]))
        let outcome = Outcome()
        let waiting = try #require(
            Claim.begin(in: domain, identity: .host("B"), intents: [.read(item, .throughOpenFile)], timeout: nil) {
                outcome.set($0)
            }, "a reader waits for a writer in place")
        var number: UInt = 0
        _ = waiting.ifUnsettled { number = watch.watchAnotherHost(waiting, item: (node, "")) }
        #expect(!eventually(.milliseconds(800)) { outcome.value != nil }, "past the break and lock times, it waits")
        file.settled.store(true, ordering: .relaxed)
        #expect(eventually(.seconds(3)) { outcome.value != nil }, "it goes past the settled file")
        watch.forget(number)
        guard case .success(let claim)? = outcome.value else {
            Issue.record("refused: \(String(describing: outcome.value))")
            return
        }
        #expect(waiting.wentAheadHoldingNothing && watch.leaseBreaks.load(ordering: .relaxed) == 1)
        #expect(
            domain.engine.snapshot().holders.contains { $0.identity == .process(getpid()) }, "the writer still holds")
        claim.end(outcome: unchanged, in: domain)
        writer.end(outcome: unchanged, in: domain)
        #expect(domain.engine.snapshot().isIdle)
    }
}
