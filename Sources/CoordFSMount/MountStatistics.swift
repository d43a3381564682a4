import LinuxSystem
import Foundation
import Synchronization

/// What the mount has coordinated: for `coordfs status`, the soak run, and diagnosis. Answered
/// as JSON in the mount root's `user.coordfs.stats` attribute.
final class MountStatistics: Sendable {
    /// Every coordinated request adds to it: striped by CPU.
    let coordinated = StripedCounter()
    /// Those that passed one of the engine's quiet gates (`MountCoordinator.coordinate`, `forTheCall`).
    let passedQuietly = StripedCounter()
    /// Those among them that passed beside files held open, by their names' gates (`NameGates`).
    let passedBesideOpenFiles = StripedCounter()
    /// Claims ended unused and taken again: their items had moved before they held them
    /// (`MountCoordinator.movedBeforeHeld`).
    let takenAgain = Atomic<Int>(0)
    /// Setattrs made by the process that holds the file open for writing, taken as part of that
    /// access instead of as a write of their own (`Filesystem.setattr`).
    let coveredByOwnOpen = Atomic<Int>(0)
    /// Requests of a process whose open of the item went ahead by a break, let go ahead at once
    /// too (`BrokenOpens`) instead of waiting the break time again.
    let coveredByBrokenOpen = Atomic<Int>(0)
    let waited = Atomic<Int>(0)
    /// Changes made behind the mount, told to presenters (`BackingWatch`), and whether the
    /// mount watches for them.
    let changesBehind = Atomic<Int>(0)
    let watchesBacking = Atomic<Bool>(false)
    /// The nice value libfuse's workers run at (`MountSession.run`).
    let workerNice = Atomic<Int32>(0)
    /// Directories marked by a watch of one mark per directory (0 with a filesystem's mark).
    let watchedDirectories = Atomic<Int>(0)
    let timedOut = Atomic<Int>(0)
    let deadlocks = Atomic<Int>(0)
    let interrupted = Atomic<Int>(0)
    let wouldBlock = Atomic<Int>(0)
    let refusedByPresenters = Atomic<Int>(0)
    let presenterTimeouts = Atomic<Int>(0)
    /// FLUSH requests: none for opens told they need none (`Filesystem.sendsNoFlush`).
    let flushes = Atomic<Int>(0)
    /// Writes the mount synced before it answered, which the kernel follows with no FSYNC:
    /// to direct_io opens, asking for O_DSYNC or O_SYNC their backing descriptor does not give
    /// (`OpenFile.syncOwedToDirectWrites`), and under `sync` fallocates, copy_file_range's
    /// outputs and O_TRUNC opens (`Filesystem.syncData`).
    let syncedWrites = Atomic<Int>(0)
    /// Directories fsynced after a change of names in them, under `dirsync` (`Filesystem.syncNames`).
    let syncedDirectories = Atomic<Int>(0)
    /// Files and directories fsynced after a change of their attributes, under `sync`
    /// (`Filesystem.syncAttributes`).
    let syncedAttributes = Atomic<Int>(0)
    /// FORGET and BATCH_FORGET requests, and the items they named: with FUSE over io_uring
    /// many items to a request (`Filesystem.forgetRequestServed`).
    let forgetRequests = Atomic<Int>(0)
    let forgotten = Atomic<Int>(0)
    /// Times the kernel was made to forget every name at once (`Filesystem.invalidateEverything`).
    let allNamesForgotten = Atomic<Int>(0)
    /// GETATTR requests: the kernel asked for attributes it did not keep (their time ran out, or
    /// it was told to forget them).
    let attributeRequests = StripedCounter()
    /// Files marked for their writes behind the mount (`WatchedWrites`) in this generation of
    /// marks; a file removed since still counts until the next.
    let filesWatchedForWrites = Atomic<Int>(0)
    /// Lookups answered from a node already known, with one fstatat (`InodeTable.knownChild`).
    let knownLookups = Atomic<Int>(0)
    /// Those fstatats that found an item not known (or known without a descriptor): a call
    /// spent for nothing. After one, lookups in that directory open at once (`childrenAreKnown`).
    let knownLookupMisses = Atomic<Int>(0)
    /// Writes through open files refused (EIO) on a host of a shared store: its lease may have
    /// ended, or the file's item may have been another host's since it was opened
    /// (`MountCoordinator.admitsWrite`); and write opens refused so at their grant.
    let fencedWrites = Atomic<Int>(0)
    /// Reads through open files refused (EIO) so (`MountCoordinator.admitsRead`).
    let fencedReads = Atomic<Int>(0)
    /// Requests of an accessor refused (EIO) so: its hold's item may have been another host's
    /// since the hold was granted (`MountCoordinator.holdLostItsCover`).
    let fencedAccessorRequests = Atomic<Int>(0)

