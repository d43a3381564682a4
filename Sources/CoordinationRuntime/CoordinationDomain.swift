import Coordination
import CoordinationClient
import Foundation
import Logging
import Synchronization

// @unchecked Sendable: settings and registries behind `lock`; the engine and holds are thread-safe.
/// The engine a set of coordinators and presenters share, with its settings: in a process,
/// `CoordinationDomain.shared`, which `FileCoordinator` uses unless told otherwise.
public final class CoordinationDomain: @unchecked Sendable {
    /// The process-wide domain.
    public static let shared = CoordinationDomain(shared: true)

    /// The engine. Exposed for diagnosis and for layers such as the mount.
    package let engine = CoordinationEngine()

    /// Notifications held back on each thread while it is inside `deliveringAfter` (one key for
    /// the process: a thread-local key per domain would run out where many domains are made).
    private static let heldNotifications = ThreadLocal { HeldNotifications() }

    private struct HeldNotifications {
        var depth = 0
        var deliveries: [(CoordinationDomain, [PresenterDelivery<PresenterNotification>])] = []
    }

    /// Holds that other processes are inside of, taken through a control socket
    /// (docs/presenters.md).
    package let accessorHolds = AccessorHolds()

    /// When presenters' answers are due (X2), for every access of the domain.
    let answerDeadlines = AnswerDeadlines()

    private let lock = NSLock()
    private var _presenterTimeout: Duration = .seconds(10)
    private var _presenterWorkLimit: Duration = .seconds(45)
    private var _presenterMissLimit = 3
    /// Presenters that missed their last deadlines, with how many in a row (`presenterMissed`).
    private var missedDeadlines: [PresenterID: Int] = [:]
    /// `missedDeadlines.count`, read without the lock: every answer looks at it.
    private let missingCount = Atomic<Int>(0)
    /// Purpose identifiers of coordinators in other processes, by identity (`setPurpose`).
    private var purposes: [CoordinatorIdentity: String] = [:]
    private var _defaultWaitTimeout: Duration? = CoordinationDomain.standardWaitTimeout
    private var _packageExtensions: Set<String> = []
    private var _vetoScope = VetoScope.ownUser
    private var _logsRefusals = false
    /// Refusals logged (`mayLogRefusal`).
    private let refusalsLogged = LogAllowance()
    private var _reportHandler: (@Sendable (CoordinationReport) -> Void)?
    private var presenters: [PresenterID: any Presenter] = [:]
    /// Registered presenters by the key their registrar gave (`register(_:key:linked:)`).
    private var presenterIDs: [ObjectIdentifier: PresenterID] = [:]
    /// Per process, how many servers' connections have it inherit (a shell can hold through two).
    private var inheriting: [Int32: Int] = [:]
    /// `inheriting.count`, readable without the lock: a mount checks it on every request.
    private let inheritingCount = Atomic<Int>(0)
    private var links: [String: MountLink] = [:]
    private var _usesMounts: Bool
    private var _usesDaemon: Bool
    /// Why the user's daemon could not be had, said once in the log.
    private var daemonTrouble: String?
    private var serviceHandlers: [ServiceRegistrationID: @Sendable (FileHandle, ItemPath) -> Void] = [:]
    private var brokenHoldHandlers: [@Sendable (Set<GrantID>, [ItemPath]) -> Void] = []
    private var presenterObservers: [@Sendable () -> Void] = []

    package let logger = Logger(label: "org.coordfs.coordination")

    /// A domain of its own; it does not reach out to coordfs mounts unless `usesMounts` is set.
    public init() {
        _usesMounts = false
        _usesDaemon = false
    }

    private init(shared: Bool) {
        _usesMounts = shared
        // Apple's processes coordinate with each other through a daemon; so do these, unless
        // told to keep to themselves, which is said once so that it is never a surprise.
        _usesDaemon = shared && ProcessInfo.processInfo.environment["COORDFS_COORDINATION"] != "in-process"
        if shared && !_usesDaemon {
            logger.notice(
                "COORDFS_COORDINATION=in-process: outside coordfs mounts, this process coordinates with itself only")
        }
    }

    /// How long an access waits for presenters' answers before it goes on without them (X2).
    public var presenterTimeout: Duration {
        get { withLock { _presenterTimeout } }
        set { withLock { _presenterTimeout = newValue } }
    }

