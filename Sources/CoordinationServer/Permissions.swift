import LinuxSystem
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What a client may do, decided from its credentials and the items' modes: it may watch or read
/// only what it could read, write only what it could write (or create), and it must be able to
/// search every directory on the way.
enum Permissions {
    enum Need { case read, write }

    /// Whether `peer` may `need` the item at `path`, searching every directory from `base` (the
    /// mount's backing root, or "/") down to it.
    static func allows(_ peer: PeerCredentials, _ path: String, _ need: Need, from base: String = "/") -> Bool {
        if peer.uid == 0 { return true }
        let start = base == "/" ? "" : base
        guard path == base || path.hasPrefix(start + "/") else { return false }
        if !start.isEmpty {
            guard let info = status(start), check(info, peer, S_IXUSR) else { return false }
        }
        var prefix = start
        let components = path.dropFirst(start.count).split(separator: "/")
        for component in components.dropLast() {
            prefix += "/" + component
            guard let info = status(prefix), check(info, peer, S_IXUSR) else { return false }
        }
        if let info = status(path) {
            return check(info, peer, need == .read ? S_IRUSR : S_IWUSR)
        }
        // An item that does not exist yet: presenting it (an untitled document, C22) needs to
        // read its directory; creating it needs to write there.
        guard let parent = status(prefix.isEmpty ? "/" : prefix), check(parent, peer, S_IXUSR) else { return false }
        return check(parent, peer, need == .read ? S_IRUSR : S_IWUSR)
    }

    private static func status(_ path: String) -> stat? {
        var info = stat()
        return FileSystemName.withCString(path) { stat($0, &info) } == 0 ? info : nil
    }

    /// Whether `peer` may `need` a file whose status is `info` (its own bits only: the
    /// directories on the way are the caller's to check).
    static func allows(_ peer: PeerCredentials, _ info: stat, _ need: Need) -> Bool {
        peer.uid == 0 || check(info, peer, need == .read ? S_IRUSR : S_IWUSR)
    }

    /// `ownerBit` is the owner's bit (S_IRUSR, S_IWUSR, S_IXUSR); the group and other bits are
    /// it shifted right by 3 and 6.
    private static func check(_ info: stat, _ peer: PeerCredentials, _ ownerBit: mode_t) -> Bool {
        if info.st_uid == peer.uid { return info.st_mode & ownerBit != 0 }
        if peer.groups.contains(info.st_gid) { return info.st_mode & (ownerBit >> 3) != 0 }
        return info.st_mode & (ownerBit >> 6) != 0
    }
}
