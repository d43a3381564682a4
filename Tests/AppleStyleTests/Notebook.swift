// Written as it would be for Apple platforms: only the import of FileCoordination is added.
// Foundation's signatures throughout — `error: &error`, `item(at:didMoveTo:)` without `try`,
// the presenter's callbacks as the current SDK declares them, and NSError's domain and codes.
import FileCoordination
import Foundation

// @unchecked Sendable: written as for Apple platforms, where NSFilePresenter objects are used from their queue.
/// A document that presents its file: it saves before others read, steps aside for writers and
/// follows its file when it moves.
final class Notebook: NSObject, NSFilePresenter, @unchecked Sendable {
    private let lock = NSLock()
    private var url: URL?
    private var log: [String] = []
    let presentedItemOperationQueue: OperationQueue = {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        return queue
    }()

    init(url: URL) {
        self.url = url
        super.init()
        NSFileCoordinator.addFilePresenter(self)
    }

    func close() { NSFileCoordinator.removeFilePresenter(self) }

    var presentedItemURL: URL? { lock.lock(); defer { lock.unlock() }; return url }

    var events: [String] { lock.lock(); defer { lock.unlock() }; return log }

    private func note(_ event: String) { lock.lock(); log.append(event); lock.unlock() }

    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        note("relinquish to writer")
        writer { [weak self] in self?.note("reacquire") }
    }

    func savePresentedItemChanges(completionHandler: @escaping @Sendable (Error?) -> Void) {
        note("save")
        completionHandler(nil)
    }

    func presentedItemDidChange() { note("did change") }

    func presentedItemDidMove(to newURL: URL) {
        lock.lock(); url = newURL; lock.unlock()
        note("did move to \(newURL.lastPathComponent)")
    }

    func presentedItemDidGain(_ version: NSFileVersion) {
        note(version.isConflict ? "conflict from \(version.localizedNameOfSavingComputer ?? "?")" : "version")
    }

    func presentedItemDidResolveConflict(_ version: NSFileVersion) { note("conflict resolved") }
}

/// Coordinated reads and writes as Apple's documentation shows them.
enum NotebookStore {
    /// Apple's way to settle conflicts: keep the current version, mark the others resolved and
    /// remove them, inside a coordinated write.
    static func resolveConflicts(_ url: URL) -> NSError? {
        var error: NSError?
        var failure: NSError?
        NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: [], error: &error) { url in
            for version in NSFileVersion.unresolvedConflictVersionsOfItem(at: url) ?? [] {
                version.isResolved = true
            }
            do { try NSFileVersion.removeOtherVersionsOfItem(at: url) } catch { failure = error as NSError }
        }
        return error ?? failure
    }

    static func read(_ url: URL, error: NSErrorPointer) -> String? {
        var text: String?
        NSFileCoordinator(filePresenter: nil).coordinate(readingItemAt: url, options: [], error: error) { url in
            text = try? String(contentsOf: url, encoding: .utf8)
        }
        return text
    }

    static func write(_ text: String, to url: URL) -> NSError? {
        var error: NSError?
        NSFileCoordinator(filePresenter: nil).coordinate(writingItemAt: url, options: .forReplacing, error: &error) {
            url in
            try? text.write(to: url, atomically: true, encoding: .utf8)
        }
        return error
    }

    static func move(_ source: URL, to destination: URL) -> NSError? {
        var error: NSError?
        let coordinator = NSFileCoordinator(filePresenter: nil)
        coordinator.coordinate(
            writingItemAt: source, options: .forMoving, writingItemAt: destination,
            options: .forReplacing, error: &error
        ) { from, to in
            coordinator.item(at: from, willMoveTo: to)
            try? FileManager.default.moveItem(at: from, to: to)
            coordinator.item(at: from, didMoveTo: to)
        }
        return error
    }

    static func copy(_ source: URL, to destination: URL) -> NSError? {
        var error: NSError?
        NSFileCoordinator(filePresenter: nil).coordinate(
            readingItemAt: source, options: [], writingItemAt: destination,
            options: .forReplacing, error: &error
        ) { from, to in
            try? FileManager.default.copyItem(at: from, to: to)
        }
        return error
    }

    static func prepareBoth(_ first: URL, _ second: URL) -> (ran: Bool, error: NSError?) {
        var error: NSError?
        var ran = false
        NSFileCoordinator(filePresenter: nil).prepare(
            forReadingItemsAt: [first], options: [], writingItemsAt: [second],
            options: [], error: &error
        ) { completionHandler in
            ran = true
            completionHandler()
        }
        return (ran, error)
    }
}
