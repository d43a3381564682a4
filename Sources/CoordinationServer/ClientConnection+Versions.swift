import LinuxSystem
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
    /// The store and the item `path` names in it; nil (the error answered) where this client may
    /// not `need` it.
    private func versionItem(_ id: Int, _ path: String, _ need: Permissions.Need) -> (VersionStore, String)? {
        guard let store = server.versions else {
            send(.error(id: id, errno: "EOPNOTSUPP", message: "no versions are kept here (a mount keeps them; see --versions)"))
            return nil
        }
        let realPath: String
        do { realPath = try server.resolver.resolve(path).realPath } catch {
            send(.error(id: id, errno: error.errno, message: error.message))
            return nil
        }
        let base = server.resolver.permissionBase
        guard realPath.hasPrefix(base == "/" ? "/" : base + "/") else {
            send(.error(id: id, errno: "EINVAL", message: "'\(path)' is the mount's root, which has no versions"))
            return nil
        }
        guard Permissions.allows(peer, realPath, need, from: base) else {
            send(.error(id: id, errno: "EACCES", message: "cannot \(need == .read ? "read" : "write") '\(path)'"))
            return nil
        }
        return (store, String(realPath.dropFirst(base == "/" ? 1 : base.count + 1)))
    }

    /// Whether this client may read version `record`'s content.
    private func mayRead(_ record: VersionRecord, in store: VersionStore) -> Bool {
        guard let info = try? store.contentStatus(record) else { return false }
        return Permissions.allows(peer, info, .read)
    }

    func versions(_ id: Int, _ path: String) {
        guard let (store, item) = versionItem(id, path, .read) else { return }
        let listed = store.versions(of: item).filter { mayRead($0, in: store) }.map(Self.fields)
        send(.ok(id: id, fields: ["path": .string(path), "versions": .array(listed)]))
    }

    func version(_ id: Int, _ path: String, _ version: String, _ action: VersionAction) {
        guard let (store, item) = versionItem(id, path, action == .open ? .read : .write) else { return }
        guard let record = store.version(version), record.item == item, mayRead(record, in: store) else {
            return send(.error(id: id, errno: "ENOENT", message: "'\(path)' has no version \(version)"))
        }
        // Removing or pinning (which the bounds then never take) is the version's owner's, or
        // root's: in a directory others may write, they could otherwise drop another user's
        // conflicts or fill the store.
        if action == .remove || action == .pin || action == .unpin, peer.uid != 0,
           (try? store.contentStatus(record))?.st_uid != peer.uid {
            return send(.error(id: id, errno: "EPERM", message: "version \(version) of '\(path)' is not yours to \(action.rawValue)"))
        }
        switch action {
        case .open:
            let fd: Int32
            do { fd = try store.openContent(record) } catch {
                return send(.error(id: id, errno: ErrnoNames.name(of: error.code), message: "cannot open version \(version): \(error)"))
            }
            defer { Glibc.close(fd) }
            _ = send(.ok(id: id, fields: ["version": Self.fields(record), "descriptor": .bool(true)]), descriptor: fd)
        case .resolve, .unresolve, .pin, .unpin:
            let updated = store.update(version, resolved: action == .resolve ? true : action == .unresolve ? false : nil,
                                       pinned: action == .pin ? true : action == .unpin ? false : nil)
            send(.ok(id: id, fields: updated.map { ["version": Self.fields($0)] } ?? [:]))
        case .remove:
            store.remove(version)
            send(.ok(id: id, fields: [:]))
        }
    }

    static func fields(_ record: VersionRecord) -> WireValue {
        var fields: [String: WireValue] = [
            "id": .string(record.id), "cause": .string(record.cause.rawValue), "size": .int(Int(record.size)),
            "time": .int(Int(record.time)), "modified": .int(Int(record.modified)),
            "conflict": .bool(record.conflict), "resolved": .bool(record.resolved), "pinned": .bool(record.pinned),
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
