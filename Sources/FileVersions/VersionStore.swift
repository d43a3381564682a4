import CLinux
import CoordinationRuntime
import Dispatch
import Foundation
import LinuxSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The versions of a tree's items, kept inside the tree's own filesystem, so that a version of
/// a file costs a hard link where the file's inode is given up anyway (a rename over it, its
/// last unlink), and a copy (a reflink where the filesystem has one) where its content is about
/// to be changed in place (a truncation).
///
/// Its layout, below `.coordfs-versions` in the tree's root (mode 0700, the store owner's):
///
///     content/<id>     a version's content (the item's own inode, or a copy of it)
///     journal          what is known of each version, one JSON line a change (`VersionRecord`
///                      as kept or changed since, or `{"removed": ID}`), the last line of an id
///                      winning; written again, compacted, each time the store is opened
///
/// Versions stay with the path: a version of `notes.txt` is what was at `notes.txt`, wherever
/// the file went since. The index lives in memory and is read back from the journal at start.
/// Keeping a version costs its caller the link (or copy): its line, and the bounds it may
/// bring to bear, are the store's queue's, gathered a short while (`gatherMilliseconds`).
public final class VersionStore: @unchecked Sendable {
    /// The store's directory in the tree's root, which a mount hides.
    public static let directoryName = ".coordfs-versions"
    /// The directory in it that holds the versions' content, one file each.
    public static let contentDirectoryName = "content"

    /// Where a version's content comes from.
    public enum Source {
        /// The file `name` in the directory `directory`: linked where the filesystem lets it
        /// (else copied, up to the copy limit).
        case name(String, in: Int32)
        /// An open descriptor of the file (any mode, O_PATH too): its content is copied.
        case copy(Int32)
    }

    /// Why a version was not kept.
    public enum NotKept: Error, Equatable, CustomStringConvertible {
        /// A copy was needed and the file is larger than `VersionLimits.copyLimit`.
        case tooLarge(size: Int64, limit: Int64)
        /// The file is larger than all versions together may be (`VersionLimits.totalBytes`):
        /// kept, it would be removed again once its grace ended, its space held until then.
        case largerThanTheStore(size: Int64, limit: Int64)
        case failed(Errno)

        public var description: String {
            switch self {
            case .tooLarge(let size, let limit): return "\(size) bytes, larger than the copy limit of \(limit)"
            case .largerThanTheStore(let size, let limit):
                return "\(size) bytes, more than all versions together may take (\(limit))"
            case .failed(let errno): return "\(errno)"
            }
        }
    }

    public let limits: VersionLimits
    /// The tree's root, whose `.coordfs-versions` is the store.
    private let root: Int32
    private let state = Mutex(State())
    /// Records written, bounds applied and contents removed off the callers' path, in order
    /// (`State.pending`).
    private let writer = DispatchQueue(label: "org.coordfs.versions")

    /// How long the store's queue gathers work before it does it: one wake of its thread and
    /// one write of the journal for all the versions kept meanwhile (an editor's saves, a
    /// script's rewrites), rather than one each on the saves' path. A line not yet written when
    /// the process ends leaves content no record names, removed at a later open (`readBack`);
    /// `flush` writes what is waiting.
    static let gatherMilliseconds = 2

    /// Work for the store's queue, in the order it was asked for (`drain`).
    enum Pending: Sendable {
        /// A version kept: its line, and a look at the bounds as of its time.
        case kept(VersionRecord)
        /// A version changed (resolved, pinned, made a conflict): its line.
        case changed(VersionRecord)
        /// A version removed: its line, then, with `unlink`, its content.
        case removed(String, unlink: Bool)
    }

    struct State {
        var versions: [String: [VersionRecord]] = [:]
        var totalBytes: Int64 = 0
        var lastID: UInt64 = 0
        var lastAgeCheck: Double = 0
        /// A look at the bounds is due once the versions kept last are past their grace.
        var lookAfterGrace = false
        /// The inodes of versions kept by a link.
        var linkedInodes: Set<UInt64> = []
        /// `.coordfs-versions/content` and the journal, once opened (-1 before).
        var content: Int32 = -1
        var journal: Int32 = -1
        /// What the store's queue is to do: while it holds anything, a drain is on its way.
        var pending: [Pending] = []
    }

    private let unnamedAge: Double

    /// The store's filesystem: only its inodes can be linked into it.
    private let device: UInt64

