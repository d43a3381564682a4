import LinuxSystem
import Coordination
import CoordinationRuntime
import CoordinationWire
import FileVersions
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Versions: what a mount keeps of an item's earlier contents. A client sees the versions of an
/// item it could read (or, for an item gone, whose directory it could read) and whose content it
/// could read itself (a version keeps the file's owner and mode); it resolves a conflict only
/// where it could write the item, and pins or removes only its own versions (root any).
extension ClientConnection {
    /// The store, the item `path` names in it, and the item as the engine knows it; nil (the
    /// error answered) where this client may not `need` it.
    private func versionItem(
        _ id: Int, _ path: String, _ need: Permissions.Need
    ) -> (VersionStore, String, AccessTarget)? {
        guard let store = server.versions else {
            send(
                .error(
                    id: id, errno: "EOPNOTSUPP",
                    message:
                        "no versions are kept here (a mount with --versions off, or a daemon that could not make its versions directory: see its log)"
                ))
            return nil
        }
        let resolved: (target: AccessTarget, realPath: String)
        do { resolved = try server.resolver.resolve(path) } catch {
            send(.error(id: id, errno: error.errno, message: error.message))
            return nil
        }
        let realPath = resolved.realPath
        let base = server.resolver.permissionBase
        guard realPath.hasPrefix(base == "/" ? "/" : base + "/") else {
            send(.error(id: id, errno: "EINVAL", message: "'\(path)' is the mount's root, which has no versions"))
            return nil
        }
        guard Permissions.allows(peer, realPath, need, from: base) else {
            send(.error(id: id, errno: "EACCES", message: "cannot \(need == .read ? "read" : "write") '\(path)'"))
            return nil
        }
        return (store, String(realPath.dropFirst(base == "/" ? 1 : base.count + 1)), resolved.target)
    }

    /// Whether this client may read version `record`'s content.
    private func mayRead(_ record: VersionRecord, in store: VersionStore) -> Bool {
        guard let info = try? store.contentStatus(record) else { return false }
        return Permissions.allows(peer, info, .read)
    }

    func versions(_ id: Int, _ path: String) {
        guard let (store, item, _) = versionItem(id, path, .read) else { return }
        let listed = store.versions(of: item).filter { mayRead($0, in: store) }.map(Self.fields)
        send(.ok(id: id, fields: ["path": .string(path), "versions": .array(listed)]))
    }

    func version(_ id: Int, _ path: String, _ version: String, _ action: VersionAction) {
        guard let (store, item, target) = versionItem(id, path, action == .open ? .read : .write) else { return }
        guard let record = store.version(version), record.item == item, mayRead(record, in: store) else {
            return send(.error(id: id, errno: "ENOENT", message: "'\(path)' has no version \(version)"))
        }
        // Removing or pinning (which the bounds then never take) is the version's owner's, or
        // root's: in a directory others may write, they could otherwise drop another user's
        // conflicts or fill the store.
        if action == .remove || action == .pin || action == .unpin, peer.uid != 0,
            (try? store.contentStatus(record))?.st_uid != peer.uid
        {
            return send(
                .error(
                    id: id, errno: "EPERM",
                    message: "version \(version) of '\(path)' is not yours to \(action.rawValue)"))
        }
        switch action {
        case .open:
            let fd: Int32
            do { fd = try store.openContent(record) } catch {
                return send(
                    .error(
                        id: id, errno: ErrnoNames.name(of: error.code),
                        message: "cannot open version \(version): \(error)"))
            }
            defer { Glibc.close(fd) }
            _ = send(.ok(id: id, fields: ["version": Self.fields(record), "descriptor": .bool(true)]), descriptor: fd)
        case .resolve, .unresolve, .pin, .unpin:
            let updated = store.update(
                version, resolved: action == .resolve ? true : action == .unresolve ? false : nil,
                pinned: action == .pin ? true : action == .unpin ? false : nil)
            send(.ok(id: id, fields: updated.map { ["version": Self.fields($0)] } ?? [:]))
            // Told after the reply: whoever resolved it may present the item itself.
            if action == .resolve, record.isUnresolvedConflict { tell(.resolved, version, of: target) }
        case .remove:
            store.remove(version)
            send(.ok(id: id, fields: [:]))
            tell(.lost, version, of: target)
        }
    }

    /// Adds a version of the item at `path` whose content is the file the client sent with the
    /// line (Apple's `NSFileVersion.addOfItem`): copied (a reflink where the filesystem has
    /// them) up to the copy limit; the client must be able to write the item. The version keeps
    /// the sent file's owner and mode, which decide who may read it.
    func addVersion(_ id: Int, _ path: String) {
        guard let content = takeReceivedDescriptor() else {
            return send(
                .error(
                    id: id, errno: "EINVAL",
                    message: "add_version takes the content's descriptor with its line (SCM_RIGHTS)"))
        }
        defer { Glibc.close(content) }
        guard let (store, item, target) = versionItem(id, path, .write) else { return }
        // Opened for reading by the client itself: an O_PATH descriptor would let the server
        // read for it what it cannot.
        let flags = fcntl(content, F_GETFL)
        var info = stat()
        guard flags >= 0, flags & Self.pathOnly == 0, flags & O_ACCMODE != O_WRONLY, fstat(content, &info) == 0 else {
            return send(.error(id: id, errno: "EBADF", message: "the content's descriptor is not open for reading"))
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            return send(.error(id: id, errno: "EINVAL", message: "a version's content must be a regular file"))
        }
        let origin = VersionOrigin(pid: peer.pid, uid: peer.uid, command: ProcFile.command(of: peer.pid))
        switch store.keep(.copy(content), item: item, info: info, cause: .added, replacedBy: origin) {
        case .success(let record):
            send(.ok(id: id, fields: ["version": Self.fields(record)]))
            tell(.gained, record.id, of: target)
        case .failure(.tooLarge(let size, let limit)):
            send(
                .error(
                    id: id, errno: "EFBIG",
                    message: "\(size) bytes, more than the copy limit of \(limit) on a filesystem without reflinks"))
        case .failure(.largerThanTheStore(let size, let limit)):
            send(
                .error(
                    id: id, errno: "EFBIG",
                    message: "\(size) bytes, more than all versions together may take (\(limit))"))
        case .failure(.failed(let errno)):
            send(.error(id: id, errno: ErrnoNames.name(of: errno.code), message: "cannot keep the version: \(errno)"))
        }
    }

    /// Linux's O_PATH, which Swift's Glibc module does not show.
    private static let pathOnly: Int32 = 0o10000000

    /// The item's presenters, and those of the directories around it, hear of the version.
    private func tell(_ news: VersionNews, _ version: String, of target: AccessTarget) {
        let domain = server.domain
        domain.deliver(domain.engine.versionNews(news, version: version, of: target, by: identity))
    }

    static func fields(_ record: VersionRecord) -> WireValue {
        var fields: [String: WireValue] = [
            "id": .string(record.id), "cause": .string(record.cause.rawValue), "size": .int(Int(record.size)),
            "time": .int(Int(record.time)), "modified": .int(Int(record.modified)),
            "conflict": .bool(record.conflict), "resolved": .bool(record.resolved), "pinned": .bool(record.pinned)
        ]
        if let origin = record.replacedBy {
            var by: [String: WireValue] = ["pid": .int(Int(origin.pid)), "uid": .int(Int(origin.uid))]
            if let command = origin.command { by["command"] = .string(command) }
            if let host = origin.host { by["host"] = .string(host) }
            fields["replaced_by"] = .object(by)
        }
        return .object(fields)
    }
}
