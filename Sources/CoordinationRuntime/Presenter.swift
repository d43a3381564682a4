import Coordination

/// Whatever stands in a domain as a presenter: a Foundation `FilePresenter` (through the facade's
/// adapter), a control-socket client's watch, or either of them reached through another
/// process's socket (`MountLink`). The runtime speaks to all of them in the engine's terms —
/// paths, requests and notifications — so that a presenter hears every access the same way,
/// whoever made it and however it came.
package protocol Presenter: AnyObject, Sendable {
    /// The coordinator it stands for: that coordinator's accesses never message it, and its own
    /// work passes while it is asked (C14, C21).
    var owner: CoordinatorIdentity { get }

    /// The presented item and its primary item (P3) as canonical paths; nil for an item that
    /// does not exist yet (C22). Read at registration and after each move it took in (P8).
    func presentedPaths(_ locator: ItemLocator) -> (item: ItemPath?, primary: ItemPath?)

    /// The requests it answers; it is asked nothing else (an access goes on at once instead).
    var answeredRequests: PresenterRequest.Kinds { get }

    /// Puts `request`, about an access from `origin`, to it. `completion` gets nil (with a
    /// reacquirer, for a relinquish that wants one) to consent, or the error that fails the
    /// access (P4–P7, P13); until then, `progress` takes its word that it is still working.
    func asked(
        _ request: PresenterRequest, origin: AccessOrigin, progress: PresenterProgress,
        completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void)

    /// Tells it what an access from `origin` did, in order. `presentsPackage`: it presents a file package, and
    /// takes a subitem notification it has no callback for as a did-change (P20). `moved` is
    /// called once a did-move has been taken in, so that the domain reads its paths again (P8).
    func told(
        _ notifications: [PresenterNotification], origin: AccessOrigin, presentsPackage: Bool,
        moved: @escaping @Sendable () -> Void)

    /// Runs a reacquirer handed back by a relinquish, where its messages run (P4, P5).
    func reacquire(_ reacquirer: @escaping @Sendable () -> Void)
}
