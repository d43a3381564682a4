import LinuxSystem
import CoordinationWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// glibc's getxattr, which Swift's Glibc module does not carry.
@_silgen_name("getxattr")
private func c_getxattr(
    _ path: UnsafePointer<CChar>, _ name: UnsafePointer<CChar>, _ value: UnsafeMutableRawPointer?, _ size: Int
) -> Int

/// Why a control-socket request failed: the server's errno name and message.
public struct ControlError: Error, CustomStringConvertible, Equatable {
    public let errno: String
    public let message: String
    public init(_ errno: String, _ message: String) {
        self.errno = errno
        self.message = message
    }
    public var description: String { message.isEmpty ? errno : "\(message) (\(errno))" }
}

// @unchecked Sendable: its tables are behind `lock`; writes under `writeLock`.
/// A connection to a coordfs control socket (a mount's or the daemon's): requests wait for their
/// reply; events go to `onEvent`, in order, on the connection's reader thread.
public final class ControlClient: @unchecked Sendable {
    private let fd: Int32
    private let lock = NSLock()
    private let writeLock = NSLock()
    private var nextID = 1
    private var waiting: [Int: (DispatchSemaphore, Box)] = [:]
    private var callbacks: [Int: @Sendable (Result<[String: WireValue], ControlError>) -> Void] = [:]
    private var closed = false
    /// The error the server sent for the whole connection before closing it, if any.
    private var refusal: ControlError?

    /// Why a request fails on an ended connection: the server's refusal, else ECONNRESET with
    /// `message`. The lock is held.
    private func endError(_ message: String) -> ControlError { refusal ?? ControlError("ECONNRESET", message) }
    /// The reader has closed the socket's descriptor (under `writeLock`): its number may name
    /// another descriptor of the process now, which `send` and `close` must not touch.
    private var descriptorClosed = false
    private var eventHandler: (@Sendable (EventRecord) -> Void)?
    private var serviceHandler: (@Sendable (EventRecord, FileHandle) -> Void)?
    /// Descriptors received and not yet given to the line that carries them.
    private var descriptors: [Int32] = []
    private var endHandler: (@Sendable () -> Void)?
    /// What the server said in reply to hello.
    public private(set) var server: [String: WireValue] = [:]

    // @unchecked Sendable: set once by the reader thread before the waiter is signalled.
    final class Box: @unchecked Sendable {
        var message: ServerMessage?
        var descriptor: Int32?
    }

    /// The control socket serving `path`: the mount's, else $COORDFS_SOCKET, else the daemon's
    /// default socket if it exists.
    public static func socketPath(for path: String) -> String? {
        let (mount, abandoned, _) = lookUpMountSocket(for: path)
        if let mount { return mount }
        // On a mount whose daemon has gone there is nobody to ask, and the daemon knows
        // nothing of that mount's items.
        if abandoned { return nil }
        if let environment = ProcessInfo.processInfo.environment["COORDFS_SOCKET"] { return environment }
        let daemon = WireProtocol.daemonSocketPath
        return FileManager.default.fileExists(atPath: daemon) && isTrusted(directoryOf: daemon) ? daemon : nil
    }

    /// The control socket to use for `path`: its mount's; outside any mount the user's daemon,
    /// started if none runs (unless `COORDFS_COORDINATION=in-process`, which only finds one that
    /// runs); or why there is none.
    public static func serverSocket(for path: String) -> Result<String, ControlError> {
        let (mount, abandoned, denied) = lookUpMountSocket(for: path)
        if let mount { return .success(mount) }
        if abandoned {
            return .failure(ControlError("ENOTCONN", "'\(path)' is on a coordfs mount whose daemon has gone"))
        }
        if let denied {
            // Not "allow_other" by itself: a file of mode 0600 on a mount shared with -o allow_other
            // is refused alike. (`coordfs` names another user's mount made without it first.)
            return .failure(
                ControlError(
                    "EACCES",
                    "cannot look at '\(denied)': permission denied (coordinating an item takes "
                        + "read permission on it, and search permission on the directories above it)"))
        }
        let starting = ProcessInfo.processInfo.environment["COORDFS_COORDINATION"] != "in-process"
        return UserDaemon.socket(starting: starting).mapError { error in
            starting
                ? error
                : ControlError(error.errno, "'\(path)' is not inside a coordfs mount, and no coordfs daemon runs")
        }
    }

