import LinuxSystem
import CoordinationRuntime
import CLinux
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Thread id → the caller's process, remembered for a second: a thread id is not reused that
/// fast, and metadata-heavy programs make thousands of calls a second.
///
/// Reading /proc/TID/status at a new process's first call is dear, most of it the kernel making
/// the new process's /proc entries, and every `cat` a shell loop or a build runs would pay it
/// again. Most callers are a process's first thread, and then two system calls say enough
/// (`isProcessOfItsOwn`). /proc is read for the others (another thread of a process, a kernel
/// thread, a process outside every process group) and for a process's parent, which is wanted
/// only while a `coordfs coordinate` lends its holds.
enum ProcessInfoCache {
    private struct Entry {
        let caller: ProcFile.Caller
        let read: Int64
        /// Read from /proc: `caller.parent` is known.
        let knowsParent: Bool
    }

    private static let cache = Mutex<[pid_t: Entry]>([:])

    /// The last answer of each worker thread: one program's calls land on every worker in turn,
    /// and a hit here touches nothing another thread writes.
    private struct LastAnswer {
        var tid: pid_t = 0
        var entry: Entry?
    }

    private static let lastAnswer = ThreadLocal { LastAnswer() }

    /// `now` is `coarseMilliseconds()`.
    static func caller(of tid: pid_t, now: Int64) -> ProcFile.Caller {
        let remembered = lastAnswer.withValue { last -> ProcFile.Caller? in
            guard last.tid == tid, let entry = last.entry, now - entry.read < 1000 else { return nil }
            return entry.caller
        }
        if let remembered { return remembered }
        // A thread gone already: its own id stands for its process.
        let entry =
            cachedEntry(of: tid, now: now, wantsParent: false)
            ?? Entry(caller: ProcFile.Caller(process: tid, isKernelThread: false), read: now, knowsParent: false)
        lastAnswer.withValue { $0 = LastAnswer(tid: tid, entry: entry) }
        return entry.caller
    }

    /// The parent of `process`, from the same memory (a process's first thread has its id):
    /// while a `coordfs coordinate` lends its hold to its descendants, every call walks the
    /// caller's ancestors, and reading /proc for each of them on every call would cost far more
    /// than the call. Leaves each worker's last answer alone.
    static func parent(of process: pid_t, now: Int64) -> pid_t? {
        guard let parent = cachedEntry(of: process, now: now, wantsParent: true)?.caller.parent, parent > 0 else {
            return nil
        }
        return parent
    }

    /// Whether `tid` is a process's first thread, and not one of the kernel's own: then it is
    /// the process, told without reading /proc. Kernel threads are in no process group (0);
    /// so is a process that never joined one, which is then only read from /proc. False for a
    /// thread that is gone.
    static func isProcessOfItsOwn(_ tid: pid_t) -> Bool {
        cfs_thread_leads_its_process(tid) != 0 && getpgid(tid) > 0
    }

    /// `tid`'s entry, remembered for a second; nil when the thread is gone.
    private static func cachedEntry(of tid: pid_t, now: Int64, wantsParent: Bool) -> Entry? {
        if let known = cache.withLock({ $0[tid] }), now - known.read < 1000, known.knowsParent || !wantsParent {
            return known
        }
        let entry: Entry
        if !wantsParent && isProcessOfItsOwn(tid) {
            entry = Entry(caller: ProcFile.Caller(process: tid, isKernelThread: false), read: now, knowsParent: false)
        } else {
            guard let caller = ProcFile.caller(of: tid) else { return nil }
            entry = Entry(caller: caller, read: now, knowsParent: true)
        }
        cache.withLock { cache in
            if cache.count > 4096 { cache.removeAll(keepingCapacity: true) }
            cache[tid] = entry
        }
        return entry
    }
}
