import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A file's content as far as replacing it is concerned: its inode, when and how large it was
/// last written and changed, and how many changes the mount itself has made to it (`change`). A
/// rename over the file changes the inode; a write in place, the rest. The count tells apart
/// two writes in place of one size within one clock tick, which the times do not.
public struct ContentStamp: Hashable, Sendable {
    public var device: UInt64
    public var inode: UInt64
    public var modifiedSeconds: Int
    public var modifiedNanoseconds: Int
    public var changedSeconds: Int
    public var changedNanoseconds: Int
    public var size: Int64
    public var change: UInt64

    public init(_ info: stat, change: UInt64 = 0) {
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        modifiedSeconds = info.st_mtim.tv_sec
        modifiedNanoseconds = info.st_mtim.tv_nsec
        changedSeconds = info.st_ctim.tv_sec
        changedNanoseconds = info.st_ctim.tv_nsec
        size = Int64(info.st_size)
        self.change = change
    }
}

/// Who counts as one reader-writer when a write is checked against earlier reads: an agent's
/// read and its write are often two processes (a `cat`, then a script), of one session.
public enum ReaderIdentity: String, Sendable, CaseIterable {
    /// Processes of one session (a terminal, an agent and the commands it runs): the default.
    case session
    /// Processes of one process group (a shell pipeline, a job).
    case processGroup = "process-group"
    /// Each process on its own.
    case process
    /// Every process of a user.
    case user

    /// The reader `pid`, of user `uid`, counts as; nil where the process is gone.
    public func reader(pid: Int32, uid: UInt32) -> Int64? {
        switch self {
        case .session:
            let session = getsid(pid)
            return session < 0 ? nil : Int64(session)
        case .processGroup:
            let group = getpgid(pid)
            return group < 0 ? nil : Int64(group)
        case .process: return Int64(pid)
        // Apart from process numbers, which are below 2^22.
        case .user: return -1 - Int64(uid)
        }
    }
}

/// Which content of each item each reader saw last, read or written, so that a write that
/// replaces content its writer never saw — a lost update: A and B read, A writes, B writes from
/// its old read — is told from one that follows what its writer read. A writer that never read
/// the item writes blindly and is never stale. Bounded: past `capacity` readers' records, the
/// oldest tenth are forgotten (their writes are then blind).
public final class ReadRecords: Sendable {
    struct Key: Hashable {
        let item: String
        let reader: Int64
    }

    struct Seen {
        var stamp: ContentStamp
        var order: UInt64
    }

    private let records = Mutex<(seen: [Key: Seen], next: UInt64)>(([:], 0))
    public let capacity: Int

    public init(capacity: Int = 65_536) { self.capacity = capacity }

    /// `reader` has read `item` as `stamp`, or written it and left it so.
    public func saw(_ stamp: ContentStamp, of item: String, by reader: Int64) {
        records.withLock { records in
            records.next += 1
            records.seen[Key(item: item, reader: reader)] = Seen(stamp: stamp, order: records.next)
            guard records.seen.count > capacity else { return }
            let oldest = records.seen.sorted { $0.value.order < $1.value.order }.prefix(max(1, capacity / 10))
            for (key, _) in oldest { records.seen[key] = nil }
        }
    }

    /// Whether a write by `writer` that replaces `item`, now `current`, comes from an older read:
    /// `writer` last saw another content of it.
    public func isStale(_ item: String, by writer: Int64, replacing current: ContentStamp) -> Bool {
        records.withLock { records in
            guard let seen = records.seen[Key(item: item, reader: writer)] else { return false }
            return seen.stamp != current
        }
    }

    /// What `reader` last saw of `item`, if it read or wrote it.
    public func lastSeen(of item: String, by reader: Int64) -> ContentStamp? {
        records.withLock { $0.seen[Key(item: item, reader: reader)]?.stamp }
    }

    public var count: Int { records.withLock { $0.seen.count } }
}
