import LinuxSystem
import CoordinationRuntime
import Foundation
import Synchronization

// @unchecked Sendable: immutable but for atomics and the directory stream its owner reads.
/// An open file or directory of the mount: its backing descriptor and the intent it holds for
/// the life of the open (docs/mount.md).
final class OpenFile: @unchecked Sendable {
    let fd: Int32
    let inode: Inode
    /// What the open holds until its release (nothing for an open nobody coordinates).
    let claim: OpenClaim
    /// Whether anything was written through it: its release then tells presenters.
    let written = Atomic<Bool>(false)
    /// Whether it was created by this open (for the notification at release).
    let created: Bool
    /// Size and times at the open of a writable open served by kernel passthrough: its writes
    /// never reach the mount, so its release compares the file with these.
    let atOpen: stat?
    /// Directory streams for readdir, opened lazily.
    var directory: OpaquePointer?
    /// For a writable open where versions are kept: who its writer counts as among readers
    /// (`MountVersions.reader`), who has seen what it leaves at its release. Set before the
    /// open is inserted in the table.
    var versionReader: Int64?
    /// The process a coordinated write open was granted to (0 for any other open), counted in
    /// its inode's `writers` from the open to the release.
    let writer: Int32
    /// For an open served as the kernel's direct_io, the O_DSYNC and O_SYNC bits its backing
    /// descriptor was opened without; 0 for any other open. A write asks for them (RWF_DSYNC,
    /// a `sync` mount) in its flags, and after a direct_io write the kernel sends no FSYNC,
    /// as it does after a buffered one: the mount syncs before it answers.
    let syncOwedToDirectWrites: Int32
    /// A writable open that kernel passthrough may serve (counted in `Inode.kernelWriters`).
    let writesThroughTheKernel: Bool
    /// A write open without O_TRUNC or O_APPEND: a writer in place (U2), whose ftruncate is one
    /// more write in place.
    let writesInPlace: Bool
    /// For such an open, the process that opened it (its thread group, as fanotify names it):
    /// the writes and the close of the backing file that it makes are the mount's.
    let kernelWriter: Int32
    /// Its place in its user's share of open files (`OpenFileBudget`), given back at release.
    fileprivate(set) var place = OpenFileBudget.Place(user: nil)
    /// For an open that went ahead by a break, holding nothing: its entry in `BrokenOpens`,
    /// taken out at release. Set before the open is inserted in the table.
    var brokenOpen: (process: Int32, token: UInt64)?
    /// A coordinated appending open (U1), counted in its inode's `appenders` from the open to
    /// the release.
    let appends: Bool
    /// For an open on a host of a shared store: its cover, which each write and read through
    /// it asks (`MountCoordinator.admitsWrite`, `admitsRead`). Set before the open is inserted
    /// in the table.
    var cover: OpenCover?

    /// `directIO`: served as the kernel's direct_io; `flags`: those `fd` was opened with;
    /// `opener`: the opening process (`Filesystem.openingProcess`), for a writable open;
    /// `appends`: a coordinated appending open, counted in `Inode.appenders`.
    init(
        fd: Int32, inode: Inode, created: Bool, passthrough: Bool = false, writes: Bool = false,
        writer: Int32 = 0, opener: Int32 = 0, directIO: Bool = false, flags: Int32 = 0, appends: Bool = false,
        claim: OpenClaim = OpenClaim(held: nil)
    ) {
        self.fd = fd
        self.inode = inode
        self.claim = claim
        self.created = created
        self.writer = writer
        self.appends = appends
        if appends { inode.appenders.add(1, ordering: .relaxed) }
        syncOwedToDirectWrites = directIO ? (O_SYNC | O_DSYNC) & ~flags : 0
        if writer != 0 { inode.beganWriting(by: writer) }
        writesThroughTheKernel = passthrough && writes
        writesInPlace = writes && flags & (O_TRUNC | O_APPEND) == 0
        kernelWriter = writesThroughTheKernel ? opener : 0
        if writesThroughTheKernel { inode.beganWritingThroughTheKernel(by: kernelWriter) }
        var info = stat()
        // A created file is reported as new whatever was written: nothing to compare.
        atOpen = passthrough && writes && !created && fstat(fd, &info) == 0 ? info : nil
    }

    /// Whether the file changed since the open, as far as the mount can tell.
    func changed(now: stat?) -> Bool {
        if written.load(ordering: .relaxed) { return true }
        guard let before = atOpen else { return false }
        guard let now else { return true }
        return before.st_size != now.st_size || before.st_mtim.tv_sec != now.st_mtim.tv_sec
            || before.st_mtim.tv_nsec != now.st_mtim.tv_nsec || before.st_ctim.tv_sec != now.st_ctim.tv_sec
            || before.st_ctim.tv_nsec != now.st_ctim.tv_nsec
    }
}

