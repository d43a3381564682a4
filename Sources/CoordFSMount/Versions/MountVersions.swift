import LinuxSystem
import FileVersions
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What the mount keeps of content it replaces — a file renamed over, a file's last name
/// removed, a file emptied or shortened — and which of those replacements are lost updates: a
/// write by a reader (a session, by default) of content that someone else has replaced since.
/// Such a version is kept as an unresolved conflict and told to the item's presenters; under
/// the `refuse` policy the write fails with ESTALE instead, before anything changes.
///
/// The handlers call it at their one moment each (`Filesystem+Versions`); it knows nothing of
/// FUSE. In-place writers (a database's pages) replace nothing and are not versioned.
final class MountVersions: Sendable {
    let store: VersionStore
    let reads: ReadRecords
    let settings: VersionSettings
    let kept = Atomic<Int>(0)
    let notKept = Atomic<Int>(0)
    let conflicts = Atomic<Int>(0)
    let refused = Atomic<Int>(0)
    /// Where conflicts are told to presenters, in the order they were kept.
    let telling = DispatchQueue(label: "org.coordfs.versions.telling")
    private let logger: Logger

    /// The store in the backing directory `root`, or nil where no path keeps versions.
    init?(_ settings: VersionSettings, root: Int32, logger: Logger) throws(Errno) {
        guard settings.keepsAny else { return nil }
        self.settings = settings
        store = try VersionStore(in: root, limits: settings.limits)
        reads = ReadRecords()
        self.logger = logger
    }

    func policy(of item: String) -> VersionPolicy { settings.policy(for: item) }

    /// A process that reads and writes through the mount: who it counts as among readers (nil
    /// where that cannot be told: a process gone, or one the daemon cannot see), and who it is,
    /// for the versions its writes replace.
    struct Writer {
        let reader: Int64?
        let pid: Int32
        let uid: UInt32
    }

    /// Commands of the processes that replaced something lately, by pid, read at most once a
    /// second each: an editor saving, a script rewriting, replaces again and again.
    private let commands = Mutex<[Int32: (command: String?, read: Int64)]>([:])

    /// Who `writer` is, for the version its write keeps: read from /proc only then (most
    /// replacements keep nothing).
    func origin(of writer: Writer) -> VersionOrigin {
        guard writer.pid > 0 else { return VersionOrigin(pid: 0, uid: writer.uid) }
        let now = coarseMilliseconds()
        if let known = commands.withLock({ $0[writer.pid] }), now - known.read < 1000 {
            return VersionOrigin(pid: writer.pid, uid: writer.uid, command: known.command)
        }
        let command = ProcFile.command(of: writer.pid)
        commands.withLock { commands in
            if commands.count >= 1024 { commands.removeAll(keepingCapacity: true) }
            commands[writer.pid] = (command, now)
        }
        return VersionOrigin(pid: writer.pid, uid: writer.uid, command: command)
    }

    /// The writer `pid` (0: not known), of user `uid`.
    func writer(pid: Int32, uid: UInt32) -> Writer {
        Writer(reader: pid > 0 ? settings.readers.reader(pid: pid, uid: uid) : nil, pid: pid, uid: uid)
    }

    /// Who `pid` counts as among readers, without what a record of it needs.
    func reader(pid: Int32, uid: UInt32) -> Int64? { pid > 0 ? settings.readers.reader(pid: pid, uid: uid) : nil }

    /// The mount's own changes of each item's content, counted (`ContentStamp.change`).
    private let changes = Mutex<(count: UInt64, of: [String: UInt64])>((0, [:]))

    /// The content of `item` changed through the mount (written, truncated, replaced, removed).
    func changed(_ item: String) {
        changes.withLock { Self.count(item, in: &$0, capacity: reads.capacity) }
    }

    private static func count(_ item: String, in changes: inout (count: UInt64, of: [String: UInt64]), capacity: Int) {
        changes.count += 1
        changes.of[item] = changes.count
        // Bounded as the reads are: an item forgotten here counts as changed by nobody.
        if changes.of.count > capacity {
            changes.of = changes.of.filter { $0.value > changes.count - UInt64(capacity / 2) }
        }
    }

