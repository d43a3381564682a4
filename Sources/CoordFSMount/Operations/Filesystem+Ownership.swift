import LinuxSystem
import CLinux
import Coordination
import CoordinationRuntime
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Items created for a caller belong to the caller, as on a kernel filesystem.
extension Filesystem {
    /// Gives the item `name` created in `parent` for the caller to the caller (the daemon runs
    /// as root). `mode`: the mode the caller asked for; when it has setuid or setgid, the bits
    /// the chown clears and the caller keeps are given back (`keptPrivilegeBits`) to the mode
    /// the file was made with (the umask or a default ACL applied).
    func giveToCaller(_ caller: RequestCaller, parent: Inode, name: String, mode: mode_t = 0) {
        giveToCaller(caller, parent: parent) { parentFD, uid, gid, group in
            let kept = Self.keptPrivilegeBits(
                asked: mode,
                made: {
                    var info = stat()
                    return FileSystemName.withCString(name, { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0
                        ? info : nil
                }, group: group, callerGroup: caller.gid)
            _ = FileSystemName.withCString(name) { fchownat(parentFD, $0, uid, gid, AT_SYMLINK_NOFOLLOW) }
            if let kept { _ = FileSystemName.withCString(name) { fchmodat(parentFD, $0, kept, 0) } }
        }
    }

    /// Gives an item created in `parent` for the caller to the caller: `chown(parentFD, uid,
    /// gid, group)` changes its owner, gid_t.max keeping the group a setgid parent gave it
    /// (`group`, the one it ends with). Nothing when the daemon does not run as root or the
    /// caller is root.
    func giveToCaller(_ ctx: RequestCaller, parent: Inode, _ chown: (Int32, uid_t, gid_t, gid_t) -> Void) {
        guard backing.givesOwnership else { return }
        if ctx.uid == 0 && ctx.gid == 0 { return }
        inodes.withFD(parent, orElse: { _ in }) { fd in
            var parentInfo = stat()
            let inheritsGroup =
                fstatat(fd, "", &parentInfo, CFS_AT_EMPTY_PATH) == 0 && (parentInfo.st_mode & S_ISGID) != 0
            chown(fd, ctx.uid, inheritsGroup ? gid_t.max : ctx.gid, inheritsGroup ? parentInfo.st_gid : ctx.gid)
        }
    }

    /// The mode to give back after a chown of a regular file the caller asked to make with
    /// `asked`, when the chown cleared bits the caller's own create would have kept (nil:
    /// nothing to give back). `made` gives the file's attributes before the chown (asked only
    /// when `asked` has such bits): its mode is the one to keep, the umask or a default ACL
    /// applied. The setuid bit, always (the caller owns the file); the setgid bit when the
    /// file's group is the caller's, as the kernel keeps it (a group it is only a supplementary
    /// member of is not known here, and the bit stays off, as for a non-member).
    static func keptPrivilegeBits(asked: mode_t, made: () -> stat?, group: gid_t, callerGroup: gid_t) -> mode_t? {
        guard asked & (S_ISUID | S_ISGID) != 0, let mode = made()?.st_mode else { return nil }
        guard mode & S_IFMT == 0 || mode & S_IFMT == S_IFREG, mode & (S_ISUID | S_ISGID) != 0 else { return nil }
        var kept = mode & 0o7777
        if group != callerGroup { kept &= ~S_ISGID }
        return kept
    }
}
