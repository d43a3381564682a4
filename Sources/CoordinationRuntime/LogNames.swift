import Coordination
import Foundation
import LinuxSystem

extension CoordinatorIdentity {
    /// As a log line names a coordinator: "pid 42 (vim)" for a process's (its command read now,
    /// while it runs), else the identity itself ("purpose:…", "host:…").
    package var logName: String {
        guard let pid = process else { return description }
        return "pid \(pid)" + (ProcFile.command(of: pid).map { " (\($0))" } ?? "")
    }
}

extension Duration {
    /// As a log line gives a time: seconds to a tenth ("5.0 s"), not `description`'s nine
    /// decimals of a measured wait.
    package var logText: String {
        let (seconds, attoseconds) = components
        return String(format: "%.1f s", Double(seconds) + Double(attoseconds) / 1e18)
    }
}
