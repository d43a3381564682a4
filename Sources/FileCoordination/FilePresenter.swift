import CoordinationRuntime
import Foundation

/// An object that presents an item to its user and wants to hear about, and have a say in,
/// other coordinators' accesses to it — Foundation's `NSFilePresenter`.
///
/// Every message runs as an operation on `presentedItemOperationQueue` (P2). All members but
/// the two required properties have default implementations that do what Apple does for a
/// presenter lacking them: consent at once, have nothing to save, and ignore news.
public protocol FilePresenter: AnyObject {
    /// The presented item; nil when it does not exist yet (C22, P1). Read on any thread.
    var presentedItemURL: URL? { get }
    /// The primary item this secondary item belongs to; messaged for it too (P3).
    var primaryPresentedItemURL: URL? { get }
    /// The queue every message runs on.
    var presentedItemOperationQueue: OperationQueue { get }

    /// Another coordinator is about to read: prepare, then call `reader`, optionally with a
    /// reacquirer that runs once that read has ended (P4).
    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void)
    /// Another coordinator is about to write: stop editing, then call `writer` (P5).
    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void)
    /// Save unsaved changes, then call the handler with nil or an error that fails the access (P6).
    func savePresentedItemChanges(completionHandler: @escaping @Sendable (Error?) -> Void)
    /// The item is about to be deleted or replaced; an error fails the access (P7).
    func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable (Error?) -> Void)
    /// The item moved; return the new URL from `presentedItemURL` from now on (P8).
    func presentedItemDidMove(to newURL: URL)
    /// Another coordinator changed the item (files and packages only, P9, P19).
    func presentedItemDidChange()
    /// An item appeared inside the presented directory (P10).
    func presentedSubitemDidAppear(at url: URL)
    /// An item inside the presented directory moved (P11).
    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL)
    /// An item inside the presented directory changed (P12).
    func presentedSubitemDidChange(at url: URL)
    /// An item inside the presented directory or package is about to be deleted (P13).
    func accommodatePresentedSubitemDeletion(at url: URL, completionHandler: @escaping @Sendable (Error?) -> Void)

    /// The item gained a version: one kept as a conflict (its content was replaced by a writer
    /// that had not seen it, a lost update; `version.isConflict`), or one a program added (P18).
    func presentedItemDidGain(_ version: FileVersion)
    /// A version of the item was removed (P18).
    func presentedItemDidLose(_ version: FileVersion)
    /// A conflict version of the item was marked resolved (P18).
    func presentedItemDidResolveConflict(_ version: FileVersion)
    /// An item inside the presented directory gained a version (P18).
    func presentedSubitem(at url: URL, didGain version: FileVersion)
    /// An item inside the presented directory lost a version (P18).
    func presentedSubitem(at url: URL, didLose version: FileVersion)
    /// A conflict version of an item inside the presented directory was resolved (P18).
    func presentedSubitem(at url: URL, didResolve version: FileVersion)

    /// iCloud's: the ubiquity attributes the presenter wants to hear of. Linux has no ubiquitous
    /// items: a presenter that names any is reported at registration (`CoordinationReport.neverCalled`).
    var observedPresentedItemUbiquityAttributes: Set<URLResourceKey> { get }
    /// iCloud's; never called on Linux, which has no ubiquitous items.
    func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>)
    /// The item's local content is about to be evicted: a coordinated write with the
    /// `forEvicting` option (a sync client that keeps files on demand; `coordfs coordinate
    /// --write-option forEvicting`). Call the handler with nil to allow it, with an error to
    /// refuse it (P33).
    func accommodatePresentedItemEviction(completionHandler: @escaping @Sendable (Error?) -> Void)
}

extension FilePresenter {
    /// None: the presenter presents its item alone.
    public var primaryPresentedItemURL: URL? { nil }

    /// Consents at once, with no reacquirer.
    public func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        reader(nil)
    }
    /// Consents at once, with no reacquirer.
    public func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        writer(nil)
    }
    /// Has nothing to save.
    public func savePresentedItemChanges(completionHandler: @escaping @Sendable (Error?) -> Void) {
        completionHandler(nil)
    }
    /// Consents at once.
    public func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable (Error?) -> Void) {
        completionHandler(nil)
    }
    /// Consents at once.
    public func accommodatePresentedSubitemDeletion(
        at url: URL, completionHandler: @escaping @Sendable (Error?) -> Void
    ) {
        completionHandler(nil)
    }
    /// Ignores the news.
    public func presentedItemDidMove(to newURL: URL) { UnimplementedCallback.note() }
    /// Ignores the news.
    public func presentedItemDidChange() { UnimplementedCallback.note() }
    /// Ignores the news (a package's presenter gets did-change instead, P20).
    public func presentedSubitemDidAppear(at url: URL) { UnimplementedCallback.note() }
    /// Ignores the news (a package's presenter gets did-change instead, P20).
    public func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) { UnimplementedCallback.note() }
    /// Ignores the news (a package's presenter gets did-change instead, P20).
    public func presentedSubitemDidChange(at url: URL) { UnimplementedCallback.note() }
    /// Ignores the news.
    public func presentedItemDidGain(_ version: FileVersion) {}
    /// Ignores the news.
    public func presentedItemDidLose(_ version: FileVersion) {}
    /// Ignores the news.
    public func presentedItemDidResolveConflict(_ version: FileVersion) {}
    /// Ignores the news.
    public func presentedSubitem(at url: URL, didGain version: FileVersion) {}
    /// Ignores the news.
    public func presentedSubitem(at url: URL, didLose version: FileVersion) {}
    /// Ignores the news.
    public func presentedSubitem(at url: URL, didResolve version: FileVersion) {}
    /// None.
    public var observedPresentedItemUbiquityAttributes: Set<URLResourceKey> { [] }
    /// Ignores the news (never sent on Linux).
    public func presentedItemDidChangeUbiquityAttributes(_ attributes: Set<URLResourceKey>) {}
    /// Refuses, as on Apple platforms, where an item whose presenter does not implement this
    /// is not evicted (P33).
    public func accommodatePresentedItemEviction(completionHandler: @escaping @Sendable (Error?) -> Void) {
        completionHandler(
            CocoaError(
                .featureUnsupported,
                userInfo: [
                    NSLocalizedDescriptionKey: "the presenter of this item does not accommodate eviction"
                ]))
    }
}

/// Swift cannot ask whether a protocol method is implemented, yet a package presenter lacking a
/// subitem notification must get did-change instead (P20). The default implementations leave a
/// mark on the calling thread; the messenger looks for it right after the call.
enum UnimplementedCallback {
    private static let key = "org.coordfs.unimplemented-callback"

    static func note() { Thread.current.threadDictionary[key] = true }

    /// Runs `call` and tells whether it reached a default implementation.
    static func reachedDefault(_ call: () -> Void) -> Bool {
        let dictionary = Thread.current.threadDictionary
        dictionary[key] = nil
        call()
        let reached = dictionary[key] != nil
        dictionary[key] = nil
        return reached
    }
}