    /// How long, from the request, a presenter that keeps saying it is still working
    /// (`PresenterProgress`) may make an access wait for its answer: by default 45 s, the
    /// kernel's lease break time; a mount uses its break time.
    public var presenterWorkLimit: Duration {
        get { withLock { _presenterWorkLimit } }
        set { withLock { _presenterWorkLimit = newValue } }
    }

    /// How many deadlines in a row a presenter may miss before it is asked nothing more, as if
    /// it were gone, until it answers again, late or not, or says it is still working (X7): a
    /// presenter whose process is stopped (SIGSTOP, a debugger) costs that many presenter
    /// timeouts, not one to every access for as long as it is stopped. 3 by default; 0 asks it
    /// always.
    public var presenterMissLimit: Int {
        get { withLock { _presenterMissLimit } }
        set { withLock { _presenterMissLimit = max(0, newValue) } }
    }

    /// Records the purpose identifier a coordinator of another process gave (a control-socket
    /// client's named coordinator), for the origin of its accesses; nil forgets it.
    package func setPurpose(_ purpose: String?, for identity: CoordinatorIdentity) {
        withLock { purposes[identity] = purpose }
    }

    package func purpose(of identity: CoordinatorIdentity) -> String? {
        withLock { purposes.isEmpty ? nil : purposes[identity] }
    }

    /// The one default wait timeout (X5), 60 s: a `FileCoordinator`'s, a mount's
    /// (`--wait-timeout`), and a hold's through a control socket that names none (a mount's
    /// socket waits as the mount's requests do).
    public static let standardWaitTimeout: Duration = .seconds(60)

    /// The wait timeout of coordinators that set none (X5; `standardWaitTimeout` unless set);
    /// nil waits forever, as Apple does.
    public var defaultWaitTimeout: Duration? {
        get { withLock { _defaultWaitTimeout } }
        set { withLock { _defaultWaitTimeout = newValue } }
    }

    /// Whether a presenter's refusal of an access is logged, naming the presenter, the
    /// accessor and the item: a mount's log, where the user whose `cat` got EACCES asks who
    /// refused it. Off by default: a program's own coordinator gets the refusal itself.
    package var logsRefusals: Bool {
        get { withLock { _logsRefusals } }
        set { withLock { _logsRefusals = newValue } }
    }

    /// Whether one more refusal may be logged (`logsRefusals`): at most ten a second, so that
    /// a presenter refusing everything does not flood the log.
    package func mayLogRefusal() -> Bool { logsRefusals && refusalsLogged.allows() }

    /// Whose refusals fail whose accesses (`VetoScope`; own user by default).
    public var vetoScope: VetoScope {
        get { withLock { _vetoScope } }
        set { withLock { _vetoScope = newValue } }
    }

    /// Name extensions that make a directory a file package (besides the `.coordfs-package` marker).
    public var packageExtensions: Set<String> {
        get { withLock { _packageExtensions } }
        set { withLock { _packageExtensions = newValue } }
    }

    /// Whether coordinators and presenters of items inside a coordfs mount served by another
    /// process also coordinate through that mount's control socket (true for `shared`).
    public var usesMounts: Bool {
        get { withLock { _usesMounts } }
        set { withLock { _usesMounts = newValue } }
    }

    /// Whether coordinators and presenters of items outside any mount also coordinate with
    /// other processes, through the user's coordfs daemon, started on first use where none runs
    /// (true for `shared`, unless `COORDFS_COORDINATION=in-process`).
    public var usesDaemon: Bool {
        get { withLock { _usesDaemon } }
        set { withLock { _usesDaemon = newValue } }
    }

    /// The link to the server of `path` when another process serves it: the mount holding it,
    /// else the user's daemon.
    package func link(for path: ItemPath) -> MountLink? {
        guard usesMounts else { return nil }
        let socket: String
        if let mount = MountLink.socket(for: path) {
            socket = mount
        } else if usesDaemon, let daemon = withLock({ links.first { $0.value.isDaemon && !$0.value.isClosed }?.key }) {
            socket = daemon
        } else if usesDaemon {
            switch UserDaemon.socket() {
            case .success(let path): socket = path
            case .failure(let error):
                let first = withLock { () -> Bool in
                    defer { daemonTrouble = error.description }; return daemonTrouble == nil
                }
                if first { logger.error("no coordination with other processes outside coordfs mounts: \(error)") }
                return nil
            }
        } else {
            return nil
        }
        if let existing = withLock({ links[socket] }), !existing.isClosed { return existing }
        guard let link = try? MountLink(socketPath: socket), !link.isOwnProcess else { return nil }
        withLock { links[socket] = link }
        return link
    }

