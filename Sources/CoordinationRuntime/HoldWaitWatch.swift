/// Who watches a hold through the control socket while it waits for others, and ends that wait
/// where it must: a mount lets a hold go past another user's holds, open files and presenters at
/// its break time, revoking them and telling their holders, as it lets its programs' requests
/// (docs/sharing.md: across users a hold is a lease). The daemon has none: its holds wait up to
/// their timeout.
package protocol HoldWaitWatch: Sendable {
    /// Whether a hold's wait for other users' holds ends by itself (the mount has a break time):
    /// such a wait closes no deadlock (X1).
    var passesOtherUsers: Bool { get }

    /// Watches `access`, the waiting hold of a coordinator of `user`, until the closure returned
    /// is called (once its wait has ended).
    func watch(_ access: CoordinatedAccess, user: UInt32) -> @Sendable () -> Void
}
