/// Why the engine refused or ended a request. Presenter errors are not here: the engine never
/// talks to presenters; its caller does, and fails the access with the presenter's own error.
public enum CoordinationError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The waiting call was cancelled (C13).
    case cancelled
    /// The wait outlasted its timeout (X5).
    case timedOut
    /// Waiting would close a cycle of coordinators waiting on each other (X1).
    case deadlock(cycle: [CoordinatorIdentity])
    /// The request was non-blocking and conflicts with a holder.
    case wouldBlock
    /// The coordinator's session ended (its process died) while the request waited (X4).
    case ownerGone
    /// Reporting a move outside a coordinated write (C24), or with a grant that has ended.
    case notInsideWrite
    /// The request itself is malformed: no intents, several writing options, a bad name.
    case invalidRequest(String)
    /// No registration with that identifier.
    case unknownRegistration
    /// Its caller stopped the wait to go ahead without the intents: the holders it waited for
    /// needed something the caller itself holds (a kernel lock) to finish.
    case brokenThrough

    public var description: String {
        switch self {
        case .cancelled: return "coordination was cancelled"
        case .timedOut: return "timed out waiting for coordinated access"
        case .deadlock(let cycle):
            return "waiting would deadlock: " + cycle.map(\.description).joined(separator: " -> ")
        case .wouldBlock: return "the item is held by another coordinator"
        case .ownerGone: return "the coordinator went away while waiting"
        case .notInsideWrite: return "a move can be reported only inside a coordinated write"
        case .invalidRequest(let why): return "invalid coordination request: \(why)"
        case .unknownRegistration: return "no such registration"
        case .brokenThrough: return "the wait was broken through: the holders needed what the waiter held"
        }
    }
}