    /// Called for events worth a diagnosis, such as a presenter that did not answer in time.
    public var reportHandler: (@Sendable (CoordinationReport) -> Void)? {
        get { withLock { _reportHandler } }
        set { withLock { _reportHandler = newValue } }
    }

    package var locator: ItemLocator { ItemLocator(packageExtensions: packageExtensions) }

    package func report(_ event: CoordinationReport) {
        logger.warning("\(event)")
        reportHandler?(event)
    }

    // MARK: Presenters

    /// A diagnostic dump of holders, waiters, presenters and services (C27).
    public func stateDump() -> String { engine.snapshot().description }

    /// Registers `presenter` under `key` (an object its registrar keeps: a `FilePresenter`, a
    /// client's watch) until `unregister(key:)`; a key registered already is left as it is.
    /// `linked`: a presenter of this process, which also hears of other processes' accesses
    /// through the mount or daemon that serves its item.
    package func register(_ presenter: any Presenter, key: ObjectIdentifier, linked: Bool) {
        if withLock({ presenterIDs[key] != nil }) { return }
        let record = presenterRecord(for: presenter)
        let id = engine.addPresenter(record)
        withLock {
            presenterIDs[key] = id
            presenters[id] = presenter
        }
        if linked, let path = record.path ?? record.primaryPath, let link = link(for: path) {
            link.watch(presenter, key: key, at: path)
        }
        presentersChanged()
    }

    /// Unregisters the presenter of `key`; an unknown key is ignored.
    package func unregister(key: ObjectIdentifier) { unregister(keys: [key]) }

    /// Unregisters many presenters at once (a connection's watches, as it closes): the engine
    /// and the observers are told once for all of them.
    package func unregister(keys: [ObjectIdentifier]) {
        let ids: [PresenterID] = withLock {
            let ids = keys.compactMap { key -> PresenterID? in
                guard let id = presenterIDs.removeValue(forKey: key) else { return nil }
                presenters[id] = nil
                missedDeadlines[id] = nil
                return id
            }
            missingCount.store(missedDeadlines.count, ordering: .releasing)
            presenterIDs.releaseSpareCapacity()
            presenters.releaseSpareCapacity()
            missedDeadlines.releaseSpareCapacity()
            return ids
        }
        engine.removePresenters(ids)
        let open = withLock { Array(links.values) }
        for link in open { for key in keys { link.unwatch(key: key) } }
        if !ids.isEmpty { presentersChanged() }
    }

    /// Runs `handler` after each presenter is registered, unregistered or moved (a mount of a
    /// shared store publishes what its presenters present).
    package func onPresentersChanged(_ handler: @escaping @Sendable () -> Void) {
        withLock { presenterObservers.append(handler) }
    }

    private func presentersChanged() {
        for observer in withLock({ presenterObservers }) { observer() }
    }

    /// The presenters registered, in registration order.
    package var registeredPresenters: [any Presenter] {
        withLock { presenters.sorted { $0.key.rawValue < $1.key.rawValue }.map(\.value) }
    }

    package func presenter(_ id: PresenterID) -> (any Presenter)? { withLock { presenters[id] } }

    /// The presenter of `id` to put a request to: nil when it is gone, or when it missed
    /// `presenterMissLimit` deadlines in a row and has not answered since (X7).
    package func presenterToAsk(_ id: PresenterID) -> (any Presenter)? {
        withLock {
            if _presenterMissLimit > 0, let missed = missedDeadlines[id], missed >= _presenterMissLimit { return nil }
            return presenters[id]
        }
    }

