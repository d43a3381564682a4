@testable import CoordFSMount
import CoordinationRuntime
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The locks a host of a shared store serves: requests that wait hold no thread and are answered
/// by whoever ends their wait (an unlock, a close, the cluster's delegation, an interrupt, the
/// kernel's request timeout), each exactly once; and the cluster's part, through a stand-in for
/// the host's lock delegations.
@Suite struct FileLocksTests {
    static let file = NodeID(42)
    static let a = LockOwner(0xA), b = LockOwner(0xB)

    /// The answers given, by request number.
    final class Answers: Sendable {
        private let given = Mutex<[UInt: [LockAnswer]]>([:])
        private let registered = Mutex<[UInt]>([])

        func answer(_ number: UInt) -> @Sendable (LockAnswer) -> Void {
            { answer in self.given.withLock { $0[number, default: []].append(answer) } }
        }

        /// Notes that request `number` began to wait; `interrupted`: it is taken as interrupted
        /// then (as by an interrupt that came first).
        func whenWaiting(_ number: UInt, interrupted: Bool = false) -> @Sendable () -> Bool {
            {
                self.registered.withLock { $0.append(number) }; return interrupted
            }
        }

        /// Request `number`'s answer, nil while it has none; a second answer fails the test.
        subscript(number: UInt) -> LockAnswer? {
            let answers = self.given.withLock { $0[number] ?? [] }
            #expect(answers.count <= 1, "request \(number) answered twice: \(answers)")
            return answers.first
        }

        var waitsRegistered: [UInt] { registered.withLock { $0 } }
    }

    /// The host's lock delegations as the test sets them.
    final class Host: HostLocks {
        struct Ask: Sendable {
            let path: String
            let exclusive: Bool
            let waits: Bool
            let completion: @Sendable (HostDelegationOutcome) -> Void
        }

        private struct State {
            /// "path r" or "path w": held and not recalled.
            var held: Set<String> = []
            var holderCovered = false
            var recallWaits = false
            var otherExclusive: Bool? = nil
            var asks: [Ask] = []
            var stopped = 0
        }

        private let state = Mutex(State())

        func hold(_ path: String, exclusive: Bool) {
            state.withLock { _ = $0.held.insert(path + (exclusive ? " w" : " r")) }
        }
        func recall() { state.withLock { $0.held = [] } }
        func set(holderCovered: Bool = false, recallWaits: Bool = false, otherExclusive: Bool? = nil) {
            state.withLock {
                ($0.holderCovered, $0.recallWaits, $0.otherExclusive) = (holderCovered, recallWaits, otherExclusive)
            }
        }
        var asks: [Ask] { state.withLock { $0.asks } }
        var stopped: Int { state.withLock { $0.stopped } }

        func covers(_ path: String, exclusive: Bool) -> Bool {
            state.withLock { $0.held.contains(path + " w") || (!exclusive && $0.held.contains(path + " r")) }
        }

        func coversHolder(_ path: String, exclusive: Bool) -> Bool { state.withLock { $0.holderCovered } }

        func recallWaits(for path: String, holding exclusive: Bool) -> Bool { state.withLock { $0.recallWaits } }

        func acquire(
            _ path: String, exclusive: Bool, waits: Bool,
            completion: @escaping @Sendable (HostDelegationOutcome) -> Void
        ) -> @Sendable () -> Void {
            state.withLock {
                $0.asks.append(Ask(path: path, exclusive: exclusive, waits: waits, completion: completion))
            }
            return { self.state.withLock { $0.stopped += 1 } }
        }

        func otherHostHolds(_ path: String, exclusive: Bool) -> Bool? { state.withLock { $0.otherExclusive } }
    }

    static func posix(
        _ owner: LockOwner, _ type: LockType, _ start: Int64, _ end: Int64, handle: UInt64 = 1
    ) -> LockRequest {
        LockRequest(
            node: file, handle: handle, kind: .posix, owner: owner, type: type, range: LockRange(start, end), pid: 1,
            path: type == .unlock ? "" : "dir/file")
    }

    static func flock(_ owner: LockOwner, _ type: LockType) -> LockRequest {
        LockRequest(
            node: file, handle: owner.rawValue, kind: .flock, owner: owner, type: type, range: .wholeFile, pid: 0,
            path: type == .unlock ? "" : "dir/file")
    }

