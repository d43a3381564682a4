import CLinux
import Coordination
import CoordinationRuntime
import Foundation
import LinuxSystem
import Logging
#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its thread alone reads the descriptor and keeps the directories; the
// rest is set before the thread starts.
/// Changes made to the backing directory behind the mount: another program writing it
/// directly, a backup restoring into it. Nobody coordinated them; the mount makes the kernel
/// forget what it keeps of the items (names, attributes, pages), so programs reading through
/// the mount see them, and tells presenters, as changes from outside.
///
/// One fanotify mark covers the backing directory's filesystem (root only: CAP_SYS_ADMIN), and
/// reports each change by its directory's file handle and the entry's name. The mount's own
/// changes are left out by their process, which is the daemon's, except writes the kernel
/// serves straight from the backing file (kernel passthrough), which carry the writer's: those
/// to a file open for writing through the mount, or closed just now, count as the mount's.
final class BackingWatch: @unchecked Sendable {
    /// How a watch could not be made, for the log.
    struct Unavailable: Error, CustomStringConvertible {
        let description: String
    }

    private let changes: Int32
    /// A pipe whose write end `stop` writes: the thread's poll wakes and it ends.
    private let wake: (read: Int32, write: Int32)
    /// The backing directory as the kernel spells it (symbolic links resolved), and a
    /// descriptor of it in this mount namespace: reported handles are opened through it.
    private let backingPath: String
    private let backing: Int32
    let device: UInt64
    private let ownProcess = getpid()
    // Strong: a thread still sending a notification after `stop` keeps the filesystem alive.
    private let filesystem: Filesystem
    private var thread: Thread?
    /// Directories by their reported handles: where they lie below the backing root (nil: not
    /// below it). Renames and removals of directories empty it.
    private var directories: [[UInt8]: Directory?] = [:]
    private let logger = Logger(label: "org.coordfs.mount")
    /// Changes in one directory told item by item in a second; more are told as one change of
    /// the directory a window.
    static let itemsToldPerDirectory = 64
    private var toldSecond: Int64 = 0
    private var toldThisSecond: [ItemPath: Int] = [:]
    /// Directories past the rate, to be told as changed; when that was last done.
    private var flooded: Set<ItemPath> = []
    private var floodToldAt: Int64 = 0
    /// How long presenters' news is gathered after a first change; how many changes make a
    /// burst, gathered longer; and how many changes a window holds at most.
    static let windowMilliseconds: Int64 = 5
    static let burst = 64
    static let burstMilliseconds: Int64 = 20
    static let changesPerWindow = 16_384
    private var stopping = false

    struct Directory {
        /// Below the backing root, "" for the root itself.
        let relative: String
        let device: UInt64
        let number: UInt64
    }

