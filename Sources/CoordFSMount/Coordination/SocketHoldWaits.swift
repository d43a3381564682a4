import CoordinationRuntime

/// Holds through the mount's control socket wait as the mount's own requests do for other
/// users: another user's holds, open files and presenters keep one at most the break time, and
/// those it goes past are revoked and told (`WaitWatch`, docs/sharing.md). Its own user's are
/// waited for up to the wait timeout, programs' opens too: a hold is a coordinated access, and
/// within one user Apple's semantics hold.
struct SocketHoldWaits: HoldWaitWatch {
    let waitWatch: WaitWatch
    /// Numbers the watched waits, among the mount's requests' (`WaitingRequests.number`).
    let numbers: WaitingRequests

    var passesOtherUsers: Bool { waitWatch.breakTime != nil }

    func watch(_ access: CoordinatedAccess, user: UInt32) -> @Sendable () -> Void {
        guard passesOtherUsers else { return {} }
        let number = numbers.number()
        waitWatch.watch(
            number, access, underKernelLock: false, locksOthersOut: false, changesNames: false,
            passesLeases: false, uid: user, item: nil)
        return { [waitWatch] in waitWatch.forget(number) }
    }
}

extension MountCoordinator {
    /// What watches the holds of this mount's control socket while they wait.
    var socketHoldWaits: any HoldWaitWatch { SocketHoldWaits(waitWatch: waitWatch, numbers: waitingRequests) }
}
