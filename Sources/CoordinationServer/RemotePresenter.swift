import Coordination
import CoordinationWire
import FileCoordination
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A watch of a control-socket client, standing in the domain as a presenter: each message
/// becomes an event record on the client's connection, and requests wait for its answer.
/// Requests outside the watch's mask are not put to it (`answeredRequests`), and consented to at
/// once should one come, as for a presenter lacking the callback.
final class RemotePresenter: ExtendedFilePresenter, PathMessagedPresenter, @unchecked Sendable {
    let wd: Int
    let mask: EventMask
    /// The coordinator it stands for: holds its client takes for it pass while it is asked.
    let owner: CoordinatorIdentity
    private weak var connection: ClientConnection?
    private let lock = NSLock()
    private var url: URL
    /// `url`'s path, kept beside it: every event carries it, and `URL.path` takes it apart again.
    private var urlPath: String
    /// Only reacquirers run here: messages are taken inline (`takesMessagesInline`), and answers
    /// come from the socket.
    let presentedItemOperationQueue = OperationQueue()

    init(wd: Int, path: String, mask: EventMask, owner: CoordinatorIdentity, connection: ClientConnection) {
        self.wd = wd
        self.mask = mask
        self.owner = owner
        self.url = URL(fileURLWithPath: path)
        self.urlPath = url.path
        self.connection = connection
        presentedItemOperationQueue.maxConcurrentOperationCount = 1
    }

    var presentedItemURL: URL? { lock.lock(); defer { lock.unlock() }; return url }

    var answeredRequests: PresenterRequest.Kinds {
        let kinds: [(EventMask, PresenterRequest.Kinds)] = [
            (.relinquishToReader, .relinquishToReader), (.relinquishToWriter, .relinquishToWriter),
            (.save, .saveChanges), (.accommodateDeletion, .accommodateDeletion),
            (.accommodateSubitemDeletion, .accommodateSubitemDeletion),
        ]
        return kinds.reduce(into: []) { answered, pair in if mask.contains(pair.0) { answered.insert(pair.1) } }
    }

    /// Every callback only queues a line on the connection's outbox, which never blocks.
    var takesMessagesInline: Bool { true }

    private var path: String { lock.lock(); defer { lock.unlock() }; return urlPath }

    /// The name of the item at `other` as inotify gives it: relative to the watched item when
    /// inside it. (Compared as bytes: Foundation's string search showed in every event's cost.)
    private func name(_ other: String) -> String {
        let base = path.utf8, full = other.utf8
        guard full.count > base.count + 1, full.starts(with: base),
              full[full.index(full.startIndex, offsetBy: base.count)] == UInt8(ascii: "/") else { return other }
        return String(Substring(full.dropFirst(base.count + 1)))
    }

    private static func isDeep(_ name: String) -> Bool { name.utf8.contains(UInt8(ascii: "/")) }

    private func record(_ bits: EventMask, cookie: UInt64, name: String = "", path: String? = nil) -> EventRecord {
        EventRecord(wd: wd, mask: bits, cookie: cookie, name: name, path: path ?? self.path)
    }

    /// Sends a request and calls `answered` with the errno (0 to consent) — at once when the
    /// watch does not want it or the client is gone.
    private func ask(_ bit: EventMask, name: String = "", path: String? = nil,
                     _ answered: @escaping @Sendable (UInt64, Int32) -> Void) {
        guard mask.contains(bit), let connection else { return answered(0, 0) }
        let cookie = connection.nextCookie()
        connection.request(record([bit, .request], cookie: cookie, name: name, path: path)) { answered(cookie, $0) }
    }

    private func tell(_ bit: EventMask, cookie: UInt64 = 0, name: String = "", path: String? = nil) {
        guard mask.contains(bit), let connection else { return }
        // Items deep inside a watched directory: only if the client could list their directory.
        if Self.isDeep(name), let path, !connection.mayLearn(of: path) { return }
        connection.send(.event(record(bit, cookie: cookie, name: name, path: path)))
    }

    private static func error(_ code: Int32) -> Error? {
        code == 0 ? nil : POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
    }

    // MARK: Requests

