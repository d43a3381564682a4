import Coordination
import CoordinationRuntime
import Dispatch
import Foundation

// @unchecked Sendable: its state is behind `lock`, as NSFileCoordinator is safe from any thread.
/// Coordinates reads and writes of files and directories with other coordinators in this process
/// and, through a coordfs mount or daemon, in others — Foundation's `NSFileCoordinator`.
///
/// Differences from Apple, all deliberate: the synchronous methods throw instead of filling an
/// `NSError` pointer and return the accessor's result; programmer errors that Apple raises as
/// exceptions throw `FileCoordinationError`; waiting is bounded by `waitTimeout` and presenters'
/// answers by the domain's `presenterTimeout`, so nothing hangs forever.
public final class FileCoordinator: AccessCoordinator, @unchecked Sendable {
    public typealias ReadingOptions = Coordination.ReadingOptions
    public typealias WritingOptions = Coordination.WritingOptions

    /// The presenter this coordinator works for; it is never messaged about this coordinator's
    /// accesses (C14).
    public let filePresenter: FilePresenter?
    let domain: CoordinationDomain

    private let lock = NSLock()
    private var _purposeIdentifier: String
    private var purposeLocked: Bool
    private var _waitTimeout: Duration?
    private var cancelled = false
    private var inFlight: [ObjectIdentifier: CoordinatedAccess] = [:]
    /// Accesses whose accessor is running, innermost last.
    private var running: [CoordinatedAccess] = []
    /// Presenters relinquished by a prepared batch in progress (C9, P21).
    private var batchRelinquished: Set<PresenterID> = []

    /// A coordinator for `filePresenter` (or for nobody) in `domain`.
    public init(filePresenter: FilePresenter? = nil, domain: CoordinationDomain = .shared) {
        self.filePresenter = filePresenter
        self.domain = domain
        if let filePresenter {
            _purposeIdentifier = "presenter-\(ObjectPresenter.identity(of: filePresenter))"
            purposeLocked = true
        } else {
            _purposeIdentifier = UUID().uuidString
            purposeLocked = false
        }
        _waitTimeout = domain.defaultWaitTimeout
    }

    /// Coordinators with the same purpose identifier never wait for each other (C4). A fresh
    /// UUID by default; it can be set once, and not on a coordinator made with a presenter
    /// (whose purpose is the presenter's). Further or empty assignments are ignored and reported.
    public var purposeIdentifier: String {
        get { lock.withLock { _purposeIdentifier } }
        set {
            let accepted = lock.withLock { () -> Bool in
                guard !purposeLocked, !newValue.isEmpty else { return false }
                _purposeIdentifier = newValue
                purposeLocked = true
                return true
            }
            if !accepted {
                domain.logger.error(
                    "purposeIdentifier can be set once, to a non-empty string, on a coordinator without a presenter; '\(newValue)' ignored"
                )
            }
        }
    }

    /// How long a call waits for other coordinators before it fails with
    /// `FileCoordinationError.timedOut(item:)` (the domain's `defaultWaitTimeout` unless set, 60 s
    /// by default); nil waits forever.
    public var waitTimeout: Duration? {
        get { lock.withLock { _waitTimeout } }
        set { lock.withLock { _waitTimeout = newValue } }
    }

    package var identity: CoordinatorIdentity {
        if let filePresenter { return ObjectPresenter.identity(of: filePresenter) }
        return .purpose(purposeIdentifier)
    }

    // MARK: Presenters (C16)

    /// Registers `presenter` with the process's coordination: from now on it hears of every
    /// coordinated access to its item.
    public class func addFilePresenter(_ presenter: FilePresenter) {
        CoordinationDomain.shared.addFilePresenter(presenter)
    }

    /// Unregisters `presenter`; unknown presenters are ignored.
    public class func removeFilePresenter(_ presenter: FilePresenter) {
        CoordinationDomain.shared.removeFilePresenter(presenter)
    }

