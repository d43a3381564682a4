#if canImport(Glibc)
import Glibc
#endif

/// The open-file limit the mount lives within, and the share of it kept for inode descriptors.
///
/// Many systems start programs with a soft limit of 1024 descriptors while allowing far more:
/// a mount that kept the soft limit ran out after a thousand items of a tree and answered
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

    /// The most inode descriptors a budget may ask for under `limit`: a tenth stays for open
    /// files, sockets and the daemon's own.
    public static func largestBudget(under limit: Int) -> Int { limit - limit / 10 }

    /// `explicit`, or the default scaled down to three fifths of `limit` when that is lower
    /// (the rest is for files open through the mount). Nil when `explicit` asks for more than
    /// `largestBudget(under:)`.
    public static func budget(_ explicit: Int?, under limit: Int) -> Int? {
        if let explicit { return explicit <= largestBudget(under: limit) ? explicit : nil }
        return max(16, min(defaultBudget, limit / 5 * 3))
    }
}
