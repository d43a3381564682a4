import Dispatch
import FileCoordination
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// Helpers every test target shares: waiting for a condition, an ordered event record, gates and
// background threads.

/// Polls `condition` until it holds or `timeout` passes.
public func eventually(_ timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        usleep(2_000)
    }
    return condition()
}

// @unchecked Sendable: its storage is behind `lock`.
/// An ordered, thread-safe record of what happened.
public final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [String] = []

    public init() {}

    public func add(_ event: String) { lock.lock(); storage.append(event); lock.unlock() }
    public var events: [String] { lock.lock(); defer { lock.unlock() }; return storage }

    public func index(of event: String) -> Int? { events.firstIndex(of: event) }
    public func contains(_ event: String) -> Bool { events.contains(event) }
    public func count(_ event: String) -> Int { events.filter { $0 == event }.count }
    public func matching(_ prefix: String) -> [String] { events.filter { $0.hasPrefix(prefix) } }

    /// True when `first` was logged before `second` (both logged).
    public func order(_ first: String, before second: String) -> Bool {
        guard let a = index(of: first), let b = index(of: second) else { return false }
        return a < b
    }

    public func waitFor(_ event: String, timeout: Duration = .seconds(10)) -> Bool {
        eventually(timeout) { self.contains(event) }
    }
}

// @unchecked Sendable: a semaphore, which is thread-safe.
/// A gate a test opens once: accessors wait on it to hold their access open.
public final class Gate: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    public init() {}
    public func open() { semaphore.signal() }
    public func wait() { semaphore.wait(); semaphore.signal() }
}

// @unchecked Sendable: `result` is written before `done` is signalled and read after it is waited for.
/// Runs `body` on a new thread; `join()` waits for it and returns what it returned or threw.
public final class Background<T>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: Result<T, Error>?

    public init(_ body: @escaping () throws -> T) {
        // The body runs on the new thread alone; the test that made it waits for it in `join`.
        nonisolated(unsafe) let body = body
        let thread = Thread { [self] in
            result = Result { try body() }
            done.signal()
        }
        thread.start()
    }

    public func join(timeout: Duration = .seconds(20)) throws -> T {
        guard done.wait(timeout: .now() + timeout.seconds) == .success else { throw TestTimeout() }
        done.signal()
        return try result!.get()
    }

    public var isFinished: Bool {
        guard done.wait(timeout: .now()) == .success else { return false }
        done.signal()
        return true
    }
}

public struct TestTimeout: Error {
    public init() {}
}

extension Duration {
    public var seconds: Double {
        let (s, a) = components
        return Double(s) + Double(a) / 1e18
    }
}

// @unchecked Sendable: immutable but for its thread-safe log.
/// A presenter that implements only did-change, as many package presenters do (P20).
public final class ChangeOnlyPresenter: FilePresenter, @unchecked Sendable {
    public let presentedItemURL: URL?
    public let presentedItemOperationQueue = OperationQueue()
    let log: EventLog
    let name: String
    public init(name: String, url: URL, log: EventLog) {
        self.name = name
        self.presentedItemURL = url
        self.log = log
    }
    public func presentedItemDidChange() { log.add("\(name):didChange") }
}
