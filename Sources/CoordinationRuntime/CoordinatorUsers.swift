import LinuxSystem
import Coordination
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The user a coordinator acts for: across users coordination is a lease, and a presenter's
/// veto counts only for its own user's accesses (docs/sharing.md).
package enum CoordinatorUsers {
    /// The filesystem uid of the coordinator's process; a coordinator of this very process
    /// (`.object`, `.purpose`), this process's user; nil when its process has gone.
    package static func user(of identity: CoordinatorIdentity) -> uid_t? {
        guard let process = identity.process else { return geteuid() }
        return ProcFile.statusFields(["Uid"], of: process)?["Uid"].flatMap(filesystemUser)
    }

    /// The filesystem uid of a /proc/PID/status `Uid:` value (real, effective, saved, filesystem).
    package static func filesystemUser(_ uids: String) -> uid_t? {
        let fields = uids.split(whereSeparator: { $0 == " " || $0 == "\t" })
        return fields.count >= 4 ? uid_t(fields[3]) : nil
    }

    /// Whether a refusal by a presenter of `presenter` fails an access of `accessor`: it is the
    /// accessor's own user's, or root's. Another user's is ignored (and reported).
    package static func mayVeto(_ presenter: CoordinatorIdentity, _ accessor: CoordinatorIdentity) -> Bool {
        guard let owner = user(of: presenter) else { return false }
        return owner == 0 || owner == user(of: accessor)
    }
}

/// Whose refusals are vetoes: a choice for whoever runs the server (docs/sharing.md).
public enum VetoScope: String, Sendable, CaseIterable {
    /// A presenter's refusal fails the accesses of its own user; root's fail anyone's. Another
    /// user's refusal is reported and ignored: read permission must not be enough to stop
    /// someone else's work.
    case ownUser = "own-user"
    /// Any presenter's refusal fails any access, as among one user's processes: for a mount
    /// whose users trust each other.
    case anyone
}
