import CoordinationRuntime
import LinuxSystem
import Synchronization

/// A wait the kernel's interrupt ends: a claim's, or a delegation's (`DelegationWait`).
protocol CancellableWait: AnyObject, Sendable {
    func cancel()
}

extension CoordinatedAccess: CancellableWait {
    func cancel() { cancel(because: .cancelled) }
}

/// The requests waiting for coordination, by the number their FUSE interrupt names them with,
/// and how many of those that gave up this second were logged.
final class WaitingRequests: Sendable {
    private let waiting = Mutex<(accesses: [UInt: any CancellableWait], interruptedEarly: Set<UInt>)>(([:], []))
    private let nextNumber = Atomic<UInt>(1)
    private let givingUpLogged = LogAllowance()

    /// A number for a request about to wait.
    func number() -> UInt { nextNumber.wrappingAdd(1, ordering: .relaxed).oldValue }

    /// Records the access request `number` waits in; whether the kernel interrupted the request
    /// before (its interrupt came before the access was known).
    func waits(_ number: UInt, in access: any CancellableWait) -> Bool {
        waiting.withLock { state -> Bool in
            state.accesses[number] = access
            return state.interruptedEarly.remove(number) != nil
        }
    }

    /// Request `number` waits no longer.
    func ended(_ number: UInt) {
        waiting.withLock { _ = $0.accesses.removeValue(forKey: number) }
    }

    /// The kernel interrupted request `number`: its wait is cancelled, or will be as soon as it
    /// is recorded.
    func interrupt(_ number: UInt) {
        let access = waiting.withLock { state -> (any CancellableWait)? in
            if let access = state.accesses[number] { return access }
            state.interruptedEarly.insert(number)
            return nil
        }
        access?.cancel()
    }

    /// Whether one more request that gave up may be logged: at most ten a second, so waiters
    /// giving up together, or a user who makes them, do not flood the log.
    func mayLogGivingUp() -> Bool { givingUpLogged.allows() }
}
