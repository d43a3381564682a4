import Coordination
import CoordinationRuntime
import Foundation

extension FileCoordinator {
    // MARK: Coordination on an operation queue (C10, Q1)

    /// Waits for all `intents` without blocking the caller, then runs `accessor` on `queue`:
    /// with nil once access is granted — each intent's `url` is then the location to use — or
    /// with the error that stopped it. The access ends when `accessor` returns (C36).
    public func coordinate(
        with intents: [FileAccessIntent], queue: OperationQueue,
        byAccessor accessor: @escaping @Sendable (Error?) -> Void
    ) {
        let access: CoordinatedAccess
        do {
            access = try makeAccess(for: intents)
        } catch {
            queue.addOperation { accessor(error) }
            return
        }
        access.start(waitTimeout: waitTimeout) { [self] result in
            switch result {
            case .failure(let error):
                queue.addOperation { accessor(error) }
            case .success:
                queue.addOperation { [self] in
                    let snapshots: [UploadSnapshot]
                    do { snapshots = try apply(access, to: intents) } catch {
                        access.end()
                        return accessor(error)
                    }
                    pushRunning(access)
                    accessor(nil)
                    popRunning(access)
                    snapshots.forEach { $0.remove() }
                    access.end()
                }
            }
        }
    }

    func makeAccess(for intents: [FileAccessIntent]) throws -> CoordinatedAccess {
        if intents.isEmpty { throw FileCoordinationError.emptyIntentList }
        return makeAccess(try intents.map { try engineIntent($0.url, $0.kind) })
    }

    /// Points each intent at its item's location after moves made while waiting (C11), or, for
    /// a forUploading read, at a snapshot of it (O4). The snapshots are the caller's to remove
    /// when the accessor returns. (Here the item stays held until then: a call's intents are
    /// released together.)
    func apply(_ access: CoordinatedAccess, to intents: [FileAccessIntent]) throws -> [UploadSnapshot] {
        var snapshots: [UploadSnapshot] = []
        do {
            for (intent, (requested, granted)) in zip(intents, zip(access.request.intents, access.grantedIntents)) {
                if requested.kind.readingOptionsValue.contains(.forUploading) {
                    let snapshot = try UploadSnapshot(of: granted.path)
                    snapshots.append(snapshot)
                    intent.update(url: snapshot.url)
                } else {
                    intent.update(url: Self.accessorURL(original: intent.url, requested: requested, granted: granted))
                }
            }
        } catch {
            snapshots.forEach { $0.remove() }
            throw error
        }
        return snapshots
    }

    // MARK: Swift concurrency

    /// Waits for all `intents` — cancelling the task cancels the wait (C13) — then runs
    /// `accessor`; the access ends when it returns. The accessor runs in the caller's isolation
    /// (a `@MainActor` model's accessor may touch its state), so it need not be `@Sendable`.
    public func coordinate<T>(
        with intents: [FileAccessIntent], isolation: isolated (any Actor)? = #isolation,
        byAccessor accessor: () async throws -> T
    ) async throws -> T {
        let access = try makeAccess(for: intents)
        try await grant(access)
        let snapshots: [UploadSnapshot]
        do { snapshots = try apply(access, to: intents) } catch {
            access.end()
            throw error
        }
        pushRunning(access)
        let result: Result<T, Error>
        do { result = .success(try await accessor()) } catch { result = .failure(error) }
        popRunning(access)
        snapshots.forEach { $0.remove() }
        access.end()
        if case .success = result, let item = access.broken { throw FileCoordinationError.coordinationBroken(item) }
        return try result.get()
    }

    /// A coordinated read of `url` that suspends instead of blocking while it waits; cancelling
    /// the task cancels the wait. (Not spelled `coordinate(readingItemAt:)`: a synchronous
    /// closure would pick the blocking overload, which no task cancellation can reach.)
    public func read<T>(
        at url: URL, options: ReadingOptions = [], isolation: isolated (any Actor)? = #isolation,
        byAccessor reader: (URL) async throws -> T
    ) async throws -> T {
        let intent = FileAccessIntent.readingIntent(with: url, options: options)
        return try await coordinate(with: [intent], isolation: isolation) { try await reader(intent.url) }
    }

