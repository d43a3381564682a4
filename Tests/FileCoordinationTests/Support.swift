import Coordination
import Dispatch
import FileCoordination
import Foundation
import TestSupport
import Testing

// @unchecked Sendable: its domain and directory are set once; the log is thread-safe.
/// A domain of its own, a temporary directory, and helpers; each test makes one, so tests run
/// in parallel without seeing each other.
final class Fixture: @unchecked Sendable {
    let domain = CoordinationDomain()
    let root: URL
    let log = EventLog()

    init(presenterTimeout: Duration = .seconds(5), waitTimeout: Duration? = .seconds(10)) throws {
        domain.presenterTimeout = presenterTimeout
        domain.defaultWaitTimeout = waitTimeout
        let base = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "coordfs-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        // Canonical from the start, so URLs compare equal to what coordination hands back.
        root = URL(fileURLWithPath: base.resolvingSymlinksInPath().path)
    }

    deinit { try? FileManager.default.removeItem(at: root) }

    var engine: CoordinationEngine { domain.engine }

    func coordinator(_ presenter: FilePresenter? = nil) -> FileCoordinator {
        FileCoordinator(filePresenter: presenter, domain: domain)
    }

    /// A URL under the fixture's root; nothing is created.
    func url(_ relative: String) -> URL { root.appendingPathComponent(relative) }

    /// Creates a file (and its directories) with `contents`.
    @discardableResult
    func file(_ relative: String, _ contents: String = "x") throws -> URL {
        let url = self.url(relative)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(contents.utf8).write(to: url)
        return url
    }

    /// Creates a directory (and its parents).
    @discardableResult
    func directory(_ relative: String) throws -> URL {
        let url = self.url(relative)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Creates a file package: a directory with the marker file.
    @discardableResult
    func package(_ relative: String) throws -> URL {
        let url = try directory(relative)
        try Data().write(to: url.appendingPathComponent(".coordfs-package"))
        return url
    }

    func presenter(_ name: String, _ relative: String?) -> LoggingPresenter {
        let presenter = LoggingPresenter(name: name, url: relative.map(url), log: log)
        domain.addFilePresenter(presenter)
        return presenter
    }

    /// Waits until the engine shows `count` waiting requests: proof that a call is blocked.
    func waitForWaiters(_ count: Int, timeout: Duration = .seconds(10)) -> Bool {
        eventually(timeout) { self.engine.snapshot().waiters.count == count }
    }

    var isIdle: Bool { engine.snapshot().isIdle }
}

struct PresenterRefusal: Error, Equatable { let code: Int }

// @unchecked Sendable: its task is set in init, before another thread sees it.
/// An access held open on a background thread until `release()`: it logs "<name>-start" once
/// its accessor runs and "<name>-end" just before the accessor returns.
final class Holding: @unchecked Sendable {
    let name: String
    private let gate = Gate()
    private var task: Background<Void>!

    init(
        _ fixture: Fixture, _ name: String, coordinator: FileCoordinator? = nil,
        _ access: @escaping (FileCoordinator, _ inside: () -> Void) throws -> Void
    ) {
        self.name = name
        let coordinator = coordinator ?? fixture.coordinator()
        let gate = self.gate
        let log = fixture.log
        task = Background {
            try access(coordinator) {
                log.add("\(name)-start")
                gate.wait()
                log.add("\(name)-end")
            }
        }
    }

    /// Waits until the accessor runs; false if it did not within the timeout.
    func started(_ fixture: Fixture) -> Bool { fixture.log.waitFor("\(name)-start") }

    func release() throws {
        gate.open()
        try task.join()
    }

    /// Waits for the access to end by itself (a failure, say) and returns what it threw.
    func outcome() -> Error? {
        do { try task.join(); return nil } catch { return error }
    }
}

extension Fixture {
    func holdWrite(
        _ name: String, _ url: URL, _ options: FileCoordinator.WritingOptions = [],
        coordinator: FileCoordinator? = nil
    ) -> Holding {
        Holding(self, name, coordinator: coordinator) { c, inside in
            try c.coordinate(writingItemAt: url, options: options) { _ in inside() }
        }
    }

    func holdRead(
        _ name: String, _ url: URL, _ options: FileCoordinator.ReadingOptions = [],
        coordinator: FileCoordinator? = nil
    ) -> Holding {
        Holding(self, name, coordinator: coordinator) { c, inside in
            try c.coordinate(readingItemAt: url, options: options) { _ in inside() }
        }
    }

    /// A read on a background thread that logs "<name>-run" when its accessor runs.
    func read(
        _ name: String, _ url: URL, _ options: FileCoordinator.ReadingOptions = [],
        coordinator: FileCoordinator? = nil
    ) -> Background<Void> {
        let coordinator = coordinator ?? self.coordinator()
        let log = self.log
        return Background {
            try coordinator.coordinate(readingItemAt: url, options: options) { _ in log.add("\(name)-run") }
        }
    }

    /// A write on a background thread that logs "<name>-run" when its accessor runs.
    func write(
        _ name: String, _ url: URL, _ options: FileCoordinator.WritingOptions = [],
        coordinator: FileCoordinator? = nil
    ) -> Background<Void> {
        let coordinator = coordinator ?? self.coordinator()
        let log = self.log
        return Background {
            try coordinator.coordinate(writingItemAt: url, options: options) { _ in log.add("\(name)-run") }
        }
    }
}