    /// Whether the directory of a default socket is the user's (or root's) and written by
    /// nobody else, as servers require of it: without $XDG_RUNTIME_DIR it is /tmp/coordfs-UID,
    /// which anyone may have made first, and a socket there could be anyone's.
    static func isTrusted(directoryOf socket: String) -> Bool {
        var info = stat()
        guard lstat((socket as NSString).deletingLastPathComponent, &info) == 0 else { return false }
        return (info.st_mode & S_IFMT) == S_IFDIR && (info.st_uid == geteuid() || info.st_uid == 0)
            && info.st_mode & 0o022 == 0
    }

    /// The control socket of the coordfs mount holding `path`: the `user.coordfs.socket`
    /// attribute of any item of the mount, or nil outside any mount.
    public static func mountSocketPath(for path: String) -> String? { lookUpMountSocket(for: path).socket }

    /// The mount's socket, whether the walk met a FUSE mount whose server has gone (ENOTCONN),
    /// and the path it could not look at for want of permission (EACCES), if any.
    private static func lookUpMountSocket(for path: String) -> (socket: String?, abandoned: Bool, denied: String?) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        // A missing item is looked up through its nearest existing directory.
        var current = path
        while true {
            let count = c_getxattr(current, "user.coordfs.socket", &buffer, buffer.count)
            if count > 0 { return (String(decoding: buffer[0..<count], as: UTF8.self), false, nil) }
            let failure: Errno? = count < 0 ? Errno.ofFailedCall() : nil
            if failure == .socketNotConnected { return (nil, true, nil) }
            if failure == .permissionDenied { return (nil, false, current) }
            guard failure == .noSuchFileOrDirectory, current != "/", !current.isEmpty else { break }
            current = (current as NSString).deletingLastPathComponent
        }
        return (nil, false, nil)
    }

    /// The extended attribute `name` of `path` as text (a mount root's `user.coordfs.stats`,
    /// say), or nil when it cannot be read.
    public static func attribute(_ name: String, of path: String) -> String? {
        // A value can grow between asking its size and reading it (a mount's counters count the
        // asking itself): ERANGE then, and a larger buffer is tried.
        for _ in 0..<4 {
            let size = c_getxattr(path, name, nil, 0)
            guard size > 0 else { return nil }
            var buffer = [UInt8](repeating: 0, count: size + 256)
            let count = c_getxattr(path, name, &buffer, buffer.count)
            if count > 0 { return String(decoding: buffer[0..<count], as: UTF8.self) }
            if count == 0 || Errno.ofFailedCall() != .outOfRange { return nil }
        }
        return nil
    }

    /// Connects and says hello.
    public init(socketPath: String) throws {
        let fd: Int32
        do throws(Errno) {
            fd = try check(socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0))
        } catch {
            throw ControlError("EIO", "socket: \(error.description)")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(socketPath.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            Glibc.close(fd)
            throw ControlError("ENAMETOOLONG", "socket path too long")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes); raw[bytes.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else {
            let failure = Errno.ofFailedCall()
            Glibc.close(fd)
            // ENOENT: no socket there; ECONNREFUSED: one that nobody serves any more.
            let name =
                failure == .noSuchFileOrDirectory ? "ENOENT" : failure == .permissionDenied ? "EACCES" : "ECONNREFUSED"
            let why = failure == .connectionRefused ? "nobody serves it (its server has gone?)" : failure.description
            throw ControlError(name, "cannot connect to \(socketPath): \(why)")
        }
        self.fd = fd
        Thread { [self] in readLoop() }.start()
        server = try request { .hello(id: $0, version: WireProtocol.version) }
    }

    /// Called for each event record.
    public func onEvent(_ handler: @escaping @Sendable (EventRecord) -> Void) {
        lock.withLock { eventHandler = handler }
    }

    /// Called for each client that connects to a service this connection vends, with the
    /// provider's end of the connection.
    public func onServiceConnection(_ handler: @escaping @Sendable (EventRecord, FileHandle) -> Void) {
        lock.withLock { serviceHandler = handler }
    }

    /// A connection to the service `name` of the item at `path`.
    public func connect(service name: String, at path: String) throws -> FileHandle {
        let (_, descriptor) = try requestWithDescriptor { .connect(id: $0, name: name, path: path) }
        guard let descriptor else { throw ControlError("EPROTO", "the reply carried no connection") }
        return FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }

    /// Version `version` of the item at `path`: its record, and its content open for reading.
    public func openVersion(_ version: String, of path: String) throws -> ([String: WireValue], FileHandle) {
        let (fields, descriptor) = try requestWithDescriptor {
            .version(id: $0, path: path, version: version, action: .open)
        }
        guard let descriptor else { throw ControlError("EPROTO", "the reply carried no descriptor") }
        return (fields, FileHandle(fileDescriptor: descriptor, closeOnDealloc: true))
    }

    /// Adds a version of the item at `path` with the content of the file open at `content` (sent
    /// with the request); returns the version's record.
    public func addVersion(of path: String, content: Int32) throws -> [String: WireValue] {
        try request({ .addVersion(id: $0, path: path) }, descriptor: content)
    }

    /// Called once when the server closes the connection.
    public func onEnd(_ handler: @escaping @Sendable () -> Void) { lock.withLock { endHandler = handler } }

    /// Sends a request and waits for its reply's fields, or throws its error.
    @discardableResult
    public func request(_ make: (Int) -> ClientMessage) throws -> [String: WireValue] {
        let (fields, descriptor) = try requestWithDescriptor(make)
        if let descriptor { Glibc.close(descriptor) }
        return fields
    }

    /// Sends a request with `descriptor` attached to its line and waits for its reply's fields.
    private func request(_ make: (Int) -> ClientMessage, descriptor: Int32) throws -> [String: WireValue] {
        let (fields, received) = try requestWithDescriptor(make, attaching: descriptor)
        if let received { Glibc.close(received) }
        return fields
    }

    private func requestWithDescriptor(
        _ make: (Int) -> ClientMessage, attaching: Int32? = nil
    ) throws -> ([String: WireValue], Int32?) {
        let semaphore = DispatchSemaphore(value: 0)
        let box = Box()
        let id = try lock.withLock { () throws -> Int in
            guard !closed else { throw endError("the connection is closed") }
            nextID += 1
            waiting[nextID] = (semaphore, box)
            return nextID
        }
        send(make(id), descriptor: attaching)
        semaphore.wait()
        switch box.message {
        case .ok(_, let fields)?: return (fields, box.descriptor)
        case .error(_, let code, let message)?: throw ControlError(code, message)
        default: throw lock.withLock { endError("the server closed the connection") }
        }
    }

    /// Sends a request without waiting; `completion` gets its reply (on the reader thread).
    /// Returns the request's id (for `cancel`).
    @discardableResult
    public func request(
        _ make: (Int) -> ClientMessage,
        completion: @escaping @Sendable (Result<[String: WireValue], ControlError>) -> Void
    ) -> Int {
        let id = lock.withLock { () -> Int? in
            guard !closed else { return nil }
            nextID += 1
            callbacks[nextID] = completion
            return nextID
        }
        guard let id else {
            completion(.failure(lock.withLock { endError("the connection is closed") }))
            return 0
        }
        send(make(id))
        return id
    }

    /// Answers a request event: 0 consents, an errno refuses.
    public func answer(cookie: UInt64, errno code: Int32) { send(.answer(cookie: cookie, errno: code)) }

    public func send(_ message: ClientMessage) { send(message, descriptor: nil) }

    /// Sends `message`, with `descriptor` riding on its first byte where one is given.
    private func send(_ message: ClientMessage, descriptor: Int32?) {
        let bytes = WireCodec.encode(message)
        writeLock.withLock {
            guard !descriptorClosed else { return }
            var offset = 0
            while offset < bytes.count {
                let written = try? retryingInterrupts {
                    bytes[offset...].withUnsafeBytes { part in
                        if offset == 0, let descriptor {
                            return DescriptorPassing.send(fd, part, descriptor: descriptor)
                        }
                        return Glibc.send(fd, part.baseAddress, part.count, Int32(MSG_NOSIGNAL))
                    }
                }
                guard let written, written > 0 else { return }
                offset += written
            }
        }
    }

    public func close() {
        writeLock.withLock { if !descriptorClosed { _ = shutdown(fd, Int32(SHUT_RDWR)) } }
    }

    /// Whether the server has closed the connection.
    public var isClosed: Bool { lock.withLock { closed } }

    private func readLoop() {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            guard let (count, received) = try? DescriptorPassing.receive(fd, into: &buffer) else { break }
            if !received.isEmpty { lock.withLock { descriptors += received } }
            if count <= 0 { break }
            pending += buffer[0..<count]
            // A line this client cannot read ends the connection: dropped, the request it
            // answers would wait for ever.
            do throws(WireError) {
                try WireLines.take(from: &pending) { line throws(WireError) in
                    dispatch(try WireCodec.decodeServer(line))
                }
                if pending.count > WireProtocol.maximumReplyLength {
                    throw WireError("line longer than \(WireProtocol.maximumReplyLength) bytes")
                }
            } catch {
                lock.withLock {
                    if refusal == nil {
                        refusal = ControlError("EPROTO", "the server sent a line this client cannot read: \(error)")
                    }
                }
                break
            }
        }
        let (waiters, callbacksLeft, end) = lock.withLock {
            () -> (
                [(DispatchSemaphore, Box)], [@Sendable (Result<[String: WireValue], ControlError>) -> Void],
                (@Sendable () -> Void)?
            ) in
            closed = true
            defer { waiting = [:]; callbacks = [:] }
            return (Array(waiting.values), Array(callbacks.values), endHandler)
        }
        for (semaphore, _) in waiters { semaphore.signal() }
        let reason = lock.withLock { endError("the server closed the connection") }
        for completion in callbacksLeft { completion(.failure(reason)) }
        writeLock.withLock {
            descriptorClosed = true
            Glibc.close(fd)
        }
        end?()
    }

    private func dispatch(_ message: ServerMessage) {
        switch message {
        case .event(let record) where record.mask.contains(.serviceConnection):
            let (descriptor, handler) = lock.withLock {
                (descriptors.isEmpty ? nil : descriptors.removeFirst(), serviceHandler)
            }
            guard let descriptor else { return }
            if let handler {
                handler(record, FileHandle(fileDescriptor: descriptor, closeOnDealloc: true))
            } else {
                Glibc.close(descriptor)
            }
        case .event(let record):
            lock.withLock { eventHandler }?(record)
        case .ok(let id, _), .error(let id?, _, _):
            var descriptor: Int32?
            if case .ok(_, let fields) = message, case .bool(true)? = fields["descriptor"] {
                descriptor = lock.withLock { descriptors.isEmpty ? nil : descriptors.removeFirst() }
            }
            if let (semaphore, box) = lock.withLock({ waiting.removeValue(forKey: id) }) {
                box.message = message
                box.descriptor = descriptor
                semaphore.signal()
            } else if let completion = lock.withLock({ callbacks.removeValue(forKey: id) }) {
                if let descriptor { Glibc.close(descriptor) }  // only synchronous requests take connections
                if case .ok(_, let fields) = message { completion(.success(fields)) }
                if case .error(_, let code, let text) = message { completion(.failure(ControlError(code, text))) }
            }
        case .error(nil, let code, let text):
            // An error for the whole connection (a protocol error, a server that refuses one more
            // connection), sent before it closes: every waiter fails with it, and so does every
            // request made after, however soon it came.
            let all = lock.withLock { () -> [(DispatchSemaphore, Box)] in
                refusal = ControlError(code, text)
                defer { waiting = [:] }
                return Array(waiting.values)
            }
            for (semaphore, box) in all { box.message = message; semaphore.signal() }
        }
    }
}