    /// The presenter of `id` missed a deadline. True when that is the one that makes it asked
    /// nothing more.
    package func presenterMissed(_ id: PresenterID) -> Bool {
        withLock {
            guard presenters[id] != nil else { return false }  // gone meanwhile: nothing to keep
            let missed = (missedDeadlines[id] ?? 0) + 1
            missedDeadlines[id] = missed
            missingCount.store(missedDeadlines.count, ordering: .releasing)
            return missed == _presenterMissLimit
        }
    }

    /// The presenter of `id` answered a request, late or not, or said it is still working: it
    /// is asked again. True when it had been asked nothing.
    @discardableResult
    package func presenterAnswered(_ id: PresenterID) -> Bool {
        // Nearly always nobody missed a deadline: answered without the lock.
        if missingCount.load(ordering: .acquiring) == 0 { return false }
        return withLock {
            guard let missed = missedDeadlines.removeValue(forKey: id) else { return false }
            missingCount.store(missedDeadlines.count, ordering: .releasing)
            return _presenterMissLimit > 0 && missed >= _presenterMissLimit
        }
    }

    package func presenterID(forKey key: ObjectIdentifier) -> PresenterID? { withLock { presenterIDs[key] } }

    /// Reads a presenter's paths again and re-indexes it (C22, P8).
    package func refresh(_ id: PresenterID) {
        guard let presenter = presenter(id) else { return }
        let record = presenterRecord(for: presenter)
        engine.updatePresenter(id, path: record.path, primaryPath: record.primaryPath)
        presentersChanged()
    }

    private func presenterRecord(for presenter: any Presenter) -> PresenterRecord {
        let (path, primaryPath) = presenter.presentedPaths(locator)
        return PresenterRecord(
            owner: presenter.owner, path: path, primaryPath: primaryPath, answers: presenter.answeredRequests)
    }

    /// Processes whose descendants count as themselves for coordination through a mount (a
    /// `coordfs coordinate` running its command).
    /// Each `true` is undone by one `false`.
    package func setInheriting(_ pid: Int32, _ inherits: Bool) {
        withLock {
            let count = (inheriting[pid] ?? 0) + (inherits ? 1 : -1)
            inheriting[pid] = count > 0 ? count : nil
            inheritingCount.store(inheriting.count, ordering: .releasing)
        }
    }

    /// Whether any process's descendants coordinate as it (`inheritingProcesses` is not empty).
    package var hasInheritingProcesses: Bool { inheritingCount.load(ordering: .acquiring) != 0 }

    package var inheritingProcesses: Set<Int32> {
        // Nearly always empty: answered without taking the lock another thread just wrote.
        if inheritingCount.load(ordering: .acquiring) == 0 { return [] }
        return withLock { Set(inheriting.keys) }
    }

    /// Tells whoever held the items of an access (`paths`, each of its items once) that it went
    /// ahead without waiting for them any longer (a broken lease): the presenters of each item,
    /// and the servers whose clients' holds were among `grants`, those it went past
    /// (`onBrokenHolds`), which tell each such hold once, whichever of the items it held.
    package func tellCoordinationBroken(
        at paths: [ItemPath], grants: Set<GrantID>, by accessor: CoordinatorIdentity? = nil
    ) {
        var told: Set<ItemPath> = []
        for path in paths {
            guard told.insert(path).inserted else { continue }
            deliver(engine.brokenCoordinationNotices(at: path, by: accessor))
        }
        if grants.isEmpty { return }
        for handler in withLock({ brokenHoldHandlers }) { handler(grants, paths) }
    }

    /// Called with the grants an access went past and its items: a control server tells its
    /// clients whose holds those grants are.
    package func onBrokenHolds(_ handler: @escaping @Sendable (Set<GrantID>, [ItemPath]) -> Void) {
        withLock { brokenHoldHandlers.append(handler) }
    }

    // MARK: Notifications

    /// Tells this domain's presenters what an access did: the notifications its grant's release
    /// or reported move returned. Every claim's and every coordinator's notifications come this
    /// way; on a thread inside `deliveringAfter`, they wait for its end.
    package func deliver(_ notifications: [PresenterDelivery<PresenterNotification>]) {
        let held = Self.heldNotifications.withValue { held -> Bool in
            guard held.depth > 0 else { return false }
            held.deliveries.append((self, notifications))
            return true
        }
        if !held { PresenterNotifier.deliver(notifications, domain: self) }
    }

