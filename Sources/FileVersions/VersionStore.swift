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
///     items/<slot>/path        the item's path below the root, as bytes
///     items/<slot>/<id>        a version's content (the item's own inode, or a copy of it)
///     items/<slot>/<id>.json   what is known of it (`VersionRecord`)
///
/// A slot is named after a hash of the item's path. Versions stay with the path: a version of
/// `notes.txt` is what was at `notes.txt`, wherever the file went since. The index lives in
/// memory and is read back from the directory at start; records are written beside the content
/// off the caller's path, so keeping a version costs the caller its link (or copy) only.
public final class VersionStore: @unchecked Sendable {
    /// The store's directory in the tree's root, which a mount hides.
    public static let directoryName = ".coordfs-versions"

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
        case failed(Errno)

        public var description: String {
            switch self {
            case .tooLarge(let size, let limit): return "\(size) bytes, larger than the copy limit of \(limit)"
            case .failed(let errno): return "\(errno)"
            }
        }
    }

    public let limits: VersionLimits
    /// The tree's root, whose `.coordfs-versions` is the store.
    private let root: Int32
    private let state = Mutex(State())
    /// Records written and contents removed off the callers' path, in order.
    private let writer = DispatchQueue(label: "org.coordfs.versions")

    struct State {
        var versions: [String: [VersionRecord]] = [:]
        var slots: [String: String] = [:]
        var usedSlots: Set<String> = []
        var totalBytes: Int64 = 0
        var lastID: UInt64 = 0
        var lastAgeCheck: Double = 0
        /// The inodes of versions kept by a link.
        var linkedInodes: Set<UInt64> = []
        /// `.coordfs-versions/items`, once opened (-1 before).
        var items: Int32 = -1
    }

    /// The store's filesystem: only its inodes can be linked into it.
    private let device: UInt64

    /// The store in the directory `root` (which the caller keeps open), read back where it
    /// exists. Its directory is made with the first version kept: a tree whose files are never
    /// replaced gets none.
    public init(in root: Int32, limits: VersionLimits = VersionLimits()) throws(Errno) {
        self.limits = limits
        self.root = try check(fcntl(root, F_DUPFD_CLOEXEC, 0))
        var info = stat()
        fstat(self.root, &info)
        device = UInt64(info.st_dev)
        if let items = try? items(making: false) { readBack(from: items) }
    }

    // Every block on `writer` holds the store: it ends only after they have run (and may end
    // on that queue, which must not be waited for here).
    deinit {
        let items = state.withLock { $0.items }
        if items >= 0 { close(items) }
        close(root)
    }

    /// `.coordfs-versions/items`, opened once, made where missing when `making`.
    private func items(making: Bool) throws(Errno) -> Int32 {
        let known = state.withLock { $0.items }
        if known >= 0 { return known }
        if making, mkdirat(root, Self.directoryName, 0o700) == -1 && Errno.current != .fileExists { throw Errno.current }
        let directory = try check(openat(root, Self.directoryName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC))
        defer { close(directory) }
        if making, mkdirat(directory, "items", 0o700) == -1 && Errno.current != .fileExists { throw Errno.current }
        let opened = try check(openat(directory, "items", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC))
        let kept = state.withLock { state -> Int32 in
            if state.items < 0 { state.items = opened }
            return state.items
        }
        if kept != opened { close(opened) }
        return kept
    }

    // MARK: Keeping

    /// Keeps what `source` holds as a version of `item`, and returns its record; `info` is the
    /// file's status as the caller found it (a regular file, not empty: the caller decides).
    public func keep(_ source: Source, item: String, info: stat, cause: VersionRecord.Cause,
                     replacedBy: VersionOrigin? = nil, conflict: Bool = false, now: Double = VersionStore.now()) -> Result<VersionRecord, NotKept> {
        let slot: Int32
        do { slot = try slotDirectory(for: item) } catch { return .failure(.failed(error)) }
        defer { close(slot) }
        let id = nextID(now: now)
        var linked = false
        if case .name(let name, let parent) = source {
            linked = FileSystemName.withCString(name) { linkat(parent, $0, slot, id, 0) } == 0
        }
        if !linked {
            if let failure = copy(source, to: id, in: slot, info: info) { return .failure(failure) }
        }
        var record = VersionRecord(id: id, item: item, cause: cause, time: now,
                                   modified: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9,
                                   size: Int64(info.st_size), replacedBy: replacedBy, conflict: conflict)
        if linked { record.linkedInode = UInt64(info.st_ino) }
        state.withLock { state in
            state.versions[item, default: []].append(record)
            state.totalBytes += record.size
            if let inode = record.linkedInode { state.linkedInodes.insert(inode) }
        }
        // A conflict's record is on disk before the caller goes on: after a crash it must not
        // come back as a version the bounds may take.
        if conflict { writer.sync { writeRecord(record) } } else { write(record) }
        prune(item: item, now: now)
        return .success(record)
    }

    /// Copies `source` to a new file `id` in `slot`, owned and moded as the original: a reflink
    /// where the filesystem has them, else a copy up to the copy limit.
    private func copy(_ source: Source, to id: String, in slot: Int32, info: stat) -> NotKept? {
        let input: Int32
        switch source {
        case .name(let name, let parent):
            input = FileSystemName.withCString(name) { openat(parent, $0, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) }
        case .copy(let fd):
            input = open("/proc/self/fd/\(fd)", O_RDONLY | O_CLOEXEC)
        }
        guard input >= 0 else { return .failed(Errno.current) }
        defer { close(input) }
        let output = openat(slot, id, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, info.st_mode & 0o777)
        guard output >= 0 else { return .failed(Errno.current) }
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
        if failure != nil { _ = unlinkat(slot, id, 0) }
        return failure
    }

    private func copyContent(from input: Int32, to output: Int32) -> NotKept? {
        while true {
            let copied = cfs_copy_file_range(input, nil, output, nil, 1 << 30, 0)
            if copied == 0 { return nil }
            if copied > 0 { continue }
            let failure = Errno.current
            if failure == .interrupted { continue }
            guard failure == .improperLink || failure == .notSupported || failure == .invalidArgument else { return .failed(failure) }
            // Across filesystems on an older kernel, or a filesystem without it: by hand.
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            while true {
                let count = buffer.withUnsafeMutableBytes { Glibc.read(input, $0.baseAddress, $0.count) }
                if count == 0 { return nil }
                if count < 0 {
                    if Errno.current == .interrupted { continue }
                    return .failed(Errno.current)
                }
                var offset = 0
                while offset < count {
                    let written = buffer.withUnsafeBytes { Glibc.write(output, $0.baseAddress! + offset, count - offset) }
                    if written < 0 {
                        if Errno.current == .interrupted { continue }
                        return .failed(Errno.current)
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

    /// Bytes of content the store keeps.
    public var totalBytes: Int64 { state.withLock { $0.totalBytes } }

    /// The status of version `id`'s content (its owner and mode say who may read it).
    public func contentStatus(_ record: VersionRecord) throws(Errno) -> stat {
        let slot = try openSlot(of: record.item)
        defer { close(slot) }
        var info = stat()
        _ = try check(fstatat(slot, record.id, &info, AT_SYMLINK_NOFOLLOW))
        return info
    }

    /// Opens version `record`'s content for reading.
    public func openContent(_ record: VersionRecord) throws(Errno) -> Int32 {
        let slot = try openSlot(of: record.item)
        defer { close(slot) }
        return try check(openat(slot, record.id, O_RDONLY | O_NOFOLLOW | O_CLOEXEC))
    }

    // MARK: Changing

    /// Marks version `id` resolved or not, pinned or not; returns it as it now is.
    @discardableResult
    public func update(_ id: String, resolved: Bool? = nil, pinned: Bool? = nil) -> VersionRecord? {
        let updated = state.withLock { state -> VersionRecord? in
            for (item, versions) in state.versions {
                guard let index = versions.firstIndex(where: { $0.id == id }) else { continue }
                if let resolved { state.versions[item]![index].resolved = resolved }
                if let pinned { state.versions[item]![index].pinned = pinned }
                return state.versions[item]![index]
            }
            return nil
        }
        if let updated {
            write(updated)
            if resolved == true || pinned == false { prune(item: updated.item, now: Self.now()) }
        }
        return updated
    }

    /// Removes version `id`; false if the store has none of that id. `now`: its content is gone
    /// before this returns (a version taken back: its link must not outlive the call).
    @discardableResult
    public func remove(_ id: String, now: Bool = false) -> Bool {
        guard let record = version(id) else { return false }
        forget([record], now: now)
        return true
    }

    /// Waits until every record and removal asked for so far is on disk.
    public func flush() { writer.sync {} }

    // MARK: Bounds

    /// Removes what the limits no longer keep: of `item` past its count at once, of all past the
    /// bytes whenever the total passes them, past the age at most once a minute.
    private func prune(item: String, now: Double) {
        let excess = state.withLock { state -> [VersionRecord] in
            let overCount = (state.versions[item]?.count ?? 0) > limits.perItem
            let overBytes = state.totalBytes > limits.totalBytes
            let ageDue = now - state.lastAgeCheck > 60
            guard overCount || overBytes || ageDue else { return [] }
            if ageDue { state.lastAgeCheck = now }
            let candidates = overBytes || ageDue ? state.versions.values.flatMap { $0 } : state.versions[item] ?? []
            return limits.excess(of: candidates, now: now)
        }
        forget(excess)
    }

    private func forget(_ records: [VersionRecord], now: Bool = false) {
        guard !records.isEmpty else { return }
        let ids = Set(records.map(\.id))
        state.withLock { state in
            for item in Set(records.map(\.item)) {
                state.versions[item]?.removeAll { ids.contains($0.id) }
                if state.versions[item]?.isEmpty == true { state.versions[item] = nil }
            }
            state.totalBytes -= records.reduce(0) { $0 + $1.size }
            for inode in records.compactMap(\.linkedInode) { state.linkedInodes.remove(inode) }
        }
        for record in records where now {
            guard let slot = try? openSlot(of: record.item) else { continue }
            _ = unlinkat(slot, record.id, 0)
            close(slot)
        }
        writer.async { [self] in
            for record in records {
                guard let slot = try? openSlot(of: record.item) else { continue }
                _ = unlinkat(slot, record.id, 0)
                _ = unlinkat(slot, record.id + ".json", 0)
                close(slot)
            }
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

    /// The slot of `item`, made where missing.
    private func slotDirectory(for item: String) throws(Errno) -> Int32 {
        let items = try items(making: true)
        if let known = state.withLock({ $0.slots[item] }) {
            return try check(openat(items, known, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC))
        }
        let name = state.withLock { state -> String in
            let base = Self.hash(item)
            var name = base, suffix = 1
            while state.usedSlots.contains(name) { name = base + "-\(suffix)"; suffix += 1 }
            state.usedSlots.insert(name)
            state.slots[item] = name
            return name
        }
        if mkdirat(items, name, 0o700) == -1 && Errno.current != .fileExists { throw Errno.current }
        let slot = try check(openat(items, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC))
        // Which item the slot is of, written off the caller's path as the records are.
        writer.async { [self] in
            guard let slot = try? openSlot(of: item) else { return }
            _ = writeFile(Array(item.utf8), named: "path", in: slot)
            close(slot)
        }
        return slot
    }

    private func openSlot(of item: String) throws(Errno) -> Int32 {
        guard let name = state.withLock({ $0.slots[item] }) else { throw .noSuchFileOrDirectory }
        return try check(openat(try items(making: false), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC))
    }

    private func write(_ record: VersionRecord) {
        writer.async { [self] in writeRecord(record) }
    }

    /// On `writer`.
    private func writeRecord(_ record: VersionRecord) {
        guard let bytes = try? JSONEncoder().encode(record), let slot = try? openSlot(of: record.item) else { return }
        _ = writeFile(Array(bytes), named: record.id + ".json", in: slot)
        close(slot)
    }

    private func writeFile(_ bytes: [UInt8], named name: String, in slot: Int32) -> Errno? {
        let temporary = name + ".new"
        let fd = openat(slot, temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return Errno.current }
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        let failure = written == bytes.count ? nil : (written < 0 ? Errno.current : Errno.noSpace)
        close(fd)
        if failure == nil, renameat(slot, temporary, slot, name) == 0 { return nil }
        let renameFailure = failure ?? Errno.current
        _ = unlinkat(slot, temporary, 0)
        return renameFailure
    }

    /// FNV-1a of the path's bytes, as 16 hexadecimal digits.
    static func hash(_ item: String) -> String {
        var value: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in item.utf8 { value = (value ^ UInt64(byte)) &* 0x100_0000_01b3 }
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    /// Reads every slot back: its path, its records, and contents whose record was never
    /// written (a stop right after the keep) as versions of unknown cause.
    private func readBack(from items: Int32) {
        var found = State()
        found.items = items
        for slotName in Self.names(in: items) {
            let slot = openat(items, slotName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard slot >= 0 else { continue }
            defer { close(slot) }
            // A slot whose path was never written (a stop right after its first version) keeps
            // its name from other items, and its content stays on disk, unlisted.
            found.usedSlots.insert(slotName)
            guard let pathBytes = Self.readFile(named: "path", in: slot) else { continue }
            let item = String(decoding: pathBytes, as: UTF8.self)
            found.slots[item] = slotName
            let names = Self.names(in: slot)
            var records: [VersionRecord] = []
            for name in names where !name.contains(".") && name != "path" && UInt64(name) != nil {
                var info = stat()
                guard fstatat(slot, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
                var record = Self.readFile(named: name + ".json", in: slot).flatMap { try? JSONDecoder().decode(VersionRecord.self, from: Data($0)) }
                    ?? VersionRecord(id: name, item: item, cause: .replaced, time: Double(UInt64(name)!) / 1e6,
                                     modified: Double(info.st_mtim.tv_sec), size: Int64(info.st_size))
                record.size = Int64(info.st_size)
                record.linkedInode = info.st_nlink > 1 || record.linkedInode != nil ? UInt64(info.st_ino) : nil
                if let inode = record.linkedInode { found.linkedInodes.insert(inode) }
                records.append(record)
                found.totalBytes += record.size
                found.lastID = max(found.lastID, UInt64(name)!)
            }
            // Records whose content is gone, and half-written files, are dropped.
            for name in names where name.hasSuffix(".new") || (name.hasSuffix(".json") && !names.contains(String(name.dropLast(5)))) {
                _ = unlinkat(slot, name, 0)
            }
            if !records.isEmpty { found.versions[item] = records.sorted { $0.id < $1.id } }
        }
        state.withLock { $0 = found }
    }

    private static func names(in directory: Int32) -> [String] {
        let fd = openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0, let stream = fdopendir(fd) else {
            if fd >= 0 { close(fd) }
            return []
        }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    private static func readFile(named name: String, in directory: Int32) -> [UInt8]? {
        let fd = openat(directory, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { return count == 0 ? bytes : nil }
            bytes += buffer[0..<count]
        }
    }
}
