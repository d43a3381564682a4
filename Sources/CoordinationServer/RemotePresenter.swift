import Coordination
import CoordinationWire
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its path is behind `lock`; the connection is thread-safe.
/// A watch of a control-socket client, standing in the domain as a presenter: each message
/// becomes an event record on the client's connection, and requests wait for its answer.
/// Requests outside the watch's mask are not put to it (`answeredRequests`), and consented to at
/// once should one come, as for a presenter lacking the callback. Every message only queues a
/// line on the connection's outbox, which never blocks: it is taken on the sender's thread.
final class RemotePresenter: Presenter, @unchecked Sendable {
    let wd: Int
    let mask: EventMask
    /// The coordinator it stands for: holds its client takes for it pass while it is asked.
    let owner: CoordinatorIdentity
    private weak var connection: ClientConnection?
    private let lock = NSLock()
    /// The watched item's path; it follows the item's moves.
    private var itemPath: String

    init(wd: Int, path: String, mask: EventMask, owner: CoordinatorIdentity, connection: ClientConnection) {
        self.wd = wd
        self.mask = mask
        self.owner = owner
        self.itemPath = path
        self.connection = connection
    }

    func presentedPaths(_ locator: ItemLocator) -> (item: ItemPath?, primary: ItemPath?) { (ItemPath(path), nil) }

    var answeredRequests: PresenterRequest.Kinds {
        let kinds: [(EventMask, PresenterRequest.Kinds)] = [
            (.relinquishToReader, .relinquishToReader), (.relinquishToWriter, .relinquishToWriter),
            (.save, .saveChanges), (.accommodateDeletion, .accommodateDeletion),
            (.accommodateSubitemDeletion, .accommodateSubitemDeletion), (.accommodateEviction, .accommodateEviction)
        ]
        return kinds.reduce(into: []) { answered, pair in if mask.contains(pair.0) { answered.insert(pair.1) } }
    }

    private var path: String { lock.lock(); defer { lock.unlock() }; return itemPath }

    /// The name of the item at `other` as inotify gives it: relative to the watched item when
    /// inside it. (Compared as bytes: Foundation's string search is too slow for every event.)
    private func name(_ other: String) -> String {
        let base = path.utf8, full = other.utf8
        guard full.count > base.count + 1, full.starts(with: base),
            full[full.index(full.startIndex, offsetBy: base.count)] == UInt8(ascii: "/")
        else { return other }
        return String(Substring(full.dropFirst(base.count + 1)))
    }

    private static func isDeep(_ name: String) -> Bool { name.utf8.contains(UInt8(ascii: "/")) }

    private func record(
        _ bits: EventMask, cookie: UInt64, name: String = "", path: String? = nil,
        origin: EventOrigin? = nil
    ) -> EventRecord {
        EventRecord(wd: wd, mask: bits, cookie: cookie, name: name, path: path ?? self.path, origin: origin)
    }

    /// Sends a request and calls `answered` with the errno (0 to consent) — at once when the
    /// watch does not want it or the client is gone.
    private func ask(
        _ bit: EventMask, name: String = "", path: String? = nil, origin: EventOrigin, progress: PresenterProgress,
        _ answered: @escaping @Sendable (UInt64, Int32) -> Void
    ) {
        guard mask.contains(bit), let connection else { return answered(0, 0) }
        let cookie = connection.nextCookie()
        connection.request(
            record([bit, .request], cookie: cookie, name: name, path: path, origin: origin), progress: progress
        ) {
            answered(cookie, $0)
        }
    }

    /// Sends `bit` (with `flags`, such as METADATA_ONLY) if the watch asked for it.
    private func tell(
        _ bit: EventMask, flags: EventMask = [], cookie: UInt64 = 0, name: String = "", path: String? = nil,
        origin: EventOrigin? = nil
    ) {
        guard mask.contains(bit), let connection else { return }
        // Items deep inside a watched directory: only if the client could list their directory.
        if Self.isDeep(name), let path, !connection.mayLearn(of: path) { return }
        connection.send(.event(record(bit.union(flags), cookie: cookie, name: name, path: path, origin: origin)))
    }

    private static func error(_ code: Int32) -> Error? {
        code == 0 ? nil : POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
    }