/// An open's cover on a host of a shared store (`MountCoordinator.admitsWrite`, `admitsRead`):
/// the stamp of its grant (`HostDelegations.stampWrites`, `stampReads`), moved on as the losses
/// of cover since are judged not to reach its item, and whether one did: fenced, its writes and
/// reads are refused until it is closed.
final class OpenCover: Sendable {
    let stamp: Atomic<UInt64>
    let fenced: Atomic<Bool>

    /// `stamp`: nil when the host did not cover the open's writes as it was granted.
    init(stamp: UInt64?) {
        self.stamp = Atomic(stamp ?? 0)
        fenced = Atomic(stamp == nil)
    }
}

/// A process writing an inode through kernel passthrough: its opens, and when its last open
/// ended (coarse milliseconds).
struct KernelWriterProcess {
    var opens = 0
    var ended: Int64 = 0

    /// Known for `lateClose` after its last open ended, not longer.
    func isLate(now: Int64) -> Bool { opens == 0 && now - ended >= Inode.lateClose }
}

/// The processes writing an inode through kernel passthrough (`Inode.kernelWriterProcesses`):
/// the first kept inline, a dictionary only for others beside it. Most files have one writer at
/// a time, and a dictionary made at every create and freed again cost more than it was used.
struct KernelWriterProcesses {
    private var first: (process: Int32, writer: KernelWriterProcess)?
    private var others: [Int32: KernelWriterProcess] = [:]

    /// `process` began an open `now`.
    mutating func began(_ process: Int32, now: Int64) {
        if let lone = first, lone.process != process, lone.writer.isLate(now: now) { first = nil }
        if var lone = first, lone.process == process {
            lone.writer.opens += 1
            first = lone
        } else if first == nil && others[process] == nil {
            first = (process, KernelWriterProcess(opens: 1))
        } else {
            others[process, default: KernelWriterProcess()].opens += 1
        }
    }

    /// `process` ended an open `now`; the processes known longer than `lateClose` are forgotten.
    mutating func ended(_ process: Int32, now: Int64) {
        if var lone = first, lone.process == process {
            lone.writer.opens -= 1
            lone.writer.ended = now
            first = lone
        } else if var writer = others[process] {
            writer.opens -= 1
            writer.ended = now
            others[process] = writer
        }
        if let lone = first, lone.writer.isLate(now: now) { first = nil }
        if !others.isEmpty, others.values.contains(where: { $0.isLate(now: now) }) {
            others = others.filter { !$0.value.isLate(now: now) }
        }
    }

    /// Whether `process` has an open now, or ended its last one less than `lateClose` ago; one
    /// known longer is forgotten.
    mutating func has(_ process: Int32, now: Int64) -> Bool {
        if let lone = first, lone.process == process {
            if lone.writer.isLate(now: now) { first = nil }
            return first != nil
        }
        guard let writer = others[process] else { return false }
        if writer.isLate(now: now) {
            others[process] = nil
            if others.isEmpty { others = [:] }  // its storage goes too
            return false
        }
        return true
    }
}

extension Inode {
    /// How long after a process's last release what fanotify reports of its writing (its
    /// closes) still counts as the mount's: the kernel reports a close after the release, not
    /// always once in the writer's process (a save's file was seen closed by it again after its
    /// close had been read), and the watch may read them late, or merged into one.
    static let lateClose: Int64 = 2000

    /// A writable open served by kernel passthrough begins, made by `process`.
    func beganWritingThroughTheKernel(by process: Int32) {
        let now = coarseMilliseconds()
        kernelWriterProcesses.withLock { $0.began(process, now: now) }
        kernelWriters.add(1, ordering: .relaxed)
    }

    /// One ends. Its process stays known for `lateClose`; those known longer are forgotten.
    func endedWritingThroughTheKernel(by process: Int32) {
        let now = coarseMilliseconds()
        kernelWriterProcesses.withLock { $0.ended(process, now: now) }
        kernelWriters.subtract(1, ordering: .relaxed)
    }

    /// Whether a write or a close that fanotify reports on the backing file, made by `process`,
    /// is one the kernel served for an open through the mount: `process` has such an open, or
    /// ended its last one less than `lateClose` ago; one known longer is forgotten. Another
    /// process's change is from outside, whenever it comes.
    func isWrittenThroughTheKernel(by process: Int32) -> Bool {
        let now = coarseMilliseconds()
        return kernelWriterProcesses.withLock { $0.has(process, now: now) }
    }

