import Coordination
import Dispatch
import Foundation

/// Puts a grant's requests to presenters on their own queues, in parallel, and gathers the
/// answers within the presenter timeout (P2, P14, X2). Reacquirers handed back are kept until
/// the access ends (P4, P5).
final class PresenterMessenger: @unchecked Sendable {
    typealias Completion = @Sendable (Error?) -> Void

    private let lock = NSLock()
    private let domain: CoordinationDomain
    private var pending: Set<PresenterID>
    private var completion: Completion?
    /// Each with its presenter's queue, or nil for a presenter that takes messages inline
    /// (a control-socket client's): its reacquirer is sent at once, before the next access.
    private var reacquirers: [(OperationQueue?, @Sendable () -> Void)] = []
    private var accessEnded = false
    /// The request each presenter has yet to answer, for the report of one that does not.
    private var current: [PresenterID: (request: PresenterRequest, presentedPath: ItemPath)] = [:]
    private let started = DispatchTime.now()
    private var deadline: AnswerDeadlines.Token?

    private let deliveries: [PresenterDelivery<PresenterRequest>]
    /// Who the access is for: a presenter of another user (but root) cannot veto it.
    private let accessor: CoordinatorIdentity?

    /// A messenger for `deliveries`; nothing is sent before `start()`. `completion` is called
    /// once: nil when everyone consented (or timed out), else the first error (a presenter's, or
    /// cancellation).
    init(_ deliveries: [PresenterDelivery<PresenterRequest>], domain: CoordinationDomain, accessor: CoordinatorIdentity? = nil,
         completion: @escaping Completion) {
        self.domain = domain
        self.deliveries = deliveries
        self.accessor = accessor
        self.pending = Set(deliveries.map(\.presenter))
        self.completion = completion
    }

    /// Sends the first message of every delivery, in parallel.
    func start() {
        if deliveries.isEmpty {
            finish(nil)
            return
        }
        let token = domain.answerDeadlines.add(self, due: started + domain.presenterTimeout.timeInterval)
        let finished = lock.withLock { () -> Bool in
            deadline = token
            return completion == nil
        }
        // Cancelled meanwhile: `finish` found no deadline to take back.
        if finished { domain.answerDeadlines.answered(token) }
        for delivery in deliveries {
            deliver(delivery.messages[...], delivery)
        }
    }

    /// Stops waiting for answers; the access fails with cancellation (C13).
    func cancel() { finish(CocoaError(.userCancelled)) }

    /// The access has ended: run reacquirers now and any that arrive late at once.
    func endAccess() {
        let toRun: [(OperationQueue?, @Sendable () -> Void)] = lock.withLock {
            accessEnded = true
            defer { reacquirers = [] }
            return reacquirers
        }
        for (queue, reacquirer) in toRun { Self.run(reacquirer, on: queue) }
    }

    private static func run(_ reacquirer: @escaping @Sendable () -> Void, on queue: OperationQueue?) {
        if let queue { queue.addOperation(reacquirer) } else { reacquirer() }
    }

    private func deliver(_ messages: ArraySlice<PresenterRequest>, _ delivery: PresenterDelivery<PresenterRequest>) {
        guard let message = messages.first, let presenter = domain.presenter(delivery.presenter) else {
            answered(delivery.presenter, error: nil)
            return
        }
        lock.withLock { current[delivery.presenter] = (message, delivery.presentedPath) }
        let queue = presenter.presentedItemOperationQueue
        let rest = messages.dropFirst()
        let next: @Sendable (Error?) -> Void = { [self] error in
            if let error { answered(delivery.presenter, error: error) } else { deliver(rest, delivery) }
        }
        let inline = (presenter as? PathMessagedPresenter)?.takesMessagesInline == true
        let relinquished: @Sendable ((@Sendable () -> Void)?) -> Void = { [self] reacquirer in
            if let reacquirer { keep(reacquirer, on: inline ? nil : queue) }
            next(nil)
        }
        if let direct = presenter as? PathMessagedPresenter, direct.takesMessagesInline {
            return direct.asked(message) { error, reacquirer in
                if let error { next(error) } else { relinquished(reacquirer) }
            }
        }
        presenter.perform {
            switch message {
            case .relinquishToReader, .relinquishToWriter:
                if let extended = presenter as? ExtendedFilePresenter {
                    extended.relinquishPresentedItem(toWriter: message == .relinquishToWriter) { error, reacquirer in
                        if let error { next(error) } else { relinquished(reacquirer) }
                    }
                } else if message == .relinquishToReader {
                    presenter.relinquishPresentedItem(toReader: relinquished)
                } else {
                    presenter.relinquishPresentedItem(toWriter: relinquished)
                }
            case .saveChanges: presenter.savePresentedItemChanges(completionHandler: next)
            case .accommodateDeletion: presenter.accommodatePresentedItemDeletion(completionHandler: next)
            case .accommodateSubitemDeletion(let path):
                presenter.accommodatePresentedSubitemDeletion(at: path.fileURL, completionHandler: next)
            }
        }
    }