    init(watching path: String, device: UInt64, for filesystem: Filesystem) throws(Unavailable) {
        guard let resolved = realpath(path, nil) else { throw Unavailable(description: "\(path): \(Errno.current)") }
        backingPath = String(cString: resolved)
        free(resolved)
        let descriptor = cfs_fanotify_watch_filesystem(backingPath)
        guard descriptor >= 0 else {
            let failure = Errno(code: -descriptor)
            throw Unavailable(description: failure == .notPermitted
                ? "fanotify needs CAP_SYS_ADMIN (the mount runs as root for it)" : "fanotify: \(failure)")
        }
        // Not O_PATH: open_by_handle_at takes no O_PATH descriptor to name the filesystem.
        let backing = open(backingPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        var ends: [Int32] = [-1, -1]
        guard backing >= 0, pipe(&ends) == 0 else {
            let failure = Errno.current
            close(descriptor)
            if backing >= 0 { close(backing) }
            throw Unavailable(description: "\(backingPath): \(failure)")
        }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        changes = descriptor
        self.backing = backing
        wake = (ends[0], ends[1])
        self.device = device
        self.filesystem = filesystem
    }

    deinit {
        close(changes)
        close(backing)
        close(wake.read)
        close(wake.write)
    }

    func start() {
        let thread = Thread { [self] in run() }
        thread.name = "coordfs-backing-watch"
        self.thread = thread
        thread.start()
    }

    /// Asks the thread to end. A notification it is sending may wait for a directory's lock
    /// that a request holds whose answer will never come once the session stopped serving:
    /// the unmount ends that request, and then the thread ends (`waitUntilStopped`).
    func requestStop() {
        var one: UInt8 = 1
        _ = write(wake.write, &one, 1)
    }

    func waitUntilStopped() {
        while thread?.isFinished == false { usleep(1000) }
        thread = nil        // its closure holds this watch, and this watch the filesystem
    }

    private func run() {
        var buffer = [CChar](repeating: 0, count: 64 * 1024)
        // Flooded directories are told at most once a window: until then, woken to tell them.
        while wait(milliseconds: flooded.isEmpty ? -1 : Int32(max(floodToldAt + Self.burstMilliseconds - coarseMilliseconds(), 0))) {
            // The kernel forgets each change as it is read. Presenters hear what a short window
            // gathered: one program's open, write and close as one change; a burst, after a
            // longer window, so that a flood reaches them merged (`deliver`).
            var batch = Batch()
            readAll(into: &batch, buffer: &buffer)
            let opened = coarseMilliseconds()
            while batch.news.count < Self.changesPerWindow {
                let window = batch.news.count >= Self.burst ? Self.burstMilliseconds : Self.windowMilliseconds
                let left = opened + window - coarseMilliseconds()
                guard left > 0, wait(milliseconds: Int32(left)) else { break }
                readAll(into: &batch, buffer: &buffer)
            }
            deliver(batch)
            if stopping { return }
        }
    }

    /// Waits until changes can be read (true) or `timeout` has passed (true, nothing to read);
    /// false once `stop` was called.
    private func wait(milliseconds timeout: Int32) -> Bool {
        var descriptors = [pollfd(fd: changes, events: Int16(POLLIN), revents: 0), pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
        while poll(&descriptors, 2, timeout) < 0 {
            if Errno.current != .interrupted { return false }
        }
        if descriptors[1].revents != 0 { stopping = true }
        return !stopping
    }

    /// Reads what is queued, up to a window's worth.
    private func readAll(into batch: inout Batch, buffer: inout [CChar]) {
        while batch.news.count < Self.changesPerWindow && !stopping {
            let count = read(changes, &buffer, buffer.count)
            if count <= 0 { return }             // EAGAIN: read up
            buffer.withUnsafeBufferPointer { bytes in
                var offset = 0
                var change = cfs_backing_change()
                while cfs_fanotify_next(bytes.baseAddress!, count, &offset, &change) == 1 {
                    take(change, into: &batch)
                }
            }
        }
    }

    // MARK: One window's changes

    /// What a window reported, in order, merged: presenters hear each item's change once (a
    /// program appending a line at a time makes one change of a window's worth).
    private enum News {
        case change(path: ItemPath, isDirectory: Bool, outcome: IntentOutcome)
        case move(from: ItemPath, to: ItemPath, isDirectory: Bool)
    }

    private enum Kind { case appeared, changed, deleted }

    private struct Batch {
        var news: [News] = []
        /// Each item's last news in the window: a repeat of it is not told again, nor a
        /// change of an item that appeared in the window (it is told as appearing).
        var last: [ItemPath: Kind] = [:]
        /// The queue overflowed: changes were lost.
        var overflowed = false

        mutating func add(_ path: ItemPath, isDirectory: Bool, _ kind: Kind) {
            if last[path] == kind || (kind == .changed && last[path] == .appeared) { return }
            last[path] = kind
            let outcome = switch kind {
            case .appeared: IntentOutcome(existedBefore: false, existsAfter: true, changed: true)
            case .changed: IntentOutcome(existedBefore: true, existsAfter: true, changed: true)
            case .deleted: IntentOutcome(existedBefore: true, existsAfter: false, changed: true)
            }
            news.append(.change(path: path, isDirectory: isDirectory, outcome: outcome))
        }

        mutating func addMove(from: ItemPath, to: ItemPath, isDirectory: Bool) {
            last[from] = nil
            last[to] = nil
            news.append(.move(from: from, to: to, isDirectory: isDirectory))
        }
    }

    private func take(_ change: cfs_backing_change, into batch: inout Batch) {
        if change.mask & CFS_CHANGE_OVERFLOW != 0 { batch.overflowed = true; return }
        let isDirectory = change.mask & CFS_CHANGE_ON_DIRECTORY != 0
        // Directories' places change with any rename or removal of one, the mount's own too.
        if isDirectory && change.mask & (CFS_CHANGE_RENAME | CFS_CHANGE_DELETE) != 0 { directories.removeAll() }
        guard change.pid != ownProcess, let handle = change.directory, let name = change.name else { return }
        let entry = FileSystemName.string(cString: name)
        let directory = self.directory(handle)
        let parent = directory.flatMap { filesystem.inodes.node(device: $0.device, number: $0.number) }
        if change.mask & CFS_CHANGE_RENAME != 0 {
            guard let newHandle = change.new_directory, let newName = change.new_name else { return }
            let newEntry = FileSystemName.string(cString: newName)
            let newDirectory = self.directory(newHandle)
            let newParent = newDirectory.flatMap { filesystem.inodes.node(device: $0.device, number: $0.number) }
            if let parent { forgetEntry(entry, in: parent) }
            if let newParent { forgetEntry(newEntry, in: newParent) }
            if let parent, let newParent, let moved = child(newEntry, in: newParent) {
                filesystem.inodes.moved(moved.id, from: (parent.id, entry), to: newParent.id, name: newEntry)
            }
            // Either side may lie outside BACKING: moved in, it appears; moved out, it is gone.
            switch (directory, newDirectory) {
            case let (from?, to?): batch.addMove(from: path(from, entry), to: path(to, newEntry), isDirectory: isDirectory)
            case let (from?, nil): batch.add(path(from, entry), isDirectory: isDirectory, .deleted)
            case let (nil, to?): batch.add(path(to, newEntry), isDirectory: isDirectory, .appeared)
            case (nil, nil): return
            }
            filesystem.namespaceChanged(name: entry, newEntry, directory: isDirectory)
            return
        }
        guard let directory else { return }
        // A change of a directory itself (its mode, times, attributes) comes as its entry ".".
        let isItself = entry == "."
        let itemPath = isItself ? path(directory) : path(directory, entry)
        let creates = change.mask & CFS_CHANGE_CREATE != 0, deletes = change.mask & CFS_CHANGE_DELETE != 0
        if creates || deletes {
            if let parent { forgetEntry(entry, in: parent) }
            filesystem.namespaceChanged(name: entry, directory: isDirectory)
            // Both, merged while unread (a lock file, a journal): what is there now.
            let exists = !(creates && deletes) ? creates : existing(entry, in: directory) != nil
            if creates && deletes && !exists { return }
            batch.add(itemPath, isDirectory: isDirectory, exists ? .appeared : .deleted)
            return
        }
        // A write, a truncation, a change of mode, owner, times or attributes, of an item still
        // there by that name (not one removed since, whose removal is reported next, nor an
        // unnamed O_TMPFILE file, which the kernel names "#INODE").
        guard let found = isItself ? (directory.device, directory.number) : existing(entry, in: directory) else { return }
        let known = filesystem.inodes.node(device: found.device, number: found.number)
        let writes = change.mask & (CFS_CHANGE_MODIFY | CFS_CHANGE_CLOSE_WRITE) != 0
        let attributes = change.mask & CFS_CHANGE_ATTRIB != 0
        // Writes the kernel serves for an open through the mount are the mount's: not told,
        // and the kernel keeps the file's size and pages right itself.
        if writes && !attributes && known?.isWrittenThroughTheKernel() == true { return }
        if let known {
            if attributes { known.hasNoCapability.store(false, ordering: .relaxed) }
            filesystem.invalidate(known, pages: writes)
        }
        if let parent, !isItself { filesystem.invalidateAttributes(of: parent) }
        batch.add(itemPath, isDirectory: isDirectory || isItself, .changed)
    }

    private func deliver(_ batch: Batch) {
        if batch.overflowed {
            logger.warning("changes behind the mount came faster than they could be read: some were not told; the kernel forgets everything it keeps")
            filesystem.invalidateEverything()
        }
        let engine = filesystem.engine
        var deliveries: [PresenterDelivery<PresenterNotification>] = []
        // A flood in one directory (a backup restoring, an archive unpacked, a rename storm) is
        // told to the directory's presenters item by item up to a rate, then as one change of
        // the directory a window; presenters of the items themselves hear of each.
        let second = coarseMilliseconds() / 1000
        if second != toldSecond { toldSecond = second; toldThisSecond.removeAll(keepingCapacity: true) }
        func mayTellContainers(_ path: ItemPath) -> Bool {
            let directory = path.parent ?? path
            let told = toldThisSecond[directory, default: 0]
            if told >= Self.itemsToldPerDirectory { flooded.insert(directory); return false }
            toldThisSecond[directory] = told + 1
            return true
        }
        // In the order they came: a save that writes a temporary file and renames it over the
        // document is told as the temporary's appearance, then the move.
        var changes: [(Intent, IntentOutcome)] = [], muted: [(Intent, IntentOutcome)] = []
        func tellChanges() {
            if !changes.isEmpty {
                deliveries += engine.changesMadeOutside(changes.map(\.0), outcomes: changes.map(\.1))
                changes.removeAll()
            }
            if !muted.isEmpty {
                deliveries += engine.changesMadeOutside(muted.map(\.0), outcomes: muted.map(\.1), tellingContainers: false)
                muted.removeAll()
            }
        }
        for news in batch.news {
            switch news {
            case let .change(path, isDirectory, outcome):
                let change = (Intent(.writing([]), filesystem.target(path, isDirectory: isDirectory)), outcome)
                if mayTellContainers(path) { changes.append(change) } else { muted.append(change) }
            case let .move(from, to, isDirectory):
                tellChanges()
                deliveries += engine.moveMadeOutside(from: filesystem.target(from, isDirectory: isDirectory),
                                                     to: filesystem.target(to, isDirectory: isDirectory),
                                                     tellingContainers: mayTellContainers(from))
            }
        }
        tellChanges()
        let now = coarseMilliseconds()
        if !flooded.isEmpty && now - floodToldAt >= Self.burstMilliseconds {
            deliveries += engine.contentsChangedOutside(of: flooded.map { filesystem.target($0, isDirectory: true) })
            flooded.removeAll()
            floodToldAt = now
        }
        if !deliveries.isEmpty { filesystem.domain.deliver(deliveries) }
        filesystem.statistics.changesBehind.add(batch.news.count, ordering: .relaxed)
    }

    // MARK: Naming what changed

    /// The directory a reported handle names, when it lies below the backing root.
    private func directory(_ handle: UnsafeRawPointer) -> Directory? {
        let key = [UInt8](UnsafeRawBufferPointer(start: handle, count: cfs_file_handle_size(handle)))
        if let known = directories[key] { return known }
        let fd = cfs_open_reported_handle(backing, handle)
        guard fd >= 0 else { return nil }            // gone already: nothing to cache
        defer { close(fd) }
        var info = stat()
        var found: Directory?
        // A directory removed since reads as "PATH (deleted)": it is below BACKING no more.
        if fstat(fd, &info) == 0, info.st_nlink > 0, let path = Self.path(of: fd) {
            if path == backingPath {
                found = Directory(relative: "", device: UInt64(info.st_dev), number: UInt64(info.st_ino))
            } else if path.hasPrefix(backingPath == "/" ? "/" : backingPath + "/") {
                let relative = String(path.dropFirst(backingPath == "/" ? 1 : backingPath.count + 1))
                found = Directory(relative: relative, device: UInt64(info.st_dev), number: UInt64(info.st_ino))
            }
        }
        if directories.count >= 16_384 { directories.removeAll() }
        directories[key] = .some(found)
        return found
    }

    private static func path(of fd: Int32) -> String? {
        var bytes = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(procPath(fd), &bytes, bytes.count - 1)
        guard count > 0 else { return nil }
        return FileSystemName.string(cString: bytes)
    }

    private func path(_ directory: Directory) -> ItemPath {
        directory.relative.isEmpty ? filesystem.mountRoot : filesystem.mountRoot.appending(directory.relative)
    }

    private func path(_ directory: Directory, _ name: String) -> ItemPath {
        let relative = directory.relative.isEmpty ? name : directory.relative + "/" + name
        return filesystem.mountRoot.appending(relative)
    }

    /// The device and inode number of `name` in `directory`, if it is there.
    private func existing(_ name: String, in directory: Directory) -> (device: UInt64, number: UInt64)? {
        let relative = directory.relative.isEmpty ? name : directory.relative + "/" + name
        var info = stat()
        guard FileSystemName.withCString(relative, { fstatat(backing, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    /// The node of `name` in `parent`, if the mount knows it.
    private func child(_ name: String, in parent: Inode) -> Inode? {
        filesystem.inodes.withFD(parent, orElse: { _ in nil }) { fd -> Inode? in
            var info = stat()
            guard FileSystemName.withCString(name, { fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return nil }
            return filesystem.inodes.node(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
        }
    }

    /// The kernel forgets the name, and the directory's attributes and kept listing.
    private func forgetEntry(_ name: String, in parent: Inode) {
        filesystem.invalidateEntry(named: name, in: parent)
        filesystem.invalidate(parent, pages: true)
    }
}