    /// The presenters registered in this process.
    public class var filePresenters: [FilePresenter] { CoordinationDomain.shared.filePresenters }

    // MARK: Cancellation (C13, C23)

    /// Makes every waiting call of this coordinator, and every later one, fail with
    /// `CocoaError(.userCancelled)` without running its accessor. Running accessors go on.
    /// Callable from any thread.
    public func cancel() {
        let waiting = lock.withLock { () -> [CoordinatedAccess] in
            cancelled = true
            return Array(inFlight.values)
        }
        for access in waiting { access.cancel() }
    }

    package var isCancelled: Bool { lock.withLock { cancelled } }

    package var presenterKey: ObjectIdentifier? { filePresenter.map(ObjectIdentifier.init) }

    package func track(_ access: CoordinatedAccess) { lock.withLock { inFlight[ObjectIdentifier(access)] = access } }
    package func untrack(_ access: CoordinatedAccess) { lock.withLock { inFlight[ObjectIdentifier(access)] = nil } }

    func pushRunning(_ access: CoordinatedAccess) { lock.withLock { running.append(access) } }
    func popRunning(_ access: CoordinatedAccess) {
        lock.withLock { if let index = running.lastIndex(where: { $0 === access }) { running.remove(at: index) } }
    }

    // MARK: Intents

    func engineIntent(_ url: URL, _ kind: AccessKind) throws -> Intent {
        let locator = domain.locator
        let resolving = kind.readingOptionsValue.contains(.resolvesSymbolicLink)
        if case .writing(let options) = kind, !options.isValid {
            throw FileCoordinationError.invalidOptions(
                "a write carries at most one writing option (raw value \(options.rawValue))")
        }
        let path = try locator.canonicalPath(of: url, resolvingLink: resolving)
        return Intent(kind, locator.target(for: path))
    }

    func makeAccess(_ intents: [Intent], contents: Bool = false) -> CoordinatedAccess {
        let relinquished = lock.withLock { batchRelinquished }
        var request = AccessRequest(identity: identity, intents: intents, alreadyRelinquished: relinquished)
        request.messagesContents = contents
        return CoordinatedAccess(coordinator: self, domain: domain, request: request)
    }

    /// Blocks until `access` is granted or has failed.
    func waitForGrant(_ access: CoordinatedAccess) throws {
        let outcome = GrantOutcome()
        access.start(waitTimeout: waitTimeout) { result in outcome.set(result) }
        try outcome.wait()
    }

    /// The URL to hand an accessor: the caller's own spelling unless the item moved (C11) or a
    /// link was resolved (O2).
    static func accessorURL(original: URL, requested: Intent, granted: Intent) -> URL {
        if granted.path == requested.path,
            !requested.kind.readingOptionsValue.contains(.resolvesSymbolicLink)
        {
            return original
        }
        return granted.path.fileURL
    }

    /// Runs `body` with `access` granted and ends the access when it returns or throws (C5).
    /// An accessor that returns normally while another user or host broke the access's
    /// coordination throws `coordinationBroken` instead (docs/sharing.md, docs/cluster.md).
    func withGranted<T>(_ access: CoordinatedAccess, _ body: () throws -> T) throws -> T {
        try waitForGrant(access)
        pushRunning(access)
        let result = Result { try body() }
        popRunning(access)
        access.end()
        if case .success = result, let item = access.broken { throw FileCoordinationError.coordinationBroken(item) }
        return try result.get()
    }

    // MARK: Synchronous coordination (C1–C8, C17)

    /// Reads `url` once no other coordinator writes it and its presenters have saved and
    /// relinquished; `reader` gets the URL to use.
    @discardableResult
    public func coordinate<T>(
        readingItemAt url: URL, options: ReadingOptions = [],
        byAccessor reader: (URL) throws -> T
    ) throws -> T {
        let intent = try engineIntent(url, .reading(options))
        if options.contains(.forUploading) { return try readForUploading(url, intent, reader) }
        let access = makeAccess([intent])
        return try withGranted(access) {
            try reader(Self.accessorURL(original: url, requested: intent, granted: access.grantedIntents[0]))
        }
    }

