import LinuxSystem
import Foundation

/// The kernel's FUSE request timeout (Linux 6.15 and later): when one is in force and a request
/// outlives it, the kernel aborts the whole connection, and every program on the mount gets
/// ENOTCONN. A coordinated wait happens inside a request, so every wait must end safely before.
public struct KernelRequestTimeout: Sendable, Equatable {
    /// The timeout this mount's requests get, in seconds.
    public let seconds: Int

    public static let sysctlDirectory = "/proc/sys/fs/fuse"

    /// The kernel checks requests this often, and never sets a timeout below it.
    static let checkInterval = 15

    /// The timeout in force for a mount that asks for none (libfuse 3.14 asks for none), as the
    /// kernel sets it: the default, capped by the maximum, or the maximum alone, and never below
    /// its check interval. Nil when neither is set (0) or the kernel has neither.
    public static func inForce(directory: String = sysctlDirectory) -> KernelRequestTimeout? {
        func read(_ name: String) -> Int {
            Int(
                (try? String(contentsOfFile: directory + "/" + name, encoding: .utf8))?.trimmingCharacters(
                    in: .whitespacesAndNewlines) ?? "") ?? 0
        }
        let (fallback, maximum) = (read("default_request_timeout"), read("max_request_timeout"))
        guard let timeout = [fallback, maximum].filter({ $0 > 0 }).min() else { return nil }
        return KernelRequestTimeout(seconds: max(timeout, checkInterval))
    }

    /// How long waits inside one request may take in all, a second (or a fifth) short of the
    /// timeout: the kernel aborts no request early.
    public var waitBudget: Duration {
        let margin = max(0.2 * Double(seconds), 1)
        return .milliseconds(Int64(max(Double(seconds) - margin, 0.2) * 1000))
    }
}

extension MountConfiguration {
    /// Fits the waits of a request inside the kernel's request timeout, when one is in force:
    /// the wait for holders takes at most three fifths of the budget and the wait for presenters
    /// the rest; the break time ends a little before the wait for holders, so that a lease is
    /// broken rather than the request failed. Returns what it did, to be said at mount, or nil.
    public mutating func fitWaits(within timeout: KernelRequestTimeout?) -> String? {
        guard let timeout else { return nil }
        let budget = timeout.waitBudget
        let forHolders = budget * 3 / 5, forPresenters = budget * 2 / 5
        waitTimeout = min(waitTimeout ?? forHolders, forHolders)
        presenterTimeout = min(presenterTimeout, forPresenters)
        breakTime = min(breakTime ?? forHolders, forHolders * 4 / 5)
        lockTime = lockTime.map { min($0, forHolders * 4 / 5) }
        // A lock request asks no presenter: it may wait the whole budget.
        lockWaitLimit = min(lockWaitLimit ?? budget, budget)
        return
            "the kernel aborts FUSE requests that take longer than \(timeout.seconds) s (fs.fuse.default_request_timeout, "
            + "max_request_timeout): a request waits at most \(waitTimeout!) for others and \(presenterTimeout) for presenters, "
            + "then fails with EBUSY"
    }
}
