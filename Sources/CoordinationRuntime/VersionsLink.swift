import Coordination
import CoordinationClient
import CoordinationWire
import Foundation
import LinuxSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A version of an item as its server describes it (the protocol's `versions` fields).
package struct VersionInfo: Sendable, Equatable {
    package var id: String
    package var cause: String
    /// When it was kept, and when its content was last modified (seconds since 1970).
    package var time: Double
    package var modified: Double
    package var size: Int64
    package var conflict: Bool
    package var resolved: Bool
    package var pinned: Bool
    /// Who replaced it (or added it): process, user, command and host.
    package var pid: Int32?
    package var uid: UInt32?
    package var command: String?
    package var host: String?

    /// A version known only by its identifier (one its store no longer has).
    package init(removed id: String) {
        self.id = id
        cause = ""
        time = 0
        modified = 0
        size = 0
        conflict = false
        resolved = false
        pinned = false
    }

    init?(_ value: WireValue?) {
        guard case .object(let fields)? = value, case .string(let id)? = fields["id"] else { return nil }
        func number(_ key: String) -> Double { if case .int(let value)? = fields[key] { Double(value) } else { 0 } }
        func flag(_ key: String) -> Bool { if case .bool(true)? = fields[key] { true } else { false } }
        self.id = id
        if case .string(let cause)? = fields["cause"] { self.cause = cause } else { cause = "" }
        time = number("time")
        modified = number("modified")
        size = Int64(number("size"))
        conflict = flag("conflict")
        resolved = flag("resolved")
        pinned = flag("pinned")
        if case .object(let origin)? = fields["replaced_by"] {
            if case .int(let pid)? = origin["pid"] { self.pid = Int32(truncatingIfNeeded: pid) }
            if case .int(let uid)? = origin["uid"] { self.uid = UInt32(truncatingIfNeeded: uid) }
            if case .string(let command)? = origin["command"] { self.command = command }
            if case .string(let host)? = origin["host"] { self.host = host }
        }
    }
}

/// Where a process finds the versions of an item: the store of the mount the item is in, or
/// outside any mount the user's daemon's. One connection per server, made on first use and
/// made again once its server has closed it.
package enum VersionsLink {
    private static let clients = Mutex<[String: ControlClient]>([:])

    private static func client(for path: String) throws -> ControlClient {
        let socket: String
        switch ControlClient.serverSocket(for: path) {
        case .success(let found): socket = found
        case .failure(let error):
            // Nobody keeps versions of it: not in a mount, and no daemon runs (or may be started).
            throw CocoaError(
                .featureUnsupported,
                userInfo: [
                    NSURLErrorKey: URL(fileURLWithPath: path),
                    NSLocalizedDescriptionKey: "no versions are kept of '\(path)': \(error.message)"
                ])
        }
        if let known = clients.withLock({ $0[socket] }), !known.isClosed { return known }
        let client: ControlClient
        do { client = try ControlClient(socketPath: socket) } catch let error as ControlError {
            throw Self.error(error, item: path)
        }
        clients.withLock { $0[socket] = client }
        return client
    }

    /// The versions of the item at `path`, oldest first.
    package static func versions(of path: String) throws -> [VersionInfo] {
        let fields = try ask(path) { client in try client.request { .versions(id: $0, path: path) } }
        guard case .array(let listed)? = fields["versions"] else { return [] }
        return listed.compactMap { VersionInfo($0) }
    }

    /// Version `id` of the item at `path`, with its content open for reading.
    package static func open(_ id: String, of path: String) throws -> (VersionInfo, FileHandle) {
        var handle: FileHandle?
        let fields = try ask(path) { client in
            let (fields, content) = try client.openVersion(id, of: path)
            handle = content
            return fields
        }
        guard let info = VersionInfo(fields["version"]), let handle else {
            throw FileCoordinationError.systemError("the server's reply names no version", EPROTO)
        }
        return (info, handle)
    }

    /// Adds a version of the item at `path` whose content is the file open at `content`.
    package static func add(of path: String, content: Int32) throws -> VersionInfo {
        let fields = try ask(path) { client in try client.addVersion(of: path, content: content) }
        guard let info = VersionInfo(fields["version"]) else {
            throw FileCoordinationError.systemError("the server's reply names no version", EPROTO)
        }
        return info
    }

    /// Marks version `id` resolved (or not): the bounds may take a resolved conflict.
    package static func resolve(_ id: String, of path: String, _ resolved: Bool) throws {
        try act(resolved ? .resolve : .unresolve, on: id, of: path)
    }

    /// Keeps version `id` whatever the bounds say, or lets them take it again.
    package static func pin(_ id: String, of path: String, _ pinned: Bool) throws {
        try act(pinned ? .pin : .unpin, on: id, of: path)
    }

    package static func remove(_ id: String, of path: String) throws {
        try act(.remove, on: id, of: path)
    }

    /// Resolves, pins, unpins or removes version `id`; returns it as it now is (nil once removed).
    @discardableResult
    private static func act(_ action: VersionAction, on id: String, of path: String) throws -> VersionInfo? {
        let fields = try ask(path) { client in
            try client.request { .version(id: $0, path: path, version: id, action: action) }
        }
        return VersionInfo(fields["version"])
    }

    private static func ask(
        _ path: String, _ body: (ControlClient) throws -> [String: WireValue]
    ) throws -> [String: WireValue] {
        do { return try body(try client(for: path)) } catch let error as ControlError {
            throw Self.error(error, item: path)
        }
    }

    /// Writes `content` at `path` as a save does: a new file beside it, with the content's mode,
    /// renamed over it, so that readers see the old content or the new, never a part (and a
    /// mount keeps what was there as a version).
    package static func put(_ content: FileHandle, at path: String) throws {
        var info = stat()
        let mode = fstat(content.fileDescriptor, &info) == 0 ? info.st_mode & 0o777 : 0o644
        let directory = (path as NSString).deletingLastPathComponent
        let temporary = directory + "/." + (path as NSString).lastPathComponent + ".coordfs-restore-\(getpid())"
        let fd = Glibc.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else {
            throw FileCoordinationError.systemError("cannot write beside '\(path)'", Errno.ofFailedCall().code)
        }
        let output = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            _ = lseek(content.fileDescriptor, 0, SEEK_SET)
            while case let data = content.availableData, !data.isEmpty { try output.write(contentsOf: data) }
            try output.synchronize()
            try output.close()
        } catch {
            unlink(temporary)
            throw error
        }
        if rename(temporary, path) != 0 {
            let failure = Errno.ofFailedCall().code
            unlink(temporary)
            throw FileCoordinationError.systemError("cannot put the version back at '\(path)'", failure)
        }
    }

    /// Foundation's error for a server's refusal about `item`.
    static func error(_ error: ControlError, item: String) -> Error {
        let url = URL(fileURLWithPath: item)
        switch error.errno {
        case "ENOENT":
            return CocoaError(.fileNoSuchFile, userInfo: [NSURLErrorKey: url, NSLocalizedDescriptionKey: error.message])
        case "EACCES", "EPERM":
            return CocoaError(
                .fileReadNoPermission, userInfo: [NSURLErrorKey: url, NSLocalizedDescriptionKey: error.message])
        case "EOPNOTSUPP":
            return CocoaError(
                .featureUnsupported, userInfo: [NSURLErrorKey: url, NSLocalizedDescriptionKey: error.message])
        default:
            return FileCoordinationError.systemError(error.message, ErrnoNames.code(of: error.errno) ?? EIO)
        }
    }
}