    /// A number that moves with every request of the kernel's counted here, and every change
    /// behind the mount: the mount's work, for a trim once it stops (`IdleTrim.whenQuiet`).
    /// Reads and writes are not counted: they allocate next to nothing.
    var work: Int {
        coordinated.value + attributeRequests.value + knownLookups.load(ordering: .relaxed)
            + knownLookupMisses.load(ordering: .relaxed) + forgetRequests.load(ordering: .relaxed)
            + flushes.load(ordering: .relaxed) + changesBehind.load(ordering: .relaxed)
    }

    /// Counts a refused or failed coordination by its errno.
    func count(_ errno: Errno) {
        switch errno.code {
        case EBUSY: timedOut.add(1, ordering: .relaxed)
        case EDEADLK: deadlocks.add(1, ordering: .relaxed)
        case EINTR: interrupted.add(1, ordering: .relaxed)
        case EAGAIN: wouldBlock.add(1, ordering: .relaxed)
        default: refusedByPresenters.add(1, ordering: .relaxed)
        }
    }

    var json: String {
        let fields: [(String, Int)] = [
            ("coordinated", coordinated.value), ("passed_quietly", passedQuietly.value),
            ("passed_beside_open_files", passedBesideOpenFiles.value),
            ("taken_again", takenAgain.load(ordering: .relaxed)),
            ("covered_by_own_open", coveredByOwnOpen.load(ordering: .relaxed)),
            ("covered_by_broken_open", coveredByBrokenOpen.load(ordering: .relaxed)),
            ("waited", waited.load(ordering: .relaxed)), ("changes_behind", changesBehind.load(ordering: .relaxed)),
            ("watches_backing", watchesBacking.load(ordering: .relaxed) ? 1 : 0),
            ("watched_directories", watchedDirectories.load(ordering: .relaxed)),
            ("timed_out", timedOut.load(ordering: .relaxed)), ("deadlocks", deadlocks.load(ordering: .relaxed)),
            ("interrupted", interrupted.load(ordering: .relaxed)), ("would_block", wouldBlock.load(ordering: .relaxed)),
            ("refused_by_presenters", refusedByPresenters.load(ordering: .relaxed)),
            ("presenter_timeouts", presenterTimeouts.load(ordering: .relaxed)),
            ("flushes", flushes.load(ordering: .relaxed)), ("synced_writes", syncedWrites.load(ordering: .relaxed)),
            ("synced_directories", syncedDirectories.load(ordering: .relaxed)),
            ("synced_attributes", syncedAttributes.load(ordering: .relaxed)),
            ("forget_requests", forgetRequests.load(ordering: .relaxed)),
            ("forgotten", forgotten.load(ordering: .relaxed)),
            ("all_names_forgotten", allNamesForgotten.load(ordering: .relaxed)),
            ("known_lookups", knownLookups.load(ordering: .relaxed)),
            ("attribute_requests", attributeRequests.value),
            ("files_watched_for_writes", filesWatchedForWrites.load(ordering: .relaxed)),
            ("known_lookup_misses", knownLookupMisses.load(ordering: .relaxed)),
            ("fenced_writes", fencedWrites.load(ordering: .relaxed)),
            ("fenced_reads", fencedReads.load(ordering: .relaxed)),
            ("fenced_accessor_requests", fencedAccessorRequests.load(ordering: .relaxed))
        ]
        return "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }
}
