@testable import CoordinationCluster
import Testing

/// How a recall waits for news (`ChangeSignal`): woken by the next change, never missing one
/// signalled between its look and its wait, and leaving no waiter behind when its limit passes
/// or its task is cancelled. No etcd. (The limit guards a broken signal from hanging the run.)
@Suite(.timeLimit(.minutes(1)))
struct ChangeSignalTests {
    /// Waits until `signal` has `count` tasks waiting.
    static func waiting(_ count: Int, on signal: ChangeSignal) async {
        while signal.waiting != count { await Task.yield() }
    }

    @Test func aWaiterGoesOnAtTheNextChange() async {
        let signal = ChangeSignal()
        let seen = signal.changes
        let waiter = Task { await signal.wait(after: seen, atMost: .seconds(3600)) }
        await Self.waiting(1, on: signal)
        signal.signal()
        await waiter.value
        #expect(signal.changes != seen)
        #expect(signal.waiting == 0)
    }

    @Test func aChangeBetweenTheLookAndTheWaitIsNotMissed() async {
        let signal = ChangeSignal()
        let seen = signal.changes
        signal.signal()
        await signal.wait(after: seen, atMost: .seconds(3600))
        #expect(signal.waiting == 0)
    }

    @Test func everyWaiterGoesOnAtOneChange() async {
        let signal = ChangeSignal()
        let seen = signal.changes
        let waiters = (0..<3).map { _ in Task { await signal.wait(after: seen, atMost: .seconds(3600)) } }
        await Self.waiting(3, on: signal)
        signal.signal()
        for waiter in waiters { await waiter.value }
        #expect(signal.waiting == 0)
    }

    @Test func aCancelledWaiterGoesOnAndLeavesNothingBehind() async {
        let signal = ChangeSignal()
        let seen = signal.changes
        let waiter = Task { await signal.wait(after: seen, atMost: .seconds(3600)) }
        await Self.waiting(1, on: signal)
        waiter.cancel()
        await waiter.value
        #expect(signal.changes == seen, "nothing changed: the cancellation alone ended the wait")
        #expect(signal.waiting == 0)
    }

    @Test func aWaitEndsAtItsLimitWithoutAChange() async {
        let signal = ChangeSignal()
        let seen = signal.changes
        await signal.wait(after: seen, atMost: .milliseconds(1))
        #expect(signal.changes == seen)
        #expect(signal.waiting == 0)
    }
}