    /// A coordinated write of `url` that suspends instead of blocking while it waits.
    public func write<T>(
        at url: URL, options: WritingOptions = [], isolation: isolated (any Actor)? = #isolation,
        byAccessor writer: (URL) async throws -> T
    ) async throws -> T {
        let intent = FileAccessIntent.writingIntent(with: url, options: options)
        return try await coordinate(with: [intent], isolation: isolation) { try await writer(intent.url) }
    }

    private func grant(_ access: CoordinatedAccess) async throws {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                if Task.isCancelled { access.cancel() }
                access.start(waitTimeout: waitTimeout) { result in
                    continuation.resume(with: result.map { _ in () })
                }
            }
        } onCancel: {
            access.cancel()
        }
    }
}

// @unchecked Sendable: Operation's state and its own are behind `lock`.
/// A coordinated access as an `Operation`: it becomes ready when its dependencies finish (Q2),
/// waits for its intents without occupying a queue thread, runs `accessor` once they are granted
/// and finishes when the access ends (Q4). Cancelled before or while waiting, it finishes
/// without running `accessor`, with `error` set to the cancellation (Q3).
public final class CoordinatedAccessOperation: Operation, @unchecked Sendable {
    /// The coordinator whose access this is.
    public let coordinator: FileCoordinator
    /// The intents it waits for; their URLs follow moves made meanwhile (C11).
    public let intents: [FileAccessIntent]
    private let accessor: ([FileAccessIntent]) throws -> Void

    private let stateLock = NSLock()
    private var _executing = false
    private var _finished = false
    private var _error: Error?
    private var access: CoordinatedAccess?

    /// An operation that coordinates `intents` with `coordinator` and then runs `accessor`.
    public init(
        coordinator: FileCoordinator, intents: [FileAccessIntent],
        accessor: @escaping ([FileAccessIntent]) throws -> Void
    ) {
        self.coordinator = coordinator
        self.intents = intents
        self.accessor = accessor
    }

    /// Why the access did not happen or failed; nil after a successful access.
    public var error: Error? { stateLock.withLock { _error } }

    /// True: the operation waits for its grant without a thread.
    public override var isAsynchronous: Bool { true }
    /// True from the start until the access has ended.
    public override var isExecuting: Bool { stateLock.withLock { _executing } }
    /// True once the access has ended, or failed (`error`).
    public override var isFinished: Bool { stateLock.withLock { _finished } }

    /// Starts waiting for the intents; the accessor runs once they are granted.
    public override func start() {
        if isCancelled {
            finish(with: CocoaError(.userCancelled))
            return
        }
        setExecuting()
        let access: CoordinatedAccess
        do {
            access = try coordinator.makeAccess(for: intents)
        } catch {
            finish(with: error)
            return
        }
        stateLock.withLock { self.access = access }
        if isCancelled { access.cancel() }
        access.start(waitTimeout: coordinator.waitTimeout) { [self] result in
            switch result {
            case .failure(let error):
                finish(with: error)
            case .success:
                if isCancelled {
                    access.end()
                    finish(with: CocoaError(.userCancelled))
                    return
                }
                var failure: Error?
                do {
                    let snapshots = try coordinator.apply(access, to: intents)
                    coordinator.pushRunning(access)
                    defer {
                        coordinator.popRunning(access)
                        snapshots.forEach { $0.remove() }
                    }
                    try accessor(intents)
                } catch {
                    failure = error
                }
                access.end()
                finish(with: failure ?? access.broken.map { FileCoordinationError.coordinationBroken($0) })
            }
        }
    }

    /// Stops a wait still going on (the accessor then does not run); a running accessor goes on.
    public override func cancel() {
        super.cancel()
        stateLock.withLock { access }?.cancel()
    }

    private func setExecuting() {
        willChangeValue(forKey: "isExecuting")
        stateLock.withLock { _executing = true }
        didChangeValue(forKey: "isExecuting")
    }

    private func finish(with error: Error?) {
        willChangeValue(forKey: "isExecuting")
        willChangeValue(forKey: "isFinished")
        stateLock.withLock {
            _error = error
            _executing = false
            _finished = true
        }
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
    }
}
