import LinuxSystem
import CLinux
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Closes the descriptors the budget evicts, on a thread of its own that runs away from the CPU
/// of the request that evicted them.
///
/// An eviction closes many descriptors at once, and the last descriptor of a file deleted behind
/// the mount's back frees the file's blocks as it closes, which takes long for a big file: no
/// request waits for that. Nor may the closes run on the request's CPU: a worker woken from there
/// is put there, and the request's caller would wait behind the closes.
final class DescriptorCloser: Sendable {
    static let shared = DescriptorCloser()

    private struct Batch {
        let descriptors: [Int32]
        let evictedOn: Int32
    }

    private let pending = Mutex<[Batch]>([])
    private let wake = DispatchSemaphore(value: 0)

    private init() {
        Thread.start(named: "coordfs-closer") { [self] in run() }
    }

    /// Closes `descriptors` soon, away from `cpu` (the calling thread's).
    func close(_ descriptors: [Int32], awayFrom cpu: Int32 = cfs_current_cpu()) {
        guard !descriptors.isEmpty else { return }
        let batch = Batch(descriptors: descriptors, evictedOn: cpu)
        pending.withLock { $0.append(batch) }
        wake.signal()
    }

    /// Closes what is waiting to be closed here and now, on the calling thread: for a call that
    /// failed for want of descriptors, before it tries again.
    func closePending() {
        let batches = pending.withLock { batches -> [Batch] in
            defer { batches = [] }
            return batches
        }
        for batch in batches { for fd in batch.descriptors { Glibc.close(fd) } }
    }

    private func run() {
        // It took the CPUs of the thread that started it (which may be pinned): they are set
        // per batch, before the first.
        var avoided: Int32 = -2
        while true {
            wake.wait()
            let batches = pending.withLock { batches -> [Batch] in
                defer { batches = [] }
                return batches
            }
            for batch in batches {
                if batch.evictedOn != avoided {
                    _ = cfs_run_away_from_cpu(batch.evictedOn)
                    avoided = batch.evictedOn
                }
                for fd in batch.descriptors { Glibc.close(fd) }
            }
        }
    }
}