    /// Writes `url` once nobody else reads or writes it and its presenters have relinquished.
    @discardableResult
    public func coordinate<T>(
        writingItemAt url: URL, options: WritingOptions = [],
        byAccessor writer: (URL) throws -> T
    ) throws -> T {
        let intent = try engineIntent(url, .writing(options))
        let access = makeAccess([intent])
        return try withGranted(access) {
            try writer(Self.accessorURL(original: url, requested: intent, granted: access.grantedIntents[0]))
        }
    }

    /// Reads one item and writes another as one coordination (C7).
    @discardableResult
    public func coordinate<T>(
        readingItemAt readingURL: URL, options readingOptions: ReadingOptions = [],
        writingItemAt writingURL: URL, options writingOptions: WritingOptions = [],
        byAccessor readerWriter: (URL, URL) throws -> T
    ) throws -> T {
        if readingOptions.contains(.forUploading) {
            throw FileCoordinationError.invalidOptions("forUploading is for a single read")
        }
        let intents = [
            try engineIntent(readingURL, .reading(readingOptions)),
            try engineIntent(writingURL, .writing(writingOptions))
        ]
        let access = makeAccess(intents)
        return try withGranted(access) {
            let granted = access.grantedIntents
            return try readerWriter(
                Self.accessorURL(original: readingURL, requested: intents[0], granted: granted[0]),
                Self.accessorURL(original: writingURL, requested: intents[1], granted: granted[1]))
        }
    }

    /// Writes two items as one coordination, a move for instance (C8).
    @discardableResult
    public func coordinate<T>(
        writingItemAt url1: URL, options options1: WritingOptions = [],
        writingItemAt url2: URL, options options2: WritingOptions = [],
        byAccessor writer: (URL, URL) throws -> T
    ) throws -> T {
        let intents = [try engineIntent(url1, .writing(options1)), try engineIntent(url2, .writing(options2))]
        let access = makeAccess(intents)
        return try withGranted(access) {
            let granted = access.grantedIntents
            return try writer(
                Self.accessorURL(original: url1, requested: intents[0], granted: granted[0]),
                Self.accessorURL(original: url2, requested: intents[1], granted: granted[1]))
        }
    }

    // MARK: Prepared batches (C9, C25)

    /// Asks the presenters of all the items, and of everything inside them, once; then runs
    /// `batchAccessor`, whose coordinated calls on this coordinator do not wait on the batch and
    /// do not ask those presenters to relinquish again. The batch ends — and reacquirers run —
    /// when the completion handler passed to `batchAccessor` is called, from any thread.
    public func prepare(
        forReadingItemsAt readingURLs: [URL], options readingOptions: ReadingOptions = [],
        writingItemsAt writingURLs: [URL], options writingOptions: WritingOptions = [],
        byAccessor batchAccessor: (@escaping @Sendable () -> Void) -> Void
    ) throws {
        if readingOptions.contains(.resolvesSymbolicLink) || writingOptions.contains(.forReplacing) {
            throw FileCoordinationError.invalidOptions("prepare does not take resolvesSymbolicLink or forReplacing")
        }
        let intents =
            try readingURLs.map { try engineIntent($0, .reading(readingOptions)) }
            + writingURLs.map { try engineIntent($0, .writing(writingOptions)) }
        if intents.isEmpty { throw FileCoordinationError.emptyIntentList }
        let access = makeAccess(intents, contents: true)
        try waitForGrant(access)
        let relinquished = access.relinquishedPresenters
        let previous = lock.withLock { () -> Set<PresenterID> in
            defer { batchRelinquished.formUnion(relinquished) }
            return batchRelinquished
        }
        let ended = EndOnce { [self] in
            lock.withLock { batchRelinquished = previous }
            access.end()
        }
        batchAccessor { ended.run() }
    }

