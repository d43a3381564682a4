import Coordination
import CoordinationWire
import Dispatch
import Foundation

// @unchecked Sendable: its state is behind `lock`; presenters answer from any thread.
/// Puts a grant's requests to presenters on their own queues, in parallel, and gathers the
/// answers within the presenter timeout (P2, P14, X2). Reacquirers handed back are kept until
/// the access ends (P4, P5).
final class PresenterMessenger: @unchecked Sendable {
    typealias Completion = @Sendable (AccessFailure?) -> Void

    private let lock = NSLock()
    private let domain: CoordinationDomain
    private var pending: Set<PresenterID>
    private var completion: Completion?
    /// Each with the presenter that handed it back, which runs it where its messages run: a
    /// control-socket client's at once, so that it is sent before the next access comes in.
    private var reacquirers: [(any Presenter, @Sendable () -> Void)] = []
    private var accessEnded = false
    /// The request each presenter has yet to answer, for the report of one that does not.
    /// Its owner as it was when asked: a refusal is weighed by whose it is, and a presenter may
    /// be gone from the engine by the time its answer is (it refused and disconnected).
    private var current:
        [PresenterID: (request: PresenterRequest, presentedPath: ItemPath, owner: CoordinatorIdentity?)] =
            [:]
    private let started = DispatchTime.now()
    private var deadline: AnswerDeadlines.Token?

    private let deliveries: [PresenterDelivery<PresenterRequest>]
    /// Who the access is for: a presenter of another user (but root) cannot veto it.
    private let accessor: CoordinatorIdentity?
    /// Presenters that said they are still working (`PresenterProgress`), with when their
    /// answer is due now: never past `workLimit` from the start.
    private var extended: [PresenterID: DispatchTime] = [:]

