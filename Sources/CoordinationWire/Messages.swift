import Foundation

/// The control socket's protocol, version 1: one JSON object per line, a client's each at most
/// `maximumLineLength` bytes, a server's at most `maximumReplyLength`. See docs/protocol.md. This
/// module only turns values into bytes and back; it does no I/O.
public enum WireProtocol {
    public static let version = 1
    /// What a server reads of a client's line: small, so that no client can make it buffer much.
    public static let maximumLineLength = 65_536
    /// What a client reads of a server's line. Only `status` comes near it (a busy shared mount's
    /// holders, waiters and presenters); a server leaves entries out rather than pass it.
    public static let maximumReplyLength = 16 << 20
}

/// One intent of a `hold`.
public struct WireIntent: Codable, Hashable, Sendable {
    public enum Access: String, Codable, Sendable { case read, write }
    public var path: String
    public var access: Access
    /// Apple's option names: withoutChanges, resolvesSymbolicLink, immediatelyAvailableMetadataOnly
    /// (reads); forDeleting, forMoving, forMerging, forReplacing, contentIndependentMetadataOnly, forEvicting (writes).
    public var options: [String]?

    public init(path: String, access: Access, options: [String]? = nil) {
        self.path = path
        self.access = access
        self.options = options
    }
}

/// A message from a client.
public enum ClientMessage: Hashable, Sendable {
    /// Must come first: the protocol version the client speaks.
    case hello(id: Int, version: Int)
    /// Present `path` (a watch): events in `mask` are sent; requests outside it are answered "ok"
    /// by the server, as for a presenter that lacks the callback.
    case watch(id: Int, path: String, mask: EventMask)
    case unwatch(id: Int, wd: Int)
    /// The answer to a request event: errno 0 consents, any other errno fails the access.
    case answer(cookie: UInt64, errno: Int32)
    /// The presenter is still working on the request `cookie` (saving, fetching): its answer is
    /// due a presenter timeout from now, up to the server's limit. No reply.
    case working(cookie: UInt64)
    /// Hold intents, all or none; the reply comes once granted (or refused). `inherit` lets the
    /// client's child processes count as the client (as `coordfs coordinate` needs).
    /// `presenter`: the watch the hold is taken for (a coordinator made with that presenter):
    /// it passes while that presenter is asked, as its own work. `coordinator`: a name the
    /// client gives a coordinator of its own; holds under one name never wait for each other
    /// (a coordinator's nested or batched accesses). Otherwise each hold is a coordinator.
    /// `holder`: the process whose accesses through a mount are the hold's own — the client by
    /// default, or one of its ancestors of the same user (a shell that runs `coordfs coordinate
    /// 9` keeps the hold for as long as its descriptor 9 is open).
    case hold(
        id: Int, intents: [WireIntent], wait: Bool, timeout: Double?, inherit: Bool, presenter: Int? = nil,
        coordinator: String? = nil, holder: Int? = nil)
    /// Changes a live mount's options (`mount -o remount,OPTIONS`): those that can change while
    /// mounted are applied, the others must be as they are. Only the mount's owner and root.
    case remount(id: Int, options: [String])
    /// Ends a hold; `changed` says the holder changed the items (presenters are told).
    case release(id: Int, hold: Int, changed: Bool)
    /// Reports that the holder moved the item at `from` to `to` inside a hold that writes it:
    /// presenters follow, and waiting intents too (a server that does not see the rename).
    case moved(id: Int, hold: Int, from: String, to: String)
    /// Stops waiting for a `hold` still pending.
    case cancel(id: Int, request: Int)
    /// Who holds, waits and presents: a page of each list, or of one (`StatusPage`).
    case status(id: Int, page: StatusPage = StatusPage())
    /// Vend the service `name` for the item at `path` and everything inside it. Each client that
    /// connects arrives as a `SERVICE_CONNECTION` event carrying a connected socket.
    case vend(id: Int, name: String, path: String)
    case withdraw(id: Int, service: Int)
    /// The services of the item at `path`: per name, the nearest provider up the tree.
    case services(id: Int, path: String)
    /// A connection to the service `name` of the item at `path`: the reply carries a connected
    /// socket whose other end the provider received.
    case connect(id: Int, name: String, path: String)
    /// The versions a mount keeps of the item at `path` (which may no longer exist).
    case versions(id: Int, path: String)
    /// Acts on version `version` of the item at `path`: `open` (the reply carries a descriptor of
    /// its content), `resolve`, `unresolve`, `pin`, `unpin` or `remove`.
    case version(id: Int, path: String, version: String, action: VersionAction)
    /// Adds a version of the item at `path` whose content is the file of the descriptor sent
    /// with the line (SCM_RIGHTS, opened for reading): Apple's `NSFileVersion.addOfItem`.
    case addVersion(id: Int, path: String)
}

/// What a `version` request does.
public enum VersionAction: String, Sendable, CaseIterable {
    case open, resolve, unresolve, pin, unpin, remove
}

/// A message from the server.
public enum ServerMessage: Hashable, Sendable {
    case ok(id: Int, fields: [String: WireValue])
    case error(id: Int?, errno: String, message: String)
    case event(EventRecord)
}

/// An event, as inotify's: the watch, what happened, a cookie pairing related records (a request
/// and its answer and reacquire; moved-from and moved-to), and the subitem's name for events of
/// a directory watch ("" for the watched item itself).
public struct EventRecord: Hashable, Sendable {
    public var wd: Int
    public var mask: EventMask
    public var cookie: UInt64
    public var name: String
    /// The full path concerned, for convenience.
    public var path: String
    /// Who made the access the event is about (requests and notifications; nil for events of
    /// the protocol's own: a reacquire, a service connection).
    public var origin: EventOrigin?

    public init(wd: Int, mask: EventMask, cookie: UInt64, name: String, path: String, origin: EventOrigin? = nil) {
        self.wd = wd
        self.mask = mask
        self.cookie = cookie
        self.name = name
        self.path = path
        self.origin = origin
    }
}

/// The origin of an access as an event carries it: `via` is "mount" (a program through a
/// mount), "coordinator" (a coordinator's access, or a hold through a socket) or "outside" (a
/// change nobody coordinated); the rest where known.
public struct EventOrigin: Hashable, Sendable {
    public var via: String
    public var pid: Int?
    public var uid: Int?
    /// The group, where the server knows it from the socket's credentials (a service's client).
    public var gid: Int?
    public var command: String?
    public var purpose: String?
    /// The other host of a shared store whose programs made the access (via "cluster").
    public var host: String?

    public init(
        via: String, pid: Int? = nil, uid: Int? = nil, gid: Int? = nil, command: String? = nil, purpose: String? = nil,
        host: String? = nil
    ) {
        self.via = via
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.command = command
        self.purpose = purpose
        self.host = host
    }
}

/// A JSON value in a reply's fields.
public enum WireValue: Hashable, Sendable {
    case int(Int)
    case string(String)
    case bool(Bool)
    case array([WireValue])
    case object([String: WireValue])
}

#if canImport(Glibc)
import Glibc
#endif

extension WireProtocol {
    /// Where sockets live by default, for servers and clients alike: /run/coordfs for root,
    /// else $XDG_RUNTIME_DIR/coordfs, else /tmp/coordfs-UID.
    public static var runtimeDirectory: String {
        if geteuid() == 0 { return "/run/coordfs" }
        if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            return runtime + "/coordfs"
        }
        return "/tmp/coordfs-\(geteuid())"
    }

    /// The standalone daemon's default socket.
    public static var daemonSocketPath: String { runtimeDirectory + "/daemon.sock" }
}