    static func set(
        _ locks: FileLocks, _ answers: Answers, _ number: UInt, _ request: LockRequest, waits: Bool = true,
        interruptedFirst: Bool = false
    ) {
        locks.set(
            request, number: number, waits: waits,
            whenWaiting: answers.whenWaiting(number, interrupted: interruptedFirst),
            answer: answers.answer(number))
    }

    // MARK: This host's own locks

    @Test func aBlockingRequestWaitsForTheLockInItsWayAndIsGrantedWhenItGoes() {
        let locks = FileLocks(host: nil), answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .exclusive, 0, 9))
        #expect(answers[1] == .granted && answers.waitsRegistered.isEmpty, "nothing in its way: no wait")
        Self.set(locks, answers, 2, Self.posix(Self.b, .exclusive, 5, 5))
        #expect(answers[2] == nil && answers.waitsRegistered == [2])
        Self.set(locks, answers, 3, Self.posix(Self.a, .unlock, 0, 4))
        #expect(answers[3] == .granted && answers[2] == nil, "what is left of A's lock is still in the way")
        Self.set(locks, answers, 4, Self.posix(Self.a, .unlock, 0, LockRange.endOfFile))
        #expect(answers[4] == .granted && answers[2] == .granted)
        #expect(locks.locks(on: Self.file).map { $0.owner } == [Self.b])
    }

    @Test func aRequestThatDoesNotWaitFailsWithEAGAIN() {
        let locks = FileLocks(host: nil), answers = Answers()
        Self.set(locks, answers, 1, Self.flock(Self.a, .shared))
        Self.set(locks, answers, 2, Self.flock(Self.b, .exclusive), waits: false)
        #expect(answers[2] == .wouldBlock && answers[2]?.errno == EAGAIN && answers.waitsRegistered.isEmpty)
        Self.set(locks, answers, 3, Self.flock(Self.b, .shared), waits: false)
        #expect(answers[3] == .granted)
    }

    @Test func aCloseByTheHolderLetsTheWaiterIn() {
        let locks = FileLocks(host: nil), answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .shared, 0, 0))
        Self.set(locks, answers, 2, Self.posix(Self.a, .shared, 10, 10, handle: 2))
        Self.set(locks, answers, 3, Self.posix(Self.b, .exclusive, 0, 10))
        #expect(answers[3] == nil)
        // Any close of the file by A's process drops all its POSIX locks of it.
        locks.flush(Self.file, owner: Self.b)
        #expect(answers[3] == nil, "another process's close drops nothing of A's")
        locks.flush(Self.file, owner: Self.a)
        #expect(answers[3] == .granted)
    }

    @Test func aFlockLockGoesWithItsOpensRelease() {
        let locks = FileLocks(host: nil), answers = Answers()
        Self.set(locks, answers, 1, Self.flock(Self.a, .exclusive))
        Self.set(locks, answers, 2, Self.flock(Self.b, .shared))
        Self.set(locks, answers, 3, Self.posix(Self.b, .exclusive, 0, 0))
        #expect(answers[2] == nil && answers[3] == .granted, "a POSIX lock is not in a flock's way, nor a flock in its")
        locks.flush(Self.file, owner: Self.a)
        #expect(answers[2] == nil, "a FLUSH leaves flock locks")
        locks.release(Self.a.rawValue, of: Self.file, flockOwner: Self.a)
        #expect(answers[2] == .granted)
    }

    @Test func anInterruptEndsTheWaitWithEINTRAndOnlyOnce() {
        let locks = FileLocks(host: nil), answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .exclusive, 0, 0))
        Self.set(locks, answers, 2, Self.posix(Self.b, .shared, 0, 0))
        locks.cancel(2)
        #expect(answers[2] == .interrupted && answers[2]?.errno == EINTR)
        locks.cancel(2)
        Self.set(locks, answers, 3, Self.posix(Self.a, .unlock, 0, 0))
        #expect(answers[2] == .interrupted, "not granted after it was answered")
        #expect(locks.locks(on: Self.file).isEmpty)
    }

    @Test func anInterruptThatCameFirstEndsTheWaitAsItBegins() {
        let locks = FileLocks(host: nil), answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .exclusive, 0, 0))
        Self.set(locks, answers, 2, Self.posix(Self.b, .exclusive, 0, 0), interruptedFirst: true)
        #expect(answers[2] == .interrupted)
        Self.set(locks, answers, 3, Self.posix(Self.a, .unlock, 0, 0))
        #expect(locks.locks(on: Self.file).isEmpty, "nothing left queued")
    }

    @Test func anInterruptThatReachedTheMountBeforeItsRequestEndsTheWaitAsItBegins() {
        let locks = FileLocks(host: nil), answers = Answers(), later = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .exclusive, 0, 0))
        // libfuse calls the interrupt function at once when the kernel interrupted the request
        // before the mount registered it: the number is not waiting yet.
        locks.cancel(2)
        Self.set(locks, answers, 2, Self.posix(Self.b, .exclusive, 0, 0))
        #expect(answers[2] == .interrupted && answers[2]?.errno == EINTR)
        // One granted at once is granted, and its interrupt is forgotten with it.
        locks.cancel(3)
        Self.set(locks, answers, 3, Self.posix(Self.b, .exclusive, 7, 7))
        #expect(answers[3] == .granted)
        Self.set(locks, later, 3, Self.posix(Self.b, .exclusive, 0, 0))
        #expect(later[3] == nil, "a later wait under the same number is not interrupted")
        Self.set(locks, answers, 4, Self.posix(Self.a, .unlock, 0, 0))
        #expect(later[3] == .granted)
    }

    @Test func aWaitThatWouldCloseACycleFailsWithEDEADLK() {
        let locks = FileLocks(host: nil), answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .exclusive, 0, 0))
        Self.set(locks, answers, 2, Self.posix(Self.b, .exclusive, 1, 1))
        Self.set(locks, answers, 3, Self.posix(Self.b, .exclusive, 0, 0))
        Self.set(locks, answers, 4, Self.posix(Self.a, .exclusive, 1, 1))
        #expect(answers[3] == nil && answers[4] == .deadlock && answers[4]?.errno == EDEADLK)
    }

    @Test func theKernelsRequestTimeoutEndsAWaitWithENOLCK() async throws {
        let locks = FileLocks(host: nil, waitLimit: .milliseconds(50)), answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .exclusive, 0, 0))
        Self.set(locks, answers, 2, Self.posix(Self.b, .exclusive, 0, 0))
        for _ in 0..<200 where answers[2] == nil { try await Task.sleep(for: .milliseconds(10)) }
        #expect(answers[2] == .timedOut && answers[2]?.errno == ENOLCK)
        #expect(answers[1] == .granted, "a request answered at once is not timed out later")
    }

    // MARK: Across hosts

    @Test func aLockOutsideTheHostsDelegationWaitsForIt() throws {
        let host = Host(), locks = FileLocks(host: host), answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .exclusive, 0, 0))
        let ask = try #require(host.asks.first)
        #expect(
            answers[1] == nil && ask.path == "dir/file" && ask.exclusive && ask.waits && answers.waitsRegistered == [1])
        #expect(locks.holders().isEmpty, "nothing granted before the delegation")
        host.hold("dir/file", exclusive: true)
        ask.completion(.granted())
        #expect(answers[1] == .granted)
        #expect(locks.holders().map { $0.path } == ["dir/file"] && locks.holders().map { $0.exclusive } == [true])
        // Covered now: the next lock is granted in memory.
        Self.set(locks, answers, 2, Self.posix(Self.a, .shared, 5, 5))
        #expect(answers[2] == .granted && host.asks.count == 1)
        // An unlock asks nobody.
        host.recall()
        Self.set(locks, answers, 3, Self.posix(Self.a, .unlock, 0, LockRange.endOfFile))
        #expect(answers[3] == .granted && host.asks.count == 1 && locks.holders().isEmpty)
    }

    @Test func aDelegationRecalledAgainAsSoonAsGrantedIsAskedForAgain() throws {
        let host = Host(), locks = FileLocks(host: host), answers = Answers()
        Self.set(locks, answers, 1, Self.flock(Self.a, .shared))
        try #require(host.asks.count == 1)
        host.asks[0].completion(.granted())  // granted, but recalled before the request took it
        #expect(answers[1] == nil && host.asks.count == 2 && !host.asks[1].exclusive)
        host.hold("dir/file", exclusive: false)
        host.asks[1].completion(.granted())
        #expect(answers[1] == .granted)
        host.asks[0].completion(.granted())  // a late answer of an ask that was over
        #expect(answers[1] == .granted && host.asks.count == 2)
    }

    @Test func anotherHostsProgramsInTheWayFailARequestThatDoesNotWait() throws {
        let host = Host(), locks = FileLocks(host: host), answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .shared, 0, 0), waits: false)
        let ask = try #require(host.asks.first)
        #expect(!ask.waits)
        ask.completion(.wouldWait)
        #expect(answers[1] == .wouldBlock)
        // Granted and recalled again each time: it gives up after a few asks.
        Self.set(locks, answers, 2, Self.posix(Self.a, .shared, 0, 0), waits: false)
        for _ in 0..<FileLocks.askingAtOnce { host.asks.last!.completion(.granted()) }
        #expect(answers[2] == .wouldBlock && host.asks.count == 1 + FileLocks.askingAtOnce)
    }

    @Test func aHostThatCannotAskTheClusterAnswersENOLCK() throws {
        let host = Host(), locks = FileLocks(host: host), answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .exclusive, 0, 0))
        try #require(host.asks.count == 1)
        host.asks[0].completion(.refused("this host's cluster lease is lost"))
        #expect(answers[1] == .refused("this host's cluster lease is lost") && answers[1]?.errno == ENOLCK)
    }

    @Test func anInterruptStopsTheAskForTheDelegation() throws {
        let host = Host(), locks = FileLocks(host: host), answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.a, .exclusive, 0, 0))
        try #require(host.asks.count == 1)
        locks.cancel(1)
        #expect(answers[1] == .interrupted && host.stopped == 1)
        host.hold("dir/file", exclusive: true)
        host.asks[0].completion(.granted())
        #expect(answers[1] == .interrupted && locks.holders().isEmpty, "a grant after the interrupt takes nothing")
    }

    @Test func aHolderGoesOnUnderARecalledDelegationThatWaitsForIt() throws {
        let host = Host(), locks = FileLocks(host: host), answers = Answers()
        host.hold("dir/file", exclusive: true)
        Self.set(locks, answers, 1, Self.posix(Self.a, .exclusive, 0, 0))
        #expect(answers[1] == .granted)
        // Another host recalls it: the delegation is kept for A, whose next locks go on under it.
        host.recall()
        host.set(holderCovered: true)
        Self.set(locks, answers, 2, Self.posix(Self.a, .exclusive, 1, 1))
        #expect(answers[2] == .granted && host.asks.isEmpty)
        // Another process here has no locks of the file: it waits for a delegation of its own.
        Self.set(locks, answers, 3, Self.posix(Self.b, .shared, 10, 10))
        #expect(answers[3] == nil && host.asks.count == 1)
    }

    @Test func aHolderThatWouldQueueBehindTheHostWaitingForItFailsWithEDEADLK() {
        let host = Host(), locks = FileLocks(host: host), answers = Answers()
        host.hold("dir/file", exclusive: false)
        Self.set(locks, answers, 1, Self.posix(Self.a, .shared, 0, 0))
        // Another host wants the file exclusively; A's shared lock is what it waits for.
        host.recall()
        host.set(holderCovered: false, recallWaits: true)
        Self.set(locks, answers, 2, Self.posix(Self.a, .exclusive, 0, 0))
        #expect(answers[2] == .deadlock && host.asks.isEmpty)
        Self.set(locks, answers, 3, Self.posix(Self.a, .exclusive, 0, 0), waits: false)
        #expect(answers[3] == .wouldBlock && host.asks.isEmpty)
        #expect(locks.locks(on: Self.file).map { $0.exclusive } == [false], "its shared lock is as it was")
    }

    @Test func getlkReportsAnotherHostsLockAsOneOfTheWholeFile() throws {
        let host = Host(), locks = FileLocks(host: host)
        let found = Mutex<[LockTest]>([])
        host.set(otherExclusive: true)
        locks.test(Self.posix(Self.a, .shared, 0, 0)) { test in found.withLock { $0.append(test) } }
        let ask = try #require(host.asks.first)
        #expect(!ask.waits && !ask.exclusive)
        ask.completion(.wouldWait)
        #expect(found.withLock { $0 } == [.otherHost(exclusive: true)])
        // Granted (the other host held it idle): the locks here answer.
        host.hold("dir/file", exclusive: true)
        let answers = Answers()
        Self.set(locks, answers, 1, Self.posix(Self.b, .exclusive, 3, 7))
        locks.test(Self.posix(Self.a, .shared, 0, 4)) { test in found.withLock { $0.append(test) } }
        locks.test(Self.posix(Self.a, .shared, 8, 9)) { test in found.withLock { $0.append(test) } }
        let held = FileLock(kind: .posix, owner: Self.b, exclusive: true, range: LockRange(3, 7), pid: 1)
        #expect(found.withLock { $0 } == [.otherHost(exclusive: true), .held(held), .free])
    }
}