    /// A coordinated write open of it, granted to `process`, begins.
    func beganWriting(by process: Int32) {
        let mine = UInt32(bitPattern: process)
        var current = writers.load(ordering: .relaxed)
        // The first, or one more of the sole writer's own: the count and the owner in one step.
        while current == 0 || (current >> 32 != 0 && UInt32(truncatingIfNeeded: current) == mine) {
            let next = ((current >> 32) + 1) << 32 | UInt64(mine)
            let (exchanged, original) = writers.compareExchange(
                expected: current, desired: next, ordering: .acquiringAndReleasing)
            if exchanged { return }
            current = original
        }
        // Beside another process's (writers in place, or an open let past a break): who writes
        // is kept in `sharedWriters`, changed with the count under its lock.
        sharedWriters.withLock { table in
            var current = writers.load(ordering: .relaxed)
            while true {
                let count = current >> 32, owner = UInt32(truncatingIfNeeded: current)
                let alone = count == 0 || owner == mine
                let next = (count + 1) << 32 | UInt64(alone ? mine : 0)
                let (exchanged, original) = writers.compareExchange(
                    expected: current, desired: next, ordering: .acquiringAndReleasing)
                if !exchanged { current = original; continue }
                if alone { return }
                if owner != 0 { table[Int32(bitPattern: owner), default: 0] += Int(count) }
                table[process, default: 0] += 1
                return
            }
        }
    }

    /// One of them, granted to `process`, ends.
    func endedWriting(by process: Int32) {
        let mine = UInt32(bitPattern: process)
        var current = writers.load(ordering: .relaxed)
        while current >> 32 != 0 && UInt32(truncatingIfNeeded: current) == mine {
            let count = current >> 32
            let next = count <= 1 ? 0 : (count - 1) << 32 | UInt64(mine)
            let (exchanged, original) = writers.compareExchange(
                expected: current, desired: next, ordering: .acquiringAndReleasing)
            if exchanged { return }
            current = original
        }
        sharedWriters.withLock { table in
            var current = writers.load(ordering: .relaxed)
            while true {
                let count = current >> 32
                let next = count <= 1 ? 0 : (count - 1) << 32 | (current & 0xFFFF_FFFF)
                let (exchanged, original) = writers.compareExchange(
                    expected: current, desired: next, ordering: .acquiringAndReleasing)
                if !exchanged { current = original; continue }
                if next == 0 {
                    table = [:]  // its storage goes too
                } else if let opens = table[process] {
                    table[process] = opens > 1 ? opens - 1 : nil
                }
                return
            }
        }
    }

    /// Whether it is open for writing, through coordinated opens, by `process` alone.
    func isWritten(onlyBy process: Int32) -> Bool {
        let current = writers.load(ordering: .acquiring)
        return current >> 32 != 0 && UInt32(truncatingIfNeeded: current) == UInt32(bitPattern: process)
    }

    /// Whether `process` has a coordinated write open of it, alone or beside other processes'.
    func isWritten(by process: Int32) -> Bool {
        let current = writers.load(ordering: .acquiring)
        guard current >> 32 != 0 else { return false }
        let owner = UInt32(truncatingIfNeeded: current)
        if owner != 0 { return owner == UInt32(bitPattern: process) }
        return sharedWriters.withLock { $0[process] != nil }
    }
}

/// Open files by handle: the handle the kernel hands back is the retained `OpenFile` itself, so
/// a read or a write finds its file with no lock and no lookup. The kernel keeps a handle valid
/// from the open's reply until its release.
final class OpenFileTable: Sendable {
    /// Each user's share of open files.
    let budget: OpenFileBudget

    init(budget: OpenFileBudget) { self.budget = budget }

    /// Enters `file`, open in `place` of its user's share (`budget.take`).
    func insert(_ file: OpenFile, in place: OpenFileBudget.Place) -> UInt64 {
        file.place = place
        return UInt64(UInt(bitPattern: Unmanaged.passRetained(file).toOpaque()))
    }

    subscript(handle: UInt64) -> OpenFile? {
        guard let pointer = UnsafeRawPointer(bitPattern: UInt(handle)) else { return nil }
        return Unmanaged<OpenFile>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// Ends the handle (at release): the file is the caller's from now on.
    func remove(_ handle: UInt64) -> OpenFile? {
        guard let pointer = UnsafeRawPointer(bitPattern: UInt(handle)) else { return nil }
        let file = Unmanaged<OpenFile>.fromOpaque(pointer).takeRetainedValue()
        budget.giveBack(file.place)
        return file
    }

    /// Files open now: the places taken in the budget (an open being made counts from its place).
    var count: Int { budget.openNow }
}
