import FileCoordination
import Foundation

// @unchecked Sendable: its URL is behind `lock`; the rest is set before it is registered.
/// A presenter that logs every message as "<name>:<message>", optionally answering with errors,
/// handing back reacquirers, or following moves. A move is logged with the full new path
/// ("<name>:didMove /full/path"), so a test can tell where the item went; a subitem, by its last
/// path component.
public final class LoggingPresenter: FilePresenter, @unchecked Sendable {
    public let name: String
    public let log: EventLog
    public let presentedItemOperationQueue: OperationQueue
    private let lock = NSLock()
    private var url: URL?
    public var primaryURL: URL?
    public var saveError: Error?
    /// Answers both the item's deletion and a subitem's.
    public var deletionError: Error?
    public var evictionError: Error?
    /// Hands a reacquirer to relinquish, which logs "<name>:reacquire" once the access has ended.
    public var givesReacquirer: Bool
    public var followsMoves = true
    /// Runs inside savePresentedItemChanges before it answers.
    public var onSave: (() -> Void)?
    /// Set when a message ran off the presenter's queue (P2).
    public private(set) var ranOffQueue = false

    public init(name: String, url: URL?, log: EventLog, givesReacquirer: Bool = false) {
        self.name = name
        self.url = url
        self.log = log
        self.givesReacquirer = givesReacquirer
        presentedItemOperationQueue = OperationQueue()
        presentedItemOperationQueue.maxConcurrentOperationCount = 1
        presentedItemOperationQueue.name = "presenter \(name)"
    }

    public var presentedItemURL: URL? {
        get { lock.lock(); defer { lock.unlock() }; return url }
        set { lock.lock(); url = newValue; lock.unlock() }
    }
    public var primaryPresentedItemURL: URL? { primaryURL }

    private func note(_ message: String) {
        if OperationQueue.current !== presentedItemOperationQueue { ranOffQueue = true }
        log.add("\(name):\(message)")
    }

    private var reacquirer: (@Sendable () -> Void)? {
        guard givesReacquirer else { return nil }
        return { [self] in note("reacquire") }
    }

    public func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        note("relinquishToReader")
        reader(reacquirer)
    }
    public func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        note("relinquishToWriter")
        writer(reacquirer)
    }
    public func savePresentedItemChanges(completionHandler: @escaping @Sendable (Error?) -> Void) {
        note("save")
        onSave?()
        completionHandler(saveError)
    }
    public func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable (Error?) -> Void) {
        note("accommodateDeletion")
        completionHandler(deletionError)
    }
    public func accommodatePresentedSubitemDeletion(
        at url: URL, completionHandler: @escaping @Sendable (Error?) -> Void
    ) {
        note("accommodateSubitemDeletion \(url.lastPathComponent)")
        completionHandler(deletionError)
    }
    public func accommodatePresentedItemEviction(completionHandler: @escaping @Sendable (Error?) -> Void) {
        note("accommodateEviction")
        completionHandler(evictionError)
    }
    public func presentedItemDidMove(to newURL: URL) {
        note("didMove \(newURL.path)")
        if followsMoves { presentedItemURL = newURL }
    }
    public func presentedItemDidChange() { note("didChange") }
    public func presentedSubitemDidAppear(at url: URL) { note("subitemDidAppear \(url.lastPathComponent)") }
    public func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) {
        note("subitemDidMove \(oldURL.lastPathComponent) \(newURL.lastPathComponent)")
    }
    public func presentedSubitemDidChange(at url: URL) { note("subitemDidChange \(url.lastPathComponent)") }
}
