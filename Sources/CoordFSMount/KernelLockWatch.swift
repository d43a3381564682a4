import CoordinationServer
import FileCoordination
import Foundation
import Logging
import Synchronization

/// Watches the requests that wait in the mount while the kernel holds a lock for them.
///
/// The kernel locks a directory before it sends a request that changes a name in it (create,
/// mkdir, link, unlink, rmdir, rename: the parent's `i_rwsem`, and a rename or unlink the
/// victim's too), and an inode before a setattr; it keeps the lock until the reply. A request
/// that waits there for a holder keeps the holder from every name in that directory: the atomic
/// save that ends an editor's coordinated write (a temporary file beside the item, renamed over
/// it) blocks in the kernel before the mount ever sees it, and both would wait out the wait
/// timeout. No reply can give the lock back and still make the caller wait, so the request
/// stops waiting as soon as a process it waits for is seen stuck on a kernel lock (a thread in
/// uninterruptible sleep in a path or inode operation, twice in a row): it goes ahead as if it
/// had come first, and presenters are told what it did (`AccessClaim.breakThrough`).
final class KernelLockWatch: @unchecked Sendable {
    private let condition = NSCondition()
    private var watched: [UInt: AccessClaim] = [:]
    /// Processes seen stuck at the last look: a second look confirms.
    private var suspects: Set<Int32> = []
    private var running = false
    private let logger: Logger
    /// Requests that went ahead.
    let breaks = Atomic<Int>(0)
    static let interval: useconds_t = 20_000

    init(logger: Logger) { self.logger = logger }

    /// Watches `claim`, waiting under kernel locks, until `forget(number)`.
    func watch(_ number: UInt, _ claim: AccessClaim) {
        condition.lock()
        watched[number] = claim
        if !running {
            running = true
            let thread = Thread { [self] in loop() }
            thread.name = "coordfs kernel-lock watch"
            thread.start()
        }
        condition.unlock()
    }

    func forget(_ number: UInt) {
        condition.lock()
        watched[number] = nil
        condition.unlock()
    }

    /// Runs while anything is watched; a new thread starts with the next request that waits.
    private func loop() {
        while true {
            usleep(Self.interval)
            condition.lock()
            if watched.isEmpty {
                running = false
                suspects = []
                condition.unlock()
                return
            }
            let claims = watched
            let previous = suspects
            condition.unlock()
            var stuckNow: Set<Int32> = []
            var broken: [(UInt, Int32)] = []
            var looked: [Int32: Bool] = [:]
            for (number, claim) in claims {
                for process in claim.awaitedProcesses {
                    let stuck = looked[process] ?? Self.isStuckOnKernelLock(process)
                    looked[process] = stuck
                    guard stuck else { continue }
                    stuckNow.insert(process)
                    if previous.contains(process) {
                        broken.append((number, process))
                        claim.breakThrough()
                        break
                    }
                }
            }
            condition.lock()
            suspects = stuckNow
            for (number, _) in broken { watched[number] = nil }
            condition.unlock()
            breaks.add(broken.count, ordering: .relaxed)
            for (_, process) in broken {
                logger.notice("a request waiting under a kernel lock went ahead: process \(process), which it waited for, is blocked in the kernel, most likely on that lock")
            }
        }
    }

    /// Kernel functions a task sleeps in, uninterruptibly, while it waits for a directory's or
    /// an inode's lock on its way through a path or into a file (as /proc/TID/wchan names them).
    private static let lockWaits = ["path_openat", "filename_create", "lookup_slow", "open_last_lookups", "do_unlinkat",
                                    "do_rmdir", "lock_rename", "do_renameat2", "vfs_", "fuse_", "do_truncate", "chmod_common",
                                    "chown_common", "utimes_common", "rwsem_", "down_"]

    /// Whether a thread of `process` sleeps uninterruptibly where lock waits sleep.
    static func isStuckOnKernelLock(_ process: Int32) -> Bool {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process)/task") else { return false }
        for task in tasks {
            guard let stat = ProcFile.read("/proc/\(process)/task/\(task)/stat"),
                  let close = stat.lastIndex(of: ")") else { continue }
            // "PID (comm) S ...": the state follows the command, which may hold anything.
            let state = stat[stat.index(after: close)...].dropFirst().first
            guard state == "D", let wchan = ProcFile.read("/proc/\(process)/task/\(task)/wchan") else { continue }
            if lockWaits.contains(where: { wchan.hasPrefix($0) }) { return true }
        }
        return false
    }
}
