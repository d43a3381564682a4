import Synchronization

/// Another host's access begun here (`SharedStore.beginAccess(forHost:)`): ended once, whether
/// it was granted yet or still waits.
package final class HostAccess: Sendable {
    private let state = Mutex<
        (claim: Claim?, waiting: CoordinatedAccess?, ender: (@Sendable (Claim) -> Void)?, ended: Bool)
    >((nil, nil, nil, false))

    init() {}

    /// Keeps the claim granted; false when the access has ended meanwhile.
    func granted(_ claim: Claim) -> Bool {
        state.withLock { state in
            if state.ended { return false }
            state.claim = claim
            return true
        }
    }

    func waiting(_ access: CoordinatedAccess, ender: @escaping @Sendable (Claim) -> Void) {
        state.withLock { state in
            state.waiting = access
            state.ender = ender
        }
    }

    package func end() {
        let (claim, waiting, ender) = state.withLock {
            state -> (Claim?, CoordinatedAccess?, (@Sendable (Claim) -> Void)?) in
            if state.ended { return (nil, nil, nil) }
            state.ended = true
            defer { state.claim = nil }
            return (state.claim, state.waiting, state.ender)
        }
        if let claim { ender?(claim) } else { waiting?.cancel() }
    }
}