    func relinquishPresentedItem(toWriter: Bool, completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void) {
        ask(toWriter ? .relinquishToWriter : .relinquishToReader) { cookie, code in
            if code != 0 { return completion(Self.error(code), nil) }
            if cookie == 0 { return completion(nil, nil) }
            // Strong: an access that deletes the item removes its watch (`presentedItemWasDeleted`)
            // before it ends, and the reacquirer is still due then.
            let reacquire: @Sendable () -> Void = { self.tell(.reacquire, cookie: cookie) }
            completion(nil, reacquire)
        }
    }

    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        relinquishPresentedItem(toWriter: false) { _, reacquirer in reader(reacquirer) }
    }

    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        relinquishPresentedItem(toWriter: true) { _, reacquirer in writer(reacquirer) }
    }

    func savePresentedItemChanges(completionHandler: @escaping @Sendable (Error?) -> Void) {
        ask(.save) { _, code in completionHandler(Self.error(code)) }
    }

    func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable (Error?) -> Void) {
        ask(.accommodateDeletion) { _, code in completionHandler(Self.error(code)) }
    }

    func accommodatePresentedSubitemDeletion(at url: URL, completionHandler: @escaping @Sendable (Error?) -> Void) {
        accommodateSubitemDeletion(at: url.path, completionHandler)
    }

    private func accommodateSubitemDeletion(at itemPath: String, _ completionHandler: @escaping @Sendable (Error?) -> Void) {
        let itemName = name(itemPath)
        if let connection, Self.isDeep(itemName), !connection.mayLearn(of: itemPath) { return completionHandler(nil) }
        ask(.accommodateSubitemDeletion, name: itemName, path: itemPath) { _, code in completionHandler(Self.error(code)) }
    }

    /// The engine's requests as paths (`PathMessagedPresenter`).
    func asked(_ request: PresenterRequest, completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void) {
        switch request {
        case .relinquishToReader: relinquishPresentedItem(toWriter: false, completion: completion)
        case .relinquishToWriter: relinquishPresentedItem(toWriter: true, completion: completion)
        case .saveChanges: savePresentedItemChanges { completion($0, nil) }
        case .accommodateDeletion: accommodatePresentedItemDeletion { completion($0, nil) }
        case .accommodateSubitemDeletion(let item): accommodateSubitemDeletion(at: item.string) { completion($0, nil) }
        }
    }

    // MARK: Notifications

    /// The engine's notifications as paths (`PathMessagedPresenter`): the callbacks below, without
    /// making a URL of each path only to take it apart again.
    func presented(_ notification: PresenterNotification) {
        switch notification {
        case .didMove(let newPath): itemDidMove(to: newPath.string)
        case .didChange: presentedItemDidChange()
        case .subitemDidAppear(let item): tell(.subitemAppeared, name: name(item.string), path: item.string)
        case .subitemDidMove(let from, let to): subitem(at: from.string, didMoveTo: to.string)
        case .subitemDidChange(let item): tell(.subitemChanged, name: name(item.string), path: item.string)
        case .subitemWasDeleted(let item): tell(.subitemDeleted, name: name(item.string), path: item.string)
        case .itemWasDeleted: presentedItemWasDeleted()
        case .coordinationWasBroken: tell(.broken)
        }
    }

    func presentedItemDidMove(to newURL: URL) { itemDidMove(to: newURL.path) }

    private func itemDidMove(to newPath: String) {
        let old = path
        let cookie = connection?.nextCookie() ?? 0
        lock.lock(); url = URL(fileURLWithPath: newPath); urlPath = newPath; lock.unlock()
        tell(.movedFrom, cookie: cookie, path: old)
        tell(.movedTo, cookie: cookie, path: newPath)
    }

    func presentedItemDidChange() { tell(.changed) }

    func presentedSubitemDidAppear(at url: URL) { tell(.subitemAppeared, name: name(url.path), path: url.path) }

    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) { subitem(at: oldURL.path, didMoveTo: newURL.path) }

    private func subitem(at oldPath: String, didMoveTo newPath: String) {
        let cookie = connection?.nextCookie() ?? 0
        tell(.movedFrom, cookie: cookie, name: name(oldPath), path: oldPath)
        tell(.movedTo, cookie: cookie, name: name(newPath), path: newPath)
    }

    func presentedSubitemDidChange(at url: URL) { tell(.subitemChanged, name: name(url.path), path: url.path) }

    func presentedSubitemWasDeleted(at url: URL) { tell(.subitemDeleted, name: name(url.path), path: url.path) }

    func presentedItemWasDeleted() {
        tell(.presenterRemoved)
        connection?.removeWatch(wd)
    }
}
