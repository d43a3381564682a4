import LinuxSystem
import Synchronization

/// At most a few log lines of one kind a second: a burst (waiters giving up together, a
/// presenter refusing everything, requests failing with a lost lease) must not flood the log.
package final class LogAllowance: Sendable {
    private let perSecond: Int
    /// The second lines were last allowed in, and how many.
    private let spent = Mutex<(second: Int64, count: Int)>((0, 0))

    package init(perSecond: Int = 10) { self.perSecond = perSecond }

    /// Whether one more line may be logged now.
    package func allows() -> Bool {
        let second = coarseMilliseconds() / 1000
        return spent.withLock { spent -> Bool in
            if spent.second != second { spent = (second, 0) }
            spent.count += 1
            return spent.count <= perSecond
        }
    }
}
