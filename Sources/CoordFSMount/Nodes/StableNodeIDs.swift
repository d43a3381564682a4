import CLinux
import CoordinationRuntime
import LinuxSystem

/// Node ids that outlive the daemon: an item on the backing root's filesystem whose file handle
/// is 8 bytes of the root's own kind (ext4's inode number and generation; XFS's where mounted
/// `inode32`, its default handles being longer) has those 8 bytes for its id. Every daemon of the mount gives the item the same id, so a handle the
/// kernel gave out before the mount was mounted again (an NFS client's across a restart of the
/// daemon, a backup tool's, fstests generic/477) opens it again: the id is turned back into the
/// backing handle (`InodeTable.revive`). An item whose handle is another size, on another
/// filesystem below the root, or whose 8 bytes read below 2^32 (a generation of 0) is counted
/// as before: the counted ids stay below 2^32, so the two never meet.
struct StableNodeIDs: Sendable {
    /// The backing root's filesystem: only its items' handles open with the root's.
    let device: UInt64
    /// The backing root is its filesystem's root, not a directory below it: any item of the
    /// filesystem, found by its handle, is below the root.
    let rootIsFilesystemRoot: Bool
    private let handleType: Int32

    /// Nil where the root's own handle is not 8 bytes, or handles cannot be used at all.
    init?(rootFD: Int32, device: UInt64, handlesWork: Bool) {
        var probe = cfs_file_handle()
        var mount: Int32 = 0
        guard handlesWork, cfs_name_to_handle(rootFD, &probe, &mount) == 0, probe.handle_bytes == 8 else { return nil }
        self.device = device
        handleType = probe.handle_type
        rootIsFilesystemRoot =
            pathBytes(of: rootFD).map { MountInfo.isFilesystemRoot(FileSystemName.string($0), device: device) } ?? false
    }

    /// Whether the root's handles are the kind that say the inode number (FILEID_INO32_GEN:
    /// the number's low 32 bits, then the generation), so that a handle can be checked against
    /// a stat of the same name (`InodeTable.rememberUnopened`).
    var handlesSayTheInode: Bool { handleType == 1 }

    /// The id for `handle`, taken by name, when it names the inode a stat by the same name
    /// found (`number`); nil when it cannot have one, or names another (the name changed
    /// between the two calls).
    func id(for handle: cfs_file_handle, ofInode number: UInt64) -> NodeID? {
        guard handlesSayTheInode, let id = id(for: handle), id.value & 0xFFFF_FFFF == number & 0xFFFF_FFFF else {
            return nil
        }
        return id
    }

    /// The id for an item with `handle`, nil when it cannot have one.
    func id(for handle: cfs_file_handle) -> NodeID? {
        guard handle.handle_bytes == 8, handle.handle_type == handleType else { return nil }
        var value: UInt64 = 0
        withUnsafeBytes(of: handle.f_handle) { raw in
            for index in 0..<8 { value |= UInt64(raw[index]) << (8 * UInt64(index)) }
        }
        return value >> 32 == 0 ? nil : NodeID(value)
    }

    /// The id for the item of a handle fanotify reported (laid out as `cfs_file_handle`), nil
    /// when it cannot have one.
    func id(reported handle: UnsafeRawPointer) -> NodeID? {
        let bytes = handle.loadUnaligned(as: UInt32.self)
        let type = handle.loadUnaligned(fromByteOffset: 4, as: Int32.self)
        guard bytes == 8, type == handleType else { return nil }
        let value = UInt64(littleEndian: handle.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        return value >> 32 == 0 ? nil : NodeID(value)
    }

    /// The backing handle `id` was made from (nil for a counted id).
    func handle(of id: NodeID) -> cfs_file_handle? {
        guard id.isStable else { return nil }
        var handle = cfs_file_handle()
        handle.handle_bytes = 8
        handle.handle_type = handleType
        withUnsafeMutableBytes(of: &handle.f_handle) { raw in
            for index in 0..<8 { raw[index] = UInt8(truncatingIfNeeded: id.value >> (8 * UInt64(index))) }
        }
        return handle
    }
}
