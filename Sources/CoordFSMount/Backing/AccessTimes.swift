import LinuxSystem
import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// `-o noatime`, carried to the backing directory.
///
/// The kernel honours a mount's `noatime` on the mount's own nodes only. The access times the
/// mount shows are the backing files', and the backing filesystem touches them by its own
/// mount's flags whenever kernel passthrough or the daemon reads them. So a `noatime` mount
/// reads its backing directory through a private, noatime copy of the backing's mount tree
/// (`cfs_open_noatime_tree`): the files the daemon opens, and the backing files that the kernel
/// opens for passthrough on their paths, lie on that copy. It is seen by no other process, and
/// it is a copy of the tree as it was at mount time: a filesystem mounted inside the backing
/// directory later is not seen through such a mount, unless the backing's mount is shared and
/// propagates it. Where the copy cannot be made (a daemon without CAP_SYS_ADMIN, which also has
/// no kernel passthrough, or a kernel before 5.12), the daemon opens O_NOATIME the files whose
/// data it serves and the directories it lists, where it owns them or has CAP_FOWNER.
struct AccessTimes: Sendable {
    /// O_NOATIME where the daemon's opens must carry it, else nothing.
    let flag: Int32

    /// How a mount with `configuration` keeps access times, and its backing directory opened
    /// O_PATH (`root`: -1, errno set, when it cannot be opened). `pin`: with a private copy, the
    /// backing directory on its own mount, to hold open while the mount runs (else -1), so that
    /// the backing's mount still reports itself busy to umount. `notice` hears why a `noatime`
    /// mount falls back to O_NOATIME.
    static func openBacking(
        _ configuration: MountConfiguration, notice: (String) -> Void
    )
        -> (root: Int32, pin: Int32, accessTimes: AccessTimes)
    {
        let plain = Glibc.open(configuration.backing, CFS_O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard plain >= 0, configuration.isNoatime else { return (plain, -1, AccessTimes(flag: 0)) }
        let tree = configuration.noatimeThroughPrivateMounts ? cfs_open_noatime_tree(configuration.backing) : -ENOSYS
        if tree >= 0 { return (tree, plain, AccessTimes(flag: 0)) }
        notice(
            "noatime: no private noatime copy of the backing's mounts (\(String(cString: strerror(-tree)))); "
                + "the daemon opens what it reads O_NOATIME instead")
        return (plain, -1, AccessTimes(flag: CFS_O_NOATIME))
    }

    /// `open(flags)`, with O_NOATIME where the daemon's opens must carry it; and again without
    /// it where the daemon may not open so (EPERM: it neither owns the file nor has CAP_FOWNER).
    /// errno is that of the open that answered.
    @inline(__always)
    func open(_ flags: Int32, _ open: (Int32) -> Int32) -> Int32 {
        if flag == 0 { return open(flags) }
        let fd = open(flags | flag)
        if fd.failure == .notPermitted { return open(flags) }
        return fd
    }

    /// `open(flags)` as above, for an open that answers with its failure.
    @inline(__always)
    func open(_ flags: Int32, _ open: (Int32) -> Result<Int32, Errno>) -> Result<Int32, Errno> {
        if flag == 0 { return open(flags) }
        let opened = open(flags | flag)
        if case .failure(.notPermitted) = opened { return open(flags) }
        return opened
    }
}
