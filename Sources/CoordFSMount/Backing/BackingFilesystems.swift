import LinuxSystem
import CLinux
import Synchronization

/// The filesystems under the mount: the backing directory's own, and those mounted inside it
/// (an NFS or sshfs mount in a home directory, an automount point), each looked at once, when
/// a lookup first meets its device.
final class BackingFilesystems: Sendable {
    /// The backing directory's own device.
    let rootDevice: UInt64
    /// The backing directory's own filesystem is local (`localFilesystems`).
    let rootIsLocal: Bool
    /// The backing directory's filesystem reports nothing at close (see `withoutFlush`).
    let rootReportsNothingAtClose: Bool
    /// The backing directory's filesystem is stacked on another (overlayfs, ecryptfs): the mount
    /// declares a passthrough stack depth of 2, or the kernel refuses its files as backing files.
    let rootIsStacked: Bool
    /// Devices met other than the root's, and whether each is local.
    private let others = Mutex<[UInt64: Bool]>([:])

    /// `rootFD`: the backing directory, open.
    init(rootFD: Int32, rootDevice: UInt64) {
        let type = Int64(cfs_filesystem_type(rootFD))
        self.rootDevice = rootDevice
        rootIsLocal = Self.localFilesystems.contains(type)
        rootReportsNothingAtClose = Self.withoutFlush.contains(type)
        rootIsStacked = Self.stacked.contains(type)
    }

    /// Whether the filesystem of an item just looked up (`fd`, on `device`) is local, and
    /// whether this is the first time its device is met.
    func look(atDevice device: UInt64, of fd: Int32) -> (isLocal: Bool, isNew: Bool) {
        // Most lookups stay on the backing's own device: nothing to lock.
        if device == rootDevice { return (rootIsLocal, false) }
        if let known = others.withLock({ $0[device] }) { return (known, false) }
        let isLocal = Self.localFilesystems.contains(Int64(cfs_filesystem_type(fd)))
        let isNew = others.withLock { $0.updateValue(isLocal, forKey: device) == nil }
        return (isLocal, isNew)
    }

    /// Filesystems stacked on another: the kernel counts them one deep.
    static let stacked: Set<Int64> = [
        0x794C7630,  // overlayfs
        0xF15F  // ecryptfs
    ]

    /// Local filesystems whose files have no flush method: close(2) reports nothing, and
    /// writes are reported by write(2) and fsync(2). Network filesystems (NFS, SMB, FUSE) do
    /// report deferred errors at close, and keep their FLUSH.
    static let withoutFlush: Set<Int64> = [
        0xEF53,  // ext2, ext3, ext4
        0x58465342,  // xfs
        0x9123683E,  // btrfs
        0x01021994,  // tmpfs
        0x858458F6,  // ramfs
        0xF2F52010  // f2fs
    ]

    /// Local filesystems, on a disk of this machine or in its memory: their lookups and opens
    /// wait at most for the disk. Any other (NFS, SMB, 9p, Ceph, FUSE, autofs, or one not known
    /// here) may keep a request for as long as a server or a program takes, and the io_uring
    /// queues then hand every request to their lane threads, so that none holds up its CPU's
    /// queue (ring.c).
    static let localFilesystems: Set<Int64> = withoutFlush.union([
        0x794C7630,  // overlayfs
        0x2FC12FC1,  // zfs
        0xCA451A4E,  // bcachefs
        0x4D44,  // vfat
        0x2011BAB0,  // exfat
        0x7366746E  // ntfs3
    ])
}