    private func keep(_ reacquirer: @escaping @Sendable () -> Void, on queue: OperationQueue?) {
        let runNow = lock.withLock { () -> Bool in
            if accessEnded { return true }
            reacquirers.append((queue, reacquirer))
            return false
        }
        if runNow { Self.run(reacquirer, on: queue) }
    }

    private func answered(_ presenter: PresenterID, error given: Error?) {
        var error = given
        // Across users a presenter's refusal is no veto (SPEC §4): the access goes on, and the
        // refusal is reported.
        if let refusal = given, domain.vetoScope == .ownUser, let accessor, let owner = domain.engine.presenter(presenter)?.owner,
           !owner.isSameProcess(as: accessor), !CoordinatorUsers.mayVeto(owner, accessor) {
            let path = lock.withLock { current[presenter]?.presentedPath.string } ?? "\(presenter)"
            domain.report(.vetoIgnored(presentedItem: path, presenterUser: CoordinatorUsers.user(of: owner).map(Int.init) ?? -1,
                                       error: "\(refusal)"))
            error = nil
        }
        let done = lock.withLock { () -> Bool in
            pending.remove(presenter)
            current[presenter] = nil
            return pending.isEmpty
        }
        if let error { finish(error) } else if done { finish(nil) }
    }

    /// Goes on without the answers still missing, at once and without a report: the caller
    /// knows why they cannot come (`CoordinatedAccess.breakThrough`).
    func stopWaiting() {
        lock.withLock { pending = [] }
        finish(nil)
    }

    /// The presenter timeout has passed (`AnswerDeadlines`): the access goes on without the
    /// answers still missing.
    func timeOut() {
        let waited = Duration.nanoseconds(Int64(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds))
        let late = lock.withLock { () -> [(request: String, presentedItem: String)] in
            guard completion != nil else { return [] }
            let late = pending.map { presenter in
                current[presenter].map { ("\($0.request)", "\($0.presentedPath)") } ?? ("\(presenter)", "\(presenter)")
            }
            pending = []
            return late
        }
        guard !late.isEmpty else { return }
        for (request, item) in late {
            domain.report(.presenterDidNotAnswer(presentedItem: item, request: request, waited: waited))
        }
        finish(nil)
    }

    private func finish(_ error: Error?) {
        let (completion, deadline): (Completion?, AnswerDeadlines.Token?) = lock.withLock {
            defer { self.completion = nil; self.deadline = nil }
            return (self.completion, self.deadline)
        }
        if let deadline { domain.answerDeadlines.answered(deadline) }
        completion?(error)
    }
}

/// Delivers notifications on presenters' queues, with the package fallback (P20) and the URL
/// refresh after a move (P8).
enum PresenterNotifier {
    static func deliver(_ deliveries: [PresenterDelivery<PresenterNotification>], domain: CoordinationDomain) {
        for delivery in deliveries {
            guard let presenter = domain.presenter(delivery.presenter) else { continue }
            let package = delivery.presentsPackage
            let messages = delivery.messages
            presenter.perform {
                var sentDidChange = false
                for message in messages {
                    func deliver() {
                        switch message {
                        case .didMove(let path): presenter.presentedItemDidMove(to: path.fileURL)
                        case .didChange: presenter.presentedItemDidChange(); sentDidChange = true
                        case .subitemDidAppear(let path): presenter.presentedSubitemDidAppear(at: path.fileURL)
                        case .subitemDidMove(let from, let to): presenter.presentedSubitem(at: from.fileURL, didMoveTo: to.fileURL)
                        case .subitemDidChange(let path): presenter.presentedSubitemDidChange(at: path.fileURL)
                        case .subitemWasDeleted(let path):
                            if let extended = presenter as? ExtendedFilePresenter { extended.presentedSubitemWasDeleted(at: path.fileURL) }
                            else { UnimplementedCallback.note() }   // no Apple callback
                        case .itemWasDeleted:
                            (presenter as? ExtendedFilePresenter)?.presentedItemWasDeleted()
                        case .coordinationWasBroken:
                            (presenter as? ExtendedFilePresenter)?.presentedItemCoordinationWasBroken()
                        }
                    }
                    if let direct = presenter as? PathMessagedPresenter {
                        direct.presented(message)
                    } else if package && message.isSubitemNotification && !sentDidChange {
                        // Only a package's presenter may need did-change instead; asking the
                        // thread whether a default ran costs more than most callbacks.
                        if UnimplementedCallback.reachedDefault(deliver) {
                            presenter.presentedItemDidChange()                  // P20, reference C45
                            sentDidChange = true
                        }
                    } else {
                        deliver()
                    }
                    if case .didMove = message { domain.refresh(presenter) }
                }
            }
        }
    }
}

extension Duration {
    /// In seconds; shared with the control socket's server.
    package var timeInterval: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}
