import Synchronization

/// Another host's access begun here (`SharedStore.beginAccess(forHost:)`,
/// `SharedStore.askPresenters(forHost:)`): what this host's coordination answers it so far, and
/// ended once, whether it was granted yet or still waits.
package final class HostAccess: Sendable {
    /// What this host's coordination answers the access, as it would its own program's.
    package enum Answer: Sendable, Equatable {
        /// Not yet: it waits for holders here, or for presenters' answers.
        case waiting
        /// Granted: presenters here answered, and no holder here is in its way.
        case granted
        /// Let past the holders here without their giving anything up (the settle rule): it
        /// holds nothing here.
        case passed
        /// Refused here (a presenter's refusal): the errno its program would get.
        case refused(errno: Int32)
    }

    private struct State {
        var claim: Claim?
        var waiting: CoordinatedAccess?
        var ender: (@Sendable (Claim) -> Void)?
        var ended = false
        var answer = Answer.waiting
        /// Stops the watch of its wait (`SharedStore`'s settle rule), while it waits.
        var unwatch: (@Sendable () -> Void)?
        /// Told when its answer changes (`observeAnswer`), until it ends.
        var answerChanged: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())

    init() {}

    package var answer: Answer { state.withLock { $0.answer } }

    /// Calls `changed` (outside the lock) when its answer changes from now on, until it ends:
    /// the recall that began it goes on at once once it is granted here, instead of finding
    /// out at its next look. One observer: a later one replaces it.
    package func observeAnswer(_ changed: @escaping @Sendable () -> Void) {
        state.withLock { state in
            if !state.ended { state.answerChanged = changed }
        }
    }

    /// Keeps the claim granted (`passed`: it went ahead holding nothing); false when the
    /// access has ended meanwhile.
    func granted(_ claim: Claim, passed: Bool) -> Bool {
        let (kept, unwatch, changed) = state.withLock {
            state -> (Bool, (@Sendable () -> Void)?, (@Sendable () -> Void)?) in
            defer { state.unwatch = nil }
            if state.ended { return (false, state.unwatch, nil) }
            state.claim = claim
            state.answer = passed ? .passed : .granted
            return (true, state.unwatch, state.answerChanged)
        }
        unwatch?()
        changed?()
        return kept
    }

    /// Its wait failed: refused here with `errno` (or cancelled, once ended).
    func refused(errno: Int32) {
        let (unwatch, changed) = state.withLock { state -> ((@Sendable () -> Void)?, (@Sendable () -> Void)?) in
            defer { state.unwatch = nil }
            if state.ended { return (state.unwatch, nil) }
            state.answer = .refused(errno: errno)
            return (state.unwatch, state.answerChanged)
        }
        unwatch?()
        changed?()
    }

    func waiting(_ access: CoordinatedAccess, ender: @escaping @Sendable (Claim) -> Void) {
        state.withLock { state in
            state.waiting = access
            state.ender = ender
        }
    }

    /// Watched while it waits: `unwatch` ends the watch once it is answered or ended.
    func watched(until unwatch: @escaping @Sendable () -> Void) {
        state.withLock { $0.unwatch = unwatch }
    }

    package func end() {
        let (claim, waiting, ender, unwatch) = state.withLock {
            state -> (Claim?, CoordinatedAccess?, (@Sendable (Claim) -> Void)?, (@Sendable () -> Void)?) in
            if state.ended { return (nil, nil, nil, nil) }
            state.ended = true
            defer {
                state.claim = nil
                state.unwatch = nil
                state.answerChanged = nil
            }
            return (state.claim, state.waiting, state.ender, state.unwatch)
        }
        unwatch?()
        if let claim { ender?(claim) } else { waiting?.cancel() }
    }
}