    /// The store in the directory `root` (which the caller keeps open), read back where it
    /// exists. Its directory is made with the first version kept: a tree whose files are never
    /// replaced gets none.
    /// `unnamedAge`: seconds after which content no record names is removed at the open.
    public init(in root: Int32, limits: VersionLimits = VersionLimits(), unnamedAge: Double = 600) throws(Errno) {
        self.limits = limits
        self.unnamedAge = unnamedAge
        self.root = try check(fcntl(root, F_DUPFD_CLOEXEC, 0))
        var info = stat()
        fstat(self.root, &info)
        device = UInt64(info.st_dev)
        if (try? directories(making: false)) != nil { readBack() }
    }

    // Every block on `writer` holds the store: it ends only after they have run (and may end
    // on that queue, which must not be waited for here).
    deinit {
        let (content, journal) = state.withLock { ($0.content, $0.journal) }
        for fd in [content, journal] where fd >= 0 { close(fd) }
        close(root)
    }

    /// `.coordfs-versions/content` and the journal, opened once, made where missing when
    /// `making`.
    @discardableResult
    private func directories(making: Bool) throws(Errno) -> (content: Int32, journal: Int32) {
        let known = state.withLock { ($0.content, $0.journal) }
        if known.0 >= 0 { return known }
        if making, let failure = mkdirat(root, Self.directoryName, 0o700).failure, failure != .fileExists {
            throw failure
        }
        let directory = try check(openat(root, Self.directoryName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC))
        defer { close(directory) }
        if making, let failure = mkdirat(directory, Self.contentDirectoryName, 0o700).failure, failure != .fileExists {
            throw failure
        }
        let content = try check(
            openat(directory, Self.contentDirectoryName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC))
        let journal = openat(directory, "journal", O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard journal >= 0 else {
            let failure = Errno.ofFailedCall()
            close(content)
            throw failure
        }
        let kept = state.withLock { state -> (Int32, Int32) in
            if state.content < 0 { (state.content, state.journal) = (content, journal) }
            return (state.content, state.journal)
        }
        if kept.0 != content { close(content); close(journal) }
        return kept
    }

    // MARK: Keeping

    /// Keeps what `source` holds as a version of `item`, and returns its record; `info` is the
    /// file's status as the caller found it (a regular file, not empty: the caller decides).
    public func keep(
        _ source: Source, item: String, info: stat, cause: VersionRecord.Cause,
        replacedBy: VersionOrigin? = nil, conflict: Bool = false, now: Double = VersionStore.now()
    ) -> Result<VersionRecord, NotKept> {
        // An unlinked file of 4 GB kept so would hold its blocks, which its rm was to free.
        let allocatedPastSize = VersionRecord.allocatedPastSize(of: info)
        let held = Int64(info.st_size) + allocatedPastSize
        guard held <= limits.totalBytes else {
            return .failure(.largerThanTheStore(size: held, limit: limits.totalBytes))
        }
        let content: Int32
        do { content = try directories(making: true).content } catch { return .failure(.failed(error)) }
        var id = nextID(now: now)
        var linked = false
        // An id another mount of the store took (hosts that share it keep versions in one
        // place, each counting its own microseconds) is passed over for the next.
        for attempt in 1...8 {
            if case .name(let name, let parent) = source {
                linked = FileSystemName.withCString(name) { linkat(parent, $0, content, id, 0) } == 0
                if !linked && errno == EEXIST && attempt < 8 {
                    id = nextID(now: now)
                    continue
                }
            }
            if !linked, let failure = copy(source, to: id, in: content, info: info) {
                if failure == .failed(Errno(code: EEXIST)) && attempt < 8 {
                    id = nextID(now: now)
                    continue
                }
                return .failure(failure)
            }
            break
        }
        var record = VersionRecord(
            id: id, item: item, cause: cause, time: now,
            modified: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9,
            size: Int64(info.st_size), replacedBy: replacedBy, conflict: conflict)
        // A copy holds what was written to it; a link, the inode's blocks.
        if linked {
            record.linkedInode = UInt64(info.st_ino)
            record.allocatedPastSize = allocatedPastSize
        }
        let wake = state.withLock { state -> Bool in
            state.versions[item, default: []].append(record)
            state.totalBytes += record.held
            if let inode = record.linkedInode { state.linkedInodes.insert(inode) }
            return Self.add(.kept(record), to: &state)
        }
        if wake { drainLater() }
        return .success(record)
    }

    /// Copies `source` to a new file `path` in `directory`, owned and moded as the original: a reflink
    /// where the filesystem has them, else a copy up to the copy limit.
    private func copy(_ source: Source, to path: String, in items: Int32, info: stat) -> NotKept? {
        let input: Int32
        switch source {
        case .name(let name, let parent):
            input = FileSystemName.withCString(name) { openat(parent, $0, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) }
        case .copy(let fd):
            input = open("/proc/self/fd/\(fd)", O_RDONLY | O_CLOEXEC)
        }
        guard input >= 0 else { return .failed(Errno.ofFailedCall()) }
        defer { close(input) }
        let output = openat(items, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, info.st_mode & 0o777)
        guard output >= 0 else { return .failed(Errno.ofFailedCall()) }
        var failure: NotKept?
        if cfs_clone_file(output, input) != 0 {
            let size = Int64(info.st_size)
            if size > limits.copyLimit {
                failure = .tooLarge(size: size, limit: limits.copyLimit)
            } else {
                failure = copyContent(from: input, to: output)
            }
        }
        if failure == nil {
            // As the original: its owner reads it, others as its mode says, and its time.
            _ = fchown(output, info.st_uid, info.st_gid)
            _ = fchmod(output, info.st_mode & 0o777)
            var times = [info.st_atim, info.st_mtim]
            _ = futimens(output, &times)
        }
        close(output)
        if failure != nil { _ = unlinkat(items, path, 0) }
        return failure
    }

    private func copyContent(from input: Int32, to output: Int32) -> NotKept? {
        while true {
            let copied = cfs_copy_file_range(input, nil, output, nil, 1 << 30, 0)
            if copied == 0 { return nil }
            if copied > 0 { continue }
            let failure = Errno.ofFailedCall()
            if failure == .interrupted { continue }
            guard failure == .improperLink || failure == .notSupported || failure == .invalidArgument else {
                return .failed(failure)
            }
            // Across filesystems on an older kernel, or a filesystem without it: by hand.
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            while true {
                let count = buffer.withUnsafeMutableBytes { Glibc.read(input, $0.baseAddress, $0.count) }
                if count == 0 { return nil }
                if count < 0 {
                    let failure = Errno.ofFailedCall()
                    if failure == .interrupted { continue }
                    return .failed(failure)
                }
                var offset = 0
                while offset < count {
                    let written = buffer.withUnsafeBytes {
                        Glibc.write(output, $0.baseAddress! + offset, count - offset)
                    }
                    if written < 0 {
                        let failure = Errno.ofFailedCall()
                        if failure == .interrupted { continue }
                        return .failed(failure)
                    }
                    offset += written
                }
            }
        }
    }

    // MARK: Reading

    /// The versions of `item`, oldest first.
    public func versions(of item: String) -> [VersionRecord] {
        state.withLock { $0.versions[item] ?? [] }
    }

    /// The version `id`, if the store has it.
    public func version(_ id: String) -> VersionRecord? {
        state.withLock { state in state.versions.values.lazy.compactMap { $0.first { $0.id == id } }.first }
    }

    /// Every version of every item.
    public var all: [VersionRecord] { state.withLock { $0.versions.values.flatMap { $0 } } }

    /// Whether the file `info` describes is one whose inode a version holds by a link: one
    /// name of it is the store's, which those who have the file open must not see counted.
    public func holdsLink(to info: stat) -> Bool {
        guard UInt64(info.st_dev) == device else { return false }
        return state.withLock { $0.linkedInodes.contains(UInt64(info.st_ino)) }
    }

    /// The item whose version holds the inode `info` describes by a link (a file renamed over
    /// or removed), if one does.
    public func item(holding info: stat) -> String? {
        guard UInt64(info.st_dev) == device else { return nil }
        let inode = UInt64(info.st_ino)
        return state.withLock { state in
            guard state.linkedInodes.contains(inode) else { return nil }
            for (item, versions) in state.versions where versions.contains(where: { $0.linkedInode == inode }) {
                return item
            }
            return nil
        }
    }

    /// Bytes of content the store keeps.
    public var totalBytes: Int64 { state.withLock { $0.totalBytes } }

    /// The status of version `id`'s content (its owner and mode say who may read it).
    public func contentStatus(_ record: VersionRecord) throws(Errno) -> stat {
        var info = stat()
        _ = try check(fstatat(try directories(making: false).content, record.id, &info, AT_SYMLINK_NOFOLLOW))
        return info
    }

    /// Opens version `record`'s content for reading.
    public func openContent(_ record: VersionRecord) throws(Errno) -> Int32 {
        try check(openat(try directories(making: false).content, record.id, O_RDONLY | O_NOFOLLOW | O_CLOEXEC))
    }

    // MARK: Changing

    /// Marks version `id` resolved or not, pinned or not; returns it as it now is.
    @discardableResult
    public func update(_ id: String, resolved: Bool? = nil, pinned: Bool? = nil) -> VersionRecord? {
        let (updated, wake) = state.withLock { state -> (VersionRecord?, Bool) in
            for (item, versions) in state.versions {
                guard let index = versions.firstIndex(where: { $0.id == id }) else { continue }
                if let resolved { state.versions[item]![index].resolved = resolved }
                if let pinned { state.versions[item]![index].pinned = pinned }
                let updated = state.versions[item]![index]
                return (updated, Self.add(.changed(updated), to: &state))
            }
            return (nil, false)
        }
        if wake { drainLater() }
        if let updated, resolved == true || pinned == false { prune(items: [updated.item], now: Self.now()) }
        return updated
    }

    /// The version whose content is the inode `info` describes (kept by a link), marked an
    /// unresolved conflict: someone wrote it after it stopped being the item's. Nil where no
    /// version holds that inode, or it is an unresolved conflict already (told once).
    public func markConflict(holding info: stat) -> VersionRecord? {
        guard holdsLink(to: info) else { return nil }
        let inode = UInt64(info.st_ino)
        let (marked, wake) = state.withLock { state -> (VersionRecord?, Bool) in
            for (item, versions) in state.versions {
                guard let index = versions.firstIndex(where: { $0.linkedInode == inode }) else { continue }
                state.versions[item]![index].size = Int64(info.st_size)
                state.versions[item]![index].allocatedPastSize = VersionRecord.allocatedPastSize(of: info)
                state.totalBytes += state.versions[item]![index].held - versions[index].held
                if versions[index].isUnresolvedConflict { return (nil, false) }
                state.versions[item]![index].conflict = true
                state.versions[item]![index].resolved = false
                let marked = state.versions[item]![index]
                return (marked, Self.add(.changed(marked), to: &state))
            }
            return (nil, false)
        }
        if wake { drainLater() }
        return marked
    }

    /// Removes version `id`; false if the store has none of that id. `now`: its content is gone
    /// before this returns (a version taken back: its link must not outlive the call).
    @discardableResult
    public func remove(_ id: String, now: Bool = false) -> Bool {
        guard let record = version(id) else { return false }
        forget([record], now: now)
        return true
    }

    /// Waits until every record and removal asked for so far is on disk (written, not synced),
    /// and the bounds have taken what they take of the versions kept so far.
    public func flush() { writer.sync { drain() } }

    // MARK: Bounds

    /// Removes what the limits no longer keep: of `items` past their count, of all past the
    /// bytes whenever the total passes them, past the age at most once a minute. For versions
    /// kept, on the store's queue (`drain`): a look at every version is no save's to wait for.
    private func prune(items: [String], now: Double) {
        let excess = state.withLock { state -> [VersionRecord] in
            let overCount = Set(items).filter { (state.versions[$0]?.count ?? 0) > limits.perItem }
            let overBytes = state.totalBytes > limits.totalBytes
            let ageDue = now - state.lastAgeCheck > 60
            guard !overCount.isEmpty || overBytes || ageDue else { return [] }
            if ageDue { state.lastAgeCheck = now }
            let candidates =
                overBytes || ageDue
                ? state.versions.values.flatMap { $0 } : overCount.flatMap { state.versions[$0] ?? [] }
            return limits.excess(of: candidates, now: now)
        }
        forget(excess)
        lookAgainAfterGrace()
    }

    /// Still past the bytes with versions too young to remove (`VersionLimits.grace`): the
    /// bounds are looked at again once those are old enough, so that the space comes back
    /// without waiting for the next version kept.
    private func lookAgainAfterGrace() {
        let due = state.withLock { state -> Bool in
            guard state.totalBytes > limits.totalBytes, !state.lookAfterGrace else { return false }
            state.lookAfterGrace = true
            return true
        }
        guard due else { return }
        writer.asyncAfter(deadline: .now() + .milliseconds(Int(limits.grace * 1000) + 50)) { [self] in
            state.withLock { $0.lookAfterGrace = false }
            prune(items: [], now: Self.now())
        }
    }

    /// `now`: the content is removed before this returns; else by the store's queue, after the
    /// removals' lines.
    private func forget(_ records: [VersionRecord], now: Bool = false) {
        guard !records.isEmpty else { return }
        let ids = Set(records.map(\.id))
        let wake = state.withLock { state -> Bool in
            for item in Set(records.map(\.item)) {
                state.versions[item]?.removeAll { ids.contains($0.id) }
                if state.versions[item]?.isEmpty == true { state.versions[item] = nil }
            }
            state.totalBytes -= records.reduce(0) { $0 + $1.held }
            for inode in records.compactMap(\.linkedInode) { state.linkedInodes.remove(inode) }
            var wake = false
            for record in records { wake = Self.add(.removed(record.id, unlink: !now), to: &state) || wake }
            return wake
        }
        if wake { drainLater() }
        guard now, let content = try? directories(making: false).content else { return }
        for record in records { _ = unlinkat(content, record.id, 0) }
    }

    // MARK: The store's queue

    /// Adds `work` for the store's queue: true when it is the first since the queue last took
    /// what was waiting, and the queue must be woken (`drainLater`, once the lock is let go).
    private static func add(_ work: Pending, to state: inout State) -> Bool {
        state.pending.append(work)
        return state.pending.count == 1
    }

    /// Wakes the store's queue once `gatherMilliseconds` have passed, to do what was asked for
    /// meanwhile. The block holds the store, which lives until it has run.
    private func drainLater() {
        writer.asyncAfter(deadline: .now() + .milliseconds(Self.gatherMilliseconds)) { [self] in drain() }
    }

    /// What is waiting for the store's queue, taken: what is asked for from now on wakes it again.
    private func take() -> [Pending] {
        state.withLock { state -> [Pending] in
            let work = state.pending
            state.pending = []
            return work
        }
    }

    /// Does what was gathered, on the store's queue: the bounds as of the newest version kept
    /// (what they remove joins the rest), the lines in one write, in the order asked for, then
    /// the removals of content, each after its line. Built here, not by the saves: a record's
    /// line costs more than the rest of keeping it but its link.
    private func drain() {
        var work: [Pending] = []
        var taken = take()
        while !taken.isEmpty {
            work += taken
            let kept = taken.compactMap { pending -> VersionRecord? in
                if case .kept(let record) = pending { record } else { nil }
            }
            guard let newest = kept.map(\.time).max() else { break }
            prune(items: kept.map(\.item), now: newest)
            taken = take()
        }
        guard !work.isEmpty else { return }
        var lines: [UInt8] = []
        var removing: [String] = []
        for pending in work {
            switch pending {
            case .kept(let record), .changed(let record):
                lines += Self.json(record)
            case .removed(let id, unlink: let unlink):
                lines += Self.removal(id)
                if unlink { removing.append(id) }
            }
        }
        if let journal = try? directories(making: true).journal {
            _ = lines.withUnsafeBytes { Glibc.write(journal, $0.baseAddress, $0.count) }
        }
        // Removing a large copy frees its blocks for as long as the disk takes.
        if !removing.isEmpty, let content = try? directories(making: false).content {
            for id in removing { _ = unlinkat(content, id, 0) }
        }
    }

    // MARK: The directory

    public static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// Microseconds since 1970, one past the last where the clock has not moved on.
    private func nextID(now: Double) -> String {
        let wanted = UInt64(max(0, now) * 1e6)
        let id = state.withLock { state -> UInt64 in
            state.lastID = max(wanted, state.lastID + 1)
            return state.lastID
        }
        return String(id)
    }

    /// A removal's line: the last line of an id wins, and this one says it is gone.
    static func removal(_ id: String) -> [UInt8] { Array("{\"removed\":\"\(id)\"}\n".utf8) }

    /// The record as `JSONDecoder` reads it back, written byte by byte: one is built for every
    /// save (by the store's queue), and JSONEncoder (or strings joined) cost more than the rest
    /// of keeping a version.
    static func json(_ record: VersionRecord) -> [UInt8] {
        var line: [UInt8] = []
        line.reserveCapacity(224 + 2 * record.item.utf8.count)
        line += "{\"id\":".utf8
        appendString(record.id, to: &line)
        line += ",\"item\":".utf8
        appendString(record.item, to: &line)
        line += ",\"cause\":\"\(record.cause.rawValue)\",\"time\":\(record.time),\"modified\":\(record.modified)".utf8
        line +=
            ",\"size\":\(record.size),\"conflict\":\(record.conflict),\"resolved\":\(record.resolved),\"pinned\":\(record.pinned)"
            .utf8
        if let origin = record.replacedBy {
            line += ",\"replacedBy\":{\"pid\":\(origin.pid),\"uid\":\(origin.uid)".utf8
            if let command = origin.command {
                line += ",\"command\":".utf8
                appendString(command, to: &line)
            }
            if let host = origin.host {
                line += ",\"host\":".utf8
                appendString(host, to: &line)
            }
            line.append(UInt8(ascii: "}"))
        }
        if let inode = record.linkedInode { line += ",\"linkedInode\":\(inode)".utf8 }
        line += "}\n".utf8
        return line
    }

    /// `text` as a JSON string: quotes and backslashes escaped, control characters as \u00XX,
    /// everything else as its UTF-8.
    private static func appendString(_ text: String, to line: inout [UInt8]) {
        let hex = Array("0123456789abcdef".utf8)
        line.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): line += [UInt8(ascii: "\\"), byte]
            case ..<0x20:
                line += [
                    UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)],
                    hex[Int(byte & 15)]
                ]
            default: line.append(byte)
            }
        }
        line.append(UInt8(ascii: "\""))
    }

    /// Reads the journal back: the last line of each id wins, removed ones are gone, records
    /// whose content is gone are dropped, and the journal is written again with what is left
    /// (compacted). Content no record names is removed once it is `unnamedAge` old.
    private func readBack() {
        guard let (content, journal) = try? directories(making: false) else { return }
        var latest: [String: VersionRecord] = [:]
        let bytes = Self.readAll(journal)
        for line in bytes.split(separator: UInt8(ascii: "\n")) where !line.isEmpty {
            let data = Data(line)
            if let removal = try? JSONDecoder().decode([String: String].self, from: data), let id = removal["removed"] {
                latest[id] = nil
            } else if let record = try? JSONDecoder().decode(VersionRecord.self, from: data) {
                latest[record.id] = record
            }
        }
        var found = State()
        (found.content, found.journal) = (content, journal)
        var compacted: [UInt8] = []
        for (id, var record) in latest.sorted(by: { $0.key < $1.key }) {
            var info = stat()
            guard fstatat(content, id, &info, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            record.size = Int64(info.st_size)
            record.allocatedPastSize = VersionRecord.allocatedPastSize(of: info)
            if record.linkedInode != nil { record.linkedInode = UInt64(info.st_ino) }
            if let inode = record.linkedInode { found.linkedInodes.insert(inode) }
            found.versions[record.item, default: []].append(record)
            found.totalBytes += record.held
            found.lastID = max(found.lastID, UInt64(id) ?? 0)
            compacted += Self.json(record)
        }
        if compacted.count < bytes.count,
            let directory = Optional(openat(root, Self.directoryName, O_RDONLY | O_DIRECTORY | O_CLOEXEC)),
            directory >= 0
        {
            let fresh = openat(directory, "journal.new", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            if fresh >= 0 {
                let written = compacted.withUnsafeBytes { Glibc.write(fresh, $0.baseAddress, $0.count) }
                close(fresh)
                if written == compacted.count, renameat(directory, "journal.new", directory, "journal") == 0 {
                    let reopened = openat(directory, "journal", O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC)
                    if reopened >= 0 { close(journal); found.journal = reopened }
                }
            }
            close(directory)
        }
        removeUnnamed(in: content, keeping: Set(found.versions.values.joined().map(\.id)))
        state.withLock { $0 = found }
    }

    /// Removes the content no record names: kept by a process that ended before its record's
    /// line was written. Only once its link is `unnamedAge` old (ten minutes; its change time):
    /// another process keeping versions in the same directory may not have written its line yet.
    private func removeUnnamed(in content: Int32, keeping ids: Set<String>) {
        let files = FileManager.default
        let directory = "/proc/self/fd/\(content)"
        let before = Self.now() - unnamedAge
        func removeIfUnnamed(_ path: String, id: String) {
            var info = stat()
            guard !ids.contains(id), fstatat(content, path, &info, AT_SYMLINK_NOFOLLOW) == 0,
                info.st_mode & S_IFMT == S_IFREG,
                Double(info.st_ctim.tv_sec) < before
            else { return }
            _ = unlinkat(content, path, 0)
        }
        for id in (try? files.contentsOfDirectory(atPath: directory)) ?? [] { removeIfUnnamed(id, id: id) }
    }

    private static func readAll(_ fd: Int32) -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var offset: off_t = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if count <= 0 { return bytes }
            bytes += buffer[0..<count]
            offset += off_t(count)
        }
    }
}
