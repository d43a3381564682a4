import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Who made an access a version remembers: the process, its user, its command and the session it
/// ran in (what decides whose reads a write may be stale against).
public struct VersionOrigin: Codable, Hashable, Sendable {
    public var pid: Int32
    public var uid: UInt32
    public var command: String?
    public var host: String?

    public init(pid: Int32, uid: UInt32, command: String? = nil, host: String? = nil) {
        self.pid = pid
        self.uid = uid
        self.command = command
        self.host = host
    }
}

/// One kept version of an item: content that was at the item's path before something replaced
/// it, and what is known of how.
public struct VersionRecord: Codable, Hashable, Sendable {
    /// How the content stopped being the item's.
    public enum Cause: String, Codable, Sendable {
        /// Another file was renamed over it (an atomic save).
        case replaced
        /// It was emptied or shortened (an `O_TRUNC` open, a truncation).
        case truncated
        /// Its last name was removed.
        case deleted
        /// A program added it (`FileVersion.addOfItem`, the protocol's `add_version`).
        case added
    }

    /// Unique in the store and ordered by when it was kept: microseconds since 1970, in decimal (a number JSON readers take exactly, below 2^53).
    public let id: String
    /// The item's path below the store's root (the backing directory).
    public let item: String
    public var cause: Cause
    /// Seconds since 1970 when it was kept.
    public var time: Double
    /// When its content was last modified, in seconds since 1970.
    public var modified: Double
    public var size: Int64
    /// Whose access replaced it.
    public var replacedBy: VersionOrigin?
    /// Replaced by a writer that had read an older content than this one: a lost update, kept
    /// as a conflict until someone resolves it.
    public var conflict: Bool
    public var resolved: Bool
    /// Kept whatever the bounds say, until removed by hand.
    public var pinned: Bool
    /// The item's own inode, linked into the store (nil for a copy): to the kernel's eyes a
    /// name of that inode, which whoever still has the file open must not count.
    public var linkedInode: UInt64?
    /// Bytes its content has allocated past its size (`allocatedPastSize(of:)`). Not in the
    /// journal: read from the content again at each open.
    public var allocatedPastSize: Int64 = 0
    /// The bytes its content holds on the store's filesystem, as the bounds count them.
    public var held: Int64 { size + allocatedPastSize }

    enum CodingKeys: String, CodingKey {
        case id, item, cause, time, modified, size, replacedBy, conflict, resolved, pinned, linkedInode
    }

    public init(
        id: String, item: String, cause: Cause, time: Double, modified: Double, size: Int64,
        replacedBy: VersionOrigin? = nil, conflict: Bool = false, resolved: Bool = false, pinned: Bool = false
    ) {
        self.id = id
        self.item = item
        self.cause = cause
        self.time = time
        self.modified = modified
        self.size = size
        self.replacedBy = replacedBy
        self.conflict = conflict
        self.resolved = resolved
        self.pinned = pinned
    }

    /// The bytes a file of status `info` has allocated past its size (preallocated with
    /// `fallocate -k`, as databases and fstests do), which its size does not show and a version
    /// kept by a link holds on to. None for a sparse file: it counts its size.
    public static func allocatedPastSize(of info: stat) -> Int64 {
        let block = max(Int64(info.st_blksize), 512)
        let rounded = (Int64(info.st_size) + block - 1) / block * block
        return max(0, Int64(info.st_blocks) * 512 - rounded)
    }

    /// An unresolved conflict: bounds never take it before it is resolved.
    public var isUnresolvedConflict: Bool { conflict && !resolved }
}
