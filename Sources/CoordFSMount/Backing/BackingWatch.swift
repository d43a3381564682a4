import CLinux
import Coordination
import CoordinationRuntime
import FileVersions
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
/// One fanotify mark covers the backing directory's filesystem (root only: CAP_SYS_ADMIN), or,
/// without the privilege or when asked, one mark each directory below BACKING
/// (`WatchedDirectories`); either reports each change by its directory's file handle and the
/// entry's name, and by the item's own handle (with the filesystem's mark, files marked for
/// their writes, `WatchedWrites`, are known by it). The mount's own changes are left out by
/// their process, which is the daemon's, except writes the kernel serves straight from the
/// backing file (kernel passthrough), which carry the writer's: those of a process that opened
/// the file for writing through the mount, up to its last close, count as the mount's. Anyone
/// else's are told, whenever they come.
final class BackingWatch: @unchecked Sendable {
    /// How a watch could not be made, for the log.
    struct Unavailable: Error, CustomStringConvertible {
        let description: String
    }

    /// What is marked: BACKING's whole filesystem, or each of its directories.
    enum Scope: String, Sendable {
        case filesystem, directories
    }

    private let changes: Int32
    /// The fanotify group's descriptor (files are marked in it by `WatchedWrites`).
    var descriptor: Int32 { changes }
    /// A pipe whose write end `stop` writes: the thread's poll wakes and it ends.
    private let wake: (read: Int32, write: Int32)
    /// The backing directory as the kernel spells it (symbolic links resolved), and a
    /// descriptor of it in this mount namespace: reported handles are opened through it.
    private let backingPath: String
    private let backing: Int32
    let device: UInt64
    private let ownProcess = getpid()
    let scope: Scope
    /// With a mark per directory: the directories marked.
    private var marked: WatchedDirectories?
    private var marksRanOut = false
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
    /// The version store's directories are both left out by the kernel, or it refused to
    /// (`leaveOutVersionStore`): nothing more to ask.
    private var storeLeftOut = false

    struct Directory {
        /// Below the backing root, "" for the root itself.
        let relative: String
        let device: UInt64
        let number: UInt64

        /// The path of `name` in it, below the backing root.
        func relative(_ name: String) -> String { relative.isEmpty ? name : relative + "/" + name }
    }

