import Coordination
import CoordinationClient
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its tables are behind `lock`; the client is thread-safe.
/// This process's connection to a coordfs mount served by another process: coordinators take
/// their intents there too (for this process, so its own opens through the mount never wait on
/// them), and presenters of items inside it are watched there, so that programs using the mount
/// — `cp`, a Python script, another Swift program — and this one coordinate with each other.
package final class MountLink: @unchecked Sendable {
    let socketPath: String
    let mountRoot: String
    private let client: ControlClient
    private let lock = NSLock()
    private var presenters: [Int: any Presenter] = [:]
    /// Watch descriptors by the key their presenter is registered under.
    private var watches: [ObjectIdentifier: Int] = [:]
    private var reacquirers: [UInt64: (any Presenter, @Sendable () -> Void)] = [:]
    private var movedFrom: [UInt64: String] = [:]
    /// Holds whose coordination the server broke (a BROKEN event), by number, with the item.
    private var brokenHolds: [Int: String] = [:]
    private var serviceHandlers: [Int: @Sendable (FileHandle, ItemPath) -> Void] = [:]

    /// The control socket of the mount holding `path` (whoever serves it).
    static func socket(for path: ItemPath) -> String? { ControlClient.mountSocketPath(for: path.string) }

    init(socketPath: String) throws {
        self.socketPath = socketPath
        client = try ControlClient(socketPath: socketPath)
        if case .string(let root)? = client.server["root"] { mountRoot = root } else { mountRoot = "/" }
        client.onEvent { [weak self] record in self?.deliver(record) }
        client.onServiceConnection { [weak self] record, connection in
            guard let handler = self?.lock.withLock({ self?.serviceHandlers[record.wd] }),
                let path = ItemPath(record.path)
            else { return }
            DispatchQueue.global().async { handler(connection, path) }
        }
    }

    // MARK: Services

    /// Vends `name` for `path` in the mount; returns the registration number.
    package func vend(
        _ name: String, at path: ItemPath, handler: @escaping @Sendable (FileHandle, ItemPath) -> Void
    ) throws -> Int {
        let fields: [String: WireValue]
        do { fields = try client.request { .vend(id: $0, name: name, path: path.string) } } catch let error
            as ControlError
        {
            throw error.errno == "EINVAL"
                ? FileCoordinationError.invalidServiceName(error.message)
                : FileCoordinationError.noSuchItem(error.message)
        }
        guard case .int(let number)? = fields["service"] else {
            throw FileCoordinationError.systemError("no service in the reply", EPROTO)
        }
        lock.withLock { serviceHandlers[number] = handler }
        return number
    }

    package func withdraw(_ number: Int) {
        lock.withLock { _ = serviceHandlers.removeValue(forKey: number) }
        client.send(.withdraw(id: 0, service: number))
    }

    /// The names of the services of `path`.
    package func services(at path: ItemPath) throws -> [String] {
        let fields: [String: WireValue]
        do { fields = try client.request { .services(id: $0, path: path.string) } } catch let error as ControlError {
            throw FileCoordinationError.noSuchItem(error.description)
        }
        guard case .array(let entries)? = fields["services"] else { return [] }
        return entries.compactMap { entry in
            if case .object(let object) = entry, case .string(let name)? = object["name"] { return name }
            return nil
        }
    }

    package func connect(_ name: String, at path: ItemPath) throws -> FileHandle {
        do { return try client.connect(service: name, at: path.string) } catch let error as ControlError {
            throw error.errno == "ENOENT"
                ? FileCoordinationError.noSuchService(name)
                : FileCoordinationError.systemError(error.description, ECONNREFUSED)
        }
    }

    /// True when this very process serves the socket (a mount's own process): it needs no link.
    var isOwnProcess: Bool {
        if case .int(let pid)? = client.server["pid"] { return pid == Int(getpid()) }
        return false
    }

    var isClosed: Bool { client.isClosed }

    /// Whether the server is a daemon, serving paths outside any mount.
    package var isDaemon: Bool { mountRoot == "/" }

    // MARK: Holds

    /// Holds `intents` for a coordinator of this process — for the presenter registered under
    /// `presenterKey`, when it was made with one watched here, so that it passes while that
    /// presenter is asked; `completion` gets the hold number or the error.
    func hold(
        _ intents: [Intent], forPresenter presenterKey: ObjectIdentifier?, coordinator: String?, timeout: Duration?,
        completion: @escaping @Sendable (Result<(hold: Int, paths: [String]), Error>) -> Void
    ) -> Int {
        let wd = presenterKey.flatMap { key in lock.withLock { watches[key] } }
        let wire = intents.map { intent -> WireIntent in
            switch intent.kind {
            case .reading(let options):
                return WireIntent(path: intent.path.string, access: .read, options: Self.names(reading: options))
            case .writing(let options):
                return WireIntent(path: intent.path.string, access: .write, options: Self.names(writing: options))
            }
        }
        let seconds = timeout.map { $0.timeInterval }
        return client.request({
            .hold(
                id: $0, intents: wire, wait: true, timeout: seconds, inherit: false, presenter: wd,
                coordinator: wd == nil ? coordinator : nil)
        }) { reply in
            // Off the connection's reader thread: what follows may run an accessor, and the
            // reader must stay free to deliver events (and the release's reply).
            DispatchQueue.global().async { Self.finishHold(reply, item: wire.first?.path ?? "/", completion) }
        }
    }

    private static func finishHold(
        _ result: Result<[String: WireValue], ControlError>, item: String,
        _ completion: @escaping @Sendable (Result<(hold: Int, paths: [String]), Error>) -> Void
    ) {
        switch result {
        case .success(let fields):
            // The paths as granted: an item moved while the hold waited is where it went (C11).
            var paths: [String] = []
            if case .array(let granted)? = fields["paths"] {
                paths = granted.compactMap { if case .string(let path) = $0 { return path } else { return nil } }
            }
            if case .int(let number)? = fields["hold"] {
                completion(.success((number, paths)))
            } else {
                completion(.failure(FileCoordinationError.systemError("no hold in the mount's reply", EPROTO)))
            }
        case .failure(let error):
            completion(.failure(Self.error(error, item: item)))
        }
    }

    func cancel(_ request: Int) { client.send(.cancel(id: 0, request: request)) }

    /// Tells the server of a move made inside `hold`, which it cannot see itself (a daemon: a
    /// mount sees the rename). Throws the server's refusal: a hold that does not write both
    /// places, or a move this user could not have made.
    func reportMove(in hold: Int, from: ItemPath, to: ItemPath) throws {
        do {
            _ = try client.request { .moved(id: $0, hold: hold, from: from.string, to: to.string) }
        } catch let error as ControlError {
            throw Self.error(error, item: from.string)
        }
    }

    /// Ends a hold and waits until the mount has: once an accessor returns, others may proceed.
    /// Returns the item whose coordination was broken while the hold was held, if any: by
    /// another user's access at the break time, or on a host of a shared store by the loss of
    /// its cover (another host may have had the item).
    @discardableResult
    func release(_ hold: Int, changed: Bool) -> String? {
        let fields = try? client.request { .release(id: $0, hold: hold, changed: changed) }
        // Events come before the reply that follows them: a break of this hold is known here.
        let broken = lock.withLock { brokenHolds.removeValue(forKey: hold) }
        if case .string(let item)? = fields?["cover_lost"] { return broken ?? item }
        return broken
    }

    /// The API's error for a mount's refusal of a hold of `item`.
    static func error(_ error: ControlError, item: String) -> Error {
        switch error.errno {
        case "EDEADLK":
            // The server's message is this error's description; the cycle is what follows its colon.
            let cycle =
                error.message.range(of: "deadlock: ").map { String(error.message[$0.upperBound...]) } ?? error.message
            return FileCoordinationError.deadlock(item: item, cycle: cycle.components(separatedBy: " -> "))
        case "EBUSY": return FileCoordinationError.timedOut(item: item)
        case "EAGAIN": return FileCoordinationError.wouldBlock(item: item)
        case "ECANCELED": return CocoaError(.userCancelled)
        default:
            let code = ErrnoNames.code(of: error.errno) ?? EIO
            return POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
    }

    /// A read's options as the server takes them: the item is resolved here, and a snapshot
    /// for uploading is taken here too.
    private static func names(reading options: ReadingOptions) -> [String]? {
        let names = options.intersection([.withoutChanges, .immediatelyAvailableMetadataOnly]).names
        return names.isEmpty ? nil : names
    }

    private static func names(writing options: WritingOptions) -> [String]? {
        options.names.isEmpty ? nil : options.names
    }

    // MARK: Presenters

    func watch(_ presenter: any Presenter, key: ObjectIdentifier, at path: ItemPath) {
        guard let fields = try? client.request({ .watch(id: $0, path: path.string, mask: .all) }),
            case .int(let wd)? = fields["wd"]
        else { return }
        lock.withLock {
            presenters[wd] = presenter
            watches[key] = wd
        }
    }

    func unwatch(key: ObjectIdentifier) {
        guard
            let wd = lock.withLock({ () -> Int? in
                guard let wd = watches.removeValue(forKey: key) else { return nil }
                presenters[wd] = nil
                watches.releaseSpareCapacity()
                presenters.releaseSpareCapacity()
                return wd
            })
        else { return }
        client.send(.unwatch(id: 0, wd: wd))
    }

    /// Turns an event record into the engine's request or notification for the presenter it
    /// is for, and sends the presenter's answer back.
    private func deliver(_ record: EventRecord) {
        if record.wd == 0 && record.mask.contains(.broken) {
            lock.withLock { brokenHolds[Int(truncatingIfNeeded: record.cookie)] = record.path }
            return
        }
        guard let presenter = lock.withLock({ presenters[record.wd] }), let path = ItemPath(record.path) else {
            if record.mask.contains(.request) { client.answer(cookie: record.cookie, errno: 0) }
            return
        }
        let cookie = record.cookie
        let mask = record.mask
        if mask.contains(.reacquire) {
            if let (presenter, reacquirer) = lock.withLock({ reacquirers.removeValue(forKey: cookie) }) {
                presenter.reacquire(reacquirer)
            }
            return
        }
        if mask.contains(.movedFrom) {
            lock.withLock { movedFrom[cookie] = record.path }
            return
        }
        let origin = AccessOrigin(record.origin)
        if let request = PresenterRequest(event: mask, path: path) {
            let progress = PresenterProgress { [client] in client.send(.working(cookie: cookie)) }
            return presenter.asked(request, origin: origin, progress: progress) {
                [weak self, client] error, reacquirer in
                if error == nil, let reacquirer {
                    self?.lock.withLock { self?.reacquirers[cookie] = (presenter, reacquirer) }
                }
                client.answer(cookie: cookie, errno: error.map(Self.errnoCode) ?? 0)
            }
        }
        let notification: PresenterNotification
        if mask.contains(.movedTo) {
            if record.name.isEmpty {
                notification = .didMove(to: path)
            } else if let from = lock.withLock({ movedFrom.removeValue(forKey: cookie) }).flatMap({ ItemPath($0) }) {
                notification = .subitemDidMove(from: from, to: path)
            } else {
                return
            }
        } else if mask.contains(.changed) {
            notification = .didChange
        } else if mask.contains(.subitemAppeared) {
            notification = .subitemDidAppear(path)
        } else if mask.contains(.subitemChanged) {
            notification = .subitemDidChange(path)
        } else if mask.contains(.subitemDeleted) {
            notification = .subitemWasDeleted(path)
        } else if mask.contains(.presenterRemoved) {
            notification = .itemWasDeleted
        } else if mask.contains(.broken) {
            notification = .coordinationWasBroken
        } else if let news = VersionNews(eventMask: mask) {
            notification =
                record.name.isEmpty
                ? .versionNews(news, String(cookie)) : .subitemVersionNews(path, news, String(cookie))
        } else {
            return
        }
        presenter.told([notification], origin: origin, presentsPackage: false) {}
    }

    private static func errnoCode(_ error: Error) -> Int32 {
        if let posix = error as? POSIXError { return posix.code.rawValue }
        return EACCES
    }
}
