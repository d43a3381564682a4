import Synchronization

/// Wakes the tasks that wait for something to change, instead of their looking again every few
/// milliseconds: a recall of this host's delegation waits so for its holders here, the answers
/// of the accesses it began here, and the other hosts' keys (`ClusterMember.giveBack`).
///
/// It counts the changes; a waiter reads the count before it looks at what it waits for, and
/// waits past that count: a change between its look and its wait is not missed.
final class ChangeSignal: Sendable {
    private struct State {
        var changes: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var lastWaiter: UInt64 = 0
    }

    private let state = Mutex(State())

    init() {}

    /// How many changes have been signalled: read before looking, and waited past (`wait`).
    var changes: UInt64 { state.withLock { $0.changes } }

    /// The tasks waiting now (for tests: none is left behind).
    var waiting: Int { state.withLock { $0.waiters.count } }

    /// Something changed: every task waiting goes on.
    func signal() {
        let woken = state.withLock { state in
            state.changes &+= 1
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in woken { waiter.resume() }
    }

    /// Returns once a change past `seen` (`changes` as read before looking) is signalled, at
    /// once if one was already; at the latest after `limit`, or once the task is cancelled.
    func wait(after seen: UInt64, atMost limit: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.wait(after: seen) }
            group.addTask { _ = try? await Task.sleep(for: limit) }
            _ = await group.next()
            group.cancelAll()
        }
    }

    /// Returns once a change past `seen` is signalled, or once the task is cancelled: its
    /// continuation is resumed either way, and never kept after.
    private func wait(after seen: UInt64) async {
        let id = state.withLock { state in
            state.lastWaiter &+= 1
            return state.lastWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Checked under the lock that `signal` and the cancellation take: neither is missed.
                let now = state.withLock { state -> Bool in
                    if state.changes != seen || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}