    func stamp(_ item: String, _ info: stat) -> ContentStamp {
        ContentStamp(info, change: changes.withLock { $0.of[item] ?? 0 })
    }

    /// `reader` read or wrote `item`, and left it as `info` says (empty too: a write from a
    /// read of an empty file is no blind write).
    func saw(_ item: String, _ info: stat, by reader: Int64) {
        guard info.st_mode & S_IFMT == S_IFREG else { return }
        reads.saw(stamp(item, info), of: item, by: reader)
    }

    /// What a replacement of `item` (now `info`) by `caller` is: not versioned (nothing there
    /// worth keeping, or a path that keeps nothing), refused (stale, under `refuse`), or to keep
    /// as a version, a conflict when stale.
    enum Replacement: Equatable {
        case notVersioned
        case refused
        case keep(conflict: Bool)
    }

    /// `beingWritten`: another process has the file open for writing, and what it writes from
    /// now on lands in the file that is replaced, not at the path: kept whatever it holds yet,
    /// as a conflict. `deleting`: a removal, no update from a read, which is never stale and
    /// never refused.
    func replacement(
        of item: String, _ info: stat, by writer: Writer, beingWritten: Bool = false, deleting: Bool = false
    ) -> Replacement {
        let policy = self.policy(of: item)
        guard policy != .off, info.st_mode & S_IFMT == S_IFREG, beingWritten || Self.isVersioned(info) else {
            return .notVersioned
        }
        if deleting { return .keep(conflict: beingWritten) }
        // Checked and counted as one step: two writers that read the same content and replace it
        // at the same instant (one let past the other by a broken lease) are told apart, the
        // second stale against the first.
        // Under `refuse`, a replacement that would displace another process's writing (one let
        // past it: its writes would land in the version) is refused as a stale one is: the
        // replacing program reads again and retries once that writer is done.
        let stale = changes.withLock { changes -> Bool in
            let current = ContentStamp(info, change: changes.of[item] ?? 0)
            let stale = writer.reader.map { reads.isStale(item, by: $0, replacing: current) } ?? false
            if !((stale || beingWritten) && policy == .refuse) {
                Self.count(item, in: &changes, capacity: reads.capacity)
            }
            return stale
        }
        if (stale || beingWritten) && policy == .refuse {
            refused.add(1, ordering: .relaxed)
            logger.notice(
                "refused a \(stale ? "stale write" : "replacement") of \(item) by pid \(writer.pid): \(stale ? "it replaces content its writer never read" : "another process is still writing it") (versions refuse)"
            )
            return .refused
        }
        return .keep(conflict: stale || beingWritten)
    }

    /// Keeps `source` (the item `item`, as `info`) as a version; nil (logged and counted) where
    /// it could not be kept.
    func keep(
        _ source: VersionStore.Source, item: String, _ info: stat, cause: VersionRecord.Cause, conflict: Bool,
        by writer: Writer
    ) -> VersionRecord? {
        let origin = origin(of: writer)
        switch store.keep(source, item: item, info: info, cause: cause, replacedBy: origin, conflict: conflict) {
        case .success(let record):
            kept.add(1, ordering: .relaxed)
            if conflict {
                conflicts.add(1, ordering: .relaxed)
                logger.notice(
                    "lost update of \(item): pid \(origin.pid) (\(origin.command ?? "?")) replaced content it never read; kept as conflict version \(record.id)"
                )
            }
            return record
        case .failure(let reason):
            notKept.add(1, ordering: .relaxed)
            logger.warning("no version kept of \(item) before it was \(cause.rawValue): \(reason)")
            return nil
        }
    }

    /// A regular file with something in it: what a version is worth keeping of.
    static func isVersioned(_ info: stat) -> Bool { info.st_mode & S_IFMT == S_IFREG && info.st_size > 0 }
}