    // MARK: Moves (C15, C24)

    /// Announces a move; accepted and does nothing, as on Linux there is no sandbox grant to
    /// carry over (C48). Balance it with `item(at:didMoveTo:)`.
    public func item(at oldURL: URL, willMoveTo newURL: URL) {}

    /// Reports that the item at `oldURL` is now at `newURL`. Only inside a coordinated write of
    /// this coordinator (C24): presenters of the item and of everything inside it learn the new
    /// URL, and presenters of the directories around both places learn of the subitem move.
    /// Foundation's signature: a call outside a write, which raises an exception on Apple
    /// platforms, is logged and does nothing; `reportMove(of:to:)` throws instead.
    public func item(at oldURL: URL, didMoveTo newURL: URL) {
        do { try reportMove(of: oldURL, to: newURL) } catch {
            domain.logger.error("item(at: \(oldURL.path), didMoveTo: \(newURL.path)): \(error)")
        }
    }

    /// `item(at:didMoveTo:)` that says why it could not report the move: outside a coordinated
    /// write (`moveReportedOutsideWrite`), or for a URL that is not a file's.
    public func reportMove(of oldURL: URL, to newURL: URL) throws {
        let locator = domain.locator
        let old = try locator.canonicalPath(of: oldURL), new = try locator.canonicalPath(of: newURL)
        let access = lock.withLock {
            running.reversed().first { access in access.grantedIntents.contains { $0.kind.isWrite } }
        }
        guard let access, let grant = access.grantID else { throw FileCoordinationError.moveReportedOutsideWrite }
        // Presenters in this process follow whatever the daemon says; its refusal is thrown after.
        let remoteRefusal: Error?
        do { try access.reportRemoteMove(from: old, to: new); remoteRefusal = nil } catch { remoteRefusal = error }
        // After the rename the item is at `new`; its facts come from there.
        var source = locator.target(for: new)
        source.path = old
        source.enclosingPackages = old.ancestors.reversed().filter { !$0.isRoot && locator.isPackageDirectory($0) }
        let destination = locator.target(for: new)
        do {
            let notifications = try domain.engine.reportMove(in: grant, from: source, to: destination)
            domain.deliver(notifications)
        } catch {
            throw FileCoordinationError.from(error, item: old.string)
        }
        if let remoteRefusal { throw remoteRefusal }
    }

    // MARK: forUploading (O4)

    private func readForUploading<T>(_ url: URL, _ intent: Intent, _ reader: (URL) throws -> T) throws -> T {
        let access = makeAccess([intent])
        let snapshot = try withGranted(access) { try UploadSnapshot(of: access.grantedIntents[0].path) }
        // The item is released: writers need not wait for the upload.
        defer { snapshot.remove() }
        return try reader(snapshot.url)
    }
}

extension AccessKind {
    var readingOptionsValue: ReadingOptions {
        if case .reading(let options) = self { return options } else { return [] }
    }
}

// @unchecked Sendable: its result is behind `lock`.
/// The result of a grant, handed from the thread that resolves it to the one that waits.
final class GrantOutcome: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private var result: Result<CoordinatedAccess, Error>?

    func set(_ result: Result<CoordinatedAccess, Error>) {
        self.result = result
        semaphore.signal()
    }

    func wait() throws {
        semaphore.wait()
        _ = try result!.get()
    }
}

// @unchecked Sendable: its flag is behind `lock`.
/// Runs its action once, however often it is called (completion handlers called twice).
final class EndOnce: @unchecked Sendable {
    private let lock = NSLock()
    private var action: (() -> Void)?
    init(_ action: @escaping () -> Void) { self.action = action }
    func run() {
        let action = lock.withLock { () -> (() -> Void)? in
            defer { self.action = nil }; return self.action
        }
        action?()
    }
}