    /// `byDirectory`: a mark per directory even where the filesystem could be marked (a small
    /// tree on a busy filesystem). Without the privilege for a filesystem mark, the directories
    /// are marked anyway.
    init(
        watching path: String, device: UInt64, byDirectory: Bool = false, for filesystem: Filesystem
    ) throws(Unavailable) {
        guard let resolved = realpath(path, nil) else {
            throw Unavailable(description: "\(path): \(Errno.ofFailedCall())")
        }
        backingPath = String(cString: resolved)
        free(resolved)
        var descriptor = byDirectory ? -EPERM : cfs_fanotify_watch_filesystem(backingPath)
        // Not permitted (no CAP_SYS_ADMIN), or a filesystem fanotify cannot mark whole (EXDEV:
        // a btrfs subvolume): each directory's own mark.
        scope = descriptor == -EPERM || descriptor == -EXDEV ? .directories : .filesystem
        if scope == .directories { descriptor = cfs_fanotify_watch_directories() }
        guard descriptor >= 0 else { throw Unavailable(description: "fanotify: \(Errno(code: -descriptor))") }
        // Not O_PATH: open_by_handle_at takes no O_PATH descriptor to name the filesystem.
        let backing = open(backingPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        var ends: [Int32] = [-1, -1]
        guard backing >= 0, pipe(&ends) == 0 else {
            let failure = Errno.ofFailedCall()
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
        if scope == .directories {
            // Marked before the mount is made: a change made as soon as it is, is seen.
            guard let handle = Self.handle(of: backing), let root = directories(root: handle) else {
                throw Unavailable(description: "\(backingPath): \(Errno.ofFailedCall())")
            }
            marked = root
            let failure = cfs_fanotify_mark_directory(changes, backing)
            guard failure == 0 else { throw Unavailable(description: "fanotify: \(Errno(code: -failure))") }
            markBelow("")
        } else {
            leaveOutVersionStore()
        }
    }

    deinit {
        close(changes)
        close(backing)
        close(wake.read)
        close(wake.write)
    }

    func start() {
        thread = Thread.start(named: "coordfs-backing") { [self] in run() }
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
        thread = nil  // its closure holds this watch, and this watch the filesystem
    }

    private func run() {
        var buffer = [CChar](repeating: 0, count: 64 * 1024)
        // Flooded directories are told at most once a window: until then, woken to tell them.
        while wait(
            milliseconds: flooded.isEmpty
                ? -1 : Int32(max(floodToldAt + Self.burstMilliseconds - coarseMilliseconds(), 0)))
        {
            // The kernel forgets each change as it is read. Presenters hear what a short window
            // gathered: one program's open, write and close as one change; a burst, after a
            // longer window, so that a flood reaches them merged (`deliver`).
            var batch = Batch()
            readAll(into: &batch, buffer: &buffer)
            let opened = coarseMilliseconds()
            while batch.news.count < Self.changesPerWindow {
                let window = batch.news.count >= Self.burst ? Self.burstMilliseconds : Self.windowMilliseconds
                let left = opened + window - coarseMilliseconds()
                // While the window holds only the mount's own changes (a build or an unpack
                // through it), the rest of it is slept, not polled: woken for each of them, this
                // thread took a CPU from the callers for every create.
                guard left > 0, wait(milliseconds: Int32(left), forChanges: batch.fromOutside) else { break }
                readAll(into: &batch, buffer: &buffer)
            }
            deliver(batch)
            if stopping { return }
        }
    }

    /// Waits until changes can be read (true) or `timeout` has passed (true, nothing to read);
    /// false once `stop` was called. Not `forChanges`: only `stop` ends the wait early.
    private func wait(milliseconds timeout: Int32, forChanges: Bool = true) -> Bool {
        var descriptors = [
            pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
            pollfd(fd: changes, events: Int16(POLLIN), revents: 0)
        ]
        while poll(&descriptors, forChanges ? 2 : 1, timeout) < 0 {
            if Errno.ofFailedCall() != .interrupted { return false }
        }
        if descriptors[0].revents != 0 { stopping = true }
        return !stopping
    }

    /// Reads what is queued, up to a window's worth.
    private func readAll(into batch: inout Batch, buffer: inout [CChar]) {
        while batch.news.count < Self.changesPerWindow && !stopping {
            let count = read(changes, &buffer, buffer.count)
            if count <= 0 { return }  // EAGAIN: read up
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
        /// A change of anyone's but the mount's own came (or changes were lost): the window
        /// is not slept through.
        var fromOutside = false

        mutating func add(_ path: ItemPath, isDirectory: Bool, _ kind: Kind) {
            if last[path] == kind || (kind == .changed && last[path] == .appeared) { return }
            last[path] = kind
            let outcome =
                switch kind {
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

    /// A change of a file marked by itself (`WatchedWrites`), whose attributes the kernel keeps
    /// long: forgotten as it is known by its handle, whether or not a name below BACKING leads
    /// to it (written or changed through a link elsewhere, or after its name went; renamed, its
    /// change time moved). The file forgotten, if any.
    private func forgetMarkedFile(
        _ change: cfs_backing_change, isDirectory: Bool, writes: Bool, attributes: Bool
    ) -> Inode? {
        guard writes || attributes || change.mask & CFS_CHANGE_RENAME != 0, !isDirectory, let object = change.object,
            let node = filesystem.watchedWrites.node(handle: Self.key(object))
        else { return nil }
        if attributes { node.hasNoCapability.store(false, ordering: .relaxed) }
        filesystem.invalidate(node, pages: writes && !node.isWrittenThroughTheKernel(by: change.pid))
        return node
    }

    /// A change about a directory, whoever made it: directories' places change with any rename
    /// or removal of one, the mount's own too. The version store's directories, made with the
    /// first version kept: from then on the kernel leaves out what happens in them.
    private func directoryChanged(_ change: cfs_backing_change, into batch: inout Batch) {
        if marked != nil {
            track(change, into: &batch)
        } else if change.mask & (CFS_CHANGE_RENAME | CFS_CHANGE_DELETE) != 0 {
            directories.removeAll()
        } else if change.mask & CFS_CHANGE_CREATE != 0, !storeLeftOut, let name = change.name,
            [VersionStore.directoryName, VersionStore.contentDirectoryName].contains(
                FileSystemName.string(cString: name))
        {
            leaveOutVersionStore()
        }
    }

    private func take(_ change: cfs_backing_change, into batch: inout Batch) {
        if change.mask & CFS_CHANGE_OVERFLOW != 0 {
            batch.overflowed = true
            batch.fromOutside = true
            return
        }
        let isDirectory = change.mask & CFS_CHANGE_ON_DIRECTORY != 0
        if isDirectory { directoryChanged(change, into: &batch) }
        guard change.pid != ownProcess else { return }
        let writes = change.mask & (CFS_CHANGE_MODIFY | CFS_CHANGE_CLOSE_WRITE) != 0
        let attributes = change.mask & CFS_CHANGE_ATTRIB != 0
        if writes && !attributes && !isDirectory && servedByTheKernel(change) { return }
        // A write may still be the mount's own, served by the kernel: found out below.
        if !writes || attributes { batch.fromOutside = true }
        let forgotten = forgetMarkedFile(change, isDirectory: isDirectory, writes: writes, attributes: attributes)
        if change.mask & CFS_CHANGE_RENAME != 0 { return takeRename(change, isDirectory: isDirectory, into: &batch) }
        guard let handle = change.directory, let name = change.name else { return }
        let entry = FileSystemName.string(cString: name)
        guard let directory = self.directory(handle) else { return }
        // Looked up only where it is needed: most changes are writes, which do not touch it.
        var parent: Inode? { filesystem.inodes.node(device: directory.device, number: directory.number) }
        // A change of a directory itself (its mode, times, attributes) comes as its entry ".".
        let isItself = entry == "."
        if directory.relative.isEmpty && entry == VersionStore.directoryName { return }
        let itemPath = isItself ? path(directory) : path(directory, entry)
        let creates = change.mask & CFS_CHANGE_CREATE != 0, deletes = change.mask & CFS_CHANGE_DELETE != 0
        if creates || deletes {
            if let parent = parent { forgetEntry(entry, in: parent) }
            filesystem.targets.namespaceChanged(name: entry, directory: isDirectory)
            // Both, merged while unread (a lock file, a journal): what is there now.
            let exists = !(creates && deletes) ? creates : existing(entry, in: directory) != nil
            if !(creates && deletes && !exists) {
                batch.add(itemPath, isDirectory: isDirectory, exists ? .appeared : .deleted)
            }
            return
        }
        // A write, a truncation, a change of mode, owner, times or attributes, of an item still
        // there by that name (not one removed since, whose removal is reported next, nor an
        // unnamed O_TMPFILE file, which the kernel names "#INODE").
        guard let found = isItself ? (directory.device, directory.number) : existing(entry, in: directory) else {
            return
        }
        let known = filesystem.inodes.node(device: found.device, number: found.number)
        // Writes the kernel serves for an open through the mount are the mount's: not told,
        // and the kernel keeps the file's size and pages right itself. (A file marked for its
        // writes as such an open began may be written from behind too: its attributes, kept
        // long, are forgotten.) Known by their process: another's, beside such an open or
        // just after it, is a change from outside.
        if writes && !attributes, let known,
            known.isWrittenThroughTheKernel(by: change.pid)
        {
            if filesystem.watchedWrites.covers(known) && known !== forgotten {
                filesystem.invalidateAttributes(of: known)
            }
            return
        }
        // Read after the item left that name (renamed over by another save before its close):
        // the change is not about what the name leads to now.
        if !isItself, let object = change.object, !leads(entry, in: directory, to: object) { return }
        batch.fromOutside = true
        if let known {
            if attributes { known.hasNoCapability.store(false, ordering: .relaxed) }
            if known !== forgotten { filesystem.invalidate(known, pages: writes) }
        }
        if !isItself, let parent = parent { filesystem.invalidateAttributes(of: parent) }
        batch.add(itemPath, isDirectory: isDirectory || isItself, .changed)
    }

    /// Whether `change`, a write, is one the kernel served for an open through the mount (its
    /// item's node written through kernel passthrough by the change's process): the common
    /// change of a create or a write through the mount, known here by the item's handle, which
    /// is its node's id (`StableNodeIDs`), without a look at its name. As below, the kernel
    /// then forgets only the attributes it keeps long of a marked file. False where the handle
    /// is no node's id (the long way finds out).
    private func servedByTheKernel(_ change: cfs_backing_change) -> Bool {
        // A change of names merged into it (fanotify merges a process's events on one item)
        // takes the long way.
        guard change.mask & (CFS_CHANGE_CREATE | CFS_CHANGE_DELETE | CFS_CHANGE_RENAME) == 0,
            let object = change.object, let id = filesystem.inodes.stableIDs?.id(reported: object),
            let known = filesystem.inodes[id], known.isWrittenThroughTheKernel(by: change.pid)
        else { return false }
        if filesystem.watchedWrites.covers(known) { filesystem.invalidateAttributes(of: known) }
        return true
    }

    /// A rename: a directory's mark reports a side only if it is marked (a move in or out of
    /// BACKING, with a mark per directory, brings one side).
    private func takeRename(_ change: cfs_backing_change, isDirectory: Bool, into batch: inout Batch) {
        func side(
            _ handle: UnsafeRawPointer?, _ name: UnsafePointer<CChar>?
        ) -> (entry: String, directory: Directory?, parent: Inode?)? {
            guard let handle, let name else { return nil }
            let directory = self.directory(handle)
            return (
                FileSystemName.string(cString: name), directory,
                directory.flatMap { filesystem.inodes.node(device: $0.device, number: $0.number) }
            )
        }
        let old = side(change.directory, change.name), new = side(change.new_directory, change.new_name)
        if let old, let parent = old.parent { forgetEntry(old.entry, in: parent) }
        if let new, let parent = new.parent { forgetEntry(new.entry, in: parent) }
        if let old, let new, let parent = old.parent, let newParent = new.parent,
            let moved = child(new.entry, in: newParent)
        {
            filesystem.inodes.moved(moved.id, from: (parent.id, old.entry), to: newParent.id, name: new.entry)
        }
        // Either side may lie outside BACKING: moved in, it appears; moved out, it is gone.
        switch (
            old.flatMap { side in side.directory.map { path($0, side.entry) } },
            new.flatMap { side in side.directory.map { path($0, side.entry) } }
        ) {
        case let (from?, to?): batch.addMove(from: from, to: to, isDirectory: isDirectory)
        case let (from?, nil): batch.add(from, isDirectory: isDirectory, .deleted)
        case let (nil, to?): batch.add(to, isDirectory: isDirectory, .appeared)
        case (nil, nil): return
        }
        if let old, let new {
            filesystem.targets.namespaceChanged(name: old.entry, new.entry, directory: isDirectory)
        } else if let name = old?.entry ?? new?.entry {
            filesystem.targets.namespaceChanged(name: name, directory: isDirectory)
        }
    }

    /// The kernel's queue overflowed: changes were lost, so the kernel forgets everything it
    /// keeps, and directories made, moved or removed meanwhile are marked anew.
    private func overflowed() {
        logger.warning(
            "changes behind the mount came faster than they could be read: some were not told; the kernel forgets everything it keeps"
        )
        filesystem.invalidateEverything()
        if let old = marked, let root = directories(root: old.root) {
            marked = root
            markBelow("")
        }
    }

    private func deliver(_ batch: Batch) {
        if batch.overflowed { overflowed() }
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
                deliveries += engine.changesMadeOutside(
                    muted.map(\.0), outcomes: muted.map(\.1), tellingContainers: false)
                muted.removeAll()
            }
        }
        for news in batch.news {
            switch news {
            case let .change(path, isDirectory, outcome):
                let change = (Intent(.writing([]), filesystem.targets.target(path, isDirectory: isDirectory)), outcome)
                if mayTellContainers(path) { changes.append(change) } else { muted.append(change) }
            case let .move(from, to, isDirectory):
                tellChanges()
                deliveries += engine.moveMadeOutside(
                    from: filesystem.targets.target(from, isDirectory: isDirectory),
                    to: filesystem.targets.target(to, isDirectory: isDirectory),
                    tellingContainers: mayTellContainers(from))
            }
        }
        tellChanges()
        let now = coarseMilliseconds()
        if !flooded.isEmpty && now - floodToldAt >= Self.burstMilliseconds {
            deliveries += engine.contentsChangedOutside(
                of: flooded.map { filesystem.targets.target($0, isDirectory: true) })
            flooded.removeAll()
            floodToldAt = now
        }
        if !deliveries.isEmpty { filesystem.domain.deliver(deliveries) }
        filesystem.statistics.changesBehind.add(batch.news.count, ordering: .relaxed)
    }

    // MARK: The version store

    /// Asks the kernel to leave out what happens inside the version store's directories, those
    /// made so far: each version kept links a file into its content and each prune removes
    /// some, and the filesystem's mark would report every one, for this thread to wake, read
    /// and drop (the mount's own changes, in no directory it shows: `take`, `directory`). With
    /// the filesystem's mark only: a mark per directory never marks the store (`markBelow`).
    /// A kernel before 6.0 has no such marks: the store's changes are then read and dropped.
    private func leaveOutVersionStore() {
        guard scope == .filesystem, !storeLeftOut, filesystem.versions != nil else { return }
        let store = VersionStore.directoryName
        var left = 0
        // The store's own directory still reports directories made in it: its content's, made
        // just after it, is then left out in turn.
        for (relative, withDirectories) in [(store, false), (store + "/" + VersionStore.contentDirectoryName, true)] {
            let fd = FileSystemName.withCString(relative) {
                openat(backing, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            }
            guard fd >= 0 else { continue }  // not made yet
            let failure = cfs_fanotify_ignore_directory(changes, fd, withDirectories ? 1 : 0)
            close(fd)
            guard failure == 0 else {
                storeLeftOut = true
                logger.notice(
                    "the version store's own changes are reported, read and dropped: the kernel leaves nothing out (\(Errno(code: -failure)); fanotify ignore marks need Linux 6.0)"
                )
                return
            }
            left += 1
        }
        storeLeftOut = left == 2
    }

    // MARK: A mark per directory

    /// Keeps the marks and `marked` up to date with a change of a directory, which the event
    /// names by its handle: one made (marked, with what it holds), moved (in from outside
    /// BACKING: marked, with what it holds; out: forgotten), removed. What a directory made or
    /// moved in from outside holds is told as appearing: it may have been filled before its
    /// mark was made.
    private func track(_ change: cfs_backing_change, into batch: inout Batch) {
        guard let object = change.object else { return }
        let moved = Self.key(object)
        let outside = change.pid != ownProcess
        func markNew(_ name: String, in parent: WatchedDirectories.Handle) {
            guard !marked!.contains(moved), let place = marked!.directory(parent) else { return }
            let found = markBelow(
                place.relative.isEmpty ? name : place.relative + "/" + name, name: name, in: parent, collecting: outside
            )
            if outside { for (path, isDirectory) in found { batch.add(path, isDirectory: isDirectory, .appeared) } }
        }
        if change.mask & CFS_CHANGE_RENAME != 0 {
            guard let newDirectory = change.new_directory, let newName = change.new_name else {
                marked!.removeTree(moved)  // out of BACKING
                return countMarks()
            }
            let newParent = Self.key(newDirectory), newEntry = FileSystemName.string(cString: newName)
            if !marked!.move(moved, to: newEntry, in: newParent) { markNew(newEntry, in: newParent) }
        } else if change.mask & CFS_CHANGE_CREATE != 0 {
            guard let directory = change.directory, let name = change.name else { return }
            markNew(FileSystemName.string(cString: name), in: Self.key(directory))
        } else if change.mask & CFS_CHANGE_DELETE != 0 {
            marked!.remove(moved)
            countMarks()
        }
    }

    private func countMarks() {
        filesystem.statistics.watchedDirectories.store(marked!.count, ordering: .relaxed)
    }

    /// Marks the directory `relative` (below the backing root, named `name` in the directory
    /// `parent`; "" for the root itself) and every directory below it on BACKING's filesystem.
    /// `collecting`: returns every item found below it, and whether it is a directory.
    @discardableResult
    private func markBelow(
        _ relative: String, name: String = "", in parent: WatchedDirectories.Handle? = nil,
        collecting: Bool = false
    ) -> [(ItemPath, Bool)] {
        var found: [(ItemPath, Bool)] = []
        var pending = [(relative: relative, name: name, parent: parent)]
        // A bind mount of the filesystem inside BACKING shows a directory twice: once is enough.
        var seen: Set<WatchedDirectories.Handle> = []
        while let next = pending.popLast(), !marksRanOut {
            // The version store is no directory of the mount's: none of its own is marked.
            if next.relative == VersionStore.directoryName { continue }
            let fd = FileSystemName.withCString(next.relative.isEmpty ? "." : next.relative) {
                openat(backing, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            }
            guard fd >= 0 else { continue }  // gone already
            var info = stat()
            guard fstat(fd, &info) == 0, UInt64(info.st_dev) == device, let handle = Self.handle(of: fd),
                seen.insert(handle).inserted
            else {
                close(fd)
                continue
            }
            if let parent = next.parent {
                let failure = cfs_fanotify_mark_directory(changes, fd)
                if failure == -ENOSPC {
                    marksRanOut = true
                    logger.warning(
                        "changes behind the mount: fs.fanotify.max_user_marks reached at \(marked!.count) directories; the kernel keeps nothing long from now on (1 s), and changes in directories made since are not seen"
                    )
                    filesystem.stopKeepingLong()
                }
                guard failure == 0 else { close(fd); continue }
                marked!.add(
                    handle, name: next.name, in: parent, device: UInt64(info.st_dev), number: UInt64(info.st_ino))
            }
            guard let stream = fdopendir(fd) else { close(fd); continue }
            while let record = readdir(stream) {
                let entry = withUnsafeBytes(of: record.pointee.d_name) {
                    FileSystemName.string(cString: $0.baseAddress!.assumingMemoryBound(to: CChar.self))
                }
                if entry == "." || entry == ".." { continue }
                var isDirectory = record.pointee.d_type == UInt8(DT_DIR)
                if record.pointee.d_type == UInt8(DT_UNKNOWN) {
                    var child = stat()
                    isDirectory =
                        FileSystemName.withCString(entry) { fstatat(dirfd(stream), $0, &child, AT_SYMLINK_NOFOLLOW) }
                        == 0
                        && child.st_mode & S_IFMT == S_IFDIR
                }
                let childRelative = next.relative.isEmpty ? entry : next.relative + "/" + entry
                if collecting { found.append((filesystem.mountRoot.appending(childRelative), isDirectory)) }
                if isDirectory { pending.append((childRelative, entry, handle)) }
            }
            closedir(stream)
        }
        countMarks()
        return found
    }

    /// No directory marked but the backing root, `root`.
    private func directories(root: WatchedDirectories.Handle) -> WatchedDirectories? {
        var info = stat()
        guard fstat(backing, &info) == 0 else { return nil }
        return WatchedDirectories(root: root, device: UInt64(info.st_dev), number: UInt64(info.st_ino))
    }

    /// The handle of the item (a directory, a file) `fd` refers to as fanotify reports it, as a
    /// key; or of the item `path` names below the directory `fd` (not following a symbolic link).
    static func handle(of fd: Int32, path: String = "") -> WatchedDirectories.Handle? {
        var bytes = [UInt8](repeating: 0, count: 256)
        let count = FileSystemName.withCString(path) { cfs_handle_bytes(fd, $0, &bytes, bytes.count) }
        return count > 0 ? Array(bytes.prefix(Int(count))) : nil
    }

    private static func key(_ handle: UnsafeRawPointer) -> [UInt8] {
        [UInt8](UnsafeRawBufferPointer(start: handle, count: cfs_file_handle_size(handle)))
    }

    // MARK: Naming what changed

    /// The directory a reported handle names, when it lies below the backing root.
    private func directory(_ handle: UnsafeRawPointer) -> Directory? {
        let key = Self.key(handle)
        if let marked { return marked.directory(key) }
        if let known = directories[key] { return known }
        let fd = cfs_open_reported_handle(backing, handle)
        guard fd >= 0 else { return nil }  // gone already: nothing to cache
        defer { close(fd) }
        var info = stat()
        var found: Directory?
        // A directory removed since reads as "PATH (deleted)": it is below BACKING no more.
        if fstat(fd, &info) == 0, info.st_nlink > 0, let path = pathBytes(of: fd).map(FileSystemName.string) {
            if path == backingPath {
                found = Directory(relative: "", device: UInt64(info.st_dev), number: UInt64(info.st_ino))
            } else if path.hasPrefix(backingPath == "/" ? "/" : backingPath + "/") {
                let relative = String(path.dropFirst(backingPath == "/" ? 1 : backingPath.count + 1))
                // The version store's directories are nothing the mount shows: as if outside.
                let store = VersionStore.directoryName
                if relative != store && !relative.hasPrefix(store + "/") {
                    found = Directory(relative: relative, device: UInt64(info.st_dev), number: UInt64(info.st_ino))
                }
            }
        }
        if directories.count >= 16_384 { directories.removeAll() }
        directories[key] = .some(found)
        return found
    }

    private func path(_ directory: Directory) -> ItemPath {
        directory.relative.isEmpty ? filesystem.mountRoot : filesystem.mountRoot.appending(directory.relative)
    }

    private func path(_ directory: Directory, _ name: String) -> ItemPath {
        filesystem.mountRoot.appending(directory.relative(name))
    }

    /// The device and inode number of `name` in `directory`, if it is there.
    private func existing(_ name: String, in directory: Directory) -> (device: UInt64, number: UInt64)? {
        var info = stat()
        guard
            FileSystemName.withCString(directory.relative(name), { fstatat(backing, $0, &info, AT_SYMLINK_NOFOLLOW) })
                == 0
        else {
            return nil
        }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    /// Whether `name` in `directory` still leads to the item of the reported handle `object`;
    /// true when its handle cannot be had.
    private func leads(_ name: String, in directory: Directory, to object: UnsafeRawPointer) -> Bool {
        Self.handle(of: backing, path: directory.relative(name)).map { $0 == Self.key(object) } ?? true
    }

    /// The node of `name` in `parent`, if the mount knows it.
    private func child(_ name: String, in parent: Inode) -> Inode? {
        filesystem.inodes.withFD(parent, orElse: { _ in nil }) { fd -> Inode? in
            var info = stat()
            guard FileSystemName.withCString(name, { fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else {
                return nil
            }
            return filesystem.inodes.node(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
        }
    }

    /// The kernel forgets the name, and the directory's attributes and kept listing.
    private func forgetEntry(_ name: String, in parent: Inode) {
        filesystem.invalidateEntry(named: name, in: parent)
        filesystem.invalidate(parent, pages: true)
    }
}
