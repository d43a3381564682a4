import CoordinationClient
import CoordinationWire
import Foundation
import Synchronization

/// A turn that was not the command's alone: an access went ahead past the hold (a BROKEN event:
/// another user's after the mount's lock or break time, or one stuck in the kernel behind the
/// command's own call), or on a host of a shared store the hold lost its cover (the release's
/// `cover_lost`). What the command did stands, but another may have read or
/// changed the items meanwhile; a script counting turns must not count this one as whole.
extension Coordinate {
    /// The exit status of a command that succeeded in such a turn: sysexits' EX_TEMPFAIL, a
    /// failure worth trying again.
    static let brokenTurnStatus: Int32 = 75

    /// The first item whose coordination broke while the hold was held, from the connection's
    /// events (it carries one hold, so every BROKEN of it is that hold's).
    final class BreakWatch: Sendable {
        let item = Mutex<String?>(nil)

        init(_ client: ControlClient) {
            client.onEvent { [self] record in
                guard record.wd == 0, record.mask.contains(.broken) else { return }
                item.withLock { $0 = $0 ?? record.path }
            }
        }
    }

    /// The status to exit with once the hold is released (`released`: the release's reply),
    /// having said on standard error why it is not the command's own.
    static func status(_ status: Int32, afterRelease released: [String: WireValue]?, _ breaks: BreakWatch) -> Int32 {
        let why: String
        if let item = breaks.item.withLock({ $0 }) {
            why =
                "an access to '\(item)' went ahead past the hold while the command ran (another user's, after the mount's lock or break time, or a call the command's own had left stuck in the kernel): the items may have been read or changed meanwhile"
        } else if case .string(let item)? = released?["cover_lost"] {
            why =
                "the hold of '\(item)' lost its cover while the command ran (this host's lease of the shared store may have ended, or another host took the item at the break time): another host may have had it meanwhile"
        } else {
            return status
        }
        FileHandle.standardError.write(Data("coordfs coordinate: \(why)\n".utf8))
        return status == 0 ? brokenTurnStatus : status
    }
}