    /// Runs `body`, and tells presenters what it did (the claims it ended, the moves it reported)
    /// only when it returns. A mount replies to the kernel inside `body`: its caller goes on
    /// first, and the presenters (and the clients behind them, on a small machine) are woken
    /// after, not in its way. Nested scopes deliver when the outermost ends.
    package func deliveringAfter(_ body: () -> Void) {
        holdNotifications()
        body()
        deliverHeldNotifications()
    }

    /// `deliveringAfter` in two halves, for a caller that runs its body between them: a closure's
    /// captures are retained and released again, several reference counts on a mount's
    /// commonest requests.
    package func holdNotifications() {
        Self.heldNotifications.withValue { $0.depth += 1 }
    }

    /// The second half: delivers what this thread's outermost scope held back.
    package func deliverHeldNotifications() {
        let due = Self.heldNotifications.withValue {
            held -> [(CoordinationDomain, [PresenterDelivery<PresenterNotification>])] in
            held.depth -= 1
            guard held.depth == 0, !held.deliveries.isEmpty else { return [] }
            defer { held.deliveries = [] }
            return held.deliveries
        }
        for (domain, deliveries) in due { PresenterNotifier.deliver(deliveries, domain: domain) }
    }

    // MARK: Service handlers

    package func setServiceHandler(
        _ handler: @escaping @Sendable (FileHandle, ItemPath) -> Void, for id: ServiceRegistrationID
    ) {
        withLock { serviceHandlers[id] = handler }
    }

    package func serviceHandler(_ id: ServiceRegistrationID) -> (@Sendable (FileHandle, ItemPath) -> Void)? {
        guard engine.service(id) != nil else { return nil }
        return withLock { serviceHandlers[id] }
    }

    package func withdrawService(_ id: ServiceRegistrationID) {
        engine.withdrawService(id)
        withLock { serviceHandlers[id] = nil }
    }

    private func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }
}

/// An event the coordination layer reports for diagnosis.
public enum CoordinationReport: Sendable, CustomStringConvertible, Equatable {
    /// A presenter did not answer `request` within the presenter timeout; the access went on (X2).
    /// `presenter` and `accessor`: who they are, as the log names them ("pid 42 (vim)").
    case presenterDidNotAnswer(
        presentedItem: String, request: String, waited: Duration, presenter: String? = nil, accessor: String? = nil)
    /// A presenter of another user refused an access; across users that is no veto, and the
    /// access went on (docs/sharing.md).
    case vetoIgnored(presentedItem: String, presenterUser: Int, error: String)
    /// Another's access to `item` may have gone ahead while a coordinator of this process held
    /// it: another user's, once the mount's break time had passed (docs/sharing.md), or on a
    /// host of a shared store another host's, once this host's cover was lost (docs/cluster.md).
    case coordinationBroken(item: String)
    /// A presenter asks for a callback that coordfs never makes on Linux (ubiquity attributes).
    case neverCalled(presentedItem: String, callback: String, why: String)

    /// The report as a log line.
    public var description: String {
        switch self {
        case .presenterDidNotAnswer(let item, let request, let waited, let presenter, let accessor):
            return "presenter of \(item)\(presenter.map { ", \($0)," } ?? "") did not answer \(request)"
                + "\(accessor.map { " for \($0)" } ?? "") within \(waited.logText); access proceeded"
        case .vetoIgnored(let item, let user, let error):
            return
                "a presenter of \(item) of another user (uid \(user)) refused an access (\(error)); across users that is no veto, and the access proceeded"
        case .coordinationBroken(let item):
            return
                "another's access to \(item) may have gone ahead while this process held it (another user's, the mount's break time having passed, or another host's, this host's cover having been lost)"
        case .neverCalled(let item, let callback, let why):
            return "the presenter of \(item) asks for \(callback), which is never called: \(why)"
        }
    }
}

extension CoordinationDomain {
    /// The engine's facts for the item at `url`: its canonical path, whether it is a directory
    /// or a package, and the packages around it (for layers that build intents themselves).
    package func accessTarget(for url: URL, resolvingLink: Bool = false) throws -> AccessTarget {
        let locator = self.locator
        return locator.target(for: try locator.canonicalPath(of: url, resolvingLink: resolvingLink))
    }
}
