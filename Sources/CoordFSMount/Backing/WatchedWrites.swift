import CLinux
import LinuxSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Files whose writes behind the mount are reported as they are made, each by a mark of its
/// own in the backing watch's group (FAN_MODIFY), so that the kernel may keep their attributes
/// as long as names: a program writing such a file in place behind the mount, and keeping it
/// open (a log), is seen at each write, not only at its close.
///
/// The filesystem's own mark does not ask for every write: that would make every write on the
/// filesystem, anyone's, pay for an event. A file is marked when the kernel asks for its
/// attributes again (a GETATTR after the short timeout ran out: a build checking what it
/// wrote, `ls -l` again), and unmarked while it is open for writing through kernel passthrough,
/// whose writes would each be reported and are the mount's own.
///
/// A mark holds the backing inode in memory (an evictable one could go unseen, and with it the
/// reports), so marks are bounded: past `markLimit`, all of them go at once and a new generation of
/// them begins; the kernel is told to forget the attributes it kept long meanwhile.
final class WatchedWrites: Sendable {
    static let markLimit = 32_768

    /// A duplicate of the backing watch's descriptor (-1: no file is marked).
    private let group = Atomic<Int32>(-1)
    /// A node is watched while its `Inode.markGeneration` is this generation (changed only
    /// under `marking`, read without it).
    private let generation = Atomic<UInt32>(1)
    /// Counts marks made: a reply may keep attributes long only if they were read after the
    /// file's mark (`Inode.markedAt` at most the `readPoint` taken before reading them). One
    /// read before the mark may miss a write made just before it, and reach the kernel after
    /// the marking GETATTR's answer, taking its place.
    private let marksMade = Atomic<UInt64>(0)
    /// Counts the files marked in this generation (`filesWatchedForWrites`, changed only under
    /// `marking`): none, and a reported change needs no look-up by handle.
    private let statistics: MountStatistics
    /// Marks are made and removed one at a time: none may fall between a renewal's removal of
    /// them all and the generation it begins, nor an open's removal between a GETATTR's mark
    /// and its note of it.
    private let marking = Mutex(Marking())

    private struct Marking {
        /// The nodes marked in this generation by their files' handles as fanotify reports
        /// them: a write is known by its file, whatever name it has by then (or none).
        var byHandle: [[UInt8]: Inode] = [:]
        var handles: [NodeID: [UInt8]] = [:]
    }

    init(statistics: MountStatistics) { self.statistics = statistics }

    private var marks: Int { statistics.filesWatchedForWrites.load(ordering: .relaxed) }

    private func setMarks(_ count: Int) { statistics.filesWatchedForWrites.store(count, ordering: .relaxed) }

    /// Begins marking files in the group of `descriptor`.
    func begin(in descriptor: Int32) {
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        if copy >= 0, group.exchange(copy, ordering: .releasing) >= 0 { preconditionFailure("files marked twice") }
    }

    /// Stops marking files (the marks stay with the watch's group until it is closed).
    func end() {
        let descriptor = group.exchange(-1, ordering: .acquiring)
        if descriptor >= 0 { close(descriptor) }
    }

    /// Whether `inode`'s writes behind the mount are reported as they are made.
    @inline(__always)
    func covers(_ inode: Inode) -> Bool {
        let marked = inode.markGeneration.load(ordering: .relaxed)
        return marked != 0 && marked == generation.load(ordering: .relaxed)
    }

    /// Taken before reading attributes, for `covers(_:readSince:)`.
    @inline(__always)
    var readPoint: UInt64 { marksMade.load(ordering: .acquiring) }

    /// Whether `inode` is covered and was marked before `point` was taken: what was read
    /// after that misses no write.
    @inline(__always)
    func covers(_ inode: Inode, readSince point: UInt64) -> Bool {
        // Acquiring: the generation seen brings the `markedAt` stored before it.
        let marked = inode.markGeneration.load(ordering: .acquiring)
        return marked != 0 && marked == generation.load(ordering: .acquiring)
            && inode.markedAt.load(ordering: .acquiring) <= point
    }

    /// The node marked for the file of `handle` (as fanotify reports it), if any.
    func node(handle: @autoclosure () -> [UInt8]) -> Inode? {
        guard marks > 0 else { return nil }
        return marking.withLock { $0.byHandle[handle()] }
    }

    /// Marks the file `fd` (of `inode`, a regular file) unless it is open for writing through
    /// kernel passthrough. `point`: the read point from which its attributes may be kept long
    /// (read them again after it), nil when it is not marked; `ended`: the generation the bound
    /// ended (the kernel must forget the attributes it keeps of its nodes), if it was reached.
    func watch(_ inode: Inode, fd: Int32) -> (point: UInt64?, ended: UInt32?) {
        let descriptor = group.load(ordering: .acquiring)
        guard descriptor >= 0 else { return (nil, nil) }
        if covers(inode) { return (inode.markedAt.load(ordering: .acquiring), nil) }
        guard let handle = BackingWatch.handle(of: fd) else { return (nil, nil) }
        var ended: UInt32?
        let watched = marking.withLock { state -> UInt64? in
            // Checked under the lock an open's removal takes: a writer through the mount that
            // began before is seen here; one after removes this mark.
            guard inode.kernelWriters.load(ordering: .relaxed) == 0 else { return nil }
            if marks >= Self.markLimit {
                // All go, and the kernel forgets what it kept long of them (the caller).
                let current = generation.load(ordering: .relaxed)
                ended = current
                setMarks(0)
                state = Marking()
                generation.store(current &+ 1 == 0 ? 1 : current &+ 1, ordering: .releasing)
                _ = cfs_fanotify_remove_inode_marks(descriptor)
            }
            guard cfs_fanotify_watch_writes(descriptor, fd, 1) == 0 else { return nil }
            // A file marked already in this generation (its node forgotten, and looked up anew)
            // has one mark, whatever nodes named it.
            if let earlier = state.byHandle.updateValue(inode, forKey: handle) {
                if earlier.id != inode.id { state.handles[earlier.id] = nil }
            } else {
                setMarks(marks + 1)
            }
            state.handles[inode.id] = handle
            let point = marksMade.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
            inode.markedAt.store(point, ordering: .releasing)
            inode.markGeneration.store(generation.load(ordering: .relaxed), ordering: .releasing)
            return point
        }
        return (watched, ended)
    }

    /// Unmarks the file `fd` of `inode`, about to be written through kernel passthrough
    /// (counted in its `kernelWriters` already): whether it was marked, in this generation or
    /// one a renewal is ending (the kernel must forget the attributes it may keep long).
    func unwatch(_ inode: Inode, fd: Int32) -> Bool {
        // Always under the lock (no check before it): a GETATTR that read no writer and is
        // marking now is either done, and seen here, or sees this writer.
        guard group.load(ordering: .relaxed) >= 0 else { return false }
        return marking.withLock { state -> Bool in
            let marked = inode.markGeneration.exchange(0, ordering: .acquiring)
            guard marked != 0 else { return false }
            if marked == generation.load(ordering: .relaxed) {
                let descriptor = group.load(ordering: .acquiring)
                if descriptor >= 0 { _ = cfs_fanotify_watch_writes(descriptor, fd, 0) }
                if let handle = state.handles.removeValue(forKey: inode.id) { state.byHandle[handle] = nil }
                setMarks(marks - 1)
            }
            return true
        }
    }
}
