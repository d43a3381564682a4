#if canImport(Glibc)
import LinuxSystem
import Glibc
#endif

/// The open-file limit the mount lives within, and the share of it kept for inode descriptors.
///
/// Many systems start programs with a soft limit of 1024 descriptors while allowing far more:
/// a mount that keeps the soft limit runs out after a thousand items of a tree and answers
/// EMFILE. The daemon raises its soft limit to the hard one, and sizes the budget to it.
public enum DescriptorLimit {
    /// The inode descriptors a mount keeps by default, where the limit allows.
    public static let defaultBudget = 12_000

    /// Raises the soft limit to the hard one; returns the soft limit now in force.
    @discardableResult
    public static func raise() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return limit.rlim_cur >= rlim_t(Int.max) ? Int.max : Int(limit.rlim_cur)
    }

    /// Grows the process's descriptor table at once to hold `count` descriptors. The kernel
    /// doubles the table whenever a new descriptor does not fit, and in a process with threads
    /// each doubling waits for an RCU grace period: the first walk of a big tree through the
    /// mount would stall at every doubling, the whole mount waiting on the table lock. The table
    /// never shrinks again; 16 384 slots take 128 KiB.
    public static func reserveTable(for count: Int, duplicating descriptor: Int32) {
        // A copy of `descriptor` at the lowest free number from count - 1 up (nothing is
        // replaced), let go at once.
        let probe = fcntl(descriptor, F_DUPFD_CLOEXEC, Int32(clamping: count - 1))
        if probe >= 0 { close(probe) }
    }

    /// The most inode descriptors a budget may ask for under `limit`: a tenth stays for open
    /// files, sockets and the daemon's own.
    public static func largestBudget(under limit: Int) -> Int { limit - limit / 10 }

    /// Why a budget, named `subject` for the reader, is refused under `limit`.
    public static func refusal(of subject: String, under limit: Int) -> String {
        "\(subject) is more than the open-file limit allows (at most \(largestBudget(under: limit)) of \(limit))"
    }

    /// `explicit`, or the default scaled down to three fifths of `limit` when that is lower
    /// (the rest is for files open through the mount). Nil when `explicit` asks for more than
    /// `largestBudget(under:)`.
    public static func budget(_ explicit: Int?, under limit: Int) -> Int? {
        if let explicit { return explicit <= largestBudget(under: limit) ? explicit : nil }
        return max(16, min(defaultBudget, limit / 5 * 3))
    }

    /// Each user's share of open files by default (users other than the mount's owner and root):
    /// a quarter of what the inode descriptors leave of `limit`, so that no one user can take
    /// the room every other user's opens need (2000 under a limit of 20 000).
    public static func openFilesPerUser(under limit: Int, inodeBudget: Int) -> Int {
        max(16, (limit - inodeBudget) / 4)
    }
}