    /// A messenger for `deliveries`; nothing is sent before `start()`. `completion` is called
    /// once: nil when everyone consented (or timed out), else the first failure (a presenter's
    /// error, or the access's own: `fail(with:)`).
    init(
        _ deliveries: [PresenterDelivery<PresenterRequest>], domain: CoordinationDomain,
        accessor: CoordinatorIdentity? = nil,
        completion: @escaping Completion
    ) {
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

    /// Stops waiting for answers; the access fails with `failure` (its caller may wait no
    /// longer, or was cancelled: C13). Whether it did: false once it had finished.
    @discardableResult
    func fail(with failure: AccessFailure) -> Bool { finish(failure) }

    /// The presenters yet to answer; none once it has finished.
    var unanswered: Set<PresenterID> { lock.withLock { completion == nil ? [] : pending } }

    /// The access has ended: run reacquirers now and any that arrive late at once.
    func endAccess() {
        let toRun: [(any Presenter, @Sendable () -> Void)] = lock.withLock {
            accessEnded = true
            defer { reacquirers = [] }
            return reacquirers
        }
        for (presenter, reacquirer) in toRun { presenter.reacquire(reacquirer) }
    }

    private func deliver(_ messages: ArraySlice<PresenterRequest>, _ delivery: PresenterDelivery<PresenterRequest>) {
        // One that missed its last deadlines is passed as one that is gone (X7).
        guard let message = messages.first, let presenter = domain.presenterToAsk(delivery.presenter) else {
            answered(delivery.presenter, error: nil)
            return
        }
        let id = delivery.presenter
        // A new message: time it was given for the last one (still working) does not carry over.
        let owner = domain.engine.presenter(id)?.owner
        lock.withLock {
            current[id] = (message, delivery.presentedPath, owner)
            extended[id] = nil
        }
        let rest = messages.dropFirst()
        let domain = self.domain, item = delivery.presentedPath
        // Its word, late or not, says it is there again: it is asked again.
        let progress = PresenterProgress { [weak self, weak domain] in
            domain?.presenterAnswered(id)
            self?.stillWorking(id)
        }
        presenter.asked(message, origin: origin, progress: progress) { [self] error, reacquirer in
            if domain.presenterAnswered(id) {
                domain.logger.notice("presenter of \(item) answered again: it is asked again")
            }
            if let error { return answered(id, error: error) }
            if let reacquirer { keep(reacquirer, of: presenter) }
            // Passed at its timeout meanwhile: it is asked nothing more for this access.
            guard lock.withLock({ pending.contains(id) }) else { return }
            deliver(rest, delivery)
        }
    }

    private func keep(_ reacquirer: @escaping @Sendable () -> Void, of presenter: any Presenter) {
        let runNow = lock.withLock { () -> Bool in
            if accessEnded { return true }
            reacquirers.append((presenter, reacquirer))
            return false
        }
        if runNow { presenter.reacquire(reacquirer) }
    }

    private func answered(_ presenter: PresenterID, error given: Error?) {
        var error = given
        let (waited, path, request, asked) = lock.withLock {
            (
                pending.contains(presenter), current[presenter]?.presentedPath.string,
                current[presenter]?.request.logName, current[presenter]?.owner
            )
        }
        // An answer that came after its presenter's time ran out changes nothing.
        guard waited else { return }
        // Across users a presenter's refusal is no veto (docs/sharing.md): the access goes on, and
        // the refusal is reported. One whose owner cannot be told (gone before it was asked) is
        // nobody's veto either.
        let owner = asked ?? domain.engine.presenter(presenter)?.owner
        if let refusal = given, domain.vetoScope == .ownUser, let accessor,
            owner.map({ !$0.isSameProcess(as: accessor) && !CoordinatorUsers.mayVeto($0, accessor) }) ?? true
        {
            domain.report(
                .vetoIgnored(
                    presentedItem: path ?? "\(presenter)",
                    presenterUser: owner.flatMap(CoordinatorUsers.user(of:)).map(Int.init) ?? -1, error: "\(refusal)"))
            error = nil
        }
        let (removed, done) = lock.withLock { () -> (Bool, Bool) in
            let removed = pending.remove(presenter) != nil
            current[presenter] = nil
            extended[presenter] = nil
            return (removed, pending.isEmpty)
        }
        guard removed else { return }
        if let error, domain.mayLogRefusal() {
            // Said where the program that gets the errno can be found: who refused it what.
            let code = ErrnoNames.name(of: FileCoordinationError.errno(for: error, cancellation: ECANCELED))
            let owner = domain.engine.presenter(presenter)?.owner.logName ?? "\(presenter)"
            let line =
                "presenter of \(path ?? "\(presenter)"), \(owner), refused \(request ?? "a request")"
                + "\(accessor.map { " for \($0.logName)" } ?? ""): the access fails with \(code)"
            domain.logger.notice("\(line)")
        }
        if let error { finish(.failed(error)) } else if done { finish(nil) }
    }

    /// The origin of the access, the same for every message: made when the first is sent.
    private var origin: AccessOrigin {
        if let made = lock.withLock({ madeOrigin }) { return made }
        let made = AccessOrigins.origin(of: accessor, purposes: domain.purpose(of:))
        lock.withLock { madeOrigin = made }
        return made
    }
    private var madeOrigin: AccessOrigin?

    /// `presenter` needs longer: its answer is due a presenter timeout from now, but never
    /// later than the domain's work limit from the start.
    private func stillWorking(_ presenter: PresenterID) {
        let limit = started + domain.presenterWorkLimit.timeInterval
        let due = min(DispatchTime.now() + domain.presenterTimeout.timeInterval, limit)
        lock.withLock {
            guard completion != nil, pending.contains(presenter) else { return }
            if extended[presenter].map({ $0 < due }) ?? true { extended[presenter] = due }
        }
    }

    /// Goes on without the answers still missing, at once and without a report: the caller
    /// knows why they cannot come (`CoordinatedAccess.breakThrough`).
    func stopWaiting() {
        lock.withLock { pending = [] }
        finish(nil)
    }

    /// A deadline has passed (`AnswerDeadlines`): the access goes on without the answers still
    /// missing, but for those of presenters still working, whose deadline is then the next.
    func timeOut() {
        let now = DispatchTime.now()
        let waited = Duration.nanoseconds(Int64(now.uptimeNanoseconds - started.uptimeNanoseconds))
        let (late, next, done) = lock.withLock {
            () -> ([(presenter: PresenterID, request: String, presentedItem: String)], DispatchTime?, Bool) in
            guard completion != nil else { return ([], nil, false) }
            let working = pending.filter { extended[$0].map { $0 > now } ?? false }
            let late = pending.subtracting(working).map { presenter in
                current[presenter].map { (presenter, $0.request.logName, "\($0.presentedPath)") } ?? (
                    presenter, "\(presenter)", "\(presenter)"
                )
            }
            pending = working
            return (late, working.compactMap { extended[$0] }.min(), working.isEmpty)
        }
        for (presenter, request, item) in late {
            domain.report(
                .presenterDidNotAnswer(
                    presentedItem: item, request: request, waited: waited,
                    presenter: domain.engine.presenter(presenter)?.owner.logName, accessor: accessor?.logName))
            if domain.presenterMissed(presenter) {
                domain.logger.warning(
                    "presenter of \(item) missed \(domain.presenterMissLimit) deadlines in a row: it is asked nothing more until it answers again"
                )
            }
        }
        if let next {
            let token = domain.answerDeadlines.add(self, due: next)
            let finished = lock.withLock { () -> Bool in
                if completion == nil { return true }
                deadline = token
                return false
            }
            if finished { domain.answerDeadlines.answered(token) }
        } else if done {
            finish(nil)
        }
    }

    /// Calls the completion, once: whether this call did.
    @discardableResult
    private func finish(_ failure: AccessFailure?) -> Bool {
        let (completion, deadline): (Completion?, AnswerDeadlines.Token?) = lock.withLock {
            defer { self.completion = nil; self.deadline = nil }
            return (self.completion, self.deadline)
        }
        if let deadline { domain.answerDeadlines.answered(deadline) }
        guard let completion else { return false }
        completion(failure)
        return true
    }
}

/// Tells presenters what an access did (each in its own way: `Presenter.told`), and reads a
/// moved presenter's paths again (P8).
enum PresenterNotifier {
    static func deliver(_ deliveries: [PresenterDelivery<PresenterNotification>], domain: CoordinationDomain) {
        // One access's deliveries share their accessor: its origin is made once.
        var origins: [CoordinatorIdentity?: AccessOrigin] = [:]
        for delivery in deliveries {
            guard let presenter = domain.presenter(delivery.presenter) else { continue }
            let id = delivery.presenter
            let origin =
                origins[delivery.accessor] ?? AccessOrigins.origin(of: delivery.accessor, purposes: domain.purpose(of:))
            origins[delivery.accessor] = origin
            presenter.told(delivery.messages, origin: origin, presentsPackage: delivery.presentsPackage) {
                [weak domain] in
                domain?.refresh(id)
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