    // MARK: Requests

    func asked(
        _ request: PresenterRequest, origin: AccessOrigin, progress: PresenterProgress,
        completion: @escaping @Sendable (Error?, (@Sendable () -> Void)?) -> Void
    ) {
        let origin = origin.event
        let answered: @Sendable (UInt64, Int32) -> Void = { _, code in completion(Self.error(code), nil) }
        switch request {
        case .relinquishToReader, .relinquishToWriter:
            ask(request.event, origin: origin, progress: progress) { cookie, code in
                if code != 0 { return completion(Self.error(code), nil) }
                if cookie == 0 { return completion(nil, nil) }
                // Strong: an access that deletes the item removes its watch (`itemWasDeleted`)
                // before it ends, and the reacquirer is still due then.
                let reacquire: @Sendable () -> Void = { self.tell(.reacquire, cookie: cookie) }
                completion(nil, reacquire)
            }
        case .saveChanges, .accommodateDeletion, .accommodateEviction:
            ask(request.event, origin: origin, progress: progress, answered)
        case .accommodateSubitemDeletion(let item):
            let itemName = name(item.string)
            if let connection, Self.isDeep(itemName), !connection.mayLearn(of: item.string) {
                return completion(nil, nil)
            }
            ask(
                .accommodateSubitemDeletion, name: itemName, path: item.string, origin: origin, progress: progress,
                answered)
        }
    }

    /// Sent at once, so that it reaches the client before the next access can ask it again.
    func reacquire(_ reacquirer: @escaping @Sendable () -> Void) { reacquirer() }

    // MARK: Notifications

    /// A watch gets every notification: it needs no did-change for a subitem one (P20).
    func told(
        _ notifications: [PresenterNotification], origin: AccessOrigin, presentsPackage: Bool,
        moved: @escaping @Sendable () -> Void
    ) {
        let origin = origin.event
        for notification in notifications {
            switch notification {
            case .didMove(let newPath):
                itemDidMove(to: newPath.string, origin)
                moved()
            case .didChange: tell(.changed, origin: origin)
            case .didChangeAttributes: tell(.changed, flags: .metadataOnly, origin: origin)
            case .subitemDidAppear(let item):
                tell(.subitemAppeared, name: name(item.string), path: item.string, origin: origin)
            case .subitemDidMove(let from, let to): subitem(at: from.string, didMoveTo: to.string, origin)
            case .subitemDidChange(let item):
                tell(.subitemChanged, name: name(item.string), path: item.string, origin: origin)
            case .subitemDidChangeAttributes(let item):
                tell(.subitemChanged, flags: .metadataOnly, name: name(item.string), path: item.string, origin: origin)
            case .subitemWasDeleted(let item):
                tell(.subitemDeleted, name: name(item.string), path: item.string, origin: origin)
            case .itemWasDeleted:
                tell(.presenterRemoved, origin: origin)
                connection?.removeWatch(wd)
            case .coordinationWasBroken: tell(.broken, origin: origin)
            // The version's identifier is the event's cookie (a version id is a number).
            case .versionNews(let news, let version):
                tell(news.eventMask, cookie: UInt64(version) ?? 0, origin: origin)
            case .subitemVersionNews(let item, let news, let version):
                tell(
                    news.eventMask, cookie: UInt64(version) ?? 0, name: name(item.string), path: item.string,
                    origin: origin)
            }
        }
    }

    private func itemDidMove(to newPath: String, _ origin: EventOrigin) {
        let old = path
        let cookie = connection?.nextCookie() ?? 0
        lock.lock(); itemPath = newPath; lock.unlock()
        tell(.movedFrom, cookie: cookie, path: old, origin: origin)
        tell(.movedTo, cookie: cookie, path: newPath, origin: origin)
    }

    private func subitem(at oldPath: String, didMoveTo newPath: String, _ origin: EventOrigin) {
        let cookie = connection?.nextCookie() ?? 0
        tell(.movedFrom, cookie: cookie, name: name(oldPath), path: oldPath, origin: origin)
        tell(.movedTo, cookie: cookie, name: name(newPath), path: newPath, origin: origin)
    }
}
