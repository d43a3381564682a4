import LinuxSystem
#if canImport(Glibc)
import Glibc
#endif

/// The backing directory as the mount reaches it: the filesystems under it, how the access
/// times of its files are kept (`-o noatime`), and what this process may do there.
final class BackingDirectory: Sendable {
    /// The filesystems under the mount, the backing's own and those mounted inside it.
    let filesystems: BackingFilesystems
    let accessTimes: AccessTimes
    /// The backing directory on its own mount, held while a `noatime` mount reads a private
    /// copy of it (`AccessTimes.openBacking`); -1 otherwise.
    private let pin: Int32
    /// Requests about items on a filesystem that is not local, mounted inside the (local)
    /// backing directory, go to the io_uring lanes (`Filesystem.laneRequests`).
    let lanesByItem: Bool
    /// The process's open-file limit, raised to the hard limit at mount (`DescriptorLimit`).
    let openFileLimit: Int
    /// Created items are given to the caller (we can only when running as root).
    let givesOwnership = geteuid() == 0

    init(filesystems: BackingFilesystems, accessTimes: AccessTimes, pin: Int32, lanesByItem: Bool, openFileLimit: Int) {
        self.filesystems = filesystems
        self.accessTimes = accessTimes
        self.pin = pin
        self.lanesByItem = lanesByItem
        self.openFileLimit = openFileLimit
    }

    deinit {
        if pin >= 0 { close(pin) }
    }
}
