import Coordination
import CoordinationRuntime
import Foundation

/// What a presenter standing for another process (a control-socket client) needs beyond
/// Apple's protocol: to refuse a relinquish with an error, and to hear of deletions that Apple
/// has no callback for. Ordinary presenters need not adopt it.
public protocol ExtendedFilePresenter: FilePresenter {
    /// Like `relinquishPresentedItem(toReader:)` / `(toWriter:)`, but may refuse: `completion`
    /// gets nil and an optional reacquirer to consent, or an error that fails the access.
    func relinquishPresentedItem(
        toWriter: Bool, completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void)
    /// An item inside the presented directory was deleted.
    func presentedSubitemWasDeleted(at url: URL)
    /// The presented item itself was deleted.
    func presentedItemWasDeleted()
    /// An access to the presented item went ahead without waiting any longer for those that
    /// held it (a broken lease: another user's access past the break time, a settled file).
    func presentedItemCoordinationWasBroken()
    /// The requests it answers; accesses do not ask or wait for it about others (default: all).
    var answeredRequests: PresenterRequest.Kinds { get }
    /// Whether its callbacks may run on the thread that sends the message instead of on its
    /// queue: they never block and need no queue's order (default: false). A control-socket
    /// watch says yes, so a request reaches its client without two thread hand-offs first.
    var takesMessagesInline: Bool { get }
}

extension ExtendedFilePresenter {
    /// Does nothing: a presenter that does not care is not told.
    public func presentedItemCoordinationWasBroken() {}
    /// Every request.
    public var answeredRequests: PresenterRequest.Kinds { .all }
    /// No: messages run on the presenter's queue.
    public var takesMessagesInline: Bool { false }
}

extension FilePresenter {
    /// Runs `body` at once when the presenter takes its messages inline, else on its queue.
    func perform(_ body: @escaping @Sendable () -> Void) {
        if (self as? ExtendedFilePresenter)?.takesMessagesInline == true {
            body()
        } else {
            presentedItemOperationQueue.addOperation(body)
        }
    }
}
